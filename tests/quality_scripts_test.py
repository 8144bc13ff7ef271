"""The quality-run scripts' shell parts: they parse, and scripts/lanes.sh gives one TF thread
per member and stops the other lanes when one fails (no training left running)."""
import pathlib
import subprocess
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPTS = ["scripts/e2e_quality_run.sh", "scripts/webnlg_quality_run.sh"]


def _bash(script: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("path", SCRIPTS)
def test_quality_script_parses(path):
    result = subprocess.run(["bash", "-n", path], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_one_thread_sets_one_tf_thread():
    result = _bash("source scripts/lanes.sh; one_thread 7 env")
    assert result.returncode == 0, result.stderr
    assert "TF_NUM_INTRAOP_THREADS=1" in result.stdout.splitlines()
    assert "TF_NUM_INTEROP_THREADS=1" in result.stdout.splitlines()


def test_a_failed_lane_stops_the_others(tmp_path):
    marker = tmp_path / "survivor"
    # The long lane would write its marker after 3 s; the failing lane ends the script first.
    script = f"""set -euo pipefail
source scripts/lanes.sh
{{ sleep 3; touch {marker}; }} & long=$!
{{ sleep 0.2; false; }} & failing=$!
wait $failing
wait $long
"""
    result = _bash(script)
    assert result.returncode != 0
    time.sleep(4)  # past the survivor's 3 s
    assert not marker.exists()
