"""The layer contract (pyproject.toml [tool.importlinter]) holds, and it can fail."""

import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("tablegen_cli", "tfx_pipeline", "serving", "beam_jobs", "tablegen_tf")
LINT_IMPORTS = os.path.join(os.path.dirname(sys.executable), "lint-imports")


def _lint(root):
    env = {**os.environ, "PYTHONPATH": root}
    return subprocess.run([LINT_IMPORTS, "--no-cache"], cwd=root, env=env, capture_output=True, text=True,
                          timeout=300)


def test_layers_only_point_down():
    result = _lint(ROOT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def test_a_wrong_way_import_breaks_the_contract(tmp_path):
    for package in PACKAGES:
        shutil.copytree(os.path.join(ROOT, package), tmp_path / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(os.path.join(ROOT, "pyproject.toml"), tmp_path)
    schema = tmp_path / "tablegen_tf" / "schema.py"
    schema.write_text(schema.read_text() + "\nfrom beam_jobs import prepare  # noqa: E402,F401\n")
    result = _lint(str(tmp_path))
    assert result.returncode != 0
    assert "tablegen_tf is not allowed to import beam_jobs" in result.stdout, result.stdout[-3000:]
