"""Shared test settings."""

import os
import sys

import pytest


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
