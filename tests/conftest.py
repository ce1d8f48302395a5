"""Shared fixtures. Paths to the bundled data sets beside the project (../shared/data).

The servers the tests start in-process take their ports from :func:`tests.ports.loopback_port`
(distinct within a process and between workers, outside the kernel's ephemeral range) in
place of ``feddpsyn.demo.free_port``, whose bind(0) draws share the kernel's range with the
other worker and with outgoing connections (see ``tests/ports.py``). Set here, before any test module imports the name. Servers started by a
``feddpsyn`` subprocess still draw their own.
"""

import os
from pathlib import Path

import pytest

import feddpsyn.demo
from tests.ports import loopback_port

feddpsyn.demo.free_port = loopback_port

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("FEDDPSYN_DATA", ROOT.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not DATA.exists():
        pytest.fail(f"bundled data not found at {DATA} (set FEDDPSYN_DATA)")
    return DATA
