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
