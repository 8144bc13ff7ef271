"""RawTable -> TableExample: tokenization, records with p+/p-, copy alignment, content plan."""

from __future__ import annotations

from typing import List, Sequence, Tuple

from tablegen_tf.readers.base import RawTable, Rejection
from tablegen_tf import schema
from tablegen_tf.tokenizer import TokenizerConfig, tokenize_batch


def build_examples(
    tables: Sequence[RawTable], tokenizer_config: TokenizerConfig
) -> Tuple[List[Tuple[schema.TableExample, RawTable]], List[Rejection]]:
    # One tokenizer call for every string of the batch: TF op overhead is per call.
    strings: List[str] = []
    for table in tables:
        strings.extend(item.value for item in table.items)
        strings.extend(table.texts)
    tokens = iter(tokenize_batch(strings, tokenizer_config))
    built, rejected = [], []
    for table in tables:
        value_tokens = [next(tokens) for _ in table.items]
        text_tokens = [next(tokens) for _ in table.texts]
        example = _example(table, value_tokens, text_tokens)
        reason = schema.validate(example)
        if reason:
            rejected.append(_rejection(table, reason))
        else:
            built.append((example, table))
    return built, rejected


def _example(table: RawTable, value_tokens, text_tokens) -> schema.TableExample:
    target = text_tokens[0] if text_tokens else []
    example = schema.TableExample(
        example_id=table.example_id,
        source=table.source,
        target_tokens=target,
        references=list(table.texts),
        reference_tokens=[" ".join(t) for t in text_tokens],
    )
    for item, tokens in zip(table.items, value_tokens):
        example.add_field(item.field, tokens, item.entity, item.group)
    example.copy_alignment = schema.copy_alignment(example.values, target)
    if table.with_content_plan and example.values and target:
        from tablegen_tf.content_plan import content_plan

        example.content_plan = content_plan(example.records, target)
    return example


def _rejection(table: RawTable, reason: str) -> Rejection:
    path, _, line = table.source.rpartition(":")
    return Rejection(
        file=path or table.source,
        line=int(line) if line.isdigit() else 0,
        reason=reason,
        content=table.example_id,
        rows=table.rows,
    )
