"""Experiment: the Miao & Blunsom 2016 label-size sweep (their Tables 1-3 shape) from trained runs.

Each ``--row MODEL:PAIRS:RUN`` names a run written by `tablegen train` (fsc, asc, asc+fsc;
an ``asc`` run is scored with its own decoding only: pointer, its beta and t are untrained).
The script scores its best checkpoint on the valid split of the Google pairs with
`tablegen evaluate --format compression`, extractively and abstractively (a sibling run
directory RUN.abs shares the checkpoints; its config sets model.decoding=abstractive),
keeps each report in RESULTS/<run>.{ext,abs}.json (reused when present), writes the rows to
RESULTS/sweep.json, prints the markdown table and plots token F1 and ROUGE-L against the
labelled pairs plus each run's learning curve on its selection split (validation BLEU and
loss per step, from RUN/logs/valid) to --plot. A row whose RUN directory is gone (the runs of an
earlier session) is taken as it is from RESULTS/sweep.json, so new rows can join the table and plot.

    .venv/bin/python benchmarks/compression_sweep.py \\
        --row FSC:1000:runs/fsc_1k --row ASC+FSC_1:1000:runs/ascfsc1_1k ... --plot docs/compression_sweep.png
"""

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAIRS = os.path.join(ROOT, "..", "shared", "data", "compression", "google_train.tsv")
COLUMNS = ("token_f1", "token_f1_micro", "compression_ratio", "rouge1_f", "rouge2_f", "rougeL_f")
CURVE_TAGS = ("bleu", "loss")  # the trainer's validation scalars (tablegen_tf/training/trainer.py)


def tablegen(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "tablegen_cli.main", *args], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode not in (0, 1):  # 1: some rows are dead letters (not deletions); scores still printed
        sys.exit(f"tablegen {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    return proc.stdout


def abstractive_sibling(run: str) -> str:
    """RUN.abs: RUN's checkpoints and vocabularies under a config decoding with eq. 21."""
    sibling = run.rstrip("/") + ".abs"
    os.makedirs(sibling, exist_ok=True)
    with open(os.path.join(run, "config.json")) as handle:
        config = json.load(handle)
    config["model"]["decoding"] = "abstractive"
    with open(os.path.join(sibling, "config.json"), "w") as handle:
        json.dump(config, handle, indent=1)
    for name in ("best", "checkpoints", "vocab"):
        link = os.path.join(sibling, name)
        if os.path.exists(os.path.join(run, name)) and not os.path.lexists(link):
            os.symlink(os.path.abspath(os.path.join(run, name)), link)
    return sibling


def scores(run: str, results: str, mode: str) -> dict:
    path = os.path.join(results, f"{os.path.basename(run.rstrip('/'))}.{mode}.json")
    if not os.path.exists(path):
        model = run if mode == "ext" else abstractive_sibling(run)
        report = tablegen("evaluate", "--model", model, "--format", "compression", "--input", PAIRS,
                          "--split", "valid")
        with open(path, "w") as handle:
            handle.write(report)
    with open(path) as handle:
        report = handle.read()
    return json.loads(report[report.index("{"):]) | {"checkpoint": report.splitlines()[0]}


def learning_curve(run: str) -> dict:
    """{tag: [(step, value)]} of the run's validation scalars (selection split)."""
    import tensorflow as tf

    curves = {tag: [] for tag in CURVE_TAGS}
    logs = os.path.join(run, "logs", "valid")
    for name in sorted(os.listdir(logs)) if os.path.isdir(logs) else []:
        for event in tf.compat.v1.train.summary_iterator(os.path.join(logs, name)):
            for value in event.summary.value:
                tag = value.tag.split("/")[-1]
                if tag in curves:
                    curves[tag].append((event.step, float(tf.make_ndarray(value.tensor))))
    return {tag: sorted(points) for tag, points in curves.items()}


def table(rows: list) -> str:
    head = ("| model | labelled | steps (best) | decoding | token F1 | F1 micro | ratio (ref) | R-1 | R-2 | R-L "
            "| valid ppl |\n|---|---|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for row in rows:
        for mode in ("ext", "abs"):
            s = row[mode]
            if s is None:
                continue
            ppl = s.get("perplexity")
            lines.append(
                f"| {row['model']} | {row['pairs']:,} | {row['steps']} ({row['best_step']}) | {mode} | "
                f"{s['token_f1']:.3f} | {s['token_f1_micro']:.3f} | {s['compression_ratio']:.3f} "
                f"({s['reference_compression_ratio']:.3f}) | {s['rouge1_f']:.3f} | {s['rouge2_f']:.3f} | "
                f"{s['rougeL_f']:.3f} | {'' if ppl is None else f'{ppl:.2f}'} |")
    return "\n".join(lines)


def plot(rows: list, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(20, 4.5))
    models = sorted({row["model"] for row in rows})
    for ax, (mode, metric) in zip(axes[:3], (("ext", "token_f1"), ("abs", "token_f1"), ("ext", "rougeL_f"))):
        for model in models:
            points = sorted((row["pairs"], row[mode][metric]) for row in rows if row["model"] == model and row[mode])
            if not points:
                continue
            ax.plot(*zip(*points), marker="o", label=model)
        ax.set_xscale("log")
        ax.set_xlabel("labelled pairs")
        ax.set_title(f"{metric} ({'extractive' if mode == 'ext' else 'abstractive'}), valid")
        ax.legend()
    for row in rows:
        points = row["curve"].get("bleu", [])
        if points:
            axes[3].plot(*zip(*points), label=f"{row['model']} {row['pairs']:,}")
    axes[3].set_xlabel("step")
    axes[3].set_title("selection-split BLEU during training")
    axes[3].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--row", action="append", required=True, help="MODEL:PAIRS:RUN (repeatable)")
    parser.add_argument("--results", default=os.path.join(ROOT, "docs", "compression_results"))
    parser.add_argument("--plot", default=os.path.join(ROOT, "docs", "compression_sweep.png"))
    args = parser.parse_args()
    os.makedirs(args.results, exist_ok=True)
    stored_path = os.path.join(args.results, "sweep.json")
    stored = {}
    if os.path.exists(stored_path):
        with open(stored_path) as handle:
            stored = {row["run"]: row for row in json.load(handle)}
    rows = []
    for spec in args.row:
        model, pairs, run = spec.split(":", 2)
        if not os.path.isdir(run) and run in stored:
            rows.append(stored[run])
            print(f"{model} {pairs}: {run} is gone: its row from {stored_path}", flush=True)
            continue
        with open(os.path.join(run, "config.json")) as handle:
            config = json.load(handle)
        steps = config["train"]["max_steps"]
        ext = scores(run, args.results, "ext")
        best_step = ext["checkpoint"].split("ckpt-")[-1].split()[0] if "ckpt-" in ext["checkpoint"] else "?"
        rows.append({"model": model, "pairs": int(pairs), "run": run, "steps": steps, "best_step": best_step,
                     "ext": ext, "curve": learning_curve(run),
                     "abs": None if config["model"]["name"] == "asc" else scores(run, args.results, "abs")})
        print(f"{model} {pairs}: {json.dumps({c: round(ext[c], 4) for c in COLUMNS})}", flush=True)
    with open(os.path.join(args.results, "sweep.json"), "w") as handle:
        json.dump(rows, handle, indent=1)
    print(table(rows))
    plot(rows, args.plot)


if __name__ == "__main__":
    main()
