"""Table NLM and Template KN through the whole path on the E2E fixture: prepare -> train (or
fit) -> generate / evaluate (with perplexity) -> export -> a fresh-process SavedModel gives
the text of `tablegen generate` -> serve (REST)."""

import json
import os
import subprocess
import sys
import urllib.request

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEV = os.path.join(ROOT, "tests", "fixtures", "e2e", "devset.csv")
IN_PROCESS = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
TINY = ["--set", "model.order=4", "--set", "model.word_dim=8", "--set", "model.global_dim=8",
        "--set", "model.hidden_units=16", "--set", "train.eval_every_steps=100", "--set", "decode.max_length=20",
        "--set", "decode.beam_size=3", "--set", "data.batch_size=8"]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    from tablegen_cli.main import main

    root = tmp_path_factory.mktemp("e2e")
    for split in ("train", "valid"):  # the fixture's 11 MRs serve as both splits
        assert main(["prepare", "--format", "e2e", "--input", DEV, "--split", split,
                     "--output", str(root / split)] + IN_PROCESS) == 0
    return str(root)


@pytest.fixture(scope="module")
def trained(prepared, tmp_path_factory):
    from tablegen_cli.main import main

    run = str(tmp_path_factory.mktemp("run") / "table_nlm")
    assert main(["train", "--config", "e2e,table_nlm/table-nlm", "--data", prepared, "--out", run,
                 "--max-steps", "12", "--no-progress"] + TINY) == 0
    return run


def _evaluate(run, capsys, *extra):
    from tablegen_cli.main import main

    capsys.readouterr()
    main(["evaluate", "--model", run, "--format", "e2e", "--split", "valid", "--input", DEV, *extra])
    out = capsys.readouterr().out
    return json.loads(out[out.index("{"):])


def test_train_evaluate_export_parity_serve(trained, tmp_path, capsys):
    from serving import server
    from serving.testing import serve_args
    from tablegen_cli.main import main
    from tablegen_tf import inference

    output = str(tmp_path / "valid.txt")  # evaluate writes what `tablegen generate` writes
    scores = _evaluate(trained, capsys, "--output", output)
    assert {"bleu", "nist", "rouge4", "perplexity"} <= set(scores) and scores["perplexity"] > 1.0
    with open(output, encoding="utf-8") as handle:
        generated = handle.read().splitlines()
    tables = [raw.serving_input() for raw in inference.read_inputs("e2e", DEV, "valid")[0]]
    assert len(generated) == len(tables)

    base = str(tmp_path / "serving")
    assert main(["export", "--model", trained, "--serving-base", base, "--model-name", "tnlm"]) == 0
    script = ("import json, sys, tensorflow as tf, tensorflow_text  # noqa: registers the tokenizer ops\n"
              "m = tf.saved_model.load(sys.argv[1])\n"
              "out = m.signatures['serving_default'](tables=tf.constant(json.loads(sys.argv[2])))['text']\n"
              "print(json.dumps([t.decode('utf-8') for t in out.numpy()]))\n")
    proc = subprocess.run([sys.executable, "-c", script, os.path.join(base, "tnlm", "1"), json.dumps(tables)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == generated  # fresh-process SavedModel = generate

    instance = server.build_server(serve_args(base, "--model-name", "tnlm")).start()
    try:
        body = json.dumps({"instances": [{"tables": t} for t in tables[:2]]}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{instance.rest_port}/v1/models/tnlm:predict",
                                         data=body, method="POST")
        with urllib.request.urlopen(request, timeout=60) as response:
            predictions = json.loads(response.read())["predictions"]
        assert [p["text"] for p in predictions] == generated[:2]
    finally:
        instance.stop()


def test_template_kn_fits_and_evaluates_with_the_same_command(prepared, tmp_path, capsys):
    from tablegen_tf.models.table_nlm import kn

    run = str(tmp_path / "tkn")
    assert kn.main(["--config", "e2e,table_nlm/template-kn", "--data", prepared, "--out", run,
                    "--set", "decode.max_length=20", "--set", "decode.beam_size=3"]) == 0
    scores = _evaluate(run, capsys)
    assert scores["bleu"] > 5.0 and scores["perplexity"] > 1.0
