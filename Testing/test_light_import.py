"""The Slicer module must load before its extra packages are installed (they come on Apply)."""
import os
import subprocess
import sys
import textwrap

import pytest

BLOCK_EXTRAS = textwrap.dedent(
    """
    import importlib.abc, sys

    class BlockExtras(importlib.abc.MetaPathFinder):
        # what Slicer does not bundle (Resources/requirements.txt) plus the CLI-only helpers
        BLOCKED = {"skimage", "numba", "shapely", "slicerio", "matplotlib", "rich", "dask", "pyarrow"}

        def find_spec(self, name, path, target=None):
            if name.split(".")[0] in self.BLOCKED:
                raise ImportError(f"{name} is not installed")

    sys.meta_path.insert(0, BlockExtras())
    """
)


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCK_EXTRAS + code], capture_output=True, text=True, timeout=120)


def test_package_imports_without_extras_and_the_instance_api_loads():
    done = _run("import segmetrics\nprint(segmetrics.Parameters().hd_percentile)\nsegmetrics.average_precision\n"
                "import segmetrics.metrics.lesions")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[0] == "95.0"


def test_mrml_glue_imports_without_extras():
    pytest.importorskip("slicer")
    done = _run("from segmetrics import mrml\nprint(sorted(mrml.SURFACE_ARRAYS))")
    assert done.returncode == 0, done.stderr
    assert "MSI" in done.stdout


HEAVY = ("vtk", "numba", "scipy", "skimage", "rich", "matplotlib", "SimpleITK")


@pytest.mark.parametrize("code", [
    "import segmetrics",
    "import contextlib, io\nfrom segmetrics import cli\nwith contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
    "    cli.main(['compare', '--help'])",
])
def test_import_and_help_load_no_heavy_module(code):
    """``import segmetrics`` and the CLI's help leave the heavy stack until a metric is computed."""
    done = subprocess.run([sys.executable, "-c", code + "\nimport sys\nprint(sorted({m.split('.')[0] for m in sys.modules}))"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = set(eval(done.stdout.strip().splitlines()[-1]))
    assert loaded.isdisjoint(HEAVY), loaded & set(HEAVY)


def test_static_metric_names_equal_the_registered_groups():
    from segmetrics.registry import BUILTIN_METRIC_NAMES, all_groups

    assert BUILTIN_METRIC_NAMES == {name: tuple(m.name for m in group.metrics) for name, group in all_groups().items()}


def test_kernels_compile_once_with_one_message(tmp_path):
    """A missing numba cache is compiled on first use with one line on stderr; the next process is quiet."""
    environment = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    runs = [subprocess.run([sys.executable, "-c", "import segmetrics.spatial.mesh"], capture_output=True, text=True,
                           timeout=300, env=environment) for _ in range(2)]
    assert [run.stderr.count("compiling kernels, once") for run in runs] == [1, 0], runs[0].stderr
