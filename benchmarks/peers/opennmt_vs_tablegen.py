"""Benchmark: OpenNMT-py 3.5.1 (LSTM + copy attention) and tablegen side by side, one run.

Same machine, same run, same thread count (2), same sizes: 1-layer 256 bidirectional LSTM
encoder, 1 x 256 LSTM decoder with input feeding, 256-d embeddings, copy attention, batch
64 sentences, E2E. Measures, for each side: training target tokens/s (after warm-up steps),
beam-5 decoding of the 547 E2E dev tables in batches of 64 (sentences/s), p50 latency of
one table at beam 5, peak RSS; then prints ours/theirs ratios. Both decoders run twice.
OpenNMT-py at its default (`-length_penalty avg`: finished hypotheses ranked by log-prob /
length) and at `-length_penalty none` (ranked by the sum of log-probs, as our plain beam
search does: the same algorithm on both sides, the like-for-like rows); ours plain and with
the E2E config's slot reranking of the 5 beams (each entry then searches until all 5 end).
The four decoders run in turn, each in a new process, for --rounds rounds (default 3), and
the median of each figure is reported: the host's drift (+-20 % within minutes) then reaches
both sides alike instead of deciding the ratio.

    .venv/bin/python benchmarks/peers/opennmt_vs_tablegen.py            # ~20 min on an idle 2-core host
    .venv/bin/python benchmarks/peers/opennmt_vs_tablegen.py --quick    # ~5 min smoke run

The peer runs in its own virtualenv (benchmarks/peers/setup_opennmt.sh builds it on first
use) through benchmarks/peers/opennmt_driver.py. Both decoders use the model trained by
the timed training run (warm-up + timed steps): speed does not depend on quality.
A benchmark, not a test: see benchmarks/peers/README.md.
"""

import argparse
import collections
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
PEER_PYTHON = os.path.join(HERE, ".venv", "bin", "python")
PEER_DRIVER = os.path.join(HERE, "opennmt_driver.py")
ALIGNED = os.path.join(ROOT, "..", "shared", "data", "e2e", "aligned")
DEFAULT_THREADS = 2
THREADS = DEFAULT_THREADS  # of both sides; --threads sets it for both
say = functools.partial(print, flush=True)  # the console; main() points it past logs.session's capture
from train_throughput import PEER_SIZE  # noqa: E402  (its size key; stdlib-only at import)
# The sizes of train_throughput.py's peer size, in OpenNMT-py options (hidden_size 256 with
# brnn = 2 x 128 directions concatenated, as OpenNMT-py users set it).
OPENNMT_MODEL = {
    "model_type": "text", "encoder_type": "brnn", "decoder_type": "rnn", "rnn_type": "LSTM",
    "enc_layers": 1, "dec_layers": 1, "hidden_size": 256, "word_vec_size": 256, "input_feed": 1,
    "global_attention": "general", "copy_attn": True, "dropout": 0.3,
    "batch_size": 64, "batch_type": "sents", "optim": "adam", "learning_rate": 0.001,
    # num_workers 0: data loading in the training process, so the peer keeps to 2 threads.
    # bucket_size: OpenNMT-py 3.5's default 262,144 repeats this 42k corpus 6 times and
    # takes minutes to fill before step 1; 32,768 still sorts ~512 batches by length.
    "num_workers": 0, "bucket_size": 32768, "seed": 1, "world_size": 1, "gpu_ranks": [],
    "report_every": 50, "tensorboard": False,
}


def thread_env(peer: bool, work: str = None) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(THREADS), MKL_NUM_THREADS=str(THREADS),
               TF_NUM_INTRAOP_THREADS=str(THREADS), TF_NUM_INTEROP_THREADS=str(THREADS))
    if not peer:
        return env
    # libgomp spin-waits between the 2 OpenMP threads; on a host busier than its
    # cores that makes every small op ~100x slower (measured: 50 LSTM cells 5.5 s vs
    # 0.3 s). Passive waiting is the peer's best setting, not a handicap.
    env["OMP_WAIT_POLICY"] = "PASSIVE"
    if work:  # torch keeps a compile cache in /tmp/torchinductor_<user> otherwise, left behind
        env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(work, "torchinductor")
    return env


def run_json(command, env, label: str, log_path: str) -> dict:
    with open(log_path, "w") as log:
        proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=log, text=True, env=env, cwd=ROOT)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    if proc.returncode or not lines:
        say(f"{label} failed (exit {proc.returncode}); log: {log_path}\n{open(log_path).read()[-3000:]}")
        sys.exit(1)
    return json.loads(lines[-1][len("RESULT "):])


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


# ------------------------------------------------------------------ data


def linearise(items, tokens_of) -> str:
    """`name [ The Vaults ] eattype [ pub ] ...`: fields in table order, values in our tokens."""
    return " ".join(f"{item.field} [ {' '.join(tokens_of[item.value])} ]" for item in items)


def write_vocab(path: str, lines) -> int:
    counts = collections.Counter(token for line in lines for token in line.split())
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(f"{token}\t{count}\n" for token, count in counts.most_common())
    return len(counts)


def prepare_opennmt_data(out: str, dev_limit: int) -> dict:
    """OpenNMT-py text files from the same E2E data and tokenizer our `prepare` uses."""
    from decode_speed import e2e_tables
    from tablegen_tf.inference import read_inputs
    from tablegen_tf.tokenizer import tokenize_batch

    os.makedirs(out, exist_ok=True)
    train, _ = read_inputs("e2e-aligned", ALIGNED, "train")
    dev = [json.loads(t)["table"] for t in e2e_tables(dev_limit)]
    values = sorted({i.value for t in train for i in t.items} | {r["value"] for t in dev for r in t})
    tokens_of = dict(zip(values, tokenize_batch(values)))
    targets = [" ".join(tokens) for tokens in tokenize_batch([t.texts[0] for t in train])]
    sources = [linearise(t.items, tokens_of) for t in train]
    dev_sources = [" ".join(f"{r['field']} [ {' '.join(tokens_of[r['value']])} ]" for r in t) for t in dev]
    for name, lines in (("train.src", sources), ("train.tgt", targets), ("dev.src", dev_sources)):
        with open(os.path.join(out, name), "w", encoding="utf-8") as f:
            f.writelines(line + "\n" for line in lines)
    return {"train": len(sources), "dev": len(dev_sources),
            "src_vocab": write_vocab(os.path.join(out, "src.vocab"), sources),
            "tgt_vocab": write_vocab(os.path.join(out, "tgt.vocab"), targets),
            "target_tokens_per_sentence": sum(len(t.split()) + 1 for t in targets) / len(targets),
            "source_tokens_per_sentence": sum(len(s.split()) for s in sources) / len(sources)}


# ------------------------------------------------------------------ the peer


def opennmt_config(data: str, run: str, steps: int) -> str:
    import yaml

    config = dict(OPENNMT_MODEL)
    config.update({
        "data": {"corpus_1": {"path_src": os.path.join(data, "train.src"),
                              "path_tgt": os.path.join(data, "train.tgt")}},
        "src_vocab": os.path.join(data, "src.vocab"), "tgt_vocab": os.path.join(data, "tgt.vocab"),
        "src_vocab_size": 50000, "tgt_vocab_size": 50000,  # our --max-words; E2E stays below it
        "save_data": run, "save_model": os.path.join(run, "model"),
        "train_steps": steps, "save_checkpoint_steps": steps, "log_file": os.path.join(run, "train.log"),
    })
    path = os.path.join(run, "config.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(config, f)
    return path


def train_peer(work: str, data: str, args) -> tuple:
    """-> (training figures, checkpoint path)."""
    subprocess.run([os.path.join(HERE, "setup_opennmt.sh")], check=True)
    run = os.path.join(work, "opennmt-run")
    os.makedirs(run, exist_ok=True)
    config = opennmt_config(data, run, args.warmup + args.steps)
    say("OpenNMT-py: training ...")
    train = run_json([PEER_PYTHON, PEER_DRIVER, "--threads", str(THREADS), "train", "--config", config,
                      "--warmup", str(args.warmup), "--steps", str(args.steps)],
                     thread_env(peer=True, work=work), "OpenNMT-py training", os.path.join(work, "opennmt-train.log"))
    return train, os.path.join(run, f"model_step_{args.warmup + args.steps}.pt")


def peer_decoders(work: str, data: str, model: str, args) -> dict:
    """key -> a function decoding the dev MRs in a new peer process (-> its figures).
    Its default ranks finished hypotheses by log-prob / length ("avg"); "none" ranks them
    by the sum, as our plain search does: the same algorithm on both sides."""
    def decoder(penalty):
        return lambda log: run_json(
            [PEER_PYTHON, PEER_DRIVER, "--threads", str(THREADS), "decode", "--model", model,
             "--src", os.path.join(data, "dev.src"), "--latency-repeats", str(args.latency_repeats),
             "--length-penalty", penalty],
            thread_env(peer=True, work=work), f"OpenNMT-py decoding (length_penalty {penalty})",
            os.path.join(work, f"opennmt-decode-{penalty}-{log}.log"))

    return {"peer_avg": decoder("avg"), "peer_sum": decoder("none")}


# ------------------------------------------------------------------ ours


def train_ours(work: str, args) -> tuple:
    """-> (training figures of train_throughput.py, run directory of the model to decode with)."""
    say("tablegen: training ...")
    train = run_json([sys.executable, os.path.join(ROOT, "benchmarks", "train_throughput.py"), "--size", PEER_SIZE,
                      "--steps", str(args.steps), "--warmup", str(args.warmup), "--data", args.data],
                     thread_env(peer=False), "tablegen training", os.path.join(work, "tablegen-train.log"))
    run = os.path.join(work, "tablegen-run")
    say("tablegen: training the model to decode with ...")
    command = [sys.executable, "-m", "tablegen_cli.main", "train", "--config", "e2e",
               "--train", os.path.join(args.data, "train"), "--out", run, "--max-steps", str(args.warmup + args.steps),
               "--no-progress", "--set", "model.name=encdec-copy", "--set", "data.batch_size=64"]
    for key, value in (("hidden_size", 256), ("word_dim", 256), ("value_dim", 256), ("num_layers", 1)):
        command += ["--set", f"model.{key}={value}"]
    with open(os.path.join(work, "tablegen-train-model.log"), "w") as log:
        subprocess.run(command, check=True, stdout=log, stderr=log, env=thread_env(peer=False), cwd=ROOT)
    return train, run


def our_decoders(work: str, run: str, args) -> dict:
    """Exports the run twice; key -> a function decoding the dev tables with one export in a
    new process. The E2E config's decoding reranks the 5 beams by slot errors, so each entry
    searches until all 5 end; OpenNMT-py does not rerank and stops an entry when its best
    beam ends, as our plain beam search does: that one is the like-for-like figure."""
    def decoder(export, name):
        return lambda log: run_json(
            [sys.executable, __file__, "--ours-decode", export, "--dev-limit", str(args.dev_limit),
             "--latency-repeats", str(args.latency_repeats)],
            thread_env(peer=False), f"tablegen decoding ({name})", os.path.join(work, f"{name}-decode-{log}.log"))

    decoders = {}
    for key, name, flags in (("ours_plain", "tablegen-export-plain", ["--slot-rerank-weight", "0"]),
                             ("ours_reranked", "tablegen-export", [])):
        export = os.path.join(work, name)
        say(f"tablegen: exporting {name} ...")
        subprocess.run([sys.executable, "-m", "tablegen_cli.main", "export", "--model", run, "--output", export,
                        *flags], check=True, capture_output=True, env=thread_env(peer=False), cwd=ROOT)
        decoders[key] = decoder(export, name)
    return decoders


def decode_rounds(decoders: dict, rounds: int) -> dict:
    """Every decoder once per round, in turn (each a new process), so a drift of the host
    reaches both sides alike -> key -> the median of each figure over the rounds (peak
    RSS: the largest)."""
    runs = {key: [] for key in decoders}
    for round_ in range(1, rounds + 1):
        for key, decode in decoders.items():
            result = decode(round_)
            rate, p50 = rate_and_p50(result)
            say(f"decoding round {round_}/{rounds}: {key:13} {rate:6.1f} sentences/s, one sentence p50 {p50:5.1f} ms")
            runs[key].append(result)
    return {key: median_figures(results) for key, results in runs.items()}


def median_figures(results: list) -> dict:
    out = dict(results[0])
    for name, value in results[0].items():
        if isinstance(value, (int, float)):
            values = [r[name] for r in results]
            out[name] = max(values) if name == "peak_rss_mb" else statistics.median(values)
    return out


def ours_decode_child(saved_model: str, args) -> None:
    """Child process (own peak RSS): decode_speed.measure on the exported SavedModel."""
    import resource

    from decode_speed import e2e_tables, measure

    result = measure(saved_model, e2e_tables(args.dev_limit), beams=(5,), repeats=args.latency_repeats)
    result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print("RESULT " + json.dumps(result), flush=True)


# ------------------------------------------------------------------ report


def rate_and_p50(result: dict) -> tuple:
    """(batched sentences/s, one-sentence p50 ms) of decode_speed.measure's result (ours)
    or of opennmt_driver.py decode's (the peer), which name them differently."""
    if "tables_per_second" in result:
        return result["tables_per_second"], result["beam5_p50_ms"]
    return result["sentences_per_second"], result["p50_ms"]


def decode_rows(label: str, ours: dict, peer: dict) -> list:
    (ours_rate, ours_p50), (peer_rate, peer_p50) = rate_and_p50(ours), rate_and_p50(peer)
    return [
        (f"{label}: sentences/s", ours_rate, peer_rate, True),
        (f"{label}: output words/s", ours_rate * ours["mean_output_words"],
         peer_rate * peer["mean_output_words"], True),
        (f"{label}: one sentence p50 ms", ours_p50, peer_p50, False),
    ]


def report(ours: dict, peer: dict) -> None:
    """Decoding rows, beam 5, batches of 64: (1) the same algorithm on both sides, finished
    hypotheses ranked by the sum of log-probs and an entry stopped once its best beam has
    ended (ours plain, OpenNMT-py -length_penalty none); (2) ours plain against OpenNMT-py's
    default (log-prob / length); (3) ours with the E2E config's slot reranking (every beam
    run to its end: more work per sentence) against OpenNMT-py's default."""
    rows = [("training target tokens/s", ours["train"]["tokens_per_second"], peer["train"]["tokens_per_second"], True)]
    rows += decode_rows("same ranking", ours["decode_plain"], peer["decode_sum"])
    rows += decode_rows("peer's default", ours["decode_plain"], peer["decode"])
    rows += decode_rows("+ slot reranking", ours["decode"], peer["decode"])
    rows += [
        ("peak RSS training (MB)", ours["train"]["peak_rss_mb"], peer["train"]["peak_rss_mb"], False),
        ("peak RSS decoding (MB)", ours["decode"]["peak_rss_mb"], peer["decode"]["peak_rss_mb"], False),
    ]
    say(f"\n{'':38}{'tablegen':>10}{'OpenNMT-py':>12}{'ours/theirs':>13}")
    for name, mine, theirs, higher_is_better in rows:
        note = "" if higher_is_better else " (lower is better)"
        say(f"{name:38}{mine:>10.1f}{theirs:>12.1f}{mine / theirs:>12.2f}x{note}")


def flops_fractions(args, sizes: dict, ours: dict, peer: dict) -> None:
    """Achieved fraction of this machine's matmul peak in training (flops_fraction.py's
    analytic FLOPs per target token, each side with its own vocabulary and memory length)."""
    from flops_fraction import corpus_sizes, forward_flops_per_token

    ours_vocab, ours_records, _ = corpus_sizes(os.path.join(args.data, "train"))
    target_length = sizes["target_tokens_per_sentence"]
    # In a child: this process's TensorFlow already runs with the default thread pools.
    peak = run_json([sys.executable, __file__, "--matmul-peak"], thread_env(peer=False), "matmul peak",
                    os.path.join(args.work_dir, "matmul-peak.log"))["flops_per_second"]
    say(f"\nfloat32 matmul peak ({THREADS} threads, TF): {peak / 1e9:.1f} GFLOP/s; training FLOPs per target "
          f"token as in benchmarks/flops_fraction.py (3 x forward, decoder side + attention memory):")
    for name, vocab, memory, rate in (
            ("tablegen", ours_vocab, ours_records, ours["train"]["tokens_per_second"]),
            ("OpenNMT-py", sizes["tgt_vocab"] + 4, sizes["source_tokens_per_sentence"],
             peer["train"]["tokens_per_second"])):
        flops = 3 * sum(forward_flops_per_token(256, 256, vocab, memory, target_length).values())
        say(f"  {name:11} vocabulary {vocab:5d}, memory {memory:4.1f}: {flops / 1e6:5.2f} MFLOP/token x {rate:,} "
              f"tokens/s = {100 * rate * flops / peak:4.1f} % of peak")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: 5+30 steps, 128 dev tables")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--dev-limit", type=int, default=547)
    parser.add_argument("--latency-repeats", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3,
                        help="decoding rounds, each side's decoders in turn, medians reported (default 3)")
    parser.add_argument("--data", default=os.path.join(ROOT, "runs", "data", "e2e"), help="our prepared E2E data")
    parser.add_argument("--work", default=os.path.join(ROOT, "runs", "peers"), help="peer data, models, logs")
    parser.add_argument("--threads", type=int, default=DEFAULT_THREADS, help="threads of each side (default 2)")
    parser.add_argument("-v", "--verbose", action="store_true", help="third-party logs on the console too")
    parser.add_argument("--no-flops", action="store_true", help="skip the matmul-peak fractions (~10 s)")
    parser.add_argument("--ours-decode", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--matmul-peak", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    global THREADS
    THREADS = args.threads
    if args.ours_decode:
        ours_decode_child(args.ours_decode, args)
        return
    if args.matmul_peak:
        from flops_fraction import matmul_peak

        print("RESULT " + json.dumps({"flops_per_second": matmul_peak(THREADS)}), flush=True)
        return
    if args.quick:
        args.warmup, args.steps, args.dev_limit, args.latency_repeats = 5, 30, 128, 10
    os.makedirs(args.work, exist_ok=True)
    work = tempfile.mkdtemp(prefix="run-", dir=args.work)
    from tablegen_tf import logs

    with logs.session(args.verbose, os.path.join(work, "benchmark.log")) as console:
        global say  # noqa: PLW0603  (the console of this session)
        say = functools.partial(print, file=console.out, flush=True)
        compare(args, work)


def compare(args, work: str) -> None:
    args.work_dir = work
    say(f"load at start: {uptime()}")
    from train_throughput import ensure_data

    ensure_data(args.data)
    data = os.path.join(work, "opennmt-data")
    sizes = prepare_opennmt_data(data, args.dev_limit)
    say(f"OpenNMT-py data: {sizes['train']} training pairs, {sizes['dev']} dev tables, vocabularies "
          f"src {sizes['src_vocab']} / tgt {sizes['tgt_vocab']} (files in {data})")
    peer_train, peer_model = train_peer(work, data, args)
    ours_train, ours_run = train_ours(work, args)
    decoded = decode_rounds({**peer_decoders(work, data, peer_model, args), **our_decoders(work, ours_run, args)},
                            args.rounds)
    peer = {"train": peer_train, "decode": decoded["peer_avg"], "decode_sum": decoded["peer_sum"]}
    ours = {"train": ours_train, "decode": decoded["ours_reranked"], "decode_plain": decoded["ours_plain"]}
    say(f"\n{args.warmup} warm-up + {args.steps} timed training steps each, {THREADS} threads each. Target "
          f"tokens = words + end token, padding excluded, on both sides (same tokenizer): "
          f"{sizes['target_tokens_per_sentence']:.2f} per training sentence, "
          f"{peer['train']['target_tokens_per_sentence']:.2f} in OpenNMT-py's timed batches. Mean output words "
          f"at beam 5: ours {ours['decode_plain']['mean_output_words']:.1f} "
          f"({ours['decode']['mean_output_words']:.1f} with slot reranking), "
          f"OpenNMT-py {peer['decode_sum']['mean_output_words']:.1f} "
          f"({peer['decode']['mean_output_words']:.1f} at its default length_penalty avg) "
          f"(both models trained only {args.warmup + args.steps} steps: speed, not quality). Decoding: the median "
          f"of {args.rounds} alternated round(s).")
    report(ours, peer)
    if not args.no_flops:
        flops_fractions(args, sizes, ours, peer)
    say(f"\nexample OpenNMT-py output: {peer['decode']['example']}")
    say(f"load at end: {uptime()}")


if __name__ == "__main__":
    main()
