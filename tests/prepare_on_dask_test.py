"""`tablegen prepare --runner=DaskRunner` on a local dask.distributed cluster (2 worker
processes, loopback) writes what the DirectRunner writes, also when a worker is killed."""

import glob
import os
import shutil
import signal
import threading
import time

import psutil
import pytest

from beam_jobs import prepared
from tablegen_cli.main import main

pytestmark = pytest.mark.slow

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
DIRECT = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]


def _corrupted_wikibio(directory, copies: int = 1) -> str:
    """The WikiBio fixture `copies` times over, with a bad item and an empty table: dead letters."""
    source = os.path.join(FIXTURES, "wikibio", "train")
    os.makedirs(directory)
    for name in ("train.box", "train.nb", "train.sent"):
        with open(os.path.join(source, name)) as handle:
            lines = handle.read().splitlines()
        if name == "train.box":
            lines[1] = "this-item-has-no-colon\t" + lines[1]
            lines[3] = "\t".join(item.split(":")[0] + ":<none>" for item in lines[3].split("\t"))
        with open(os.path.join(directory, name), "w") as handle:
            handle.write("\n".join(lines * copies) + "\n")
    return directory


def _prepare(output, arguments, runner_args):
    code = main(["prepare", *arguments, "--output", str(output), *runner_args])
    assert code == 0, open(os.path.join(output, "logs", "prepare.log")).read()[-3000:]


def _assert_same(dask_dir, direct_dir):
    on_dask, on_direct = prepared.outputs(str(dask_dir)), prepared.outputs(str(direct_dir))
    assert on_direct["examples"] and on_dask["counts"]["written"] == len(on_direct["examples"])
    for key in ("examples", "dead_letters", "counts", "texts"):
        assert on_dask[key] == on_direct[key], key
    assert not glob.glob(os.path.join(dask_dir, "beam-temp-*"))  # nothing staged is left


def _kill_a_worker_mid_job(client, stop: threading.Event, killed: list) -> None:
    """SIGKILL the first worker that holds finished results while other tasks still wait."""
    pids = client.run(os.getpid)
    while not stop.is_set():
        states = client.run_on_scheduler(
            lambda dask_scheduler: [(str(ts.key), ts.state, [w.address for w in ts.who_has or ()])
                                    for ts in dask_scheduler.tasks.values()])
        unfinished = sum(1 for _, state, _ in states if state in ("waiting", "processing", "queued", "no-worker"))
        holders = {address for key, state, who in states if state == "memory" and "#" in key  # a Beam step's
                   for address in who}
        if unfinished and holders:
            address = sorted(holders)[0]
            os.kill(pids[address], signal.SIGKILL)
            killed.append(pids[address])
            return
        time.sleep(0.05)


def test_prepare_on_dask_equals_the_direct_runner_and_survives_a_killed_worker(tmp_path):
    from dask.distributed import Client, LocalCluster

    before = {p.pid for p in psutil.Process().children(recursive=True)}
    wikibio = _corrupted_wikibio(str(tmp_path / "wikibio"))
    cases = {
        "e2e-valid": ["--format", "e2e", "--input", os.path.join(FIXTURES, "e2e", "devset.csv"), "--split", "valid"],
        "wikibio-train": ["--format", "wikibio", "--input", wikibio, "--split", "train"],
        "e2e-selection": ["--format", "e2e", "--input", os.path.join(FIXTURES, "e2e", "devset.csv"),
                          "--split", "train", "--selection-fraction", "0.5", "--clean-slots"],
    }
    for name, arguments in cases.items():
        _prepare(tmp_path / "direct" / name / "train", arguments, DIRECT)

    cluster = LocalCluster(n_workers=2, processes=True, threads_per_worker=1, host="127.0.0.1",
                           dashboard_address=None, local_directory=str(tmp_path / "dask-scratch"))
    try:
        on_dask = ["--runner=DaskRunner", f"--dask_client_address={cluster.scheduler_address}"]
        for name, arguments in cases.items():
            _prepare(tmp_path / "dask" / name / "train", arguments, on_dask)
            _assert_same(tmp_path / "dask" / name / "train", tmp_path / "direct" / name / "train")
        _assert_same(tmp_path / "dask" / "e2e-selection" / "selection", tmp_path / "direct" / "e2e-selection" / "selection")

        # A worker dies while the job runs: Dask recomputes what it held; no record is lost or doubled.
        bigger = _corrupted_wikibio(str(tmp_path / "wikibio-x40"), copies=40)
        arguments = ["--format", "wikibio", "--input", bigger, "--split", "train"]
        _prepare(tmp_path / "direct" / "killed", arguments, DIRECT)
        stop, killed = threading.Event(), []
        with Client(cluster.scheduler_address) as client:
            killer = threading.Thread(target=_kill_a_worker_mid_job, args=(client, stop, killed))
            killer.start()
            try:
                _prepare(tmp_path / "dask" / "killed", arguments, on_dask)
            finally:
                stop.set()
                killer.join()
        assert killed, "the job ended before a worker could be killed"
        assert not psutil.pid_exists(killed[0]) or psutil.Process(killed[0]).status() == psutil.STATUS_ZOMBIE
        _assert_same(tmp_path / "dask" / "killed", tmp_path / "direct" / "killed")
    finally:
        cluster.close()
    deadline = time.time() + 20
    while time.time() < deadline and len(psutil.Process().children(recursive=True)) > len(before) + 1:
        time.sleep(0.2)
    left = [p.cmdline() for p in psutil.Process().children(recursive=True) if p.pid not in before]
    # multiprocessing's resource tracker: one per interpreter, started on first use, ends with it
    assert [c for c in left if "multiprocessing.resource_tracker" not in " ".join(c)] == []
    shutil.rmtree(tmp_path / "dask-scratch", ignore_errors=True)
