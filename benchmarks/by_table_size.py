"""Experiment: a system's scores by table size, and its BLEU re-weighted to another size mix.

Larger tables score lower (E2E dev, the quality run: BLEU 80 at 3-4 attributes, 68.5 at 8),
and the E2E test set's tables are larger than dev's (6.9 attributes per MR against 6.3,
issue 18), so dev BLEU over-states what a model will score on test. This prints, per number
of distinct fields in the table, the inputs, BLEU (tablegen's: sacrebleu 13a, lowercased,
every reference), slot error rate, hallucination and words per text; then, with
--target-mean-size M, the BLEU of the same outputs with the inputs re-weighted to tables of M
fields on average: mean and 95 % interval of corpus BLEU over --samples resamples of the
inputs, each drawn with probability q(size) / (inputs of that size), where q has the shape of
the size mix `benchmarks/novel_tables.py` samples (the name, then each of the other --fields - 1
fields with one probability; sizes below --min-size dropped, as E2E has none), that probability
solved so that the mean after the drop is M. Sizes the split
lacks get no weight (their share is printed). Hypothesis files hold one line per distinct
input in input order, as `tablegen evaluate --output` writes them.

    .venv/bin/python benchmarks/by_table_size.py --format e2e --input ../shared/data/e2e/devset.csv \\
        --target-mean-size 6.9 runs/e2e-quality/dev.txt

Reporting only: re-weighting changes no choice (it uses the split's references, like the
corpus BLEU it refines). About a minute per file for the 547 dev MRs and 200 resamples.
"""

import argparse
import collections
import math
import os
import random
import statistics
import sys
from typing import Dict, List, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # tablegen_tf, when run as a script
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def size_mix(mean: float, fields: int, min_size: int) -> Dict[int, float]:
    """P(size) when a table holds its first field and each of the other FIELDS - 1 with the
    probability that makes the mean MEAN, renormalised over sizes >= MIN_SIZE."""
    keep = min(1.0, max(0.0, (mean - 1) / (fields - 1)))

    def mean_of(p: float) -> float:
        return sum(k * v for k, v in _mix(p, fields, min_size).items())

    # truncation below min_size raises the mean: search the probability that restores it
    low, high = 0.0, keep
    if mean_of(keep) > mean:
        for _ in range(60):
            mid = (low + high) / 2
            low, high = (mid, high) if mean_of(mid) < mean else (low, mid)
        keep = (low + high) / 2
    return _mix(keep, fields, min_size)


def _mix(keep: float, fields: int, min_size: int) -> Dict[int, float]:
    others = fields - 1
    raw = {k: math.comb(others, k - 1) * keep ** (k - 1) * (1 - keep) ** (others - k + 1)
           for k in range(max(1, min_size), fields + 1)}
    total = sum(raw.values())
    return {k: v / total for k, v in raw.items()}


def reweighted_bleu(hyps: Sequence[str], refs: Sequence[List[str]], sizes: Sequence[int],
                    mix: Dict[int, float], samples: int, seed: int):
    """(mean, low, high) of corpus BLEU over resamples drawn by mix[size] / count[size]."""
    from tablegen_tf.metrics.text_metrics import bleu_metric, reference_streams

    counts = collections.Counter(sizes)
    weights = [mix.get(s, 0.0) / counts[s] for s in sizes]
    rng, metric, scores = random.Random(seed), bleu_metric(lowercase=True), []
    for _ in range(samples):
        chosen = rng.choices(range(len(hyps)), weights=weights, k=len(hyps))
        scores.append(metric.corpus_score([hyps[i] for i in chosen],
                                          reference_streams([refs[i] for i in chosen])).score)
    scores.sort()
    tail = int(0.025 * samples)
    return statistics.mean(scores), scores[tail], scores[samples - 1 - tail]


def main() -> None:
    from novel_tables import scores
    from paired_bootstrap import add_input_arguments, examples as read_examples, table_size

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_input_arguments(parser)
    parser.add_argument("--target-mean-size", type=float, help="re-weight to tables of this many fields "
                        "on average (E2E test: 6.9)")
    parser.add_argument("--fields", type=int, default=8, help="fields a table can hold (E2E: 8)")
    parser.add_argument("--min-size", type=int, default=3, help="smallest table (E2E: 3)")
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("hypotheses", nargs="+")
    args = parser.parse_args()

    from tablegen_tf.metrics.text_metrics import bleu_metric, reference_streams

    examples = read_examples(args.format, args.input, args.split, args.selection_fraction)
    refs = [e.all_references() for e in examples]
    sizes = [table_size(e) for e in examples]
    groups = collections.defaultdict(list)
    for index, size in enumerate(sizes):
        groups[size].append(index)
    mix = size_mix(args.target_mean_size, args.fields, args.min_size) if args.target_mean_size else None
    for path in args.hypotheses:
        with open(path, encoding="utf-8") as handle:
            hyps = [line.rstrip("\n") for line in handle]
        if len(hyps) != len(examples):
            sys.exit(f"{path}: {len(hyps)} lines for {len(examples)} distinct inputs")
        print(f"{path}: {len(hyps)} inputs, {statistics.mean(sizes):.2f} fields per table")
        print(f"{'fields':>6} {'inputs':>6} {'BLEU':>6} {'SER %':>6} {'halluc. %':>9} {'words':>6}"
              + (f" {'weight':>6}" if mix else ""))
        for label, indices in [*sorted(groups.items()), ("all", range(len(hyps)))]:
            texts = [hyps[i] for i in indices]
            bleu = bleu_metric(lowercase=True).corpus_score(texts, reference_streams([refs[i] for i in indices]))
            table = scores(texts, [examples[i] for i in indices])  # slot errors, hallucination, words
            weight = f" {mix.get(label, 0.0):>6.3f}" if mix and label != "all" else ""
            print(f"{label:>6} {len(indices):>6} {bleu.score:>6.2f} {100 * table.get('slot_error_rate', 0):>6.2f} "
                  f"{100 * table['hallucination_rate']:>9.2f} {table['words']:>6.1f}{weight}")
        if mix:
            lacking = sum(v for k, v in mix.items() if k not in groups)
            mean, low, high = reweighted_bleu(hyps, refs, sizes, mix, args.samples, args.seed)
            print(f"BLEU re-weighted to {args.target_mean_size} fields per table: {mean:.2f} "
                  f"(95 % of {args.samples} resamples: {low:.2f}-{high:.2f})"
                  + (f"; {100 * lacking:.1f} % of the mix has sizes this split lacks" if lacking else ""))


if __name__ == "__main__":
    from quiet import run_quietly

    run_quietly(main)
