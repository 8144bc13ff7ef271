"""A model family added without touching shared code: the test-only ``toy-copy``
(tests/toy_family: its folder, its config, this test) runs the whole path
prepare -> train -> generate -> export -> serve, text in and text out.
"""

import json
import os
import subprocess
import sys
import urllib.request

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FIXTURES = os.path.join(HERE, "fixtures", "text_pairs")
CONFIG = os.path.join(HERE, "toy_family", "toy.yaml")
IN_PROCESS = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
pytestmark = pytest.mark.slow


def _sources(split):
    with open(os.path.join(FIXTURES, f"{split}.tsv"), encoding="utf-8") as handle:
        return [line.split("\t")[0] for line in handle if line.strip()]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    from tablegen_cli.main import main

    root = tmp_path_factory.mktemp("text_pairs")
    for split in ("train", "valid"):
        assert main(["prepare", "--format", "text-pairs", "--input", os.path.join(FIXTURES, f"{split}.tsv"),
                     "--split", split, "--output", str(root / split)] + IN_PROCESS) == 0
    with open(root / "train" / "metadata.json") as handle:
        assert json.load(handle)["example_form"] == "text"
    return str(root)


@pytest.fixture(scope="module")
def trained(prepared, tmp_path_factory):
    """`tablegen train` in a fresh process that finds the family through TABLEGEN_PLUGINS."""
    run = str(tmp_path_factory.mktemp("run") / "toy")
    env = {**os.environ, "TABLEGEN_PLUGINS": "toy_family.model",
           "PYTHONPATH": os.pathsep.join([HERE, ROOT, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "tablegen_cli.main", "train", "--config", CONFIG,
                           "--data", prepared, "--out", run, "--no-progress"],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert proc.stdout.startswith("trained 30 steps in ")
    with open(os.path.join(run, "train_result.json"), encoding="utf-8") as handle:
        assert json.load(handle)["steps"] == 30
    import toy_family.model  # noqa: F401  (registers toy-copy in this process too)

    return run


def test_the_family_is_registered_only_by_its_own_module():
    import toy_family.model  # noqa: F401
    from tablegen_tf.models import get_family

    family = get_family("toy-copy")
    assert family.example_form == "text" and family.featurizer_class.serving_input == "sources"


def test_a_table_family_refuses_text_examples(prepared, tmp_path):
    from tablegen_tf.config import ConfigError, load_config
    from tablegen_tf.training.trainer import Trainer

    config = load_config("e2e", {"data": {"train": os.path.join(prepared, "train")}})
    with pytest.raises(ConfigError, match="reads table examples.*holds text examples"):
        Trainer(config, str(tmp_path / "run"))


def test_prepare_train_generate_export_serve(trained, tmp_path):
    import grpc  # noqa: F401
    import tensorflow as tf

    from serving import server
    from serving.testing import serve_args
    from tablegen_cli.main import main
    from tablegen_tf.export import CONFIG_ASSET

    sources = _sources("valid")
    output = str(tmp_path / "valid.txt")
    decoding = ["--beam-size", "3", "--length-penalty", "0.5"]  # not the run's (beam 2, no penalty)
    assert main(["generate", "--model", trained, "--format", "text-pairs", "--split", "valid",
                 "--input", os.path.join(FIXTURES, "valid.tsv"), "--output", output] + decoding) == 0
    with open(output, encoding="utf-8") as handle:
        generated = handle.read().splitlines()
    assert len(generated) == len(sources)

    base = str(tmp_path / "serving")
    assert main(["export", "--model", trained, "--serving-base", base, "--model-name", "toy"] + decoding) == 0
    with open(os.path.join(base, "toy", "1", CONFIG_ASSET), encoding="utf-8") as handle:
        exported_decode = json.load(handle)["decode"]
    assert (exported_decode["beam_size"], exported_decode["length_penalty"]) == (3, 0.5)
    loaded = tf.saved_model.load(os.path.join(base, "toy", "1"))
    default = loaded.signatures["serving_default"]
    assert set(default.structured_input_signature[1]) == {"sources"}
    served = default(sources=tf.constant(sources))["text"].numpy()
    assert [t.decode("utf-8") for t in served] == generated  # SavedModel = `tablegen generate`

    instance = server.build_server(serve_args(base, "--model-name", "toy")).start()
    try:
        body = json.dumps({"instances": [{"sources": s} for s in sources[:3]]}).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{instance.rest_port}/v1/models/toy:predict", data=body, method="POST")
        with urllib.request.urlopen(request, timeout=60) as response:
            predictions = json.loads(response.read())["predictions"]
        assert [p["text"] for p in predictions] == generated[:3]
    finally:
        instance.stop()
