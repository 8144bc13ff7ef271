"""Experiment: two systems' texts routed by whether a table says something training never did.

A table goes to the candidate's text when one of its ``--field`` values (WebNLG: a property)
occurs in no training row (the rows of ``--train-input`` outside its selection carve, as
`tablegen prepare --selection-fraction` keeps them for training), and to the control's text
otherwise. Prints BLEU (tablegen's: sacrebleu 13a, lowercased, every reference) of the control,
the candidate and the routed texts, and how many tables were routed. Hypothesis files are what
`tablegen evaluate --output` writes for the same --format / --input / --split /
--selection-fraction, one line per distinct input.

    .venv/bin/python benchmarks/route_by_unseen_values.py --format webnlg --input HELD_OUT_XML \\
        --split train --train-input TRAIN_XML --field property control.txt candidate.txt

Asks whether a model that is better on new categories (copy continuation, README "WebNLG
categories never seen in training") can be used only where the table is new.
"""

import argparse
import os
import sys

from paired_bootstrap import add_input_arguments, examples, read_hypotheses

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def field_values(raw, field: str) -> set:
    return {item.value for item in getattr(raw, "items", []) if item.field == field}


def training_values(format_name: str, path: str, selection_fraction: float, field: str) -> set:
    """The ``field`` values of every training row (train rows outside the selection carve)."""
    sys.path.insert(0, ROOT)
    from tablegen_tf.readers import get_reader
    from tablegen_tf.readers.base import in_selection

    reader, values = get_reader(format_name), set()
    for unit in reader.input_units(path, "train"):
        for raw in reader.read(unit, "train"):
            if not (selection_fraction and in_selection(raw, selection_fraction)):
                values |= field_values(raw, field)
    return values


def novel_inputs(args, seen: set) -> dict:
    """example_id -> whether the input's table has a ``--field`` value no training row has."""
    from tablegen_tf import inference

    raws, _ = inference.read_inputs(args.format, args.input, args.split, args.selection_fraction)
    return {raw.example_id: bool(field_values(raw, args.field) - seen) for raw in raws}


def routed(novel, control, candidate):
    """The candidate's line where the table is novel, the control's elsewhere."""
    return [b if new else a for new, a, b in zip(novel, control, candidate)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_input_arguments(parser)
    parser.add_argument("--train-input", required=True, help="the training rows (same --format), split train")
    parser.add_argument("--train-selection-fraction", type=float, default=0.05,
                        help="the selection carve left out of training (0: every row trained)")
    parser.add_argument("--field", required=True, help="the field whose unseen values route a table")
    parser.add_argument("--output", default=None, help="write the routed texts here")
    parser.add_argument("control", help="the texts kept where every value was seen in training")
    parser.add_argument("candidate", help="the texts taken where a table has an unseen value")
    args = parser.parse_args()
    sys.path.insert(0, ROOT)
    from tablegen_tf.metrics.text_metrics import bleu_metric, reference_streams

    inputs = examples(args.format, args.input, args.split, args.selection_fraction)
    seen = training_values(args.format, args.train_input, args.train_selection_fraction, args.field)
    if not seen:
        sys.exit(f"{args.train_input}: no training row has a {args.field!r} field (--field)")
    novel_by_id = novel_inputs(args, seen)
    novel = [novel_by_id[e.example_id] for e in inputs]
    control, candidate = (read_hypotheses(path, len(inputs)) for path in (args.control, args.candidate))
    texts = routed(novel, control, candidate)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as handle:
            handle.write("".join(line + "\n" for line in texts))
    refs = reference_streams([e.all_references() for e in inputs])
    bleu = bleu_metric(lowercase=True)
    print(f"{len(inputs)} inputs, {sum(novel)} with a {args.field} no training row has ({len(seen)} seen)\n")
    print("| texts | BLEU |\n|---|---|")
    for name, hyps in (("control " + args.control, control), ("candidate " + args.candidate, candidate),
                       ("routed", texts)):
        print(f"| {name} | {bleu.corpus_score(hyps, refs).score:.2f} |")


if __name__ == "__main__":
    from quiet import run_quietly

    run_quietly(main)
