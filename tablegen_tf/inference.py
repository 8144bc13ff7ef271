"""Generation and evaluation on raw corpus files (`tablegen generate` / `evaluate`), for
any model family.

Raw rows go through the very same reader, tokenizer and example builder as the Beam
job (no Beam needed for a few thousand inputs), then batches are padded in input order
so output line i belongs to distinct input i.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from typing import Dict, List, Optional, Sequence, Tuple

import tensorflow as tf

from tablegen_tf.config import DecodeConfig
from tablegen_tf.generation import generate_text
from tablegen_tf.readers import get_reader
from tablegen_tf.readers.base import Raw, Rejection, in_selection, infer_split, merge_key
from tablegen_tf.readers.build import build_examples
from tablegen_tf.tokenizer import TokenizerConfig


def read_inputs(format_name: str, path: str, split: Optional[str] = None,
                selection_fraction: float = 0.0) -> Tuple[List[Raw], List[Rejection]]:
    """Distinct inputs (tables or sources) in input order; rows sharing one MR / source
    merge on valid/test. ``selection_fraction`` > 0: only the selection split that
    `tablegen prepare --selection-fraction` carves from these (train) rows, merged by MR."""
    reader = get_reader(format_name)
    split = split or infer_split(path)
    merge = split != "train" or selection_fraction > 0
    inputs: "collections.OrderedDict[str, Raw]" = collections.OrderedDict()
    rejected: List[Rejection] = []
    for unit in reader.input_units(path, split):
        for parsed in reader.read(unit, split):
            if isinstance(parsed, Rejection):
                if not selection_fraction:
                    rejected.append(parsed)
                continue
            if selection_fraction and not in_selection(parsed, selection_fraction):
                continue
            key = merge_key(parsed) if merge else parsed.example_id
            if key in inputs:
                first = inputs[key]
                inputs[key] = dataclasses.replace(first, texts=first.texts + parsed.texts, rows=first.rows + parsed.rows)
            else:
                inputs[key] = parsed
    return list(inputs.values()), rejected


def build(inputs: Sequence[Raw], tokenizer_config: TokenizerConfig, needs_text: bool = False):
    """(examples, rejections); without ``needs_text`` inputs without references are kept."""
    built, rejected = build_examples(inputs, tokenizer_config, needs_text)
    return [example for example, _ in built], rejected


def generate_texts_and_plans(model, featurizer, examples, decode: DecodeConfig, batch_size: int = 64,
                             progress=True) -> Tuple[List[str], Optional[List[List[int]]]]:
    """Texts in input order, and the content plans of two-stage models (else None)."""
    from tablegen_tf.progress import Progress, format_duration

    @tf.function(reduce_retracing=True)
    def run(batch):
        text, _, plan = generate_text(model, featurizer, batch, decode)
        return text, (plan if plan is not None else tf.zeros([0, 0], tf.int32))

    texts: List[str] = []
    plans: List[List[int]] = []
    serialized = [example.serialize() for example in examples]
    bar = Progress("generate", total=len(examples), unit="input") if progress else None
    for batch in featurizer.ordered_batches(serialized, batch_size):
        out, plan = run(batch)
        texts.extend(t.decode("utf-8") for t in out.numpy())
        plans.extend([int(i) for i in row if i >= 0] for row in plan.numpy())
        if bar is not None:
            bar.update(len(out))
    if bar is not None:
        bar.close(f"generated {len(texts):,} texts in {format_duration(bar.elapsed)}")
    return texts, (plans if model.has_planning_stage else None)


def perplexity(model, featurizer, examples: Sequence, batch_size: int = 64) -> Dict[str, float]:
    """Per-token perplexity over every reference of ``examples``, for families declaring
    ``reports_perplexity`` (``token_nll``); {} for the others. The family's ``token_nll``
    docstring says which tokens are scored (e.g. </s>, copy actions)."""
    if not model.reports_perplexity:
        return {}
    parser = featurizer.parser(dataclasses.replace(featurizer.input_config(False), max_target_length=0))
    serialized = tf.constant([example.serialize() for example in examples], tf.string)
    dataset = tf.data.Dataset.from_tensor_slices(serialized).flat_map(parser.per_reference)
    from tablegen_tf.data.input_pipeline import padding_values

    dataset = dataset.padded_batch(batch_size, padding_values=padding_values(dataset.element_spec))
    token_nll = tf.function(model.token_nll, reduce_retracing=True)
    total, count = 0.0, 0.0
    for batch in dataset:
        nll, tokens = token_nll(batch)
        total, count = total + float(nll), count + float(tokens)
    mean = total / max(count, 1.0)
    return {"perplexity": math.exp(min(mean, 50.0)), "nll_per_token": mean, "perplexity_tokens": int(count)}


def evaluate(examples: Sequence, texts: Sequence[str], plans: Optional[Sequence[List[int]]] = None,
             model=None, featurizer=None, batch_size: int = 64,
             format_name: Optional[str] = None) -> Dict[str, float]:
    """Corpus scores against every reference (WebNLG formats: also ``bleu_webnlg``, the 2017
    challenge's BLEU); fact metrics for tables (slot errors for E2E-style
    ones); plan metrics for
    two-stage models on corpora with gold plans; perplexity when ``model`` reports it;
    extractive scores when every text example has deletion labels."""
    from tablegen_tf.metrics import corpus_scores, extractive_scores, plan_scores
    from tablegen_tf.metrics.text_metrics import webnlg_challenge_bleu
    from tablegen_tf.tokenizer import tokenize_batch

    missing = [e.example_id for e in examples if not e.all_references()[0].strip()]
    if missing:
        raise ValueError(f"evaluate needs reference texts: {len(missing)} of {len(examples)} inputs have none "
                         f"(first: {missing[0]}); use `tablegen generate` for inputs without references")
    scores = dict(corpus_scores(list(texts), [e.all_references() for e in examples]))
    if format_name and format_name.startswith("webnlg"):
        scores["bleu_webnlg"] = webnlg_challenge_bleu(list(texts), [e.all_references() for e in examples])
    if examples and examples[0].form == "table":
        scores.update(table_scores(examples, texts))
    if examples and examples[0].form == "text" and all(getattr(e, "labels", None) for e in examples):
        # deletion-labelled sources (sentence compression): token F1, compression ratio, ROUGE-1/2/L
        scores.update(extractive_scores([e.source_tokens for e in examples], [e.labels for e in examples],
                                        tokenize_batch(list(texts)), [e.all_references()[0] for e in examples],
                                        list(texts)))
    if plans is not None and any(e.content_plan for e in examples):
        scores.update(plan_scores(list(plans), [e.content_plan for e in examples]))
    if model is not None:
        scores.update(perplexity(model, featurizer, examples, batch_size))
    scores["inputs"] = len(examples)
    return scores


def table_scores(examples: Sequence, texts: Sequence[str]) -> Dict[str, float]:
    """What the texts say against their tables, which needs no references: fact precision,
    hallucination and coverage; slot errors for E2E-style tables."""
    from tablegen_tf.metrics import fact_scores, slot_scores
    from tablegen_tf.tokenizer import tokenize_batch

    scores = dict(fact_scores(tokenize_batch(list(texts)), [e.values for e in examples], [e.fields for e in examples]))
    scores.update(slot_scores(list(texts), [(e.fields, e.values) for e in examples]))  # E2E-style tables
    return scores


def generate_around(run_dir: str, words: Sequence[str], beam_size: Optional[int] = None,
                    max_length: Optional[int] = None, length_penalty: Optional[float] = None) -> List[str]:
    """Sentences around given words with a run's ``generate_around`` serving signature
    (families that take a word, e.g. language models; GenerationModel.serving_signatures)."""
    from tablegen_tf.export import ServingModule
    from tablegen_tf.training.trainer import load_trained

    trained = load_trained(run_dir)
    config = trained.config
    if length_penalty is not None:
        config = dataclasses.replace(config, decode=dataclasses.replace(config.decode, length_penalty=length_penalty))
    signatures = trained.model.serving_signatures(ServingModule(trained.model, trained.featurizer, config))
    if "generate_around" not in signatures:
        raise ValueError(f"model {trained.family.name!r} has no generate_around signature (--word needs one)")
    out = signatures["generate_around"](tf.constant(list(words)), tf.constant(beam_size or trained.config.decode.beam_size),
                                        tf.constant(max_length or 30))
    return [text.decode("utf-8") for text in out["text"].numpy()]
