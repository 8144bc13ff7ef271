"""Benchmark: `tablegen prepare --format wikibio` throughput on >= 200,000 tables.

Builds a WikiBio-format corpus by repeating the shared subset, runs the real
Beam job in a subprocess (`tablegen prepare`), prints tables/s end to end
(process start to exit) and the peak resident memory of the largest process.

    .venv/bin/python benchmarks/prepare_throughput.py [--tables 200000]        # DirectRunner, 2 workers
    .venv/bin/python benchmarks/prepare_throughput.py --runner dask --workers 2

`--runner dask` starts a local dask.distributed cluster of N worker processes (1 thread
each, loopback), imports TensorFlow on its workers first (a long-lived cluster pays that
once; the time is printed apart), then runs `--runner=DaskRunner` against it.
`--kill-worker-after S` SIGKILLs one worker S seconds into the job and checks that the
output equals an undisturbed run's (examples as a multiset, dead letters, vocabularies,
stats).
"""

import argparse
import contextlib
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(ROOT, "..", "shared", "data", "wikibio", "train")


def build_input(directory: str, tables: int) -> int:
    with open(os.path.join(SHARED, "train.box")) as f:
        boxes = f.read().splitlines()
    with open(os.path.join(SHARED, "train.nb")) as f:
        counts = [int(x) for x in f.read().split()]
    with open(os.path.join(SHARED, "train.sent")) as f:
        sentences = f.read().splitlines()
    repeats = -(-tables // len(boxes))
    with open(os.path.join(directory, "bench.box"), "w") as box, open(
        os.path.join(directory, "bench.nb"), "w"
    ) as nb, open(os.path.join(directory, "bench.sent"), "w") as sent:
        for _ in range(repeats):
            box.write("\n".join(boxes) + "\n")
            nb.write("\n".join(map(str, counts)) + "\n")
            sent.write("\n".join(sentences) + "\n")
    return repeats * len(boxes)


def run_prepare(input_dir: str, output: str, beam_args) -> tuple:
    """Runs `tablegen prepare` in a subprocess; returns (seconds, its `read ...` summary line)."""
    command = [
        sys.executable, "-m", "tablegen_cli.main", "prepare", "--format", "wikibio",
        "--input", input_dir, "--output", output, "--split", "train",
    ] + list(beam_args)
    start = time.time()
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    seconds = time.time() - start
    if result.returncode != 0:
        sys.exit(f"prepare failed:\n{result.stderr[-3000:]}")
    summary = [line for line in result.stdout.splitlines() if line.startswith("read ")]
    return seconds, summary[-1] if summary else result.stdout[-500:]  # the last: earlier ones are progress


def _worker_peak_mb() -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM")) / 1024


def _warm_up() -> str:
    import tablegen_tf.tokenizer  # noqa: F401  (TensorFlow and tensorflow-text)

    return "ok"


@contextlib.contextmanager
def dask_cluster(workers: int, scratch: str):
    from dask.distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=workers, processes=True, threads_per_worker=1, host="127.0.0.1",
                           dashboard_address=None, local_directory=scratch)
    try:
        with Client(cluster.scheduler_address) as client:
            start = time.time()
            client.run(_warm_up)
            print(f"dask: {workers} worker processes at {cluster.scheduler_address}; "
                  f"TensorFlow imported on the workers in {time.time() - start:.1f} s (not in the figures below)")
            yield client, cluster.scheduler_address
    finally:
        cluster.close()


def _kill_one_worker_later(client, seconds: float, killed: list) -> None:
    pids = client.run(os.getpid)
    time.sleep(seconds)
    address = sorted(pids)[0]
    os.kill(pids[address], signal.SIGKILL)
    killed.append((address, pids[address], time.strftime("%H:%M:%S")))


def task_stream(client):
    from dask.distributed import get_task_stream

    return get_task_stream(client=client)


def print_steps(task_records) -> None:
    """Worker seconds per Beam step (our runner names its ParDo tasks STEP#PARTITION-JOB):
    what bounds the job's time on more workers."""
    steps: dict = {}
    for record in task_records:
        if "#" not in str(record["key"]):
            continue
        seconds = sum(span["stop"] - span["start"] for span in record["startstops"] if span["action"] == "compute")
        step = str(record["key"]).split("#")[0]
        total, longest, count = steps.get(step, (0.0, 0.0, 0))
        steps[step] = (total + seconds, max(longest, seconds), count + 1)
    for step, (total, longest, count) in sorted(steps.items(), key=lambda item: -item[1][0])[:8]:
        print(f"  step {step}: {count} tasks, {total:.1f} worker-s in all, longest task {longest:.1f} s")


def compare_outputs(first: str, second: str) -> None:
    """Exits non-zero unless both prepare outputs hold the same records, dead letters, vocabularies and stats."""
    sys.path.insert(0, ROOT)
    from beam_jobs import prepared

    differing = prepared.differences(first, second)
    if differing:
        sys.exit(f"outputs differ in {', '.join(differing)}")
    a = prepared.outputs(first)
    print(f"outputs equal: {len(a['examples'])} examples (as a multiset), {len(a['dead_letters'])} dead letters, "
          f"{len(a['texts'])} vocabulary/stats files, counts {a['counts']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=200_000)
    parser.add_argument("--runner", choices=["direct", "dask"], default="direct")
    parser.add_argument("--workers", type=int, default=2, help="Dask worker processes (--runner dask)")
    parser.add_argument("--kill-worker-after", type=float, default=0.0, metavar="S",
                        help="--runner dask: SIGKILL one worker S seconds into the job, then compare with "
                        "an undisturbed run on the same cluster")
    parser.add_argument("beam_args", nargs="*", help="extra Beam options, e.g. --direct_running_mode=in_memory")
    args = parser.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cores)")
    with tempfile.TemporaryDirectory() as work:
        input_dir = os.path.join(work, "input")
        os.makedirs(input_dir)
        total = build_input(input_dir, args.tables)
        output = os.path.join(work, "out")
        with (dask_cluster(args.workers, os.path.join(work, "dask")) if args.runner == "dask"
              else contextlib.nullcontext((None, None))) as (client, address):
            beam_args = list(args.beam_args)
            if address:
                beam_args += ["--runner=DaskRunner", f"--dask_client_address={address}"]
            killed: list = []
            killer = None
            if args.kill_worker_after and client is not None:
                killer = threading.Thread(target=_kill_one_worker_later, args=(client, args.kill_worker_after, killed))
                killer.start()
            with (task_stream(client) if client is not None else contextlib.nullcontext()) as tasks:
                seconds, summary = run_prepare(input_dir, output, beam_args)
            if client is not None:
                print_steps(tasks.data)
            if killer:
                killer.join()
            workers_mb = max(client.run(_worker_peak_mb).values()) if client is not None else 0
            if killed:
                print(f"killed worker {killed[0][0]} (pid {killed[0][1]}) at {killed[0][2]}, "
                      f"{args.kill_worker_after:.0f} s into the job")
                undisturbed = os.path.join(work, "undisturbed")
                clean_seconds, clean_summary = run_prepare(input_dir, undisturbed, beam_args)
                print(f"undisturbed run: {clean_summary} in {clean_seconds:.1f} s")
                compare_outputs(output, undisturbed)
        peak_mb = max(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, workers_mb)
        print(f"tables: {total}")
        print(f"runner: {args.runner}" + (f", {args.workers} worker processes" if args.runner == "dask" else ""))
        print(f"job: {summary}")
        print(f"wall time: {seconds:.1f} s (end to end, including interpreter and TF start-up)")
        print(f"throughput: {total / seconds:.0f} tables/s (target >= 3000)")
        print(f"peak memory (largest process RSS): {peak_mb:.0f} MB")
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
