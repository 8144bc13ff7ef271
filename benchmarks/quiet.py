"""Benchmarks' console: their own figures, without TF's C++ start-up lines.

    from quiet import run_quietly      # benchmarks/ is on sys.path when a script runs
    if __name__ == "__main__":
        run_quietly(main)

As the CLI does (tablegen_tf.logs.session): descriptors 1 and 2 go to a pipe, whose lines
are logged and only alerts that are not known noise are shown, so cuInit, absl and oneDNN
notices stay off the console. Python's own stdout and stderr (figures, progress, argparse
errors) still reach the terminal.
"""

import contextlib
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_quietly(main_function):
    """main_function() with C++ chatter off the console; returns what it returns."""
    sys.path.insert(0, ROOT)
    from tablegen_tf import logs

    with logs.session() as console, contextlib.redirect_stdout(console.out), \
            contextlib.redirect_stderr(console.err):
        return main_function()
