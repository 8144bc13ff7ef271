"""The ``transformer`` and ``transformer-copy`` model families (Vaswani et al. 2017)."""

from tablegen_tf.models.transformer.model import Transformer, TransformerConfig

__all__ = ["Transformer", "TransformerConfig"]
