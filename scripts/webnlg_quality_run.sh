#!/usr/bin/env bash
# The WebNLG quality run (README "WebNLG quality run"), one command: order planning with copy
# and hybrid attention (Sha et al. 2018; tablegen_tf/configs/webnlg.yaml), trained on every
# reference of the carved train split for a step budget (STEPS, default 3,600), validated
# greedily on the carved selection split (339 entries) every 300 steps; the best checkpoint by
# selection BLEU is kept. Decoded with webnlg.yaml's beam 15, length penalty 1.0 and coverage
# reranking W 2, chosen on the selection split.
#
#   scripts/webnlg_quality_run.sh [RUNS_DIR]         # default runs; DATA=../shared/data
#   STEPS=4500 scripts/webnlg_quality_run.sh runs    # a larger budget resumes a finished run
#
# Training uses THREADS threads (default 1: the weights then do not depend on the core count,
# as in scripts/e2e_quality_run.sh); the full log is RUNS_DIR/webnlg/logs/train.log.
# Prints the selection split's scores (what every choice was made on), then dev's (reported
# only), and exports one SavedModel to RUNS_DIR/serving/webnlg/<version>. A rerun skips the
# finished steps: prepared data is kept, and `tablegen train` resumes from its checkpoints.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-runs}
D=${DATA:-../shared/data}
T=.venv/bin/tablegen
STEPS=${STEPS:-3600}
THREADS=${THREADS:-1}
SELECTION="--format webnlg --input $D/webnlg/train --split train --selection-fraction 0.05"
# webnlg.yaml's decoding; training validates greedily (cheap), so evaluate and export restore it.
W="--beam-size 15 --length-penalty 1.0 --coverage-rerank-weight 2"

[ -f "$RUNS/data/webnlg-sel/train/metadata.json" ] ||
  $T prepare $SELECTION --output "$RUNS/data/webnlg-sel/train"
started=$SECONDS
echo "== training to $STEPS steps ($THREADS thread(s))"
TF_NUM_INTRAOP_THREADS=$THREADS TF_NUM_INTEROP_THREADS=$THREADS \
  $T train --config webnlg --set model.fused_loop=true --set decode.beam_size=1 \
    --train "$RUNS/data/webnlg-sel/train" --valid "$RUNS/data/webnlg-sel/selection" \
    --out "$RUNS/webnlg" --max-steps "$STEPS"
echo "== trained in $(( (SECONDS - started) / 60 ))m$(( (SECONDS - started) % 60 ))s"

echo "== selection split (339 entries carved out of train; every choice was made on it)"
$T evaluate --model "$RUNS/webnlg" $W $SELECTION
echo "== dev (872 entries; reported, never selected on)"
$T evaluate --model "$RUNS/webnlg" $W --format webnlg --input "$D/webnlg/dev" --output "$RUNS/webnlg-quality/dev.txt"
$T export --model "$RUNS/webnlg" $W --serving-base "$RUNS/serving" --model-name webnlg
