"""Evaluation metrics: text (BLEU/NIST/ROUGE), table facts, E2E slot errors, content plans,
extractive compression."""

from tablegen_tf.metrics.extractive_metrics import extractive_scores
from tablegen_tf.metrics.fact_metrics import fact_scores
from tablegen_tf.metrics.plan_metrics import plan_scores
from tablegen_tf.metrics.slot_metrics import slot_scores
from tablegen_tf.metrics.text_metrics import corpus_scores

__all__ = ["corpus_scores", "extractive_scores", "fact_scores", "plan_scores", "slot_scores"]
