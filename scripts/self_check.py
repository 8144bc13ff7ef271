#!/usr/bin/env python3
"""Post-install smoke test of the tablegen stack (run by scripts/setup.sh).

Imports every top-level library we depend on and exercises the two native
extensions that need the glibc workaround on older hosts (ml-metadata's
SQLite store and TFDV's C++ statistics/validation), so a broken patched wheel
fails here rather than in the middle of a pipeline. Prints "self-check OK".
"""
from __future__ import annotations

import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep TF's C++ start-up noise out of the log

T0 = time.monotonic()


def step(msg: str) -> None:
    print(f"  [{time.monotonic() - T0:5.1f}s] {msg}", flush=True)


def check_imports() -> None:
    import keras  # Keras 3 first, explicitly: never rely on tf.keras

    assert keras.__version__.startswith("3."), f"expected Keras 3, got {keras.__version__}"
    import tensorflow as tf
    import tensorflow_text as tf_text

    step(f"tensorflow {tf.__version__}, keras {keras.__version__}, tensorflow_text {tf_text.__version__}")
    tokens = tf_text.WhitespaceTokenizer().tokenize(["a small table"])  # TF Text ops registered
    assert tokens.to_list() == [[b"a", b"small", b"table"]], tokens

    import apache_beam
    import tfx
    import tfx.v1  # noqa: F401  (also imports tensorflow_transform, tfx_bsl)

    step(f"apache_beam {apache_beam.__version__}, tfx {tfx.__version__}")

    import grpc
    import google.protobuf
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc  # noqa: F401

    step(f"grpc {grpc.__version__}, protobuf {google.protobuf.__version__}, tensorflow_serving.apis")

    import nltk
    import sacrebleu
    from rouge_score import rouge_scorer

    bleu = sacrebleu.corpus_bleu(["the cat sat on the mat"], [["the cat sat on the mat"]]).score
    rouge = rouge_scorer.RougeScorer(["rougeL"]).score("a b c", "a b c")["rougeL"].fmeasure
    assert abs(bleu - 100.0) < 1e-6 and abs(rouge - 1.0) < 1e-6, (bleu, rouge)
    step(f"sacrebleu {sacrebleu.__version__}, rouge_score, nltk {nltk.__version__}")


def check_mlmd(tmp: str) -> None:
    import ml_metadata
    from ml_metadata.metadata_store import metadata_store
    from ml_metadata.proto import metadata_store_pb2

    config = metadata_store_pb2.ConnectionConfig()
    config.sqlite.filename_uri = os.path.join(tmp, "mlmd.sqlite")
    config.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READWRITE_OPENCREATE
    store = metadata_store.MetadataStore(config)

    atype = metadata_store_pb2.ArtifactType(name="SelfCheckExamples")
    atype.properties["split"] = metadata_store_pb2.STRING
    type_id = store.put_artifact_type(atype)
    got = store.get_artifact_type("SelfCheckExamples")
    assert got.id == type_id and "split" in got.properties, got

    artifact = metadata_store_pb2.Artifact(type_id=type_id, uri=os.path.join(tmp, "examples"))
    artifact.properties["split"].string_value = "train"
    [artifact_id] = store.put_artifacts([artifact])
    [back] = store.get_artifacts_by_id([artifact_id])
    assert back.properties["split"].string_value == "train", back
    step(f"ml_metadata {ml_metadata.__version__}: SQLite store, artifact type + artifact round trip")


def check_tfdv() -> None:
    import pandas as pd
    import tensorflow_data_validation as tfdv

    df = pd.DataFrame({"n_rows": [1, 2, 3, 4], "team": ["a", "b", "a", "c"], "score": [0.5, 1.5, 2.0, 3.5]})
    stats = tfdv.generate_statistics_from_dataframe(df)
    schema = tfdv.infer_schema(stats)  # C++ (pywrap) schema inference
    assert {f.name for f in schema.feature} == {"n_rows", "team", "score"}, schema
    anomalies = tfdv.validate_statistics(stats, schema)  # C++ (pywrap) validation
    assert not anomalies.anomaly_info, anomalies

    bad = tfdv.generate_statistics_from_dataframe(pd.DataFrame({"n_rows": [1], "team": ["zzz"], "score": [1.0]}))
    anomalies = tfdv.validate_statistics(bad, schema)
    assert "team" in anomalies.anomaly_info, anomalies  # unseen category is flagged
    assert "tensorflow_data_validation.pywrap.tensorflow_data_validation_extension" in sys.modules
    step(f"tensorflow_data_validation {tfdv.__version__}: statistics, infer_schema, validate_statistics")


def main() -> int:
    print(f"self-check: python {sys.version.split()[0]} at {sys.executable}", flush=True)
    check_imports()
    with tempfile.TemporaryDirectory(prefix="tablegen-selfcheck-") as tmp:
        check_mlmd(tmp)
    check_tfdv()
    print(f"self-check OK ({time.monotonic() - T0:.1f}s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
