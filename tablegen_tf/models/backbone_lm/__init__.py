"""Backbone LM (Mou et al. 2015) and the sequential GRU LM baseline: a sentence around a word."""

from tablegen_tf.models.backbone_lm import model  # noqa: F401  (registers backbone-lm, seq-lm)
