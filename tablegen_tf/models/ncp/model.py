"""Neural content planning (Puduppully et al. 2019) on the encoder-decoder family."""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Dict

import keras
import tensorflow as tf

from tablegen_tf.config import Bound, at_least
from tablegen_tf.constants import MASKED_LOGIT, NEG_INF, PAD_ID
from tablegen_tf.data.table_featurizer import TableFeaturizer
from tablegen_tf.decoding.greedy import greedy_search
from tablegen_tf.layers.content_planning import ContentPlanner, PlanEncoder, gather_plan, plan_targets
from tablegen_tf.layers.joint_copy import masked_mean
from tablegen_tf.models.encdec.model import EncDec, EncDecConfig
from tablegen_tf.models.registry import register_model


@dataclasses.dataclass
class NCPConfig(EncDecConfig):
    KIND: ClassVar[str] = "ncp"
    BOUNDS: ClassVar[Dict[str, Bound]] = {**EncDecConfig.BOUNDS, "max_plan_length": at_least(1)}
    name: str = "ncp"
    max_plan_length: int = 80  # greedy plan decoding steps


@register_model("ncp", config=NCPConfig, featurizer=TableFeaturizer,
                description="content selection + pointer-network plan + copy over the plan (Puduppully et al. 2019)")
@keras.saving.register_keras_serializable(package="tablegen")
class NCP(EncDec):
    """Neural content planning (Puduppully et al. 2019): content selection, a pointer
    network producing the plan, and a text decoder attending / copying over the plan
    (a bidirectional LSTM over the r_cs of the planned records).

    The text decoder starts from the entity-pooled mean of the plan encodings (the
    EncDec initial-state layer over plan positions; Puduppully start from the plan
    encoder's final states -- we keep one initial-state rule for the whole family).
    Training uses the gold plan (teacher forcing) for both stages, loss = plan NLL +
    text NLL (both masked means).  Inference is two-stage: ``encode(batch)`` decodes
    a plan greedily (``max_plan_length`` steps), then text is decoded over that plan.
    For a beam search over plans use ``planning_step_fn`` (start id R + 1 = BOS, end
    id R = EOS) and pass the result as ``encode(batch, plan=...)``; the greedy plan of
    ``encode`` is the shared ``greedy_search`` over the same step function.
    """

    has_planning_stage = True

    def __init__(self, word_vocab_size, field_vocab_size, max_plan_length=100, **kwargs):
        kwargs.update(copy=True, content_selection=True)
        super().__init__(word_vocab_size, field_vocab_size, **kwargs)
        self.max_plan_length = max_plan_length

    def _init_extra(self):
        self.planner = ContentPlanner(name="content_planner")
        self.plan_encoder = PlanEncoder(self.hidden_size, name="plan_encoder")

    def memory_dim(self):
        return 2 * (self.hidden_size // 2)

    def _build_extra(self):
        self.planner.build((None, None, self.hidden_size))
        self.plan_encoder.build((None, None, self.hidden_size))

    def encode(self, batch, training=False, use_gold_plan=False, plan=None):
        """``plan`` [B,P] (-1 pad) overrides both the gold and the predicted plan."""
        records, mask = self.encode_records(batch, training)
        memory = {"records": records, "record_mask": mask, "record_value": batch["record_value"]}
        if plan is None and use_gold_plan:
            plan = tf.where(batch["content_plan_mask"], batch["content_plan"], -1)
            plan_in, plan_out, plan_out_mask = plan_targets(plan, tf.shape(records)[1])
            memory.update(plan_log_probs=self.planner(records, mask, plan_in),
                          plan_out=plan_out, plan_out_mask=plan_out_mask)
        elif plan is None:
            plan = self.greedy_plan(memory)
        encoded, plan_mask = self.plan_encoder(records, plan)
        memory.update(
            plan=plan, memory=encoded, memory_mask=plan_mask,
            memory_value=tf.where(plan_mask, gather_plan(batch["record_value"], plan), PAD_ID),
            memory_record=tf.maximum(plan, 0),
            memory_entity=gather_plan(batch["record_entity"], plan),
        )
        return memory

    def memory_copy_mask(self, memory, copy_mask):
        gathered = gather_plan(copy_mask, memory["plan"], axis=2)  # [B,T,P]
        return gathered * tf.cast(memory["memory_mask"], gathered.dtype)[:, None, :]

    def auxiliary_loss(self, memory, batch):
        """Plan NLL: masked mean over plan steps (incl. EOS)."""
        log_probs = tf.gather(memory["plan_log_probs"], memory["plan_out"], batch_dims=2)
        return -masked_mean(log_probs, memory["plan_out_mask"])

    def planned(self, memory):
        return memory["plan"]

    def greedy_plan(self, memory):
        """[B, P <= max_plan_length] record indices, -1 after the plan's EOS (not included)."""
        records, mask = memory["records"], memory["record_mask"]
        num_records = tf.shape(records)[1]
        start = tf.fill([tf.shape(records)[0]], num_records + 1)  # BOS
        state = self.planner.initial_state(records, mask)
        ids, _, _ = greedy_search(self.planning_step_fn(memory), start, state, self.max_plan_length,
                                  end_id=num_records, pad_id=-1)
        return tf.where(ids == num_records, -1, ids)

    def planning_step_fn(self, memory):
        """Pointer step_fn over [N, R+1] (records + EOS) for tablegen_tf.decoding; state =
        ``self.planner.initial_state(memory["records"], memory["record_mask"])``.  E.g.
        ``ids, _, _ = beam_search(step_fn, start (R + 1), state, K, max_len, end_id=R,
        pad_id=-1)`` then ``encode(batch, plan=tf.where(ids == R, -1, ids))``."""
        plan_memory, pointable, keys = self.planner.memory(memory["records"], memory["record_mask"])

        def step_fn(prev_ids, step, state):
            log_probs, state = self.planner.step(prev_ids, state, plan_memory, pointable, keys)
            return tf.where(log_probs <= MASKED_LOGIT / 2, NEG_INF, log_probs), list(state)

        return step_fn

    def get_config(self):
        config = super().get_config()
        for key in ("copy", "content_selection"):
            config.pop(key)
        return {**config, "max_plan_length": self.max_plan_length}
