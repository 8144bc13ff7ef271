"""Vocabularies and dataset statistics, combined from per-batch summaries.

Counting per batch and merging Counters keeps the number of Beam elements
small (one per batch, not one per token), which matters for throughput.
"""

from __future__ import annotations

import collections
import json
import os
from typing import Dict, Iterable, List

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from tablegen_tf.constants import COUNTS_SUFFIX, SPECIAL_SYMBOLS, SPECIAL_WORDS

VOCABS = ("words", "fields", "entities", "groups")
# Length statistics in the spirit of Lebret et al. 2016, Table 2.
LENGTHS = (
    "target_tokens",  # tokens per target sentence/summary
    "table_tokens_in_target",  # target tokens that are table values
    "records",  # records (value tokens) per table
    "fields_per_table",  # distinct fields per table
    "references",  # references per example
)
PERCENTILES = (5, 25, 50, 75, 95)


def empty_summary() -> Dict[str, collections.Counter]:
    return {name: collections.Counter() for name in VOCABS + LENGTHS}


def summarize(examples) -> Dict[str, collections.Counter]:
    summary = empty_summary()
    for example, _ in examples:
        if example.form == "text":
            _summarize_text(summary, example)
            continue
        summary["words"].update(example.values)
        for tokens in example.reference_tokens or [" ".join(example.target_tokens)]:
            summary["words"].update(tokens.split(" ") if tokens else [])
        summary["fields"].update(example.fields)
        summary["entities"].update(e for e in example.entities if e)
        summary["groups"].update(g for g in example.groups if g)
        summary["target_tokens"][len(example.target_tokens)] += 1
        summary["table_tokens_in_target"][sum(1 for a in example.copy_alignment if a)] += 1
        summary["records"][len(example.values)] += 1
        summary["fields_per_table"][len(set(example.fields))] += 1
        summary["references"][max(1, len(example.references))] += 1
    return summary


def _summarize_text(summary, example) -> None:
    """A TextExample: its source plays the table's part (records = source tokens)."""
    summary["words"].update(example.source_tokens)
    for tokens in example.reference_tokens or [" ".join(example.target_tokens)]:
        summary["words"].update(tokens.split(" ") if tokens else [])
    source = set(example.source_tokens)
    summary["target_tokens"][len(example.target_tokens)] += 1
    summary["table_tokens_in_target"][sum(1 for t in example.target_tokens if t in source)] += 1
    summary["records"][len(example.source_tokens)] += 1
    summary["references"][max(1, len(example.references))] += 1


class MergeSummaries(beam.CombineFn):
    def create_accumulator(self):
        return empty_summary()

    def add_input(self, accumulator, summary):
        for name, counter in summary.items():
            accumulator.setdefault(name, collections.Counter()).update(counter)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable):
        merged = self.create_accumulator()
        for accumulator in accumulators:
            self.add_input(merged, accumulator)
        return merged

    def extract_output(self, accumulator):
        return accumulator


def length_stats(histogram: collections.Counter) -> Dict[str, float]:
    total = sum(histogram.values())
    if not total:
        return {"count": 0}
    stats = {"count": total, "mean": round(sum(k * v for k, v in histogram.items()) / total, 2)}
    ordered = sorted(histogram.items())
    for percentile in PERCENTILES:
        threshold, seen = percentile / 100 * total, 0
        for value, count in ordered:
            seen += count
            if seen >= threshold:
                stats[f"p{percentile}"] = value
                break
    stats["max"] = ordered[-1][0]
    return stats


def vocabulary(counter: collections.Counter, specials, min_count: int = 1, max_size: int = 0) -> List[str]:
    ranked = sorted(
        (w for w, c in counter.items() if c >= min_count and w not in specials),
        key=lambda w: (-counter[w], w),
    )
    if max_size:
        ranked = ranked[: max(0, max_size - len(specials))]
    return list(specials) + ranked


def write_outputs(summary, config) -> None:
    vocab_dir = os.path.join(config.output, "vocab")
    sizes = {
        "words": (SPECIAL_WORDS, config.word_min_count, config.max_words),
        "fields": (SPECIAL_SYMBOLS, 1, 0),
        "entities": (SPECIAL_SYMBOLS, 1, 0),
        "groups": (SPECIAL_SYMBOLS, 1, 0),
    }
    for name, (specials, min_count, max_size) in sizes.items():
        counter = summary.get(name, collections.Counter())
        _write_lines(os.path.join(vocab_dir, f"{name}.txt"), vocabulary(counter, specials, min_count, max_size))
        _write_lines(
            os.path.join(vocab_dir, name + COUNTS_SUFFIX),
            [f"{w}\t{c}" for w, c in sorted(counter.items(), key=lambda x: (-x[1], x[0]))],
        )
    stats = {name: length_stats(summary.get(name, collections.Counter())) for name in LENGTHS}
    stats["examples"] = stats["records"].get("count", 0)
    stats["vocabulary"] = {name: len(summary.get(name, {})) for name in VOCABS}
    with FileSystems.create(os.path.join(config.output, "stats.json")) as handle:
        handle.write(json.dumps(stats, indent=2, sort_keys=True).encode("utf-8"))


def _write_lines(path: str, lines: List[str]) -> None:
    with FileSystems.create(path) as handle:
        handle.write(("\n".join(lines) + "\n").encode("utf-8"))
