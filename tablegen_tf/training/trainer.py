"""Training: custom loop under a tf.distribute strategy, checkpoints with resume,
early stopping on validation BLEU, TensorBoard summaries and a progress bar.

Config sections (YAML, merged over tablegen_tf/configs/defaults.yaml):
  model:  name + layer sizes (tablegen_tf.models.build_model)
  data:   train / valid directories written by `tablegen prepare`, batching
  train:  optimizer, budget (max_steps / max_minutes), eval and checkpoint cadence,
          early stopping, strategy, optional TBPTT (t1, t2)
  decode: beam size, max length, length penalty (validation and export)
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from typing import Dict, List, Optional

import keras
import numpy as np
import tensorflow as tf

from tablegen_tf import schema
from tablegen_tf.data import input_pipeline as ip
from tablegen_tf.generation import DecodeConfig, generate_tokens
from tablegen_tf.models import build_model
from tablegen_tf.tokenizer import Tokenizer

CHECKPOINTS = "checkpoints"
BEST = "best"
LOGS = "logs"
CONFIG_FILE = "config.json"


@dataclasses.dataclass
class TrainResult:
    steps: int
    best_bleu: float
    best_step: int
    stopped_because: str
    seconds: float
    tokens_per_second: float


def variables_checkpoint(model, optimizer=None, **extra) -> tf.train.Checkpoint:
    """A checkpoint keyed by each variable's Keras path.

    Keras 3 layers keep some variables in lists/dicts, which tf.train.Checkpoint's
    object graph does not follow; keying by path tracks every variable and stays
    stable across processes that build the same model.
    """
    tracked = {f"model.{v.path.replace('/', '.')}": v for v in model.weights}
    if len(tracked) != len(model.weights):
        raise ValueError("model variable paths are not unique; cannot checkpoint by path")
    if optimizer is not None:
        tracked.update({f"optimizer.{i}": v for i, v in enumerate(optimizer.variables)})
    return tf.train.Checkpoint(**tracked, **extra)


def make_optimizer(config: Dict) -> keras.optimizers.Optimizer:
    name = config.get("name", "adam")
    if name != "adam":
        raise ValueError(f"unknown optimizer {name!r}: only adam is supported")
    # global_clipnorm clips the aggregated gradient, the same under any strategy.
    return keras.optimizers.Adam(
        learning_rate=float(config.get("learning_rate", 1e-3)),
        global_clipnorm=float(config.get("clipnorm", 5.0)),
    )


def make_strategy(name: str) -> tf.distribute.Strategy:
    if name in ("", "default", None):
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multi_worker_mirrored":
        return tf.distribute.MultiWorkerMirroredStrategy()
    raise ValueError(f"unknown strategy {name!r}: use default, mirrored or multi_worker_mirrored")


def input_config(data: Dict, training: bool) -> ip.InputConfig:
    names = {f.name for f in dataclasses.fields(ip.InputConfig)}
    config = ip.InputConfig(**{k: v for k, v in data.items() if k in names})
    if not training:
        config = dataclasses.replace(config, expand_references=False, shuffle_buffer=0)
    return config


def vocab_dir(config: Dict) -> str:
    return config["data"].get("vocab") or os.path.join(config["data"]["train"], "vocab")


def copy_vocabularies(source: str, target: str) -> str:
    """The run directory keeps its own vocabularies: it is self-contained for export."""
    if os.path.abspath(source) != os.path.abspath(target):
        tf.io.gfile.makedirs(target)
        for name in ip.VOCAB_NAMES:
            tf.io.gfile.copy(os.path.join(source, f"{name}.txt"), os.path.join(target, f"{name}.txt"), overwrite=True)
    return os.path.abspath(target)


def load_vocabularies(config: Dict) -> ip.Vocabularies:
    return ip.Vocabularies.load(vocab_dir(config), config["data"].get("max_words", 0))


def vocab_sizes(vocabs: ip.Vocabularies) -> Dict[str, int]:
    return {name: vocabs.size(name) for name in ip.VOCAB_NAMES}


def build(config: Dict, vocabs: ip.Vocabularies):
    model = build_model(config["model"]["name"], config["model"], vocab_sizes(vocabs))
    return model


def read_references(data_dir: str) -> Dict[str, List[str]]:
    """example_id -> raw references, for scoring generated text."""
    references = {}
    for record in tf.data.TFRecordDataset(ip.list_files(data_dir), compression_type="GZIP"):
        example = schema.TableExample.parse(record.numpy())
        references[example.example_id] = example.references or [" ".join(example.target_tokens)]
    return references


class Trainer:
    def __init__(self, config: Dict, output_dir: str, strategy: Optional[tf.distribute.Strategy] = None):
        self.config = config
        self.output_dir = output_dir
        self.train_config = config["train"]
        self.decode_config = DecodeConfig.from_dict(config.get("decode"))
        self.strategy = strategy or make_strategy(self.train_config.get("strategy", "default"))
        os.makedirs(output_dir, exist_ok=True)
        config["data"]["vocab"] = copy_vocabularies(vocab_dir(config), os.path.join(output_dir, "vocab"))
        self.vocabs = load_vocabularies(config)
        self.tokenizer = Tokenizer()
        with open(os.path.join(output_dir, CONFIG_FILE), "w") as handle:
            json.dump(config, handle, indent=2)
        with self.strategy.scope():
            self.model = build(config, self.vocabs)
            self.optimizer = make_optimizer(self.train_config.get("optimizer") or {})
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
            self.best_bleu = tf.Variable(-1.0, dtype=tf.float32, trainable=False, name="best_bleu")
            self.best_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="best_step")
            self._build_variables()
        checkpoint = variables_checkpoint(
            self.model, self.optimizer, step=self.step, best_bleu=self.best_bleu, best_step=self.best_step
        )
        self.manager = tf.train.CheckpointManager(
            checkpoint, os.path.join(output_dir, CHECKPOINTS),
            max_to_keep=int(self.train_config.get("keep_checkpoints", 3)),
        )
        self.best_manager = tf.train.CheckpointManager(
            variables_checkpoint(self.model, step=self.step), os.path.join(output_dir, BEST), max_to_keep=1
        )
        self.writers = {
            name: tf.summary.create_file_writer(os.path.join(output_dir, LOGS, name)) for name in ("train", "valid")
        }

    def _build_variables(self):
        """Creates model and optimizer variables so checkpoints restore eagerly."""
        if not self.model.built:
            self.model.build()
        self.optimizer.build(self.model.trainable_variables)

    def dataset(self, data_dir: str, training: bool) -> tf.data.Dataset:
        config = input_config(self.config["data"], training)
        seed = self.train_config.get("seed")
        return ip.make_dataset(data_dir, self.vocabs, config, training=training, seed=seed)

    def restore(self, warm_start_from: Optional[str] = None) -> str:
        """Resumes from our own latest checkpoint, else warm-starts weights from another run."""
        if self.manager.latest_checkpoint:
            self.manager.checkpoint.restore(self.manager.latest_checkpoint).assert_existing_objects_matched()
            return f"resumed from {self.manager.latest_checkpoint} at step {int(self.step.numpy())}"
        if warm_start_from:
            path = tf.train.latest_checkpoint(os.path.join(warm_start_from, BEST)) or tf.train.latest_checkpoint(
                os.path.join(warm_start_from, CHECKPOINTS)
            )
            if path:
                variables_checkpoint(self.model).restore(path).expect_partial().assert_existing_objects_matched()
                return f"warm-started weights from {path}"
        return "initialised from scratch"

    def _train_step_fn(self):
        tbptt = self.train_config.get("tbptt") or {}
        model, optimizer, strategy = self.model, self.optimizer, self.strategy

        def replica_step(batch):
            if tbptt.get("t1"):
                from tablegen_tf.layers.tbptt import tbptt_loss_and_gradients

                loss, grads = tbptt_loss_and_gradients(model, batch, int(tbptt["t1"]), int(tbptt["t2"]), training=True)
                grads = [g / strategy.num_replicas_in_sync if g is not None else None for g in grads]
            else:
                with tf.GradientTape() as tape:
                    loss = model.compute_loss_from_batch(batch, training=True)
                    scaled = loss / strategy.num_replicas_in_sync
                grads = tape.gradient(scaled, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            tokens = tf.reduce_sum(tf.cast(batch["target_mask"], tf.int64))
            return loss, tokens

        @tf.function
        def train_step(iterator):
            loss, tokens = strategy.run(replica_step, args=(next(iterator),))
            return (
                strategy.reduce(tf.distribute.ReduceOp.MEAN, loss, axis=None),
                strategy.reduce(tf.distribute.ReduceOp.SUM, tokens, axis=None),
            )

        return train_step

    def _eval_loss(self, data_dir: str, max_batches: int) -> float:
        total, count = 0.0, 0
        loss_fn = tf.function(lambda batch: self.model.compute_loss_from_batch(batch, training=False))
        for batch in self.dataset(data_dir, training=False).take(max_batches):
            total += float(loss_fn(batch))
            count += 1
        return total / max(count, 1)

    def generate(self, data_dir: str, max_examples: int = 0) -> Dict[str, str]:
        """example_id -> detokenized text for a prepared directory."""
        decode = self.decode_config
        words = self.vocabs.words

        @tf.function(reduce_retracing=True)
        def run(batch):
            tokens, _ = generate_tokens(self.model, words, batch, decode)
            return self.tokenizer.detokenize(tokens)

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

        valid_dir = self.config["data"]["valid"]
        limit = int(self.train_config.get("eval_max_examples", 0))
        outputs = self.generate(valid_dir, limit)
        ids = sorted(outputs)
        scores = corpus_scores([outputs[i] for i in ids], [references[i] for i in ids])
        scores["loss"] = self._eval_loss(valid_dir, int(self.train_config.get("eval_loss_batches", 50)))
        scores["perplexity"] = math.exp(min(scores["loss"], 50.0))
        self._log_samples(outputs, references, ids[:3])
        return scores

    def _log_samples(self, outputs, references, ids):
        lines = [f"**{i}**\n\n    generated: {outputs[i]}\n\n    reference: {references[i][0]}" for i in ids]
        with self.writers["valid"].as_default(step=int(self.step.numpy())):
            tf.summary.text("samples", "\n\n".join(lines))

    def train(self, warm_start_from: Optional[str] = None, progress: bool = True) -> TrainResult:
        from tqdm import tqdm

        print(f"tablegen train: {self.restore(warm_start_from)}", flush=True)
        cfg = self.train_config
        max_steps = int(cfg.get("max_steps", 0)) or None
        max_seconds = float(cfg.get("max_minutes", 0)) * 60 or None
        eval_every = int(cfg.get("eval_every_steps", 500))
        save_every = int(cfg.get("checkpoint_every_steps", eval_every))
        patience = int(cfg.get("early_stopping_patience", 0))
        log_every = int(cfg.get("log_every_steps", 20))
        references = read_references(self.config["data"]["valid"]) if self.config["data"].get("valid") else None

        dataset = self.dataset(self.config["data"]["train"], training=True).repeat()
        iterator = iter(self.strategy.experimental_distribute_dataset(dataset))
        train_step = self._train_step_fn()
        start, tokens_seen, since_best, stopped = time.time(), 0, 0, "budget"
        bar = tqdm(total=max_steps, initial=int(self.step.numpy()), disable=not progress, unit="step", dynamic_ncols=True)
        window_start, window_tokens = time.time(), 0
        while True:
            step = int(self.step.numpy())
            if max_steps and step >= max_steps:
                stopped = "max_steps"
                break
            if max_seconds and time.time() - start >= max_seconds:
                stopped = "max_minutes"
                break
            loss, tokens = train_step(iterator)
            self.step.assign_add(1)
            tokens_seen += int(tokens)
            window_tokens += int(tokens)
            step += 1
            if step % log_every == 0:
                elapsed = time.time() - window_start
                rate = window_tokens / max(elapsed, 1e-9)
                bar.set_postfix(loss=f"{float(loss):.3f}", tok_s=f"{rate:.0f}")
                with self.writers["train"].as_default(step=step):
                    tf.summary.scalar("loss", loss)
                    tf.summary.scalar("perplexity", tf.exp(tf.minimum(loss, 50.0)))
                    tf.summary.scalar("learning_rate", self._learning_rate())
                    tf.summary.scalar("tokens_per_second", rate)
                window_start, window_tokens = time.time(), 0
            bar.update(1)
            if step % save_every == 0:
                self.manager.save(checkpoint_number=step)
            if references is not None and step % eval_every == 0:
                improved = self._evaluate_and_keep_best(references, step)
                since_best = 0 if improved else since_best + 1
                if patience and since_best >= patience:
                    stopped = "early_stopping"
                    break
        bar.close()
        step = int(self.step.numpy())
        self.manager.save(checkpoint_number=step)
        if references is not None and (step % eval_every != 0 or self.best_manager.latest_checkpoint is None):
            self._evaluate_and_keep_best(references, step)
        elif references is None:
            self.best_manager.save(checkpoint_number=step)
        seconds = time.time() - start
        for writer in self.writers.values():
            writer.flush()
        return TrainResult(
            steps=step, best_bleu=float(self.best_bleu.numpy()), best_step=int(self.best_step.numpy()),
            stopped_because=stopped, seconds=round(seconds, 1),
            tokens_per_second=round(tokens_seen / max(seconds, 1e-9), 1),
        )

    def _decay_learning_rate(self) -> None:
        """OpenNMT-style decay on plateau: no BLEU gain at an evaluation -> lr *= factor."""
        factor = float(self.train_config.get("decay_on_plateau", 0) or 0)
        if 0 < factor < 1:
            self.optimizer.learning_rate.assign(self._learning_rate() * factor)

    def _log_attention(self, step: int, tables: int = 3) -> None:
        """Copy-attention heatmaps (target steps x records) for a few validation tables."""
        batch = next(iter(self.dataset(self.config["data"]["valid"], training=False).take(1)))
        outputs = self.model(batch, training=False)["outputs"]
        if "copy_log_probs" not in outputs:
            return  # encdec has no copy attention to show
        attention = tf.exp(outputs["copy_log_probs"][:tables])  # [n, T, R]
        attention = attention / tf.maximum(tf.reduce_max(attention, axis=[1, 2], keepdims=True), 1e-9)
        with self.writers["valid"].as_default(step=step):
            tf.summary.image("copy_attention", attention[..., None], max_outputs=tables)

    def _learning_rate(self) -> float:
        lr = self.optimizer.learning_rate
        return float(lr.numpy() if hasattr(lr, "numpy") else lr)

    def _evaluate_and_keep_best(self, references, step: int) -> bool:
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
            self.best_manager.save(checkpoint_number=step)
        else:
            self._decay_learning_rate()
        print(
            f"\nstep {step}: valid BLEU {scores['bleu']:.2f} (best {float(self.best_bleu.numpy()):.2f} "
            f"at {int(self.best_step.numpy())}), loss {scores['loss']:.3f}",
            flush=True,
        )
        return improved


def load_trained(model_dir: str):
    """(config, vocabs, model) restored from the best (else latest) checkpoint of a run."""
    with open(os.path.join(model_dir, CONFIG_FILE)) as handle:
        config = json.load(handle)
    vocabs = load_vocabularies(config)
    model = build(config, vocabs)
    if not model.built:
        model.build()
    path = tf.train.latest_checkpoint(os.path.join(model_dir, BEST)) or tf.train.latest_checkpoint(
        os.path.join(model_dir, CHECKPOINTS)
    )
    if not path:
        raise FileNotFoundError(f"no checkpoint in {model_dir}/{BEST} or {model_dir}/{CHECKPOINTS}")
    variables_checkpoint(model).restore(path).expect_partial().assert_existing_objects_matched()
    return config, vocabs, model, path
