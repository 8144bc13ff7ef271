"""Model-free decoding (greedy, beam, lexically constrained beam) in core TensorFlow.

All decoders take the contract's ``step_fn(prev_ids [N], step, state) ->
(log_probs [N, W], state)`` and run as a single tf.while_loop. Call them inside a
``tf.function`` (as exported serving signatures do): eagerly, tf.while_loop runs
step by step in Python, which is only meant for debugging.
"""

from tablegen_tf.decoding.beam import beam_search
from tablegen_tf.decoding.common import gather_tree, length_penalty, tile_batch
from tablegen_tf.decoding.constrained import constrained_beam_search
from tablegen_tf.decoding.greedy import greedy_search

__all__ = [
    "beam_search",
    "constrained_beam_search",
    "gather_tree",
    "greedy_search",
    "length_penalty",
    "tile_batch",
]
