"""The module's self-test, run the way Slicer runs it, offline and without the accelerator.

Slicer runs a scripted module's ``ScriptedLoadableModuleTest`` through ``unittest``'s loader: the
``test_*`` methods in alphabetical order, each after ``setUp`` (``CMake/SlicerMacroPythonTesting.cmake``,
``Base/Python/slicer/testing.py`` in v5.12.0), on a build machine without network and with only
the packages Slicer bundles. This test does the same in a child process on slicer-core: network
blocked, numba, scikit-image and shapely unimportable, ``SEGMETRICS_ACCELERATOR=off``, and the
desktop-only pieces replaced by :mod:`slicer_stand_ins`.
"""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("slicer", reason="slicer-core (MRML Python wrapping) is not installed")

TESTING = Path(__file__).resolve().parent
MODULE_DIR = TESTING.parent / "SegMetricsModule"
#: What Slicer 5.12 does not bundle.
NOT_BUNDLED = ("numba", "llvmlite", "skimage", "shapely")

RUN = textwrap.dedent(
    f"""
    import sys, unittest
    import pytest
    sys.path[:0] = [{str(TESTING)!r}, {str(MODULE_DIR)!r}]
    from slicer_stand_ins import BlockImports, block_network, install
    sys.meta_path.insert(0, BlockImports({NOT_BUNDLED!r}))
    with pytest.MonkeyPatch.context() as patch:
        block_network(patch)
        install(patch)
        import SegMetrics
        suite = unittest.TestLoader().loadTestsFromTestCase(SegMetrics.SegMetricsTest)
        result = unittest.TextTestRunner(stream=sys.stdout, verbosity=2).run(suite)
        print("ran", result.testsRun, "ok" if result.wasSuccessful() else "failed")
    """
)


def test_self_test_passes_as_slicer_runs_it():
    environment = {**os.environ, "SEGMETRICS_ACCELERATOR": "off"}
    done = subprocess.run([sys.executable, "-c", RUN], capture_output=True, text=True, timeout=600, env=environment)
    output = done.stdout + done.stderr
    assert done.returncode == 0 and done.stdout.strip().endswith("ran 3 ok"), output[-4000:]
    order = [line.split(" ")[0] for line in done.stdout.splitlines() if line.startswith("test_")]
    assert order == ["test_distance_of_shifted_balls", "test_overlap_of_boxes", "test_slice_review"], output
