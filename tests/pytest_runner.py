"""Bazel py_test entry point: runs pytest on the test module given as argument."""

import sys

import pytest

if __name__ == "__main__":
    sys.exit(pytest.main(sys.argv[1:]))
