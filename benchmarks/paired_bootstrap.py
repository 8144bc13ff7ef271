"""Experiment: is one system's BLEU on a split better than another's, or noise?

Paired bootstrap resampling (Koehn 2004, as ``sacrebleu --paired-bs`` runs it) over the
distinct inputs of a split, with tablegen's BLEU (``tablegen_tf.metrics.text_metrics``:
sacrebleu, 13a, lowercased, every reference of an input). The first system is the
baseline; each other is compared with it: its BLEU, the mean and 95 % interval of its
resampled BLEU, and sacrebleu's p-value that the difference is chance (two-sided: a low p
with a lower BLEU means significantly worse; the verdict column reads "better" only for a
higher BLEU at p below the threshold). Hypothesis files hold one
line per distinct input in input order: what `tablegen evaluate --output` writes for the
same --format / --input / --split / --selection-fraction.

    .venv/bin/python benchmarks/paired_bootstrap.py --format e2e-aligned \\
        --input ../shared/data/e2e/aligned --split train --selection-fraction 0.05 \\
        baseline.txt candidate.txt [more.txt ...]

Selection on a carved split of a few hundred inputs moves BLEU by about a point between
near-equal systems. The rule the README's quality runs follow: a candidate beats the baseline
when p < alpha / m for m candidates (Bonferroni: with 4 candidates at alpha 0.05, p < 0.0125);
otherwise it is a tie, and a tie keeps the cheaper system.

``--min-fields N`` compares on the inputs whose tables hold at least N distinct fields only
(E2E's test tables are larger than train's and dev's: 6.9 attributes on average).
"""

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def examples(format_name: str, path: str, split: str, selection_fraction: float, run: str = None):
    """The split's distinct inputs, built as `tablegen evaluate` builds them (with references)."""
    sys.path.insert(0, ROOT)
    from tablegen_tf import inference
    from tablegen_tf.config import load_run_config
    from tablegen_tf.tokenizer import TokenizerConfig

    tokenizer = load_run_config(run).tokenizer if run else TokenizerConfig()
    raws, _ = inference.read_inputs(format_name, path, split, selection_fraction)
    return inference.build(raws, tokenizer, needs_text=True)[0]


def read_hypotheses(path: str, count: int):
    """One line per input; exits naming the file when the count does not match."""
    with open(path, encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    if len(lines) != count:
        sys.exit(f"{path}: {len(lines)} lines for {count} inputs (write it with `tablegen evaluate "
                 f"--output` on the same --format/--input/--split/--selection-fraction)")
    return lines


def table_size(example) -> int:
    """Distinct fields of a table: E2E's attribute count (its records repeat a field per token)."""
    return len(set(example.fields))


def compare(systems, refs, samples: int, seed: int):
    """systems: [(name, hypotheses)], the baseline first -> sacrebleu's paired results."""
    from sacrebleu.significance import PairedTest

    from tablegen_tf.metrics.text_metrics import bleu_metric, reference_streams

    os.environ["SACREBLEU_SEED"] = str(seed)  # read by PairedTest(): reproducible resamples
    test = PairedTest(systems, {"BLEU": bleu_metric(lowercase=True)}, reference_streams(refs),
                      test_type="bs", n_samples=samples)
    return test()[1]["BLEU"]


def add_input_arguments(parser: argparse.ArgumentParser) -> None:
    """The split the hypothesis files answer, named as `tablegen evaluate` names it."""
    parser.add_argument("--format", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--split", default=None)
    parser.add_argument("--selection-fraction", type=float, default=0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_input_arguments(parser)
    parser.add_argument("--model", default=None, help="a run directory: its tokenizer settings (as evaluate)")
    parser.add_argument("--samples", type=int, default=1000, help="bootstrap resamples")
    parser.add_argument("--seed", type=int, default=12345)
    parser.add_argument("--alpha", type=float, default=0.05, help="family-wise significance level")
    parser.add_argument("--min-fields", type=int, default=0,
                        help="compare on the inputs whose tables hold at least this many distinct fields")
    parser.add_argument("hypotheses", nargs="+", help="the baseline's file first, then the candidates'")
    args = parser.parse_args()
    if len(args.hypotheses) < 2:
        parser.error("pass a baseline and at least one candidate")
    inputs = examples(args.format, args.input, args.split, args.selection_fraction, args.model)
    refs = [example.all_references() for example in inputs]
    kept = [table_size(example) >= args.min_fields for example in inputs]
    systems = []
    for path in args.hypotheses:
        lines = read_hypotheses(path, len(refs))
        systems.append((path, [line for line, keep in zip(lines, kept) if keep]))
    refs = [ref for ref, keep in zip(refs, kept) if keep]
    if not refs:
        sys.exit(f"no input has a table of at least {args.min_fields} fields (--min-fields)")
    scope = f" with >= {args.min_fields} fields" if args.min_fields else ""
    print(f"{len(refs)} inputs{scope}, {args.samples} paired bootstrap resamples, baseline {systems[0][0]}\n")
    threshold = args.alpha / (len(systems) - 1)
    print(f"| system | BLEU | resampled mean (95 % interval) | p (the difference is chance) | "
          f"p < {threshold:.4g} (alpha {args.alpha} / {len(systems) - 1}) |")
    print("|---|---|---|---|---|")
    results = compare(systems, refs, args.samples, args.seed)
    for (name, _), result in zip(systems, results):
        p = "" if result.p_value is None else f"{result.p_value:.4f}"
        spread = "" if result.mean is None else (f"{result.mean:.2f} ({result.mean - result.ci:.2f} - "
                                                 f"{result.mean + result.ci:.2f})")
        print(f"| {name} | {result.score:.2f} | {spread} | {p} | {verdict(result, results[0], threshold)} |")


def verdict(result, baseline, threshold: float) -> str:
    if result is baseline:
        return "baseline"
    if result.score <= baseline.score:
        return "not better"
    return "better" if result.p_value < threshold else "tie"


if __name__ == "__main__":
    from quiet import run_quietly

    run_quietly(main)
