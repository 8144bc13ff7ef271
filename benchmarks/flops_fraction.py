"""Benchmark: how far encdec-copy training and beam decoding are from this machine's limit.

Prints, for the peer size of `train_throughput.py` (1 x 256 LSTM decoder, 256-d embeddings,
batch 64, E2E), the analytic FLOPs per target token of a training step and per hypothesis of
one beam-search step, this machine's float32 matmul peak (a TF micro-benchmark with the
same thread count), and the achieved fraction = tokens/s x FLOPs/token / peak.

    .venv/bin/python benchmarks/flops_fraction.py [--hidden 256] [--steps 150]
        [--decode-tokens-per-second N]   # from benchmarks/decode_speed.py, optional

About 2 minutes. Counting convention: a multiply-add is 2 FLOPs; element-wise work
(gates, softmax, masks) is left out, so the fraction is an upper bound of the waste in
matmuls only; backward = 2 x forward (gradients of inputs and of weights).
"""

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


# Its part of forward_flops_per_token: a stacked layer l > 1 adds one more ([h^{l-1}; h^l] U_l).
RECURRENT = "recurrent ([h~; h] U)"


def corpus_sizes(train_dir: str):
    """-> (vocabulary size, mean records per table, mean target tokens + </s>) of a prepared
    training directory (its vocab/words.txt and stats.json)."""
    stats = json.load(open(os.path.join(train_dir, "stats.json")))
    vocab = sum(1 for _ in open(os.path.join(train_dir, "vocab", "words.txt"), encoding="utf-8"))
    return vocab, stats["records"]["mean"], stats["target_tokens"]["mean"] + 1


def forward_flops_per_token(hidden: int, word_dim: int, vocab: int, records: float, target_length: float) -> dict:
    """Multiply-adds x 2 of one target token (Luong input-feeding decoder + joint copy)."""
    h, e = hidden, word_dim
    per_token = {
        "input gates (emb W_x)": 2 * e * 4 * h,
        RECURRENT: 2 * 2 * h * 4 * h,
        "attention scores + context": 2 * 2 * records * h,
        "attentional vector ([c; h] W_c)": 2 * 2 * h * h,
        "vocabulary projection": 2 * h * vocab,
        "copy scores + switch": 2 * records * h + 2 * 3 * h,
        # per-example work (attention and copy keys W r_s, record encoder) spread over its tokens
        "keys and record encoder (per token)": 3 * 2 * records * h * h / target_length,
    }
    return per_token


def matmul_peak(threads: int, size: int = 1024, seconds: float = 5.0) -> float:
    import tensorflow as tf

    a = tf.random.normal([size, size])
    b = tf.random.normal([size, size])

    @tf.function
    def chain(x, y):
        for _ in range(10):
            x = tf.matmul(x, y) * 1e-3
        return x

    chain(a, b).numpy()
    runs, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        chain(a, b).numpy()
        runs += 1
    elapsed = time.perf_counter() - start
    return runs * 10 * 2 * size ** 3 / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.path.join(ROOT, "runs", "data", "e2e"))
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--decode-tokens-per-second", type=float, default=0.0,
                        help="beam hypotheses x steps per second of a decode run (decode_speed.py)")
    args = parser.parse_args()

    import tensorflow as tf

    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import train_throughput

    train_dir = train_throughput.ensure_data(args.data)
    vocab, records, target_length = corpus_sizes(train_dir)
    sizes = {"model.num_layers": 1, "model.hidden_size": args.hidden, "model.word_dim": args.hidden,
             "model.value_dim": args.hidden}
    result = train_throughput.measure(train_dir, sizes, args.steps, warmup=30)
    threads = result["threads"]
    peak = matmul_peak(threads)

    parts = forward_flops_per_token(args.hidden, args.hidden, vocab, records, target_length)
    forward = sum(parts.values())
    train_flops = 3 * forward
    print(f"size: 1 x {args.hidden} LSTM, vocabulary {vocab:,}, {records:.1f} records, "
          f"{target_length:.1f} target tokens per example, {threads} threads")
    for name, flops in sorted(parts.items(), key=lambda kv: -kv[1]):
        print(f"  {name:38s} {flops / 1e6:7.3f} MFLOP/token forward ({100 * flops / forward:4.1f} %)")
    print(f"training: {train_flops / 1e6:.2f} MFLOP per target token (3 x forward)")
    print(f"float32 matmul peak (1024^2, {threads} threads): {peak / 1e9:.1f} GFLOP/s")
    achieved = result["tokens_per_second"] * train_flops
    print(f"training: {result['tokens_per_second']:,} tokens/s -> {achieved / 1e9:.1f} GFLOP/s = "
          f"{100 * achieved / peak:.1f} % of peak")
    if args.decode_tokens_per_second:
        step = forward - parts["keys and record encoder (per token)"]
        achieved = args.decode_tokens_per_second * step
        print(f"beam decoding: {step / 1e6:.2f} MFLOP per hypothesis step; {args.decode_tokens_per_second:,.0f} "
              f"hypothesis steps/s -> {achieved / 1e9:.1f} GFLOP/s = {100 * achieved / peak:.1f} % of peak")
    del tf


if __name__ == "__main__":
    main()
