"""Experiment: slot errors on E2E tables that no split holds, as the held-out test's will be.

The E2E test set's MRs are attribute combinations seen nowhere else, with more attributes than
dev's (6.9 against 6.3 per MR, issue 18), and the selection split's slot error rate has run
about 5x below dev's. Slot errors need no reference text, so this samples COUNT new MRs (in
neither train nor dev; the seed fixes them): a name, then each of the 7 other attributes with
the probability that gives --mean-attributes, every value drawn by its frequency in train
(names and `near` from train's and dev's). It writes them as an E2E CSV without references,
decodes them with `tablegen generate` (the flags after `--`), and prints the slot error rate
(missed, wrong, added), hallucination and words per text, overall and by attribute count.

    .venv/bin/python benchmarks/novel_tables.py --count 630 -- --model runs/op128-s1 \\
        --ensemble runs/op256-s1 runs/op256c-s1 --beam-size 5 --slot-rerank-weight 20 --slot-end-penalty 3

Takes the decoding's time (the quality run's ensemble: ~1.5 min for 630 tables on 2 cores).
"""

import argparse
import collections
import csv
import os
import random
import re
import subprocess
import sys
import tempfile
from typing import Dict, List, Sequence, Set, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # tablegen_tf, when run as a script
DATA = os.path.join(ROOT, "..", "shared", "data", "e2e")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The official CSV's attribute names, in its order (our readers normalise them).
ATTRIBUTES = ["name", "eatType", "food", "priceRange", "customer rating", "area", "familyFriendly", "near"]
NAMES = ("name", "near")  # drawn from train's and dev's values: test has names of its own


def csv_value(value: str) -> str:
    """The aligned files' tokenized value in the CSV's spelling: `£ 20 - 25` -> `£20-25`."""
    return re.sub(r"\s*-\s*", "-", value.replace("£ ", "£"))


def inventory(train_dir: str, dev_csv: str, dev_names: bool = True) -> Tuple[Dict[str, collections.Counter], Set[str]]:
    """Per attribute (normalised name), its values and how many train MRs have each (names
    also dev's unless not ``dev_names``); the keys of every train and dev MR."""
    from tablegen_tf.inference import read_inputs
    from tablegen_tf.readers.e2e import RawItem, mr_key

    values: Dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    seen: Set[str] = set()
    for fmt, path, split in (("e2e-aligned", train_dir, "train"), ("e2e", dev_csv, "valid")):
        tables, _ = read_inputs(fmt, path, split, 0.0)
        for table in tables:
            items = [RawItem(i.field, csv_value(i.value)) for i in table.items]
            seen.add(mr_key(items))
            for item in items:
                if split == "train" or (dev_names and item.field in NAMES):
                    values[item.field][item.value] += 1
    return values, seen


def sample(values: Dict[str, collections.Counter], seen: Set[str], count: int, mean: float,
           seed: int) -> List[List[Tuple[str, str]]]:
    """COUNT distinct unseen MRs: [(CSV attribute name, value)] in the CSV's order."""
    from tablegen_tf.readers.e2e import RawItem, mr_key, normalise_field

    others = len(ATTRIBUTES) - 1
    keep = min(1.0, max(0.0, (mean - 1) / others))  # each non-name attribute's probability
    rng, tables, keys = random.Random(seed), [], set(seen)
    while len(tables) < count:
        table = []
        for attribute in ATTRIBUTES:
            counts = values[normalise_field(attribute)]
            if attribute == "name" or rng.random() < keep:
                table.append((attribute, rng.choices(list(counts), weights=list(counts.values()))[0]))
        key = mr_key(RawItem(normalise_field(a), v) for a, v in table)
        if len(table) >= 3 and key not in keys:  # E2E's MRs hold 3-8 attributes
            keys.add(key)
            tables.append(table)
    return tables


def write_csv(path: str, tables: Sequence[List[Tuple[str, str]]]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["mr"])
        for table in tables:
            writer.writerow([", ".join(f"{a}[{v}]" for a, v in table)])


def generate_texts(table_csv: str, texts_path: str, generate: Sequence[str]) -> List[str]:
    """`tablegen generate GENERATE` on the CSV's tables, written to TEXTS_PATH; the texts."""
    command = [os.path.join(os.path.dirname(sys.executable), "tablegen"), "generate", "--format", "e2e",
               "--input", table_csv, "--split", "test", "--output", texts_path, *generate]
    subprocess.run(command, check=True, cwd=ROOT, stdout=sys.stdout, stderr=sys.stderr)
    with open(texts_path, encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in handle]


def examples_of(table_csv: str):
    """The CSV's tables as `tablegen evaluate` builds them (records, fields)."""
    from tablegen_tf.inference import build, read_inputs
    from tablegen_tf.tokenizer import TokenizerConfig

    tables, _ = read_inputs("e2e", table_csv, "test")
    return build(tables, TokenizerConfig())[0]


def scores(texts: Sequence[str], examples: Sequence) -> Dict[str, float]:
    """Slot errors and hallucination as `tablegen evaluate` computes them, and words per text."""
    from tablegen_tf.inference import table_scores

    result = table_scores(examples, texts)
    result["words"] = sum(len(t.split()) for t in texts) / max(len(texts), 1)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     epilog="flags after `--` go to `tablegen generate` (--model, "
                                     "--ensemble, --beam-size, ...)")
    parser.add_argument("--count", type=int, default=630, help="new MRs (the test set has 630)")
    parser.add_argument("--mean-attributes", type=float, default=6.9, help="attributes per MR, name "
                        "included (test 6.9, dev 6.3)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--train", default=os.path.join(DATA, "aligned"))
    parser.add_argument("--dev", default=os.path.join(DATA, "devset.csv"))
    parser.add_argument("--keep", help="write the CSV and the texts to this directory (default: a temp dir)")
    parser.add_argument("generate", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    generate = [a for a in args.generate if a != "--"]
    if "--model" not in generate and "--server" not in generate:
        parser.error("give `tablegen generate` flags after --, e.g. -- --model RUN_DIR --beam-size 5")
    values, seen = inventory(args.train, args.dev)
    tables = sample(values, seen, args.count, args.mean_attributes, args.seed)
    with tempfile.TemporaryDirectory() as scratch:
        out = args.keep or scratch
        os.makedirs(out, exist_ok=True)
        table_csv, texts_path = os.path.join(out, "testset.csv"), os.path.join(out, "texts.txt")
        write_csv(table_csv, tables)
        mean = sum(map(len, tables)) / len(tables)
        print(f"{len(tables)} new MRs ({mean:.2f} attributes each, none in train or dev): {table_csv}", flush=True)
        report(generate_texts(table_csv, texts_path, generate), tables, examples_of(table_csv))


def report(texts: List[str], tables: List[List[Tuple[str, str]]], examples: Sequence) -> None:
    if not len(texts) == len(tables) == len(examples):
        sys.exit(f"{len(texts)} texts for {len(tables)} tables ({len(examples)} read back)")
    groups = collections.defaultdict(list)
    for index, table in enumerate(tables):
        groups[len(table)].append(index)
    print(f"{'attributes':>10} {'MRs':>5} {'SER %':>6} {'missed':>7} {'wrong':>6} {'added':>6} "
          f"{'halluc. %':>9} {'words':>6}")
    for label, indices in [*sorted(groups.items()), ("all", range(len(tables)))]:
        s = scores([texts[i] for i in indices], [examples[i] for i in indices])
        slots = s.get("num_slots", 0)
        print(f"{label:>10} {len(indices):>5} {100 * s.get('slot_error_rate', 0):>6.2f} "
              f"{round(s.get('slot_missed_rate', 0) * slots):>7} {round(s.get('slot_wrong_rate', 0) * slots):>6} "
              f"{round(s.get('slot_added_rate', 0) * slots):>6} {100 * s['hallucination_rate']:>9.2f} "
              f"{s['words']:>6.1f}")


if __name__ == "__main__":
    from quiet import run_quietly

    run_quietly(main)
