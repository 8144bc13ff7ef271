"""Table 1 and Figure 2 of Mou et al. (2015) for trained runs of `seq-lm` and `backbone-lm`.

    python benchmarks/backbone_perplexity.py --seq runs/hl_seq --backbone runs/hl_backbone \
        --data runs/data/headlines/test --out runs/hl_perplexity

Writes OUT/table1.md and OUT/perplexity.json (overall / first word / subsequent words PPL
for the sequential LM, the backbone LM and the backbone LM with w_s oracle), OUT/figure2.png
(PPL by position t: distance to the first word / the split word) and the same figure as a
TensorBoard image (OUT/tensorboard). Perplexity = exp(mean NLL per word), </s> excluded;
the backbone's split word is the featurizer's fixed hash position of each sentence.
Any model whose family has ``position_nll`` (tablegen_tf/models/backbone_lm) works.
"""

from __future__ import annotations

import argparse
import collections
import io
import json
import math
import os

import tensorflow as tf

from tablegen_tf.training.trainer import load_trained

MAX_T = 12


def accumulate(run_dir: str, data_dir: str, oracle: bool = False):
    """{distance: [sum nll, words]} over a prepared split."""
    trained = load_trained(run_dir)
    model = trained.model
    fn = tf.function(lambda batch: model.position_nll(batch, oracle=oracle), reduce_retracing=True)
    sums = collections.defaultdict(lambda: [0.0, 0])
    for batch in trained.featurizer.dataset(data_dir, training=False):
        nll, distance, mask = (x.numpy() for x in fn(batch))
        for value, t in zip(nll[mask], distance[mask]):
            sums[int(t)][0] += float(value)
            sums[int(t)][1] += 1
    return dict(sums)


def ppl(sums, keep=lambda t: True) -> float:
    total = sum(v[0] for t, v in sums.items() if keep(t))
    count = sum(v[1] for t, v in sums.items() if keep(t))
    return math.exp(total / count) if count else float("nan")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seq", required=True, help="run directory of a seq-lm")
    parser.add_argument("--backbone", required=True, help="run directory of a backbone-lm")
    parser.add_argument("--data", required=True, help="prepared split (e.g. runs/data/headlines/test)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    runs = {"Sequential LM": accumulate(args.seq, args.data), "Backbone LM": accumulate(args.backbone, args.data)}
    oracle = accumulate(args.backbone, args.data, oracle=True)
    rows = {name: {"overall": ppl(s), "first": ppl(s, lambda t: t == 0), "subsequent": ppl(s, lambda t: t > 0),
                   "words": sum(v[1] for v in s.values())} for name, s in runs.items()}
    rows["Backbone LM (w_s oracle)"] = {"overall": ppl(oracle), "first": None, "subsequent": None,
                                        "words": sum(v[1] for v in oracle.values())}
    curve = {name: {t: ppl(s, lambda d, t=t: d == t) for t in range(MAX_T) if t in s} for name, s in runs.items()}
    lines = ["| Method | Overall PPL | First word's PPL | Subsequent words' PPL |", "|---|---|---|---|"]
    for name, r in rows.items():
        cells = [f"{r[k]:.1f}" if r[k] is not None else "–" for k in ("overall", "first", "subsequent")]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    print(table)
    with open(os.path.join(args.out, "table1.md"), "w") as handle:
        handle.write(f"Perplexity on {args.data} ({rows['Sequential LM']['words']} words)\n\n{table}\n")
    with open(os.path.join(args.out, "perplexity.json"), "w") as handle:
        json.dump({"table": rows, "by_position": curve}, handle, indent=2)
    png = figure(curve, os.path.join(args.out, "figure2.png"))
    writer = tf.summary.create_file_writer(os.path.join(args.out, "tensorboard"))
    with writer.as_default(step=0):
        tf.summary.image("figure2_perplexity_by_position", tf.image.decode_png(png)[None], step=0)
        tf.summary.text("table1", table, step=0)
    writer.flush()
    return 0


def figure(curve, path: str) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5), dpi=120)
    for (name, points), marker in zip(curve.items(), ("o", "s")):
        ts = sorted(points)
        ax.plot(ts, [points[t] for t in ts], marker=marker, label=name)
    ax.set_xlabel("position t (distance to the first / split word)")
    ax.set_ylabel("perplexity")
    ax.set_yscale("log")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    with open(path, "wb") as handle:
        handle.write(buffer.getvalue())
    return buffer.getvalue()


if __name__ == "__main__":
    raise SystemExit(main())
