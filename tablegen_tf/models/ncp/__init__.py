"""The ``ncp`` model family (Puduppully et al. 2019)."""

from tablegen_tf.models.ncp.model import NCP, NCPConfig

__all__ = ["NCP", "NCPConfig"]
