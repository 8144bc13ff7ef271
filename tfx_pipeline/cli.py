"""`tablegen pipeline run|compile` and `tablegen tensorboard`, wired by tablegen_cli/main.py:

    from tfx_pipeline.cli import add_pipeline_parser
    add_pipeline_parser(subparsers)

Handlers follow tablegen_cli/main.py's contract: ``handler(args, extra) -> exit code``.
Heavy imports (TFX, TensorFlow) happen inside the handlers.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from typing import List


def add_pipeline_parser(subparsers) -> None:
    """Adds the `pipeline` (run / compile) and `tensorboard` sub-commands."""
    parser = subparsers.add_parser(
        "pipeline",
        help="run or compile the TFX pipeline (ExampleGen -> ... -> Trainer -> Evaluator -> Pusher)",
        description="The TFX pipeline. Its YAML config is merged over tfx_pipeline/configs/default.yaml "
        "(corpus, formats and input patterns per split, model, training budget, BLEU thresholds, "
        "pipeline root, serving base).",
    )
    commands = parser.add_subparsers(dest="pipeline_command", required=True, metavar="ACTION")
    run = commands.add_parser(
        "run", help="run locally (LocalDagRunner, SQLite ML Metadata under the root)",
        description="Runs the pipeline locally. The console shows one line per stage, training progress and a "
        "summary; the full log goes to ROOT/logs/pipeline.log, the report to ROOT/runs/<id>/run_report.{json,md}. "
        "Exit code 0: the run completed (pushed or not), 2: bad input data, 1: another failure.")
    add_config_arguments(run)
    run.add_argument("-v", "--verbose", action="store_true",
                     help="show every log line on the console (TF, Beam, TFX), not only warnings and errors")
    run.set_defaults(handler=run_handler)
    compile_ = commands.add_parser("compile", help="compile for an orchestrator (Kubeflow Pipelines V2 / Vertex)")
    add_config_arguments(compile_)
    compile_.add_argument("--target", choices=["kubeflow-v2"], default="kubeflow-v2")
    compile_.add_argument("--output", required=True, help="pipeline JSON to write")
    compile_.set_defaults(handler=compile_handler)
    add_tensorboard_parser(subparsers)


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=None, help="pipeline YAML (default: tfx_pipeline/configs/default.yaml)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override, e.g. --set trainer.config.train.max_minutes=1 (repeatable)")


def add_tensorboard_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "tensorboard", help="TensorBoard over every model run and evaluation of a pipeline root",
        description="Launches (or with --print-only prints) tensorboard over ROOT/Trainer/model_run/*/logs "
        "and ROOT/Evaluator/evaluation/*/logs.",
    )
    parser.add_argument("--pipeline-root", default=None, help="pipeline root (default: the config's)")
    parser.add_argument("--config", default=None, help="pipeline YAML naming the root")
    parser.add_argument("--port", type=int, default=6006)
    parser.add_argument("--print-only", action="store_true", help="print the command, do not launch it")
    parser.set_defaults(handler=tensorboard_handler)


def _config(args):
    from tfx_pipeline import config

    return config.load(args.config, config.parse_overrides(getattr(args, "overrides", [])))


def run_handler(args, _extra=None) -> int:
    from tfx_pipeline import runner

    return runner.run_and_report(_config(args), verbose=getattr(args, "verbose", False))


def compile_handler(args, _extra=None) -> int:
    from tfx_pipeline import runner

    output = runner.compile_kubeflow_v2(_config(args), args.output)
    print(f"wrote {args.target} pipeline to {output}")
    return 0


def tensorboard_handler(args, _extra=None) -> int:
    from tfx_pipeline import runner

    root = args.pipeline_root or _config(args).root
    command = runner.tensorboard_command(root, args.port)
    if len(runner.tensorboard_logdirs(root)) == 0:
        print(f"tablegen tensorboard: no model run or evaluation logs under {root}", file=sys.stderr)
        return 2
    print(" ".join(command), flush=True)
    if args.print_only:
        return 0
    return subprocess.call([sys.executable, "-m", "tensorboard.main", *command[1:]])


def main(argv: List[str] = None) -> int:
    """Stand-alone entry (python -m tfx_pipeline.cli ...) until tablegen_cli/main.py wires it."""
    parser = argparse.ArgumentParser(prog="tablegen")
    add_pipeline_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.handler(args, [])


if __name__ == "__main__":
    sys.exit(main())
