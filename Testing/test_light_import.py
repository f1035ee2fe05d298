"""The package, and the Slicer module's option checks, load without the optional packages
(numba, scikit-image, shapely: Slicer does not bundle them) and without the CLI-only helpers."""
import os
import subprocess
import sys
import textwrap

import pytest

BLOCK_EXTRAS = textwrap.dedent(
    """
    import importlib.abc, sys

    class BlockExtras(importlib.abc.MetaPathFinder):
        # what Slicer does not bundle (the optional accelerator and packages the metrics no longer
        # need) plus the CLI-only helpers
        BLOCKED = {"skimage", "numba", "shapely", "slicerio", "matplotlib", "rich", "dask", "pyarrow"}

        def find_spec(self, name, path, target=None):
            if name.split(".")[0] in self.BLOCKED:
                raise ImportError(f"{name} is not installed")

    sys.meta_path.insert(0, BlockExtras())
    """
)


def _run(code: str) -> subprocess.CompletedProcess:
    """Run ``code`` with the extras blocked and the accelerator off (the blocker makes importing numba
    fail, where a missing numba is simply not found: the switch keeps the package from looking)."""
    environment = {**os.environ, "SEGMETRICS_ACCELERATOR": "off"}
    return subprocess.run([sys.executable, "-c", BLOCK_EXTRAS + code], capture_output=True, text=True, timeout=120,
                          env=environment)


def test_package_imports_without_extras_and_frames_load_lazily():
    done = _run("import segmetrics\nprint(segmetrics.Parameters().hd_percentile)\n"
                "print('segmetrics.metrics.instances' in sys.modules)\n"
                "segmetrics.average_precision\nprint('segmetrics.metrics.instances' in sys.modules)\n"
                "import segmetrics.metrics.lesions")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["95.0", "False", "True"]  # the frame API loads when touched


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


def test_option_checks_import_no_metric_group():
    """Checking metric names (the Slicer module's validation, the CLI's) imports no group module,
    so none of the metric stack and no optional package."""
    done = _run(
        "from segmetrics.inputs.validation import check_evaluation_options\n"
        "from segmetrics.registry import resolve_selection\n"
        "check_evaluation_options(metrics=['overlap', 'hd95', 'msi', 'ri'])\n"
        "print(sorted(resolve_selection('dice,ri')['roughness']))\n"
        "print(sorted(m for m in sys.modules if m.startswith('segmetrics.metrics')))\n"
        "try:\n    resolve_selection(['dice', 'no_such_metric'])\nexcept ValueError as error:\n    print(error)\n"
    )
    assert done.returncode == 0, done.stderr
    selected, imported, error = done.stdout.strip().splitlines()
    assert selected == "['ri_reference_mm', 'ri_test_mm']"
    assert imported == "[]"
    assert error.startswith("unknown metric(s) no_such_metric; known: overlap, distance,")


def test_every_group_registers_without_optional_packages():
    """``all_groups()`` (reached from ``compare``) works with numba, scikit-image and shapely absent."""
    done = _run("from segmetrics.registry import all_groups\nprint(sorted(all_groups()))")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["['contours',", "'distance',", "'dose',", "'lesions',", "'msi',", "'overlap',", "'roughness']"]


def test_static_metric_names_equal_the_registered_groups():
    from segmetrics.registry import BUILTIN_METRIC_NAMES, all_groups

    assert BUILTIN_METRIC_NAMES == {name: tuple(m.name for m in group.metrics) for name, group in all_groups().items()}


def test_kernels_compile_once_with_one_message(tmp_path):
    """A missing numba cache is compiled on first use with one line on stderr; the next process is quiet."""
    pytest.importorskip("numba")
    environment = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    runs = [subprocess.run([sys.executable, "-c", "import segmetrics.spatial.mesh"], capture_output=True, text=True,
                           timeout=300, env=environment) for _ in range(2)]
    assert [run.stderr.count("compiling kernels, once") for run in runs] == [1, 0], runs[0].stderr


def test_importing_the_renderer_leaves_vtks_window_choice_alone():
    """Inside Slicer, importing the package must not change how VTK opens the application's windows."""
    environment = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "VTK_DEFAULT_OPENGL_WINDOW")}
    code = "import os, segmetrics.outputs.render, segmetrics.report\nprint(os.environ.get('VTK_DEFAULT_OPENGL_WINDOW'))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=environment)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "None"
