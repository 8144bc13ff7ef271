#!/usr/bin/env bash
# The E2E quality run (README "E2E quality run"), one command: the mixed ensemble chosen on
# the carved selection split (order planning, Sha et al. 2018: a 128-unit model, a 256-unit
# model and a 256-unit model on cleaned tables, one vocabulary, 6,000 steps each, ~43 min of
# training on a quiet 2-core host), decoded with beam 5, the slot end gate (penalty 3) and
# slot reranking W 20.
#
#   scripts/e2e_quality_run.sh [RUNS_DIR]        # default runs; DATA=../shared/data
#
# Prints the selection split's scores (what every choice was made on), then dev's (reported
# only), and exports one SavedModel to RUNS_DIR/serving/e2e/<version>. A rerun skips the
# finished steps: prepared data is kept, and `tablegen train` resumes from its checkpoints.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-runs}
D=${DATA:-../shared/data}
T=.venv/bin/tablegen
SELECTION="--format e2e-aligned --input $D/e2e/aligned --split train --selection-fraction 0.05"

prepare() {  # OUTPUT [--clean-slots]
  [ -f "$1/metadata.json" ] || $T prepare $SELECTION --output "$@"
}
train() {  # NAME TRAIN_DIR [--set ...]
  local name=$1 data=$2; shift 2
  $T train --config e2e,experiments/e2e_order_planning --set train.seed=1 "$@" \
      --train "$data" --valid "$RUNS/data/e2e-sel/selection" --out "$RUNS/$name"
}

prepare "$RUNS/data/e2e-sel/train"
prepare "$RUNS/data/e2e-clean/train" --clean-slots
train op128-s1 "$RUNS/data/e2e-sel/train"
train op256-s1 "$RUNS/data/e2e-sel/train" --set model.hidden_size=256
# Same vocabulary as the plain members (an ensemble averages distributions over one vocabulary).
# 256 units: it replaced a 128-unit cleaned member on 2026-11-29 (README, "A 256-unit cleaned member").
train op256c-s1 "$RUNS/data/e2e-clean/train" --set model.hidden_size=256 --set data.vocab="$RUNS/op256-s1/vocab"

E="--model $RUNS/op128-s1 --ensemble $RUNS/op256-s1 $RUNS/op256c-s1 --beam-size 5 --slot-rerank-weight 20 --slot-end-penalty 3"
echo "== selection split (257 MRs carved out of train; every choice was made on it)"
$T evaluate $E $SELECTION
echo "== dev (547 MRs; reported, never selected on)"
$T evaluate $E --format e2e --input "$D/e2e/devset.csv" --output "$RUNS/e2e-quality/dev.txt"
$T export $E --serving-base "$RUNS/serving" --model-name e2e
