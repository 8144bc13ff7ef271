"""TensorBoard figures of the order-planning model (the paper's Figure 4 in spirit).

* ``attention/table_<k>``: per validation table, the hybrid attention over table tokens
  (columns ``field:value``) for each target word (rows, teacher forced), with the gate
  z~_t per step beside it (content-based share of eq. 11);
* ``link_matrix``: the learnt L[f_j, f_i] (row = from field j, column = to field i) with
  field names (the most frequent fields when there are many).

Rendered with matplotlib (Agg) when it is installed; otherwise plain heatmaps.
"""

from __future__ import annotations

import io
from typing import Dict, List, Optional

import numpy as np
import tensorflow as tf

MAX_FIELDS = 30  # link matrix: show at most this many fields (the vocabulary is sorted by count)


def link_matrix(model) -> Optional[np.ndarray]:
    return None if model.link_attention is None else model.link_attention.link.numpy()


def top_links(model, field_names: List[str], count: int = 10, skip: int = 3):
    """[(from field, to field, L value)] of the largest entries among real fields (ids >= skip)."""
    matrix = link_matrix(model)
    if matrix is None:
        return []
    sub = matrix[skip:len(field_names), skip:len(field_names)]
    order = np.argsort(sub, axis=None)[::-1][:count]
    return [(field_names[skip + i], field_names[skip + j], float(sub[i, j]))
            for i, j in zip(*np.unravel_index(order, sub.shape))]


def summary_images(model, batch, count, vocabs=None) -> Dict[str, tf.Tensor]:
    traces = model.attention_traces(batch, count)
    alpha, gate = traces["alpha"].numpy(), traces["gate"].numpy()
    images = {"hybrid_attention": tf.convert_to_tensor(
        alpha[..., None] / np.maximum(alpha.max(axis=(1, 2), keepdims=True)[..., None], 1e-9))}
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # plain heatmaps only
        matrix = link_matrix(model)
        if matrix is not None:
            span = np.ptp(matrix) or 1.0
            images["link_matrix"] = tf.convert_to_tensor(((matrix - matrix.min()) / span)[None, ..., None])
        return images
    words = vocabs.tokens["words"] if vocabs is not None else None
    fields = vocabs.tokens["fields"] if vocabs is not None else None
    for k in range(alpha.shape[0]):
        images[f"attention/table_{k}"] = _render(plt, _attention_figure(plt, batch, k, alpha[k], gate[k], words,
                                                                        fields, model.attention == "hybrid"))
    matrix = link_matrix(model)
    if matrix is not None:
        images["link_matrix"] = _render(plt, _link_figure(plt, matrix, fields))
    return images


def _attention_figure(plt, batch, k, alpha, gate, words, fields, has_gate):
    mask = batch["record_mask"][k].numpy().astype(bool)
    steps = int(np.sum(batch["target_mask"][k].numpy()))
    values = [v.decode() for v in batch["record_value_text"][k].numpy()[mask]]
    field_ids = batch["record_field"][k].numpy()[mask]
    columns = [f"{fields[f] if fields else f}:{v}" for f, v in zip(field_ids, values)]
    target = batch["target_out"][k].numpy()[:steps]
    rows = [words[i] if words else str(i) for i in target]
    alpha = alpha[:steps, : len(columns)]
    fig, axes = plt.subplots(1, 2, figsize=(2 + 0.3 * len(columns), 1.5 + 0.25 * steps),
                             gridspec_kw={"width_ratios": [max(len(columns), 1), 1.5]})
    axes[0].imshow(alpha, aspect="auto", cmap="Greys", vmin=0)
    axes[0].set_xticks(range(len(columns)), columns, rotation=90, fontsize=7)
    axes[0].set_yticks(range(steps), rows, fontsize=7)
    axes[0].set_title("hybrid attention", fontsize=8)
    axes[1].barh(range(steps), gate[:steps] if has_gate else np.zeros(steps), color="grey")
    axes[1].set_xlim(0, 1)
    axes[1].set_ylim(steps - 0.5, -0.5)
    axes[1].set_yticks([])
    axes[1].set_title("gate z~ (content)", fontsize=8)
    fig.tight_layout()
    return fig


def _link_figure(plt, matrix, fields):
    shown = min(matrix.shape[0], MAX_FIELDS)
    sub = matrix[:shown, :shown]
    names = fields[:shown] if fields else [str(i) for i in range(shown)]
    fig, ax = plt.subplots(figsize=(2 + 0.3 * shown, 2 + 0.3 * shown))
    image = ax.imshow(sub, cmap="RdBu_r", vmin=-np.abs(sub).max() or -1, vmax=np.abs(sub).max() or 1)
    ax.set_xticks(range(shown), names, rotation=90, fontsize=7)
    ax.set_yticks(range(shown), names, fontsize=7)
    ax.set_xlabel("to field i")
    ax.set_ylabel("from field j")
    ax.set_title("link matrix L[f_j, f_i]", fontsize=8)
    fig.colorbar(image, ax=ax)
    fig.tight_layout()
    return fig


def _render(plt, fig) -> tf.Tensor:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=80)
    plt.close(fig)
    return tf.image.decode_png(buffer.getvalue(), channels=4)[None]
