import os
import subprocess
import sys

from serving import xla_cache
from serving.xla_cache import ENVIRONMENT, FLAG, XlaCache

# A fresh process: TensorFlow reads TF_XLA_FLAGS once, at its first XLA compilation.
# Prints the cache directory, then after each session its entries' inodes: a compilation
# writes its entry anew (a new file renamed into place), a read leaves it as it was.
COMPILE_TWICE = """
import os, sys
from serving.xla_cache import XlaCache
with XlaCache(sys.argv[1] or None) as cache:
    import tensorflow as tf
    print(cache.directory)
    with tf.Graph().as_default() as traced:  # an export: a jit function called by another
        inner = tf.function(lambda x: tf.sin(x) * 2.0, jit_compile=True)
        output = tf.function(lambda x: inner(x) + 1.0)(tf.compat.v1.placeholder(tf.float32, [2], "x"))
    for _ in range(2):  # two versions of it, each in a session of its own
        with tf.Graph().as_default() as graph:
            y, = tf.import_graph_def(traced.as_graph_def(), return_elements=[output.name])
            with tf.compat.v1.Session(graph=graph) as session:
                session.run(y, {"import/x:0": [1.0, 2.0]})
        print(",".join(str(os.stat(os.path.join(cache.directory, n)).st_ino)
                       for n in sorted(os.listdir(cache.directory))))
"""


def compile_twice(directory: str = "") -> list:
    env = {**os.environ, ENVIRONMENT: "", "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run([sys.executable, "-c", COMPILE_TWICE, directory], capture_output=True,
                          text=True, env=env, check=True, timeout=300)
    return done.stdout.split()


def test_a_second_session_reads_what_its_predecessor_compiled_and_the_temporary_cache_goes():
    directory, first, second = compile_twice()
    assert first and "," not in first  # one entry, written by the first session's compilation
    assert second == first  # the second session read it instead of compiling again
    assert not os.path.exists(directory)


def test_a_given_directory_is_kept_with_a_subdirectory_per_tensorflow_version(tmp_path):
    directory, first, second = compile_twice(str(tmp_path))
    assert first and second == first
    assert os.path.dirname(directory) == str(tmp_path)
    assert os.path.basename(directory) == f"tensorflow-{xla_cache._tensorflow_version()}"
    assert os.listdir(directory)


def test_a_cache_directory_already_in_the_flags_is_kept(monkeypatch, tmp_path):
    mine = f"--tf_xla_auto_jit=0 {FLAG}={tmp_path}"
    monkeypatch.setenv(ENVIRONMENT, mine)
    with XlaCache() as cache:
        assert cache.directory is None
        assert os.environ[ENVIRONMENT] == mine


def test_other_flags_are_kept_and_the_directory_appended(monkeypatch):
    monkeypatch.setenv(ENVIRONMENT, "--tf_xla_auto_jit=0")
    with XlaCache() as cache:
        directory = cache.directory
        assert os.environ[ENVIRONMENT] == f"--tf_xla_auto_jit=0 {FLAG}={directory}"
        assert os.path.isdir(directory)
    assert not os.path.exists(directory)
