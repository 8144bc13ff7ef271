"""Console vs log file: noise hidden from the console but kept in the file, real warnings shown."""

import io
import logging
import os
import subprocess
import sys
import textwrap

import pytest

from tablegen_tf import logs

# Lines seen on the console of `tablegen pipeline run` before tablegen_tf.logs.
SEEN_NOISE = [
    "I0000 00:00:1795425773.516684    3672 cudart_stub.cc:31] Could not find cuda drivers on your machine, "
    "GPU will not be used.",
    "E0000 00:00:1795425969.431699    4846 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: "
    "Failed call to cuInit: UNKNOWN ERROR (303)",
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "I0000 00:00:1795425773.623176    3672 cpu_feature_guard.cc:227] This TensorFlow binary is optimized to use "
    "available CPU instructions in performance-critical operations.",
    "To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow with the "
    "appropriate compiler flags.",
    "WARNING:absl:ArtifactQuery.property_predicate is not supported.",
    "WARNING:absl:Fallback to non-ZetaSQL contexts execution query due to: filter_query is not supported",
    "WARNING:apache_beam.runners.portability.local_job_service:Worker: severity: WARN message: "
    "\"Discarding unparseable args: ['--pipeline_type_check']\"",
    "INFO:absl:Component Trainer is running.",
    "E0000 00:00:1795540756.417323   10555 util.cc:131] oneDNN supports DT_INT32 only on platforms with "
    "AVX-512. Falling back to the default Eigen-based implementation if present.",
    # `tablegen serve` at each version load with the XLA cache (2026-12-04)
    "E0000 00:00:1796414297.170619   17982 text_format.cc:378] Error parsing text-format "
    "tensorflow.XlaSerializedCacheEntry: 2:1: Expected identifier, got: 6",
    "E0000 00:00:1796414297.187725   17982 cpu_aot_loader.cc:220] Loading XLA:CPU AOT result. Target machine "
    "feature +prefer-no-scatter is not  supported on the host machine. Machine type used for XLA:CPU "
    "compilation doesn't match the machine type for execution. Compile machine features: [+64bit,+adx]",
]


@pytest.mark.parametrize("line", SEEN_NOISE)
def test_known_noise_is_recognised(line):
    assert logs.is_noise(line)
    assert not logs.is_alert(line)


def test_real_warnings_and_errors_are_not_noise():
    for line in ("W0000 00:00:1.0 1 op_kernel.cc:1] OUT_OF_RANGE: End of sequence in a loop",
                 "ERROR:root:Trainer failed", "Traceback (most recent call last):",
                 "ValueError: no input file matches /data/*.csv",
                 "ERROR:apache_beam.runners.worker.sdk_worker:Error processing instruction 3",
                 "_pickle.PicklingError: Can't pickle <function <lambda>>"):
        assert logs.is_alert(line), line
    assert not logs.is_alert("tablegen run_fn: TrainResult(steps=6)")  # plain output: log file only


@pytest.fixture
def configured(tmp_path):
    console = io.StringIO()
    yield console, tmp_path / "logs" / "run.log"
    logs.reset()


def test_console_gets_warnings_without_noise_and_the_file_gets_everything(configured):
    console, log_file = configured
    logs.configure(verbose=False, log_file=str(log_file), console=console)
    logging.getLogger("absl").info("Component %s is running.", "Trainer")
    logging.getLogger("absl").warning("ArtifactQuery.property_predicate is not supported.")
    logging.getLogger("apache_beam.io").info("wrote 3 shards")
    logging.getLogger("apache_beam.runners.worker").warning("Pickling fallback")  # Beam noise, by logger
    logging.getLogger("apache_beam.runners.worker").error("Error processing instruction")
    logging.getLogger("tfx_pipeline").warning("disk almost full")
    assert console.getvalue() == "error: Error processing instruction\nwarning: disk almost full\n"
    text = log_file.read_text()
    for message in ("Component Trainer is running.", "property_predicate", "wrote 3 shards", "disk almost full"):
        assert message in text


def test_the_log_file_and_its_directory_appear_at_the_first_record(configured, tmp_path):
    console, _ = configured
    log_file = tmp_path / "run" / "logs" / "command.log"
    logs.configure(verbose=False, log_file=str(log_file), console=console)
    assert not log_file.parent.exists()  # a command refused before logging leaves nothing
    logging.getLogger("tablegen").debug("started")
    assert "started" in log_file.read_text()


def test_verbose_console_shows_info_and_noise(configured):
    console, _ = configured
    logs.configure(verbose=True, console=console)
    logging.getLogger("absl").info("Component %s is running.", "Trainer")
    assert "Component Trainer is running." in console.getvalue()


def test_reset_removes_only_our_handlers(configured):
    console, _ = configured
    other = logging.NullHandler()
    logs.configure(console=console)
    logging.getLogger().addHandler(other)
    logs.reset()
    assert logging.getLogger().handlers == [other]
    logging.getLogger().removeHandler(other)


SESSION_SCRIPT = textwrap.dedent("""
    import logging, os, subprocess, sys
    from tablegen_tf import logs
    with logs.session(verbose={verbose}, log_file=sys.argv[1]) as console:
        print("plain print from an executor")
        os.write(2, b"I0000 00:00:1.0 1 cudart_stub.cc:31] Could not find cuda drivers on your machine\\n")
        subprocess.run([sys.executable, "-c", "import sys; print('E0000 00:00:1.0 7 worker.cc:1] worker broke', "
                        "file=sys.stderr); print('WARNING: All log messages before absl::InitializeLog() is "
                        "called are written to STDERR', file=sys.stderr)"], check=True)
        logging.getLogger("absl").warning("Fallback to non-ZetaSQL contexts execution query")
        logging.getLogger("tfx_pipeline").warning("a real warning")
        console.out.write("[1/7] ExampleGen done\\n")
    print("after the session")
""")


def _run_session(tmp_path, verbose):
    log_file = tmp_path / "session.log"
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run([sys.executable, "-c", SESSION_SCRIPT.format(verbose=verbose), str(log_file)],
                            capture_output=True, text=True, cwd=repo, timeout=60)
    assert result.returncode == 0, result.stderr
    return result, log_file.read_text()


def test_session_keeps_raw_output_in_the_file_and_shows_only_real_warnings(tmp_path):
    result, log_text = _run_session(tmp_path, verbose=False)
    assert result.stdout == "[1/7] ExampleGen done\nafter the session\n"
    # (the worker's line arrives through the pipe's thread: its order is not fixed)
    assert sorted(result.stderr.splitlines()) == ["E0000 00:00:1.0 7 worker.cc:1] worker broke",
                                                  "warning: a real warning"]
    for text in ("plain print from an executor", "Could not find cuda drivers", "worker broke",
                 "All log messages before absl::InitializeLog", "Fallback to non-ZetaSQL", "a real warning"):
        assert text in log_text, text


def test_verbose_session_redirects_nothing(tmp_path):
    result, log_text = _run_session(tmp_path, verbose=True)
    assert "plain print from an executor" in result.stdout
    assert "Could not find cuda drivers" in result.stderr and "Fallback to non-ZetaSQL" in result.stderr
    assert "a real warning" in log_text


FILTER_SCRIPT = textwrap.dedent("""
    import os, sys
    from tablegen_tf import logs
    logs.drop_known_noise()
    os.write(2, b"E0000 00:00:1.0 7 cuda_platform.cc:52] failed call to cuInit: UNKNOWN ERROR (303)\\n")
    print("2026-12-04 20:00:00,000 INFO model m now serves version 2", file=sys.stderr, flush=True)
    os.write(2, b"E0000 00:00:1.0 7 text_format.cc:378] Error parsing text-format "
                b"tensorflow.XlaSerializedCacheEntry: 2:1: Expected identifier, got: 6\\n")
    os.write(2, b"F0000 00:00:1.0 7 kernel.cc:1] Check failed: the last words\\n")
    os.abort()  # as a C++ check failure does: the filter still passes the line above on
""")


def test_drop_known_noise_keeps_every_other_line_even_from_a_crash(tmp_path):
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run([sys.executable, "-c", FILTER_SCRIPT], capture_output=True, text=True, cwd=repo,
                            timeout=60)
    assert result.returncode != 0  # aborted
    assert result.stderr.splitlines() == ["2026-12-04 20:00:00,000 INFO model m now serves version 2",
                                          "F0000 00:00:1.0 7 kernel.cc:1] Check failed: the last words"]
