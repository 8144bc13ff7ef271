#!/usr/bin/env bash
# Own virtualenv for the peer benchmark: OpenNMT-py 3.5.1 on CPU PyTorch, never in .venv.
#   benchmarks/peers/setup_opennmt.sh     -> benchmarks/peers/.venv (gitignored), ~2 minutes
# Idempotent: a stamp holding this script's hash skips the work when nothing changed.
#
# OpenNMT-py 3.5.1 pins torch<2.3; this host serves a CPU build of torch 2.13.0 (any
# other version pulls GB of CUDA wheels), so: torch first, OpenNMT-py with --no-deps,
# then the dependencies its import of train/translate needs, pinned. Left out on purpose
# (not used for LSTM training/translation): ctranslate2 (CTranslate2 export),
# tensorboard (-tensorboard logging), flask + waitress (onmt_server).
# spacy, fasttext-wheel, pyahocorasick, rapidfuzz stay in: onmt.transforms imports every
# transform module (terminology, clean, inlinetags, fuzzymatch) at import time.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${PEER_VENV:-$HERE/.venv}"
PYTHON="${PYTHON:-python3.11}"
STAMP="$VENV/.opennmt-setup-stamp"
HASH="$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-16)"
PEER_DEPS=(
  numpy==2.4.6 configargparse==1.9.0 pyyaml==6.0.4 six==1.17.0 pyonmttok==1.38.1
  sacrebleu==2.6.0 rapidfuzz==3.14.6 pyahocorasick==2.3.1 fasttext-wheel==0.9.2 spacy==3.8.18
)

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$HASH" ]] && "$VENV/bin/python" -c "import onmt.bin.train" 2>/dev/null; then
  echo "[peers] $VENV is up to date"
  exit 0
fi
echo "[peers] building $VENV (OpenNMT-py 3.5.1, CPU torch 2.13.0)"
[[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
# pip's notes about the local index and about the peer's unmet pins (above) are expected.
pip_install() {
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$@" 2>&1 \
    | { grep -v -e "is ignored: it is neither" -e "dependency resolver does not" -e "^opennmt-py 3.5.1 requires" || true; }
}
pip_install torch==2.13.0
pip_install --no-deps opennmt-py==3.5.1
pip_install "${PEER_DEPS[@]}"
"$VENV/bin/python" -c "import torch, onmt.bin.train, onmt.bin.translate; print('[peers] torch', torch.__version__, 'onmt', onmt.__version__)" 2>&1 | grep '^\[peers\]'
echo "$HASH" > "$STAMP"
