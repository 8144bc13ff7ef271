"""Progress lines with a fake clock and stream: TTY redraws vs plain lines every interval."""

import io

import pytest

from tablegen_tf import progress


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def _plain(clock, total=4000, interval=30.0):
    stream = io.StringIO()
    return progress.Progress("[3/7] Trainer", total=total, stream=stream, interval_seconds=interval,
                             tty=False, clock=clock), stream


def test_plain_stream_gets_one_line_per_interval_with_figures_and_eta():
    clock = Clock()
    bar, stream = _plain(clock)
    for step in range(20, 2401, 20):  # 2,400 steps over 120 s: 20 steps/s
        clock.now += 1.0
        bar.update_to(step, loss=1.2345, tokens_per_second=9120.0)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 4  # at 30, 60, 90, 120 s: never more often than the interval
    assert lines[-1] == "[3/7] Trainer 2,400/4,000 steps, loss 1.23, 9.1k tok/s, eta 1m"
    bar.close("[3/7] Trainer done in 2m00s")
    assert stream.getvalue().splitlines()[-1] == "[3/7] Trainer done in 2m00s"
    assert "\r" not in stream.getvalue()


def test_eta_ignores_the_steps_before_a_resumed_start():
    clock = Clock()
    bar, _ = _plain(clock, total=1000)
    bar.update_to(500)  # resumed at 500: no rate yet
    assert bar.eta_seconds() is None
    clock.now += 10
    bar.update_to(600)  # 100 steps in 10 s, 400 to go
    assert bar.eta_seconds() == pytest.approx(40.0)


def test_tty_redraws_one_line_and_close_clears_it():
    clock, stream = Clock(), io.StringIO()
    bar = progress.Progress("prepare", total=None, unit="example", stream=stream, tty=True, clock=clock)
    for _ in range(5):
        clock.now += 0.06  # redraws at most every 0.1 s
        bar.update(10)
    text = stream.getvalue()
    assert "\n" not in text and text.count("\r") == 2
    assert text.endswith("\rprepare 40 examples")
    bar.close("prepare: 50 examples")
    assert stream.getvalue().endswith("\rprepare: 50 examples\n")


def test_a_quiet_job_writes_nothing_until_closed():
    clock = Clock()
    bar, stream = _plain(clock)
    bar.update(5)
    assert stream.getvalue() == ""
    bar.close()
    bar.close("twice")  # idempotent
    assert stream.getvalue() == ""


@pytest.mark.parametrize("seconds, text", [(0.42, "0.4s"), (45, "45s"), (312, "5m12s"), (3725, "1h02m")])
def test_durations(seconds, text):
    assert progress.format_duration(seconds) == text


def test_stage_lines():
    assert progress.stage_line(3, 7, "Trainer") == "[3/7] Trainer …"
    assert progress.stage_line(3, 7, "Trainer", "done", 312.0, "4,000 steps") == "[3/7] Trainer done in 5m12s (4,000 steps)"
    assert progress.stage_line(1, 7, "ExampleGen", "cached") == "[1/7] ExampleGen cached"
    assert progress.format_rate(15700) == "16k" and progress.format_rate(950) == "950"


def test_active_stage_routes_reporters_to_its_label_and_stream():
    stream = io.StringIO()
    assert progress.for_active_stage("Trainer", total=10).label == "Trainer"
    with progress.active_stage("[5/7] Trainer", stream):
        bar = progress.for_active_stage("Trainer", total=10, tty=False, interval_seconds=0.0)
        bar.update(3)
    assert bar.label == "[5/7] Trainer" and bar.stream is stream
    assert stream.getvalue() == "[5/7] Trainer 3/10 steps\n"
    assert progress.current_stage() is None


def test_report_is_a_trainer_reporter():
    clock = Clock()
    bar, stream = _plain(clock, total=None, interval=0.0)
    bar.report(20, 100, {"loss": 2.5, "tokens_per_second": 15700.0})
    assert stream.getvalue() == "[3/7] Trainer 20/100 steps, loss 2.5, 16k tok/s\n"


def test_plain_lines_thin_out_on_long_jobs():
    clock = Clock()
    bar, stream = _plain(clock, total=100000)
    for step in range(1, 1201):  # 20 minutes, one update a second
        clock.now += 1.0
        bar.update_to(step * 10)
    lines = stream.getvalue().splitlines()
    assert 20 <= len(lines) <= 25  # 10 lines in the first 5 minutes, then ~10 per doubling
    assert lines[:2] == ["[3/7] Trainer 300/100,000 steps, eta 2h46m", "[3/7] Trainer 600/100,000 steps, eta 2h45m"]
