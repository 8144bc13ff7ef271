"""Soak `tablegen serve`: concurrent gRPC clients while new versions are pushed.

Starts the server as a subprocess over a stand-in SavedModel with a 32 MiB output
projection (so a version that is never released shows in RSS), runs --clients
closed-loop gRPC clients for --minutes, and meanwhile pushes --swaps new
versions (copy + atomic rename, as TFX Pusher does), evenly spaced, deleting the
older version directories once the new version serves. Prints requests,
failures by status, p50/p99 latency, per-swap load-to-serve time and the server's
RSS at the end of each swap's interval. Targets: no failures, and RSS after the
last swap <= 1.2x RSS after the first (old versions are released).

    .venv/bin/python benchmarks/serving_soak.py                         # 10 min, 16 clients, 10 swaps
    .venv/bin/python benchmarks/serving_soak.py --minutes 3 --swaps 10  # shortened
"""

import argparse
import collections
import os
import shutil
import sys
import tempfile
import threading
import time
from typing import Dict, List

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

RSS_TARGET = 1.2


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--swaps", type=int, default=10)
    parser.add_argument("--vocab", type=int, default=32768,
                        help="output projection width: 256 x vocab float32 per version")
    parser.add_argument("--server-args", default="", help="extra `tablegen serve` flags")
    return parser.parse_args()


class Load:
    """Closed-loop clients: each sends its next Predict as soon as the last returns."""

    def __init__(self, address: str, clients: int):
        self.address, self.stop = address, threading.Event()
        self.latencies: List[float] = []
        self.statuses: collections.Counter = collections.Counter()
        self.versions: collections.Counter = collections.Counter()
        self.latest_version = 0
        self._lock = threading.Lock()
        self.threads = [threading.Thread(target=self._client, args=(i,)) for i in range(clients)]

    def start(self) -> "Load":
        for thread in self.threads:
            thread.start()
        return self

    def join(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join()

    def _client(self, index: int) -> None:
        import grpc

        from serving import fuzz, testing

        tables = testing.sample_tables(4)
        with grpc.insecure_channel(self.address) as channel:
            from tensorflow_serving.apis import prediction_service_pb2_grpc

            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            while not self.stop.is_set():
                rows = tables[: 1 + index % 4]
                started = time.perf_counter()
                try:
                    response = stub.Predict(fuzz.request({"tables": fuzz.string_proto(rows)}),
                                            timeout=30)
                except grpc.RpcError as error:
                    with self._lock:
                        self.statuses[error.code().name] += 1
                    continue
                self._record(time.perf_counter() - started, response.model_spec.version.value)

    def _record(self, latency: float, version: int) -> None:
        with self._lock:
            self.latencies.append(latency)
            self.statuses["OK"] += 1
            self.versions[version] += 1
            self.latest_version = max(self.latest_version, version)


def push_and_wait(export: str, model_dir: str, version: int, load: Load, timeout: float = 120) -> float:
    """Push `version`, wait until clients are served by it, delete older directories."""
    from serving import testing

    pushed = time.perf_counter()
    testing.push_version(export, model_dir, version)
    while load.latest_version < version:
        if time.perf_counter() - pushed > timeout:
            raise RuntimeError(f"version {version} was not served within {timeout}s")
        time.sleep(0.05)
    served_after = time.perf_counter() - pushed
    for name in os.listdir(model_dir):
        if name.isdigit() and int(name) < version:
            shutil.rmtree(os.path.join(model_dir, name))
    return served_after


def run(args, workdir: str) -> Dict[str, object]:
    import shlex

    from serving import testing

    export = testing.save_fake_model(os.path.join(workdir, "export"), decoder_steps=2, width=256,
                                     vocab=args.vocab)
    model_dir = os.path.join(workdir, "models", testing.MODEL)
    testing.push_version(export, model_dir, 1)
    interval = args.minutes * 60 / (args.swaps + 1)
    with testing.ServerProcess(os.path.join(workdir, "models"), "--poll-seconds", "1",
                               *shlex.split(args.server_args)) as server:
        load = Load(server.grpc_address, args.clients).start()
        swaps, rss = [], [("start", server.rss_bytes())]
        try:
            time.sleep(interval)
            rss.append(("before swap 1", server.rss_bytes()))
            for version in range(2, args.swaps + 2):
                swap_started = time.perf_counter()
                swaps.append(push_and_wait(export, model_dir, version, load))
                time.sleep(max(0.0, interval - (time.perf_counter() - swap_started)))
                rss.append((f"after swap {version - 1}", server.rss_bytes()))
                print(f"  swap {version - 1}: version {version} served after {swaps[-1]:.1f}s, "
                      f"RSS {rss[-1][1] / 2**20:.0f} MiB", flush=True)
        finally:
            load.join()
        alive = server.alive()
    return {"load": load, "swaps": swaps, "rss": rss, "alive": alive, "interval": interval}


def report(args, result) -> bool:
    load, rss = result["load"], dict(result["rss"])
    ms = np.array(load.latencies) * 1000
    total = sum(load.statuses.values())
    failures = total - load.statuses["OK"]
    print(f"\n{args.clients} clients, {args.minutes:g} min, {len(result['swaps'])} swaps every "
          f"{result['interval']:.0f}s (version {args.vocab}x256 projection)")
    print(f"requests {total}, failures {failures} {dict(load.statuses)}, "
          f"{total / (args.minutes * 60):.0f} req/s")
    print(f"latency p50 {np.percentile(ms, 50):.1f} ms, p99 {np.percentile(ms, 99):.1f} ms")
    print(f"load-to-serve per swap: {', '.join(f'{s:.1f}s' for s in result['swaps'])}")
    print("RSS: " + ", ".join(f"{name} {value / 2**20:.0f} MiB" for name, value in result["rss"]))
    first, last = rss["after swap 1"], rss[f"after swap {len(result['swaps'])}"]
    ratio = last / first
    print(f"RSS after swap {len(result['swaps'])} / after swap 1 = {ratio:.3f} "
          f"(target <= {RSS_TARGET}): {'PASS' if ratio <= RSS_TARGET else 'FAIL'}")
    print(f"server alive at the end: {result['alive']}")
    return failures == 0 and ratio <= RSS_TARGET and result["alive"]


def main() -> int:
    args = parse_args()
    if args.swaps < 1:
        sys.exit("--swaps must be at least 1")
    with tempfile.TemporaryDirectory(prefix="serving-soak-") as workdir:
        result = run(args, workdir)
    return 0 if report(args, result) else 1


if __name__ == "__main__":
    from quiet import run_quietly

    sys.exit(run_quietly(main))
