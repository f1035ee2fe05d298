"""The module's self-test, run the two ways Slicer runs it, offline and without the accelerator.

- Slicer's test run (``slicer_add_python_unittest``, ``CMake/SlicerMacroPythonTesting.cmake`` in
  v5.12.0) calls ``slicer.testing.runUnitTest(paths, "SegMetrics")``, which is
  ``unittest.TestLoader().loadTestsFromName("SegMetrics")`` run by a ``TextTestRunner``: every
  ``TestCase`` class of the module (also the imported base class, whose ``runTest`` finds no test),
  the ``test_*`` methods in alphabetical order, each after ``setUp``.
- *Reload and Test* calls ``SegMetricsTest().runTest()`` (``ScriptedLoadableModule.runTest``).

Both run here in a child process on slicer-core, as on a build machine or a hospital workstation:
network blocked, numba, scikit-image and shapely unimportable, ``SEGMETRICS_ACCELERATOR=off``, and
the desktop-only pieces replaced by :mod:`slicer_stand_ins`.
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
#: The self-test's methods, in the order Slicer runs them.
TEST_METHODS = ["test_distance_of_shifted_balls", "test_dose_of_shifted_boxes", "test_overlap_of_boxes", "test_slice_review"]

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
        if sys.argv[1] == "ctest":
            suite = unittest.TestLoader().loadTestsFromName("SegMetrics")
            result = unittest.TextTestRunner(stream=sys.stdout, verbosity=2).run(suite)
            print("ran", result.testsRun, "ok" if result.wasSuccessful() else "failed")
        else:
            import SegMetrics
            test = SegMetrics.SegMetricsTest()
            print("\\n".join(test.moduleTestNames))
            test.runTest()
            print("reload and test ok")
    """
)


def run_self_test(mode: str):
    """The child's standard output and error after a successful run."""
    environment = {**os.environ, "SEGMETRICS_ACCELERATOR": "off"}
    done = subprocess.run([sys.executable, "-c", RUN, mode], capture_output=True, text=True, timeout=600,
                          env=environment)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return done.stdout, done.stderr


def test_self_test_passes_as_slicers_test_run_runs_it():
    output, errors = run_self_test("ctest")
    # the four methods, and the base class's runTest, which finds no test of its own
    assert output.rstrip().endswith("ran 5 ok"), output[-4000:]
    order = [line.split(" ")[0] for line in output.splitlines() if line.startswith("test_")]
    assert order == TEST_METHODS, output
    assert "No test is defined in ScriptedLoadableModuleTest" in errors


def test_self_test_passes_as_reload_and_test_runs_it():
    output, _errors = run_self_test("reload")
    lines = output.splitlines()
    assert lines[:4] == TEST_METHODS and lines[-1] == "reload and test ok", output[-4000:]
