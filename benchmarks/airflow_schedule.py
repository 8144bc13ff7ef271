"""The tablegen DAG in a real scheduler: Apache Airflow 2.x runs it with `airflow dags test`.

    ./scripts/setup.sh && ./scripts/setup_airflow.sh     # .venv + .cache/airflow-venv (Airflow 2.11.2)
    .venv/bin/python benchmarks/airflow_schedule.py      # [--keep] [--timeout 900]

On the tiny corpus and model of tfx_pipeline/pipeline_e2e_test.py (tests/fixtures/e2e in the
{SPAN} layout, a 6-step encdec-copy), with the DAG file tfx_pipeline/airflow_dag.py loaded by
Airflow from a temporary DAG folder (SQLite metadata DB under a temporary AIRFLOW_HOME), it
proves and prints, each checked (exit 1 and the reason if not):

  1. the DAG's schedule is daily: Airflow's timetable says so and each run's data interval is
     one day (read from Airflow's own database);
  2. run 1 (logical date 2024-01-02) executes every component and pushes a model;
  3. run 2 (the next day) over the same span: every component is CACHED in ML Metadata, no
     new Trainer execution, no new pushed version;
  4. a new span (span-2) then run 3: new examples, the Trainer retrains (warm-started from
     run 1's model) and the BLEU gate (max_bleu_drop 0 against run 1's model) decides the
     push: blessed and pushed, or not blessed and not pushed, with the Evaluator's reason.

Every Airflow command runs in its own process group (killed when it ends or times out:
nothing is left running) and, where `unshare` allows it (root, Linux), in a private network
namespace that has only a loopback interface, so the run provably makes no outside traffic;
Airflow's usage-data reporting is off in any case. The work dir is removed at the end
(--keep keeps it).

Why a benchmark script and not a slow test: CI installs from scratch and does not install
Airflow (the airflow venv is a separate ~40 s install, scripts/setup_airflow.sh), and the
three DAG runs take minutes here because `airflow dags test` parses the DAG file (TensorFlow
and TFX imports) once per run and every task starts TFX's legacy launcher in-process; see
tfx_pipeline/README.md "Airflow" for the measured figures.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from tfx_pipeline.pipeline_e2e_test import add_span, executions, tiny_config, tiny_overrides  # noqa: E402

AIRFLOW_VENV = os.path.join(REPO, ".cache", "airflow-venv")
AIRFLOW_BIN = os.path.join(AIRFLOW_VENV, "bin", "airflow")
START_DATE = "2024-01-01"
RUN_DATES = ("2024-01-02", "2024-01-03", "2024-01-04")  # three consecutive daily runs
DAG_FILE = '''"""Airflow DAG folder entry: the tablegen pipeline (tfx_pipeline/airflow_dag.py)."""
from tfx_pipeline.airflow_dag import DAG  # noqa: F401  (Airflow collects module-level DAGs)
'''


class CheckFailed(AssertionError):
    pass


def check(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def say(message: str) -> None:
    print(message, flush=True)


# --- the work dir, the config, Airflow's environment ---------------------------------------


def write_config(workdir: str) -> str:
    overrides = tiny_overrides(_Path(workdir), max_bleu_drop=0.0)  # run 3: no worse than run 1's model
    overrides["airflow"] = {"schedule": "@daily", "start_date": START_DATE, "catchup": False, "max_active_runs": 1}
    path = os.path.join(workdir, "tiny.yaml")
    with open(path, "w", encoding="utf-8") as handle:
        yaml.safe_dump(overrides, handle)
    return path


class _Path(str):
    """tiny_overrides takes pytest's tmp_path; `/` is all it uses."""

    def __truediv__(self, name: str) -> "_Path":
        return _Path(os.path.join(self, name))


def airflow_env(workdir: str, config_path: str) -> Dict[str, str]:
    home = os.path.join(workdir, "airflow_home")
    dags = os.path.join(workdir, "dags")
    os.makedirs(dags, exist_ok=True)
    with open(os.path.join(dags, "tablegen_dag.py"), "w", encoding="utf-8") as handle:
        handle.write(DAG_FILE)
    tmp = os.path.join(workdir, "tmp")
    os.makedirs(tmp, exist_ok=True)
    env = {key: value for key, value in os.environ.items() if not key.startswith("AIRFLOW")}
    env.update({
        "AIRFLOW_HOME": home,
        "AIRFLOW__CORE__DAGS_FOLDER": dags,
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{os.path.join(home, 'airflow.db')}",
        "AIRFLOW__CORE__EXECUTOR": "SequentialExecutor",
        # Parsing the DAG file imports TensorFlow and TFX: far over the 30 s default.
        "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "600",
        "AIRFLOW__CORE__DAG_FILE_PROCESSOR_TIMEOUT": "600",
        "AIRFLOW__USAGE_DATA_COLLECTION__ENABLED": "False",  # no usage reports to the internet
        "SCARF_ANALYTICS": "false",
        "DO_NOT_TRACK": "1",
        "TABLEGEN_PIPELINE_CONFIG": config_path,
        "TMPDIR": tmp,
        "PYTHONUNBUFFERED": "1",
    })
    return env


def loopback_only_prefix() -> List[str]:
    """`unshare --net` + `ip link set lo up` when permitted: the command sees only loopback."""
    if not (shutil.which("unshare") and shutil.which("ip")):
        return []
    probe = ["unshare", "--net", "sh", "-c", "ip link set lo up"]
    if subprocess.run(probe, capture_output=True).returncode != 0:
        return []
    return ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "airflow-loopback"]


# --- running Airflow ------------------------------------------------------------------------


def run_airflow(args: Sequence[str], env: Dict[str, str], log_path: str, prefix: List[str], timeout: float) -> float:
    """Runs `airflow ARGS` in its own process group, output to log_path; kills the group
    (whatever it started) when it ends or times out. Returns the wall time in seconds."""
    start = time.monotonic()
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"\n$ airflow {' '.join(args)}\n")
        log.flush()
        process = subprocess.Popen(prefix + [AIRFLOW_BIN, *args], cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            returncode = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            returncode = None
        finally:
            left = kill_group(process.pid)
    seconds = time.monotonic() - start
    check(returncode is not None, f"`airflow {' '.join(args)}` timed out after {timeout:.0f} s (log: {log_path})")
    check(returncode == 0, f"`airflow {' '.join(args)}` exited {returncode} (log: {log_path})")
    check(not left, f"`airflow {' '.join(args)}` left processes running (killed): {left}")
    return seconds


def kill_group(pgid: int) -> List[int]:
    """SIGKILLs the process group; returns the pids that were still in it."""
    left = [pid for pid in _pids() if _pgid(pid) == pgid]
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    return left


def _pids() -> List[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _pgid(pid: int) -> Optional[int]:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


# --- what Airflow recorded ------------------------------------------------------------------


def airflow_db(env: Dict[str, str]) -> sqlite3.Connection:
    path = env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"][len("sqlite:///"):]
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def dag_run(env: Dict[str, str], dag_id: str, logical_date: str) -> Dict:
    with contextlib.closing(airflow_db(env)) as db:
        db.row_factory = sqlite3.Row
        rows = db.execute("SELECT * FROM dag_run WHERE dag_id = ? ORDER BY id", (dag_id,)).fetchall()
        runs = [dict(row) for row in rows if str(row["execution_date"]).startswith(logical_date)]
        check(len(runs) == 1, f"expected one DAG run of {dag_id} at {logical_date} in Airflow's DB, got {len(runs)}")
        tasks = db.execute("SELECT task_id, state FROM task_instance WHERE dag_id = ? AND run_id = ?",
                           (dag_id, runs[0]["run_id"])).fetchall()
    return {**runs[0], "tasks": {task_id: state for task_id, state in tasks}}


def dag_schedule(env: Dict[str, str], dag_id: str) -> Dict:
    with contextlib.closing(airflow_db(env)) as db:
        db.row_factory = sqlite3.Row
        row = db.execute("SELECT * FROM dag WHERE dag_id = ?", (dag_id,)).fetchone()
    check(row is not None, f"DAG {dag_id} is not in Airflow's DB")
    return dict(row)


def _parse_time(value: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(str(value).replace(" ", "T"))


# --- what TFX recorded ----------------------------------------------------------------------


def node_states(config, since: int) -> Dict[str, List[str]]:
    """component id -> [ML Metadata state of each execution after the first `since`]."""
    states: Dict[str, List[str]] = {}
    for node, state, execution in executions(config)[since:]:
        component = execution.properties["component_id"].string_value or node
        states.setdefault(component, []).append(state)
    return states


def evaluation(config) -> Dict:
    from tfx_pipeline.runner import metadata_store

    store = metadata_store(config)
    latest = max(store.get_artifacts_by_type("ModelEvaluation"), key=lambda a: a.id)
    with open(os.path.join(latest.uri, "metrics.json"), encoding="utf-8") as handle:
        return json.load(handle)


def pushed_versions(config) -> List[str]:
    return sorted(os.listdir(config.push_directory)) if os.path.isdir(config.push_directory) else []


# --- the scenario ---------------------------------------------------------------------------


def scenario(workdir: str, timeout: float) -> Dict[str, float]:
    config_path = write_config(workdir)
    config = tiny_config(_Path(workdir), max_bleu_drop=0.0)
    dag_id = config.name
    env = airflow_env(workdir, config_path)
    log_path = os.path.join(workdir, "airflow.log")
    prefix = loopback_only_prefix()
    say(f"airflow venv: {AIRFLOW_VENV}; network: "
        + ("private namespace, loopback only (unshare --net)" if prefix else "host network (unshare unavailable)"))
    add_span(config.input_base, 1)
    timings = {"db migrate": run_airflow(["db", "migrate"], env, log_path, prefix, timeout)}
    # Airflow parses the DAG folder into its DB (the DAG table holds the schedule it read).
    timings["dags reserialize"] = run_airflow(["dags", "reserialize"], env, log_path, prefix, timeout)
    schedule = dag_schedule(env, dag_id)
    check(str(schedule["schedule_interval"]).strip('"') == "@daily",
          f"DAG schedule {schedule['schedule_interval']!r} ({schedule['timetable_description']}), not @daily")
    say(f"DAG {dag_id} loaded by Airflow: schedule {schedule['schedule_interval']} "
        f"({schedule['timetable_description']}), {schedule['max_active_runs']} active run at most")

    seen = 0
    for number, logical_date in enumerate(RUN_DATES, start=1):
        if number == 3:
            add_span(config.input_base, 2)
            say("added span-2 (a day's new data)")
        timings[f"run {number}"] = run_airflow(["dags", "test", dag_id, logical_date], env, log_path, prefix, timeout)
        run = dag_run(env, dag_id, logical_date)
        check(run["state"] == "success", f"run {number}: DAG run state {run['state']}, tasks {run['tasks']}")
        check(set(run["tasks"].values()) == {"success"}, f"run {number}: task states {run['tasks']}")
        interval = _parse_time(run["data_interval_end"]) - _parse_time(run["data_interval_start"])
        check(interval == datetime.timedelta(days=1), f"run {number}: data interval {interval}, not one day")
        states = node_states(config, seen)
        seen = len(executions(config))
        say(f"run {number} (logical date {logical_date}, data interval {run['data_interval_start']} .. "
            f"{run['data_interval_end']}): {len(run['tasks'])} Airflow tasks succeeded "
            f"in {timings[f'run {number}']:.0f} s")
        say("  ML Metadata: " + ", ".join(f"{node} {'/'.join(s)}" for node, s in states.items()))
        globals()[f"_check_run_{number}"](config, states)

    return timings


def _check_run_1(config, states) -> None:
    check(states.get("Trainer") == ["COMPLETE"], f"run 1: Trainer {states.get('Trainer')}")
    check(len(pushed_versions(config)) == 1, f"run 1: pushed versions {pushed_versions(config)}")
    verdict = evaluation(config)
    say(f"  pushed {pushed_versions(config)[0]}: {verdict.get('message')}")


def _check_run_2(config, states) -> None:
    executed = {node: s for node, s in states.items() if "latest_blessed_model_resolver" not in node
                and set(s) != {"CACHED"}}
    check(not executed, f"run 2 (same span): not cached: {executed}")
    check("Trainer" in states, f"run 2: no Trainer execution recorded at all: {states}")
    check(len(pushed_versions(config)) == 1, f"run 2: pushed versions {pushed_versions(config)}")
    say("  every component CACHED, no new push")


def _check_run_3(config, states) -> None:
    check(states.get("TableExampleGen") == ["COMPLETE"], f"run 3: ExampleGen {states.get('TableExampleGen')}")
    check(states.get("Trainer") == ["COMPLETE"], f"run 3: Trainer {states.get('Trainer')}")
    verdict = evaluation(config)
    blessed, versions = bool(verdict.get("blessed")), pushed_versions(config)
    check(verdict.get("baseline") is not None, "run 3: the Evaluator had no baseline (run 1's model)")
    bleu, baseline = verdict["candidate"]["bleu"], verdict["baseline"]["bleu"]
    check(blessed == (bleu >= config.evaluator["min_bleu"] and bleu >= baseline - config.evaluator["max_bleu_drop"]),
          f"run 3: blessed={blessed} disagrees with BLEU {bleu} vs baseline {baseline}")
    check(len(versions) == (2 if blessed else 1), f"run 3: blessed={blessed} but pushed versions {versions}")
    say(f"  BLEU gate: {'blessed, pushed ' + versions[-1] if blessed else 'not blessed, nothing pushed'}: "
        f"{verdict.get('message')}")


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="keep the work dir (logs, pipeline root, Airflow home)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds allowed per Airflow command")
    args = parser.parse_args(argv)
    if not os.path.exists(AIRFLOW_BIN):
        say(f"{AIRFLOW_BIN} is missing: run ./scripts/setup_airflow.sh first")
        return 2
    workdir = tempfile.mkdtemp(prefix="airflow-schedule-")
    start = time.monotonic()
    try:
        timings = scenario(workdir, args.timeout)
    except CheckFailed as failure:
        say(f"FAILED: {failure}")
        say(f"work dir kept: {workdir}")
        return 1
    except BaseException:
        say(f"work dir kept: {workdir}")
        raise
    say("wall times: " + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in timings.items())
        + f"; total {time.monotonic() - start:.0f} s")
    if args.keep:
        say(f"work dir kept: {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
