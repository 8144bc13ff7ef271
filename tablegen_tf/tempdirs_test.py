"""private_tempdir: what libraries leave in the temp directory goes with it."""

import os
import tempfile

from tablegen_tf.tempdirs import private_tempdir


def test_a_run_gets_a_private_temp_dir_removed_afterwards():
    before, env_before = tempfile.gettempdir(), os.environ.get("TMPDIR")
    with private_tempdir() as directory:
        assert tempfile.gettempdir() == directory == os.environ["TMPDIR"]
        leaked = tempfile.mkdtemp(prefix="beam-pipeline-temp")
    assert not os.path.exists(leaked) and not os.path.exists(directory)
    assert tempfile.gettempdir() == before and os.environ.get("TMPDIR") == env_before
