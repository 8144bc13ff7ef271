"""Sentence compression (Miao & Blunsom 2016): ``fsc``, ``asc``, ``asc+fsc`` and the LM prior ``compression-lm``."""

from tablegen_tf.models.compression import lm, model  # noqa: F401  (registers the families)
