"""The sentence-compression family (tablegen_tf/models/compression): prepare -> train -> evaluate -> export -> serve for the compression family (tiny sizes).

Also: deletion labels round-trip through the Beam job, the `compress` signature matches
`tablegen generate` (SavedModel parity; an exported ensemble keeps it), and the server answers
gRPC / REST `compress` calls, bounding an empty and a 10,000-word sentence."""

import json
import os
import urllib.request

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "fixtures", "compression")
IN_PROCESS = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
TINY = ["--set", "model.word_dim=8", "--set", "model.hidden_size=8", "--set", "model.attention_size=8",
        "--set", "train.max_steps=2", "--set", "train.eval_every_steps=2", "--set", "train.log_every_steps=2",
        "--set", "data.batch_size=8", "--set", "decode.beam_size=2", "--set", "decode.max_length=40"]


def _sources(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as handle:
        return [line.split("\t")[0] for line in handle.read().splitlines()[1:] if line.strip()]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    from tablegen_cli.main import main

    root = tmp_path_factory.mktemp("compression")
    for split, name in (("test", "train.tsv"), ("test", "valid.tsv")):
        out = root / name.split(".")[0]
        assert main(["prepare", "--format", "compression", "--input", os.path.join(FIXTURES, name),
                     "--split", split, "--output", str(out)] + IN_PROCESS) == 0
    return str(root)


def test_deletion_labels_round_trip_through_prepare(prepared):
    import tensorflow as tf

    from tablegen_tf.data.input_pipeline import list_files
    from tablegen_tf.schema import TextExample

    examples = [TextExample.parse(r.numpy()) for r in
                tf.data.TFRecordDataset(list_files(os.path.join(prepared, "train")), compression_type="GZIP")]
    assert len(examples) >= 35
    for example in examples:
        assert len(example.labels) == len(example.source_tokens) and set(example.labels) <= {0, 1}
        kept = [t.lower() for t, keep in zip(example.source_tokens, example.labels) if keep]
        target = [t.lower() for t in example.target_tokens]
        assert target[:len(kept)] == kept  # the kept tokens are the compression (+ maybe a final ".")
        assert all(not any(c.isalnum() for c in t) for t in target[len(kept):])
    with open(os.path.join(prepared, "train", "dead_letter.jsonl")) as handle:
        for line in handle:
            assert "not a deletion-based compression" in json.loads(line)["reason"]


@pytest.fixture(scope="module")
def trained(prepared, tmp_path_factory):
    from tablegen_cli.main import main

    root = tmp_path_factory.mktemp("run")
    # the run uses every compression-only input option, so export/serve parity covers them:
    # pre-trained embeddings (`tablegen embeddings` on the training sources), shape features,
    # a vocabulary softmax smaller than the vocabulary
    text = root / "sources.txt"
    text.write_text("\n".join(_sources("train.tsv")) + "\n", encoding="utf-8")
    vectors = str(root / "emb.txt")
    assert main(["embeddings", "--input", str(text), "--out", vectors, "--dim", "8", "--min-count", "1"]) == 0
    run = str(root / "fsc")
    assert main(["train", "--config", "compression", *TINY, "--train", os.path.join(prepared, "train"),
                 "--valid", os.path.join(prepared, "valid"), "--out", run, "--no-progress",
                 "--set", f"model.pretrained_embeddings={vectors}", "--set", "model.shape_dim=2",
                 "--set", "model.softmax_words=40"]) == 0
    with open(os.path.join(run, "logs", "train.log"), encoding="utf-8") as handle:
        assert "vocabulary words from " + vectors in handle.read()
    return run


@pytest.mark.slow
def test_export_parity_and_serve(trained, tmp_path):
    import grpc
    import tensorflow as tf

    from serving import server
    from serving.client import RemoteModel
    from serving.testing import serve_args
    from tablegen_cli.main import main

    run = trained

    out = str(tmp_path / "valid.txt")
    assert main(["generate", "--model", run, "--format", "compression", "--split", "test",
                 "--input", os.path.join(FIXTURES, "valid.tsv"), "--output", out]) in (0, 1)
    with open(out, encoding="utf-8") as handle:
        generated = handle.read().splitlines()

    base = str(tmp_path / "serving")
    assert main(["export", "--model", run, "--serving-base", base, "--model-name", "compress"]) == 0
    loaded = tf.saved_model.load(os.path.join(base, "compress", "1"))
    compress = loaded.signatures["compress"]
    assert set(compress.structured_input_signature[1]) == {"sentences"}
    sources = _sources("valid.tsv")
    result = compress(sentences=tf.constant(sources))
    texts = [t.decode("utf-8") for t in result["text"].numpy()]
    assert texts == generated[:len(sources)]  # SavedModel parity with `tablegen generate`
    keep = result["keep_mask"].numpy()
    assert keep.shape[0] == len(sources) and set(np.unique(keep)) <= {0, 1}

    instance = server.build_server(serve_args(base, "--model-name", "compress")).start()
    try:
        with RemoteModel(f"127.0.0.1:{instance.grpc_port}", "compress", retries=0) as remote:
            outputs, _ = remote.predict({"sentences": np.array([s.encode() for s in sources[:5]], dtype=object)},
                                        signature="compress")
            assert [t.decode() for t in outputs["text"]] == texts[:5]
            assert outputs["keep_mask"].shape[0] == 5
            for odd in ("", " ".join(["word"] * 10000)):
                try:
                    outputs, _ = remote.predict({"sentences": np.array([odd.encode()], dtype=object)},
                                                signature="compress")
                    assert len(outputs["text"][0].split()) <= 101  # bounded: inputs capped at 100 tokens
                except grpc.RpcError as error:
                    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        body = json.dumps({"signature_name": "compress", "instances": [{"sentences": s} for s in sources[:2]]})
        request = urllib.request.Request(f"http://127.0.0.1:{instance.rest_port}/v1/models/compress:predict",
                                         data=body.encode(), method="POST")
        with urllib.request.urlopen(request, timeout=120) as response:
            predictions = json.loads(response.read())["predictions"]
        assert [p["text"] for p in predictions] == texts[:2]
    finally:
        instance.stop()


@pytest.mark.slow
def test_an_exported_ensemble_keeps_the_compress_signature(prepared, trained, tmp_path):
    # docs/compression.md "Fourth round": the served best model is an ensemble of two runs, so
    # its SavedModel must carry the family's `compress` signature, decoding with both members
    import tensorflow as tf

    from tablegen_cli.main import main

    second = str(tmp_path / "fsc_seed2")
    assert main(["train", "--config", "compression", *TINY, "--train", os.path.join(prepared, "train"),
                 "--valid", os.path.join(prepared, "valid"), "--out", second, "--no-progress",
                 "--set", "model.shape_dim=2", "--set", "train.seed=2"]) == 0
    outputs = {}
    for name, members in (("alone", [trained]), ("ensemble", [trained, "--ensemble", second])):
        out = str(tmp_path / f"{name}.txt")
        assert main(["generate", "--model", *members, "--format", "compression", "--split", "test",
                     "--input", os.path.join(FIXTURES, "valid.tsv"), "--output", out]) in (0, 1)
        with open(out, encoding="utf-8") as handle:
            outputs[name] = handle.read().splitlines()
    assert outputs["ensemble"] != outputs["alone"], "the second member changes no output: this test could not fail"
    base = str(tmp_path / "serving")
    assert main(["export", "--model", trained, "--ensemble", second, "--serving-base", base,
                 "--model-name", "compress"]) == 0
    signatures = tf.saved_model.load(os.path.join(base, "compress", "1")).signatures
    assert {"serving_default", "compress"} <= set(signatures)
    sources = _sources("valid.tsv")
    result = signatures["compress"](sentences=tf.constant(sources))
    assert [t.decode("utf-8") for t in result["text"].numpy()] == outputs["ensemble"][:len(sources)]


@pytest.mark.slow
def test_evaluate_reports_rouge_token_f1_and_compression_ratio(trained, capsys):
    from tablegen_cli.main import main

    capsys.readouterr()
    # exit 1 only reports dead-lettered rows (not deletions); the scores are printed either way
    assert main(["evaluate", "--model", trained, "--format", "compression", "--split", "test",
                 "--input", os.path.join(FIXTURES, "valid.tsv")]) in (0, 1)
    out = capsys.readouterr().out
    scores = json.loads(out[out.index("{"):])
    for name in ("rouge1_f", "rouge2_f", "rougeL_f", "token_f1", "compression_ratio", "reference_compression_ratio"):
        assert 0.0 <= scores[name] <= 1.5, name
    assert 0 < scores["inputs"] <= len(_sources("valid.tsv"))
