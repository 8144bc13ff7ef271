"""Trial outside the graph: minimum Bayes risk over several independently trained systems
(docs/e2e_quality_log.md, "MBR system combination, slot budget under MBR").

``cache`` decodes one system (a run, or an ensemble: ``--model`` + ``--ensemble``) once and
keeps, per table, its kept beams (their texts, scores and slot errors; beam ``--beam-size``, end
gate ``--slot-end-penalty``: ``rerank_sweep.kept_beams``) and ``--samples`` draws of it (epsilon
sampling, as `tablegen evaluate --mbr-weight` draws them: ``rerank_sweep.sampled_texts``).
``combine`` then picks one text per table among every cached system's beams by

    score - W x slot errors + M x mean sentence BLEU (over the texts' words) against all draws

which, with one cache, is the recipe's MBR reranking outside the graph (the graph's BLEU runs on
ids, so ~15 % of the texts differ where two beams are nearly tied), and with several is MBR
system combination. Scores are the systems' own log-probabilities, so the systems should be
alike (e.g. draws of one recipe).

    .venv/bin/python benchmarks/draw_combination.py cache --model runs/s65/op128-s1 \\
        --ensemble runs/s65/op256-s1 runs/s65/op256c-s1 $SEL --out runs/s68/cache/d1-sel.npz
    .venv/bin/python benchmarks/draw_combination.py combine runs/s68/cache/d1-sel.npz \\
        runs/s68/cache/d2-sel.npz $SEL --slot-weight 20 --output runs/s68/d1+d2-sel.txt
"""

import argparse
import dataclasses
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
FIELDS = ("texts", "scores", "errors", "sample_texts")


def decode_system(trained, examples, beam: int, end_penalty: float, samples: int, epsilon: float,
                  seed: int) -> dict:
    """-> FIELDS as arrays over tables: the kept beams' texts / scores (-inf: a dead beam, text
    "") / slot errors [N, K], the draws' texts [N, S]."""
    from rerank_sweep import kept_beams, sampled_texts

    tables = kept_beams(trained, examples, beam, trained.config.decode.length_penalty, "slot",
                        end_penalty=end_penalty)
    draws = sampled_texts(trained, examples, samples, epsilon, "slot", seed)
    dead = ("", -np.inf, 0, 0.0)  # kept_beams leaves dead beams out
    padded = [beams + [dead] * (beam - len(beams)) for beams in tables]
    return {"texts": np.array([[b[0] for b in beams] for beams in padded], object),
            "scores": np.array([[b[1] for b in beams] for beams in padded], np.float32),
            "errors": np.array([[b[2] for b in beams] for beams in padded], np.int32),
            "sample_texts": np.array([[d[0] for d in table] for table in draws], object),
            "sample_scores": np.array([[d[1] for d in table] for table in draws], np.float32),
            "sample_errors": np.array([[d[2] for d in table] for table in draws], np.int32)}


def choose(systems, slot_weight: float, mbr_weight: float, witnesses=(), draw_candidates: bool = False,
           score_weight: float = 1.0) -> list:
    """``systems``: FIELDS dicts of one table set -> per table, the chosen beam's text;
    ``witnesses``: more such dicts whose draws join the evidence but whose beams are no candidates;
    ``draw_candidates``: the systems' draws are candidates too (with their log-probabilities and
    slot errors; a draw's BLEU against itself is left out of its mean, sampling-based MBR);
    ``score_weight``: the log-probability's weight in the key (0: MBR and slot errors only)."""
    import tensorflow as tf

    from tablegen_tf.metrics.bleu_graph import sentence_bleu

    pooled = {name: np.concatenate([system[name] for system in systems], axis=1) for name in FIELDS}
    pooled["sample_texts"] = np.concatenate([pooled["sample_texts"], *(w["sample_texts"] for w in witnesses)],
                                            axis=1)
    if draw_candidates:
        for name in ("texts", "scores", "errors"):
            draws_of = np.concatenate([system["sample_" + name] for system in systems], axis=1)
            pooled[name] = np.concatenate([pooled[name], draws_of], axis=1)
    draws = sum(system["sample_texts"].shape[1] for system in systems) if draw_candidates else 0
    vocabulary = {}

    def ids(texts):
        rows = [[vocabulary.setdefault(w, len(vocabulary) + 1) for w in _text(t).split()] for t in texts]
        width = max(1, max(len(row) for row in rows))
        return (np.array([row + [0] * (width - len(row)) for row in rows], np.int32)[None],
                np.array([len(row) for row in rows], np.int32)[None])

    bleu = tf.function(sentence_bleu, reduce_retracing=True)
    chosen = []
    for table in range(len(pooled["scores"])):
        utility = bleu(*ids(pooled["texts"][table]), *ids(pooled["sample_texts"][table])).numpy()[0]
        gain = _mean_leaving_out_self(utility, draws)
        key = (score_weight * pooled["scores"][table] - slot_weight * pooled["errors"][table]
               + mbr_weight * gain)
        chosen.append(_text(pooled["texts"][table][int(np.argmax(key))]))
    return chosen


def _mean_leaving_out_self(utility, draws: int):
    """utility [candidates, evidence] -> each candidate's mean; the last ``draws`` candidates are
    the first ``draws`` evidence texts themselves, and their own column is left out."""
    gain = utility.mean(axis=1)
    if draws:
        width = utility.shape[1]
        own = np.diagonal(utility[-draws:, :draws])
        gain[-draws:] = (utility[-draws:].sum(axis=1) - own) / (width - 1)
    return gain


def _text(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _examples(args, tokenizer_config):
    from tablegen_tf import inference

    raws, _ = inference.read_inputs(args.format, args.input, args.split, args.selection_fraction)
    return inference.build(raws, tokenizer_config, needs_text=True)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    cache = sub.add_parser("cache", help="decode one system's beams and draws to an .npz")
    cache.add_argument("--model", required=True)
    cache.add_argument("--ensemble", nargs="+", default=[], metavar="RUN")
    cache.add_argument("--beam-size", type=int, default=5)
    cache.add_argument("--slot-end-penalty", type=float, default=3.0)
    cache.add_argument("--samples", type=int, default=64)
    cache.add_argument("--epsilon", type=float, default=0.005)
    cache.add_argument("--seed", type=int, default=1)
    cache.add_argument("--out", required=True, help="the .npz to write")
    combine = sub.add_parser("combine", help="choose among cached systems' beams and score the texts")
    combine.add_argument("caches", nargs="+", help=".npz files of `cache`, same tables in the same order")
    combine.add_argument("--slot-weight", type=float, default=20.0)
    combine.add_argument("--mbr-weight", type=float, default=50.0)
    combine.add_argument("--witnesses", nargs="+", default=[], metavar="CACHE",
                         help="caches whose draws join the evidence, their beams not the candidates")
    combine.add_argument("--draw-candidates", action="store_true",
                         help="the systems' draws are candidates too (needs caches with sample_scores)")
    combine.add_argument("--score-weight", type=float, default=1.0,
                         help="weight of the log-probability in the key (0: MBR and slot errors only)")
    combine.add_argument("--output", default=None, help="write the chosen texts here")
    for command in (cache, combine):
        command.add_argument("--format", required=True)
        command.add_argument("--input", required=True)
        command.add_argument("--split", default=None)
        command.add_argument("--selection-fraction", type=float, default=0.0)
    args = parser.parse_args()
    sys.path.insert(0, ROOT)
    from tablegen_tf import inference
    from tablegen_tf.config import TokenizerConfig
    from tablegen_tf.ensemble import load_ensemble

    if args.action == "cache":
        trained = load_ensemble([args.model, *args.ensemble])
        arrays = decode_system(trained, _examples(args, trained.config.tokenizer), args.beam_size,
                               args.slot_end_penalty, args.samples, args.epsilon, args.seed)
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        np.savez(args.out, tokenizer=json.dumps(dataclasses.asdict(trained.config.tokenizer)), **arrays)
        return
    systems = [dict(np.load(path, allow_pickle=True)) for path in args.caches]
    tokenizer = TokenizerConfig(**json.loads(str(systems[0]["tokenizer"])))  # the references' tokenization
    witnesses = [dict(np.load(path, allow_pickle=True)) for path in args.witnesses]
    texts = choose(systems, args.slot_weight, args.mbr_weight, witnesses, args.draw_candidates,
                   args.score_weight)
    scores = inference.evaluate(_examples(args, tokenizer), texts, format_name=args.format)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as handle:
            handle.writelines(f"{text}\n" for text in texts)
    words = sum(len(text.split()) for text in texts) / max(len(texts), 1)
    print(f"{' + '.join(args.caches)}: bleu {scores['bleu']:.2f}, slot errors "
          f"{100 * scores.get('slot_error_rate', float('nan')):.2f} %, {words:.1f} words")


if __name__ == "__main__":
    from quiet import run_quietly

    run_quietly(main)
