"""Ensembles of independently trained runs: one model whose decoding step averages the
members' next-token distributions, so the searches, slot reranking and the SavedModel
(serving gets the gain too) need nothing special.

    p(y_t | y_<t, x) = sum_n w_n p_n(y_t | y_<t, x),  sum_n w_n = 1   (probability averaging)

computed in log space as logsumexp_n (log p_n + log w_n); w_n = 1/N unless weights are
given (``--ensemble-weights``, normalised to sum 1; a weight 0 drops a member). The
members read one featurizer's batches, so they must agree on everything that shapes
them: the featurizer (its example form and extended vocabulary: ids >= V copy source
item id - V, the same for every family of a featurizer by its CONTRACT.md), the
vocabularies, the tokenizer and the table clipping of the data section. Families may
differ when they share the featurizer (e.g. encdec-copy beside order-planning: their
errors differ more than two seeds'); so may sizes, seeds and training data. Two-stage
families (a plan decoded inside ``encode``) are refused: averaging the text given
different plans is not the same model.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

import tensorflow as tf

from tablegen_tf.models.base import GenerationModel

# DataConfig fields the featurizer reads: members must agree on them.
FEATURIZER_DATA_FIELDS = ("max_words", "max_position", "max_records", "max_source_length")


class EnsembleModel(GenerationModel):
    """Decoding contract of ``members`` (same featurizer), averaging their distributions."""

    def __init__(self, members: Sequence[GenerationModel], weights: Optional[Sequence[float]] = None, **kwargs):
        super().__init__(name="ensemble", **kwargs)
        if len(members) < 2:
            raise ValueError("an ensemble needs at least two members")
        self.members = list(members)
        self.member_weights = normalised_weights(weights, len(self.members))

    @property
    def xla_decoding_steps(self):
        return all(member.xla_decoding_steps for member in self.members)

    @property
    def longest_search(self):
        limits = [member.longest_search for member in self.members if member.longest_search is not None]
        return min(limits) if limits else None

    def build(self, *args, **kwargs):
        self.built = True

    def serving_signatures(self, module, decoder=None):
        # the family's own signatures (e.g. compression's `compress`), searching with the
        # averaged distributions: the members share one featurizer and vocabulary
        return self.members[0].serving_signatures(module, decoder=decoder or self)

    def compute_loss_from_batch(self, batch, training=False):
        raise NotImplementedError("an ensemble is assembled from trained runs, not trained")

    def encode(self, features, training=False):
        return tuple(member.encode(features, training=training) for member in self.members)

    def initial_decoding_state(self, memory):
        return tuple(member.initial_decoding_state(m) for member, m in zip(self.members, memory))

    def tile(self, memory, multiplier):
        return tuple(member.tile(m, multiplier) for member, m in zip(self.members, memory))

    def decoding_memory(self, memory):
        """The members' (None unless every member has one): then finished entries and beams
        leave the ensemble's search as they leave a single model's."""
        rows = tuple(member.decoding_memory(m) for member, m in zip(self.members, memory))
        return None if any(r is None for r in rows) else rows

    def decoding_step_fn(self, memory):
        step_fns = [member.decoding_step_fn(m) for member, m in zip(self.members, memory)]
        # log w_n as a constant of the graph (a weight 0 gives -inf: that member adds nothing)
        log_weights = tf.constant([math.log(w) if w > 0 else -math.inf for w in self.member_weights], tf.float32)

        def step_fn(prev_ids, step, state):
            outputs = [fn(prev_ids, step, s) for fn, s in zip(step_fns, state)]
            log_probs = tf.stack([tf.cast(log_probs, tf.float32) for log_probs, _ in outputs])  # [N_members, N, W]
            mixed = tf.reduce_logsumexp(log_probs + log_weights[:, None, None], axis=0)
            return tf.cast(mixed, outputs[0][0].dtype), tuple(s for _, s in outputs)

        return step_fn


def normalised_weights(weights: Optional[Sequence[float]], count: int) -> list:
    """``weights`` (one per member, >= 0, not all 0) scaled to sum 1; None = equal. A
    ValueError naming what is wrong otherwise."""
    if weights is None or len(weights) == 0:
        return [1.0 / count] * count
    weights = [float(w) for w in weights]
    if len(weights) != count:
        raise ValueError(f"--ensemble-weights: {len(weights)} weights for {count} members "
                         "(one per run: --model's first, then --ensemble's)")
    if any(not math.isfinite(w) or w < 0 for w in weights) or sum(weights) <= 0:
        raise ValueError(f"--ensemble-weights: weights must be >= 0 and not all 0, got {weights}")
    return [w / sum(weights) for w in weights]


def check_weights(weights: Optional[Sequence[float]], runs: int) -> None:
    """A ValueError naming what is wrong when ``weights`` do not fit ``runs`` run
    directories (checked before minutes of loading)."""
    if weights and runs == 1:
        raise ValueError("--ensemble-weights needs an ensemble (--ensemble RUN ...)")
    normalised_weights(weights, runs)


def check_compatible(runs) -> None:
    """``runs``: ``Trained`` of each member (first = the reference). A ValueError naming
    the run and what differs if one cannot share the first one's featurizer."""
    first = runs[0]
    for run in runs[1:]:
        problems = []
        if run.family.featurizer_class is not first.family.featurizer_class:
            problems.append(f"family {run.family.name!r} reads {run.family.example_form!r} examples "
                            f"({run.family.featurizer_class.__name__}), {first.family.name!r} reads "
                            f"{first.family.example_form!r} ({first.family.featurizer_class.__name__})")
        if run.vocabs.tokens != first.vocabs.tokens:
            problems.append("vocabularies differ (train the members on one prepared directory)")
        if run.config.tokenizer != first.config.tokenizer:
            problems.append("tokenizer settings differ")
        for name in FEATURIZER_DATA_FIELDS:
            mine, theirs = getattr(run.config.data, name), getattr(first.config.data, name)
            if mine != theirs:
                problems.append(f"data.{name} {mine} != {theirs}")
        if problems:
            raise ValueError(f"cannot ensemble {run.checkpoint} with {first.checkpoint}: " + "; ".join(problems))
    planned = [run.checkpoint for run in runs if run.model.has_planning_stage]
    if planned:
        raise ValueError(f"cannot ensemble two-stage models (a plan decoded in encode): {planned[0]}")


def load_ensemble(model_dirs: Sequence[str], weights: Optional[Sequence[float]] = None,
                  max_length: Optional[int] = None):
    """A ``Trained`` whose model averages the runs in ``model_dirs`` (``weights``: one per
    run, normalised; None = equal); config, vocabularies and featurizer are the first run's
    (its decode settings apply). One run: that run. ``max_length``: as for ``load_trained``."""
    from tablegen_tf.training.trainer import load_trained

    check_weights(weights, len(model_dirs))
    runs = [load_trained(model_dir, max_length) for model_dir in model_dirs]
    if len(runs) == 1:
        return runs[0]
    check_compatible(runs)
    return dataclasses.replace(runs[0], model=EnsembleModel([run.model for run in runs], weights=weights),
                               checkpoint=" + ".join(run.checkpoint for run in runs))
