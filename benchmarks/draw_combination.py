"""Trial outside the graph: minimum Bayes risk over several independently trained systems
(docs/e2e_quality_log.md, "MBR system combination, slot budget under MBR").

``cache`` decodes one system (a run, or an ensemble: ``--model`` + ``--ensemble``) once and
keeps, per table, its kept beams (their tokens, output text, score and slot errors; beam
``--beam-size``, end gate ``--slot-end-penalty``) and ``--samples`` draws of it (epsilon
sampling, as `tablegen evaluate --mbr-weight` draws them). ``combine`` then picks one text per
table among every cached system's beams by

    score - W x slot errors + M x mean sentence BLEU (token level) against every system's draws

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
FIELDS = ("tokens", "outputs", "scores", "errors", "sample_tokens")


def decode_system(trained, examples, beam: int, end_penalty: float, samples: int, epsilon: float,
                  seed: int, batch_size: int = 16) -> dict:
    """-> FIELDS as arrays over tables: beams' tokens / output texts / scores (-inf: dead) /
    slot errors [N, K], the draws' tokens [N, S]."""
    import tensorflow as tf

    from tablegen_tf.constants import NEG_INF
    from tablegen_tf.decoding.common import tile_batch
    from tablegen_tf.generation import decode_beams, mbr_sampler
    from tablegen_tf.metrics.slot_graph import slot_errors

    featurizer = trained.featurizer
    search = dataclasses.replace(trained.config.decode, beam_size=beam, slot_end_penalty=end_penalty,
                                 slot_rerank_weight=0.0, coverage_rerank_weight=0.0, pragmatic_alpha=0.0,
                                 mbr_weight=0.0)
    sampling = dataclasses.replace(search, mbr_weight=1.0, mbr_samples=samples, mbr_epsilon=epsilon, mbr_seed=seed)

    @tf.function(reduce_retracing=True)
    def run(batch):
        ids, lengths, scores, _, memory = decode_beams(trained.model, featurizer, batch, search)
        k = tf.shape(ids)[1]
        tokens = featurizer.candidate_texts(batch, ids, lengths)
        errors = slot_errors(*featurizer.slot_table(batch), tokens)
        flat_ids = tf.reshape(ids, [-1, tf.shape(ids)[2]])
        outputs = tf.reshape(featurizer.output_text(tile_batch(batch, k), flat_ids, tf.reshape(lengths, [-1])),
                             [-1, k])
        sample_ids, sample_lengths, _ = mbr_sampler(trained.model, batch, sampling, memory)()
        return tokens, outputs, scores, errors, featurizer.candidate_texts(batch, sample_ids, sample_lengths)

    parts = {name: [] for name in FIELDS}
    for batch in featurizer.ordered_batches([e.serialize() for e in examples], batch_size):
        for name, value in zip(FIELDS, run(batch)):
            parts[name].append(value.numpy())
    arrays = {name: np.concatenate(values) for name, values in parts.items()}
    arrays["scores"] = np.where(arrays["scores"] > NEG_INF / 2, arrays["scores"], -np.inf)
    return arrays


def choose(systems, slot_weight: float, mbr_weight: float, witnesses=()) -> list:
    """``systems``: FIELDS dicts of one table set -> per table, the chosen beam's output text;
    ``witnesses``: more such dicts whose draws join the evidence but whose beams are no candidates."""
    import tensorflow as tf

    from tablegen_tf.metrics.bleu_graph import sentence_bleu

    pooled = {name: np.concatenate([system[name] for system in systems], axis=1) for name in FIELDS}
    pooled["sample_tokens"] = np.concatenate([pooled["sample_tokens"], *(w["sample_tokens"] for w in witnesses)],
                                             axis=1)
    vocabulary = {}

    def ids(texts):
        rows = [[vocabulary.setdefault(w, len(vocabulary) + 1) for w in _text(t).split()] for t in texts]
        width = max(1, max(len(row) for row in rows))
        return (np.array([row + [0] * (width - len(row)) for row in rows], np.int32)[None],
                np.array([len(row) for row in rows], np.int32)[None])

    bleu = tf.function(sentence_bleu, reduce_retracing=True)
    chosen = []
    for table in range(len(pooled["scores"])):
        gain = tf.reduce_mean(bleu(*ids(pooled["tokens"][table]), *ids(pooled["sample_tokens"][table])), axis=2)
        key = pooled["scores"][table] - slot_weight * pooled["errors"][table] + mbr_weight * gain.numpy()[0]
        chosen.append(_text(pooled["outputs"][table][int(np.argmax(key))]))
    return chosen


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
    texts = choose(systems, args.slot_weight, args.mbr_weight, witnesses)
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
