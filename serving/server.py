"""`tablegen serve`: a TF Serving-compatible model server (gRPC + optional REST).

    tablegen serve --model-base-path runs/e2e/serving --model-name e2e --port 8500 --rest-port 8501

Serves BASE/NAME/<latest version>, hot-swaps newer versions as they appear,
bounds concurrency, batches concurrent requests, and on SIGTERM/SIGINT stops
accepting, lets in-flight requests finish and exits 0. Run standalone with
`python -m serving.server ...`.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import signal
import sys
import threading
from concurrent import futures
from typing import Dict, List, Optional

from serving.defaults import (BATCH_TIMEOUT_MICROS, DEFAULT_RUNTIME, LOADER_NICENESS, MAX_BATCH_SIZE,
                              METRICS_PATH, NUM_BATCH_THREADS, POLL_SECONDS, RUNTIMES, SETTLE_SECONDS,
                              WARMUP_NICENESS)
from serving.limits import add_limit_arguments, limits_from_args
from serving.tls import add_tls_arguments, tls_from_args

log = logging.getLogger("tablegen.serving")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    model = parser.add_argument_group("model")
    model.add_argument("--model-base-path", help="directory holding NAME/<version>/saved_model.pb")
    model.add_argument("--model-name", default="tablegen", help="model name (default: %(default)s)")
    model.add_argument("--model-config-file",
                       help="TF Serving models.config (model_config_list) to serve several models; "
                       "each base_path holds <version>/ directories")
    model.add_argument("--poll-seconds", type=float, default=POLL_SECONDS,
                       help="how often to look for new versions (default: %(default)s)")
    model.add_argument("--settle-seconds", type=float, default=SETTLE_SECONDS,
                       help="a newly seen version loads once its files stay unchanged this long, "
                       "so a copy still in progress is not loaded; 0 waits for the next poll "
                       "(default: %(default)s)")
    model.add_argument("--background-warmup", action=argparse.BooleanOptionalAction, default=True,
                       help="warm up only serving_default before a new version takes traffic and "
                       "the other signatures right after, in the background; --no-background-warmup "
                       "replays the whole warm-up file first, as TF Serving does (default: on)")
    model.add_argument("--loader-niceness", type=int, default=LOADER_NICENESS,
                       help="niceness of the thread loading new versions (Linux): a higher value "
                       "leaves more CPU to requests during a swap and makes the new version "
                       "available later; a session runtime's warm-up calls run at the lower of "
                       "it and %d; 0 loads and warms up at the requests' priority (default: "
                       "%%(default)s)" % WARMUP_NICENESS)
    model.add_argument("--runtime", choices=sorted(RUNTIMES), default=DEFAULT_RUNTIME,
                       help="how versions are loaded and run: 'session' (a TF1 session by the "
                       "SignatureDefs' tensor names, as TF Serving does: about 60x fewer Python "
                       "objects per version, so loading and unloading a version stall requests "
                       "less) or 'function' (TF2's tf.saved_model.load); serving/README.md "
                       "compares them (default: %(default)s)")
    model.add_argument("--graph-optimization", action=argparse.BooleanOptionalAction, default=False,
                       help="let TensorFlow's graph optimiser (Grappler) rewrite each loaded function "
                       "before its first call. Off by default: that first call, which every new "
                       "version's warm-up pays before it takes traffic, took 1.6-1.9 s instead of "
                       "3.1-3.7 s, and answers were no slower (serving/README.md)")
    model.add_argument("--xla-cache-dir", metavar="DIR",
                       help="keep compiled XLA computations (a model's one-table beam search) in "
                       "this directory, across restarts; a new version of the same architecture "
                       "then skips compiling them before it takes traffic (serving/xla_cache.py). "
                       "Default: a temporary directory, shared by the versions this server loads "
                       "and removed when it stops")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="also show TensorFlow's known-harmless log lines (start-up on a machine "
                        "without GPU, XLA cache reads: KNOWN_NOISE in tablegen_tf/logs.py), which are "
                        "dropped by default; every other line is shown either way")
    net = parser.add_argument_group("network")
    net.add_argument("--host", default="0.0.0.0", help="bind address (default: %(default)s)")
    net.add_argument("--port", type=int, default=8500, help="gRPC port; 0 picks a free one (default: %(default)s)")
    net.add_argument("--rest-port", type=int, default=None,
                     help="REST port (off unless given; 0 picks a free one); it also serves Prometheus "
                     f"metrics at {METRICS_PATH}")
    load = parser.add_argument_group("load")
    load.add_argument("--max-concurrency", type=int, default=16,
                      help="requests executing at once; more wait, then get RESOURCE_EXHAUSTED "
                      "(default: %(default)s)")
    load.add_argument("--queue-timeout-seconds", type=float, default=5.0,
                      help="longest wait for a concurrency slot (default: %(default)s)")
    load.add_argument("--max-batch-size", type=int, default=MAX_BATCH_SIZE,
                      help="largest batch per request and per merged batch (default: %(default)s)")
    load.add_argument("--enable-batching", action=argparse.BooleanOptionalAction, default=True,
                      help="merge concurrent requests into one model call (default: on)")
    load.add_argument("--batch-timeout-micros", type=int, default=BATCH_TIMEOUT_MICROS,
                      help="longest wait for a batch to take its share of the clients in flight; a "
                      "lone sequential client never waits (default: %(default)s)")
    load.add_argument("--num-batch-threads", type=int, default=NUM_BATCH_THREADS,
                      help="batches executing in parallel (default: %(default)s)")
    load.add_argument("--batching-parameters-file",
                      help="TF Serving batching_parameters.txt; overrides the batching flags")
    load.add_argument("--grace-seconds", type=float, default=30.0,
                      help="on shutdown, how long in-flight requests may take (default: %(default)s)")
    add_limit_arguments(parser)
    add_tls_arguments(parser)


def add_serve_parser(subparsers) -> argparse.ArgumentParser:
    """For tablegen_cli/main.py: `tablegen serve ...` (handler(args, extra) -> exit code)."""
    parser = subparsers.add_parser(
        "serve", help="serve exported SavedModels over TF Serving's gRPC/REST APIs",
        description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.set_defaults(handler=lambda args, extra=None: run(args))
    return parser


class ModelServer:
    """gRPC (+ REST) front ends over one Predictor; start() returns once listening."""

    def __init__(self, predictor, host: str = "0.0.0.0", port: int = 8500,
                 rest_port: Optional[int] = None, grace_seconds: float = 30.0, tls=None):
        self.predictor, self.host = predictor, host
        self.grpc_port, self.rest_port = port, rest_port
        self.grace_seconds = grace_seconds
        self.tls = tls  # serving.tls.TLSConfig: both ports speak TLS only
        self._grpc = self._rest = None

    def start(self) -> "ModelServer":
        """Bind first (a taken port fails before a slow model load), load, then serve."""
        from serving import rest, tls

        # Built first: it also checks that the certificate and key load.
        context = tls.ssl_context(self.tls) if self.tls else None
        self._grpc = self._grpc_server()
        if self.rest_port is not None:
            try:
                self._rest = rest.RestServer((self.host, self.rest_port), self.predictor, context)
            except OSError as error:
                self._grpc.stop(None)
                raise OSError(f"cannot bind REST to {self.host}:{self.rest_port}: {error}") from error
            self.rest_port = self._rest.server_address[1]
        for manager in self.predictor.managers.values():
            manager.start()
        self._grpc.start()
        if self._rest:
            self._rest.start()
        return self

    def _grpc_server(self):
        import grpc

        from serving import grpc_api

        # Room for max_concurrency running + as many waiting for a slot; beyond
        # that gRPC itself answers RESOURCE_EXHAUSTED instead of queueing forever.
        workers = 2 * self.predictor.max_concurrency + 4
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="grpc"),
            maximum_concurrent_rpcs=workers,
            options=[("grpc.so_reuseport", 0),  # a taken port must fail loudly
                     ("grpc.max_receive_message_length", self.predictor.limits.max_request_bytes),
                     ("grpc.max_send_message_length", self.predictor.limits.max_request_bytes)])
        grpc_api.add_services(server, self.predictor)
        self.grpc_port = _bind(server, self.host, self.grpc_port, self.tls)
        return server

    def stop(self) -> None:
        """Refuse new requests, let in-flight ones finish (up to grace), release models."""
        done = self._grpc.stop(self.grace_seconds) if self._grpc else None
        if self._rest:
            self._rest.stop()
        if done:
            done.wait()
        self.predictor.close()
        for manager in self.predictor.managers.values():
            manager.stop()


def _bind(server, host: str, port: int, tls=None) -> int:
    from serving.tls import grpc_credentials

    try:
        if tls:
            bound = server.add_secure_port(f"{host}:{port}", grpc_credentials(tls))
        else:
            bound = server.add_insecure_port(f"{host}:{port}")
    except RuntimeError as error:  # newer grpcio raises, older returns 0
        raise OSError(f"cannot bind gRPC to {host}:{port}: {error}") from error
    if not bound:
        raise OSError(f"cannot bind gRPC to {host}:{port} (in use?)")
    return bound


def model_dirs(args) -> Dict[str, str]:
    """name -> directory of version subdirectories."""
    if args.model_config_file:
        return _config_file_models(args.model_config_file)
    if not args.model_base_path:
        raise ValueError("give --model-base-path (with --model-name) or --model-config-file")
    model_dir = os.path.join(args.model_base_path, args.model_name)
    if not os.path.isdir(model_dir) and _has_versions(args.model_base_path):
        # TF Serving's own --model_base_path points at the version directories.
        log.info("%s has version directories; serving them as model %s",
                 args.model_base_path, args.model_name)
        model_dir = args.model_base_path
    return {args.model_name: model_dir}


def _has_versions(path: str) -> bool:
    return os.path.isdir(path) and any(n.isdigit() for n in os.listdir(path))


def _config_file_models(path: str) -> Dict[str, str]:
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2

    config = model_server_config_pb2.ModelServerConfig()
    with open(path) as f:
        text_format.Parse(f.read(), config)
    return {m.name: m.base_path for m in config.model_config_list.config}


def batching_options(args):
    from serving.batching import BatchingOptions, parse_batching_parameters

    if not args.enable_batching:
        return None
    options = BatchingOptions(args.max_batch_size, args.batch_timeout_micros, args.num_batch_threads)
    if args.batching_parameters_file:
        with open(args.batching_parameters_file) as f:
            options = parse_batching_parameters(f.read(), options)
    return options


def build_server(args) -> ModelServer:
    from serving.model_manager import ModelManager
    from serving.predictor import Predictor

    managers = {name: ModelManager(name, path, args.poll_seconds, args.background_warmup,
                                   args.loader_niceness, args.settle_seconds, args.runtime)
                for name, path in model_dirs(args).items()}
    predictor = Predictor(managers, args.max_concurrency, args.max_batch_size,
                          args.queue_timeout_seconds, batching_options(args), limits_from_args(args))
    return ModelServer(predictor, args.host, args.port, args.rest_port, args.grace_seconds,
                       tls_from_args(args))


def freeze_startup_objects() -> None:
    """Take everything imported so far out of the garbage collector's reach. The full
    collection that frees an unloaded version (ModelManager._collect_unloaded), and
    Python's own oldest-generation collections, otherwise walk the ~440,000 objects of
    TensorFlow's modules holding the GIL: 1.6-3 s measured on the loaded 2-core host, with
    every request stalled (the p99 of a version swap). Models loaded later stay collectable."""
    from serving import model_manager, predictor  # noqa: F401  (imports TensorFlow)

    model_manager.register_custom_ops()
    gc.collect()
    gc.freeze()


def configure_graph_optimization(enabled: bool) -> None:
    """Grappler on or off for every function this process runs from now on (process-wide)."""
    import tensorflow as tf

    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": not enabled})


def run(args) -> int:
    if not args.verbose:  # before TensorFlow is imported: its start-up lines are filtered too
        from tablegen_tf import logs

        logs.drop_known_noise()
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    from serving.xla_cache import XlaCache

    with XlaCache(args.xla_cache_dir) as cache:  # before anything compiles: TensorFlow reads it once
        return _serve(args, cache)


def _serve(args, cache) -> int:
    freeze_startup_objects()
    configure_graph_optimization(args.graph_optimization)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        server = build_server(args).start()
    except (OSError, ValueError) as error:
        print(f"tablegen serve: error: {error}", file=sys.stderr)
        return 2
    rest = f" rest={args.host}:{server.rest_port}" if server.rest_port is not None else ""
    tls = f" tls={server.tls.mode}" if server.tls else ""
    print(f"tablegen serve: ready grpc={args.host}:{server.grpc_port}{rest}{tls} "
          f"models={sorted(server.predictor.managers)}", flush=True)
    while not stop.wait(0.1):
        pass
    log.info("shutting down: refusing new requests, finishing in-flight ones")
    server.stop()
    print("tablegen serve: stopped", flush=True)
    if any(manager.warming_up() for manager in server.predictor.managers.values()):
        # The interpreter's exit would wait for the warm-up request in progress (a first
        # `generate` call takes minutes); every request has been answered, nothing is lost.
        log.info("exiting during a background warm-up")
        cache.close()
        logging.shutdown()
        os._exit(0)
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="tablegen serve", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
