#!/usr/bin/env bash
# One-command install of the tablegen development/CI environment:
#   ./scripts/setup.sh            -> .venv/ (Python 3.11) with the pinned stack + the project (editable)
#   ./scripts/setup.sh --clean    -> same, but rebuild .venv and the patched wheels from scratch
#
# Idempotent: when .venv was completed from the same inputs (stamp = hash of the
# requirement files, pyproject.toml and these scripts) and the self-check passes,
# it does nothing else. Otherwise pip brings the existing .venv up to date.
#
# Env overrides: PYTHON (interpreter to build the venv from, default python3.11).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="$ROOT/.venv"
VPY="$VENV/bin/python"
CACHE="$ROOT/.cache"
WHEELHOUSE="$CACHE/wheelhouse"
STAMP="$VENV/.tablegen-setup-stamp"
PYTHON="${PYTHON:-python3.11}"
PIP_VERSION=26.0.1          # pinned for a reproducible resolve (the venv's bundled pip is older)
MIN_NATIVE_GLIBC=2.39       # ml-metadata / TFDV 1.21 wheels on PyPI are manylinux_2_39 only
MIN_COMPAT_GLIBC=2.34       # the patched wheels still need GLIBC_2.34 for real

START=$SECONDS
log() { printf '[setup %s +%ss] %s\n' "$(date +%H:%M:%S)" "$((SECONDS - START))" "$*"; }
die() { log "ERROR: $*" >&2; exit 1; }
ver_ge() { [[ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n1)" == "$2" ]]; }   # $1 >= $2

CLEAN=0
for arg in "$@"; do
  case "$arg" in
    --clean) CLEAN=1 ;;
    -h|--help) sed -n '2,10p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) die "unknown argument: $arg (try --help)" ;;
  esac
done

# pip options for every install: quiet progress bars in CI logs, never prompt.
PIP_OPTS=(--disable-pip-version-check --no-input)
[[ -t 1 ]] || PIP_OPTS+=(--progress-bar off)
pip_install() { "$VPY" -m pip install "${PIP_OPTS[@]}" "$@"; }

# --- 0. what are we building, on what host --------------------------------------
command -v "$PYTHON" >/dev/null || die "$PYTHON not found (set PYTHON=/path/to/python3.11)"
glibc="$( (getconf GNU_LIBC_VERSION 2>/dev/null || ldd --version 2>/dev/null | head -n1) | grep -oE '[0-9]+\.[0-9]+' | head -n1 || true)"
if [[ -n "$glibc" ]] && ! ver_ge "$glibc" "$MIN_NATIVE_GLIBC"; then
  ver_ge "$glibc" "$MIN_COMPAT_GLIBC" || die "glibc $glibc is too old (need >= $MIN_COMPAT_GLIBC)"
  NEED_COMPAT=1
else
  NEED_COMPAT=0
fi
log "host: $(uname -m), glibc ${glibc:-unknown}, $("$PYTHON" --version 2>&1) -> glibc workaround: $([[ $NEED_COMPAT == 1 ]] && echo yes || echo no)"

# --- 0b. the browser of the try-it page's test (serving/static; tests/real_model_serving_test.py):
# Debian's chromium + chromium-driver, never a browser download at run time. As root only
# (CI); elsewhere the test says how to install them and skips.
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    log "installing chromium + chromium-driver (apt) for the browser test"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends chromium chromium-driver fonts-liberation >/dev/null
  else
    log "chromium/chromedriver missing and not root: the browser test will skip (apt-get install chromium chromium-driver)"
  fi
fi

inputs_hash="$( { cat requirements.txt requirements-nodeps.txt pyproject.toml scripts/setup.sh scripts/glibc_compat/*.{py,sh,cc};
                  echo "$glibc $NEED_COMPAT"; "$PYTHON" --version 2>&1; } | sha256sum | cut -d' ' -f1)"

# --- 1. fast path: complete venv from identical inputs ---------------------------
if [[ $CLEAN == 0 && -x "$VPY" && -f "$STAMP" && "$(cat "$STAMP")" == "$inputs_hash" ]]; then
  log ".venv is up to date (stamp matches); running self-check"
  if "$VPY" scripts/self_check.py; then
    log "nothing to do (${SECONDS}s)"
    exit 0
  fi
  log "self-check failed on an up-to-date .venv: reinstalling"
fi

# --- 2. the venv itself ----------------------------------------------------------
if [[ $CLEAN == 1 ]]; then
  log "--clean: removing .venv and .cache"
  rm -rf "$VENV" "$CACHE"
fi
VENV_CREATED=0
if [[ -x "$VPY" ]] && "$VPY" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
  log "reusing existing .venv (pip will bring it up to date)"
else
  [[ -e "$VENV" ]] && log "existing .venv is broken or not Python 3.11: recreating"
  rm -rf "$VENV"
  log "creating .venv with $PYTHON"
  "$PYTHON" -m venv "$VENV"
  VENV_CREATED=1
fi
rm -f "$STAMP"   # only written back once everything below has succeeded
pip_install -q "pip==$PIP_VERSION"

# --- 3. patched wheels for old glibc ----------------------------------------------
FIND_LINKS=()
if [[ $NEED_COMPAT == 1 ]]; then
  # The pins come from requirements.txt so there is one source of truth.
  mapfile -t COMPAT_SPECS < <(grep -ioE '^(ml-metadata|tensorflow-data-validation)==[^[:space:]#]+' requirements.txt)
  [[ ${#COMPAT_SPECS[@]} == 2 ]] || die "requirements.txt must pin ml-metadata and tensorflow-data-validation with =="
  log "glibc $glibc < $MIN_NATIVE_GLIBC: building patched wheels for ${COMPAT_SPECS[*]}"
  scripts/glibc_compat/build_wheelhouse.sh "$VPY" "$WHEELHOUSE" "${COMPAT_SPECS[@]}"
  FIND_LINKS=(--find-links "$WHEELHOUSE")
fi

# --- 4. the stack, in ONE resolve ---------------------------------------------------
# --only-binary for the two packages: never fall back to building them from sdist
# (hours of Bazel) if the patched wheels were missing.
log "installing requirements.txt (one pip resolve; tensorflow alone is a ~570 MB download)"
pip_install ${FIND_LINKS[@]+"${FIND_LINKS[@]}"} --only-binary=ml-metadata,tensorflow-data-validation -r requirements.txt

if [[ $NEED_COMPAT == 1 ]]; then
  # pip keeps an installed ml-metadata==1.21.0 even if the wheelhouse now holds a
  # re-patched build of the same version: reinstall when the wheels changed since
  # this venv last got them (a no-op on a fresh venv and on re-runs).
  wheels_id="$(sha256sum "$WHEELHOUSE"/*.whl | sha256sum | cut -d' ' -f1)"
  if [[ "$(cat "$VENV/.tablegen-compat-wheels" 2>/dev/null || true)" != "$wheels_id" ]]; then
    if [[ $VENV_CREATED == 0 ]]; then
      log "patched wheels changed: reinstalling ${COMPAT_SPECS[*]} from the wheelhouse"
      pip_install -q --no-deps --force-reinstall --no-index --find-links "$WHEELHOUSE" "${COMPAT_SPECS[@]}"
    fi
    echo "$wheels_id" > "$VENV/.tablegen-compat-wheels"
  fi
fi

log "installing requirements-nodeps.txt with --no-deps (see comment in that file)"
pip_install --no-deps -r requirements-nodeps.txt

log "installing the project itself (editable, --no-deps)"
pip_install -q --no-deps -e .

# --- 5. consistency: pip check may only report the known tensorflow-serving-api pin
log "pip check"
check_out="$("$VPY" -m pip check --disable-pip-version-check 2>/dev/null || true)"
unexpected="$(grep -vE '^tfx-bsl [^ ]+ has requirement tensorflow-serving-api|^No broken requirements' <<<"$check_out" || true)"
[[ -z "$unexpected" ]] || die "pip check found unexpected problems:
$unexpected"
log "pip check: only the expected tfx-bsl -> tensorflow-serving-api<2.20 complaint"

# --- 6. self-check, then stamp ------------------------------------------------------
log "running self-check (imports TF/TFX/Beam, MLMD SQLite store, TFDV C++ ops)"
"$VPY" scripts/self_check.py || die "self-check failed"
echo "$inputs_hash" > "$STAMP"
log "done in $((SECONDS - START))s: activate with 'source .venv/bin/activate' or use .venv/bin/python"
