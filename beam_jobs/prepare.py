"""The prepare job: corpus in its native format -> record TFRecords + vocabularies + statistics.

    rows --Read--> RawTable | RawText | Rejection
    train, with selection_fraction: a fixed share of MRs (by hash) --> SELECTION_OUTPUT, merged
    raw --(group by MR / source on valid/test)--> --BatchElements--> tokenize (one TF call per batch)
             --> TableExample --> examples-*.tfrecord.gz
    Rejection --> dead_letter.jsonl
    per-batch summaries --combine--> vocab/*.txt, stats.json

Runs on any Beam runner; standard pipeline options pass through unchanged.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import glob
import json
import logging
import os
import shutil
import time
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from tablegen_tf.readers import get_reader
from tablegen_tf.readers.base import InputError, Raw, RawTable, Rejection, in_selection, merge_key
from tablegen_tf.readers.clean_slots import clean_table
from tablegen_tf.readers.sentence_split import sentence_tables
from beam_jobs import runner_names, running_counts, summaries

NAMESPACE = "tablegen.prepare"
EXAMPLES_PREFIX = "examples"
DEAD_LETTER = "dead_letter.jsonl"


@dataclasses.dataclass(frozen=True)
class PrepareConfig:
    format: str
    input: str
    output: str
    split: str
    lowercase: bool = False
    num_shards: int = 0  # 0 = the runner decides (no extra shuffle of all examples)
    batch_size: int = 256
    word_min_count: int = 1
    max_words: int = 50000
    # train only: this share of distinct MRs (sources; entries) goes to selection_output
    # instead, references merged as on valid: a split for early stopping and tuning that
    # shares no MR with the rest of train, so the corpus' dev set is only reported.
    selection_fraction: float = 0.0
    selection_output: Optional[str] = None  # default: OUTPUT/../selection
    # train only: E2E-style tables keep the slots their text realises, plus the closed-class
    # ones it states (tablegen_tf.readers.clean_slots); the selection split is not cleaned
    clean_slots: bool = False
    # train only: each faithful sentence of a multi-sentence text is also a row, its table the
    # slots it realises (tablegen_tf.readers.sentence_split); none lands on a selection MR
    split_sentences: bool = False

    def selection_dir(self) -> str:
        return self.selection_output or os.path.join(os.path.dirname(os.path.normpath(self.output)), "selection")


class PrepareError(RuntimeError):
    """The job ran but produced nothing usable (e.g. zero valid records)."""


class ReadUnit(beam.DoFn):
    """Runs a format reader over one input unit (file or file set)."""

    def __init__(self, format_name: str, split: str, counts_dir: Optional[str] = None):
        self._format_name = format_name
        self._split = split
        self._counts_dir = counts_dir  # running counts for the launcher (running_counts.py)
        self._rows = Metrics.counter(NAMESPACE, "rows_read")

    def setup(self):
        self._reader = get_reader(self._format_name)
        self._heartbeat = running_counts.Heartbeat(self._counts_dir)

    def process(self, unit: str):
        for parsed in self._reader.read(unit, self._split):
            self._rows.inc(parsed.rows)
            self._heartbeat.add("read", parsed.rows)
            if isinstance(parsed, Rejection):
                yield beam.pvalue.TaggedOutput("rejected", parsed)
            else:
                yield parsed

    def finish_bundle(self):
        self._heartbeat.flush()


class CleanSlots(beam.DoFn):
    """Training tables -> the slots their text realises (tablegen_tf.readers.clean_slots)."""

    def __init__(self):
        self._changed = Metrics.counter(NAMESPACE, "slot_tables_cleaned")
        self._removed = Metrics.counter(NAMESPACE, "slots_removed")
        self._added = Metrics.counter(NAMESPACE, "slots_added")

    def process(self, table):
        cleaned, removed, added = clean_table(table) if isinstance(table, RawTable) else (table, 0, 0)
        if cleaned is not table:
            self._changed.inc()
            self._removed.inc(removed)
            self._added.inc(added)
        yield cleaned


class SplitSentences(beam.DoFn):
    """Training table -> itself and one table per faithful sentence (sentence_split)."""

    def __init__(self, selection_fraction: float):
        self._selection_fraction = selection_fraction
        self._added = Metrics.counter(NAMESPACE, "sentence_tables_added")
        self._dropped = Metrics.counter(NAMESPACE, "sentence_tables_on_selection_mrs")

    def process(self, table):
        yield table
        if not isinstance(table, RawTable):
            return
        for sentence_table in sentence_tables(table):
            # a table hashing into the selection share could equal a selection MR: left out, so the
            # selection split stays unseen
            if self._selection_fraction and in_selection(sentence_table, self._selection_fraction):
                self._dropped.inc()
                continue
            self._added.inc()
            yield sentence_table


class MergeReferences(beam.PTransform):
    """Valid/test: rows sharing one MR (or one source sentence) become one example with
    all references. Used by `tablegen prepare` and the TFX ExampleGen alike."""

    def expand(self, tables):
        return (
            tables
            | "KeyByMR" >> beam.Map(_merge_key)
            | "GroupByMR" >> beam.GroupByKey()
            | "MergeReferences" >> beam.Map(merge_references)
        )


def _merge_key(raw: Raw) -> Tuple[str, Raw]:
    return merge_key(raw), raw


def merge_references(key_and_tables: Tuple[str, Iterable[Raw]]) -> Raw:
    _, tables = key_and_tables
    tables = sorted(tables, key=lambda t: _source_order(t.source))
    first = tables[0]
    texts = [text for table in tables for text in table.texts]
    return dataclasses.replace(first, texts=texts, rows=sum(t.rows for t in tables))


def _source_order(source: str):
    path, _, line = source.rpartition(":")
    return (path, int(line)) if line.isdigit() else (source, 0)


class BuildExamples(beam.DoFn):
    """Tokenizes a batch of raw tables with the one TF tokenizer and builds examples."""

    def __init__(self, lowercase: bool, counts_dir: Optional[str] = None, counter_prefix: str = "",
                 readable_references: bool = True):
        self._lowercase = lowercase
        self._readable_references = readable_references  # build_examples: False on training splits
        self._counts_dir = counts_dir
        self._written = Metrics.counter(NAMESPACE, counter_prefix + "examples_written")
        self._rows_written = Metrics.counter(NAMESPACE, counter_prefix + "rows_written")

    def setup(self):
        # Imported here so the job's launcher does not need TensorFlow warm-up.
        from tablegen_tf.tokenizer import TokenizerConfig

        self._tokenizer_config = TokenizerConfig(lowercase=self._lowercase)
        self._heartbeat = running_counts.Heartbeat(self._counts_dir)

    def finish_bundle(self):
        self._heartbeat.flush()

    def process(self, tables: Sequence[Raw]):
        from tablegen_tf.readers.build import build_examples

        examples, rejections = build_examples(tables, self._tokenizer_config,
                                              readable_references=self._readable_references)
        summary = summaries.summarize(examples)
        for rejection in rejections:
            yield beam.pvalue.TaggedOutput("rejected", rejection)
        for example, table in examples:
            self._written.inc()
            self._rows_written.inc(table.rows)
            yield example.serialize()
        self._heartbeat.add("written", len(examples))
        yield beam.pvalue.TaggedOutput("summaries", summary)


def build_pipeline(pipeline: beam.Pipeline, config: PrepareConfig, counts_dir: Optional[str] = None) -> None:
    """``counts_dir``: a local directory for running counts (DirectRunner only; running_counts.py)."""
    reader = get_reader(config.format)
    units_list = reader.input_units(config.input, config.split)  # raises InputError early
    # Parallelism: several units are spread over the workers before reading;
    # a single unit is read by one worker and its tables are spread after.
    units = pipeline | "InputUnits" >> beam.Create(units_list)
    if len(units_list) > 1:
        units = units | "SpreadUnits" >> beam.Reshuffle()
    parsed = units | "Read" >> beam.ParDo(ReadUnit(config.format, config.split, counts_dir)).with_outputs(
        "rejected", main="tables"
    )
    tables = parsed.tables
    rejected = [parsed.rejected]
    if config.split != "train":
        tables = tables | "MergeByMR" >> MergeReferences()
    elif config.selection_fraction > 0:
        tables, selection = tables | "CarveSelection" >> beam.Partition(
            lambda raw, _, fraction: int(in_selection(raw, fraction)), 2, config.selection_fraction)
        selection_config = dataclasses.replace(config, output=config.selection_dir(), split="valid")
        rejected.append(_build_and_write(
            "Selection", selection | "SelectionMergeByMR" >> MergeReferences(), selection_config, counts_dir))
    elif len(units_list) == 1:
        tables = tables | "Spread" >> beam.Reshuffle()
    if config.split == "train" and config.clean_slots:
        tables = tables | "CleanSlots" >> beam.ParDo(CleanSlots())
    if config.split == "train" and config.split_sentences:
        tables = tables | "SplitSentences" >> beam.ParDo(SplitSentences(config.selection_fraction))
    rejected.append(_build_and_write("", tables, config, counts_dir))
    _ = (
        tuple(rejected)
        | "AllRejected" >> beam.Flatten()
        | "RejectedJson" >> beam.Map(_count_rejection)
        | "WriteDeadLetter" >> beam.io.WriteToText(
            os.path.join(config.output, DEAD_LETTER), shard_name_template=""
        )
    )


def _build_and_write(label: str, tables, config: PrepareConfig, counts_dir: Optional[str]):
    """Tables -> examples, vocabularies and stats in config.output; returns the rejections."""
    built = (
        tables
        | f"{label}Batch" >> beam.BatchElements(min_batch_size=16, max_batch_size=config.batch_size)
        | f"{label}Build" >> beam.ParDo(BuildExamples(config.lowercase, counts_dir, f"{label.lower()}_" if label else "",
                                                      readable_references=config.split != "train")).with_outputs(
            "rejected", "summaries", main="examples"
        )
    )
    _ = built.examples | f"{label}WriteExamples" >> beam.io.WriteToTFRecord(
        os.path.join(config.output, EXAMPLES_PREFIX),
        file_name_suffix=".tfrecord.gz",
        num_shards=config.num_shards,
    )
    _ = (
        built.summaries
        | f"{label}MergeSummaries" >> beam.CombineGlobally(summaries.MergeSummaries())
        | f"{label}WriteVocabAndStats" >> beam.Map(summaries.write_outputs, config=config)
    )
    return built.rejected


_rejected_counter = Metrics.counter(NAMESPACE, "rows_rejected")


def _count_rejection(rejection: Rejection) -> str:
    _rejected_counter.inc(rejection.rows)
    return rejection.to_json()


def _counter(result, name: str) -> int:
    counters = result.metrics().query(MetricsFilter().with_namespace(NAMESPACE).with_name(name))["counters"]
    total = 0
    for counter in counters:
        value = counter.committed if counter.committed is not None else counter.attempted
        total += value or 0
    return total


def _runs_locally(beam_args: List[str]) -> bool:
    """The DirectRunner's workers share this machine's disk (default_runner_args' choice)."""
    runner = PipelineOptions(beam_args).view_as(StandardOptions).runner
    return runner in (None, runner_names.LOCAL_RUNNER, "BundleBasedDirectRunner")


def default_runner_args(beam_args: List[str]) -> List[str]:
    """The DirectRunner (ours, without the Prism download) with 2 worker processes unless the
    user chose otherwise; `--runner=DaskRunner` is ours too (runner_names.py)."""
    beam_args = runner_names.with_our_runners(beam_args)
    joined = " ".join(beam_args)
    if "--runner" not in joined:
        beam_args = [*beam_args, f"--runner={runner_names.LOCAL_RUNNER}"]
    elif not _runs_locally(beam_args):
        return beam_args
    extra = []
    if "--direct_num_workers" not in joined:
        extra.append("--direct_num_workers=2")
    if "--direct_running_mode" not in joined:
        extra.append("--direct_running_mode=multi_processing")
    return beam_args + extra


def run(config: PrepareConfig, beam_args: Optional[List[str]] = None,
        on_counts: Optional[Callable[[Dict[str, int]], None]] = None) -> Dict[str, int]:
    """Runs the job and returns the counts {read, written, rejected}. ``on_counts`` gets
    running counts {read, written} about once a second while it runs (DirectRunner)."""
    args = default_runner_args(list(beam_args or []))
    start = time.time()
    watching = on_counts is not None and _runs_locally(args)
    with running_counts.Watcher(on_counts) if watching else contextlib.nullcontext() as watcher:
        pipeline = beam.Pipeline(options=PipelineOptions(args))
        build_pipeline(pipeline, config, watcher.directory if watching else None)
        result = pipeline.run()
        result.wait_until_finish()
    _remove_sink_leftovers(config)
    counts = {
        "read": _counter(result, "rows_read"),
        "written": _counter(result, "examples_written"),
        "rejected": _counter(result, "rows_rejected"),
        "rows_written": _counter(result, "rows_written"),
        "seconds": round(time.time() - start, 2),
    }
    if config.split == "train" and config.selection_fraction > 0:
        counts["selection_written"] = _counter(result, "selection_examples_written")
        counts["selection_rows"] = _counter(result, "selection_rows_written")
        selection = dataclasses.replace(config, output=config.selection_dir(), split="valid")
        _write_counts(selection, {"written": counts["selection_written"], "rows_written": counts["selection_rows"],
                                  "carved_from": config.output})
    if config.split == "train" and config.clean_slots:
        counts.update({key: _counter(result, key) for key in ("slot_tables_cleaned", "slots_removed", "slots_added")})
    if config.split == "train" and config.split_sentences:
        counts.update({key: _counter(result, key)
                       for key in ("sentence_tables_added", "sentence_tables_on_selection_mrs")})
    _write_counts(config, counts)
    if counts["written"] == 0:
        raise PrepareError(
            f"no valid records: {counts['rejected']} of {counts['read']} rows rejected; "
            f"see {os.path.join(config.output, DEAD_LETTER)}"
        )
    return counts


def _remove_sink_leftovers(config: PrepareConfig) -> None:
    """Beam's file sinks stage shards in OUTPUT/beam-temp-*; one survives the job only when a
    runner recomputed a sink's initialize step after losing a worker (Dask), so its finalize
    step removed the new directory. The job is over: nothing else writes there."""
    directories = [config.output]
    if config.split == "train" and config.selection_fraction > 0:
        directories.append(config.selection_dir())
    for directory in directories:
        if "://" not in directory:  # Beam's local match lists no directories
            for path in glob.glob(os.path.join(glob.escape(directory), "beam-temp-*")):
                shutil.rmtree(path, ignore_errors=True)
            continue
        staged = FileSystems.match([FileSystems.join(directory, "beam-temp-**")])[0].metadata_list
        if staged:  # object stores: the files are the directory
            FileSystems.delete([match.path for match in staged])


def _write_counts(config: PrepareConfig, counts: Dict[str, int]) -> None:
    metadata = {"config": dataclasses.asdict(config), "counts": counts,
                "example_form": get_reader(config.format).example_form}
    with FileSystems.create(os.path.join(config.output, "metadata.json")) as handle:
        handle.write(json.dumps(metadata, indent=2).encode("utf-8"))


def summary_line(counts: Dict[str, int]) -> str:
    line = f"read {counts['read']}, written {counts['written']}, rejected {counts['rejected']}"
    if "selection_written" in counts:
        line += f"; selection split {counts['selection_written']} examples ({counts['selection_rows']} rows)"
    if "slot_tables_cleaned" in counts:
        line += (f"; slots cleaned in {counts['slot_tables_cleaned']} tables "
                 f"({counts['slots_removed']} removed, {counts['slots_added']} added)")
    if "sentence_tables_added" in counts:
        line += (f"; {counts['sentence_tables_added']} sentence rows added "
                 f"({counts['sentence_tables_on_selection_mrs']} left out: their table hashes into the selection share of MRs)")
    return line
