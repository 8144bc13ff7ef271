"""Experiment: beam width x length penalty x reranking weight, on a selection split.

One beam search per (beam, length penalty) keeps every beam (``generation.decode_beams``);
each weight then picks one beam per table by ``score - W x count``, the count
``tablegen_tf.reranking`` uses in the graph: missed table words
(``metrics.fact_graph.missed_table_facts``, ``--rerank coverage``) or slot errors
(``metrics.slot_graph.slot_errors``, ``--rerank slot``). A row equals
`tablegen evaluate --beam-size B --length-penalty A --coverage-rerank-weight W` (or
``--slot-rerank-weight W``; checked: selection bleu_webnlg 54.6322 both ways at beam 10,
lp 1.0, W 2) at one search per (B, A) instead of one per weight. ``--ensemble`` decodes
with the runs' averaged distributions, as `tablegen evaluate --ensemble` does. Two trials outside
the graph add a gain per beam: ``--mbr-weights`` (expected BLEU against the other beams, or with
``--mbr-samples`` against draws of the model; `tablegen evaluate --mbr-weight` is the built
version, with BLEU on token ids and other draws) and
``--retrieval-weights`` (BLEU against delexicalized training references of tables with the same
fields, from the rows outside the selection split). Prints one
markdown row per setting: challenge BLEU (``bleu_webnlg``, with its brevity penalty) for
WebNLG formats, else ``bleu``; coverage, slot error rate, hallucination, mean words.

    .venv/bin/python benchmarks/rerank_sweep.py --model runs/webnlg --format webnlg \\
        --input ../shared/data/webnlg/train --split train --selection-fraction 0.05 \\
        --beams 5 10 15 --length-penalties 1.0 --weights 0 0.5 1 2
    .venv/bin/python benchmarks/rerank_sweep.py --model runs/op128-s1 --ensemble runs/op256-s1 \\
        --format e2e-aligned --input ../shared/data/e2e/aligned --split train \\
        --selection-fraction 0.05 --rerank slot --beams 10 20 --length-penalties 0 0.5 --weights 5 20
"""

import argparse
import dataclasses
import itertools
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TF's C++ log lines off, as `tablegen` does


def kept_beams(trained, examples, beam: int, length_penalty: float, rerank: str = "coverage",
               batch_size: int = 64, end_penalty: float = 0.0, listener: bool = False):
    """-> per table, [(text, score, count, log L0)] of its live beams (best first); count:
    missed fact words (rerank "coverage") or slot errors ("slot"); log L0: the pragmatic
    listener's (``tablegen_tf.pragmatics``) when ``listener``, else 0."""
    import tensorflow as tf

    from tablegen_tf.constants import NEG_INF
    from tablegen_tf.generation import decode_beams
    from tablegen_tf.metrics.fact_graph import missed_table_facts
    from tablegen_tf.metrics.slot_graph import slot_errors
    from tablegen_tf.pragmatics import listener_log_probs

    featurizer = trained.featurizer
    decode = dataclasses.replace(trained.config.decode, beam_size=beam, length_penalty=length_penalty,
                                 slot_rerank_weight=0.0, coverage_rerank_weight=0.0,
                                 slot_end_penalty=end_penalty, pragmatic_alpha=0.0)

    @tf.function(reduce_retracing=True)
    def run(batch):
        ids, lengths, scores, _, _ = decode_beams(trained.model, featurizer, batch, decode)
        texts = featurizer.candidate_texts(batch, ids, lengths)
        fields, values, mask = featurizer.slot_table(batch)
        heard = (listener_log_probs(trained.model, *featurizer.omission_variants(batch), ids, lengths)
                 if listener else tf.zeros_like(scores))
        if rerank == "slot":
            return texts, scores, slot_errors(fields, values, mask, texts), heard
        return texts, scores, missed_table_facts(fields, values, mask, texts, featurizer.tokenizer), heard

    tables = []
    for batch in featurizer.ordered_batches([e.serialize() for e in examples], batch_size):
        for texts, scores, missed, heard in zip(*(x.numpy() for x in run(batch))):
            tables.append([(t.decode("utf-8"), float(s), int(m), float(h))
                           for t, s, m, h in zip(texts, scores, missed, heard) if s > NEG_INF / 2])
    return tables


def sampled_texts(trained, examples, samples: int, epsilon: float, rerank: str = "slot", seed: int = 1,
                  batch_size: int = 16) -> list:
    """-> per table, ``samples`` draws of the model as kept_beams' tuples (text, score, count,
    0): the SavedModel's draws (``tablegen_tf.generation.mbr_sampler``, epsilon sampling
    without the end gate); score: the draw's log-probability."""
    import tensorflow as tf

    from tablegen_tf.decoding.common import tile_batch
    from tablegen_tf.generation import mbr_sampler
    from tablegen_tf.metrics.fact_graph import missed_table_facts
    from tablegen_tf.metrics.slot_graph import slot_errors

    featurizer = trained.featurizer
    decode = dataclasses.replace(trained.config.decode, mbr_weight=1.0, mbr_samples=samples, mbr_seed=seed,
                                 mbr_epsilon=epsilon)

    @tf.function(reduce_retracing=True)
    def run(batch):
        ids, lengths, scores = mbr_sampler(trained.model, featurizer, batch, decode)()
        texts = tf.reshape(featurizer.candidate_texts(batch, ids, lengths), [-1])
        fields, values, mask = tile_batch(featurizer.slot_table(batch), samples)
        count = (slot_errors(fields, values, mask, texts) if rerank == "slot"
                 else missed_table_facts(fields, values, mask, texts, featurizer.tokenizer))
        return tf.reshape(texts, [-1, samples]), scores, tf.reshape(count, [-1, samples])

    tables = []
    for batch in featurizer.ordered_batches([e.serialize() for e in examples], batch_size):
        for texts, scores, count in zip(*(x.numpy() for x in run(batch))):
            tables.append([(t.decode("utf-8"), float(s), int(c), 0.0) for t, s, c in zip(texts, scores, count)])
    return tables


def sampled_bleu(tables, evidence) -> list:
    """Per table, each kept beam's mean sentence BLEU / 100 (lowercased, 13a) against the
    table's samples (``sampled_texts``): minimum Bayes risk with the model's samples as the
    evidence, each sample weighing the same (they are draws of its distribution)."""
    from sacrebleu.metrics import BLEU

    bleu = BLEU(lowercase=True, effective_order=True)
    return [[sum(bleu.sentence_score(b[0], [s[0]]).score for s in samples) / len(samples) / 100 for b in beams]
            for beams, samples in zip(tables, evidence)]


def expected_bleu(tables) -> list:
    """Per table, each kept beam's expected sentence BLEU / 100 (lowercased, 13a) against the
    other kept beams, weighted by their model probabilities (softmax of the search scores)."""
    import math

    from sacrebleu.metrics import BLEU

    bleu = BLEU(lowercase=True, effective_order=True)
    gains = []
    for beams in tables:
        top = max(b[1] for b in beams)
        weights = [math.exp(b[1] - top) for b in beams]
        row = []
        for i, (text, _, _, _) in enumerate(beams):
            others = [(w, b[0]) for j, (w, b) in enumerate(zip(weights, beams)) if j != i]
            total = sum(w for w, _ in others)
            row.append(sum(w * bleu.sentence_score(text, [other]).score for w, other in others) / total / 100
                       if total > 0 else 0.0)
        gains.append(row)
    return gains


# Fields whose value stays in the retrieval key (it changes the sentence's shape: "is not
# family-friendly"); every other value is replaced by its field's placeholder.
KEPT_VALUES = ("familyfriendly",)


def _tokens(text: str) -> str:
    """Lower-cased, every non-alphanumeric character its own token: one form for raw and
    pre-tokenized text ("£20-25" and "£ 20 - 25" -> "£ 20 - 25")."""
    return " ".join(re.sub(r"([^\w\s])", r" \1 ", text.lower()).split())


def _delexicalized(text: str, items) -> str:
    """``_tokens(text)`` with each table value (longest first) replaced by its field's
    placeholder: "The Eagle is a pub." -> "xnamex is a xeattypex ."."""
    from tablegen_tf.metrics.slot_metrics import attribute_key  # "customer rating" -> "customerrating"

    text = f" {_tokens(text)} "
    for item in sorted(items, key=lambda i: -len(i.value)):
        field = attribute_key(item.field)
        if field not in KEPT_VALUES and item.value.strip():
            text = text.replace(f" {_tokens(item.value)} ", f" x{field}x ")
    return text.strip()


def _retrieval_key(items) -> tuple:
    from tablegen_tf.metrics.slot_metrics import attribute_key

    fields = [(attribute_key(i.field), i.value) for i in items]
    return tuple(sorted((field, value if field in KEPT_VALUES else "") for field, value in fields))


def training_pseudo_references(format_name: str, path: str, fraction: float, per_key: int) -> dict:
    """retrieval key -> up to ``per_key`` delexicalized references of the training MRs (the
    rows outside the selection split) that share the key: the same fields and kept values."""
    import hashlib

    from tablegen_tf.readers import get_reader
    from tablegen_tf.readers.base import RawTable, in_selection

    reader = get_reader(format_name)
    pools: dict = {}
    for unit in reader.input_units(path, "train"):
        for raw in reader.read(unit, "train"):
            if isinstance(raw, RawTable) and not in_selection(raw, fraction):
                pools.setdefault(_retrieval_key(raw.items), set()).update(
                    _delexicalized(text, raw.items) for text in raw.texts)
    # A fixed sample per key (by hash, not input order) bounds the cost of large pools.
    return {key: sorted(pool, key=lambda t: hashlib.sha256(t.encode()).digest())[:per_key]
            for key, pool in pools.items()}


def retrieval_bleu(tables, raws, pools) -> list:
    """Per table, each kept beam's sentence BLEU / 100 (delexicalized, lower-cased) against the
    training references of tables shaped like it (``training_pseudo_references``); 0 without any."""
    from sacrebleu.metrics import BLEU

    bleu = BLEU(tokenize="none", effective_order=True)
    gains = []
    for beams, raw in zip(tables, raws):
        references = pools.get(_retrieval_key(raw.items), [])
        gains.append([bleu.sentence_score(_delexicalized(b[0], raw.items), references).score / 100
                      if references else 0.0 for b in beams])
    return gains


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="run directory written by `tablegen train`")
    parser.add_argument("--ensemble", nargs="+", default=[], metavar="RUN",
                        help="more runs decoded with --model as one ensemble")
    parser.add_argument("--ensemble-weights", type=float, nargs="+", default=None, metavar="W",
                        help="the members' weights, as `tablegen evaluate --ensemble-weights` (default: equal)")
    parser.add_argument("--rerank", choices=("coverage", "slot"), default="coverage",
                        help="what W multiplies: missed table words or slot errors (default: %(default)s)")
    parser.add_argument("--format", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--split", default=None)
    parser.add_argument("--selection-fraction", type=float, default=0.0)
    parser.add_argument("--beams", type=int, nargs="+", default=[5, 10, 15])
    parser.add_argument("--length-penalties", type=float, nargs="+", default=[1.0])
    parser.add_argument("--weights", type=float, nargs="+", default=[0.0, 0.5, 1.0, 2.0])
    parser.add_argument("--slot-end-penalty", type=float, default=0.0,
                        help="the end gate's penalty during the searches (default: %(default)s)")
    parser.add_argument("--pragmatic-alphas", type=float, nargs="+", default=[0.0],
                        help="alpha of Shen et al.'s distractor listener: each beam scores (1 - alpha) x "
                        "its search score + alpha x log L0(table | text), minus W x count, as `tablegen "
                        "evaluate --pragmatic-alpha` (tablegen_tf/pragmatics.py; default: %(default)s, off)")
    parser.add_argument("--mbr-weights", type=float, nargs="+", default=[0.0],
                        help="minimum Bayes risk: each beam also gains B x its expected sentence BLEU "
                        "(/100) against the table's other kept beams, weighted by their model "
                        "probabilities (a trial outside the graph; default: %(default)s, off)")
    parser.add_argument("--mbr-samples", type=int, default=0, metavar="S",
                        help="with --mbr-weights: the evidence is S samples of the model per table "
                        "(epsilon sampling) instead of the other kept beams (default: %(default)s)")
    parser.add_argument("--sample-candidates", action="store_true",
                        help="--mbr-samples: the samples are also candidates, beside the kept beams")
    parser.add_argument("--sample-epsilon", type=float, default=0.02,
                        help="--mbr-samples: tokens below this probability are not drawn (default: %(default)s)")
    parser.add_argument("--retrieval-weights", type=float, nargs="+", default=[0.0],
                        help="each beam also gains R x its sentence BLEU (/100, values delexicalized) "
                        "against training references of tables with the same fields (the rows outside "
                        "the selection split; a trial outside the graph; default: %(default)s, off)")
    parser.add_argument("--retrieval-input", nargs=3, default=None, metavar=("FORMAT", "PATH", "FRACTION"),
                        help="training rows to retrieve from, and the selection fraction left out of them "
                        "(default: --format, --input and --selection-fraction; give it when scoring dev)")
    parser.add_argument("--retrieval-references", type=int, default=100, metavar="K",
                        help="at most K training references per table shape (default: %(default)s)")
    parser.add_argument("--write-texts", default=None, metavar="DIR",
                        help="also write each setting's texts to DIR/<row>.txt, one line per table "
                        "(for benchmarks/paired_bootstrap.py)")
    parser.add_argument("--limit", type=int, default=0, help="only the first N tables (0 = all)")
    args = parser.parse_args()
    sys.path.insert(0, ROOT)
    from tablegen_tf import inference
    from tablegen_tf.ensemble import load_ensemble
    from tablegen_tf.metrics.text_metrics import plain_bleu_metric, reference_streams, webnlg_challenge_tokens

    trained = load_ensemble([args.model, *args.ensemble], args.ensemble_weights)
    raws, _ = inference.read_inputs(args.format, args.input, args.split, args.selection_fraction)
    raws = raws[: args.limit or None]
    examples = inference.build(raws, trained.config.tokenizer, needs_text=True)[0]
    webnlg = args.format.startswith("webnlg")
    metric = "bleu_webnlg" if webnlg else "bleu"
    refs = [[" ".join(webnlg_challenge_tokens(t)) for t in e.all_references()] for e in examples]  # challenge BP
    source = args.retrieval_input or (args.format, args.input, args.selection_fraction)
    pools = (training_pseudo_references(source[0], source[1], float(source[2]), args.retrieval_references)
             if any(args.retrieval_weights) else {})
    if pools and len(raws) != len(examples):
        parser.error(f"--retrieval-weights: {len(raws) - len(examples)} of {len(raws)} tables have no reference")
    print(f"| beam | length penalty | alpha | MBR | R | W | {metric} | brevity penalty | coverage | slot errors | "
          "hallucination | words |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for beam in args.beams:
        for length_penalty in args.length_penalties:
            tables = kept_beams(trained, examples, beam, length_penalty, args.rerank,
                                end_penalty=args.slot_end_penalty, listener=any(args.pragmatic_alphas))
            zeros = [[0.0] * len(b) for b in tables]
            if any(args.mbr_weights) and args.mbr_samples:
                evidence = sampled_texts(trained, examples, args.mbr_samples, args.sample_epsilon, args.rerank)
                if args.sample_candidates:
                    tables = [beams + samples for beams, samples in zip(tables, evidence)]
                    zeros = [[0.0] * len(b) for b in tables]
                consensus = sampled_bleu(tables, evidence)
            else:
                consensus = expected_bleu(tables) if any(args.mbr_weights) else zeros
            retrieved = retrieval_bleu(tables, raws, pools) if pools else zeros
            for alpha, weight, mbr, retrieval in itertools.product(args.pragmatic_alphas, args.weights,
                                                                   args.mbr_weights, args.retrieval_weights):
                texts = [beams[max(range(len(beams)), key=lambda k: (1 - alpha) * beams[k][1] + alpha * beams[k][3]
                                   + mbr * gains[k] + retrieval * near[k] - weight * beams[k][2])][0]
                         for beams, gains, near in zip(tables, consensus, retrieved)]
                scores = inference.evaluate(examples, texts, format_name=args.format)
                if args.write_texts:
                    os.makedirs(args.write_texts, exist_ok=True)
                    name = f"beam{beam}-lp{length_penalty}-a{alpha}-mbr{mbr}-r{retrieval}-w{weight}.txt"
                    with open(os.path.join(args.write_texts, name), "w", encoding="utf-8") as out:
                        out.writelines(f"{text}\n" for text in texts)
                bp = plain_bleu_metric().corpus_score(
                    [" ".join(webnlg_challenge_tokens(t)) for t in texts], reference_streams(refs)).bp if webnlg else ""
                ser = scores.get("slot_error_rate")
                words = sum(len(t.split()) for t in texts) / max(len(texts), 1)
                print(f"| {beam} | {length_penalty} | {alpha} | {mbr} | {retrieval} | {weight} | {scores[metric]:.2f} | {bp:.3} | "
                      f"{scores['table_coverage']:.3f} | {'' if ser is None else f'{100 * ser:.2f} %'} | "
                      f"{100 * scores['hallucination_rate']:.2f} % | {words:.1f} |", flush=True)


if __name__ == "__main__":
    from quiet import run_quietly

    run_quietly(main)
