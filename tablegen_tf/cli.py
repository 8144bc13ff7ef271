"""The `tablegen` command line.

Each sub-command imports its heavy dependencies lazily, so `tablegen --help`
is instant and a failing optional component never breaks the others.
"""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

FORMAT_HELP = {
    "wikibio": "WikiBio .box/.sent/.nb directory (target = first sentence)",
    "e2e": "official E2E CSV 'mr,ref'",
    "e2e-aligned": "E2E tokenized src_*.txt + *.txt (with alignments) directory",
    "webnlg": "WebNLG 2017 challenge XML file or directory",
    "rotowire": "original RotoWire boxscore-data JSON",
    "rotowire-sentences": "RotoWire x_type/x_value/x_associated/y_aux directory",
    "jsonl": 'generic {"table": [{"field", "value"}...], "text": ...} lines',
}


def _add_prepare(subparsers) -> None:
    parser = subparsers.add_parser(
        "prepare",
        help="convert a corpus into record TFRecords, vocabularies and statistics (Apache Beam)",
        description=(
            "Reads a corpus in its native format and writes OUTPUT/examples-*.tfrecord.gz "
            "(tf.train.Example records), OUTPUT/dead_letter.jsonl (rejected rows with file, "
            "line and reason), OUTPUT/vocab/*.txt and OUTPUT/stats.json. Unrecognised "
            "arguments are Beam pipeline options (e.g. --runner=DataflowRunner --project=... "
            "--region=... --temp_location=gs://...); the default is the DirectRunner with "
            "2 worker processes.\n\nformats:\n"
            + "\n".join(f"  {name:20s}{text}" for name, text in FORMAT_HELP.items())
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--format", required=True, choices=sorted(FORMAT_HELP), help="input format")
    parser.add_argument("--input", required=True, help="input file or directory")
    parser.add_argument("--output", required=True, help="output directory (local path or gs://...)")
    parser.add_argument(
        "--split",
        choices=["train", "valid", "test"],
        help="split; inferred from the input path when omitted. On valid/test, rows sharing "
        "one meaning representation merge into one multi-reference example",
    )
    parser.add_argument("--lowercase", action="store_true", help="lower-case tables and text")
    parser.add_argument(
        "--num-shards", type=int, default=0,
        help="TFRecord shards; 0 (default) lets the runner decide, avoiding a shuffle of all examples",
    )
    parser.add_argument("--word-min-count", type=int, default=1, help="word vocabulary cut-off")
    parser.add_argument("--max-words", type=int, default=50000, help="word vocabulary size cap")
    parser.set_defaults(handler=_run_prepare)


def _run_prepare(args, beam_args: List[str]) -> int:
    from beam_jobs import prepare
    from beam_jobs.formats.base import InputError, infer_split

    config = prepare.PrepareConfig(
        format=args.format,
        input=args.input,
        output=args.output,
        split=args.split or infer_split(args.input),
        lowercase=args.lowercase,
        num_shards=args.num_shards,
        word_min_count=args.word_min_count,
        max_words=args.max_words,
    )
    print(f"tablegen prepare: {config.format} {config.split} split from {config.input} -> {config.output}", flush=True)
    try:
        counts = prepare.run(config, beam_args)
    except (InputError, prepare.PrepareError) as error:
        print(f"tablegen prepare: error: {error}", file=sys.stderr)
        return 2
    print(prepare.summary_line(counts), flush=True)
    print(
        f"{counts['read'] / max(counts['seconds'], 1e-9):.0f} rows/s; records in {config.output}",
        flush=True,
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tablegen",
        description="tablegen: data-to-text generation with TensorFlow, Beam, TFX and TF Serving.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_prepare(subparsers)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "prepare":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args.handler(args, extra)


if __name__ == "__main__":
    sys.exit(main())
