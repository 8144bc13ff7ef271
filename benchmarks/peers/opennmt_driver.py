"""The OpenNMT-py side of opennmt_vs_tablegen.py; runs in the PEER's virtualenv.

    benchmarks/peers/.venv/bin/python benchmarks/peers/opennmt_driver.py train  --config C.yaml --warmup 20 --steps 150
    benchmarks/peers/.venv/bin/python benchmarks/peers/opennmt_driver.py decode --model M.pt --src dev.src

Prints one line `RESULT {json}`. Uses OpenNMT-py's own entry points (onmt.bin.train.train,
onmt.inference_engine.InferenceEnginePY); the only additions are timing hooks and the
runtime fixes in :func:`apply_fixes` (documented in README.md, "Fixes applied to the peer").
"""

import argparse
import json
import resource
import statistics
import sys
import time


def peak_rss_mb() -> int:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def apply_fixes() -> None:
    """Runtime fixes OpenNMT-py 3.5.1 needs on torch 2.13 / with copy attention (see README)."""
    import argparse as argparse_module

    import torch

    # 1. torch >= 2.6 loads with weights_only=True; OpenNMT-py 3.5.1 checkpoints (written
    #    for torch < 2.3) pickle their options as an argparse.Namespace.
    torch.serialization.add_safe_globals([argparse_module.Namespace])

    # 2. Missing generator keys: the checkpoint keeps the copy generator's weights apart
    #    ("linear.weight", "linear_copy.weight", ...), but BaseModel.load_state_dict looks
    #    them up by the bare parameter name ("weight") and stops with "Missing key in
    #    checkpoint: generator.linear.weight". Moving them into the model's state dict under
    #    their module path lets the ordinary loading branch find them.
    import onmt.model_builder

    load_checkpoint = onmt.model_builder.load_checkpoint

    def load_checkpoint_with_generator(path):
        checkpoint = load_checkpoint(path)
        if checkpoint.get("generator"):
            checkpoint["model"].update({"generator." + k: v for k, v in checkpoint["generator"].items()})
            checkpoint["generator"] = None
        return checkpoint

    onmt.model_builder.load_checkpoint = load_checkpoint_with_generator

    # 4. Wrong dynamic-vocabulary offset: a copied word has id len(tgt vocab) + its index in
    #    the example's source vocabulary, but TranslationBuilder._build_target_tokens
    #    subtracts len(src vocab) (IndexError, or a wrong word when the sizes happen to
    #    fit). Hand it one vocabulary that resolves both ranges with the target offset.
    import onmt.translate.translation

    build_tokens = onmt.translate.translation.TranslationBuilder._build_target_tokens

    def build_tokens_with_copy(self, src, srclen, pred, attn, voc, dyn_voc):
        if dyn_voc is not None:
            voc = _TargetAndCopyVocab(voc, dyn_voc.ids_to_tokens)
        return build_tokens(self, src, srclen, pred, attn, voc, None)

    onmt.translate.translation.TranslationBuilder._build_target_tokens = build_tokens_with_copy


class _TargetAndCopyVocab:
    """ids < len(target) -> target word; above -> the example's copy vocabulary."""

    def __init__(self, target, copy_tokens):
        self.target, self.copy_tokens = target, copy_tokens

    def __len__(self):
        return len(self.target) + len(self.copy_tokens)

    def __getitem__(self, index):
        if index < len(self.target):
            return self.target[index]
        return self.copy_tokens[index - len(self.target)]


def fix_inference_copy(engine) -> None:
    """3. No src_map at inference: InferenceEnginePY builds its data iterator without
    copy=..., so the batches of a copy-attention model lack src_map / src_ex_vocab and
    Translator stops with KeyError: 'src_map'. Pass the model's own copy_attn flag."""
    import functools

    import onmt.inference_engine

    build = onmt.inference_engine.build_dynamic_dataset_iter
    onmt.inference_engine.build_dynamic_dataset_iter = functools.partial(build, copy=engine.translator.copy_attn)


def train(args) -> dict:
    import onmt.trainer
    from onmt.bin.train import _get_parser, train as onmt_train

    # Timing hook: one _gradient_accumulation call is one optimizer step (accum_count 1);
    # total_stats.n_words counts non-padding target tokens after <s> (words + </s>).
    marks = []
    original = onmt.trainer.Trainer._gradient_accumulation

    def timed_step(self, true_batches, normalization, total_stats, report_stats):
        before = total_stats.n_words
        original(self, true_batches, normalization, total_stats, report_stats)
        marks.append((time.perf_counter(), total_stats.n_words - before,
                      sum(int(b["tgt"].size(0)) for b in true_batches)))

    onmt.trainer.Trainer._gradient_accumulation = timed_step
    opt, _ = _get_parser().parse_known_args(["-config", args.config])
    onmt_train(opt)
    if len(marks) < args.warmup + 2:
        sys.exit(f"OpenNMT-py ran {len(marks)} steps, expected {args.warmup + args.steps}")
    timed = marks[args.warmup:]
    seconds = timed[-1][0] - marks[args.warmup - 1][0] if args.warmup else timed[-1][0] - timed[0][0]
    tokens = sum(m[1] for m in timed)
    sentences = sum(m[2] for m in timed)
    return {"tokens_per_second": round(tokens / seconds), "steps": len(timed), "seconds": round(seconds, 1),
            "target_tokens_per_sentence": round(tokens / sentences, 2), "peak_rss_mb": peak_rss_mb()}


def decode(args) -> dict:
    from onmt.bin.translate import _get_parser
    from onmt.inference_engine import InferenceEnginePY
    from onmt.utils.parse import ArgumentParser

    with open(args.src, encoding="utf-8") as f:
        sources = [line.rstrip("\n") for line in f]
    opt = _get_parser().parse_args([
        "-model", args.model, "-src", args.src, "-output", "/dev/null", "-beam_size", str(args.beam),
        "-batch_size", str(args.batch_size), "-batch_type", "sents", "-max_length", str(args.max_length),
        "-gpu", "-1", "-seed", "1", "-length_penalty", args.length_penalty,
    ])
    ArgumentParser.validate_translate_opts(opt)
    ArgumentParser._get_all_transform_translate(opt)
    ArgumentParser._validate_transforms_opts(opt)
    ArgumentParser.validate_translate_opts_dynamic(opt)
    engine = InferenceEnginePY(opt)
    fix_inference_copy(engine)
    engine.infer_list(sources[:args.batch_size])  # warm-up
    start = time.perf_counter()
    _, predictions = engine.infer_list(sources)
    rate = len(sources) / (time.perf_counter() - start)
    times = []
    engine.infer_list(sources[:1])
    for _ in range(args.latency_repeats):  # the first MR, as decode_speed.py does for ours
        start = time.perf_counter()
        engine.infer_list(sources[:1])
        times.append(time.perf_counter() - start)
    engine.terminate()
    return {"sentences_per_second": round(rate, 1), "p50_ms": round(statistics.median(times) * 1000, 1),
            "sentences": len(sources), "mean_output_words": sum(len(p[0].split()) for p in predictions) / len(sources),
            "example": predictions[0][0], "peak_rss_mb": peak_rss_mb()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("train")
    p.add_argument("--config", required=True)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--steps", type=int, default=150)
    p = sub.add_parser("decode")
    p.add_argument("--model", required=True)
    p.add_argument("--src", required=True)
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-length", type=int, default=80)
    p.add_argument("--latency-repeats", type=int, default=30)
    # OpenNMT-py's default "avg" ranks finished hypotheses by log-prob / length; "none" by
    # the sum of log-probs, as our plain beam search does.
    p.add_argument("--length-penalty", default="avg", choices=["avg", "none", "wu"])
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(args.threads)
    apply_fixes()
    result = train(args) if args.command == "train" else decode(args)
    result.update(threads=torch.get_num_threads(), torch=torch.__version__)
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
