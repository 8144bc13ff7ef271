"""Experiment: self-training on new E2E tables (Kedzie & McKeown 2019), a teacher's texts as data.

A teacher (the quality run's ensemble, `tablegen generate` flags after `--`) writes one text
for each of COUNT new MRs: attribute combinations in neither train nor dev, values drawn by
their frequency in train, names and `near` from train only (dev's names would help dev and not
the held-out test, which has names of its own). Texts with any slot error or hallucinated value
(our aligner) are dropped; the rest are appended to a copy of the aligned train files, tokenized
as those are. No new MR lands on the selection split (`--selection-fraction`), so `tablegen
prepare --selection-fraction F` on the output carves exactly the selection split it did before.

    .venv/bin/python benchmarks/self_training.py --count 4000 --out runs/aug -- \\
        --model runs/op128-s1 --ensemble runs/op256-s1 runs/op256c-s1 \\
        --beam-size 5 --slot-rerank-weight 20 --slot-end-penalty 3
    .venv/bin/tablegen prepare --format e2e-aligned --input runs/aug --split train \\
        --selection-fraction 0.05 --output runs/data/e2e-aug/train

Takes the decoding's time (the ensemble above: 3,816 tables in 55 s on a 2-core AMD EPYC, family 26).
README: "Self-training on new MRs, tried and not kept".
"""

import argparse
import collections
import os
import re
import shutil
import types
from typing import Dict, List, Sequence, Tuple

import novel_tables


def aligned_spellings(train_dir: str) -> Dict[str, str]:
    """CSV spelling -> the aligned files' most frequent spelling of that value (`£20-25` ->
    `£ 20 - 25`): new rows must spell values as the rows they join."""
    from tablegen_tf.readers.e2e import parse_aligned_mr

    counts: Dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    with open(os.path.join(train_dir, "src_train.txt"), encoding="utf-8") as handle:
        for line in handle:
            for item in parse_aligned_mr(line)[0]:
                counts[novel_tables.csv_value(item.value)][item.value] += 1
    return {csv: spellings.most_common(1)[0][0] for csv, spellings in counts.items()}


def aligned_tokens(text: str) -> List[str]:
    """The aligned files' tokens: our tokenizer, then hyphens as tokens of their own
    ("family - friendly") and "isn 't" for "is n't", as train's texts spell them."""
    from tablegen_tf.tokenizer import tokenize_batch

    tokens: List[str] = []
    for token in tokenize_batch([text])[0]:
        if token == "n't" and tokens:
            tokens[-1], token = tokens[-1] + "n", "'t"
        tokens.extend(part for part in re.split(r"(-)", token) if part)  # "-" alone stays "-"
    return tokens


def faithful(text: str, example) -> bool:
    """No slot missed, wrong or added, and no hallucinated value."""
    from tablegen_tf.inference import table_scores

    scores = table_scores([example], [text])
    return scores.get("slot_error_rate", 0.0) == 0.0 and scores["hallucination_rate"] == 0.0


def source_line(table: Sequence[Tuple[str, str]], spellings: Dict[str, str]) -> str:
    from tablegen_tf.readers.e2e import normalise_field

    return " ".join(f"__start_{normalise_field(a)}__ {spellings.get(v, v)} __end_{normalise_field(a)}__" for a, v in table)


def in_selection(line: str, fraction: float) -> bool:
    """Whether `tablegen prepare --selection-fraction` would carve this MR (as the reader keys it)."""
    from tablegen_tf.readers import base
    from tablegen_tf.readers.e2e import mr_key, parse_aligned_mr

    key = mr_key(parse_aligned_mr(line)[0])
    return base.in_selection(types.SimpleNamespace(group_key=key, example_id=""), fraction)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     epilog="flags after `--` go to `tablegen generate` (--model, --ensemble, ...)")
    parser.add_argument("--count", type=int, default=4000, help="new MRs to decode")
    parser.add_argument("--mean-attributes", type=float, default=6.9, help="attributes per MR, name included")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--selection-fraction", type=float, default=0.05, help="the carve no new MR may land on")
    parser.add_argument("--train", default=os.path.join(novel_tables.DATA, "aligned"))
    parser.add_argument("--dev", default=os.path.join(novel_tables.DATA, "devset.csv"))
    parser.add_argument("--copies", type=int, default=1, help="times each new row is written (its weight in training)")
    parser.add_argument("--out", required=True, help="directory for src_train.txt + train.txt (train's rows, then the new)")
    parser.add_argument("generate", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    generate = [a for a in args.generate if a != "--"]
    if "--model" not in generate:
        parser.error("give the teacher's `tablegen generate` flags after --, e.g. -- --model RUN_DIR --beam-size 5")
    os.makedirs(args.out, exist_ok=True)
    values, seen = novel_tables.inventory(args.train, args.dev, dev_names=False)
    spellings = aligned_spellings(args.train)
    tables = [t for t in novel_tables.sample(values, seen, args.count, args.mean_attributes, args.seed)
              if not in_selection(source_line(t, spellings), args.selection_fraction)]
    table_csv, texts_path = os.path.join(args.out, "new_tables.csv"), os.path.join(args.out, "teacher.txt")
    novel_tables.write_csv(table_csv, tables)
    print(f"{len(tables)} new MRs ({sum(map(len, tables)) / len(tables):.2f} attributes each; "
          f"{args.count - len(tables)} on the selection carve dropped): {table_csv}", flush=True)
    if os.path.isfile(texts_path):  # a rerun reuses the teacher's texts
        with open(texts_path, encoding="utf-8") as handle:
            texts = [line.rstrip("\n") for line in handle]
    else:
        texts = novel_tables.generate_texts(table_csv, texts_path + ".partial", generate)
        os.replace(texts_path + ".partial", texts_path)
    examples = novel_tables.examples_of(table_csv)
    kept = [(t, x) for t, x, e in zip(tables, texts, examples) if faithful(x, e)]
    for name in ("src_train.txt", "train.txt"):
        shutil.copyfile(os.path.join(args.train, name), os.path.join(args.out, name))
    with open(os.path.join(args.out, "src_train.txt"), "a", encoding="utf-8") as src, \
            open(os.path.join(args.out, "train.txt"), "a", encoding="utf-8") as tgt:
        for table, text in kept:
            src.write((source_line(table, spellings) + "\n") * args.copies)
            tgt.write((" ".join(aligned_tokens(text)) + " <eos>|||\n") * args.copies)
    words = sum(len(x.split()) for _, x in kept) / max(len(kept), 1)
    print(f"kept {len(kept)} of {len(texts)} teacher texts (the rest had a slot error or a hallucinated value), "
          f"{words:.1f} words each; appended {args.copies}x to the train rows in {args.out}")


if __name__ == "__main__":
    from quiet import run_quietly

    run_quietly(main)
