"""Training of any model family: custom loop under a tf.distribute strategy, checkpoints
with resume, early stopping on validation BLEU, TensorBoard summaries and progress.

The family (``config.model.name``, tablegen_tf.models) supplies the model and the
featurizer; the typed Config (tablegen_tf.config) the rest:
  data:   train / valid directories written by `tablegen prepare`, batching
  train:  optimizer, budget (max_steps; max_minutes is a cap), seed, eval and checkpoint
          cadence, early stopping, strategy, optional TBPTT (t1, t2)
  decode: beam size, max length, length penalty (validation and export)
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import time
from typing import Callable, Dict, List, Optional, Tuple

import logging

import keras
import numpy as np
import tensorflow as tf

from tablegen_tf.constants import COUNTS_SUFFIX
from tablegen_tf.config import Config, ConfigError, OptimizerConfig, load_run_config, save_run_config
from tablegen_tf.data import input_pipeline as ip
from tablegen_tf.generation import generate_text
from tablegen_tf.models import get_family
from tablegen_tf.progress import Progress
from tablegen_tf.training.lr_schedule import is_scheduled, schedule_factor

_log = logging.getLogger(__name__)

CHECKPOINTS = "checkpoints"
BEST = "best"
LOGS = "logs"
PREPARED_METADATA = "metadata.json"  # written by `tablegen prepare`


@dataclasses.dataclass
class TrainResult:
    steps: int
    best_bleu: float
    best_step: int
    stopped_because: str
    seconds: float
    tokens_per_second: float
    examples_seen: int = 0  # by this worker, this session (its share with several workers)


def variables_checkpoint(model, optimizer=None, **extra) -> tf.train.Checkpoint:
    """A checkpoint keyed by each variable's Keras path.

    Keras 3 layers keep some variables in lists/dicts, which tf.train.Checkpoint's
    object graph does not follow; keying by path tracks every variable and stays
    stable across processes that build the same model.
    """
    tracked = {f"model.{v.path.replace('/', '.')}": v for v in model.weights}
    if len(tracked) != len(model.weights):
        raise ValueError("model variable paths are not unique; cannot checkpoint by path")
    if optimizer is not None:  # a training checkpoint: everything a bitwise resume needs
        tracked.update({f"optimizer.{i}": v for i, v in enumerate(optimizer.variables)})
        tracked.update({f"rng.{i}": v for i, v in enumerate(seed_states(model))})
    return tf.train.Checkpoint(**tracked, **extra)


def seed_states(model) -> List:
    """The dropout seed generators' states: variables, but not weights (Keras 3), so a
    resumed run draws the same dropout masks as an uninterrupted one."""
    weights = {id(v) for v in model.weights}
    return [v for v in model.variables if id(v) not in weights]


OPTIMIZERS = ("adam", "rmsprop", "sgd")


def make_optimizer(config: OptimizerConfig) -> keras.optimizers.Optimizer:
    if config.name not in OPTIMIZERS:
        raise ConfigError(f"train.optimizer.name: unknown optimizer {config.name!r}: one of {', '.join(OPTIMIZERS)}")
    # global_clipnorm clips the aggregated gradient, the same under any strategy;
    # clipvalue > 0 clips element-wise instead (Keras allows one of the two).
    options = {"clipvalue": config.clipvalue} if config.clipvalue > 0 else {"global_clipnorm": config.clipnorm}
    if config.ema_momentum > 0:  # the averages are optimizer variables: training checkpoints keep them
        options.update(use_ema=True, ema_momentum=config.ema_momentum)
    if config.name == "rmsprop":  # Mou et al.
        return keras.optimizers.RMSprop(learning_rate=config.learning_rate, rho=config.rho, epsilon=1e-8, **options)
    if config.name == "sgd":  # plain SGD (Lebret et al. 2016)
        return keras.optimizers.SGD(learning_rate=config.learning_rate, **options)
    return keras.optimizers.Adam(learning_rate=config.learning_rate, **options)


def make_strategy(name: str) -> tf.distribute.Strategy:
    """default: one device; mirrored: every local GPU (or CPU) of this host;
    multi_worker_mirrored: the workers TF_CONFIG names, e.g. the ones `tablegen train
    --workers N` starts (one per host, or N on loopback ports). Created before any other
    TensorFlow op: MultiWorkerMirroredStrategy must configure the runtime first."""
    if name in ("", "default", None):
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multi_worker_mirrored":
        return tf.distribute.MultiWorkerMirroredStrategy()
    raise ConfigError(f"train.strategy: unknown strategy {name!r}: use default, mirrored or multi_worker_mirrored")


def worker_index_and_count(strategy: tf.distribute.Strategy) -> Tuple[int, int]:
    """(this worker's index, number of workers): (0, 1) unless multi-worker."""
    resolver = getattr(strategy, "cluster_resolver", None)
    cluster = resolver.cluster_spec().as_dict() if resolver is not None else {}
    if not cluster:
        return 0, 1
    return int(resolver.task_id or 0), sum(len(tasks) for kind, tasks in cluster.items() if kind in ("chief", "worker"))


def replica_slice(batch: Dict[str, tf.Tensor], replica: tf.Tensor, replicas: int) -> Dict[str, tf.Tensor]:
    """Rows [replica*B/R, (replica+1)*B/R) of a global batch of B rows: every replica's
    share of the same global batch one device would train on, padding unchanged."""
    rows = tf.shape(batch["target_mask"], out_type=tf.int64)[0]
    begin, end = replica * rows // replicas, (replica + 1) * rows // replicas
    return tf.nest.map_structure(lambda tensor: tensor[begin:end], batch)


def vocab_dir(config: Config) -> str:
    return config.data.vocab or os.path.join(config.data.train, "vocab")


def copy_vocabularies(source: str, target: str) -> str:
    """The run directory keeps its own vocabularies, and their counts where the source has them
    (word hiding and Table NLM's rare fields read them): it is self-contained for export."""
    if os.path.abspath(source) != os.path.abspath(target):
        tf.io.gfile.makedirs(target)
        for name in ip.VOCAB_NAMES:
            tf.io.gfile.copy(os.path.join(source, f"{name}.txt"), os.path.join(target, f"{name}.txt"), overwrite=True)
            counts = os.path.join(source, name + COUNTS_SUFFIX)
            if tf.io.gfile.exists(counts):
                tf.io.gfile.copy(counts, os.path.join(target, name + COUNTS_SUFFIX), overwrite=True)
    return os.path.abspath(target)


def load_vocabularies(config: Config) -> ip.Vocabularies:
    return ip.Vocabularies.load(vocab_dir(config), config.data.max_words)


def vocab_sizes(vocabs: ip.Vocabularies) -> Dict[str, int]:
    return {name: vocabs.size(name) for name in ip.VOCAB_NAMES}


def check_prepared(config: Config) -> None:
    """data.train / data.valid / the vocabularies are what `tablegen prepare` writes: a clear
    error naming the setting and the missing file, before the run directory is touched."""
    for key in ("train", "valid"):
        data_dir = getattr(config.data, key)
        if not data_dir:
            continue
        try:  # a directory, or a file pattern (TFX's split URIs)
            ip.list_files(data_dir)
        except FileNotFoundError as error:
            raise ConfigError(f"data.{key}: {error} (write the split with `tablegen prepare`)") from None
    source = vocab_dir(config)
    missing = [name for name in ip.VOCAB_NAMES if not tf.io.gfile.exists(os.path.join(source, f"{name}.txt"))]
    if missing:
        key = "data.vocab" if config.data.vocab else "data.train"
        raise ConfigError(f"{key}: no vocabulary {os.path.join(source, missing[0])}.txt (`tablegen prepare` "
                          "writes the vocabularies into the training split's vocab/)")


def check_example_form(family, data_dir: Optional[str]) -> None:
    """The prepared directory holds the example form the family reads (clear error if not)."""
    path = os.path.join(data_dir or "", PREPARED_METADATA)
    if not data_dir or not tf.io.gfile.exists(path):
        return
    with tf.io.gfile.GFile(path) as handle:
        form = json.load(handle).get("example_form", "table")
    if form != family.example_form:
        raise ConfigError(f"model {family.name!r} reads {family.example_form} examples, but {data_dir} holds "
                          f"{form} examples (prepare it with a {family.example_form} format)")


def read_references(featurizer, data_dir: str) -> Dict[str, List[str]]:
    """example_id -> raw references, for scoring generated text."""
    references = {}
    for record in tf.data.TFRecordDataset(ip.list_files(data_dir), compression_type="GZIP"):
        example = featurizer.parse_example(record.numpy())
        references[example.example_id] = example.all_references()
    return references


@dataclasses.dataclass
class Trained:
    config: Config
    vocabs: ip.Vocabularies
    family: object
    featurizer: object
    model: keras.Model
    checkpoint: str


class Trainer:
    def __init__(self, config: Config, output_dir: str, strategy: Optional[tf.distribute.Strategy] = None):
        self.strategy = strategy or make_strategy(config.train.strategy)
        # Only the chief (worker 0) writes to the run directory: checkpoints, summaries,
        # config, vocabularies. The other workers compute the same steps and write nothing.
        self.worker, self.workers = worker_index_and_count(self.strategy)
        self.is_chief = self.worker == 0
        self.family = get_family(config.model.name)
        check_prepared(config)
        for data_dir in (config.data.train, config.data.valid):
            check_example_form(self.family, data_dir)
        if self.is_chief:
            os.makedirs(output_dir, exist_ok=True)
            vocab = copy_vocabularies(vocab_dir(config), os.path.join(output_dir, "vocab"))
            config = config.replace(data=dataclasses.replace(config.data, vocab=vocab))
        self.config = config
        self.output_dir = output_dir
        self._say: Callable[[str], None] = _log.info  # train() shows these on its progress line
        self.train_config = config.train
        self.scheduled = is_scheduled(self.train_config.optimizer)
        self.decode_config = config.decode
        self.vocabs = load_vocabularies(config)
        self.featurizer = self.family.featurizer(self.vocabs, config)
        if self.is_chief:
            save_run_config(config, output_dir)
        keras.utils.set_random_seed(self.train_config.seed)  # initialisation; input order is seeded below
        with self.strategy.scope():
            self.model = self.family.build_model(config, vocab_sizes(self.vocabs))
            self._load_pretrained_embeddings()  # before the optimizer: a frozen table is not trainable
            self.optimizer = make_optimizer(self.train_config.optimizer)
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
            self.best_bleu = tf.Variable(-1.0, dtype=tf.float32, trainable=False, name="best_bleu")
            self.best_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="best_step")
            # early-stopping counter and the step last validated: resumed, not recounted
            self.since_best = tf.Variable(0, dtype=tf.int64, trainable=False, name="since_best")
            self.validated_step = tf.Variable(-1, dtype=tf.int64, trainable=False, name="validated_step")
            # With a schedule, decay on plateau scales the curve: the product of its factors
            # (checkpointed only then, so constant-rate runs resume from older checkpoints).
            self.lr_scale = tf.Variable(1.0, dtype=tf.float32, trainable=False, name="learning_rate_scale")
            self._build_variables()
        checkpoint = variables_checkpoint(
            self.model, self.optimizer, step=self.step, best_bleu=self.best_bleu, best_step=self.best_step,
            since_best=self.since_best, validated_step=self.validated_step,
            **({"learning_rate_scale": self.lr_scale} if self.scheduled else {}),
        )
        self.manager = tf.train.CheckpointManager(
            checkpoint, os.path.join(output_dir, CHECKPOINTS),
            max_to_keep=self.train_config.keep_checkpoints,
        )
        self.best_manager = tf.train.CheckpointManager(
            variables_checkpoint(self.model, step=self.step), os.path.join(output_dir, BEST), max_to_keep=1
        )
        # Traced once per run, not at every validation (shapes vary: reduce_retracing).
        self._eval_loss_fn = tf.function(lambda batch: self.model.compute_loss_from_batch(batch, training=False),
                                         reduce_retracing=True)
        self._generate_fn = tf.function(
            lambda batch: generate_text(self.model, self.featurizer, batch, self.decode_config)[0],
            reduce_retracing=True)
        self.writers = {
            name: tf.summary.create_file_writer(os.path.join(output_dir, LOGS, name)) if self.is_chief
            else tf.summary.create_noop_writer() for name in ("train", "valid")
        }

    def _load_pretrained_embeddings(self):
        """``model.pretrained_embeddings``: the word table's initial rows (a resumed or
        warm-started run then restores its own weights over them)."""
        path = getattr(self.config.model, "pretrained_embeddings", "")
        if path:
            from tablegen_tf.embeddings import initialise_word_embeddings

            self._say(initialise_word_embeddings(self.model, self.vocabs.tokens["words"], path,
                                                 freeze=getattr(self.config.model, "freeze_embeddings", False)))

    def _build_variables(self):
        """Creates model and optimizer variables so checkpoints restore eagerly."""
        if not self.model.built:
            self.model.build()
        self.optimizer.build(self.model.trainable_variables)

    def dataset(self, data_dir: str, training: bool) -> tf.data.Dataset:
        return self.featurizer.dataset(data_dir, training, seed=self.train_config.seed)

    def restore(self, warm_start_from: Optional[str] = None) -> str:
        """Resumes from our own latest checkpoint, else warm-starts weights from another run."""
        resumed = self._restore_latest_readable()
        if resumed:
            return f"resumed from {resumed} at step {int(self.step.numpy()):,}"
        if warm_start_from:
            path = tf.train.latest_checkpoint(os.path.join(warm_start_from, BEST)) or tf.train.latest_checkpoint(
                os.path.join(warm_start_from, CHECKPOINTS)
            )
            if path:
                variables_checkpoint(self.model).restore(path).expect_partial().assert_existing_objects_matched()
                return f"warm-started weights from {path}"
        return "initialised from scratch"

    def _restore_latest_readable(self) -> Optional[str]:
        """The newest training checkpoint that restores; an unreadable one (a disk error, a
        truncated file) is skipped with a warning naming it."""
        for path in reversed(self.manager.checkpoints):
            try:
                self.manager.checkpoint.restore(path).assert_existing_objects_matched()
                return path
            except (tf.errors.OpError, ValueError, AssertionError) as error:
                reason = str(error).strip().splitlines()[0][:200] if str(error).strip() else type(error).__name__
                _log.warning("checkpoint %s is unreadable (%s); falling back to the previous one", path, reason)
        return None

    def _train_step_fn(self):
        tbptt = self.train_config.tbptt
        model, optimizer, strategy = self.model, self.optimizer, self.strategy
        if tbptt and not model.supports_tbptt:
            raise ConfigError(f"train.tbptt: model {self.family.name!r} does not support truncated BPTT")

        replicas = strategy.num_replicas_in_sync

        def global_token_share(batch):
            """This replica's share of the global batch's target tokens: each replica's mean
            loss weighted by it sums to the mean over the global batch, the loss one device
            computes on the whole batch (tf.distribute sums the replicas' gradients)."""
            if replicas == 1:
                return None  # the plain loss: bitwise what the single-device trainer computes
            tokens = tf.reduce_sum(tf.cast(batch["target_mask"], tf.float32))
            return tokens / tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, tokens)

        def replica_step(batch):
            share = global_token_share(batch)
            if tbptt:
                loss, grads = model.tbptt_loss_and_gradients(batch, tbptt.t1, tbptt.t2, training=True)
                if share is not None:
                    grads = [g * share if g is not None else None for g in grads]
            else:
                with tf.GradientTape() as tape:
                    loss = model.compute_loss_from_batch(batch, training=True)
                    scaled = loss if share is None else loss * share
                grads = tape.gradient(scaled, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            tokens = tf.reduce_sum(tf.cast(batch["target_mask"], tf.int64))
            return loss if share is None else loss * share, tokens, batch["example_id"]

        @tf.function
        def train_step(iterator):
            loss, tokens, example_ids = strategy.run(replica_step, args=(next(iterator),))
            return (
                strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None),
                strategy.reduce(tf.distribute.ReduceOp.SUM, tokens, axis=None),
                tf.concat(strategy.experimental_local_results(example_ids), axis=0),  # this worker's rows
            )

        return train_step

    def _training_batches(self, start_step: int):
        """An iterator over the seeded global batches from ``start_step`` on (a resume
        continues the same order). With R replicas, every worker reads the same global
        batches and keeps its replicas' rows (replica_slice): the replicas together train
        on exactly the batch one device would, so losses match across topologies."""
        replicas = self.strategy.num_replicas_in_sync

        def global_batches():
            dataset = self.dataset(self.config.data.train, training=True)
            if replicas > 1:  # a bucket's last batch of an epoch can be too small to split
                dataset = dataset.filter(lambda batch: tf.shape(batch["target_mask"])[0] >= replicas)
            return dataset.repeat().skip(start_step)

        if replicas == 1:
            return iter(self.strategy.experimental_distribute_dataset(global_batches()))

        def worker_batches(context: tf.distribute.InputContext) -> tf.data.Dataset:
            local = replicas // context.num_input_pipelines
            first = context.input_pipeline_id * local
            # one element per local replica, in replica order (how they are handed out)
            return global_batches().flat_map(lambda batch: tf.data.Dataset.range(first, first + local).map(
                lambda replica: replica_slice(batch, replica, replicas)))

        return iter(self.strategy.distribute_datasets_from_function(worker_batches))

    def _all_workers_agree(self, local: bool) -> bool:
        """True when any worker says so: the workers must stop at the same step (a worker
        that stopped alone would leave the others waiting in their next collective)."""
        if self.workers == 1:
            return local
        if not hasattr(self, "_count_votes"):
            strategy = self.strategy
            self._count_votes = tf.function(lambda vote: strategy.reduce(
                tf.distribute.ReduceOp.SUM, strategy.run(tf.identity, args=(vote,)), axis=None))
        return bool(self._count_votes(tf.constant(1.0 if local else 0.0)) > 0)

    def _save(self, manager: tf.train.CheckpointManager, step: int) -> None:
        if self.is_chief:
            manager.save(checkpoint_number=step)

    def _eval_loss(self, data_dir: str, max_batches: int) -> float:
        total, count = 0.0, 0
        loss_fn = self._eval_loss_fn
        for batch in self.dataset(data_dir, training=False).take(max_batches):
            total += float(loss_fn(batch))
            count += 1
        return total / max(count, 1)

    def generate(self, data_dir: str, max_examples: int = 0) -> Dict[str, str]:
        """example_id -> detokenized text for a prepared directory."""
        run = self._generate_fn

        outputs: Dict[str, str] = {}
        for batch in self.dataset(data_dir, training=False):
            texts = run(batch).numpy()
            for example_id, text in zip(batch["example_id"].numpy(), texts):
                outputs[example_id.decode("utf-8")] = text.decode("utf-8")
            if max_examples and len(outputs) >= max_examples:
                break
        return outputs

    def validate(self, references: Dict[str, List[str]]) -> Dict[str, float]:
        from tablegen_tf.metrics import corpus_scores

        valid_dir = self.config.data.valid
        outputs = self.generate(valid_dir, self.train_config.eval_max_examples)
        ids = sorted(outputs)
        scores = corpus_scores([outputs[i] for i in ids], [references[i] for i in ids])
        scores["loss"] = self._eval_loss(valid_dir, self.train_config.eval_loss_batches)
        scores["perplexity"] = math.exp(min(scores["loss"], 50.0))
        self._log_samples(outputs, references, ids[:3])
        return scores

    def _log_samples(self, outputs, references, ids):
        lines = [f"**{i}**\n\n    generated: {outputs[i]}\n\n    reference: {references[i][0]}" for i in ids]
        with self.writers["valid"].as_default(step=int(self.step.numpy())):
            tf.summary.text("samples", "\n\n".join(lines))

    def train(self, warm_start_from: Optional[str] = None, progress: bool = True,
              reporter: Optional[Callable[[int, Optional[int], Dict[str, float]], None]] = None) -> TrainResult:
        """Trains to the budget. ``reporter(step, max_steps, {"loss", "tokens_per_second"})``
        is called every ``train.log_every_steps`` steps (e.g. a pipeline's progress line);
        without one, ``progress`` shows a tablegen_tf.progress line on stdout."""
        cfg = self.train_config
        max_steps = cfg.max_steps or None
        bar = Progress("train", total=max_steps) if reporter is None and progress else None
        reporter = bar.report if bar is not None else reporter
        self._say = bar.message if bar is not None else _log.info
        self._say(f"tablegen train: {self.restore(warm_start_from)}")
        max_seconds = cfg.max_minutes * 60 or None
        eval_every, save_every = cfg.eval_every_steps, cfg.checkpoint_every_steps
        patience, log_every = cfg.early_stopping_patience, cfg.log_every_steps
        decay_at = set(cfg.decay_at_steps)
        valid = self.config.data.valid
        references = read_references(self.featurizer, valid) if valid else None

        # The seeded input order continues where the checkpoint left it (a bitwise resume).
        iterator = self._training_batches(int(self.step.numpy()))
        train_step = self._train_step_fn()
        start, tokens_seen, examples_seen, stopped = time.time(), 0, 0, "budget"
        window_start, window_tokens = time.time(), 0
        while True:
            step = int(self.step.numpy())
            if max_steps and step >= max_steps:
                stopped = "max_steps"
                break
            if max_seconds and self._all_workers_agree(time.time() - start >= max_seconds):
                stopped = "max_minutes"
                break
            if self.scheduled:
                self._set_scheduled_learning_rate(step)
            # tf.summary calls inside a family's loss go to logs/train every log_every steps
            with self.writers["train"].as_default(step=self.step), tf.summary.record_if(
                    lambda: tf.equal((self.step + 1) % log_every, 0)):
                loss, tokens, example_ids = train_step(iterator)
            self.step.assign_add(1)
            tokens_seen += int(tokens)
            window_tokens += int(tokens)
            examples_seen += int(example_ids.shape[0])
            step += 1
            if step in decay_at:
                self._decay_learning_rate()
            if step % log_every == 0:
                self._log_examples(step, example_ids)
                elapsed = time.time() - window_start
                rate = window_tokens / max(elapsed, 1e-9)
                if reporter is not None:
                    reporter(step, max_steps, {"loss": float(loss), "tokens_per_second": rate})
                with self.writers["train"].as_default(step=step):
                    tf.summary.scalar("loss", loss)
                    tf.summary.scalar("perplexity", tf.exp(tf.minimum(loss, 50.0)))
                    tf.summary.scalar("learning_rate", self._learning_rate())
                    tf.summary.scalar("tokens_per_second", rate)
                window_start, window_tokens = time.time(), 0
            # Validate before saving: a checkpoint at a validation step holds its outcome
            # (best, patience, decayed learning rate), so a kill in between repeats both.
            if references is not None and step % eval_every == 0:
                self._validate_step(references, step)
                if patience and int(self.since_best.numpy()) >= patience:
                    stopped = "early_stopping"
                    break
            if step % save_every == 0:
                self._save(self.manager, step)
        step = int(self.step.numpy())
        if references is not None and int(self.validated_step.numpy()) != step:
            self._validate_step(references, step)
        elif references is None:
            with self._averaged_weights():
                self._save(self.best_manager, step)
        self._save(self.manager, step)
        seconds = time.time() - start
        for writer in self.writers.values():
            writer.flush()
        if bar is not None:
            bar.close()
        if self.workers > 1:
            self._say(f"tablegen train: worker {self.worker} of {self.workers} trained on {examples_seen:,} examples "
                      f"(its share of the global batches of this session)")
        return TrainResult(
            steps=step, best_bleu=float(self.best_bleu.numpy()), best_step=int(self.best_step.numpy()),
            stopped_because=stopped, seconds=round(seconds, 1),
            tokens_per_second=round(tokens_seen / max(seconds, 1e-9), 1), examples_seen=examples_seen,
        )

    def _log_examples(self, step: int, example_ids) -> None:
        """Which examples this worker trained on at ``step`` (the log file, not the console):
        with several workers, each worker's line names its share of the global batch."""
        ids = " ".join(i.decode("utf-8") for i in example_ids.numpy())
        _log.debug("step %d: worker %d of %d trained on %d examples: %s", step, self.worker, self.workers,
                   int(example_ids.shape[0]), ids)

    def _validate_step(self, references, step: int) -> None:
        improved = self._evaluate_and_keep_best(references, step)
        self.since_best.assign(0 if improved else self.since_best + 1)
        self.validated_step.assign(step)

    def _decay_learning_rate(self) -> None:
        """OpenNMT-style decay on plateau: no BLEU gain at an evaluation -> lr *= factor."""
        factor = self.train_config.decay_on_plateau
        if 0 < factor < 1:
            if self.scheduled:
                self.lr_scale.assign(self.lr_scale * factor)
            else:
                self.optimizer.learning_rate.assign(self._learning_rate() * factor)

    def _set_scheduled_learning_rate(self, step: int) -> None:
        """The rate for the update at ``step``: a function of the step, so a resume replays it."""
        config = self.train_config.optimizer
        factor = schedule_factor(config, step, self.train_config.max_steps)
        self.optimizer.learning_rate.assign(config.learning_rate * factor * float(self.lr_scale.numpy()))

    def _log_attention(self, step: int, tables: int = 3) -> None:
        """Copy-attention heatmaps (target steps x records) for a few validation tables."""
        batch = next(iter(self.dataset(self.config.data.valid, training=False).take(1)))
        images = self.model.summary_images(batch, tables, self.vocabs)
        with self.writers["valid"].as_default(step=step):
            for name, image in images.items():
                tf.summary.image(name, image, max_outputs=tables)

    def _learning_rate(self) -> float:
        lr = self.optimizer.learning_rate
        return float(lr.numpy() if hasattr(lr, "numpy") else lr)

    @contextlib.contextmanager
    def _averaged_weights(self):
        """With ``train.optimizer.ema_momentum``: the weights' moving averages in the model for
        the block (validation, the best checkpoint), the raw weights back after it, so training
        and a resume go on from them."""
        if not self.optimizer.use_ema:
            yield
            return
        variables = self.model.trainable_variables
        raw = [variable.numpy() for variable in variables]
        self.optimizer.finalize_variable_values(variables)
        try:
            yield
        finally:
            for variable, value in zip(variables, raw):
                variable.assign(value)

    def _evaluate_and_keep_best(self, references, step: int) -> bool:
        with self._averaged_weights():
            return self._validate_and_save_best(references, step)

    def _validate_and_save_best(self, references, step: int) -> bool:
        scores = self.validate(references)
        with self.writers["valid"].as_default(step=step):
            for name in ("bleu", "nist", "rougeL", "loss", "perplexity"):
                if name in scores and np.isfinite(scores[name]):
                    tf.summary.scalar(name, scores[name])
        self._log_attention(step)
        improved = scores["bleu"] > float(self.best_bleu.numpy())
        if improved:
            self.best_bleu.assign(scores["bleu"])
            self.best_step.assign(step)
            self._save(self.best_manager, step)
        else:
            self._decay_learning_rate()
        self._say(
            f"step {step:,}: valid BLEU {scores['bleu']:.2f} (best {float(self.best_bleu.numpy()):.2f} "
            f"at {int(self.best_step.numpy()):,}), loss {scores['loss']:.3f}")
        return improved


def load_trained(model_dir: str, max_length: Optional[int] = None) -> Trained:
    """Config, vocabularies, family, featurizer and model restored from the best (else
    latest) checkpoint of a run directory. ``max_length``: the longest search it will
    decode, when above the run's ``decode.max_length`` (which then becomes it), because
    some families size buffers by it (the transformer's key/value caches)."""
    config = load_run_config(model_dir)
    if max_length and max_length > config.decode.max_length:
        config = dataclasses.replace(config, decode=dataclasses.replace(config.decode, max_length=max_length))
    vocabs = load_vocabularies(config)
    family = get_family(config.model.name)
    model = family.build_model(config, vocab_sizes(vocabs))
    if not model.built:
        model.build()
    path = tf.train.latest_checkpoint(os.path.join(model_dir, BEST)) or tf.train.latest_checkpoint(
        os.path.join(model_dir, CHECKPOINTS)
    )
    if not path:
        raise FileNotFoundError(f"no checkpoint in {model_dir}/{BEST} or {model_dir}/{CHECKPOINTS}")
    variables_checkpoint(model).restore(path).expect_partial().assert_existing_objects_matched()
    return Trained(config, vocabs, family, family.featurizer(vocabs, config), model, path)
