"""Model families: one folder each (``encdec/``, ``ncp/``, ...), found through the registry."""

from tablegen_tf.models.base import GenerationModel
from tablegen_tf.models.registry import ModelFamily, build_model, family_names, get_family, register_model

__all__ = ["GenerationModel", "ModelFamily", "build_model", "family_names", "get_family", "register_model"]
