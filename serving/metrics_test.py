"""Prometheus metrics: TF Serving's names for requests, ours for batches, scraped from a server."""

import json
import urllib.request

import grpc
import pytest
import tensorflow as tf
from prometheus_client.parser import text_string_to_metric_families
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from serving import metrics, testing
from serving.defaults import METRICS_PATH
from serving.errors import invalid
from serving.metrics import Metrics
from serving.testing import MODEL


def samples(exposition: bytes) -> dict:
    """{(sample name, sorted label items): value} of a scrape."""
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(exposition.decode())
            for sample in family.samples}


def test_requests_are_counted_by_status_under_tf_servings_names():
    counted = Metrics(["m"], versions=lambda: {"m": 3})
    with counted.request("m", "predict", "GRPC"):
        pass
    with pytest.raises(Exception):
        with counted.request("m", "predict", "REST"):
            raise invalid("bad table")
    with pytest.raises(Exception):
        with counted.request("a name nobody serves", "predict", "GRPC"):
            raise invalid("no such model")
    text = counted.exposition().decode()
    # TF Serving's exact series name (prometheus_client would have made it *_total)
    assert ':tensorflow:serving:request_count{model_name="m",status="OK"} 1.0' in text
    found = samples(counted.exposition())
    assert found[(":tensorflow:serving:request_count", (("model_name", "m"), ("status", "INVALID_ARGUMENT")))] == 1
    assert found[(":tensorflow:serving:request_count",
                  (("model_name", metrics.UNKNOWN_MODEL), ("status", "INVALID_ARGUMENT")))] == 1
    grpc_count = (":tensorflow:serving:request_latency_count",
                  (("API", "predict"), ("entrypoint", "GRPC"), ("model_name", "m")))
    assert found[grpc_count] == 1
    assert found[("tablegen_serving_model_version", (("model_name", "m"),))] == 3
    assert "_created" not in text


def test_batches_are_recorded_by_rows_wait_and_run():
    counted = Metrics(["m"])
    on_batch = counted.batch_observer("m", "serving_default")
    on_batch(8, 0.004, 0.030)
    on_batch(3, 0.010, 0.020)
    found = samples(counted.exposition())
    labels = (("model_name", "m"), ("signature_name", "serving_default"))
    assert found[("tablegen_serving_batch_size_count", labels)] == 2
    assert found[("tablegen_serving_batch_size_sum", labels)] == 11
    assert found[("tablegen_serving_batch_size_bucket", (("le", "4.0"),) + labels)] == 1
    assert found[("tablegen_serving_batch_wait_seconds_sum", labels)] == pytest.approx(0.014)


def test_a_served_scrape_counts_grpc_and_rest_requests_and_merged_batches(running):
    with grpc.insecure_channel(f"127.0.0.1:{running.grpc_port}") as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        request = predict_pb2.PredictRequest()
        request.model_spec.name = MODEL
        request.inputs["tables"].CopyFrom(tf.make_tensor_proto(testing.sample_tables(2)))
        for _ in range(3):
            stub.Predict(request, timeout=10)
        request.inputs["tables"].CopyFrom(tf.make_tensor_proto(["not a table"]))
        with pytest.raises(grpc.RpcError):
            stub.Predict(request, timeout=10)
    url = f"http://127.0.0.1:{running.rest_port}"
    body = json.dumps({"instances": testing.sample_tables(1)}).encode()
    with urllib.request.urlopen(urllib.request.Request(f"{url}/v1/models/{MODEL}:predict", body), timeout=10):
        pass
    with urllib.request.urlopen(f"{url}{METRICS_PATH}", timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        found = samples(response.read())
    count = ":tensorflow:serving:request_count"
    assert found[(count, (("model_name", MODEL), ("status", "OK")))] == 4
    assert found[(count, (("model_name", MODEL), ("status", "INVALID_ARGUMENT")))] == 1
    latency = ":tensorflow:serving:request_latency_count"
    assert found[(latency, (("API", "predict"), ("entrypoint", "REST"), ("model_name", MODEL)))] == 1
    rows = found[("tablegen_serving_batch_size_sum", (("model_name", MODEL), ("signature_name", "serving_default")))]
    assert rows == 3 * 2 + 1  # every accepted row went through a batch (the bad one never reached it)
    assert found[("tablegen_serving_model_version", (("model_name", MODEL),))] == 1
