#!/usr/bin/env bash
# Apache Airflow 2.x beside the project, for running the tablegen DAG in a real scheduler:
#   ./scripts/setup.sh && ./scripts/setup_airflow.sh   -> .cache/airflow-venv/ (Python 3.11)
#   ./scripts/setup_airflow.sh --clean                 -> rebuild it from scratch
#
# Not part of scripts/setup.sh (CI does not install Airflow): benchmarks/airflow_schedule.py
# uses it; tfx_pipeline/README.md "Airflow" says why.
#
# Why a separate virtualenv: Airflow 2.11 needs rich<14 (Flask-AppBuilder -> Flask-Limiter 3),
# the project's import-linter needs rich>=14.2, so `pip install apache-airflow` into .venv
# would move a pinned package (`pip install --dry-run` shows rich 15.0.0 -> 13.9.4).
#
# How the project's stack is importable there: the airflow venv holds only Airflow and its
# own dependencies (requirements-airflow.txt), resolved with .venv's packages as pip
# constraints so every package both need (protobuf, grpcio, attrs, ...) is the project's
# version; then a .pth file calls site.addsitedir(.venv's site-packages), which APPENDS the
# project's packages after Airflow's and processes their .pth files too (the editable
# tablegen install, the glibc-compat ml-metadata/TFDV wheels are just packages there).
# Airflow's rich 13.9.4 shadows .venv's 15.0.0 -- the one package that differs; keras and
# our code only use rich's stable API. From a warm pip cache: 172 s with --clean on a busy
# 2-core machine (pip 65 s, the import check 27 s); a second full install of the stack
# (TensorFlow included) would take minutes more and duplicate 2 GB.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PROJECT_VENV="$ROOT/.venv"
AVENV="$ROOT/.cache/airflow-venv"
APY="$AVENV/bin/python"
STAMP="$AVENV/.tablegen-airflow-stamp"
PYTHON="${PYTHON:-python3.11}"

START=$SECONDS
log() { printf '[setup_airflow %s +%ss] %s\n' "$(date +%H:%M:%S)" "$((SECONDS - START))" "$*"; }
die() { log "ERROR: $*" >&2; exit 1; }

CLEAN=0
for arg in "$@"; do
  case "$arg" in
    --clean) CLEAN=1 ;;
    -h|--help) sed -n '2,21p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) die "unknown argument: $arg (try --help)" ;;
  esac
done

[[ -x "$PROJECT_VENV/bin/python" ]] || die ".venv is missing: run ./scripts/setup.sh first"
PROJECT_SITE="$("$PROJECT_VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
# The same pip as the project's venv: scripts/setup.sh is the one place that pins it.
PIP_VERSION="$("$PROJECT_VENV/bin/python" -m pip --version | cut -d' ' -f2)"

inputs_hash="$( { cat requirements-airflow.txt scripts/setup_airflow.sh "$PROJECT_VENV/.tablegen-setup-stamp"; echo "$PROJECT_SITE";
                  "$PYTHON" --version 2>&1; } | sha256sum | cut -d' ' -f1)"
if [[ $CLEAN == 0 && -x "$APY" && -f "$STAMP" && "$(cat "$STAMP")" == "$inputs_hash" ]]; then
  log "$AVENV is up to date (stamp matches)"
  exit 0
fi

[[ $CLEAN == 1 ]] && rm -rf "$AVENV"
if ! [[ -x "$APY" ]]; then
  log "creating $AVENV with $PYTHON"
  "$PYTHON" -m venv "$AVENV"
fi
rm -f "$STAMP"
PIP_OPTS=(--disable-pip-version-check --no-input)
[[ -t 1 ]] || PIP_OPTS+=(--progress-bar off)
"$APY" -m pip install "${PIP_OPTS[@]}" -q "pip==$PIP_VERSION"

# Every package .venv has, at its version, constrains the resolve (transitive ones too:
# attrs, tenacity, ... would otherwise resolve newer here and shadow .venv's).
constraints="$AVENV/project-constraints.txt"
"$PROJECT_VENV/bin/python" -m pip freeze --exclude-editable --disable-pip-version-check | grep -v -e ' @ ' -e '^rich==' > "$constraints"   # rich: see above
log "installing Airflow (requirements-airflow.txt, constrained by .venv's packages)"
"$APY" -m pip install "${PIP_OPTS[@]}" -q -r requirements-airflow.txt -c "$constraints"

AIRFLOW_SITE="$("$APY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
# Named to sort last: site processes .pth files in name order, and addsitedir appends.
echo "import site; site.addsitedir('$PROJECT_SITE')" > "$AIRFLOW_SITE/zz_tablegen_project.pth"

log "checking: Airflow, TFX's AirflowDagRunner and the project import in $AVENV"
check_log="$AVENV/check.log"
if ! "$APY" - >"$check_log" 2>&1 <<'EOF'
import importlib.metadata as md
import sys

import airflow
import tensorflow
import tfx
from tfx.orchestration.airflow.airflow_dag_runner import AirflowDagRunner  # noqa: F401

import tfx_pipeline.pipeline  # noqa: F401

# Packages present in both trees must be one version (rich is the known exception).
seen, clashes = {}, []
for dist in md.distributions():
    name = dist.metadata["Name"].lower().replace("_", "-")
    if name in seen and seen[name] != dist.version and name != "rich":
        clashes.append(f"{name} {seen[name]} (airflow venv) vs {dist.version} (.venv)")
    seen.setdefault(name, dist.version)
if clashes:
    sys.exit("version clashes between the airflow venv and .venv:\n  " + "\n  ".join(clashes))
print(f"airflow {airflow.__version__}, tfx {tfx.__version__}, tensorflow {tensorflow.__version__}")
EOF
then
  tail -n 20 "$check_log" >&2
  die "the check failed (log: $check_log)"
fi
log "$(tail -n 1 "$check_log")"
echo "$inputs_hash" > "$STAMP"
log "done in $((SECONDS - START))s: $AVENV/bin/airflow"
