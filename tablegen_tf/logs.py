"""Quiet console, full log file: what a long tablegen job prints and where.

Two layers, both standard library only (nothing heavy is imported here):

* ``configure(verbose, log_file)``: Python logging. Every logger (TF, absl, Beam,
  TFX, TFDV, ...) propagates to two root handlers: the console gets WARNING and up
  minus ``KNOWN_NOISE`` (everything from INFO with ``verbose``), the log file gets
  DEBUG and up, noise included.
* ``capture_output()``: the output nobody routes through Python logging -- TF's C++
  logging, Beam's multi-process DirectRunner workers (child processes inheriting our
  stderr), ``print`` calls in executors -- is written to file descriptors 1 and 2
  directly. We point both descriptors at a pipe read by a thread that logs each line
  (logger ``tablegen.output``): into the log file, and to the console only if it
  looks like a warning or an error and is not known noise. The user-facing console
  (progress, report) keeps duplicates of the original descriptors.

Why descriptors rather than environment variables such as TF_CPP_MIN_LOG_LEVEL: those
must be set before TensorFlow is imported (any earlier import defeats them), they do
not reach Beam workers' Python logging or third-party prints, and they drop the
messages instead of keeping them in the log file.

``session(verbose, log_file)`` does both and undoes both; with ``verbose`` nothing is
redirected and the console shows everything, as without tablegen's help.
"""

from __future__ import annotations

import contextlib
import dataclasses
import faulthandler
import logging
import os
import re
import subprocess
import sys
import threading
from typing import IO, Iterator, Optional

# Harmless messages of the TF / Beam / TFX stack on a CPU machine (regular expressions,
# searched in each raw output line, and in "LEVEL:logger:message" of each log record, the
# form Beam workers print). They stay in the log file.
KNOWN_NOISE = (
    # TensorFlow C++ start-up on a machine without GPU
    r"Could not find cuda drivers",
    r"failed call to cuInit",
    r"All log messages before absl::InitializeLog\(\) is called are written to STDERR",
    r"This TensorFlow binary is optimized to use available CPU instructions",
    r"To enable the following instructions: .*rebuild TensorFlow",
    r"oneDNN custom operations are on",
    r"Unable to register cu(?:DNN|FFT|BLAS) factory",
    r"computation placer already registered",
    r"TF-TRT Warning",
    r"successful NUMA node read",
    r"oneDNN supports DT_\w+ only on platforms with",  # an int op falls back to Eigen: same results
    # the persistent XLA cache (serving/xla_cache.py) reading an entry: TF tries the text
    # format before the binary one, and XLA's CPU loader counts LLVM tuning flags as ISA
    # features (openxla/xla#44565); the entry still loads (a cached first call 0.10-0.15 s
    # against 0.23-0.25 s compiled, 2026-12-04)
    r"Error parsing text-format tensorflow\.XlaSerializedCacheEntry",
    r"Loading XLA:CPU AOT result\. Target machine feature \+prefer-no-(?:gather|scatter) is not",
    # multi-worker training: a peer that finished (or died) first; `tablegen train` says
    # which worker stopped in its own words
    r"StartAbort UNAVAILABLE: .*stopped sending heartbeats",
    # TFX orchestration chatter and ML Metadata without ZetaSQL
    r"Component \S+ is (?:running|finished)",
    r"ArtifactQuery\.property_predicate is not supported",
    r"Fallback to non-ZetaSQL",
    # Beam DirectRunner workers and pickling (INFO / WARNING only: their errors are real)
    r"Discarding unparseable args",
    r"No semi_persistent_directory found",
    r"^(?:INFO|WARNING):apache_beam\.(?:runners|internal\.\w*pickler)",
    r"Make sure that locally built Python SDK docker image",
    # TFDV / tfx-bsl (INFO / WARNING only)
    r"^(?:INFO|WARNING):(?:tensorflow_data_validation|tfx_bsl)\b",
    r"Tensorflow version .* found\. Note that TFX",
)
_NOISE = re.compile("|".join(f"(?:{pattern})" for pattern in KNOWN_NOISE))
# Raw output lines worth showing: C++ W/E/F log lines, Python level prefixes, errors.
_ALERT = re.compile(r"^\s*(?:[WEF]\d{4} |(?:WARNING|ERROR|CRITICAL|FATAL)\b|Traceback |[\w.]+(?:Error|Exception)\b:?)")
OUTPUT_LOGGER = "tablegen.output"
FILE_FORMAT = "%(asctime)s %(levelname).1s %(name)s: %(message)s"


def is_noise(text: str) -> bool:
    return bool(_NOISE.search(text))


def is_alert(line: str) -> bool:
    """A raw output line the console should show (a warning or error, not known noise)."""
    return bool(_ALERT.match(line)) and not is_noise(line)


class NoiseFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        try:
            return not is_noise(f"{record.levelname}:{record.name}:{record.getMessage()}")
        except Exception:  # a record whose arguments do not format: let the handler report it
            return True


class _ConsoleFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        message = super().format(record)
        return message if record.name == OUTPUT_LOGGER else f"{record.levelname.lower()}: {message}"


_OURS = "_tablegen_handler"


def configure(verbose: bool = False, log_file: Optional[str] = None,
              console: Optional[IO[str]] = None) -> None:
    """Root handlers: console (WARNING+, noise hidden; INFO+ with verbose) and log file (DEBUG+).

    Replaces the root's other handlers (basicConfig's, absl's) so nothing is printed twice;
    loggers that TF/absl gave handlers of their own propagate to the root instead.
    """
    root = logging.getLogger()
    reset()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    console_handler = logging.StreamHandler(console if console is not None else sys.stderr)
    console_handler.setLevel(logging.INFO if verbose else logging.WARNING)
    console_handler.setFormatter(_ConsoleFormatter("%(message)s"))
    if not verbose:
        console_handler.addFilter(NoiseFilter())
    handlers = [console_handler]
    if log_file:
        file_handler = _LazyFileHandler(log_file)
        file_handler.setLevel(logging.DEBUG)
        file_handler.setFormatter(logging.Formatter(FILE_FORMAT))
        handlers.append(file_handler)
    for handler in handlers:
        setattr(handler, _OURS, True)
        root.addHandler(handler)
    root.setLevel(logging.DEBUG if log_file else console_handler.level)
    for name in ("absl", "tensorflow", "apache_beam", "tfx", "ml_metadata", "tensorflow_data_validation",
                 "tfx_bsl", "tensorflow_transform", "tensorflow_model_analysis", "keras", "py.warnings"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.setLevel(logging.NOTSET)
        logger.propagate = True
    _quiet_chatty_libraries()
    logging.captureWarnings(True)


class _LazyFileHandler(logging.FileHandler):
    """A log file (and its directory) created at its first record: a command refused
    before it logs anything (a usage error) leaves no empty log behind."""

    def __init__(self, path: str):
        super().__init__(path, encoding="utf-8", delay=True)

    def _open(self):
        os.makedirs(os.path.dirname(self.baseFilename), exist_ok=True)
        return super()._open()


def _quiet_chatty_libraries() -> None:
    # DEBUG of these floods the log file without telling anything about the run.
    for name in ("urllib3", "google.auth", "h5py", "matplotlib", "PIL", "filelock", "fsspec", "asyncio"):
        logging.getLogger(name).setLevel(logging.INFO)


def reset() -> None:
    """Removes (and closes) the handlers configure() added."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, _OURS, False):
            root.removeHandler(handler)
            handler.close()
    logging.captureWarnings(False)


@dataclasses.dataclass
class Console:
    """Where user-facing output goes while descriptors 1 and 2 are captured."""

    out: IO[str]
    err: IO[str]


class _Capture:
    """Descriptors 1 and 2 -> a pipe pumped into logger ``tablegen.output`` by a thread."""

    def start(self) -> Console:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        self.saved = {fd: os.dup(fd) for fd in (1, 2)}
        self.console = Console(*(_console_stream(stream, self.saved[fd])
                                 for fd, stream in ((1, sys.stdout), (2, sys.stderr))))
        read_end, write_end = os.pipe()
        self.reader = threading.Thread(target=_pump, args=(read_end,), name="tablegen-output", daemon=True)
        self.reader.start()
        for fd in (1, 2):
            os.dup2(write_end, fd)
        os.close(write_end)
        self.faulthandler_was_enabled = faulthandler.is_enabled()
        faulthandler.enable(file=self.saved[2])  # a crash dump must reach the console, not the pipe
        return self.console

    def restore(self) -> None:
        """Original descriptors back; waits for the pipe to drain (EOF once no child holds it)."""
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        faulthandler.disable()
        for fd, original in self.saved.items():
            os.dup2(original, fd)
            os.close(original)
        if self.faulthandler_was_enabled:
            try:
                faulthandler.enable(file=sys.stderr)
            except (AttributeError, OSError, ValueError):  # a stderr without a descriptor (capsys)
                faulthandler.enable(file=2)
        self.reader.join(timeout=5.0)

    def close(self) -> None:
        for stream in (self.console.out, self.console.err):
            if getattr(stream, _OWNED, False):
                stream.close()


_OWNED = "_tablegen_console"


def _console_stream(stream, saved_fd: int):
    """A writer to what descriptor 1/2 was. A stream without a descriptor (pytest's capsys,
    an in-memory buffer) is kept as is: writing to it never reaches the descriptors."""
    try:
        stream.fileno()
    except (AttributeError, OSError, ValueError):
        return stream
    console = os.fdopen(os.dup(saved_fd), "w", buffering=1, encoding="utf-8", errors="replace")
    setattr(console, _OWNED, True)
    return console


@contextlib.contextmanager
def capture_output(enabled: bool = True) -> Iterator[Console]:
    """Points descriptors 1 and 2 at a pipe whose lines go to logger ``tablegen.output``
    (INFO; WARNING for alert lines); yields the console (the original descriptors)."""
    if not enabled:
        yield Console(sys.stdout, sys.stderr)
        return
    capture = _Capture()
    console = capture.start()
    try:
        yield console
    finally:
        capture.restore()
        capture.close()


def _pump(read_end: int) -> None:
    logger = logging.getLogger(OUTPUT_LOGGER)
    pending = b""
    with os.fdopen(read_end, "rb", buffering=0) as pipe:
        while True:
            chunk = pipe.read(65536)
            if not chunk:
                break
            lines = re.split(rb"\r\n|\r|\n", pending + chunk)
            pending = lines.pop()
            for line in lines:
                _log_line(logger, line)
    if pending:
        _log_line(logger, pending)


def _log_line(logger: logging.Logger, raw: bytes) -> None:
    line = raw.decode("utf-8", errors="replace").rstrip()
    if line:
        logger.log(logging.WARNING if is_alert(line) else logging.INFO, "%s", line)


# The filter process: ignores the terminal's Ctrl-C and a process group's SIGTERM (the
# server logs its shutdown after them) and ends at end of file, when every writer is gone.
_FILTER_PROCESS = """
import re, signal, sys
for number in (signal.SIGINT, signal.SIGTERM):
    signal.signal(number, signal.SIG_IGN)
noise, out = re.compile(sys.argv[1]), sys.stdout.buffer
for line in sys.stdin.buffer:
    if not noise.search(line.decode("utf-8", "replace")):
        out.write(line)
        out.flush()
"""


def drop_known_noise(fd: int = 2) -> subprocess.Popen:
    """For a long-running command that keeps logging to the console (`tablegen serve`):
    what is written to descriptor ``fd`` -- TF's C++ logging included -- passes through a
    child process that drops the lines matching KNOWN_NOISE and passes every other line
    on at once. A process, not a thread: it drains the pipe after this process dies, so
    the last lines before a crash (a C++ check failure) still reach the console."""
    sys.stderr.flush()
    original = os.dup(fd)
    read_end, write_end = os.pipe()
    try:
        child = subprocess.Popen([sys.executable, "-S", "-c", _FILTER_PROCESS, _NOISE.pattern],
                                 stdin=read_end, stdout=original, stderr=original)
    finally:
        os.close(read_end)
        os.close(original)
    os.dup2(write_end, fd)
    os.close(write_end)
    return child


@contextlib.contextmanager
def session(verbose: bool = False, log_file: Optional[str] = None) -> Iterator[Console]:
    """capture_output (unless verbose) + configure; both undone on exit, the pipe drained first."""
    capture = None if verbose else _Capture()
    console = capture.start() if capture else Console(sys.stdout, sys.stderr)
    try:
        configure(verbose, log_file, console.err)
        yield console
    finally:
        if capture:
            capture.restore()
        reset()
        if capture:
            capture.close()
