"""Progress of long jobs that reads well on a terminal and in a CI log.

* ``stage_line(3, 7, "Trainer")`` -> ``[3/7] Trainer …``; with a status and wall time
  ``[3/7] Trainer done in 5m12s (4,000 steps)``.
* ``Progress(label, total)``: ``update(n, **figures)`` / ``update_to(count, **figures)``.
  On a TTY it redraws one live line (at most 10 times a second); elsewhere it writes a
  plain line at most every ``interval_seconds`` (and, past ten of them, every tenth of the
  elapsed time, so an hour-long job stays readable in a CI log)::

      [3/7] Trainer 2,400/4,000 steps, loss 1.23, 9.1k tok/s, eta 3m

  ``close(summary)`` ends the line (TTY) or writes a final one.
  ``report(step, total, figures)`` is the trainer's reporter signature.
* ``active_stage(label, stream)``: a caller (the pipeline runner) names the stage in
  progress and the stream user-facing output goes to; code running inside it (the
  Trainer's run_fn) builds its reporter with ``for_active_stage()``.

Standard library only: usable from the trainer, the CLI and Beam workers alike.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
import sys
import time
from typing import Callable, Dict, IO, Iterator, Optional

TTY_REDRAW_SECONDS = 0.1
LOG_LINES_PER_DOUBLING = 10  # plain lines: about 10 per doubling of the elapsed time past 10 intervals


def format_duration(seconds: float) -> str:
    """0.4s, 45s, 3m12s, 1h02m."""
    if seconds < 10:
        return f"{seconds:.1f}s"
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def format_eta(seconds: float) -> str:
    """Coarse: 40s, 3m, 1h05m."""
    if seconds < 60:
        return f"{int(math.ceil(seconds))}s"
    if seconds < 3600:
        return f"{int(round(seconds / 60))}m"
    return format_duration(seconds)


def format_rate(value: float) -> str:
    """950, 9.1k, 12k, 1.5M."""
    for factor, suffix in ((1e6, "M"), (1e3, "k")):
        if value >= factor:
            scaled = value / factor
            return f"{scaled:.1f}{suffix}" if scaled < 10 else f"{scaled:.0f}{suffix}"
    return f"{value:.0f}"


def format_figure(name: str, value) -> str:
    if name == "tokens_per_second":
        return f"{format_rate(float(value))} tok/s"
    if isinstance(value, float):
        return f"{name} {value:.3g}" if abs(value) < 1000 else f"{name} {value:,.0f}"
    if isinstance(value, int):
        return f"{name} {value:,}"
    return f"{name} {value}"


def stage_line(index: int, total: int, name: str, status: str = "", seconds: Optional[float] = None,
               detail: str = "") -> str:
    """`[i/n] Name …` (started) or `[i/n] Name status in 3m12s (detail)`."""
    head = f"[{index}/{total}] {name}"
    if not status:
        return f"{head} …"
    line = f"{head} {status}"
    if seconds is not None:
        line += f" in {format_duration(seconds)}"
    return f"{line} ({detail})" if detail else line


class Progress:
    """Counts work and shows it: a live line on a TTY, a plain line every interval otherwise."""

    def __init__(self, label: str, total: Optional[int] = None, unit: str = "step",
                 stream: Optional[IO[str]] = None, interval_seconds: float = 30.0,
                 tty: Optional[bool] = None, clock: Callable[[], float] = time.monotonic):
        self.label, self.total, self.unit = label, total, unit
        self.stream = stream if stream is not None else sys.stdout
        self.tty = _isatty(self.stream) if tty is None else tty
        self.interval = TTY_REDRAW_SECONDS if self.tty else interval_seconds
        self.clock = clock
        self.count = 0
        self.figures: Dict[str, object] = {}
        self._start = self._last_shown = clock()
        self._first_count: Optional[int] = None
        self._first_time = self._start
        self._drawn = 0  # width of the live line on a TTY
        self._closed = False

    def update(self, n: int = 1, **figures) -> None:
        self.update_to(self.count + n, **figures)

    def update_to(self, count: int, **figures) -> None:
        """Sets the absolute count (e.g. a trainer's global step)."""
        self.count = count
        if self._first_count is None:  # the rate counts from the first report (a resumed run starts late)
            self._first_count, self._first_time = count, self.clock()
        self.figures.update(figures)
        now = self.clock()
        if now - self._last_shown >= self._gap(now):
            self._last_shown = now
            self._show(self.line())

    def _gap(self, now: float) -> float:
        # Without a TTY the gap grows with the elapsed time (a tenth of it), so a long job
        # writes a few dozen lines in all, not one every interval for an hour.
        return self.interval if self.tty else max(self.interval, (now - self._start) / LOG_LINES_PER_DOUBLING)

    def report(self, step: int, total: Optional[int], figures: Dict[str, object]) -> None:
        """A trainer's reporter: ``Trainer.train(reporter=progress.report)``."""
        if total:
            self.total = total
        self.update_to(step, **figures)

    def eta_seconds(self) -> Optional[float]:
        if not self.total or self._first_count is None:
            return None
        done, elapsed = self.count - self._first_count, self.clock() - self._first_time
        if done <= 0 or elapsed <= 0:
            return None
        return max(self.total - self.count, 0) * elapsed / done

    def line(self) -> str:
        units = self.unit if self.count == 1 and not self.total else f"{self.unit}s"
        count = f"{self.count:,}/{self.total:,}" if self.total else f"{self.count:,}"
        parts = [f"{self.label} {count} {units}"]
        parts += [format_figure(k, v) for k, v in self.figures.items() if v is not None]
        eta = self.eta_seconds()
        if eta is not None and self.count < (self.total or 0):
            parts.append(f"eta {format_eta(eta)}")
        return ", ".join(parts)

    def message(self, text: str) -> None:
        """A line of its own above the live line (TTY), or just the line (log)."""
        if self.tty and self._drawn:
            self._write("\r" + " " * self._drawn + "\r" + text + "\n")
            self._drawn = 0
            self._show(self.line())
        else:
            self._write(text + "\n")

    def close(self, summary: str = "") -> None:
        """Ends the live line (TTY) and writes `summary` if given."""
        if self._closed:
            return
        self._closed = True
        if self.tty and self._drawn:
            self._write("\r" + " " * self._drawn + "\r")
        if summary:
            self._write(summary + "\n")

    @property
    def elapsed(self) -> float:
        return self.clock() - self._start

    def _show(self, line: str) -> None:
        if self.tty:
            width = _terminal_width(self.stream) - 1
            line = line[:width]
            self._write("\r" + line + " " * max(self._drawn - len(line), 0))
            self._drawn = len(line)
        else:
            self._write(line + "\n")

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _terminal_width(stream) -> int:
    import os
    import shutil

    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return shutil.get_terminal_size().columns


# ------------------------------------------------------------------ the stage in progress


@dataclasses.dataclass(frozen=True)
class ActiveStage:
    label: str  # e.g. "[5/7] Trainer"
    stream: IO[str]  # where user-facing progress goes (the console, not a log file)


_ACTIVE: contextvars.ContextVar[Optional[ActiveStage]] = contextvars.ContextVar("tablegen_stage", default=None)


@contextlib.contextmanager
def active_stage(label: str, stream: Optional[IO[str]] = None) -> Iterator[ActiveStage]:
    stage = ActiveStage(label, stream if stream is not None else sys.stdout)
    token = _ACTIVE.set(stage)
    try:
        yield stage
    finally:
        _ACTIVE.reset(token)


def current_stage() -> Optional[ActiveStage]:
    return _ACTIVE.get()


def for_active_stage(default_label: str, total: Optional[int] = None, unit: str = "step", **kwargs) -> Progress:
    """A Progress labelled and routed like the active stage (or `default_label` on stdout)."""
    stage = current_stage()
    if stage is None:
        return Progress(default_label, total=total, unit=unit, **kwargs)
    return Progress(stage.label, total=total, unit=unit, stream=stage.stream, **kwargs)
