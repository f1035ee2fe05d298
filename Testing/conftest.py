"""Shared test fixtures: the real-data folder (skipped cleanly when absent)."""
import os
from pathlib import Path

import pytest

DATA = Path(os.environ.get("SEGMETRICS_TEST_DATA", Path(__file__).resolve().parents[1] / ".." / "shared" / "data")).resolve()


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """``../shared/data`` beside the repository (read-only); skips when it is missing."""
    if not DATA.is_dir():
        pytest.skip(f"shared test data not found at {DATA}")
    return DATA
