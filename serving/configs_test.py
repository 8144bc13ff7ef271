"""The TF Serving configs parse as TF Serving would read them, agree with each other,
and `tablegen serve` accepts them (models.config pointed at a stand-in SavedModel)."""

import argparse
import os
import re

import yaml
from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2

from serving import client, server, testing, xla_cache
from serving.testing import MODEL, serve_args

HERE = os.path.dirname(os.path.abspath(__file__))


def read(name):
    with open(os.path.join(HERE, name)) as f:
        return f.read()


def test_models_config_is_a_model_server_config():
    config = text_format.Parse(read("models.config"), model_server_config_pb2.ModelServerConfig())
    (model,) = config.model_config_list.config
    assert (model.name, model.base_path, model.model_platform) == (
        MODEL, f"/models/{MODEL}", "tensorflow")


def test_docker_compose_runs_tf_serving_with_these_configs():
    compose = yaml.safe_load(read("docker-compose.yml"))
    service = compose["services"]["tf-serving"]
    assert service["image"].split(":")[0].endswith("tensorflow/serving")
    flags = dict(flag.lstrip("-").split("=", 1) for flag in service["command"])
    assert flags["port"] == "8500" and flags["rest_api_port"] == "8501"
    assert flags["enable_batching"] == "true"
    mounts = {target: source for source, target, _ in (v.rsplit(":", 2) for v in service["volumes"])}
    assert mounts[flags["model_config_file"]] == "./models.config"
    assert mounts[flags["batching_parameters_file"]] == "./batching_parameters.txt"
    assert mounts[flags["monitoring_config_file"]] == "./monitoring.config"
    assert "/models" in mounts and {"8500:8500", "8501:8501"} <= set(service["ports"])
    # the one-table beam search is jit_compile'd: TF Serving needs XLA:CPU on, and keeps
    # compiled computations where `tablegen serve` would (serving/xla_cache.py)
    assert flags["xla_cpu_compilation_enabled"] == "true"
    cache = service["environment"]["TF_XLA_FLAGS"].split(f"{xla_cache.FLAG}=")[1].split()[0]
    assert mounts[cache] == "xla-cache" and "xla-cache" in compose["volumes"]


def test_serve_accepts_models_config_and_batching_file(tmp_path, exports):
    testing.push_version(exports["v1"], str(tmp_path / MODEL), 1)
    config = tmp_path / "models.config"
    config.write_text(read("models.config").replace("/models/", f"{tmp_path}/"))
    args = serve_args("unused", "--model-config-file", str(config),
                      "--batching-parameters-file", os.path.join(HERE, "batching_parameters.txt"))
    running = server.build_server(args).start()
    try:
        tables = testing.sample_tables(2)
        assert client.generate_remote(f"127.0.0.1:{running.grpc_port}", MODEL, tables) == [
            testing.expected_text(t, "v1") for t in tables]
        assert running.predictor.batching.batch_timeout_micros == 2000
    finally:
        running.stop()


def test_cli_wiring():
    parser = argparse.ArgumentParser(prog="tablegen")
    server.add_serve_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["serve", "--model-base-path", "runs/e2e/serving",
                              "--model-name", "e2e", "--port", "9000", "--rest-port", "9001",
                              "--max-concurrency", "4", "--no-enable-batching"])
    assert (args.port, args.rest_port, args.max_concurrency, args.enable_batching) == (
        9000, 9001, 4, False)
    assert callable(args.handler) and server.batching_options(args) is None


def test_monitoring_config_turns_on_prometheus_at_our_metrics_path():
    from serving.defaults import METRICS_PATH

    text = read("monitoring.config")
    assert re.search(r"prometheus_config\s*\{[^}]*enable:\s*true", text)
    assert re.search(r'path:\s*"([^"]+)"', text).group(1) == METRICS_PATH
