import numpy as np
import tensorflow as tf

from tablegen_tf.layers.content_selection import ContentSelectionGate


def _manual(layer, records, mask):
    """Straight transcription of the thesis equations for one example."""
    r = np.asarray(records)
    w = layer.score_kernel.numpy()
    out = np.zeros_like(r)
    real = np.flatnonzero(mask)
    for t in real:
        others = [k for k in real if k != t]
        if others:
            alpha = np.array([r[t] @ w @ r[k] for k in others])
            beta = np.exp(alpha - alpha.max())
            beta /= beta.sum()
            gamma = (beta[:, None] * r[others]).sum(0)
        else:
            gamma = np.zeros_like(r[t])
        gate = layer.gate(tf.constant(np.concatenate([r[t], gamma])[None], tf.float32))[0].numpy()
        out[t] = gate * r[t]
    return out


def test_matches_equations_with_masking():
    layer = ContentSelectionGate()
    records = tf.random.normal([3, 4, 5])
    mask = tf.constant([[True, True, True, True], [True, True, False, False], [True, False, False, False]])
    out = layer(records, mask)
    assert out.shape == (3, 4, 5)
    for b in range(3):
        np.testing.assert_allclose(out[b], _manual(layer, records[b], mask[b].numpy()), rtol=1e-4, atol=1e-5)


def test_padding_records_do_not_change_outputs():
    layer = ContentSelectionGate()
    records = tf.random.normal([2, 3, 5])
    mask = tf.constant([[True, True, True], [True, True, False]])
    out = layer(records, mask)
    more = layer(tf.concat([records, tf.random.normal([2, 2, 5])], 1), tf.pad(mask, [[0, 0], [0, 2]]))
    np.testing.assert_allclose(more[:, :3], out, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(more[:, 3:], 0.0)
