"""The prepare job end to end on fixtures cut from ../shared/data."""

import dataclasses
import glob
import json
import os
import shutil

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from beam_jobs import prepare
from tablegen_tf.readers.base import InputError
from tablegen_tf import schema

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures")
IN_PROCESS = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]


def _read_examples(output):
    import tensorflow as tf

    files = sorted(glob.glob(os.path.join(output, "examples-*.tfrecord.gz")))
    return [
        schema.TableExample.parse(record.numpy())
        for record in tf.data.TFRecordDataset(files, compression_type="GZIP")
    ]


def _dead_letters(output):
    with open(os.path.join(output, prepare.DEAD_LETTER)) as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _config(fmt, path, output, split):
    return prepare.PrepareConfig(format=fmt, input=path, output=str(output), split=split, num_shards=1)


def test_test_pipeline_builds_examples_from_wikibio(tmp_path):
    config = _config("wikibio", os.path.join(FIXTURES, "wikibio", "train"), tmp_path, "train")
    with TestPipeline() as pipeline:
        prepare.build_pipeline(pipeline, config)
    examples = _read_examples(tmp_path)
    assert examples and all(e.values and e.target_tokens for e in examples)
    assert all(len(e.copy_alignment) == len(e.target_tokens) for e in examples)
    assert os.path.exists(os.path.join(tmp_path, "vocab", "words.txt"))
    stats = json.load(open(os.path.join(tmp_path, "stats.json")))
    assert stats["examples"] == len(examples)


def test_read_unit_dofn_separates_rejections(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"table": [{"field": "a", "value": "x"}], "text": "x"}\nnot json\n')
    with TestPipeline() as pipeline:
        parsed = (
            pipeline
            | beam.Create([str(path)])
            | beam.ParDo(prepare.ReadUnit("jsonl", "train")).with_outputs("rejected", main="tables")
        )
        assert_that(parsed.tables | "Ids" >> beam.Map(lambda t: t.texts), equal_to([["x"]]), label="tables")
        assert_that(parsed.rejected | "Lines" >> beam.Map(lambda r: r.line), equal_to([2]), label="rejected")


def test_e2e_devset_groups_references_per_mr(tmp_path):
    counts = prepare.run(_config("e2e", os.path.join(FIXTURES, "e2e", "devset.csv"), tmp_path, "valid"), IN_PROCESS)
    examples = _read_examples(tmp_path)
    assert counts["read"] == counts["rows_written"] + counts["rejected"]
    assert counts["written"] == len(examples) < counts["read"]
    assert sum(len(e.references) for e in examples) == counts["rows_written"]


def test_corrupted_lines_go_to_dead_letter_and_nothing_is_lost(tmp_path):
    source = os.path.join(FIXTURES, "wikibio", "train")
    corrupt = tmp_path / "in"
    shutil.copytree(source, corrupt)
    box = corrupt / "train.box"
    lines = box.read_text().splitlines()
    lines[1] = "this-item-has-no-colon\t" + lines[1]
    lines[3] = "\t".join(item.split(":")[0] + ":<none>" for item in lines[3].split("\t"))  # empty table
    box.write_text("\n".join(lines) + "\n")
    output = tmp_path / "out"
    counts = prepare.run(_config("wikibio", str(corrupt), output, "train"), IN_PROCESS)
    dead = _dead_letters(output)
    assert sorted(d["line"] for d in dead) == [2, 4]
    assert all(d["file"].endswith("train.box") and d["reason"] for d in dead)
    assert counts["rejected"] == 2
    assert counts["read"] == counts["written"] + counts["rejected"] == len(lines)


def test_missing_input_is_a_one_line_error(tmp_path):
    with pytest.raises(InputError):
        prepare.run(_config("wikibio", str(tmp_path / "nope"), tmp_path / "out", "train"), IN_PROCESS)


def test_running_counts_reach_the_launcher_and_leave_nothing_behind(tmp_path, monkeypatch):
    # The DoFns' heartbeat files are summed on a thread while the job runs, once more at
    # the end; the directory is removed.
    import tempfile

    from beam_jobs import running_counts

    monkeypatch.setattr(running_counts, "WRITE_EVERY_SECONDS", 0.0)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    os.makedirs(tmp_path / "tmp")
    seen = []
    counts = prepare.run(_config("e2e", os.path.join(FIXTURES, "e2e", "devset.csv"), tmp_path / "out", "train"),
                         IN_PROCESS, on_counts=lambda totals: seen.append(totals))
    assert seen and seen[-1] == {"read": counts["read"], "written": counts["written"]}  # the last call is final
    # Nor Beam's: its DirectRunner, trying Prism first, left a beam-temp* directory per job
    # (beam_jobs/local_runner.py). (TF's autograph files are the test session's to remove.)
    left = [name for name in os.listdir(tmp_path / "tmp") if name.startswith(("tablegen-counts-", "beam-temp"))]
    assert left == []


def test_the_direct_runner_is_ours_without_the_prism_download():
    from beam_jobs.runner_names import LOCAL_RUNNER

    assert f"--runner={LOCAL_RUNNER}" in prepare.default_runner_args([])
    assert prepare.default_runner_args(["--runner=DirectRunner"])[:1] == [f"--runner={LOCAL_RUNNER}"]
    assert "--direct_num_workers=2" in prepare.default_runner_args(["--runner", "direct"])
    assert prepare.default_runner_args(["--runner=DataflowRunner"]) == ["--runner=DataflowRunner"]


def test_heartbeat_files_sum_and_survive_a_vanished_directory(tmp_path):
    from beam_jobs import running_counts

    first, second = running_counts.Heartbeat(str(tmp_path)), running_counts.Heartbeat(str(tmp_path))
    first.add("read", 3)
    second.add("read", 4)
    second.add("written", 2)
    first.flush(), second.flush()
    assert running_counts.read_totals(str(tmp_path)) == {"read": 7, "written": 2}
    running_counts.Heartbeat(str(tmp_path / "gone")).flush()  # the job has ended: no error
    running_counts.Heartbeat(None).add("read")  # not watched: a no-op


def test_selection_split_takes_whole_mrs_out_of_train(tmp_path):
    """Carved by MR: no MR on both sides, every row on exactly one, references merged."""
    config = dataclasses.replace(
        _config("e2e", os.path.join(FIXTURES, "e2e", "devset.csv"), tmp_path / "train", "train"),
        selection_fraction=0.5)
    counts = prepare.run(config, IN_PROCESS)
    train, selection = _read_examples(tmp_path / "train"), _read_examples(tmp_path / "selection")
    mr = lambda e: tuple(zip(e.fields, e.values))  # noqa: E731
    assert train and selection and not {mr(e) for e in train} & {mr(e) for e in selection}
    assert len({mr(e) for e in selection}) == len(selection) == counts["selection_written"]
    assert counts["rows_written"] + counts["selection_rows"] + counts["rejected"] == counts["read"]
    assert sum(len(e.references) for e in selection) == counts["selection_rows"]
    metadata = json.load(open(tmp_path / "selection" / "metadata.json"))
    assert metadata["config"]["split"] == "valid" and metadata["counts"]["written"] == len(selection)
    assert "selection split" in prepare.summary_line(counts)
    # `tablegen evaluate --selection-fraction` reads the same MRs with the same references
    from tablegen_tf.inference import read_inputs

    raws, _ = read_inputs("e2e", os.path.join(FIXTURES, "e2e", "devset.csv"), "train", selection_fraction=0.5)
    assert sorted(len(r.texts) for r in raws) == sorted(len(e.references) for e in selection)


def test_pre_tokenized_references_are_readable_on_the_selection_split_as_written_on_train(tmp_path):
    """The aligned files write "family - friendly": the carved selection split (scored) stores
    the references detokenized, as `tablegen evaluate` reads them; train (never scored) keeps
    the corpus's text, so its records, hence the training order, do not change."""
    from tablegen_tf.inference import build, read_inputs
    from tablegen_tf.tokenizer import TokenizerConfig

    source = tmp_path / "aligned"  # the fixture's rows as a train split
    source.mkdir()
    for name in ("src_valid.txt", "valid.txt"):
        shutil.copy(os.path.join(FIXTURES, "e2e", "aligned", name), source / name.replace("valid", "train"))
    source = str(source)
    # 0.7: the Cocum MR (hash share 0.63) is carved out, the two Alimentum MRs (0.79) stay
    config = dataclasses.replace(_config("e2e-aligned", source, tmp_path / "train", "train"), selection_fraction=0.7)
    prepare.run(config, IN_PROCESS)
    train, selection = _read_examples(tmp_path / "train"), _read_examples(tmp_path / "selection")
    assert train and selection
    assert any(" - " in ref for e in train for ref in e.references)  # as the corpus writes it
    assert not any(" - " in ref or " ," in ref for e in selection for ref in e.references)
    raws, _ = read_inputs("e2e-aligned", source, "train", selection_fraction=0.7)
    evaluated = build(raws, TokenizerConfig(), needs_text=True)[0]
    assert sorted(map(sorted, (e.references for e in evaluated))) == sorted(map(sorted, (e.references for e in selection)))


def test_clean_slots_rewrites_train_tables_and_counts_them(tmp_path):
    """The job's tables are clean_tables' tables: fields per example follow the cleaning."""
    from tablegen_tf.inference import read_inputs
    from tablegen_tf.metrics.slot_metrics import attribute_key
    from tablegen_tf.readers.clean_slots import clean_tables

    source = os.path.join(FIXTURES, "e2e", "devset.csv")
    config = dataclasses.replace(_config("e2e", source, tmp_path / "train", "train"), clean_slots=True)
    counts = prepare.run(config, IN_PROCESS)
    expected, cleaning = clean_tables(read_inputs("e2e", source, "train")[0])
    assert cleaning.changed > 0
    assert (counts["slot_tables_cleaned"], counts["slots_removed"], counts["slots_added"]) == (
        cleaning.changed, cleaning.removed, cleaning.added)
    fields = lambda e: sorted({attribute_key(f) for f in e.fields})  # noqa: E731
    assert sorted(map(fields, _read_examples(tmp_path / "train"))) == sorted(
        sorted({attribute_key(i.field) for i in t.items}) for t in expected)
    assert "slots cleaned in" in prepare.summary_line(counts)


def test_split_sentences_adds_the_sentence_tables_and_counts_them(tmp_path):
    """Every row stays; each faithful sentence adds one example, none on a selection-share MR."""
    from tablegen_tf.inference import read_inputs
    from tablegen_tf.readers.base import in_selection
    from tablegen_tf.readers.sentence_split import sentence_tables

    source = os.path.join(FIXTURES, "e2e", "devset.csv")
    config = dataclasses.replace(_config("e2e", source, tmp_path / "train", "train"), split_sentences=True)
    counts = prepare.run(config, IN_PROCESS)
    raws = read_inputs("e2e", source, "train")[0]
    expected = [t for raw in raws for t in sentence_tables(raw)]
    assert counts["sentence_tables_added"] == len(expected) > 0
    assert counts["sentence_tables_on_selection_mrs"] == 0  # no selection split carved
    assert counts["written"] == len(raws) + len(expected) and counts["rows_written"] == counts["read"]
    assert "sentence rows added" in prepare.summary_line(counts)
    carved = dataclasses.replace(config, output=str(tmp_path / "carved"), selection_fraction=0.5)
    counts = prepare.run(carved, IN_PROCESS)
    kept = [raw for raw in raws if not in_selection(raw, 0.5)]
    left_out = [t for raw in kept for t in sentence_tables(raw) if in_selection(t, 0.5)]
    assert counts["sentence_tables_on_selection_mrs"] == len(left_out)
    assert counts["written"] == len(kept) + sum(len(sentence_tables(r)) for r in kept) - len(left_out)
    # a sentence table in the selection share is left out (nearly every table is, at 0.9999)
    table = next(raw for raw in raws if sentence_tables(raw))
    assert list(prepare.SplitSentences(0.9999).process(table)) == [table]
    assert len(list(prepare.SplitSentences(0.0).process(table))) == 1 + len(sentence_tables(table))
