"""The real path end to end on a tiny trained model: train -> TensorBoard events ->
`tablegen generate` -> export -> reload in a fresh process (tensorflow +
tensorflow_text only) with the same text -> `tablegen serve` -> gRPC and REST
round trips -> malformed requests get INVALID_ARGUMENT and the server keeps serving.
"""

import dataclasses
import glob
import json
import os
import subprocess
import sys
import urllib.request

import pytest
import tensorflow as tf

from trainer_test import data_dir, tiny_config  # noqa: F401  (fixture; tests/ is on sys.path)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEVSET = os.path.join(ROOT, "tests", "fixtures", "e2e", "devset.csv")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trained(data_dir, tmp_path_factory):  # noqa: F811
    from tablegen_tf.training.trainer import Trainer

    out = str(tmp_path_factory.mktemp("run") / "e2e")
    config = tiny_config(data_dir, max_steps=8)
    # slot reranking on: the fresh-process and served texts below must follow it too
    config = config.replace(decode=dataclasses.replace(config.decode, beam_size=4, slot_rerank_weight=5.0))
    Trainer(config, out).train(progress=False)
    return out


@pytest.fixture(scope="module")
def tables():
    from tablegen_tf.inference import read_inputs

    raw, _ = read_inputs("e2e", DEVSET, "valid")
    return [table.serving_input() for table in raw]


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory):
    from tablegen_tf.export import export_saved_model

    base = tmp_path_factory.mktemp("serving")
    export_saved_model(trained, str(base / "tablegen" / "1"))
    return str(base)


def _local_texts(run_dir):
    from tablegen_cli.main import main

    output = os.path.join(run_dir, "dev.txt")
    assert main(["generate", "--model", run_dir, "--format", "e2e", "--input", DEVSET, "--output", output]) == 0
    with open(output, encoding="utf-8") as handle:
        return handle.read().splitlines()


def test_tensorboard_events_hold_scalars_text_and_images(trained):
    tags = set()
    for path in glob.glob(os.path.join(trained, "logs", "*", "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            tags.update(value.tag for value in event.summary.value)
    assert {"loss", "perplexity", "learning_rate", "bleu", "samples", "copy_attention"} <= tags


def test_generate_writes_one_line_per_mr_without_unk(trained, tables):
    texts = _local_texts(trained)
    assert len(texts) == len(tables)
    assert not any("<unk>" in text for text in texts)


def test_savedmodel_in_a_fresh_process_matches_the_training_decoder(trained, exported, tables):
    code = (
        "import json, sys\n"
        "import tensorflow as tf, tensorflow_text\n"
        "model = tf.saved_model.load(sys.argv[1])\n"
        "out = model.signatures['serving_default'](tables=tf.constant(json.loads(sys.argv[2])))\n"
        "print(json.dumps([t.decode('utf-8') for t in out['text'].numpy()]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, os.path.join(exported, "tablegen", "1"), json.dumps(tables)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == _local_texts(trained)


def test_served_over_grpc_and_rest(exported, tables, trained):
    import grpc

    from serving import server
    from serving.client import generate_remote
    from serving.testing import serve_args

    instance = server.build_server(serve_args(exported)).start()
    try:
        address = f"127.0.0.1:{instance.grpc_port}"
        texts = generate_remote(address, "tablegen", tables)
        assert texts == _local_texts(trained)
        body = json.dumps({"instances": tables}).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{instance.rest_port}/v1/models/tablegen:predict", data=body, method="POST"
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            predictions = json.loads(response.read())["predictions"]
        assert [p["text"] for p in predictions] == texts
        for bad in ["not json", '{"table": []}', '{"rows": [{"field": "a", "value": "b"}]}']:
            with pytest.raises(grpc.RpcError) as error:
                generate_remote(address, "tablegen", [bad], retries=0)
            assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert generate_remote(address, "tablegen", tables[:1]) == texts[:1]
    finally:
        instance.stop()
