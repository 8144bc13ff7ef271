"""Generation and evaluation on raw corpus files (`tablegen generate` / `evaluate`).

Raw rows go through the very same reader, tokenizer and example builder as the
Beam job (no Beam needed for a few thousand tables), then batches are padded in
input order so output line i belongs to distinct input table i.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Dict, List, Optional, Sequence, Tuple

import tensorflow as tf

from tablegen_tf.readers.build import build_examples
from tablegen_tf.readers import get_reader
from tablegen_tf.readers.base import RawTable, Rejection, infer_split
from tablegen_tf import schema
from tablegen_tf.data import input_pipeline as ip
from tablegen_tf.generation import DecodeConfig, generate_tokens
from tablegen_tf.tokenizer import Tokenizer, TokenizerConfig


def read_tables(format_name: str, path: str, split: Optional[str] = None) -> Tuple[List[RawTable], List[Rejection]]:
    """Distinct tables in input order; rows sharing an MR merge on valid/test."""
    reader = get_reader(format_name)
    split = split or infer_split(path)
    tables: "collections.OrderedDict[str, RawTable]" = collections.OrderedDict()
    rejected: List[Rejection] = []
    for unit in reader.input_units(path, split):
        for parsed in reader.read(unit, split):
            if isinstance(parsed, Rejection):
                rejected.append(parsed)
                continue
            key = parsed.group_key if (split != "train" and parsed.group_key) else parsed.example_id
            if key in tables:
                first = tables[key]
                tables[key] = dataclasses.replace(first, texts=first.texts + parsed.texts, rows=first.rows + parsed.rows)
            else:
                tables[key] = parsed
    return list(tables.values()), rejected


def build(tables: Sequence[RawTable], tokenizer_config: TokenizerConfig) -> Tuple[List[schema.TableExample], List[Rejection]]:
    built, rejected = build_examples(tables, tokenizer_config)
    return [example for example, _ in built], rejected


def ordered_batches(examples: Sequence[schema.TableExample], vocabs: ip.Vocabularies, config: ip.InputConfig, batch_size: int):
    """Padded batches in input order (no bucketing, no shuffling)."""
    serialized = [example.serialize() for example in examples]
    parser = ip.ExampleParser(vocabs, dataclasses.replace(config, max_target_length=0))
    dataset = tf.data.Dataset.from_tensor_slices(tf.constant(serialized, tf.string)).map(parser.primary)
    padding = ip._padding_values(dataset.element_spec)
    return dataset.padded_batch(batch_size, padding_values=padding).prefetch(2)


def generate_texts(model, vocabs, examples, input_config, decode: DecodeConfig, batch_size: int = 64, progress=True) -> List[str]:
    return generate_texts_and_plans(model, vocabs, examples, input_config, decode, batch_size, progress)[0]


def generate_texts_and_plans(model, vocabs, examples, input_config, decode: DecodeConfig, batch_size: int = 64,
                             progress=True) -> Tuple[List[str], Optional[List[List[int]]]]:
    """Texts in input order, and the predicted content plans of planning models (else None)."""
    from tqdm import tqdm

    tokenizer = Tokenizer()
    planned = hasattr(model, "planning_step_fn")

    @tf.function(reduce_retracing=True)
    def run(batch):
        tokens, _ = generate_tokens(model, vocabs.words, batch, decode)
        plan = model.encode(batch, training=False)["plan"] if planned else tf.zeros([0, 0], tf.int32)
        return tokenizer.detokenize(tokens), plan

    texts: List[str] = []
    plans: List[List[int]] = []
    with tqdm(total=len(examples), disable=not progress, unit="table", desc="generate") as bar:
        for batch in ordered_batches(examples, vocabs, input_config, batch_size):
            out, plan = run(batch)
            texts.extend(t.decode("utf-8") for t in out.numpy())
            plans.extend([int(i) for i in row if i >= 0] for row in plan.numpy())
            bar.update(len(out))
    return texts, (plans if planned else None)


def evaluate(examples: Sequence[schema.TableExample], texts: Sequence[str], plans: Optional[Sequence[List[int]]] = None) -> Dict[str, float]:
    from tablegen_tf.metrics import corpus_scores, fact_scores, plan_scores
    from tablegen_tf.tokenizer import tokenize_batch

    references = [e.references or [" ".join(e.target_tokens)] for e in examples]
    scores = dict(corpus_scores(list(texts), references))
    hypothesis_tokens = tokenize_batch(list(texts))
    scores.update(fact_scores(hypothesis_tokens, [e.values for e in examples], [e.fields for e in examples]))
    if plans is not None and any(e.content_plan for e in examples):
        scores.update(plan_scores(list(plans), [e.content_plan for e in examples]))
    scores["tables"] = len(examples)
    return scores
