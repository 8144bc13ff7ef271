"""Experiment: token F1 and compression ratio of a compression run per decode setting, and
where F1 is lost (per source-length and per reference-ratio bucket), on the selection split.

Loads the run (or an ensemble) once and decodes the pairs of --input with each length
penalty x beam size, through the same reader, search and metrics as `tablegen evaluate
--format compression`; prints one JSON line per setting (token F1, precision, recall,
ratio beside the references') and, with --buckets, the buckets of the first setting.
Choose settings on the selection split (docs/compression.md), never on the valid split.

    .venv/bin/python benchmarks/compression_decoding.py --model runs/fsc_all \\
        --input data/tsv/select.tsv --length-penalty 0 1 1.25 1.5 --buckets
    .venv/bin/python benchmarks/compression_decoding.py --model runs/sh8tg --input data/tsv/select.tsv \\
        --length-penalty 0.5 --tagger-weight 0.5 1 --tagger-bias 0 -0.5 -1
"""

import argparse
import dataclasses
import itertools
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

LENGTH_BUCKETS = ((0, 15), (15, 25), (25, 35), (35, 50), (50, 10_000))  # source tokens
RATIO_BUCKETS = ((0.0, 0.3), (0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (0.6, 1.01))  # the reference's ratio


def sentence_rows(examples, texts):
    """Per sentence: (source length, F1, ratio, reference ratio, kept, wanted, kept and wanted)."""
    from tablegen_tf.metrics.extractive_metrics import _f1, keep_mask
    from tablegen_tf.tokenizer import tokenize_batch

    rows = []
    for example, output in zip(examples, tokenize_batch(list(texts))):
        f1, both, kept, wanted = _f1(keep_mask(example.source_tokens, output), example.labels)
        length = len(example.source_tokens)
        rows.append((length, f1, len(output) / length, sum(example.labels) / length, kept, wanted, both))
    return rows


def summary(rows) -> dict:
    count = max(len(rows), 1)
    kept, wanted, both = (sum(row[i] for row in rows) for i in (4, 5, 6))
    return {"token_f1": round(sum(r[1] for r in rows) / count, 4), "precision": round(both / max(kept, 1), 3),
            "recall": round(both / max(wanted, 1), 3), "ratio": round(sum(r[2] for r in rows) / count, 3),
            "reference_ratio": round(sum(r[3] for r in rows) / count, 3), "sentences": len(rows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="run directory written by `tablegen train`")
    parser.add_argument("--ensemble", nargs="+", default=[], metavar="RUN", help="more runs decoded as one ensemble")
    parser.add_argument("--input", required=True, help="compression TSV (original, compressed) to score")
    parser.add_argument("--length-penalty", nargs="+", type=float, default=[0.0])
    parser.add_argument("--beam-size", nargs="+", type=int, default=[5])
    parser.add_argument("--tagger-weight", nargs="+", type=float, default=[None],
                        help="model.tagger_decoding_weight values (runs trained with model.tagging_weight)")
    parser.add_argument("--tagger-bias", nargs="+", type=float, default=[None],
                        help="model.tagger_keep_bias values (< 0: the tagger keeps fewer tokens in decoding)")
    parser.add_argument("--buckets", action="store_true", help="F1 and ratio per length / reference-ratio bucket")
    args = parser.parse_args()

    from tablegen_tf import inference
    from tablegen_tf.ensemble import load_ensemble

    trained = load_ensemble([args.model, *args.ensemble])
    raws, _ = inference.read_inputs("compression", args.input, "test")
    examples, _ = inference.build(raws, trained.config.tokenizer, needs_text=True)
    examples = [example for example in examples if example.labels]
    print(f"model: {trained.checkpoint}; {len(examples)} pairs of {args.input}", flush=True)
    first = None
    for beam in args.beam_size:
        for penalty in args.length_penalty:
            for tagger_weight, tagger_bias in itertools.product(args.tagger_weight, args.tagger_bias):
                overrides = {"tagger_decoding_weight": tagger_weight, "tagger_keep_bias": tagger_bias}
                overrides = {name: value for name, value in overrides.items() if value is not None}
                for member in getattr(trained.model, "members", [trained.model]):  # an ensemble: each run
                    for name, value in overrides.items():
                        setattr(member, name, value)
                decode = dataclasses.replace(trained.config.decode, length_penalty=penalty, beam_size=beam)
                start = time.time()
                texts, _ = inference.generate_texts_and_plans(trained.model, trained.featurizer, examples, decode,
                                                              progress=False)
                rows = sentence_rows(examples, texts)
                first = first or rows
                setting = {"beam_size": beam, "length_penalty": penalty, **overrides}
                print(json.dumps({**setting, **summary(rows), "seconds": round(time.time() - start, 1)}), flush=True)
    if args.buckets:
        for name, buckets, column in (("source tokens", LENGTH_BUCKETS, 0), ("reference ratio", RATIO_BUCKETS, 3)):
            for low, high in buckets:
                rows = [row for row in first if low <= row[column] < high]
                if rows:
                    print(f"  {name} [{low}, {high}): {json.dumps(summary(rows))}")


if __name__ == "__main__":
    main()
