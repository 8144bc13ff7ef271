"""Raw rows -> examples: RawTable -> TableExample (tokens, records with p+/p-, copy
alignment, content plan); RawText -> TextExample (source and target tokens, labels)."""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from tablegen_tf import schema
from tablegen_tf.readers.base import Raw, RawTable, RawText, Rejection
from tablegen_tf.tokenizer import TokenizerConfig, detokenize_batch, tokenize_batch


def _strings(raw: Raw) -> List[str]:
    if isinstance(raw, RawText):
        return [raw.source_text, *raw.texts]
    return [item.value for item in raw.items] + list(raw.texts)


def build_examples(
    raws: Sequence[Raw], tokenizer_config: TokenizerConfig, needs_text: bool = True,
    readable_references: bool = True,
) -> Tuple[List[Tuple[object, Raw]], List[Rejection]]:
    """(example, raw) pairs and rejections; ``needs_text=False`` keeps rows without a
    reference (generating from users' own inputs). ``readable_references``: pre-tokenized
    texts are stored as references detokenized, as they are scored; False for training
    splits, whose references nothing scores: their records keep the corpus's text, because
    the training order is a hash of the records' content (input_pipeline._canonical_key)
    and other bytes would re-draw every model trained on them."""
    # One tokenizer call for every string of the batch: TF op overhead is per call.
    strings = [s for raw in raws for s in _strings(raw)]
    tokens = iter(tokenize_batch(strings, tokenizer_config))
    pieces_of = [[next(tokens) for _ in _strings(raw)] for raw in raws]
    readable = (_readable_references(raws, pieces_of, tokenizer_config) if readable_references
                else [None] * len(raws))
    built, rejected = [], []
    for raw, pieces, references in zip(raws, pieces_of, readable):
        if isinstance(raw, RawText):
            example = _text_example(raw, pieces)
        else:
            example = _table_example(raw, pieces, references)
        reason = schema.validate(example, needs_text)
        if reason:
            rejected.append(_rejection(raw, reason))
        else:
            built.append((example, raw))
    return built, rejected


def _readable_references(raws: Sequence[Raw], pieces_of, tokenizer_config: TokenizerConfig) -> list:
    """Per raw: its texts detokenized if it is a pre-tokenized table, else None (one
    detokenizer call). Generated text is detokenized, so a pre-tokenized reference would lose
    n-grams such as "family-friendly" against "family - friendly" (2.2 BLEU on E2E's
    selection split)."""
    pretokenized = [isinstance(raw, RawTable) and raw.pretokenized for raw in raws]
    token_lists = [text for raw, pieces, pre in zip(raws, pieces_of, pretokenized) if pre
                   for text in pieces[len(raw.items):]]
    texts = iter(detokenize_batch(token_lists, tokenizer_config))
    return [[next(texts) for _ in raw.texts] if pre else None for raw, pre in zip(raws, pretokenized)]


def _references(raw: Raw, text_tokens, references: Optional[List[str]] = None) -> dict:
    return {
        "target_tokens": text_tokens[0] if text_tokens else [],
        "references": list(raw.texts) if references is None else references,
        "reference_tokens": [" ".join(t) for t in text_tokens],
    }


def _text_example(raw: RawText, pieces) -> schema.TextExample:
    source_tokens, text_tokens = pieces[0], pieces[1:]
    labels = list(raw.labels or [])
    if raw.deletion_labels and text_tokens:
        labels = schema.deletion_labels(source_tokens, text_tokens[0]) or [-1]  # -1: schema.validate rejects
    return schema.TextExample(example_id=raw.example_id, source=raw.source, source_text=raw.source_text,
                              source_tokens=source_tokens, labels=labels, **_references(raw, text_tokens))


def _table_example(table: RawTable, pieces, references: Optional[List[str]] = None) -> schema.TableExample:
    value_tokens, text_tokens = pieces[: len(table.items)], pieces[len(table.items):]
    example = schema.TableExample(example_id=table.example_id, source=table.source,
                                  **_references(table, text_tokens, references))
    for item, tokens in zip(table.items, value_tokens):
        example.add_field(item.field, tokens, item.entity, item.group)
    target = example.target_tokens
    example.copy_alignment = schema.copy_alignment(example.values, target)
    if table.with_content_plan and example.values and target:
        from tablegen_tf.content_plan import content_plan

        example.content_plan = content_plan(example.records, target)
    return example


def _rejection(raw: Raw, reason: str) -> Rejection:
    path, _, line = raw.source.rpartition(":")
    return Rejection(
        file=path or raw.source,
        line=int(line) if line.isdigit() else 0,
        reason=reason,
        content=raw.example_id,
        rows=raw.rows,
    )
