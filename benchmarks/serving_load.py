"""Benchmark: `tablegen serve` latency and throughput vs. calling the SavedModel in-process.

Starts the server in a subprocess (as in production), then at each concurrency
level sends single-table Predict requests over gRPC from that many client
threads, and makes the same calls in-process on the loaded SavedModel, one
table per call and (the batched figure) as many tables per call as the highest
concurrency. Prints p50/p99 latency and throughput per level with the machine's
1-minute load average (gRPC levels: also the cores the server and the clients used, and the
batches the server merged, read from its metrics endpoint), and checks the targets: server overhead at concurrency 1
<= 1.2x in-process; gRPC throughput at the highest concurrency >= 3x concurrency
1 and >= 0.9x the in-process batched throughput (tables/s).

With --swap, then pushes a new version while that many clients keep sending (a
copy of the served version, published as TFX Pusher does: copy beside, rename
into place) and reports the seconds from the rename to the first answer from
the new version (target <= 10 s) and p50/p99 latency of the requests sent in
the swap window (rename until --swap-tail seconds after that first answer)
against the steady state before the push (target: p99 <= 2x). The server warms up
signatures other than serving_default in the background after a version takes traffic
(`tablegen serve --background-warmup`): the levels start once version 1's has ended (up to
--background-limit seconds), and the swap's clients keep going --background-seconds
more, reported as the "background" window (version 2's background warm-up running).

    .venv/bin/python benchmarks/serving_load.py                     # runs/e2e/serving/tablegen
    .venv/bin/python benchmarks/serving_load.py --demo              # stand-in decoder model
    .venv/bin/python benchmarks/serving_load.py --model-base-path B --model-name N \
        --tables-file tables.jsonl --server-args="--no-enable-batching"
    .venv/bin/python benchmarks/serving_load.py --model-base-path B --swap   # + a version swap
    .venv/bin/python benchmarks/serving_load.py --model-base-path B --rounds 3  # median of 3, alternated
"""

import argparse
import gc
import json
import os
import queue
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TF's C++ log lines off, as `tablegen` does; 0 shows them

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-base-path", default=os.path.join(ROOT, "runs", "e2e", "serving"))
    parser.add_argument("--model-name", default="tablegen")
    parser.add_argument("--tables-file", help="JSONL with a 'table' per line (default: samples)")
    parser.add_argument("--demo", nargs="?", const="decoder", choices=["decoder", "tiny"],
                        help="serve a stand-in SavedModel (serving/testing.py) instead: 'decoder' "
                        "(default; ~25 ms per table) or 'tiny' (string ops only: shows the "
                        "fixed per-request cost)")
    parser.add_argument("--concurrency", default="1,4,16")
    parser.add_argument("--seconds", type=float, default=5.0, help="measurement time per level")
    parser.add_argument("--rounds", type=int, default=1,
                        help="measure in-process and gRPC this many times, alternating, and judge "
                        "the targets on the median ratio (this host drifts 15-20 %% in minutes)")
    parser.add_argument("--server-args", default="", help="extra `tablegen serve` flags")
    parser.add_argument("--swap", action="store_true",
                        help="also measure a version push under load (the served model directory "
                        "is copied to a scratch base first, so BASE is not written)")
    parser.add_argument("--server-log", help="write the server's log (load, warm-up, swap times) here")
    parser.add_argument("--swap-tail", type=float, default=3.0,
                        help="seconds after the new version's first answer still in the swap window")
    parser.add_argument("--background-limit", type=float, default=900.0,
                        help="longest wait for version 1's background warm-up to end")
    parser.add_argument("--background-seconds", type=float, default=30.0,
                        help="seconds measured after the swap window (the new version's "
                        "background warm-up running)")
    parser.add_argument("--swap-timeline", metavar="CSV",
                        help="write every swap-phase request here (wall-clock send time, "
                        "latency ms, version), to line up slow requests with the server log")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    return args


def load_average() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def load_tables(path: str) -> List[str]:
    from serving import testing

    if not path:
        return testing.sample_tables(64)
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [json.dumps({"table": row["table"]}) for row in rows]


def build_demo(directory: str, name: str, kind: str) -> str:
    """'decoder': 60 steps of a 256-wide recurrence plus an 8192-way output
    projection per row (~25 ms for one table on 2 cores), shaped like the real
    decoder: memory-bound at batch 1, so batching pays."""
    from serving import testing

    size = dict(decoder_steps=60, width=256, vocab=8192) if kind == "decoder" else {}
    testing.save_fake_model(os.path.join(directory, name, "1"), **size)
    return directory


class Server(NamedTuple):
    process: subprocess.Popen
    address: str                 # gRPC HOST:PORT
    rest_address: Optional[str]  # REST HOST:PORT (the metrics endpoint), None if not served


def start_server(base: str, name: str, extra: str, log_path: str = "", root: str = ROOT) -> Server:
    """`python -m serving.server` of the code tree `root` (another one: benchmarks/serving_ab.py),
    with a REST port unless `extra` names one: its metrics show each level's batches."""
    rest = [] if "--rest-port" in extra else ["--rest-port", "0"]
    command = [sys.executable, "-m", "serving.server", "--model-base-path", base,
               "--model-name", name, "--host", "127.0.0.1", "--port", "0", *rest, *shlex.split(extra)]
    process = subprocess.Popen(command, cwd=root, env={**os.environ, "PYTHONPATH": root},
                               stdout=subprocess.PIPE, text=True,
                               stderr=open(log_path, "w") if log_path else subprocess.DEVNULL)
    lines: "queue.Queue[str]" = queue.Queue()
    threading.Thread(target=lambda: [lines.put(l) for l in process.stdout], daemon=True).start()
    deadline = time.time() + 900  # a real model loads in minutes on a busy 2-core host
    while time.time() < deadline and process.poll() is None:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            continue
        if line.startswith("tablegen serve: ready"):
            rest_port = re.search(r" rest=127\.0\.0\.1:(\d+)", line)
            return Server(process, "127.0.0.1:" + line.split("grpc=127.0.0.1:")[1].split()[0],
                          "127.0.0.1:" + rest_port.group(1) if rest_port else None)
    process.kill()
    sys.exit("server did not start; run `python -m serving.server ...` by hand to see why")


def wait_for_background_warmup(log_path: str, version: int, limit: float) -> bool:
    """Until the server log says `version`'s background warm-up ended (or it had none)."""
    deadline = time.time() + limit
    while time.time() < deadline:
        with open(log_path, errors="replace") as handle:
            text = handle.read()
        lines = [line for line in text.splitlines() if re.search(rf"version {version}\b", line)]
        if any("background warm-up" in line for line in lines):
            return True
        if any("warmed up" in line and "in the background" not in line for line in lines):
            return True  # nothing was left for the background
        time.sleep(0.5)
    return False


def measure(call: Callable[[str], None], tables: List[str], concurrency: int,
            seconds: float) -> Dict[str, float]:
    """Closed loop: each thread sends its next request when the previous returns."""
    latencies: List[float] = []
    stop_at = time.perf_counter() + seconds

    def worker(offset: int) -> None:
        index = offset
        while time.perf_counter() < stop_at:
            started = time.perf_counter()
            call(tables[index % len(tables)])
            latencies.append(time.perf_counter() - started)
            index += concurrency

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(concurrency)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    ms = np.array(latencies) * 1000
    return {"requests": len(ms), "p50": np.percentile(ms, 50), "p99": np.percentile(ms, 99),
            "rps": len(ms) / elapsed}


def in_process_signature(base: str, name: str):
    from serving.model_manager import ModelManager

    manager = ModelManager(name, os.path.join(base, name))
    manager.poll_once(initial=True)  # the server's own loader (custom ops, latest version)
    # The other signatures load and warm up on a background thread, as in the server; the
    # levels start once it ended, as the gRPC ones (before 2026-11-27 it ran beside them).
    manager.wait_for_warm_up()
    with manager.lease() as loaded:
        return loaded.signature("serving_default")


def in_process_call(signature) -> Callable[[str], None]:
    import tensorflow as tf

    return lambda table: signature.run({"tables": tf.constant([table])})


def in_process_batched(signature, tables: List[str], batch: int, seconds: float) -> Dict[str, float]:
    """One thread, `batch` tables per call: the throughput batching could reach at best."""
    import tensorflow as tf

    batches = [tables[i:i + batch] for i in range(0, len(tables) - batch + 1, batch)] or [tables]
    for rows in batches:  # warm up every batch: each record bucket is a new shape
        signature.run({"tables": tf.constant(rows)})
    rows, calls, started = 0, 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        rows += len(batches[calls % len(batches)])
        signature.run({"tables": tf.constant(batches[calls % len(batches)])})
        calls += 1
    rps = rows / (time.perf_counter() - started)
    print(f"{'in-batched':<11} {batch:>5} {calls:>9} {'':>8} {'':>8} {rps:>8.1f} {load_average():>5}"
          "  (tables/s, one call per batch)", flush=True)
    return {"rps": rps}


def grpc_call(address: str, name: str) -> Callable[[str], None]:
    from serving.client import RemoteModel

    local = threading.local()  # one channel per client thread, like separate clients

    def call(table: str) -> None:
        if not hasattr(local, "model"):
            local.model = RemoteModel(address, name, retries=0)
        local.model.generate([table])

    return call


def cpu_seconds(pid: int) -> Optional[float]:
    """User + system CPU seconds a process has used so far (Linux /proc; None elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()  # after the command's name
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def batch_totals(rest_address: Optional[str], name: str) -> Optional[Tuple[float, float]]:
    """(batches, rows) merged so far for `name`'s serving_default, from the server's metrics
    (serving/metrics.py); None without a REST port or with a server that has no metrics."""
    from serving.defaults import METRICS_PATH

    if not rest_address:
        return None
    try:
        with urllib.request.urlopen(f"http://{rest_address}{METRICS_PATH}", timeout=5) as reply:
            text = reply.read().decode()
    except OSError:
        return None
    return parse_batch_totals(text, name)


def parse_batch_totals(text: str, name: str) -> Tuple[float, float]:
    from prometheus_client.parser import text_string_to_metric_families

    labels = {"model_name": name, "signature_name": "serving_default"}
    totals = {sample.name: sample.value for family in text_string_to_metric_families(text)
              if family.name == "tablegen_serving_batch_size" for sample in family.samples
              if sample.labels == labels}
    return totals.get("tablegen_serving_batch_size_count", 0.0), totals.get("tablegen_serving_batch_size_sum", 0.0)


def batch_fill(before: Optional[Tuple[float, float]], after: Optional[Tuple[float, float]]) -> str:
    """The batches merged between two batch_totals, and their mean rows."""
    if before is None or after is None or after[0] == before[0]:
        return ""
    batches = after[0] - before[0]
    return f"  (batches: {batches:.0f}, mean {(after[1] - before[1]) / batches:.2f} rows)"


def run_levels(label: str, call, tables, levels, seconds, warm: bool = True,
               server_pid: Optional[int] = None,
               batches: Callable[[], Optional[Tuple[float, float]]] = lambda: None) -> Dict[int, Dict[str, float]]:
    """With server_pid, each level also prints the cores the server and this process (the
    clients) used: on one machine the clients' gRPC work is CPU the in-process figures never pay.
    `batches() -> batch_totals(...)` adds the batches the server merged and their mean rows."""
    for table in tables if warm else ():
        # Warm up on every table: the first calls optimise the graph, and a one-table
        # request's XLA search compiles once per record bucket (serving_io.RECORD_BUCKET),
        # which a few tables do not cover (before 2026-11-27 only 4 were sent, and the
        # compilations of the others were measured as steady-state latency).
        call(table)
    results = {}
    for level in levels:
        before, merged = cpu_snapshot(server_pid), batches()
        results[level] = measure(call, tables, level, seconds)
        r = results[level]
        print(f"{label:<11} {level:>5} {r['requests']:>9} {r['p50']:>8.2f} {r['p99']:>8.2f} "
              f"{r['rps']:>8.1f} {load_average():>5}{cores(before, cpu_snapshot(server_pid))}"
              f"{batch_fill(merged, batches())}", flush=True)
    return results


def cpu_snapshot(server_pid: Optional[int]):
    """(wall seconds, the server's CPU seconds or None, this process's CPU seconds)."""
    return (time.perf_counter(), cpu_seconds(server_pid) if server_pid else None,
            time.process_time())


def cores(before, after) -> str:
    """The cores the server and this process (the clients) used between two snapshots."""
    (started, server_before, clients_before), (ended, server_after, clients_after) = before, after
    if server_before is None or server_after is None:
        return ""
    elapsed = ended - started
    return (f"  (cores: server {(server_after - server_before) / elapsed:.2f}, "
            f"clients {(clients_after - clients_before) / elapsed:.2f})")


def main() -> None:
    args = parse_args()
    # A `kill` unwinds like Ctrl-C: the server subprocess is stopped and the scratch directory
    # (the swap's copy of the model) removed, instead of both being left behind.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    levels = [int(x) for x in args.concurrency.split(",")]
    with tempfile.TemporaryDirectory() as scratch:
        base = build_demo(scratch, args.model_name, args.demo) if args.demo else args.model_base_path
        if not os.path.isdir(os.path.join(base, args.model_name)):
            sys.exit(f"no model at {base}/{args.model_name}/<version>/; export one or use --demo")
        tables = load_tables(args.tables_file)
        print(f"model {base}/{args.model_name}, {len(tables)} tables, {args.seconds:.0f}s per level"
              + (f", {args.rounds} rounds" if args.rounds > 1 else ""))
        print(f"{'mode':<11} {'conc':>5} {'requests':>9} {'p50 ms':>8} {'p99 ms':>8} {'req/s':>8} "
              f"{'load':>5}")
        signature = in_process_signature(base, args.model_name)
        local = run_levels("in-process", in_process_call(signature), tables, levels, args.seconds)
        batched = in_process_batched(signature, tables, levels[-1], args.seconds)
        if args.rounds == 1:
            del signature  # frees its memory before the server loads; later rounds need it
        # The clients live in this process beside TensorFlow: their own full collections
        # would walk its ~440,000 module objects holding the GIL, stalling every client
        # thread, and that stall would be counted as the server's latency (c16 p99 247-337
        # ms against 91-116 ms with it frozen, the server unchanged). As the server does.
        gc.collect()
        gc.freeze()
        if args.swap:  # push into a scratch copy, never into the caller's BASE
            shutil.copytree(os.path.join(base, args.model_name), os.path.join(scratch, "swap", args.model_name))
            base = os.path.join(scratch, "swap")
        server_log = args.server_log or os.path.join(scratch, "server.log")
        process, address, rest_address = start_server(base, args.model_name, args.server_args, server_log)
        try:
            wait_for_background_warmup(server_log, served_version(base, args.model_name),
                                       args.background_limit)
            call = grpc_call(address, args.model_name)
            batches = lambda: batch_totals(rest_address, args.model_name)  # noqa: E731
            rounds = [(local, run_levels("grpc", call, tables, levels, args.seconds,
                                         server_pid=process.pid, batches=batches), batched)]
            for _ in range(args.rounds - 1):  # alternate, so the host's drift hits both sides
                local = run_levels("in-process", in_process_call(signature), tables, levels,
                                   args.seconds, warm=False)
                batched = in_process_batched(signature, tables, levels[-1], args.seconds)
                rounds.append((local, run_levels("grpc", call, tables, levels, args.seconds,
                                                 warm=False, server_pid=process.pid, batches=batches),
                               batched))
            swap = measure_swap(address, args.model_name, os.path.join(base, args.model_name),
                                tables, levels[-1], args.seconds, args.swap_tail,
                                args.background_seconds) if args.swap else None
        finally:
            process.terminate()
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:  # still loading a version: it cannot stop sooner
                process.kill()
                process.wait()
    report(rounds, levels)
    if swap:
        report_swap(swap)
        if args.swap_timeline:
            write_timeline(args.swap_timeline, swap)


def served_version(base: str, name: str) -> int:
    return max(int(v) for v in os.listdir(os.path.join(base, name)) if v.isdigit())


def ratios(local, remote, batched, levels) -> Dict[str, float]:
    first, last = levels[0], levels[-1]
    return {"overhead": remote[first]["p50"] / local[first]["p50"],
            "scaling": remote[last]["rps"] / remote[first]["rps"],
            "bound": batched["rps"] / local[first]["rps"],
            "versus_batched": remote[last]["rps"] / batched["rps"]}


def report(rounds, levels) -> None:
    """The targets, from the median over rounds (each round's ratios measured side by side)."""
    first, last = levels[0], levels[-1]
    per_round = [ratios(*measured, levels) for measured in rounds]
    values = {key: [r[key] for r in per_round] for key in per_round[0]}

    def figure(key: str) -> float:
        return float(np.median(values[key]))

    def spread(key: str) -> str:
        low, high, count = min(values[key]), max(values[key]), len(values[key])
        return f" (median of {count} rounds, {low:.2f}-{high:.2f})" if count > 1 else ""

    overhead, scaling, versus_batched = figure("overhead"), figure("scaling"), figure("versus_batched")
    print(f"server overhead at concurrency {first}: {overhead:.2f}x in-process p50{spread('overhead')} "
          f"(target <= 1.2x): {'met' if overhead <= 1.2 else 'MISSED'}")
    print(f"gRPC throughput at concurrency {last}: {scaling:.2f}x concurrency {first}{spread('scaling')} "
          f"(target >= 3x): {'met' if scaling >= 3 else 'MISSED'}; the bound in-process, batches "
          f"of {last} / one table per call: {figure('bound'):.2f}x{spread('bound')}")
    print(f"gRPC throughput at concurrency {last}: {versus_batched:.2f}x in-process batches of "
          f"{last}{spread('versus_batched')} (target >= 0.9x): "
          f"{'met' if versus_batched >= 0.9 else 'MISSED'}")


def measure_swap(address: str, name: str, model_dir: str, tables: List[str], clients: int,
                 steady_seconds: float, tail_seconds: float, background_seconds: float) -> Dict[str, float]:
    """`clients` closed-loop clients; after steady_seconds a new version is published;
    they stop tail_seconds + background_seconds after its first answer."""
    from serving.client import RemoteModel

    events: List[tuple] = []  # (sent, answered, version), perf_counter seconds
    clock_offset = time.time() - time.perf_counter()  # perf_counter -> wall clock (server log)
    stop = threading.Event()

    def worker(offset: int) -> None:
        model, index = RemoteModel(address, name, retries=0), offset
        while not stop.is_set():
            sent = time.perf_counter()
            _, version = model.predict({"tables": np.array([tables[index % len(tables)]], dtype=object)})
            events.append((sent, time.perf_counter(), version))
            index += clients

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    time.sleep(steady_seconds)
    old = max(version for *_, version in events)
    staging = os.path.join(model_dir, f".staging-{old + 1}")
    copy_started = time.perf_counter()
    shutil.copytree(os.path.join(model_dir, str(old)), staging)
    os.rename(staging, os.path.join(model_dir, str(old + 1)))
    appeared = time.perf_counter()
    print(f"swap: {clients} clients; version {old + 1} appeared on disk (load {load_average()})",
          flush=True)
    first_new = None
    while first_new is None and time.perf_counter() - appeared < 900:
        time.sleep(0.05)
        answered = [done for _, done, version in list(events) if version == old + 1]
        first_new = min(answered) if answered else None
    if first_new is not None:
        time.sleep(tail_seconds)
    window_end = (first_new or time.perf_counter()) + tail_seconds
    load = load_average()
    time.sleep(background_seconds)
    background_end = time.perf_counter()
    stop.set()
    for thread in threads:
        thread.join()
    steady = [done - sent for sent, done, _ in events if began + 1.0 <= sent and done < copy_started]
    during = [done - sent for sent, done, _ in events if appeared <= sent < window_end]
    background = [done - sent for sent, done, _ in events if window_end <= sent < background_end]
    return {"available": (first_new - appeared) if first_new else float("nan"),
            "steady": np.array(steady) * 1000, "during": np.array(during) * 1000,
            "background": np.array(background) * 1000,
            "steady_seconds": copy_started - began - 1.0, "during_seconds": window_end - appeared,
            "background_seconds": background_end - window_end, "load": load,
            "background_load": load_average(),
            "timeline": [(sent + clock_offset, (done - sent) * 1000, version)
                         for sent, done, version in sorted(events)],
            "marks": {"appeared": appeared + clock_offset, "window_end": window_end + clock_offset}}


def write_timeline(path: str, swap: Dict) -> None:
    """CSV: sent (local time, as the server log prints it), latency ms, version, window."""
    marks = swap["marks"]
    with open(path, "w") as out:
        out.write("sent,latency_ms,version,window\n")
        for sent, ms, version in swap["timeline"]:
            window = ("steady" if sent < marks["appeared"] else
                      "swap" if sent < marks["window_end"] else "background")
            stamp = time.strftime("%H:%M:%S", time.localtime(sent)) + f"{sent % 1:.3f}"[1:]
            out.write(f"{stamp},{ms:.2f},{version},{window}\n")
    print(f"swap timeline: {path}")


def report_swap(swap: Dict) -> None:
    steady, during = swap["steady"], swap["during"]
    print(f"{'window':<11} {'seconds':>8} {'requests':>9} {'p50 ms':>8} {'p99 ms':>8} {'req/s':>8}")
    for label, ms, seconds in (("steady", steady, swap["steady_seconds"]),
                               ("swap", during, swap["during_seconds"]),
                               ("background", swap["background"], swap["background_seconds"])):
        if len(ms):
            print(f"{label:<11} {seconds:>8.1f} {len(ms):>9} {np.percentile(ms, 50):>8.2f} "
                  f"{np.percentile(ms, 99):>8.2f} {len(ms) / seconds:>8.1f}")
    ratio = np.percentile(during, 99) / np.percentile(steady, 99)
    available = swap["available"]
    print(f"new version first answered {available:.2f}s after appearing on disk (target <= 10 s): "
          f"{'met' if available <= 10 else 'MISSED'} (load {swap['load']})")
    print(f"p99 during the swap: {ratio:.2f}x steady state (target <= 2x): "
          f"{'met' if ratio <= 2 else 'MISSED'}; p50 {np.percentile(during, 50) / np.percentile(steady, 50):.2f}x")
    if len(swap["background"]):
        print(f"p99 while the new version warms up other signatures in the background: "
              f"{np.percentile(swap['background'], 99) / np.percentile(steady, 99):.2f}x steady state "
              f"(load {swap['background_load']})")


if __name__ == "__main__":
    from quiet import run_quietly

    run_quietly(main)
