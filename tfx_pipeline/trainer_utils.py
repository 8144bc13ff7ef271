"""Trainer code (``run_fn="tfx_pipeline.trainer_utils.run_fn"``): trains a tablegen model.

``fn_args.custom_config`` (from the pipeline config's ``trainer:`` section)::

    corpus: e2e                 # tablegen_tf config name or YAML path
    config: {model: ..., data: ..., train: ..., decode: ...}   # merged over it
    warm_start: true
    word_min_count: 1
    max_words: 50000

Layout of the model run dir (``fn_args.model_run_dir``, the ModelRun artifact):
``train_data/vocab/*.txt`` + ``train_data/stats.json`` (built from the train split
with ``beam_jobs.summaries``), ``vocab/`` (the vocabularies the model uses),
``checkpoints/``, ``best/``, ``logs/{train,valid}`` (TensorBoard), ``config.json``.

Warm start: we restore the *checkpoint* of the base model's run dir rather than
the variables of its SavedModel, because the trainer's checkpoints are keyed by
each variable's Keras path (``trainer.variables_checkpoint``) and so restore
exactly into a freshly built model, while a SavedModel's object graph does not
track Keras 3's list/dict-held variables. The Model artifact does not hold the
run dir, so run_fn writes ``<model uri>/tablegen_run.json`` (beside
``Format-Serving``, outside what Pusher copies) naming it. A warm-started model
keeps its base's vocabularies (embedding shapes must match); new words of the
new span are counted in the log. A different model architecture trains from
scratch instead.
"""

from __future__ import annotations

import collections
import json
import os
import types
from typing import Dict, Optional

RUN_INFO = "tablegen_run.json"
TRAIN_DATA = "train_data"


def build_vocabularies(file_pattern: str, out_dir: str, word_min_count: int, max_words: int,
                       example_class=None) -> Dict:
    """vocab/*.txt + stats.json of a split, as `tablegen prepare` writes them."""
    import tensorflow as tf

    from beam_jobs import summaries
    from tablegen_tf.data.input_pipeline import list_files
    from tablegen_tf.schema import TableExample

    example_class = example_class or TableExample
    summary = summaries.empty_summary()
    batch = []
    for record in tf.data.TFRecordDataset(list_files(file_pattern), compression_type="GZIP"):
        batch.append((example_class.parse(record.numpy()), None))
        if len(batch) == 1000:
            _merge(summary, summaries.summarize(batch))
            batch = []
    _merge(summary, summaries.summarize(batch))
    options = types.SimpleNamespace(output=out_dir, word_min_count=word_min_count, max_words=max_words)
    summaries.write_outputs(summary, options)
    return summary


def _merge(total: Dict[str, collections.Counter], part: Dict[str, collections.Counter]) -> None:
    for name, counter in part.items():
        total.setdefault(name, collections.Counter()).update(counter)


def base_run_dir(base_model: Optional[str]) -> Optional[str]:
    """The run dir recorded beside a Model artifact's Format-Serving dir, if any."""
    if not base_model:
        return None
    info = os.path.join(os.path.dirname(base_model.rstrip("/")), RUN_INFO)
    if not os.path.exists(info):
        return None
    with open(info) as handle:
        return json.load(handle)["model_run_dir"]


def warm_start_source(base_run: Optional[str], model_config) -> Optional[str]:
    """The base run dir if its model matches this architecture, else None (from scratch)."""
    from tablegen_tf.config import CONFIG_FILE, ConfigError, load_run_config

    if not base_run or not os.path.exists(os.path.join(base_run, CONFIG_FILE)):
        return None
    try:
        base_model = load_run_config(base_run).model
    except ConfigError as error:
        print(f"tablegen run_fn: base model {base_run} cannot be read ({error}): training from scratch")
        return None
    if base_model != model_config:
        print(f"tablegen run_fn: base model {base_run} has another architecture: training from scratch")
        return None
    return base_run


def training_config(fn_args, custom: Dict):
    """The tablegen Config: the corpus config, the pipeline's overrides, the split files."""
    from tablegen_tf.config import load_config

    overrides = dict(custom.get("config") or {})
    overrides["data"] = {**(overrides.get("data") or {}), "train": fn_args.train_files[0],
                         "valid": fn_args.eval_files[0]}
    config = load_config(custom.get("corpus") or None, overrides)
    if fn_args.train_steps and not config.train.max_steps:
        config.train.max_steps = int(fn_args.train_steps)
    return config


def run_fn(fn_args) -> None:
    """TFX Trainer entry point: vocab -> train (maybe warm-started) -> SavedModel."""
    from tablegen_tf.export import export_saved_model
    from tablegen_tf.models import get_family
    from tablegen_tf.training.trainer import Trainer

    custom = dict(fn_args.custom_config or {})
    run_dir = fn_args.model_run_dir
    config = training_config(fn_args, custom)
    summary = build_vocabularies(
        config.data.train, os.path.join(run_dir, TRAIN_DATA),
        int(custom.get("word_min_count", 1)), int(custom.get("max_words", 50000)),
        get_family(config.model.name).featurizer_class.example_class,
    )
    base = warm_start_source(base_run_dir(fn_args.base_model), config.model) if custom.get("warm_start", True) else None
    config.data.vocab = os.path.join(base or os.path.join(run_dir, TRAIN_DATA), "vocab")
    if base:
        _report_new_words(summary, config.data.vocab)
    result = _train(Trainer(config, run_dir), base, config.train.max_steps)
    print(f"tablegen run_fn: {result}; TensorBoard logs in {os.path.join(run_dir, 'logs')}", flush=True)
    export_saved_model(run_dir, fn_args.serving_model_dir)
    info = {"model_run_dir": run_dir, "warm_started_from": base, "steps": result.steps,
            "best_valid_bleu": result.best_bleu, "stopped_because": result.stopped_because,
            "max_steps": config.train.max_steps,
            "max_minutes": config.train.max_minutes,
            "seconds": result.seconds, "tokens_per_second": result.tokens_per_second}
    with open(os.path.join(os.path.dirname(fn_args.serving_model_dir.rstrip("/")), RUN_INFO), "w") as handle:
        json.dump(info, handle, indent=2)


def _train(trainer, base: Optional[str], max_steps: int):
    """Trains with step progress under the pipeline's active stage line."""
    from tablegen_tf import progress

    steps = progress.for_active_stage("Trainer", total=max_steps or None)
    try:
        return trainer.train(warm_start_from=base, progress=False, reporter=steps.report)
    finally:
        steps.close()


def _report_new_words(summary: Dict, vocab_dir: str) -> None:
    with open(os.path.join(vocab_dir, "words.txt"), encoding="utf-8") as handle:
        known = {line.rstrip("\n") for line in handle}
    new = [w for w in summary["words"] if w not in known]
    print(f"tablegen run_fn: warm start keeps the base vocabulary; {len(new)} word types of this "
          f"span are outside it (copied from tables or <unk>)", flush=True)
