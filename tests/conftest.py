"""Shared fixtures. Paths to the bundled data sets beside the project (../shared/data)."""

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("FEDDPSYN_DATA", ROOT.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not DATA.exists():
        pytest.fail(f"bundled data not found at {DATA} (set FEDDPSYN_DATA)")
    return DATA
