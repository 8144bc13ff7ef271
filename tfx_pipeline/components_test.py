"""ExampleGen settings, the anomalies gate, the baseline resolver (no pipeline run)."""

import os
import shutil

import pytest

from tfx_pipeline import components
from tfx_pipeline.config import SplitSpec

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "e2e")
SPLITS = (
    SplitSpec(name="train", format="e2e-aligned", pattern="span-{SPAN}/aligned/*train.txt"),
    SplitSpec(name="eval", format="e2e", pattern="span-{SPAN}/devset.csv"),
)


def test_custom_config_round_trips_through_exec_properties():
    from google.protobuf import json_format

    config = components.example_gen_custom_config(SPLITS, lowercase=True)
    settings = components.read_custom_config({"custom_config": json_format.MessageToJson(config)})
    assert settings["lowercase"] is True
    assert settings["splits"]["train"] == {"format": "e2e-aligned", "reader_split": "train", "merge": False,
                                          "clean_slots": False}
    assert settings["splits"]["eval"] == {"format": "e2e", "reader_split": "valid", "merge": True,
                                         "clean_slots": False}


def test_split_is_found_from_its_resolved_pattern():
    from google.protobuf import json_format
    from tfx.proto import example_gen_pb2

    input_config = example_gen_pb2.Input(splits=[
        example_gen_pb2.Input.Split(name="train", pattern="span-3/aligned/*train.txt"),
        example_gen_pb2.Input.Split(name="eval", pattern="span-3/devset.csv"),
    ])
    properties = {"input_config": json_format.MessageToJson(input_config)}
    assert components._split_name(properties, "span-3/devset.csv") == "eval"


def test_aligned_source_and_target_files_are_one_reader_unit(tmp_path):
    aligned = tmp_path / "aligned"
    aligned.mkdir()
    shutil.copy(os.path.join(FIXTURES, "aligned", "src_valid.txt"), aligned / "src_train.txt")
    shutil.copy(os.path.join(FIXTURES, "aligned", "valid.txt"), aligned / "train.txt")
    units = components.input_units(str(tmp_path), "aligned/*train.txt", "e2e-aligned", "train")
    assert units == [str(aligned / "src_train.txt")]
    with pytest.raises(components.InputError, match="no input file matches"):
        components.input_units(str(tmp_path), "missing/*.csv", "e2e", "valid")


def _write_anomalies(uri, split, features):
    from tensorflow_metadata.proto.v0 import anomalies_pb2

    anomalies = anomalies_pb2.Anomalies()
    for name, short, long in features:
        info = anomalies.anomaly_info[name]
        info.short_description, info.description = short, long
    os.makedirs(os.path.join(uri, f"Split-{split}"))
    with open(os.path.join(uri, f"Split-{split}", "SchemaDiff.pb"), "wb") as handle:
        handle.write(anomalies.SerializeToString())


def test_anomalies_gate_raises_a_readable_report(tmp_path):
    uri = str(tmp_path / "anomalies")
    _write_anomalies(uri, "train", [])
    _write_anomalies(uri, "eval", [("record_field", "Unexpected string values", "Examples contain 'rating'.")])
    components.raise_on_anomalies(uri, ["train"])  # no anomaly: passes
    with pytest.raises(components.DataAnomaliesError) as error:
        components.raise_on_anomalies(uri, ["train", "eval"])
    message = str(error.value)
    assert "1 data anomalies" in message
    assert "split eval, feature 'record_field': Unexpected string values -- Examples contain 'rating'." in message


def _artifact(kind, artifact_id, **int_properties):
    from tfx.types import standard_artifacts

    artifact = getattr(standard_artifacts, kind)()
    artifact.id = artifact_id
    for key, value in int_properties.items():
        artifact.set_int_custom_property(key, value)
    return artifact


def test_resolver_takes_the_latest_blessed_model_older_than_the_examples():
    strategy = components.LatestBlessedModelBeforeExamplesStrategy()
    models = [_artifact("Model", i) for i in (10, 20, 30)]
    blessings = [
        _artifact("ModelBlessing", 11, blessed=1, current_model_id=10),
        _artifact("ModelBlessing", 21, blessed=1, current_model_id=20),
        _artifact("ModelBlessing", 31, blessed=0, current_model_id=30),
    ]
    resolve = lambda examples_id: strategy.resolve_artifacts(  # noqa: E731
        None, {"examples": [_artifact("Examples", examples_id)], "model": models, "model_blessing": blessings}
    )
    # Data older than every model (a rerun on run 1's data): nothing, as in run 1.
    assert resolve(5)["model"] == []
    # Data newer than model 10 only: model 20 was trained on this data, not a baseline.
    assert [m.id for m in resolve(15)["model"]] == [10]
    # A new span: the latest *blessed* model (30 was not blessed).
    result = resolve(40)
    assert [m.id for m in result["model"]] == [20]
    assert [b.id for b in result["model_blessing"]] == [21]


# ------------------------------------------------------------------ pusher


def _saved_model(path, data_bytes=8 << 20):
    os.makedirs(os.path.join(path, "variables"))
    with open(os.path.join(path, "variables", "variables.data-00000-of-00001"), "wb") as handle:
        handle.write(b"\0" * data_bytes)
    with open(os.path.join(path, "variables", "variables.index"), "wb") as handle:
        handle.write(b"index")
    with open(os.path.join(path, "saved_model.pb"), "wb") as handle:
        handle.write(b"graph")


def incomplete_versions(base, data_bytes):
    """Version dirs of `base` lacking saved_model.pb or a complete variables/ (as a server sees them)."""
    bad = []
    for name in os.listdir(base) if os.path.isdir(base) else []:
        if not name.isdigit():
            continue
        path = os.path.join(base, name)
        data = os.path.join(path, "variables", "variables.data-00000-of-00001")
        complete = (os.path.isfile(os.path.join(path, "saved_model.pb"))
                    and os.path.isfile(os.path.join(path, "variables", "variables.index"))
                    and os.path.isfile(data) and os.path.getsize(data) == data_bytes)
        if not complete:
            bad.append(name)
    return bad


def test_the_poll_check_sees_a_half_written_version(tmp_path):
    _saved_model(str(tmp_path / "base" / "7"), data_bytes=10)
    os.remove(tmp_path / "base" / "7" / "saved_model.pb")
    assert incomplete_versions(str(tmp_path / "base"), 10) == ["7"]


def test_versions_increase_even_within_one_second(tmp_path):
    base = str(tmp_path / "base")
    assert components.next_version(base, now=lambda: 1000.2) == "1000"
    os.makedirs(os.path.join(base, "1000"))
    os.makedirs(os.path.join(base, ".tmp-1001"))
    assert components.next_version(base, now=lambda: 1000.9) == "1001"
    assert components.next_version(base, now=lambda: 2000.0) == "2000"


def test_a_polling_server_never_sees_a_half_pushed_version(tmp_path):
    import threading

    model, base, data_bytes = str(tmp_path / "model"), str(tmp_path / "serving" / "m"), 8 << 20
    _saved_model(model, data_bytes)
    seen_bad, seen_versions, done = set(), set(), threading.Event()

    def poll():
        while not done.is_set():
            seen_bad.update(incomplete_versions(base, data_bytes))
            seen_versions.update(n for n in (os.listdir(base) if os.path.isdir(base) else []) if n.isdigit())

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        versions = [components.push_atomically(model, base) for _ in range(4)]
    finally:
        done.set()
        poller.join()
    assert seen_bad == set()
    assert versions == sorted(versions, key=int) and len(set(versions)) == 4
    assert seen_versions  # the poller did watch the pushes
    assert sorted(os.listdir(base)) == sorted(versions)  # no staging directory left


def test_pusher_executor_pushes_blessed_models_only(tmp_path):
    from google.protobuf import json_format
    from tfx.proto import pusher_pb2
    from tfx.types import standard_artifacts

    model = standard_artifacts.Model()
    model.uri = str(tmp_path / "model")
    _saved_model(os.path.join(model.uri, "Format-Serving"), data_bytes=10)
    base = str(tmp_path / "serving" / "m")
    properties = {"push_destination": json_format.MessageToJson(pusher_pb2.PushDestination(
        filesystem=pusher_pb2.PushDestination.Filesystem(base_directory=base)))}

    def push(blessed):
        blessing, pushed = standard_artifacts.ModelBlessing(), standard_artifacts.PushedModel()
        blessing.uri, pushed.uri = str(tmp_path / f"blessing{blessed}"), str(tmp_path / f"pushed{blessed}")
        blessing.set_int_custom_property("blessed", blessed)
        components.AtomicPusherExecutor().Do({"model": [model], "model_blessing": [blessing]},
                                             {"pushed_model": [pushed]}, properties)
        return pushed

    assert push(0).get_int_custom_property("pushed") == 0 and not os.path.exists(base)
    pushed = push(1)
    version = pushed.get_string_custom_property("pushed_version")
    assert pushed.get_int_custom_property("pushed") == 1
    assert pushed.get_string_custom_property("pushed_destination") == os.path.join(base, version)
    assert os.listdir(base) == [version] and incomplete_versions(base, 10) == []
