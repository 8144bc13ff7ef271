"""Table NLM (Lebret, Grangier, Auli 2016) and its Kneser-Ney baselines (``kn``)."""

from tablegen_tf.models.table_nlm.model import TableNLM, TableNLMConfig

__all__ = ["TableNLM", "TableNLMConfig"]
from tablegen_tf.models.table_nlm import kn  # noqa: E402,F401  (registers kn and template-kn)
