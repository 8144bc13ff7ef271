"""A test run leaves nothing behind in the temp directory (conftest.py)."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_a_beam_test_run_leaves_the_temp_directory_empty(tmp_path):
    # Beam's DirectRunner and TF's autograph write to the temp directory; the session's
    # conftest must catch and remove all of it.
    root = tmp_path / "tmp"
    root.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "beam_jobs/prepare_test.py::test_running_counts_reach_the_launcher_and_leave_nothing_behind"],
        cwd=ROOT, env={**os.environ, "TMPDIR": str(root)}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:]
    assert os.listdir(root) == []
