"""Lexically constrained decoding on a corpus: satisfaction, BLEU and time vs unconstrained.

    python benchmarks/constrained_decoding.py --model runs/e2e_encdec_copy \
        --format e2e --input ../shared/data/e2e/devset.csv --limit 200 --beam 5 --out runs/constrained.json

Oracle constraints come from each input's first reference: content words (alphabetic,
> 3 characters, not in a stop list) that the unconstrained output misses (then other
content words of the reference), and for the phrase settings a 2-token phrase of the
reference the unconstrained output does not contain. A constraint the model cannot emit
(neither in its vocabulary nor in the input) is *refused*: the SavedModel answers it with
INVALID_ARGUMENT, so those rows are counted apart ("refused") and decoded without that
constraint. Satisfaction of the rest is checked independently of the search's own flag, on
the output's tokens (resolved copies, before detokenization) against each constraint
tokenized by the model's tokenizer: a phrase must appear as contiguous tokens. (Re-tokenizing
the detokenized text would not do: "family - friendly" detokenizes to "family-friendly",
which the text tokenizer keeps whole, so a met "family" would look missed.) Time: wall clock
of the whole set after warm-up batches per setting, beam ``--beam``, the same batches;
``--legacy FILE`` also runs another ``constrained_beam_search`` implementation (e.g. the
previous one from git) for comparison.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import time

import tensorflow as tf

from tablegen_tf import inference
from tablegen_tf.constants import EOS_ID
from tablegen_tf.decoding.constrained import constrained_beam_search
from tablegen_tf.data.featurizer import ids_to_tokens
from tablegen_tf.generation import decode_ids, search_inputs
from tablegen_tf.metrics import corpus_scores
from tablegen_tf.tokenizer import tokenize_batch
from tablegen_tf.training.trainer import load_trained

STOP = {"with", "that", "this", "there", "they", "their", "have", "from", "which", "near", "also", "located",
        "area", "food", "serves", "restaurant", "called", "named", "offers", "price", "range", "rating"}


def content_words(tokens):
    return [t for t in tokens if t.isalpha() and len(t) > 3 and t.lower() not in STOP]


def oracle(reference_tokens, output_tokens, words: int, phrases: int):
    """[phrase strings] from the reference, preferring what the output misses."""
    out = set(output_tokens)
    chosen = []
    if phrases:
        text = " ".join(output_tokens)
        bigrams = [f"{a} {b}" for a, b in zip(reference_tokens, reference_tokens[1:])
                   if a.isalpha() and b.isalpha() and len(a) + len(b) > 7 and f"{a} {b}" not in text]
        chosen.extend(list(dict.fromkeys(bigrams))[:phrases])
    candidates = list(dict.fromkeys(content_words(reference_tokens)))
    missing = [w for w in candidates if w not in out] + [w for w in candidates if w in out]
    for word in missing:
        if len(chosen) >= words + phrases:
            break
        if not any(word in c.split() for c in chosen):
            chosen.append(word)
    return chosen


def contains(tokens, phrase_tokens):
    n = len(phrase_tokens)
    return any(tokens[i:i + n] == phrase_tokens for i in range(len(tokens) - n + 1))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--format", default="e2e")
    parser.add_argument("--input", required=True)
    parser.add_argument("--limit", type=int, default=200)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=50)
    parser.add_argument("--legacy", default=None, help="a .py file with another constrained_beam_search")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    trained = load_trained(args.model)
    model, featurizer = trained.model, trained.featurizer
    decode = dataclasses.replace(trained.config.decode, beam_size=args.beam)
    raws, _ = inference.read_inputs(args.format, args.input, "valid")
    examples, _ = inference.build(raws[: args.limit], trained.config.tokenizer, needs_text=True)
    references = [e.all_references() for e in examples]
    batches = list(featurizer.ordered_batches([e.serialize() for e in examples], args.batch_size))

    @tf.function(reduce_retracing=True)
    def plain(batch):
        ids, lengths, _, _ = decode_ids(model, batch, decode)
        return featurizer.output_text(batch, ids, lengths)

    @tf.function(reduce_retracing=True)
    def constrained(batch, phrases):
        """-> (text [B], the search's own satisfied flag [B], refused [B])."""
        constraints, continues, unknown = featurizer.constraint_phrases(batch, phrases)
        _, state, start, step_fn, _ = search_inputs(model, batch, decode, tiled=True)
        ids, lengths, _, satisfied = constrained_beam_search(
            step_fn, start, state, constraints, args.beam, decode.max_length,
            EOS_ID, length_penalty=decode.length_penalty, continues=continues)
        tokens = ids_to_tokens(ids, lengths, featurizer.vocabs.words, featurizer.copy_texts(batch))
        return (featurizer.output_text(batch, ids, lengths), satisfied, tf.reduce_any(unknown, axis=1),
                tf.strings.reduce_join(tokens, axis=1, separator=" "))

    legacy_search = None
    if args.legacy:
        spec = importlib.util.spec_from_file_location("legacy_constrained", args.legacy)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        legacy_search = module.constrained_beam_search

    @tf.function(reduce_retracing=True)
    def legacy(batch, phrases):  # single-token constraints only (phrases are split into words)
        constraints, _, _ = featurizer.constraint_phrases(batch, phrases)
        _, state, start, step_fn, _ = search_inputs(model, batch, decode, tiled=True)
        ids, lengths, _, _ = legacy_search(step_fn, start, state, constraints, args.beam, decode.max_length, EOS_ID,
                                           length_penalty=decode.length_penalty)
        return featurizer.output_text(batch, ids, lengths)

    def run(fn, per_batch_inputs=None):
        """-> (texts, seconds, the search's flags, refused rows, output tokens) (None when not constrained)."""
        for i in sorted({0, 1, len(batches) - 1} & set(range(len(batches)))):  # warm-up: tracing, and
            fn(batches[i], *(per_batch_inputs[i] if per_batch_inputs else ()))  # the relaxed retrace
        texts, flags, refused, tokens, start = [], [], [], [], time.perf_counter()
        for i, batch in enumerate(batches):
            out = fn(batch, *(per_batch_inputs[i] if per_batch_inputs else ()))
            text, flag, unknown, joined = out if isinstance(out, tuple) else (out, None, None, None)
            texts.extend(t.decode("utf-8") for t in text.numpy())
            if flag is not None:
                flags.extend(flag.numpy().tolist())
                refused.extend(unknown.numpy().tolist())
                tokens.extend(t.decode("utf-8").split(" ") for t in joined.numpy())
        return texts, time.perf_counter() - start, flags or None, refused or None, tokens or None

    base_texts, base_seconds, _, _, _ = run(plain)
    base_tokens = tokenize_batch(base_texts, trained.config.tokenizer)
    results = {"unconstrained": {"bleu": corpus_scores(base_texts, references)["bleu"], "seconds": base_seconds}}
    settings = {"1 word": (1, 0), "3 words": (3, 0), "1 phrase + 2 words": (2, 1)}
    ref_tokens = tokenize_batch([r[0] for r in references], trained.config.tokenizer)
    samples = {}
    for name, (words, phrases) in settings.items():
        chosen = [oracle(r, o, words, phrases) for r, o in zip(ref_tokens, base_tokens)]
        width = max(len(c) for c in chosen)
        padded = [c + [""] * (width - len(c)) for c in chosen]
        inputs = [(tf.constant(padded[i: i + args.batch_size]),) for i in range(0, len(padded), args.batch_size)]
        for label, fn in (("dba", constrained), ("legacy", legacy if legacy_search else None)):
            if fn is None or (label == "legacy" and phrases):
                continue
            texts, seconds, flags, refused, out_tokens = run(fn, inputs)
            refused = refused or [False] * len(texts)
            out_tokens = out_tokens or tokenize_batch(texts, trained.config.tokenizer)
            met = [all(contains(o, p) for p in tokenize_batch([p for p in c if p], trained.config.tokenizer))
                   for o, c in zip(out_tokens, chosen)]
            kept = [i for i, r in enumerate(refused) if not r]
            row = {"constraints": sum(len(c) for c in chosen), "refused_rows": sum(refused),
                   "satisfied": sum(met[i] for i in kept) / max(len(kept), 1),
                   "bleu": corpus_scores(texts, references)["bleu"], "seconds": seconds,
                   "time_vs_unconstrained": seconds / base_seconds}
            if flags is not None:
                row["satisfied_by_search_flag"] = sum(flags[i] for i in kept) / max(len(kept), 1)
                row["flag_and_text_disagree"] = [(chosen[i], texts[i]) for i in kept if flags[i] != met[i]][:5]
            results[f"{name} ({label})"] = row
            samples[f"{name} ({label})"] = [(chosen[i], texts[i]) for i in range(3)]
    report = {"inputs": len(examples), "beam": args.beam, "results": results, "samples": samples}
    print(json.dumps(report, indent=2))
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(report, handle, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
