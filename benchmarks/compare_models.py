"""Experiment: encdec vs encdec-copy vs encdec-cs vs ncp on one corpus, same budget each.

Trains each model with `tablegen train` for the same wall-time budget, then runs
`tablegen evaluate` on the validation split and prints BLEU and the fact metrics.

    .venv/bin/python benchmarks/compare_models.py --minutes 5 --limit 1000
(default: RotoWire sentences; prepared records are made under runs/data/rw-sent if missing)
"""

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(ROOT, "..", "shared", "data", "rotowire", "sentences")
MODELS = ("encdec", "encdec-copy", "encdec-cs", "ncp")
COLUMNS = ("bleu", "rougeL", "fact_precision", "hallucination_rate", "cs_precision", "cs_recall", "content_ordering")


def tablegen(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "tablegen_cli.main", *args], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"tablegen {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    return proc.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0, help="training budget per model")
    parser.add_argument("--limit", type=int, default=1000, help="validation tables to score (0 = all)")
    parser.add_argument("--beam-size", type=int, default=1)
    parser.add_argument("--data", default=os.path.join(ROOT, "runs", "data", "rw-sent"))
    parser.add_argument("--runs", default=os.path.join(ROOT, "runs", "compare"))
    args = parser.parse_args()
    for split in ("train", "valid"):
        if not os.path.exists(os.path.join(args.data, split, "metadata.json")):
            tablegen("prepare", "--format", "rotowire-sentences", "--input", SHARED, "--split", split,
                     "--output", os.path.join(args.data, split))
    results = {}
    for name in MODELS:
        out = os.path.join(args.runs, name)
        tablegen("train", "--config", "rotowire_sentences", "--model", name, "--data", args.data, "--out", out,
                 "--max-minutes", str(args.minutes), "--no-progress", "--set", "train.eval_max_examples=300")
        report = tablegen("evaluate", "--model", out, "--format", "rotowire-sentences", "--input", SHARED,
                          "--split", "valid", "--limit", str(args.limit), "--beam-size", str(args.beam_size))
        results[name] = json.loads(report[report.index("{"):])
        print(name, json.dumps({k: results[name].get(k) for k in COLUMNS}), flush=True)
    print(f"\nRotoWire sentences valid (first {args.limit} tables), {args.minutes} min of training each, "
          f"beam {args.beam_size}")
    print("model        " + "  ".join(f"{c:>18s}" for c in COLUMNS))
    for name, scores in results.items():
        cells = ["" if scores.get(c) is None else f"{scores[c]:.4g}" for c in COLUMNS]
        print(f"{name:12s} " + "  ".join(f"{cell:>18s}" for cell in cells))


if __name__ == "__main__":
    main()
