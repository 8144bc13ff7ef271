"""The seeded fuzzer (serving/fuzz.py) against a real server on 127.0.0.1: every
answer is an allowed status, OK answers carry one text per row, and the server
still answers a valid request afterwards."""

import grpc
import pytest

from serving import fuzz, testing


@pytest.fixture
def fuzz_server(base_path):
    from serving import server

    instance = server.build_server(testing.serve_args(base_path, *fuzz.SERVER_FLAGS)).start()
    yield instance
    instance.stop()


def addresses(instance):
    return f"127.0.0.1:{instance.grpc_port}", f"127.0.0.1:{instance.rest_port}"


def test_categories_cover_the_brief():
    assert len(fuzz.CATEGORIES) >= 25
    assert fuzz.make_case(7, 123).payload == fuzz.make_case(7, 123).payload  # reproducible
    assert {fuzz.make_case(7, i).category for i in range(len(fuzz.CATEGORIES))} == set(fuzz.CATEGORIES)


def test_fuzz_checks_can_fail():
    case = fuzz.make_case(1, 0)
    assert fuzz.check(case, "INTERNAL", None)
    assert fuzz.check(fuzz.Case("valid", "grpc", None, frozenset({"OK"}), rows=3), "OK", 2)


def test_fuzz_100_requests(fuzz_server):
    report = fuzz.run(*addresses(fuzz_server), requests=100, seed=1)
    assert report.passed, "\n".join(report.violations[:20]) + "\n" + report.table()
    assert sum(report.counts.values()) == 100


@pytest.mark.slow
def test_fuzz_1000_requests(fuzz_server):
    report = fuzz.run(*addresses(fuzz_server), requests=1000, seed=20240611)
    assert report.passed, "\n".join(report.violations[:20]) + "\n" + report.table()
    assert {status for _, status in report.counts} >= {
        "OK", "INVALID_ARGUMENT", "NOT_FOUND", "FAILED_PRECONDITION", "RESOURCE_EXHAUSTED",
        "HTTP 200", "HTTP 400", "HTTP 404", "HTTP 413"}
