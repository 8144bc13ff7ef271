"""Ensembles: the averaged step distribution (tests/ensemble_test.py: trained runs,
the compatibility checks and the exported ensemble SavedModel)."""

import numpy as np
import pytest
import tensorflow as tf

from tablegen_tf.ensemble import EnsembleModel
from tablegen_tf.models.base import GenerationModel


class FixedDistribution(GenerationModel):
    """A member whose next-word distribution is fixed, and which counts its steps in its state."""

    def __init__(self, probabilities):
        super().__init__()
        self.log_probs = tf.math.log(tf.constant(probabilities, tf.float32))

    def build(self, *args, **kwargs):
        self.built = True

    def encode(self, features, training=False):
        return {"rows": tf.zeros([tf.shape(features)[0], 1])}

    def initial_decoding_state(self, memory):
        return tf.zeros([tf.shape(memory["rows"])[0]], tf.int32)

    def decoding_step_fn(self, memory):
        def step_fn(prev_ids, step, state):
            rows = tf.shape(prev_ids)[0]
            return tf.tile(self.log_probs[None, :], [rows, 1]), state + 1

        return step_fn


def test_the_step_averages_the_members_probabilities_and_keeps_their_states():
    members = [FixedDistribution([0.7, 0.2, 0.1]), FixedDistribution([0.1, 0.2, 0.7])]
    ensemble = EnsembleModel(members)
    features = tf.zeros([2, 4])
    memory = ensemble.encode(features)
    state = ensemble.initial_decoding_state(memory)
    log_probs, state = ensemble.decoding_step_fn(ensemble.tile(memory, 3))(tf.zeros([6], tf.int32), 0,
                                                                          ensemble.tile(state, 3))
    np.testing.assert_allclose(np.exp(log_probs.numpy()), [[0.4, 0.2, 0.4]] * 6, rtol=1e-6)
    assert [s.numpy().tolist() for s in state] == [[1] * 6, [1] * 6]


def test_one_member_is_not_an_ensemble():
    with pytest.raises(ValueError, match="at least two"):
        EnsembleModel([FixedDistribution([1.0])])


class WithSignatures(FixedDistribution):
    """A member whose family adds a signature: it records the model it was told to decode with."""

    def serving_signatures(self, module, decoder=None):
        return {"extra": (module, decoder or self)}


def test_the_ensemble_exports_its_first_members_signatures_decoding_with_itself():
    # e.g. compression's `compress`: without it an exported compression ensemble had none
    members = [WithSignatures([0.5, 0.5]), WithSignatures([0.9, 0.1])]
    ensemble = EnsembleModel(members)
    module = object()
    assert ensemble.serving_signatures(module) == {"extra": (module, ensemble)}
    assert EnsembleModel([FixedDistribution([1.0]), FixedDistribution([1.0])]).serving_signatures(module) == {}
