#!/usr/bin/env bash
# The E2E quality run (README "E2E quality run"), one command: the mixed ensemble chosen on
# the carved selection split (order planning, Sha et al. 2018: a 128-unit model, a 256-unit
# model and a 256-unit model on cleaned tables, one vocabulary, 6,000 steps each), decoded
# with beam 5, the slot end gate (penalty 3), slot reranking W 20 and minimum Bayes risk
# (M 50 against 64 samples of the ensemble; README "Minimum Bayes risk against samples").
#
#   scripts/e2e_quality_run.sh [RUNS_DIR]        # default runs; DATA=../shared/data
#   SEED=2 scripts/e2e_quality_run.sh runs/seed2  # another draw of the recipe (members *-s2)
#
# Each member trains with ONE thread, so its weights are the same on any host whatever its
# core count, and the members train side by side, one per core (LANES, default the host's
# cores): on 2 cores the 128-unit then the cleaned member on one, the 256-unit member on the
# other, ~30 min of training on a quiet 2-core host (one after another with every core: ~43;
# benchmarks/parallel_members.py). Each member's lines are prefixed with its name; its full
# log is RUNS_DIR/<member>/logs/train.log.
#
# Prints the selection split's scores (what every choice was made on), then dev's (reported
# only), and exports one SavedModel to RUNS_DIR/serving/e2e/<version>. A rerun skips the
# finished steps: prepared data is kept, and `tablegen train` resumes from its checkpoints.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-runs}
D=${DATA:-../shared/data}
T=.venv/bin/tablegen
SEED=${SEED:-1}
SELECTION="--format e2e-aligned --input $D/e2e/aligned --split train --selection-fraction 0.05"

prepare() {  # OUTPUT [--clean-slots]
  [ -f "$1/metadata.json" ] || $T prepare $SELECTION --output "$@"
}
source scripts/lanes.sh  # LANES, one_thread, stop_lanes on exit

train() {  # NAME CORE TRAIN_DIR [--set ...]: one thread, pinned to CORE where taskset exists
  local name=$1 core=$2 data=$3; shift 3
  one_thread "$core" $T train --config e2e,experiments/e2e_order_planning --set train.seed="$SEED" "$@" \
      --train "$data" --valid "$RUNS/data/e2e-sel/selection" --out "$RUNS/$name" 2>&1 | sed -u "s/^/[$name] /"
}
# The members' vocabulary: the plain training split's (an ensemble averages distributions
# over one vocabulary; the cleaned member's own split would count words differently).
VOCAB="$RUNS/data/e2e-sel/train/vocab"
op128() { train "op128-s$SEED" "$1" "$RUNS/data/e2e-sel/train"; }
op256() { train "op256-s$SEED" "$1" "$RUNS/data/e2e-sel/train" --set model.hidden_size=256; }
# 256 units: it replaced a 128-unit cleaned member on 2026-11-29 (README, "A 256-unit cleaned member").
op256c() { train "op256c-s$SEED" "$1" "$RUNS/data/e2e-clean/train" --set model.hidden_size=256 --set data.vocab="$VOCAB"; }

prepare "$RUNS/data/e2e-sel/train"
prepare "$RUNS/data/e2e-clean/train" --clean-slots
started=$SECONDS
# One thread makes the weights independent of the core count, not of the CPU type (README,
# "The recipe on another CPU type"): say which one drew them.
cpu=$(lscpu 2>/dev/null || true)
echo "== host: $(nproc) cores, $(sed -n 's/^Model name: *//p' <<<"$cpu" | head -1), CPU family $(sed -n 's/^CPU family: *//p' <<<"$cpu" | head -1)"
echo "== training the 3 members, $LANES at a time (one thread each)"
if [ "$LANES" -ge 3 ]; then
  op128 0 & a=$!; op256 1 & b=$!; op256c 2 & c=$!; wait $a; wait $b; wait $c
elif [ "$LANES" -eq 2 ]; then  # the two lanes are about even: 128 + cleaned 256 against 256
  { op128 0 && op256c 0; } & a=$!; op256 1 & b=$!; wait $a; wait $b
else
  op128 0; op256 0; op256c 0
fi
echo "== members trained in $(( (SECONDS - started) / 60 ))m$(( (SECONDS - started) % 60 ))s"

E="--model $RUNS/op128-s$SEED --ensemble $RUNS/op256-s$SEED $RUNS/op256c-s$SEED --beam-size 5 --slot-rerank-weight 20 --slot-end-penalty 3 --mbr-weight 50 --mbr-samples 64 --mbr-epsilon 0.005"
echo "== selection split (257 MRs carved out of train; every choice was made on it)"
$T evaluate $E $SELECTION
echo "== dev (547 MRs; reported, never selected on)"
$T evaluate $E --format e2e --input "$D/e2e/devset.csv" --output "$RUNS/e2e-quality/dev.txt"
$T export $E --serving-base "$RUNS/serving" --model-name e2e
