"""Shared test fixtures: the real-data folder (skipped cleanly when absent).

The compiled kernels run with numba's bounds checking on in the tests (and in every subprocess
they start): an index out of range raises IndexError instead of reading or writing past an array.
numba keys its disk cache on the source and the signature only, not on this setting, so the tests
keep their own cache folder that only ever holds bounds-checked builds.

Optional packages (issue 23). CI runs this suite a second time in an environment holding only what
3D Slicer ships (numpy, scipy, SimpleITK, VTK, pydicom, pillow, highdicom, matplotlib, ...) with
``SEGMETRICS_ACCELERATOR=off``. There:

- the metrics, the geometry, the image readers (DICOM, NIfTI, NRRD, MetaImage), ``compare`` and
  ``mrml`` must work: a test of them failing for a missing package is a product bug, never a skip;
- reference libraries used only to check values (scikit-image, shapely, the numba kernels as twins,
  nibabel, mpmath, surface-distance, pycocotools) are skipped with ``pytest.importorskip`` inside
  the test or fixture that uses them, so the rest of the file still runs;
- the pip package's own dependencies for the command line, reports and batches (rich: terminal
  tables and progress bars; pandas: aggregate tables; jinja2: the HTML report; slicerio: the demo's
  sample segmentation; dask, pyarrow: batch options) are not in Slicer: tests of those features carry
  ``@pytest.mark.needs("rich", ...)`` and are skipped, naming the package, where it is absent.
"""
import importlib.util
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


def pytest_configure(config):
    config.addinivalue_line("markers", "needs(*packages): skipped unless every package can be imported (the pip "
                                       "package's dependencies that 3D Slicer does not bundle)")


def pytest_runtest_setup(item):
    """Skip a test marked ``needs(...)`` when one of its packages is not installed."""
    for marker in item.iter_markers("needs"):
        missing = [package for package in marker.args if importlib.util.find_spec(package) is None]
        if missing:
            pytest.skip(f"needs {', '.join(missing)} (a dependency of the pip package that 3D Slicer does not bundle)")


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """``../shared/data`` beside the repository (read-only); skips when it is missing."""
    if not DATA.is_dir():
        pytest.skip(f"shared test data not found at {DATA}")
    return DATA


@pytest.fixture(scope="session")
def slicerio():
    """The slicerio package (reads and writes ``.seg.nrrd`` files in the tests); skips without it."""
    return pytest.importorskip("slicerio", reason="slicerio is a dependency of the pip package that 3D Slicer does not bundle")


@pytest.fixture(scope="session")
def slicerio_sample(slicerio) -> Path:
    """slicerio's sample ``Segmentation.seg.nrrd`` (CT chest, 128 x 128 x 34 voxels, 7 segments)."""
    return Path(slicerio.__file__).resolve().parent / "data" / "Segmentation.seg.nrrd"


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
