"""Models of tablegen: the encoder-decoder family and its registry."""

from tablegen_tf.models.encdec import MODELS, NCP, EncDec, build_model

__all__ = ["MODELS", "NCP", "EncDec", "build_model"]
