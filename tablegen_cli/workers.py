"""`tablegen train --workers N`: N training processes on this host, one
MultiWorkerMirroredStrategy worker each, talking over loopback ports.

Each worker is `tablegen train` itself with the same arguments, TF_CONFIG naming the
cluster (127.0.0.1 ports picked free at launch) and its index, and
train.strategy=multi_worker_mirrored. Worker 0 is the chief: its console is ours
(progress, report) and it alone writes the run directory; worker K keeps its full log in
OUT/logs/worker-K.log. When a worker dies (a crash, SIGKILL, the OOM killer) the others
would wait in their next collective: we stop them all and exit non-zero; the same command
then resumes from the chief's last checkpoint. Ctrl-C stops every worker too.

Standard library only: the launcher itself never imports TensorFlow.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from typing import List, Optional

LOOPBACK = "127.0.0.1"
POLL_SECONDS = 0.2
# SIGTERM, then SIGKILL: a worker blocked in a collective of MultiWorkerMirroredStrategy
# cannot act on SIGTERM (measured: 10 s and counting; Python's handler runs only between
# ops), and training is crash-safe under SIGKILL.
STOP_GRACE_SECONDS = 2.0
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def worker_log(out: str, index: int) -> str:
    return os.path.join(out, "logs", f"worker-{index}.log")


def tf_config_worker(environ=os.environ) -> Optional[int]:
    """This process's worker index when TF_CONFIG names a multi-worker cluster, else None."""
    try:
        config = json.loads(environ.get("TF_CONFIG") or "{}")
    except ValueError:
        return None
    cluster = config.get("cluster") or {}
    if sum(len(cluster.get(kind) or []) for kind in ("chief", "worker")) < 2:
        return None
    task = config.get("task") or {}
    offset = 1 if task.get("type") == "worker" and cluster.get("chief") else 0  # a named chief is worker 0
    return int(task.get("index", 0)) + offset


def free_loopback_ports(count: int) -> List[int]:
    """Ports free on 127.0.0.1 now (held open together, so they are distinct)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(count)]
        for sock in sockets:
            sock.bind((LOOPBACK, 0))
        return [sock.getsockname()[1] for sock in sockets]


def tf_config(ports: List[int], index: int) -> str:
    return json.dumps({"cluster": {"worker": [f"{LOOPBACK}:{port}" for port in ports]},
                       "task": {"type": "worker", "index": index}})


def worker_argv(argv: List[str], index: int) -> List[str]:
    """`tablegen train` with the user's arguments minus --workers, as worker ``index``."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--workers":
            skip = True
        elif not arg.startswith("--workers="):
            kept.append(arg)
    extra = ["--set", "train.strategy=multi_worker_mirrored"] + ([] if index == 0 else ["--no-progress"])
    return [sys.executable, "-m", "tablegen_cli.main"] + kept + extra


def _describe_exit(code: int) -> str:
    if code == 128 + signal.SIGTERM:  # tablegen_cli.main's clean exit on SIGTERM
        return "was stopped by SIGTERM"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _stop(processes: List[subprocess.Popen]) -> None:
    """SIGTERM every live worker's process group, then SIGKILL what is left after the grace."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for process in processes:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, sig)
        deadline = time.time() + (STOP_GRACE_SECONDS if sig == signal.SIGTERM else 30.0)
        while time.time() < deadline and any(p.poll() is None for p in processes):
            time.sleep(POLL_SECONDS)
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=1.0)


class _Stopped(Exception):
    """SIGINT (Ctrl-C), SIGTERM or SIGHUP reached the launcher."""


def _raise_stopped(signum, _frame):
    raise _Stopped(signal.Signals(signum).name)


def run(argv: List[str], workers: int, out: str) -> int:
    """Starts ``workers`` workers, waits for them; 0 when all finished, else 1."""
    # Explicit handlers: a launcher started in the background ignores SIGINT by default,
    # and SIGTERM's default would leave the workers running without us.
    previous = {sig: signal.signal(sig, _raise_stopped) for sig in STOP_SIGNALS}
    try:
        return _launch_and_wait(argv, workers, out)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _launch_and_wait(argv: List[str], workers: int, out: str) -> int:
    os.makedirs(os.path.join(out, "logs"), exist_ok=True)
    ports = free_loopback_ports(workers)
    processes: List[subprocess.Popen] = []
    logs = []
    say = lambda text: print(f"tablegen train: {text}", file=sys.stderr, flush=True)  # noqa: E731
    try:
        for index in range(workers):
            env = {**os.environ, "TF_CONFIG": tf_config(ports, index)}
            if index == 0:  # the chief's console is ours
                output = None
            else:
                output = open(worker_log(out, index), "a", encoding="utf-8")  # noqa: SIM115 (closed below)
                logs.append(output)
            # A session of its own: Ctrl-C reaches us only, and stopping a worker stops its children.
            processes.append(subprocess.Popen(worker_argv(argv, index), env=env, stdout=output,
                                              stderr=subprocess.STDOUT if output else None, start_new_session=True))
        say(f"{workers} workers on {LOOPBACK} ports {', '.join(map(str, ports))}; worker 0 reports here, "
            f"the others log to {worker_log(out, 1).replace('-1.log', '-K.log')}")
        while True:
            codes = [process.poll() for process in processes]
            failed = [(index, code) for index, code in enumerate(codes) if code not in (None, 0)]
            if failed:
                index, code = failed[0]
                where = "above" if index == 0 else worker_log(out, index)
                say(f"error: worker {index} {_describe_exit(code)} (its log: {where}); stopping the other workers. "
                    f"Run the same command again to resume from the last checkpoint in {out}/checkpoints.")
                return 1
            if all(code == 0 for code in codes):
                return 0
            time.sleep(POLL_SECONDS)
    except (_Stopped, KeyboardInterrupt) as stop:
        say(f"interrupted ({stop or 'SIGINT'}): stopping the workers (the same command resumes from the last "
            f"checkpoint)")
        return 130
    finally:
        for sig in STOP_SIGNALS:  # a second Ctrl-C must not cut the stopping short
            signal.signal(sig, signal.SIG_IGN)
        _stop(processes)
        for handle in logs:
            handle.close()
