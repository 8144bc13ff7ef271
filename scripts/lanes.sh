# Sourced by the quality-run scripts: members trained side by side, one TF thread each, so a
# member's weights do not depend on the host's core count (README "E2E quality run").
LANES=${LANES:-$(nproc)}

descendants() { local child; for child in $(pgrep -P "$1"); do descendants "$child"; echo "$child"; done; }
stop_lanes() { local lane; for lane in $(jobs -p); do kill $(descendants "$lane") "$lane" 2>/dev/null || true; done; }
trap stop_lanes EXIT  # a failed lane (or any error) stops the other lanes' training too

one_thread() {  # CORE COMMAND...: COMMAND with one TF thread, pinned to CORE where taskset exists
  local core=$(( $1 % $(nproc) )); shift
  local pin=(); command -v taskset >/dev/null && pin=(taskset -c "$core")
  TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=1 "${pin[@]}" "$@"
}
