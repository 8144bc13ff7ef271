"""The ``encdec``, ``encdec-copy`` and ``encdec-cs`` model families (RotoWire thesis)."""

from tablegen_tf.models.encdec.model import EncDec, EncDecConfig

__all__ = ["EncDec", "EncDecConfig"]
