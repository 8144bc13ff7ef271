"""The `tablegen` command line.

Each sub-command imports its heavy dependencies lazily, so `tablegen --help`
is instant and a failing optional component never breaks the others.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import sys
import threading
import typing
from typing import List, Optional

from tablegen_cli import workers
from tablegen_cli.workers import tf_config_worker, worker_log
from tablegen_tf.config import ConfigError, DecodeConfig, TrainConfig
from tablegen_tf.readers import format_names
from tablegen_tf.tempdirs import private_tempdir

# TensorFlow's C++ INFO/WARNING start-up lines drown the tool's own output; users can
# still ask for them with TF_CPP_MIN_LOG_LEVEL=0. Set before any TF import (also
# inherited by Beam worker processes).
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

FORMAT_HELP = {
    "wikibio": "WikiBio .box/.sent/.nb directory (target = first sentence)",
    "e2e": "official E2E CSV 'mr,ref'",
    "e2e-aligned": "E2E tokenized src_*.txt + *.txt (with alignments) directory",
    "webnlg": "WebNLG 2017 challenge XML file or directory",
    "rotowire": "original RotoWire boxscore-data JSON",
    "rotowire-sentences": "RotoWire x_type/x_value/x_associated/y_aux directory",
    "jsonl": 'generic {"table": [{"field", "value"}...], "text": ...} lines',
    "text-pairs": "text-to-text: source<TAB>target lines (.tsv/.txt, .gz allowed)",
    "sentences": "unlabelled text: one sentence per line (.txt/.gz file or directory)",
    "sentences-hashed": "as sentences, keeping the --split share by a hash of each sentence (90/5/5)",
    "compression": "sentence compression TSV 'original<TAB>compressed' (+ deletion labels; last 1,025 rows = valid)",
}


def _format_help(name: str) -> str:
    if name in FORMAT_HELP:
        return FORMAT_HELP[name]
    return f"the references of {name.rsplit('-', 1)[0]} as sentences (language models)"


def _add_prepare(subparsers) -> None:
    parser = subparsers.add_parser(
        "prepare",
        help="convert a corpus into record TFRecords, vocabularies and statistics (Apache Beam)",
        description=(
            "Reads a corpus in its native format and writes OUTPUT/examples-*.tfrecord.gz "
            "(tf.train.Example records), OUTPUT/dead_letter.jsonl (rejected rows with file, "
            "line and reason), OUTPUT/vocab/*.txt and OUTPUT/stats.json. Unrecognised "
            "arguments are Beam pipeline options (e.g. --runner=DaskRunner "
            "--dask_client_address=HOST:8786 for a dask.distributed cluster, or "
            "--runner=DataflowRunner --project=... --region=... --temp_location=gs://...); the "
            "default is the DirectRunner with 2 worker processes.\n\nformats:\n"
            + "\n".join(f"  {name:26s}{_format_help(name)}" for name in format_names())
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--format", required=True, choices=format_names(), metavar="FORMAT",
                        help="input format: one of the formats listed by `tablegen prepare --help`")
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
    parser.add_argument(
        "--selection-fraction", type=float, default=0.0, metavar="F",
        help="train split only: carve this share of distinct MRs (e.g. 0.05) into a selection split, "
        "references merged, that shares no MR with the rest of train; train with "
        "`--valid SELECTION_DIR` so early stopping and tuning never see the dev set you report on",
    )
    parser.add_argument("--selection-output", default=None, metavar="DIR",
                        help="where the selection split goes (default: OUTPUT/../selection)")
    parser.add_argument(
        "--clean-slots", action="store_true",
        help="train split only, E2E-style tables: each table keeps the slots its text realises and gains "
        "the closed-class ones its text states (slot aligner; Dusek et al. 2019), so the model learns "
        "to say every slot it is given; the selection split stays as it is",
    )
    parser.add_argument(
        "--split-sentences", action="store_true",
        help="train split only, E2E-style tables: each sentence of a multi-sentence text is also a "
        "training row, its table the slots that sentence realises (Juraska et al. 2018); sentences "
        "that contradict or add a slot are skipped, and none lands on a selection-split MR",
    )
    parser.set_defaults(handler=_run_prepare)


def _run_prepare(args, beam_args: List[str]) -> int:
    from beam_jobs import prepare
    from tablegen_tf.progress import Progress, format_duration, format_rate
    from tablegen_tf.readers.base import InputError, infer_split

    config = prepare.PrepareConfig(
        format=args.format,
        input=args.input,
        output=args.output,
        split=args.split or infer_split(args.input),
        lowercase=args.lowercase,
        num_shards=args.num_shards,
        word_min_count=args.word_min_count,
        max_words=args.max_words,
        selection_fraction=args.selection_fraction,
        selection_output=args.selection_output,
        clean_slots=args.clean_slots,
        split_sentences=args.split_sentences,
    )
    if not 0.0 <= config.selection_fraction < 1.0:
        raise CommandError("--selection-fraction must be in [0, 1)")
    if config.clean_slots and config.split != "train":
        raise CommandError("--clean-slots cleans the train split only (dev is what is reported)")
    if config.split_sentences and config.split != "train":
        raise CommandError("--split-sentences augments the train split only")
    if config.selection_fraction and config.split != "train":
        raise CommandError("--selection-fraction carves from the train split only")
    print(f"tablegen prepare: {config.format} {config.split} split from {config.input} -> {config.output}", flush=True)
    # Running counts: a live line on a TTY, a plain line every 30 s (then sparser) otherwise.
    progress = Progress("read", unit="row")

    def show(totals):
        if totals.get("read"):
            progress.update_to(totals["read"], written=totals.get("written", 0))

    with _reported(InputError, prepare.PrepareError):
        try:
            counts = prepare.run(config, beam_args, on_counts=show)
        finally:
            progress.close()
    print(prepare.summary_line(counts), flush=True)
    rate = format_rate(counts['read'] / max(counts['seconds'], 1e-9))
    print(f"{format_duration(counts['seconds'])} ({rate} rows/s); records in {config.output}", flush=True)
    return 0


def _add_train(subparsers) -> None:
    parser = subparsers.add_parser(
        "train",
        help="train a model on prepared records",
        description=(
            "Trains a model family (--model, or model.name in the config) on directories written by "
            "`tablegen prepare`. The config's defaults are in code (`tablegen config show`); a corpus "
            "YAML (e2e, ...) or your own file and --set only override, and an unknown key is an error. "
            "The budget is --max-steps (seeded: the same model on every machine); --max-minutes is a "
            "safety cap. The learning rate (train.optimizer.learning_rate) is halved after a validation "
            "without a gain (train.decay_on_plateau), or annealed over the budget with "
            "train.optimizer.schedule=cosine|linear (and warmup_steps). Checkpoints go to "
            "OUT/checkpoints (a rerun resumes from the latest, also after "
            "kill -9), the best model by validation BLEU to OUT/best, the merged config to "
            "OUT/config.json, TensorBoard logs to OUT/logs (tensorboard --logdir OUT/logs)."
        ),
    )
    _add_config_arguments(parser)
    parser.add_argument("--data", default=None, help="directory holding train/ and valid/ prepared splits")
    parser.add_argument("--train", dest="train_dir", default=None, help="prepared training directory")
    parser.add_argument("--valid", dest="valid_dir", default=None, help="prepared validation directory")
    parser.add_argument("--out", required=True, help="run directory (checkpoints, logs, vocabularies)")
    parser.add_argument("--max-steps", type=_bounded(TrainConfig, "max_steps"), default=None,
                        help="the training budget in steps (train.max_steps)")
    parser.add_argument("--max-minutes", type=_bounded(TrainConfig, "max_minutes"), default=None,
                        help="wall-time safety cap (train.max_minutes)")
    parser.add_argument("--warm-start-from", default=None, help="initialise weights from another run directory")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--workers", type=int, default=1,
                        help="train with N worker processes on this host (MultiWorkerMirroredStrategy over "
                        "loopback ports; worker 0 reports here and writes OUT, worker K logs to "
                        "OUT/logs/worker-K.log); data.batch_size stays the global batch")
    parser.set_defaults(handler=_run_train)


def _add_config_arguments(parser) -> None:
    from tablegen_tf.config import available_configs

    parser.add_argument("--config", default=None,
                        help=f"corpus config ({', '.join(available_configs())}) or a YAML file")
    parser.add_argument("--model", default=None, help="model family (model.name); `tablegen models` lists them")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="config override, e.g. --set model.hidden_size=128 (repeatable; YAML values)")


def _add_config(subparsers) -> None:
    parser = subparsers.add_parser(
        "config", help="print the merged config (code defaults <- corpus YAML <- --set)",
        description="Prints the config `tablegen train` would use, as YAML: the model family's and the "
        "sections' defaults from code, overridden by --config and --set. Unknown keys are errors.")
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    show = sub.add_parser("show", help="print the merged config")
    _add_config_arguments(show)
    show.set_defaults(handler=_run_config_show)
    models = subparsers.add_parser("models", help="list the registered model families")
    models.set_defaults(handler=_run_models)


def _run_config_show(args, _extra) -> int:
    import yaml

    from tablegen_tf.config import load_config, parse_overrides

    overrides = parse_overrides(args.overrides)  # a ConfigError is reported by _handled
    if args.model:
        overrides.setdefault("model", {})["name"] = args.model
    config = load_config(args.config, overrides)
    print(yaml.safe_dump(config.to_dict(), sort_keys=False), end="")
    return 0


def _run_models(_args, _extra) -> int:
    from tablegen_tf.models import family_names, get_family

    for name in family_names():
        family = get_family(name)
        print(f"{name:16s} {family.example_form:6s} {family.description}")
    return 0


def training_config(args):
    import os

    from tablegen_tf.config import load_config, parse_overrides

    overrides = parse_overrides(args.overrides)
    data = overrides.setdefault("data", {})
    if args.data:
        data.setdefault("train", os.path.join(args.data, "train"))
        data.setdefault("valid", os.path.join(args.data, "valid"))
    if args.train_dir:
        data["train"] = args.train_dir
    if args.valid_dir:
        data["valid"] = args.valid_dir
    if args.model:
        overrides.setdefault("model", {})["name"] = args.model
    train = overrides.setdefault("train", {})
    if args.max_steps is not None:
        train["max_steps"] = args.max_steps
    if args.max_minutes is not None:
        train["max_minutes"] = args.max_minutes
    config = load_config(args.config, overrides)
    if not config.data.train:
        raise CommandError("no training data: pass --data DIR, --train DIR or data.train in --config")
    for key in ("train", "valid", "vocab"):
        if getattr(config.data, key):
            setattr(config.data, key, os.path.abspath(getattr(config.data, key)))
    return config


def _run_train(args, _extra) -> int:
    import json

    import tensorflow as tf

    from tablegen_tf.progress import format_duration, format_rate
    from tablegen_tf.training.trainer import Trainer

    config = training_config(args)
    trainer = Trainer(config, args.out)  # checks what needs the run (strategy, example form): ConfigError
    try:
        result = trainer.train(warm_start_from=args.warm_start_from, progress=not args.no_progress)
    except (tf.errors.UnavailableError, tf.errors.DeadlineExceededError) as error:
        if trainer.workers == 1:
            raise
        # A multi-worker peer died: its heartbeats stopped and the collectives were aborted.
        reason = next((line for line in str(error).splitlines() if "unhealthy" in line or "aborted" in line),
                      type(error).__name__)
        print(f"tablegen train: error: worker {trainer.worker} of {trainer.workers}: a peer worker stopped "
              f"({reason.strip()}); start every worker again to resume from the last checkpoint in "
              f"{args.out}/checkpoints", file=sys.stderr)
        return 1
    if not trainer.is_chief:  # a multi-worker run's worker K > 0: the chief reports and writes OUT
        return 0
    with open(os.path.join(args.out, "train_result.json"), "w", encoding="utf-8") as handle:
        json.dump(result.__dict__, handle, indent=2)
    print(f"trained {result.steps:,} steps in {format_duration(result.seconds)} (stopped: {result.stopped_because}), "
          f"{format_rate(result.tokens_per_second)} tok/s")
    if config.data.valid:
        print(f"best model: {args.out}/best (valid BLEU {result.best_bleu:.2f} at step {result.best_step:,})")
    else:  # best/ holds the last step
        print(f"model: {args.out}/best (the last step, {result.steps:,}; no validation split)")
    print(f"next: tablegen evaluate --model {args.out} --format FORMAT --input DEV; "
          f"tensorboard --logdir {args.out}/logs")
    return 0


# One help for every decoding command's --batch-size.
BATCH_SIZE_HELP = ("tables decoded together (default 64). With --mbr-weight each batch also draws "
                   "batch x --mbr-samples texts, at most --mbr-rows at a time. The texts do not depend on it.")


def _add_inference_arguments(parser) -> None:
    parser.add_argument("--model", required=True, help="run directory written by `tablegen train`")
    _add_ensemble_argument(parser)
    parser.add_argument("--format", required=True, choices=format_names(), metavar="FORMAT",
                        help="input format: one of the formats listed by `tablegen prepare --help`")
    parser.add_argument("--input", required=True, help="input file or directory")
    parser.add_argument("--split", choices=["train", "valid", "test"], help="inferred from the path when omitted")
    parser.add_argument("--beam-size", type=_bounded(DecodeConfig, "beam_size"), default=None,
                        help="beam size (default: the run's decode config)")
    parser.add_argument("--max-length", type=_bounded(DecodeConfig, "max_length"), default=None,
                        help="maximum output tokens")
    parser.add_argument("--length-penalty", type=float, default=None,
                        help="GNMT length penalty alpha for beam search (default: the run's decode config)")
    _add_rerank_arguments(parser)
    parser.add_argument("--batch-size", type=int, default=64, help=BATCH_SIZE_HELP)
    parser.add_argument("--limit", type=int, default=0, help="only the first N distinct tables (0 = all)")


def _check_ensemble_weights(args) -> None:
    """A usage error, before any run is loaded, when --ensemble-weights do not fit the runs."""
    from tablegen_tf.ensemble import check_weights

    with _reported(ValueError):
        check_weights(args.ensemble_weights, 1 + len(args.ensemble))


def _load_runs(args):
    """The run of --model, or its ensemble with --ensemble's runs (and --ensemble-weights)."""
    from tablegen_tf.ensemble import load_ensemble

    _check_ensemble_weights(args)
    return load_ensemble([args.model, *args.ensemble], args.ensemble_weights, args.max_length)


def _add_ensemble_argument(parser) -> None:
    parser.add_argument("--ensemble", nargs="+", default=[], metavar="RUN",
                        help="more run directories to decode with --model as one ensemble (their next-word "
                             "distributions averaged; same featurizer and vocabularies, e.g. runs that differ by "
                             "train.seed, or families of one example form such as encdec-copy and "
                             "order-planning); the decode settings are --model's")
    parser.add_argument("--ensemble-weights", nargs="+", type=float, default=None, metavar="W",
                        help="one weight per run (--model's first, then --ensemble's), >= 0, normalised to "
                             "sum 1: the ensemble's next-word distribution is sum_n w_n p_n (default: equal); "
                             "choose them on a selection split")


def _bounded(section, key: str):
    """The argparse type of the flag for ``section``'s ``key`` (a config dataclass: DecodeConfig,
    TrainConfig, ...): the field's type, and a usage error "REQUIREMENT, got TEXT" outside its
    ``BOUNDS`` (before any run is loaded)."""
    convert = typing.get_type_hints(section)[key]
    bound = section.BOUNDS[key]

    def parse(text: str):
        value = convert(text)
        if not bound.accepts(value):
            raise argparse.ArgumentTypeError(f"{bound.requirement}, got {text}")
        return value

    parse.__name__ = convert.__name__  # argparse's "invalid float value" for unparsable text
    return parse


def _add_rerank_arguments(parser) -> None:
    parser.add_argument("--slot-rerank-weight", type=float, default=None,
                        help="rerank the beams by score - W x slot errors (missed, wrong and added table "
                             "values of E2E-style tables; default: the run's decode.slot_rerank_weight, 0 = off)")
    parser.add_argument("--coverage-rerank-weight", type=float, default=None,
                        help="rerank the beams by score - W x table words left out (distinct subject/object/"
                             "name words and numbers of the table the text does not mention; default: the "
                             "run's decode.coverage_rerank_weight, 0 = off)")
    parser.add_argument("--slot-end-penalty", type=float, default=None,
                        help="during the beam search, ending a hypothesis costs P log-prob per value of its "
                             "E2E-style table it has not said yet, so beams that go on to say it are kept for "
                             "the reranker (default: the run's decode.slot_end_penalty, 0 = off)")
    parser.add_argument("--no-repeat-ngram-size", type=_bounded(DecodeConfig, "no_repeat_ngram_size"), default=None,
                        metavar="N",
                        help="never let a text say the same N tokens twice (copied words compared by their "
                             "text; Paulus et al. 2018 block trigrams, N = 3; default: the run's "
                             "decode.no_repeat_ngram_size, 0 = off)")
    parser.add_argument("--pragmatic-alpha", type=_bounded(DecodeConfig, "pragmatic_alpha"), default=None,
                        help="mix each kept beam's score with a listener's, (1 - A) x score + A x log L0(table "
                             "| beam), L0 against the table with one attribute left out at a time (Shen et "
                             "al. 2019; costs one scoring pass per beam and attribute; default: the run's "
                             "decode.pragmatic_alpha, 0 = off)")
    parser.add_argument("--mbr-weight", type=_bounded(DecodeConfig, "mbr_weight"), default=None,
                        help="minimum Bayes risk: each kept beam also gains M x its mean sentence BLEU (0-1) "
                             "against --mbr-samples draws of the model, so the beam most like what the model "
                             "would say wins (costs the draws' decoding; default: the run's decode.mbr_weight, "
                             "0 = off)")
    parser.add_argument("--mbr-samples", type=_bounded(DecodeConfig, "mbr_samples"), default=None, metavar="S",
                        help="draws per input for --mbr-weight (default: the run's decode.mbr_samples)")
    parser.add_argument("--mbr-epsilon", type=_bounded(DecodeConfig, "mbr_epsilon"), default=None, metavar="E",
                        help="the draws for --mbr-weight never take a token of probability below E "
                             "(epsilon sampling; default: the run's decode.mbr_epsilon)")
    parser.add_argument("--mbr-references", type=_bounded(DecodeConfig, "mbr_references"), default=None, metavar="G",
                        help="score each beam against G draws at a time (multi-reference BLEU, as corpus "
                             "BLEU scores against a table's references; G divides --mbr-samples; default: "
                             "the run's decode.mbr_references, 1)")
    parser.add_argument("--mbr-seed", type=int, default=None,
                        help="the draws' seed for --mbr-weight: one seed gives one text per input, in any "
                             "batch (default: the run's decode.mbr_seed)")
    parser.add_argument("--mbr-rows", type=_bounded(DecodeConfig, "mbr_rows"), default=None, metavar="N",
                        help="draw at most N texts at once (batch x samples; a larger batch draws its samples "
                             "in chunks); memory grows with it (a Transformer's caches), and with the members of an "
                             "--ensemble, each of which steps every row; the texts do not "
                             "depend on it (default: the run's decode.mbr_rows, 1024)")


def _add_evaluate(subparsers) -> None:
    parser = subparsers.add_parser(
        "evaluate",
        help="generate for a corpus split and print BLEU/NIST/ROUGE and fact metrics as JSON",
        description=(
            "BLEU-4 is sacrebleu's on detokenized text with all references (E2E setting: "
            "lowercased, 13a tokenization); for WebNLG also bleu_webnlg, the 2017 challenge's BLEU "
            "(lowercased, split at every non-word character, multi-bleu.perl); NIST-4 as mteval-v13a "
            "computes it; ROUGE-4 / ROUGE-L "
            "(rouge-score, best reference); fact metrics: precision of stated numbers/names against the "
            "table and the hallucination rate; slot error rate (missed + wrong + added values over slots) "
            "for E2E-style tables; content-plan precision/recall/order for corpora with plans; per-token "
            "perplexity over every reference for model families that report it (reports_perplexity)."
        ),
    )
    _add_inference_arguments(parser)
    parser.add_argument("--selection-fraction", type=float, default=0.0, metavar="F",
                        help="score the selection split that `tablegen prepare --selection-fraction F` carved "
                             "from this (train) input: the same MRs, references merged; for choosing checkpoints "
                             "and settings without touching the dev set")
    parser.add_argument("--output", default=None, help="also write the predictions here, one line per table")
    parser.set_defaults(handler=_run_evaluate)


def _add_generate(subparsers) -> None:
    parser = subparsers.add_parser(
        "generate",
        help="write one detokenized line per distinct input table, in input order",
        description="Locally from a run directory (--model DIR), or from a TF Serving / tablegen serve "
        "endpoint over gRPC (--server HOST:PORT --model-name NAME).",
    )
    parser.add_argument("--model", default=None, help="run directory written by `tablegen train`")
    _add_ensemble_argument(parser)
    parser.add_argument("--server", default=None, help="HOST:PORT of a TF Serving gRPC endpoint")
    parser.add_argument("--model-name", default=None, help="served model name (with --server)")
    parser.add_argument("--format", choices=format_names(), metavar="FORMAT",
                        help="input format: one of the formats listed by `tablegen prepare --help`")
    parser.add_argument("--input", help="input file or directory")
    parser.add_argument("--word", action="append", default=[], help="a sentence around this word (repeatable; "
                        "families with a `generate_around` signature); prints to stdout without --output")
    parser.add_argument("--split", choices=["train", "valid", "test"], help="inferred from the path when omitted")
    parser.add_argument("--beam-size", "--beam", type=_bounded(DecodeConfig, "beam_size"), default=None)
    parser.add_argument("--max-length", type=_bounded(DecodeConfig, "max_length"), default=None)
    parser.add_argument("--length-penalty", type=float, default=None,
                        help="GNMT length penalty alpha for beam search (local --model only; default: the "
                             "model's decode.length_penalty, 0); > 0 favours longer outputs")
    _add_rerank_arguments(parser)
    parser.add_argument("--batch-size", type=int, default=64, help=BATCH_SIZE_HELP)
    parser.add_argument("--timeout", type=float, default=30.0, help="gRPC deadline per request (seconds)")
    tls = parser.add_argument_group("TLS (with --server; like TF Serving's --ssl_config_file on the server)")
    tls.add_argument("--tls", action="store_true", help="TLS with the system's root certificates")
    tls.add_argument("--tls-ca", default=None, help="CA certificate (PEM) that signed the server's certificate")
    tls.add_argument("--tls-cert", default=None, help="client certificate (PEM), for servers requiring mutual TLS")
    tls.add_argument("--tls-key", default=None, help="client private key (PEM), with --tls-cert")
    tls.add_argument("--tls-server-name", default=None, help="name to check the server certificate against")
    parser.add_argument("--output", default=None, help="output text file")
    parser.set_defaults(handler=_run_generate)


def _local_generation(args, needs_text: bool):
    """(examples, texts, plans, number of distinct inputs read) of a run directory."""
    import dataclasses

    from tablegen_tf import inference

    trained = _load_runs(args)
    weights = getattr(trained.model, "member_weights", None)
    print(f"model: {trained.checkpoint} ({trained.family.name})"
          + (f", weights {' '.join(f'{w:.3g}' for w in weights)}" if weights else ""), flush=True)
    raws, rejected = inference.read_inputs(args.format, args.input, args.split,
                                           getattr(args, "selection_fraction", 0.0))
    if getattr(args, "limit", 0):
        raws = raws[: args.limit]
    examples, unbuilt = inference.build(raws, trained.config.tokenizer, needs_text=needs_text)
    for rejection in rejected + unbuilt:
        print(f"rejected {rejection.file}:{rejection.line}: {rejection.reason}", file=sys.stderr)
    decode = dataclasses.replace(trained.config.decode, **_decode_overrides(args))
    texts, plans = inference.generate_texts_and_plans(
        trained.model, trained.featurizer, examples, decode, args.batch_size)
    args.trained = trained  # evaluate scores the model's perplexity too
    return examples, texts, plans, len(raws) + len(rejected)


def _decode_overrides(args) -> dict:
    """decode config fields the command line sets."""
    overrides = {key: value for key, value in (("beam_size", args.beam_size), ("max_length", args.max_length)) if value}
    for key in ("length_penalty", "slot_rerank_weight", "coverage_rerank_weight", "slot_end_penalty",
                "no_repeat_ngram_size", "pragmatic_alpha", "mbr_weight", "mbr_samples", "mbr_epsilon", "mbr_references", "mbr_seed",
                "mbr_rows", "parallel_searches"):
        if getattr(args, key, None) is not None:
            overrides[key] = getattr(args, key)
    return overrides


def _report_shortfall(command: str, written: int, read: int) -> int:
    """Exit code: 0 if every input got a line, else 1 with a message saying so."""
    if written == read and read:
        return 0
    print(f"tablegen {command}: error: wrote {written} lines for {read} inputs "
          f"({read - written} rejected, see the messages above)", file=sys.stderr)
    return 1


def _write_lines(path: str, lines) -> None:
    # --output may name a new directory (runs/x/dev.txt): the decoding before this took minutes
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        for line in lines:
            handle.write(line.replace("\n", " ") + "\n")


def _nan_to_none(value):
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {key: _nan_to_none(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_nan_to_none(item) for item in value]
    return value


def _run_evaluate(args, _extra) -> int:
    import json

    from tablegen_tf import inference

    examples, texts, plans, read = _local_generation(args, needs_text=True)
    if args.output:
        _write_lines(args.output, texts)
    if not examples:
        print("tablegen evaluate: error: no input with a reference text to score against "
              "(evaluate needs references; `tablegen generate` does not)", file=sys.stderr)
        return 1
    scores = inference.evaluate(examples, texts, plans, model=args.trained.model,
                                featurizer=args.trained.featurizer, batch_size=args.batch_size,
                                format_name=args.format)
    # A metric with nothing to measure is NaN (e.g. no numbers stated): null in JSON, which
    # strict parsers accept (json.dumps would write the non-standard NaN).
    print(json.dumps(_nan_to_none(scores), indent=2))
    return _report_shortfall("evaluate", len(texts), read)


def _run_generate(args, _extra) -> int:
    if (args.ensemble or args.ensemble_weights) and (args.server or args.word or not args.model):
        flag = "--ensemble" if args.ensemble else "--ensemble-weights"
        raise CommandError(f"{flag} decodes local runs with --model (export the ensemble with "
                           "`tablegen export --model RUN --ensemble RUN ... [--ensemble-weights W ...]` to serve it)")
    if args.word and args.model:
        from tablegen_tf.inference import generate_around

        lines = generate_around(args.model, args.word, args.beam_size, args.max_length, args.length_penalty)
        _write_lines(args.output, lines) if args.output else print("\n".join(lines))
        return 0
    if not (args.format and args.input and args.output):
        raise CommandError("pass --format, --input and --output (or --model RUN --word WORD)")
    if args.server:
        from serving.client import generate_for_corpus

        texts, read = generate_for_corpus(args)
    elif args.model:
        _, texts, _, read = _local_generation(args, needs_text=False)
    else:
        raise CommandError("pass --model DIR or --server HOST:PORT --model-name NAME")
    _write_lines(args.output, texts)
    print(f"wrote {len(texts)} lines to {args.output}")
    return _report_shortfall("generate", len(texts), read)


def _add_export(subparsers) -> None:
    parser = subparsers.add_parser(
        "export",
        help="export a trained run as a SavedModel for TF Serving",
        description="Writes a SavedModel whose serving_default signature takes `tables` (JSONL table "
        "strings) and returns `text` and `score`; a `generate` signature adds beam_size, max_length "
        "and must_include. With --serving-base the model goes to BASE/NAME/<next version>/ "
        "(TF Serving's layout). Decoding is the run's decode config unless the decoding flags below "
        "replace it (as `tablegen evaluate`'s do), e.g. for a run trained with greedy validations.",
    )
    parser.add_argument("--model", required=True, help="run directory written by `tablegen train`")
    _add_ensemble_argument(parser)
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--output", help="SavedModel directory")
    target.add_argument("--serving-base", help="serving base path (with --model-name)")
    parser.add_argument("--model-name", default="tablegen", help="served model name (default tablegen)")
    parser.add_argument("--beam-size", type=_bounded(DecodeConfig, "beam_size"), default=None,
                        help="serving_default's beam (default: the run's decode config)")
    parser.add_argument("--max-length", type=_bounded(DecodeConfig, "max_length"), default=None,
                        help="maximum output tokens")
    parser.add_argument("--length-penalty", type=float, default=None,
                        help="GNMT length penalty alpha for beam search (default: the run's decode config)")
    _add_rerank_arguments(parser)
    parser.add_argument("--parallel-searches", type=_bounded(DecodeConfig, "parallel_searches"), default=None,
                        help="a batch of 16 or more tables is searched as this many parts side by side "
                             "(default: the run's decode.parallel_searches, 2; 1 = one search, e.g. for a GPU)")
    parser.set_defaults(handler=_run_export)


def _run_export(args, _extra) -> int:
    import time

    from tablegen_tf.export import export_saved_model, next_version_dir
    from tablegen_tf.progress import format_duration

    _check_ensemble_weights(args)
    if args.output:
        target = args.output
    else:
        target = next_version_dir(os.path.join(args.serving_base, args.model_name))
    # Write beside, then rename: a polling server never sees a half-written version.
    staging = target.rstrip("/") + ".tmp"
    members = " + ".join([args.model, *args.ensemble])
    # Tracing every signature (beam search, reranking, warm-up requests) takes minutes on 2 cores.
    print(f"exporting {members}: tracing the serving signatures ...", flush=True)
    started = time.monotonic()
    export_saved_model(args.model, staging, ensemble=args.ensemble, model_name=args.model_name,
                       decode_overrides=_decode_overrides(args), ensemble_weights=args.ensemble_weights)
    os.replace(staging, target)
    print(f"exported {members} -> {target} in {format_duration(time.monotonic() - started)}")
    return 0


def _add_average(subparsers) -> None:
    parser = subparsers.add_parser(
        "average",
        help="average the last N training checkpoints of a run into a new run directory",
        description="Writes OUT (config, vocabularies, best/) whose weights are the mean of MODEL's last "
        "N checkpoints in MODEL/checkpoints (a run keeps train.keep_checkpoints of them); evaluate, "
        "export and serve take OUT like any run. Choose N on a selection split, not on dev.",
    )
    parser.add_argument("--model", required=True, help="run directory written by `tablegen train`")
    parser.add_argument("--last", type=int, default=3, help="how many of the newest checkpoints (default 3)")
    parser.add_argument("--out", required=True, help="new run directory")
    parser.set_defaults(handler=_run_average)


def _run_average(args, _extra) -> int:
    from tablegen_tf.training.averaging import average_checkpoints

    with _reported(FileNotFoundError):
        path = average_checkpoints(args.model, args.last, args.out)
    print(f"averaged the last {args.last} checkpoints of {args.model} -> {path}")
    return 0


def _add_embeddings(subparsers) -> None:
    parser = subparsers.add_parser(
        "embeddings",
        help="train word embeddings (PPMI + truncated SVD) on unlabelled text",
        description="Tokenizes INPUT files (one sentence per line, .txt or .gz) with the project tokenizer, "
        "counts co-occurrences within --window tokens, and writes the rank --dim SVD of their positive PMI "
        "as a word2vec text file, for `--set model.pretrained_embeddings=OUT` (its word_dim must be --dim). "
        "Never give it the sentences you select or report on.",
    )
    parser.add_argument("--input", nargs="+", required=True, help="text files, one sentence per line")
    parser.add_argument("--out", required=True, help="the embeddings file to write")
    parser.add_argument("--dim", type=int, default=64, help="vector size (= the model's word_dim; default 64)")
    parser.add_argument("--window", type=int, default=5, help="context tokens on each side (default 5)")
    parser.add_argument("--min-count", type=int, default=2, help="rarer words get no vector (default 2)")
    parser.add_argument("--max-words", type=int, default=0, help="keep the N most frequent words (0: all)")
    parser.add_argument("--lowercase", action="store_true", help="lower-case before counting")
    parser.set_defaults(handler=_run_embeddings)


def _run_embeddings(args, _extra) -> int:
    import time

    from tablegen_tf import embeddings

    start = time.time()
    with _reported(FileNotFoundError, ValueError):
        sentences = list(embeddings.read_sentences(args.input, args.lowercase))
        words, vectors = embeddings.train_embeddings(sentences, args.dim, args.window, args.min_count,
                                                     args.max_words)
    embeddings.save_embeddings(args.out, words, vectors)
    tokens = sum(len(sentence) for sentence in sentences)
    print(f"embeddings: {len(words):,} words x {args.dim} from {len(sentences):,} sentences ({tokens:,} tokens) "
          f"in {time.time() - start:.0f}s -> {args.out}")
    return 0


def _add_syntax(subparsers) -> None:
    parser = subparsers.add_parser(
        "syntax",
        help="add dependency parses to prepared text examples (compression's syntactic scaffold)",
        description="Copies a `tablegen prepare` directory of text examples (--format compression / sentences) "
        "to --out with each source sentence's dependency parse (spaCy en_core_web_sm, "
        "tablegen_tf/syntax.py): training targets for `--set models.compression.syntax_weight=W`.",
    )
    parser.add_argument("--input", required=True, help="a prepared directory (examples-*.tfrecord.gz, vocab)")
    parser.add_argument("--out", required=True, help="the directory to write")
    parser.set_defaults(handler=_run_syntax)


def _run_syntax(args, _extra) -> int:
    import time

    from tablegen_tf import syntax

    start = time.time()
    with _reported(FileNotFoundError, ValueError, RuntimeError):
        written = syntax.annotate_directory(args.input, args.out)
    print(f"syntax: parsed {written:,} examples in {time.time() - start:.0f}s -> {args.out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tablegen",
        description="tablegen: data-to-text generation with TensorFlow, Beam, TFX and TF Serving.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_prepare(subparsers)
    _add_train(subparsers)
    _add_evaluate(subparsers)
    _add_generate(subparsers)
    _add_export(subparsers)
    _add_average(subparsers)
    _add_embeddings(subparsers)
    _add_syntax(subparsers)
    _add_config(subparsers)
    for name in QUIET_COMMANDS[:-1]:  # `config show` says nothing worth a -v
        subparsers.choices[name].add_argument(
            "-v", "--verbose", action="store_true",
            help="show every log line (TF, Beam, absl) on the console; by default they go only to the "
            "command's log file (prepare: OUTPUT/logs/prepare.log, train: OUT/logs/train.log, others: "
            "MODEL/logs/COMMAND.log)")
    from serving.server import add_serve_parser
    from tfx_pipeline.cli import add_pipeline_parser

    add_serve_parser(subparsers)
    add_pipeline_parser(subparsers)
    return parser


# Commands whose console shows only our lines, warnings and errors; everything else
# (TF C++, Beam workers, absl) goes to their log file. `pipeline run` has its own.
QUIET_COMMANDS = ("prepare", "train", "evaluate", "generate", "export", "average", "embeddings", "syntax", "models",
                  "config")


def _log_file(args) -> Optional[str]:
    """Where a quiet command keeps its full log: in the directory it writes or reads."""
    if args.command == "prepare":
        return os.path.join(args.output, "logs", "prepare.log")
    if args.command == "train" and tf_config_worker():  # a multi-worker run's worker K > 0
        return worker_log(args.out, tf_config_worker())
    if args.command in ("train", "average"):
        return os.path.join(args.out, "logs", f"{args.command}.log")
    if getattr(args, "model", None) and os.path.isdir(args.model):
        return os.path.join(args.model, "logs", f"{args.command}.log")
    output = getattr(args, "output", None)
    return f"{output}.log" if output else None


def _run_quietly(args, extra: List[str]) -> int:
    from tablegen_tf import logs

    log_file = _log_file(args)
    verbose = getattr(args, "verbose", False)
    with logs.session(verbose, log_file) as console, \
            contextlib.redirect_stdout(console.out), contextlib.redirect_stderr(console.err):
        code = _handled(args, lambda: args.handler(args, extra))
    if code and log_file and not verbose and os.path.exists(log_file):
        print(f"tablegen {args.command}: full log in {log_file}", file=sys.stderr)
    return code


class CommandError(Exception):
    """What the user has to change (a flag, an input, a setting): reported as
    "tablegen COMMAND: error: MESSAGE" with exit code 2, without a traceback."""


@contextlib.contextmanager
def _reported(*errors):
    """Inside, the exceptions ``errors`` become CommandErrors (their message as is)."""
    try:
        yield
    except errors as error:
        raise CommandError(str(error)) from error


def _handled(args, run) -> int:
    """``run()``'s exit code; a CommandError or ConfigError (e.g. a setting out of range,
    found once a run's config is read) is the command's error message and exit code 2."""
    try:
        return run()
    except (CommandError, ConfigError) as error:
        print(f"tablegen {_command_name(args)}: error: {error}", file=sys.stderr)
        return 2


def _command_name(args) -> str:
    """"train", "config show", "pipeline run": the words the user typed before the flags."""
    action = getattr(args, "action", None) or getattr(args, "pipeline_command", None)
    return " ".join(filter(None, (args.command, action)))


class Terminated(SystemExit):
    """SIGTERM reached the command (``except Exception`` blocks let it through)."""


@contextlib.contextmanager
def _stop_on_sigterm():
    """While the command runs, SIGTERM (a scheduler, `kill`, a pod's shutdown) raises
    ``Terminated`` in the main thread, so ``finally`` blocks run: the private temp dir is
    removed and the logs are closed; by default the process would die on the spot. Training
    resumes from its last checkpoint either way. Commands with handlers of their own
    (`serve`, the workers' launcher) replace this one; the previous handler is restored."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def stop(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends it at once
        raise Terminated(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "prepare":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        # Beam and autograph litter the temp dir (a Beam dir per prepare): a private one, removed.
        with _stop_on_sigterm(), private_tempdir():
            return _run(parser, args, extra, argv)
    except Terminated as stopped:
        print(f"tablegen {args.command}: stopped by SIGTERM", file=sys.stderr)
        return stopped.code
    except BrokenPipeError:
        # The reader went away (`tablegen models | head`): stop quietly, as Unix tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def _run(parser, args, extra, argv) -> int:
    if args.command == "train" and args.workers != 1:
        if args.workers < 1:
            parser.error("--workers: at least 1")
        # Not under the quiet session: the chief's console passes through as is.
        return workers.run(sys.argv[1:] if argv is None else list(argv), args.workers, args.out)
    if args.command in QUIET_COMMANDS:
        return _run_quietly(args, extra)
    return _handled(args, lambda: args.handler(args, extra))


if __name__ == "__main__":
    sys.exit(main())
