"""benchmarks/serving_load.py: with several rounds the targets are judged on the median of
each round's side-by-side ratios, and one noisy round cannot flip the verdict."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import serving_load  # noqa: E402

LEVELS = [1, 16]


def one_round(grpc_c16_rps: float, batched_rps: float = 200.0):
    local = {1: {"p50": 10.0, "rps": 100.0}, 16: {"p50": 90.0, "rps": 150.0}}
    remote = {1: {"p50": 11.0, "rps": 80.0}, 16: {"p50": 95.0, "rps": grpc_c16_rps}}
    return local, remote, {"rps": batched_rps}


def test_ratios_are_taken_within_one_round():
    figures = serving_load.ratios(*one_round(180.0), LEVELS)
    assert abs(figures["overhead"] - 1.1) < 1e-9
    assert abs(figures["scaling"] - 180.0 / 80.0) < 1e-9
    assert abs(figures["bound"] - 2.0) < 1e-9
    assert abs(figures["versus_batched"] - 0.9) < 1e-9


def test_the_verdict_follows_the_median_round(capsys):
    serving_load.report([one_round(190.0), one_round(120.0), one_round(185.0)], LEVELS)
    out = capsys.readouterr().out
    assert "0.93x in-process batches of 16 (median of 3 rounds, 0.60-0.95) (target >= 0.9x): met" in out
    serving_load.report([one_round(120.0)], LEVELS)
    out = capsys.readouterr().out
    assert "0.60x in-process batches of 16 (target >= 0.9x): MISSED" in out
    assert "median" not in out


def test_each_level_reports_the_batches_the_server_merged():
    from serving.metrics import Metrics

    metrics = Metrics(["m"])
    before = serving_load.parse_batch_totals(metrics.exposition().decode(), "m")
    on_batch = metrics.batch_observer("m", "serving_default")
    for rows in (8, 8, 5):
        on_batch(rows, 0.001, 0.02)
    metrics.batch_observer("m", "generate")(64, 0.0, 1.0)  # another signature: not counted
    after = serving_load.parse_batch_totals(metrics.exposition().decode(), "m")
    assert before == (0.0, 0.0) and after == (3.0, 21.0)
    assert serving_load.batch_fill(before, after) == "  (batches: 3, mean 7.00 rows)"
    assert serving_load.batch_fill(None, after) == "" and serving_load.batch_fill(after, after) == ""
