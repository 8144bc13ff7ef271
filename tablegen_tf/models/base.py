"""The model half of the family contract (the featurizer half: tablegen_tf.data.featurizer).

A family's model is a Keras model whose variables all exist once it is constructed
(``build()`` without arguments works), so checkpoints restore without a call, and whose
layers are named (checkpoints key each variable by its Keras path). It provides,
for training,

* ``compute_loss_from_batch(batch, training)`` -> scalar loss of a featurizer batch,

for decoding with the shared, model-free searches (tablegen_tf.decoding, CONTRACT.md),

* ``encode(features, training)`` -> memory (a dict of tensors, leading dim B),
* ``initial_decoding_state(memory)`` -> nested state, leading dim B,
* ``decoding_step_fn(memory)`` -> ``step_fn(prev_ids [N], step, state) -> (log_probs [N, W], state)``
  over the extended vocabulary (ids >= V copy source item id - V),
* ``tile(memory, K)`` -> memory repeated per beam (b0k0, b0k1, ...),

and declares (class attributes, never probed with hasattr):

* ``has_planning_stage``: a two-stage model whose ``encode`` decodes a plan first;
  ``planned(memory)`` returns it ([B, P] source indices, -1 padded) for evaluation;
* ``supports_tbptt``: ``tbptt_loss_and_gradients(batch, t1, t2, training)`` exists.

Optional hooks with neutral defaults: ``attention_images`` and ``summary_images`` (TensorBoard),
``word_embedding_layer`` (the table ``model.pretrained_embeddings`` initialises),
``serving_signatures`` (extra SavedModel signatures of the family), ``explain_tokens``
(per-token copy and attention for the ``explain`` signature) and
``token_nll`` (summed NLL and token count of a batch, for perplexity; declared by
``reports_perplexity``).
"""

from __future__ import annotations

import contextlib
from typing import Callable, ClassVar, Dict, Optional, Tuple

import keras
import tensorflow as tf

from tablegen_tf.decoding.common import tile_batch

REQUIRED = ("from_config_sections", "compute_loss_from_batch", "encode", "initial_decoding_state",
            "decoding_step_fn")


class KeyedConfig:
    """``get_config`` / ``from_config`` over the class's ``CONFIG_KEYS``: the constructor
    arguments, kept as attributes of the same names, that a saved model is rebuilt from.
    A family lists it before GenerationModel in its bases. Not in GenerationModel itself:
    Keras generates a config for models that do not override ``get_config``, and the
    families without keys rely on that."""

    CONFIG_KEYS: ClassVar[Tuple[str, ...]] = ()

    def get_config(self):
        config = super().get_config()
        config.update({name: getattr(self, name) for name in self.CONFIG_KEYS})
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)


@contextlib.contextmanager
def dtype_policy_scope(policy):
    """Keras gives sublayers the GLOBAL dtype policy at construction: a model with its own
    ``dtype`` ("float32" | "mixed_bfloat16") builds its sublayers under this scope; the
    global policy is restored afterwards."""
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


class GenerationModel(keras.Model):
    has_planning_stage = False
    supports_tbptt = False
    reports_perplexity = False  # token_nll exists: evaluate reports per-token perplexity
    # One-entry searches run each step as one XLA computation (tablegen_tf.generation.
    # JIT_MAX_BATCH). False where the step calls Python (tf.numpy_function: XLA cannot compile
    # it) or where served inputs' memory axis is not padded to buckets (XLA would compile once
    # per input length).
    xla_decoding_steps = True
    # The longest search (decode.max_length) the built model can run, or None for any: a
    # SavedModel's `generate` refuses a longer max_length (INVALID_ARGUMENT) instead of
    # capping its texts (the transformer's key/value caches are sized when it is built).
    longest_search: Optional[int] = None

    @classmethod
    def from_config_sections(cls, family, config, vocab_sizes: Dict[str, int]) -> "GenerationModel":
        """The model of ``family`` for a full tablegen Config and vocabulary sizes."""
        raise NotImplementedError

    def compute_loss_from_batch(self, batch, training=False):
        raise NotImplementedError

    def encode(self, features, training=False):
        raise NotImplementedError

    def initial_decoding_state(self, memory):
        raise NotImplementedError

    def decoding_step_fn(self, memory) -> Callable:
        raise NotImplementedError

    def tile(self, memory, multiplier):
        return tile_batch(memory, multiplier)

    def decoding_memory(self, memory):
        """Optional: ``memory`` plus what ``decoding_step_fn`` precomputes from it (e.g.
        attention keys), so that building the step function of any rows of it costs no
        compute; beam search then lets finished batch entries leave the batch. None: the
        family does not support it."""
        return None

    def planned(self, memory) -> tf.Tensor:
        """The plan a two-stage model decoded in ``encode`` ([B, P], -1 padded)."""
        raise NotImplementedError

    def tbptt_loss_and_gradients(self, batch, t1, t2, training=True):
        raise NotImplementedError

    def token_nll(self, batch):
        """(summed negative log-likelihood in nats, number of scored target tokens) of a batch.

        Perplexity over a set is exp(sum of NLL / sum of tokens); the family's docstring
        says which tokens count (e.g. whether </s> and copy actions are scored)."""
        raise NotImplementedError

    def attention_images(self, batch, count: int) -> Optional[tf.Tensor]:
        """[count, T, S, 1] images in [0, 1] of what the model attends to, or None."""
        return None

    def summary_images(self, batch, count: int, vocabs=None) -> Dict[str, tf.Tensor]:
        """Named [n, H, W, C] images in [0, 1] (or uint8) for TensorBoard; ``vocabs`` (the
        run's vocabularies) lets a family label them.  Default: ``attention_images``."""
        images = self.attention_images(batch, count)
        return {} if images is None else {"copy_attention": images}

    def explain_tokens(self, memory, ids) -> Optional[Dict[str, tf.Tensor]]:
        """Per token of chosen extended ids [B, T] (e.g. by one teacher-forced pass over them):
        ``attention`` [B, T, S] over the featurizer's source items (``copy_texts``),
        ``copy_probability`` [B, T] (the share of the token's probability that came from
        copying) and ``copied_from`` [B, T] int32 (the source item copied, -1 when generated);
        None when the family has no attention to show (tablegen_tf.generation.explain_text)."""
        return None

    def word_embedding_layer(self) -> Optional[keras.layers.Embedding]:
        """The word embedding table (rows = the word vocabulary's ids) that
        ``model.pretrained_embeddings`` initialises (tablegen_tf.embeddings), or None."""
        return None

    def serving_signatures(self, module, decoder: Optional["GenerationModel"] = None) -> Dict[str, Callable]:
        """Extra tf.functions (name -> function with an input_signature) to export. They
        search with ``decoder`` (None = this model): an ensemble (tablegen_tf.ensemble)
        exports its first member's signatures decoding with the ensemble itself."""
        return {}


def check_contract(model_class) -> None:
    """At registration: the class is a GenerationModel and implements what it declares."""
    if not (isinstance(model_class, type) and issubclass(model_class, GenerationModel)):
        raise TypeError(f"{model_class!r} must subclass tablegen_tf.models.base.GenerationModel")
    required = list(REQUIRED)
    if model_class.has_planning_stage:
        required.append("planned")
    if model_class.supports_tbptt:
        required.append("tbptt_loss_and_gradients")
    if model_class.reports_perplexity:
        required.append("token_nll")
    missing = [m for m in required if _defined_in(model_class, m) is GenerationModel]
    if missing:
        raise TypeError(f"{model_class.__name__} does not implement {', '.join(missing)} (tablegen_tf.models.base)")


def _defined_in(cls, attribute: str) -> type:
    return next(k for k in cls.__mro__ if attribute in vars(k))
