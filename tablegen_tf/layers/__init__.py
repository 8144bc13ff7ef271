"""Layers of the RotoWire encoder-decoder family (see each module for its equations)."""

from tablegen_tf.layers.attention import BahdanauAttention, LuongAttention, make_attention
from tablegen_tf.layers.content_planning import ContentPlanner, PlanEncoder, plan_targets
from tablegen_tf.layers.content_selection import ContentSelectionGate
from tablegen_tf.layers.fused_loop import attention_lstm_loop
from tablegen_tf.layers.initial_state import EntityMeanInitialState, entity_pooled_mean
from tablegen_tf.layers.joint_copy import JointCopy, extended_log_probs, joint_copy_nll, masked_mean
from tablegen_tf.layers.lstm_decoder import AttentionLSTMDecoder
from tablegen_tf.layers.record_encoder import RecordEncoder
from tablegen_tf.layers.tbptt import tbptt_chunks, tbptt_loss_and_gradients, tbptt_loss_spans

__all__ = [
    "AttentionLSTMDecoder",
    "BahdanauAttention",
    "ContentPlanner",
    "ContentSelectionGate",
    "EntityMeanInitialState",
    "JointCopy",
    "LuongAttention",
    "PlanEncoder",
    "RecordEncoder",
    "attention_lstm_loop",
    "entity_pooled_mean",
    "extended_log_probs",
    "joint_copy_nll",
    "make_attention",
    "masked_mean",
    "plan_targets",
    "tbptt_chunks",
    "tbptt_loss_and_gradients",
    "tbptt_loss_spans",
]
