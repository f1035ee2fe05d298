"""Shared test fixtures: the real-data folder (skipped cleanly when absent).

The compiled kernels run with numba's bounds checking on in the tests (and in every subprocess
they start): an index out of range raises IndexError instead of reading or writing past an array.
numba keys its disk cache on the source and the signature only, not on this setting, so the tests
keep their own cache folder that only ever holds bounds-checked builds.
"""
import os
import sys
import tempfile
from pathlib import Path

import pytest

os.environ["NUMBA_BOUNDSCHECK"] = "1"
USER = os.getuid() if hasattr(os, "getuid") else ""
os.environ["NUMBA_CACHE_DIR"] = str(Path(tempfile.gettempdir()) / f"segmetrics-numba-boundscheck{USER}")
if "numba" in sys.modules:  # imported before this file (by a plugin): read the settings again
    sys.modules["numba"].core.config.reload_config()

DATA = Path(os.environ.get("SEGMETRICS_TEST_DATA", Path(__file__).resolve().parents[1] / ".." / "shared" / "data")).resolve()


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """``../shared/data`` beside the repository (read-only); skips when it is missing."""
    if not DATA.is_dir():
        pytest.skip(f"shared test data not found at {DATA}")
    return DATA


@pytest.fixture
def flip_middle_byte():
    """``flip(source, target=None)``: writes ``source`` with every bit of its middle byte flipped
    (one damaged byte inside a compressed stream) to ``target`` (default: in place); returns the path."""
    def flip(source: Path, target: Path | None = None) -> Path:
        raw = bytearray(Path(source).read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        target = Path(source if target is None else target)
        target.write_bytes(bytes(raw))
        return target
    return flip
