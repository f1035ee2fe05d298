"""SegMetrics.py's logic on slicer-core, with stand-ins for the desktop-only Slicer modules.

slicer-core lacks ``qt``, ``slicer.ScriptedLoadableModule``, ``slicer.parameterNodeWrapper`` and
``slicer.i18n``; minimal stand-ins (:mod:`slicer_stand_ins`) let the module file import so its
Logic (validation, the accelerator offer, parameters, run, cancel, scene close, slice review,
layout) is exercised on a real MRML scene with real slice, layout and plot nodes.
"""
import math
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

slicer = pytest.importorskip("slicer", reason="slicer-core (MRML Python wrapping) is not installed")
vtk = pytest.importorskip("vtk")

from segmetrics import LabelImage, mrml  # noqa: E402
from slicer_stand_ins import stand_in_modules  # noqa: E402

MODULE_DIR = Path(__file__).resolve().parents[1] / "SegMetricsModule"


@pytest.fixture(scope="module")
def module(monkeypatch_module):
    for name, stand_in in stand_in_modules().items():
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
                  allSegments=True, doseVolume=None, doseLevels="", overlap=True, distance=False, msi=False, contours=False, roughness=False,
                  hdPercentile=90.0, nsdToleranceMm=1.0, msiPreset="custom", msiInnerLevel=2.0, msiOuterLevel=3.0,
                  msiAxis=0, roughnessWindowMm=0.0,
                  outputTable=None, colorArray="SignedDistance_mm")
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
    rough = parameters(referenceSegmentation=node, testSegmentation=node, colorArray="Roughness_mm")
    assert validate(rough).startswith("Colouring by roughness needs the roughness group")
    assert validate(parameters(referenceSegmentation=node, testSegmentation=node, colorArray="Roughness_mm",
                               roughness=True)) is None
    levels = parameters(referenceSegmentation=node, testSegmentation=node, doseLevels="20, x Gy")
    assert validate(levels) == "Dose levels: 'x Gy' is not a dose in Gy (e.g. 20,30Gy)"
    levels.doseLevels = "-5"
    assert validate(levels) == "Dose levels: dose_levels_gy must be a finite number > 0, got -5.0"
    levels.doseLevels = "20, 30 Gy"
    assert validate(levels) is None


def test_metric_parameters_are_passed_through(module):
    groups, params = module.SegMetricsLogic.metricParameters(parameters(distance=True))
    assert groups == ["overlap", "distance"]
    groups, _ = module.SegMetricsLogic.metricParameters(parameters(msi=True, contours=True))
    assert groups == ["overlap", "msi", "contours"]  # the per-slice table's APL, Dice and HD
    assert (params.hd_percentile, params.nsd_tolerance_mm, params.msi_il, params.msi_ol) == (90.0, 1.0, 2.0, 3.0)
    assert params.roughness_window_mm is None  # 0 in the UI = the convention's default
    assert params.dose_levels_gy == ()
    assert module.SegMetricsLogic.metricParameters(parameters(doseLevels="20, 30Gy"))[1].dose_levels_gy == (20.0, 30.0)


def test_msi_presets_set_both_levels(module):
    """The presets' levels (the MSI paper: default il 1, ol 1; its clinical example il 1, ol 10),
    whatever the level boxes hold; "custom" takes the boxes."""
    logic = module.SegMetricsLogic
    for preset, levels in (("default", (1.0, 1.0)), ("tight", (1.0, 10.0)), ("custom", (2.0, 3.0))):
        p = parameters(msiPreset=preset, hdPercentile=99.0)
        params = logic.metricParameters(p)[1]
        assert (params.msi_il, params.msi_ol) == logic.msiLevels(p) == levels, preset
        assert params.hd_percentile == 99.0
    assert logic.msiWidthText(10.0) == "σ = 1 mm"  # the tight preset's outer width


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
                   testSegmentID=nodes[1].GetSegmentation().GetNthSegmentID(0), msi=True, contours=True)
    dose = scene.AddNewNodeByClass("vtkMRMLScalarVolumeNode", "dose")  # 2 Gy everywhere, on the segments' grid
    data = vtk.vtkImageData()
    data.SetDimensions(12, 12, 12)
    data.AllocateScalars(vtk.VTK_FLOAT, 1)
    data.GetPointData().GetScalars().Fill(2.0)
    dose.SetAndObserveImageData(data)
    dose.SetIJKToRASMatrix(mrml.ras_matrix(LabelImage(reference, (1, 1, 1))))
    p.doseVolume, p.doseLevels = dose, "1, 3 Gy"
    logic = module.SegMetricsLogic()
    outputs = logic.process(p)
    column = outputs.table.GetTable().GetColumnByName
    assert column("dose_dmean_test_gy").GetValue(0) == pytest.approx(2.0)
    assert column("dose_v1gy_test_percent").GetValue(0) == pytest.approx(100.0)  # 2 Gy everywhere
    assert column("dose_v3gy_test_percent").GetValue(0) == 0.0
    notes = logic.notes(outputs)
    assert any(n.startswith("dose units not checked") for n in notes)
    assert any("interpolated trilinearly" in n for n in notes)  # a note of the pair's comparison
    assert outputs.dvh_chart is not None
    assert p.outputTable is outputs.table
    assert outputs.table.GetTable().GetColumnByName("dice").GetValue(0) == pytest.approx(2 * 144 / 432)
    assert logic.summary(outputs).startswith("cube: dice 0.667")
    assert logic.worstSliceRAS("cube") is not None
    assert logic.worstSliceRAS("no such pair") is None
    # the per-slice review table has no empty column: the contours group ran with MSI
    assert [key for _title, key in logic.reviewColumns("cube")] == ["slice", "position_mm", "msi", "apl_mm", "dice",
                                                                     "hd_mm", "status"]
    assert logic.reviewColumns("cube")[2][0] == "MSI (σ 5 mm inside / 3.33 mm outside)"  # 10 / level, levels 2 and 3
    rows = logic.reviewRows("cube")
    assert len(rows) == 6
    for key in ("msi", "apl_mm", "dice", "hd_mm"):
        assert all(math.isfinite(row[key]) for row in rows), key
    # each slice: two 6 x 6 squares 2 mm apart along x
    assert all(row["dice"] == pytest.approx(2 * 24 / 72) and row["hd_mm"] == pytest.approx(2.0) for row in rows)


# --- the optional accelerator ---------------------------------------------------------------------


def test_accelerator_requirements_hold_only_what_slicer_does_not_ship(module):
    """numba alone: nothing that Slicer 5.12 bundles, so pip never replaces a bundled package."""
    assert module.SegMetricsLogic.acceleratorRequirements() == ["numba>=0.59"]
    bundled = {"numpy", "scipy", "simpleitk", "vtk", "pydicom", "pillow", "highdicom", "packaging"}
    assert bundled.isdisjoint(line.split(">")[0].lower() for line in module.SegMetricsLogic.acceleratorRequirements())


def test_accelerator_is_offered_once_never_in_testing_nor_when_installed(module, monkeypatch):
    offer = module.SegMetricsLogic.acceleratorOffer
    monkeypatch.setattr(module.accelerator, "numba_installed", lambda: False)
    assert "Install it now?" in offer(alreadyOffered=False, testing=False)
    assert offer(alreadyOffered=True, testing=False) is None
    assert offer(alreadyOffered=False, testing=True) is None
    monkeypatch.setattr(module.accelerator, "numba_installed", lambda: True)
    assert offer(alreadyOffered=False, testing=False) is None


def fake_constraints(monkeypatch, logic, folder):
    """Make bundledConstraints write a known file; returns its path."""
    path = folder / "constraints.txt"
    monkeypatch.setattr(logic, "bundledConstraints", staticmethod(lambda: path.write_text("numpy==1\n") and str(path)))
    return str(path)


def test_accelerator_installs_with_pip_ensure_keeping_slicers_packages(module, monkeypatch, tmp_path):
    """Slicer 5.12: ``slicer.packaging`` (imported explicitly: ``import slicer`` does not import it)
    installs without a second question, held to Slicer's numpy and scipy; testing mode is left to
    pip_ensure's default (installs nothing)."""
    calls = []
    packaging = types.ModuleType("slicer.packaging")
    packaging.pip_ensure = lambda requirements, **options: calls.append((requirements, options))
    monkeypatch.setitem(sys.modules, "slicer.packaging", packaging)
    monkeypatch.delattr(slicer, "packaging", raising=False)
    constraints = fake_constraints(monkeypatch, module.SegMetricsLogic, tmp_path)
    message = module.SegMetricsLogic.installAccelerator()
    assert calls == [(["numba>=0.59"], dict(constraints=constraints, requester="SegMetrics", prompt_install=False))]
    assert "installed" in message
    assert not Path(constraints).exists()  # removed after use


def test_a_package_installed_during_the_session_is_found_by_the_next_apply(module, monkeypatch, tmp_path):
    """After pip writes a package into a site folder Python has already listed, the import system's
    cached listing must not hide it (``importlib.invalidate_caches``): here the folder's
    modification time is left unchanged, as on file systems with coarse timestamps."""
    import importlib.util

    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    assert importlib.util.find_spec("segmetrics_test_accelerator") is None  # the folder listing is now cached

    def install(requirements, **options):
        listed = site.stat()
        (site / "segmetrics_test_accelerator").mkdir()
        (site / "segmetrics_test_accelerator" / "__init__.py").write_text("")
        os.utime(site, ns=(listed.st_atime_ns, listed.st_mtime_ns))

    packaging = types.ModuleType("slicer.packaging")
    packaging.pip_ensure = install
    monkeypatch.setitem(sys.modules, "slicer.packaging", packaging)
    fake_constraints(monkeypatch, module.SegMetricsLogic, tmp_path)
    assert "installed" in module.SegMetricsLogic.installAccelerator()
    assert importlib.util.find_spec("segmetrics_test_accelerator") is not None


def test_accelerator_offline_gives_the_wheel_folder_command(module, monkeypatch, tmp_path):
    def offline(requirements, **options):
        raise subprocess.CalledProcessError(1, "pip install")

    packaging = types.ModuleType("slicer.packaging")
    packaging.pip_ensure = offline
    monkeypatch.setitem(sys.modules, "slicer.packaging", packaging)
    constraints = fake_constraints(monkeypatch, module.SegMetricsLogic, tmp_path)
    message = module.SegMetricsLogic.installAccelerator()
    assert "\n" not in message
    assert message.endswith("slicer.util.pip_install('--no-index --find-links=FOLDER numba>=0.59')")
    assert not Path(constraints).exists()


def test_accelerator_on_slicer_5_10_uses_pip_install(module, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "slicer.packaging", None)  # import fails, as on 5.10
    installed = []
    monkeypatch.setattr(slicer.util, "pip_install", installed.append)
    constraints = fake_constraints(monkeypatch, module.SegMetricsLogic, tmp_path)
    module.SegMetricsLogic.installAccelerator()
    assert installed == [["-c", constraints, "numba>=0.59"]]


def test_bundled_constraints_hold_the_installed_numpy_and_scipy(module):
    import numpy
    import scipy

    path = Path(module.SegMetricsLogic.bundledConstraints())
    try:
        assert path.read_text().split() == [f"numpy=={numpy.__version__}", f"scipy=={scipy.__version__}"]
    finally:
        path.unlink()


def test_msi_level_width():
    from segmetrics.metrics.msi import weight_function

    # sigma = 10/l mm: the weight one sigma away is exp(-1/2)
    for level in (1.0, 2.0, 10.0):
        width = 10.0 / level
        assert weight_function(width, level) == pytest.approx(math.exp(-0.5))


def test_msi_width_text(module):
    assert module.SegMetricsLogic.msiWidthText(1.0) == "σ = 10 mm"
    assert module.SegMetricsLogic.msiWidthText(4.0) == "σ = 2.5 mm"
    assert module.SegMetricsLogic.msiWidthMm(0.0) == math.inf


# --- a run on a ball whose test misses a cap ----------------------------------------------------


def ball_pair(scene, cut=28):
    z, y, x = np.mgrid[:32, :40, :40]
    reference = ((z - 16) ** 2 + (y - 20) ** 2 + (x - 20) ** 2 <= 12**2).astype(np.uint8)
    test = reference.copy()
    test[:, :, cut:] = 0  # the cap beyond x = cut (1 mm voxels) is missed
    nodes = [mrml.add_segmentation_from_label_image(scene, LabelImage(a, (1, 1, 1), names={1: "ball"}), n)
             for a, n in ((reference, "reference"), (test, "test"))]
    return nodes, reference, test


def node_ids(scene):
    return sorted(scene.GetNthNode(i).GetID() for i in range(scene.GetNumberOfNodes()))


@pytest.fixture
def review(module):
    """A run with real Red/Yellow/Green slice nodes and a layout node in the scene."""
    headless = mrml.create_headless_scene()
    scene = headless.scene
    slice_logics = []
    for name in ("Red", "Yellow", "Green"):
        slice_logic = slicer.vtkMRMLSliceLogic()
        slice_logic.SetMRMLApplicationLogic(headless.app_logic)
        slice_logic.SetMRMLScene(scene)
        slice_logic.AddSliceNode(name).SetOrientation({"Red": "Axial", "Yellow": "Sagittal", "Green": "Coronal"}[name])
        slice_logics.append(slice_logic)
    layout = scene.AddNewNodeByClass("vtkMRMLLayoutNode")
    layout.SetViewArrangement(slicer.vtkMRMLLayoutNode.SlicerLayoutConventionalView)
    nodes, reference, test = ball_pair(scene)
    logic = module.SegMetricsLogic()
    outputs = logic.run(*nodes, metrics=["overlap", "msi"])
    return SimpleNamespace(headless=headless, scene=scene, logic=logic, outputs=outputs, nodes=nodes,
                           reference=reference, test=test, slice_logics=slice_logics, layout=layout)


def test_review_order_is_the_msi_order(review):
    rows = review.logic.reviewRows("ball")
    msi = [r["msi"] for r in rows]
    assert msi == sorted(msi) and len(rows) == np.count_nonzero(review.reference.any(axis=(1, 2)))
    assert [r["slice"] for r in rows] == review.logic.reviewOrder("ball")
    order = review.logic.reviewOrder("ball")
    assert review.logic.stepSlice("ball", None, 1) == order[0]
    assert review.logic.stepSlice("ball", order[0], 1) == order[1]
    assert review.logic.stepSlice("ball", order[1], -1) == order[0]
    assert review.logic.stepSlice("ball", order[0], -1) is None
    assert review.logic.stepSlice("ball", order[-1], 1) is None
    # the worst slices cut through the middle of the ball, where the missed cap is widest
    assert abs(order[0] - 16) <= 3


def test_row_jump_centres_every_slice_view_on_the_structure(review):
    """Centred jump: all three views pass through the centre of both segments in that slice (the
    default offset jump would only move each plane, leaving the axial view's centre elsewhere)."""
    index = review.logic.reviewOrder("ball")[2]
    position = review.logic.jumpToSlice("ball", index)
    inside = np.nonzero(review.reference[index] | review.test[index])
    expected_lps = (np.mean(inside[1]), np.mean(inside[0]), index)  # x, y, z with 1 mm voxels at the origin
    assert position == pytest.approx((-expected_lps[0], -expected_lps[1], expected_lps[2]))
    for slice_logic in review.slice_logics:
        to_ras = slice_logic.GetSliceNode().GetSliceToRAS()
        assert [to_ras.GetElement(r, 3) for r in range(3)] == pytest.approx(position)
    marker = review.outputs.marker.GetTableNode().GetTable()
    row = next(r for r in mrml.slice_rows(review.outputs.result["ball"]) if r["slice"] == index)
    assert marker.GetNumberOfRows() == 1
    assert (marker.GetValue(0, 0).ToDouble(), marker.GetValue(0, 1).ToDouble()) == pytest.approx((index, row["msi"]))


def test_results_layout_has_a_table_and_the_chart(review):
    """From the one-up 3-D layout (which the Tables and Plots logics turn into a four-up plot view
    without the table) to the four-up layout with both."""
    review.layout.SetViewArrangement(slicer.vtkMRMLLayoutNode.SlicerLayoutOneUp3DView)
    assert review.logic.showResults(review.headless.app_logic) == slicer.vtkMRMLLayoutNode.SlicerLayoutFourUpPlotTableView
    assert review.layout.GetViewArrangement() == slicer.vtkMRMLLayoutNode.SlicerLayoutFourUpPlotTableView
    selection = review.headless.app_logic.GetSelectionNode()
    assert selection.GetActiveTableID() == review.outputs.table.GetID()
    assert selection.GetActivePlotChartID() == review.outputs.chart.GetID()


def test_deleting_the_results_table_keeps_the_slice_review(review):
    """Worst / previous / next keep working when the user deletes the results table."""
    review.scene.RemoveNode(review.outputs.table)
    order = review.logic.reviewOrder("ball")
    assert review.logic.jumpToSlice("ball", order[0]) == pytest.approx(mrml.slice_ras(review.outputs, "ball", order[0]))
    assert review.logic.showResults(review.headless.app_logic) == slicer.vtkMRMLLayoutNode.SlicerLayoutFourUpPlotTableView


def test_recolouring_after_a_deleted_model_and_a_scene_close_raises_nothing(review):
    scene, logic = review.scene, review.logic
    assert logic.showArray("MSI") == 1
    assert review.outputs.models["ball"].GetDisplayNode().GetActiveScalarName() == "MSI"
    scene.RemoveNode(review.outputs.models["ball"])  # the user deletes the test model
    assert logic.showArray("SignedDistance_mm") == 1  # the reference model is still coloured
    assert review.outputs.reference_models["ball"].GetDisplayNode().GetActiveScalarName() == "SignedDistance_mm"
    scene.Clear(0)  # what closing the scene does
    assert logic.showArray("MSI") == 0
    assert logic.jumpToSlice("ball", 16) is None
    logic.clearOutputs()  # the widget does this on StartCloseEvent
    assert logic.outputs is None and logic.showArray("MSI") == 0 and logic.reviewRows("ball") == []


def test_cancel_leaves_the_scene_as_it_was(review):
    scene, logic = review.scene, review.logic
    before = node_ids(scene)
    dice = review.outputs.table.GetTable().GetColumnByName("dice").GetValue(0)
    for stop_at in range(1, 6):
        calls = []

        def progress(fraction, message):
            calls.append(message)
            if len(calls) == stop_at:
                raise mrml.Cancelled()

        with pytest.raises(mrml.Cancelled):
            logic.run(*review.nodes, metrics=["overlap"], progress=progress)
        assert node_ids(scene) == before, calls[-1]
    assert review.outputs.table.GetTable().GetColumnByName("dice").GetValue(0) == dice


def test_run_removes_only_its_own_nodes_and_never_shows_working_copies(module):
    headless = mrml.create_headless_scene()
    scene = headless.scene
    nodes, _, _ = ball_pair(scene)
    inputs = {n.GetDisplayNode().GetID() for n in nodes}
    added, visible = [], []

    def progress(fraction, message):
        if not added:  # the user adds a node while the run goes on
            added.append(scene.AddNewNodeByClass("vtkMRMLTableNode", "user's table"))
        for index in range(scene.GetNumberOfNodesByClass("vtkMRMLSegmentationDisplayNode")):
            display = scene.GetNthNodeByClass(index, "vtkMRMLSegmentationDisplayNode")
            if display.GetID() not in inputs and display.GetVisibility():
                visible.append(display.GetDisplayableNode().GetName())

    module.SegMetricsLogic().run(*nodes, metrics=["overlap"], progress=progress)
    assert added[0].GetScene() is scene, "a node the user added during the run was removed"
    assert visible == [], "working copies were visible in the views"
    names = [scene.GetNthNode(i).GetName() for i in range(scene.GetNumberOfNodes())]
    assert not [n for n in names if "working copy" in n or n.startswith("SegMetrics export")]


def test_series_have_one_colour_per_pair(module):
    headless = mrml.create_headless_scene()
    scene = headless.scene
    reference = np.zeros((12, 16, 16), np.uint8)
    reference[2:9, 2:7, 2:7] = 1
    reference[2:9, 9:14, 9:14] = 2
    test = np.roll(reference, 1, axis=2)
    names = {1: "left", 2: "right"}
    nodes = [mrml.add_segmentation_from_label_image(scene, LabelImage(a, (1, 1, 1), names=names), n)
             for a, n in ((reference, "reference"), (test, "test"))]
    outputs = module.SegMetricsLogic().run(*nodes, metrics=["msi"])
    colours = []
    for index in range(outputs.chart.GetNumberOfPlotSeriesNodes()):
        series = outputs.chart.GetNthPlotSeriesNode(index)
        if series is not outputs.marker:
            colours.append(tuple(series.GetColor()))
    assert len(colours) == 2 and colours[0] != colours[1]
    assert all(max(c) > 0.2 for c in colours), "no black series"


def test_series_colours_stay_bright_and_distinct_for_many_pairs():
    colours = [mrml.series_colour(index) for index in range(20)]
    assert len(set(colours)) == 20 and all(max(c) > 0.2 for c in colours)
    # neighbours differ clearly: at least 0.2 apart in some channel
    assert all(max(abs(a - b) for a, b in zip(c, d)) > 0.2 for c, d in zip(colours, colours[1:]))


# --- the widget's glue, with stand-ins for its Qt widgets ----------------------------------------


class FakeWidget(SimpleNamespace):
    """Records what the widget code sets on a Qt widget."""

    def blockSignals(self, block):
        return False

    def setPlainText(self, text):
        self.plainText = text

    def clear(self):
        self.items = []

    def addItems(self, items):
        self.items = list(items)
        self.currentText = self.items[0] if self.items else ""

    def setRowCount(self, count):
        self.rows = [{} for _ in range(count)]  # column -> item

    def setItem(self, row, column, item):
        self.rows[row][column] = item

    def selectRow(self, row):
        self.selected = row

    def setColumnCount(self, count):
        self.columnCount = count

    def setHorizontalHeaderLabels(self, labels):
        self.headers = list(labels)


@pytest.fixture
def widget(module, review, monkeypatch):
    monkeypatch.setattr(sys.modules["qt"], "QTableWidgetItem", lambda text: text, raising=False)
    widget = object.__new__(module.SegMetricsWidget)
    widget._parameterNode, widget._currentSlice, widget._running, widget._cancelRequested = None, None, False, False
    widget.logic = review.logic
    widget.ui = SimpleNamespace(resultsLabel=FakeWidget(text=""), notesTextEdit=FakeWidget(plainText=""),
                                pairComboBox=FakeWidget(currentText=""),
                                sliceTable=FakeWidget(rows=[], selected=None),
                                **{name: FakeWidget(enabled=False) for name in
                                   ("showWorstSliceButton", "previousSliceButton", "nextSliceButton")})
    return widget


def test_widget_lists_slices_worst_first_and_steps_through_them(widget, review):
    widget.showOutputs(review.outputs)
    order = review.logic.reviewOrder("ball")
    assert widget.ui.pairComboBox.items == ["ball"]
    assert [int(row[0]) for row in widget.ui.sliceTable.rows] == order
    # MSI without the contours group: no column of NaN for its added length, Dice and HD
    assert widget.ui.sliceTable.headers == ["Slice", "Position (mm)", "MSI (σ 10 mm)", "Status"]
    assert widget.ui.resultsLabel.text.startswith("ball: dice")
    assert widget.ui.notesTextEdit.plainText == "\n".join(review.outputs.result.notes) != ""
    assert widget.ui.nextSliceButton.enabled
    widget.onStep(1)  # from no slice: the worst one
    widget.onStep(1)
    assert widget._currentSlice == order[1] and widget.ui.sliceTable.selected == 1
    widget.onSliceTableClicked(3, 0)
    assert widget._currentSlice == order[3]
    to_ras = review.slice_logics[0].GetSliceNode().GetSliceToRAS()
    assert [to_ras.GetElement(r, 3) for r in range(3)] == pytest.approx(mrml.slice_ras(review.outputs, "ball", order[3]))


def test_widget_progress_raises_cancelled_on_cancel_and_on_scene_close(widget, monkeypatch):
    monkeypatch.setattr(slicer, "app", SimpleNamespace(processEvents=lambda: None), raising=False)
    dialog = SimpleNamespace(wasCanceled=False, labelText="", value=0)
    widget.onProgress(dialog, 0.5, "ball: computing metrics")
    assert (dialog.labelText, dialog.value) == ("ball: computing metrics", 50)
    dialog.wasCanceled = True
    with pytest.raises(mrml.Cancelled):
        widget.onProgress(dialog, 0.75, "ball: building the review surfaces")
    dialog.wasCanceled = False
    widget._running = True
    widget.onSceneStartClose(None, None)  # the user closes the scene during a run
    with pytest.raises(mrml.Cancelled):
        widget.onProgress(dialog, 0.8, "ball: building the review surfaces")


def test_widget_apply_is_disabled_during_a_run_in_a_window_modal_dialog(widget, review, module, monkeypatch):
    """Apply is off while the run goes on and comes back after it; the dialog is window-modal; a
    cancelled run adds no node; the accelerator is not offered while Slicer runs its tests."""
    import contextlib

    qt = sys.modules["qt"]
    monkeypatch.setattr(qt, "Qt", SimpleNamespace(WindowModal="window modal"), raising=False)
    monkeypatch.setattr(qt, "QSettings", lambda: SimpleNamespace(value=lambda key: None), raising=False)
    monkeypatch.setattr(slicer, "app", SimpleNamespace(processEvents=lambda: None, testingEnabled=lambda: True,
                                                       applicationLogic=lambda: review.headless.app_logic), raising=False)
    dialogs = []

    def create_dialog(**options):
        dialogs.append(SimpleNamespace(**{"wasCanceled": False, "value": 0, "close": lambda: None, **options}))
        return dialogs[-1]

    monkeypatch.setattr(slicer.util, "createProgressDialog", create_dialog)
    monkeypatch.setattr(slicer.util, "tryWithErrorDisplay", lambda *a, **k: contextlib.nullcontext())
    widget.ui.applyButton = FakeWidget(enabled=True, toolTip="")
    widget.ui.msiInnerWidthLabel, widget.ui.msiOuterWidthLabel = FakeWidget(text=""), FakeWidget(text="")
    widget.ui.msiInnerLevelSpinBox, widget.ui.msiOuterLevelSpinBox = FakeWidget(enabled=True), FakeWidget(enabled=True)
    widget.ui.referenceSegmentSelector = widget.ui.testSegmentSelector = FakeWidget(
        setCurrentNode=lambda node: None, setCurrentSegmentID=lambda segment: None)
    widget._parameterNode = parameters(referenceSegmentation=review.nodes[0], testSegmentation=review.nodes[1],
                                       msiPreset="tight")
    widget._shownArray = widget._parameterNode.colorArray
    seen = []
    run = review.logic.process

    def process(p, progress):
        def watch(fraction, message):
            seen.append(widget.ui.applyButton.enabled)
            progress(fraction, message)
        return run(p, progress=watch)

    monkeypatch.setattr(review.logic, "process", process)
    widget.onApplyButton()
    assert dialogs[0].windowModality == "window modal"
    assert seen and not any(seen), "Apply was enabled during the run"
    assert widget.ui.applyButton.enabled
    # the tight preset's levels are shown, and the level boxes are locked to them
    p = widget._parameterNode
    assert (p.msiInnerLevel, p.msiOuterLevel) == (1.0, 10.0) and not widget.ui.msiOuterLevelSpinBox.enabled
    assert widget.ui.msiOuterWidthLabel.text == "σ = 1 mm"
    before = sorted(review.scene.GetNthNode(i).GetID() for i in range(review.scene.GetNumberOfNodes()))
    monkeypatch.setattr(slicer.util, "createProgressDialog",
                        lambda **options: SimpleNamespace(wasCanceled=True, labelText="", value=0, close=lambda: None))
    widget.onApplyButton()
    assert widget.ui.resultsLabel.text.startswith("Cancelled")
    assert sorted(review.scene.GetNthNode(i).GetID() for i in range(review.scene.GetNumberOfNodes())) == before
    assert widget.ui.applyButton.enabled


def test_widget_scene_close_clears_the_results(widget, review):
    widget.showOutputs(review.outputs)
    widget.onSceneStartClose(None, None)
    assert widget.logic.outputs is None
    assert widget.ui.sliceTable.rows == [] and not widget.ui.nextSliceButton.enabled
    assert widget.ui.pairComboBox.items == []


def test_a_full_run_needs_only_what_slicer_bundles():
    """With the accelerator, scikit-image, shapely and the CLI's extras (matplotlib, slicerio, rich)
    unimportable, every metric group runs and the outputs are written."""
    code = textwrap.dedent(
        """
        import sys
        sys.path.insert(0, %r)
        from slicer_stand_ins import BlockImports
        sys.meta_path.insert(0, BlockImports({"numba", "llvmlite", "skimage", "shapely", "matplotlib", "slicerio", "rich"}))
        import numpy as np
        from segmetrics import LabelImage, mrml
        from segmetrics.registry import all_groups

        headless = mrml.create_headless_scene()
        reference = np.zeros((10, 12, 12), np.uint8)
        reference[2:8, 3:9, 3:9] = 1
        test = np.roll(reference, 1, axis=2)
        nodes = [mrml.add_segmentation_from_label_image(headless.scene, LabelImage(a, (1, 1, 1), names={1: "box"}), n)
                 for a, n in ((reference, "r"), (test, "t"))]
        outputs = mrml.run(*nodes, metrics=list(all_groups()))
        print(sorted(all_groups()), outputs.table.GetNumberOfColumns() > 10, sorted(outputs.models))
        """ % str(Path(__file__).resolve().parent)
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "SEGMETRICS_ACCELERATOR": "off"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[-2] == "['contours', 'distance', 'dose', 'lesions', 'msi', 'overlap', 'roughness'] True ['box']"


def test_slice_rows_carry_the_added_path_length_of_each_slice(module):
    """The test misses the ball's voxels at x >= 28 mm; the contours meet x = 27.5 mm (test) and
    half a voxel beyond the last reference voxel, so a slice needs a contour added (beyond the 1 mm
    tolerance) exactly when the reference reaches x = 29, none when it stops before x = 28; on the
    middle slice about the arc of the 12 mm circle beyond 8..9.5 mm from its centre (2 r arccos(d / r))."""
    scene = mrml.create_headless_scene().scene
    nodes, reference, _test = ball_pair(scene)
    outputs = module.SegMetricsLogic().run(*nodes, metrics=["msi", "contours"])
    rows = {r["slice"]: r for r in mrml.slice_rows(outputs.result["ball"])}
    assert sorted(rows) == list(np.flatnonzero(reference.any(axis=(1, 2))))
    missed = [z for z in rows if reference[z, :, 29:].any()]
    untouched = [z for z in rows if not reference[z, :, 28:].any()]
    assert len(missed) > 10 and len(untouched) > 6
    assert all(rows[z]["apl_mm"] > 1 for z in missed)
    assert all(rows[z]["apl_mm"] == 0 for z in untouched)
    assert 2 * 12 * np.arccos(9.5 / 12) - 1 < rows[16]["apl_mm"] < 2 * 12 * np.arccos(7.5 / 12)
