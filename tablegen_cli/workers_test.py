"""The `tablegen train --workers N` launcher's pieces (the slow end-to-end test is
tests/multi_worker_training_test.py)."""

import json
import sys

from tablegen_cli import workers


def test_each_worker_gets_the_cluster_and_its_index_on_loopback():
    ports = workers.free_loopback_ports(3)
    assert len(set(ports)) == 3
    configs = [json.loads(workers.tf_config(ports, index)) for index in range(3)]
    assert all(c["cluster"]["worker"] == [f"127.0.0.1:{p}" for p in ports] for c in configs)
    assert [workers.tf_config_worker({"TF_CONFIG": json.dumps(c)}) for c in configs] == [0, 1, 2]


def test_a_single_worker_or_no_tf_config_is_not_a_multi_worker_run():
    assert workers.tf_config_worker({}) is None
    assert workers.tf_config_worker({"TF_CONFIG": workers.tf_config([1234], 0)}) is None
    assert workers.tf_config_worker({"TF_CONFIG": "not json"}) is None
    chief = {"cluster": {"chief": ["h:1"], "worker": ["h:2"]}, "task": {"type": "worker", "index": 0}}
    assert workers.tf_config_worker({"TF_CONFIG": json.dumps(chief)}) == 1  # a named chief is worker 0


def test_workers_run_the_same_command_without_workers_as_multi_worker_mirrored():
    argv = ["train", "--config", "e2e", "--workers", "2", "--out", "o", "--workers=2"]
    chief, other = workers.worker_argv(argv, 0), workers.worker_argv(argv, 1)
    assert chief[:3] == [sys.executable, "-m", "tablegen_cli.main"]
    assert chief[3:] == ["train", "--config", "e2e", "--out", "o", "--set", "train.strategy=multi_worker_mirrored"]
    assert other == chief + ["--no-progress"]


def test_a_worker_stopped_by_sigterm_is_described_as_such():
    assert workers._describe_exit(143) == "was stopped by SIGTERM"  # tablegen's clean exit on SIGTERM
    assert workers._describe_exit(-9) == "was killed by SIGKILL"
    assert workers._describe_exit(1) == "exited with code 1"
