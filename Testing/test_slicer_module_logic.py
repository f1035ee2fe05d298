"""SegMetrics.py's logic on slicer-core, with stand-ins for the desktop-only Slicer modules.

slicer-core lacks ``slicer.ScriptedLoadableModule`` and ``slicer.parameterNodeWrapper``; minimal
stand-ins let the module file import so its Logic (validation, parameters, run, worst slice) is
exercised on a real MRML scene.
"""
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

slicer = pytest.importorskip("slicer", reason="slicer-core (MRML Python wrapping) is not installed")

from segmetrics import LabelImage, mrml  # noqa: E402
from segmetrics.registry import all_groups  # noqa: E402

MODULE_DIR = Path(__file__).resolve().parents[1] / "SegMetricsModule"


@pytest.fixture(scope="module")
def module(monkeypatch_module):
    scripted = types.ModuleType("slicer.ScriptedLoadableModule")
    for name in ("ScriptedLoadableModule", "ScriptedLoadableModuleWidget", "ScriptedLoadableModuleTest"):
        setattr(scripted, name, type(name, (), {"__init__": lambda self, *a: None}))
    scripted.ScriptedLoadableModuleLogic = type("ScriptedLoadableModuleLogic", (), {"__init__": lambda self: None})
    wrapper = types.ModuleType("slicer.parameterNodeWrapper")
    wrapper.parameterNodeWrapper = lambda cls: cls
    wrapper.Choice = wrapper.WithinRange = lambda *args: None
    for name, stand_in in (("slicer.ScriptedLoadableModule", scripted), ("slicer.parameterNodeWrapper", wrapper)):
        monkeypatch_module.setitem(sys.modules, name, stand_in)
    monkeypatch_module.syspath_prepend(str(MODULE_DIR))
    monkeypatch_module.delitem(sys.modules, "SegMetrics", raising=False)
    import SegMetrics

    return SegMetrics


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def parameters(**changes):
    values = dict(referenceSegmentation=None, referenceSegmentID="", testSegmentation=None, testSegmentID="",
                  allSegments=True, overlap=True, distance=False, msi=False, roughness=False, hdPercentile=90.0,
                  nsdToleranceMm=1.0, msiInnerLevel=2.0, msiOuterLevel=3.0, msiAxis=0, roughnessWindowMm=0.0,
                  outputTable=None, colorArray="MSI")
    values.update(changes)
    return SimpleNamespace(**values)


def test_validation_messages(module):
    validate = module.SegMetricsLogic.validationError
    node = slicer.vtkMRMLSegmentationNode()
    assert validate(parameters()) == "Select a reference and a test segmentation."
    assert "Select a reference and a test segment" in validate(parameters(referenceSegmentation=node, testSegmentation=node, allSegments=False))
    same = parameters(referenceSegmentation=node, testSegmentation=node, allSegments=False, referenceSegmentID="a", testSegmentID="a")
    assert validate(same) == "The reference and test segments are the same segment."
    assert validate(parameters(referenceSegmentation=node, testSegmentation=node, overlap=False)) == "Select at least one metric group."
    assert validate(parameters(referenceSegmentation=node, testSegmentation=node)) is None


def test_metric_parameters_are_passed_through(module):
    groups, params = module.SegMetricsLogic.metricParameters(parameters(distance=True))
    assert groups == ["overlap", "distance"]
    assert (params.hd_percentile, params.nsd_tolerance_mm, params.msi_il, params.msi_ol) == (90.0, 1.0, 2.0, 3.0)
    assert params.roughness_window_mm is None  # 0 in the UI = the convention's default


def test_process_fills_the_table_and_the_parameter_node(module):
    headless = mrml.create_headless_scene()  # keep alive: owns the module logics
    scene = headless.scene
    reference = np.zeros((12, 12, 12), np.uint8)
    reference[2:8, 2:8, 2:8] = 1
    test = np.roll(reference, 2, axis=2)
    nodes = [mrml.add_segmentation_from_label_image(scene, LabelImage(a, (1, 1, 1), names={1: "cube"}), n)
             for a, n in ((reference, "r"), (test, "t"))]
    p = parameters(referenceSegmentation=nodes[0], testSegmentation=nodes[1], allSegments=False,
                   referenceSegmentID=nodes[0].GetSegmentation().GetNthSegmentID(0),
                   testSegmentID=nodes[1].GetSegmentation().GetNthSegmentID(0),
                   msi="msi" in all_groups())
    logic = module.SegMetricsLogic()
    outputs = logic.process(p)
    assert p.outputTable is outputs.table
    assert outputs.table.GetTable().GetColumnByName("dice").GetValue(0) == pytest.approx(2 * 144 / 432)
    assert logic.summary(outputs).startswith("cube: dice 0.667")
    if "msi" in all_groups():
        assert logic.worstSliceRAS("cube") is not None
    assert logic.worstSliceRAS("no such pair") is None
