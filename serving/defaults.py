"""Defaults shared by the server's command line and the model manager, in a module that
imports nothing heavy (`tablegen serve --help` must not load TensorFlow)."""

# Longest wait for a batch to reach its share of the clients (tablegen serve
# --batch-timeout-micros; serving.batching), which ends sooner when no more rows are
# coming. A returning group of clients crosses the Python gRPC path one request at a time:
# at 2 ms a batch took 1-8 of its 8 (mean 4.9) and ran more, smaller batches for as many
# tables; at 8-12 ms nearly all 8. Under 16 gRPC clients, alternated with 2 ms
# (serving/README.md, 2026-12-04): median 284 against 264 requests/s over nine pairs (the
# host drifted 173-372), 3 clients 142-203 against 113-154. TF Serving's timeout is a fixed
# wait, so its batching_parameters.txt keeps 2 ms.
BATCH_TIMEOUT_MICROS = 10000

# Largest batch per request and per merged batch (tablegen serve --max-batch-size), and
# batches executing in parallel (--num-batch-threads): two, one per core of a 2-core host;
# 1, 3 and 4 measured no better under 16 clients (serving/README.md, 2026-11-28/29).
MAX_BATCH_SIZE = 64
NUM_BATCH_THREADS = 2

# Where the REST port serves Prometheus metrics (serving.metrics): the path TF Serving's
# monitoring config conventionally names (serving/monitoring.config).
METRICS_PATH = "/monitoring/prometheus/metrics"

# How often to look for new versions: TF Serving's --file_system_poll_wait_seconds default.
POLL_SECONDS = 1.0

# How long a newly seen version's files must stay unchanged before it loads (a copy in
# progress changes within it; an atomic rename is ready at once).
SETTLE_SECONDS = 0.2

# How a version is loaded and run (serving.model_manager.RUNTIMES): TF2's Python functions
# (tf.saved_model.load), or a TF1 session by the SignatureDefs' tensor names as TF Serving
# runs them (serving.session_runtime). Session by default: side by side on the E2E export
# under 16 clients (serving/README.md) its swap p99, steady p99 and first answer after a
# push were each lower.
RUNTIMES = ("function", "session")
DEFAULT_RUNTIME = "session"

# Niceness of the thread that loads and warms up new versions (tablegen serve
# --loader-niceness). In a session most of a load (graph setup, the first calls' function
# instantiation) runs in that thread without the GIL, so a low priority leaves the cores to
# requests: swap p99 1.64-1.97x steady at 19 against 2.38-3.17x at 0 (serving/README.md).
LOADER_NICENESS = 19

# Niceness of the threads that run warm-up calls (a session's warm-up pool; at most the
# loader's): a dial between the swap's p99 and the first answer after a push. Under 16
# clients (serving/README.md): at 0 (the requests' pool) 2.17-2.54x steady and 7.0-7.8 s;
# at 5 1.84-1.88x and 9.4-10.2 s; at 10 and 19 1.58-1.80x but 10.2-11.9 s (target 10 s).
# With the XLA cache (serving/xla_cache.py) 5 gave 1.41-2.00x and 5.4-6.4 s, 19 1.34-1.96x
# and 6.2-7.5 s (six and three runs): no measurable gain from 19, so 5 stays.
WARMUP_NICENESS = 5
