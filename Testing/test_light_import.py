"""The Slicer module must load before its extra packages are installed (they come on Apply)."""
import subprocess
import sys
import textwrap

import pytest

BLOCK_EXTRAS = textwrap.dedent(
    """
    import importlib.abc, sys

    class BlockExtras(importlib.abc.MetaPathFinder):
        # what Slicer does not bundle (Resources/requirements.txt) plus the CLI-only helpers
        BLOCKED = {"skimage", "numba", "slicerio", "matplotlib", "rich", "dask", "pyarrow"}

        def find_spec(self, name, path, target=None):
            if name.split(".")[0] in self.BLOCKED:
                raise ImportError(f"{name} is not installed")

    sys.meta_path.insert(0, BlockExtras())
    """
)


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCK_EXTRAS + code], capture_output=True, text=True, timeout=120)


def test_package_imports_without_extras_and_frames_load_lazily():
    done = _run("import segmetrics\nprint(segmetrics.Parameters().hd_percentile)\nsegmetrics.average_precision")
    assert done.stdout.strip().splitlines()[0] == "95.0"
    assert "skimage is not installed" in done.stderr  # only when the frame API is touched


def test_mrml_glue_imports_without_extras():
    pytest.importorskip("slicer")
    done = _run("from segmetrics import mrml\nprint(sorted(mrml.SURFACE_ARRAYS))")
    assert done.returncode == 0, done.stderr
    assert "MSI" in done.stdout
