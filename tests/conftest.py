"""Shared test settings."""

import os
import sys

import pytest

# A process runs one Spark session (stretchflow.spark.session.get_session): every test that
# starts one — the conformance suite's spark variant, test_spark's fixture — gets this master,
# whatever order pytest runs them in.
os.environ.setdefault("SPARK_MASTER", "local[2]")


@pytest.fixture
def frequent_switches():
    """Forces many more thread interleavings: the interpreter switches threads every 10 µs
    instead of every 5 ms, so races that need an unlucky switch show up in short runs."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(old)


def pytest_report_header(config):
    return f"switch interval {sys.getswitchinterval()}s, cpus {os.cpu_count()}"


# pyproject's timeout (600 s) is for ordinary tests; slow ones (100 SIGKILL cycles, Spark
# sessions) and benchmarks (a peer's virtualenv is built on first use) get longer bounds.
# These are hang guards — a CI run has 90 minutes in all — not performance limits.
_TIMEOUTS = {"bench": 2400, "slow": 1500}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("timeout") is not None:
            continue
        for mark, seconds in _TIMEOUTS.items():
            if item.get_closest_marker(mark) is not None:
                item.add_marker(pytest.mark.timeout(seconds))
                break
