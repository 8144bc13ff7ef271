"""Fuzz/soak `tablegen serve` with serving/fuzz.py's seeded malformed requests.

Starts the server as a subprocess over the stand-in SavedModel, sends --requests
fuzz cases (every category in turn; gRPC and REST), prints requests per category
and status, any violations (a status the category does not allow, or an OK answer
with the wrong number of texts), and checks the same server process still
answers a valid request and is alive. Exit code 1 on any violation.

    .venv/bin/python benchmarks/serving_fuzz.py --requests 10000 --seed 1
"""

import argparse
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--server-args", default="", help="extra `tablegen serve` flags")
    return parser.parse_args()


def main() -> int:
    import shlex

    from serving import fuzz, testing

    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="serving-fuzz-") as workdir:
        testing.push_version(testing.save_fake_model(os.path.join(workdir, "export"), suffix="v1"),
                             os.path.join(workdir, "models", testing.MODEL), 1)
        flags = [*fuzz.SERVER_FLAGS, *shlex.split(args.server_args)]
        with testing.ServerProcess(os.path.join(workdir, "models"), *flags) as server:
            rss_before = server.rss_bytes()
            started = time.perf_counter()
            report = fuzz.run(server.grpc_address, server.rest_address, args.requests, args.seed,
                              progress=lambda i: (i + 1) % 1000 or print(f"  {i + 1} requests", flush=True))
            elapsed = time.perf_counter() - started
            alive, rss_after = server.alive(), server.rss_bytes()
    print(f"\nseed {args.seed}: {args.requests} requests in {elapsed:.0f}s "
          f"({args.requests / elapsed:.0f}/s), {len(fuzz.CATEGORIES)} categories\n")
    print(report.table())
    print(f"\nviolations: {len(report.violations)}")
    for line in report.violations[:50]:
        print("  " + line)
    print(f"valid request after fuzzing: {'OK' if report.final_ok else 'FAILED'}; server process "
          f"alive: {alive}; server RSS {rss_before / 2**20:.0f} -> {rss_after / 2**20:.0f} MiB")
    return 0 if report.passed and alive else 1


if __name__ == "__main__":
    from quiet import run_quietly

    sys.exit(run_quietly(main))
