"""End-to-end: LocalDagRunner on a tiny E2E corpus in {SPAN} layout, tiny model.

Five runs, asserting ML Metadata executions (caching is tested, not assumed):
(a) first run pushes a version; (b) an unchanged rerun is fully cached; (c) a new
span retrains, warm-starting from the pushed model; (d) a model failing the BLEU
gate is not pushed; (e) a span with an unknown field stops before training, with
its malformed row in the dead letters.
"""

import json
import os
import shutil

import pytest

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "e2e")
SCHEMA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs", "e2e_schema.pbtxt")
TINY_TRAINER = {
    "corpus": "e2e",
    "warm_start": True,
    "config": {
        "model": {"name": "encdec-copy", "hidden_size": 8, "word_dim": 8, "field_dim": 4, "value_dim": 8,
                  "position_dim": 2, "num_layers": 1},
        "data": {"batch_size": 4, "shuffle_buffer": 16},
        "train": {"max_steps": 6, "max_minutes": 0, "eval_every_steps": 1000, "eval_max_examples": 4, "seed": 1},
        # One plain search without reranking: the pipeline is under test here, not the
        # decoder (export_test / real_model_serving_test cover those); it exports ~20 s faster.
        "decode": {"beam_size": 2, "max_length": 8, "slot_rerank_weight": 0.0, "parallel_searches": 1},
    },
}


def add_span(input_base: str, span: int, extra_csv_rows=()) -> None:
    """span-N/aligned/{src_train,train}.txt (the fixture's aligned rows) + span-N/devset.csv."""
    aligned = os.path.join(input_base, f"span-{span}", "aligned")
    os.makedirs(aligned)
    shutil.copy(os.path.join(FIXTURES, "aligned", "src_valid.txt"), os.path.join(aligned, "src_train.txt"))
    shutil.copy(os.path.join(FIXTURES, "aligned", "valid.txt"), os.path.join(aligned, "train.txt"))
    devset = os.path.join(input_base, f"span-{span}", "devset.csv")
    shutil.copy(os.path.join(FIXTURES, "devset.csv"), devset)
    with open(devset, "a", encoding="utf-8") as handle:
        handle.writelines(row + "\n" for row in extra_csv_rows)


def tiny_overrides(tmp_path, **evaluator):
    """The tiny pipeline's settings over configs/default.yaml (also usable as a --config YAML)."""
    return {
        "pipeline": {"name": "tablegen-e2e-test", "root": str(tmp_path / "root"),
                     "beam_pipeline_args": ["--direct_running_mode=in_memory", "--direct_num_workers=1"]},
        "data": {
            "input_base": str(tmp_path / "input"),
            "schema_file": SCHEMA,
            "splits": [
                {"name": "train", "format": "e2e-aligned", "reader_split": "train",
                 "pattern": "span-{SPAN}/aligned/*train.txt"},
                {"name": "eval", "format": "e2e", "reader_split": "valid", "pattern": "span-{SPAN}/devset.csv"},
            ],
        },
        "trainer": TINY_TRAINER,
        # (c) must not fail on the noise of a 6-step model: the baseline comparison itself
        # is unit-tested (evaluator_test.test_decide); (d) uses the absolute threshold.
        "evaluator": {"min_bleu": 0.0, "max_bleu_drop": 100.0, "batch_size": 8, **evaluator},
        "pusher": {"base_directory": str(tmp_path / "serving"), "model_name": "tiny"},
    }


def tiny_config(tmp_path, **evaluator):
    from tfx_pipeline import config

    return config.from_raw(config.deep_merge(config.load_raw(), tiny_overrides(tmp_path, **evaluator)))


def executions(config):
    """[(node id, state name, execution)] in execution order, from ML Metadata."""
    from ml_metadata.proto import metadata_store_pb2

    from tfx_pipeline.runner import metadata_store

    store = metadata_store(config)
    types = {t.id: t.name for t in store.get_execution_types()}
    result = []
    for execution in sorted(store.get_executions(), key=lambda e: e.id):
        name = types[execution.type_id].rsplit(".", 1)[-1]
        state = metadata_store_pb2.Execution.State.Name(execution.last_known_state)
        result.append((name, state, execution))
    return result


def latest_examples(config):
    from tfx_pipeline.runner import metadata_store

    examples = max(metadata_store(config).get_artifacts_by_type("Examples"), key=lambda a: a.id)
    return {k: getattr(v, v.WhichOneof("value")) for k, v in examples.custom_properties.items()}


def _new(config, before):
    return executions(config)[before:]


def _states(runs, name):
    return [state for node, state, _ in runs if node == name]


def _model_run_info(where):
    model_uri = os.path.dirname(where["model_run_logs"]).replace("model_run", "model")
    with open(os.path.join(model_uri, "tablegen_run.json")) as handle:
        return json.load(handle)


@pytest.mark.slow
def test_local_dag_runner_push_cache_new_span_and_gate(tmp_path):
    from tfx_pipeline.runner import run_local

    config = tiny_config(tmp_path)
    add_span(config.input_base, 1)

    # (a) first run: everything executes, one version pushed.
    first = run_local(config)
    runs = executions(config)
    assert first["pushed"], first
    assert len(first["versions"]) == 1
    assert _states(runs, "Trainer") == ["COMPLETE"]
    assert _model_run_info(first)["warm_started_from"] is None
    counts = latest_examples(config)
    assert (counts["examples_train"], counts["rejected_train"]) == (11, 0)
    assert (counts["examples_eval"], counts["rejected_eval"]) == (3, 0)  # 11 rows, 3 distinct MRs

    # (b) rerun, nothing changed: every component cached, no new Trainer execution.
    seen = len(runs)
    run_local(config)
    rerun = _new(config, seen)
    assert _states(rerun, "Trainer") == ["CACHED"]
    assert all(state == "CACHED" for node, state, _ in rerun if "Resolver" not in node), rerun
    assert len(os.listdir(config.push_directory)) == 1

    # (c) a new span: new examples, retraining warm-started from the pushed model.
    add_span(config.input_base, 2)
    seen = len(executions(config))
    third = run_local(config)
    new = _new(config, seen)
    assert _states(new, "Trainer") == ["COMPLETE"]
    assert _model_run_info(third)["warm_started_from"] == os.path.dirname(first["model_run_logs"])
    assert third["pushed"] and len(third["versions"]) == 2

    # (d) a model failing the gate (threshold above any BLEU) is not pushed.
    add_span(config.input_base, 3)
    strict = tiny_config(tmp_path, min_bleu=101.0)
    seen = len(executions(strict))
    fourth = run_local(strict)
    new = _new(strict, seen)
    assert _states(new, "Trainer") == ["COMPLETE"]
    assert not fourth["pushed"]
    assert len(os.listdir(strict.push_directory)) == 2

    # (e) data anomalies stop the run before training; a malformed row is a dead letter.
    from tfx_pipeline.components import DataAnomaliesError

    add_span(config.input_base, 4, ['"name[Zizzi], rating[5 stars]",Zizzi is rated 5 stars.',
                                    '"name[Zizzi], broken",Not a valid MR.'])
    seen = len(executions(config))
    with pytest.raises(DataAnomaliesError, match="split eval, feature 'record_field'"):
        run_local(config)
    assert "Trainer" not in [node for node, _, _ in _new(config, seen)]
    counts = latest_examples(config)
    assert (counts["examples_eval"], counts["rejected_eval"]) == (4, 1)
    with open(os.path.join(counts["dead_letter_dir"], "eval.jsonl")) as handle:
        assert "unparsable MR" in handle.read()
