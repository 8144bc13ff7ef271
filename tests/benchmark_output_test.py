"""The benchmarks that score files print their figures and nothing of TF's start-up chatter."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

DEV_CSV = (
    "mr,ref\n"
    '"name[The Eagle], food[French]","The Eagle serves French food."\n'
    '"name[The Mill], area[riverside]","The Mill is by the riverside."\n'
)


def test_paired_bootstrap_prints_its_table_and_keeps_stderr_empty(tmp_path):
    (tmp_path / "dev.csv").write_text(DEV_CSV, encoding="utf-8")
    (tmp_path / "a.txt").write_text("The Eagle serves French food.\nThe Mill is riverside.\n", encoding="utf-8")
    (tmp_path / "b.txt").write_text("The Eagle is French.\nThe Mill is by the riverside.\n", encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "paired_bootstrap.py"), "--samples", "20",
         "--format", "e2e", "--input", str(tmp_path / "dev.csv"), str(tmp_path / "a.txt"), str(tmp_path / "b.txt")],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "0"})  # the chatter a plain TF import prints
    assert proc.returncode == 0, proc.stderr
    assert "2 inputs, 20 paired bootstrap resamples" in proc.stdout
    assert f"| {tmp_path / 'b.txt'} |" in proc.stdout
    assert proc.stderr == ""


def test_paired_bootstrap_compares_large_tables_only_when_asked(tmp_path):
    (tmp_path / "dev.csv").write_text(DEV_CSV + '"name[The Rice], food[Thai], area[city centre]","The Rice is Thai."\n',
                                      encoding="utf-8")
    for name in ("a", "b"):
        (tmp_path / f"{name}.txt").write_text("The Eagle.\nThe Mill.\nThe Rice is Thai.\n", encoding="utf-8")
    command = [sys.executable, os.path.join(ROOT, "benchmarks", "paired_bootstrap.py"), "--samples", "20",
               "--format", "e2e", "--input", str(tmp_path / "dev.csv"), str(tmp_path / "a.txt"), str(tmp_path / "b.txt")]
    proc = subprocess.run(command + ["--min-fields", "3"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "1 inputs with >= 3 fields, 20 paired bootstrap resamples" in proc.stdout
    assert "| 100.00 |" in proc.stdout  # only the 3-field table, which both texts match exactly
    proc = subprocess.run(command + ["--min-fields", "4"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 1 and "--min-fields" in proc.stderr


def test_a_benchmarks_own_errors_still_reach_stderr():
    """Only descriptor-level chatter is kept off the console: argparse's usage error (Python's
    stderr) is shown, with its exit status."""
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "paired_bootstrap.py"), "--samples", "many"],
        capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 2
    assert "--samples: invalid int value: 'many'" in proc.stderr


def test_route_by_unseen_values_takes_the_candidate_only_for_new_values(tmp_path):
    (tmp_path / "train.csv").write_text(DEV_CSV, encoding="utf-8")  # trains on French food only
    (tmp_path / "held.csv").write_text('mr,ref\n"name[The Eagle], food[French]","The Eagle serves French food."\n'
                                       '"name[The Rice], food[Thai]","The Rice serves Thai food."\n', encoding="utf-8")
    (tmp_path / "control.txt").write_text("The Eagle serves French food.\nThe Rice.\n", encoding="utf-8")
    (tmp_path / "candidate.txt").write_text("The Eagle.\nThe Rice serves Thai food.\n", encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "route_by_unseen_values.py"), "--format", "e2e",
         "--input", str(tmp_path / "held.csv"), "--split", "valid", "--train-input", str(tmp_path / "train.csv"),
         "--train-selection-fraction", "0", "--field", "food", "--output", str(tmp_path / "routed.txt"),
         str(tmp_path / "control.txt"), str(tmp_path / "candidate.txt")],
        capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "2 inputs, 1 with a food no training row has (1 seen)" in proc.stdout
    assert "| routed | 100.00 |" in proc.stdout
    assert (tmp_path / "routed.txt").read_text(encoding="utf-8").splitlines() == [
        "The Eagle serves French food.", "The Rice serves Thai food."]
