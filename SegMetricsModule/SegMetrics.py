"""SegMetrics Slicer module: review a test segmentation against a reference, slice by slice.

The work is done by :mod:`segmetrics.mrml` (scene glue) and :func:`segmetrics.compare` (metrics);
this file only wires the user interface and the parameter node to them. Needs Slicer 5.10 or later.
"""
import importlib
import math
import os
from typing import Annotated

import numpy as np
import qt
import slicer
import vtk
from slicer import vtkMRMLSegmentationNode, vtkMRMLTableNode
from slicer.i18n import tr as _
from slicer.i18n import translate
from slicer.parameterNodeWrapper import Choice, WithinRange, parameterNodeWrapper
from slicer.ScriptedLoadableModule import (
    ScriptedLoadableModule,
    ScriptedLoadableModuleLogic,
    ScriptedLoadableModuleTest,
    ScriptedLoadableModuleWidget,
)
from slicer.util import VTKObservationMixin

from segmetrics import LabelImage, Parameters, mrml
from segmetrics.registry import all_groups

METRIC_GROUPS = ("overlap", "distance", "msi", "roughness")
#: Packages Slicer bundles that numba or scikit-image depend on: installing the requirements must
#: not replace them (pip is held to their installed versions).
BUNDLED_PACKAGES = ("numpy", "scipy")
#: Oldest Slicer release the module supports (Python 3.12; 5.8 has Python 3.9, which numba and
#: scikit-image releases for this module no longer support).
MINIMUM_SLICER_VERSION = "5.10"
DOCUMENTATION_URL = "https://github.com/SegMetrics/SlicerSegMetrics#the-3d-slicer-extension"
#: Columns of the per-slice review table: (title, key of a per-slice row).
SLICE_COLUMNS = ((_("Slice"), "slice"), (_("Position (mm)"), "position_mm"), (_("MSI"), "msi"),
                 (_("Added length (mm)"), "apl_mm"), (_("Dice"), "dice"), (_("HD (mm)"), "hd_mm"), (_("Status"), "status"))


class SegMetrics(ScriptedLoadableModule):
    def __init__(self, parent):
        ScriptedLoadableModule.__init__(self, parent)
        self.parent.title = _("SegMetrics")
        self.parent.categories = [translate("qSlicerAbstractCoreModule", "Quantification")]
        self.parent.dependencies = []
        self.parent.contributors = ["SegMetrics developers (SegMetrics project)"]
        self.parent.helpText = _(
            "Review a test segmentation against a reference, segment by segment and slice by slice: overlap "
            "(Dice, Jaccard, volumes), surface distances (HD, HD percentile, ASSD, NSD), slice-wise and per-vertex "
            "MSI and roughness. Both contours are coloured by the local error in the slice views (signed distance "
            "by default; on the reference, high values show what the test missed), a per-slice table steps "
            "through the slices from the worst MSI up, and results go to a table and a per-slice MSI chart. "
            "Requires Slicer {version} or later. See the <a href=\"{url}\">documentation</a>."
        ).format(version=MINIMUM_SLICER_VERSION, url=DOCUMENTATION_URL)
        self.parent.acknowledgementText = _("Built on SimpleITK, VTK, scikit-image and numba.")


@parameterNodeWrapper
class SegMetricsParameterNode:
    """Module state. Segment IDs are synced from the segment selectors by hand (no connector)."""

    referenceSegmentation: vtkMRMLSegmentationNode
    referenceSegmentID: str = ""
    testSegmentation: vtkMRMLSegmentationNode
    testSegmentID: str = ""
    allSegments: bool = True
    overlap: bool = True
    distance: bool = True
    msi: bool = True
    roughness: bool = True
    hdPercentile: Annotated[float, WithinRange(0, 100)] = 95.0
    nsdToleranceMm: Annotated[float, WithinRange(0, 100)] = 2.0
    msiInnerLevel: Annotated[float, WithinRange(0, 100)] = 1.0
    msiOuterLevel: Annotated[float, WithinRange(0, 100)] = 1.0
    msiAxis: Annotated[int, WithinRange(-1, 2)] = -1  # -1: the axis with the largest spacing
    roughnessWindowMm: Annotated[float, WithinRange(0, 100)] = 0.0  # 0 = the convention's default
    outputTable: vtkMRMLTableNode
    colorArray: Annotated[str, Choice(list(mrml.SURFACE_ARRAYS))] = mrml.SURFACE_ARRAYS[0]


class SegMetricsWidget(ScriptedLoadableModuleWidget, VTKObservationMixin):
    def __init__(self, parent=None):
        ScriptedLoadableModuleWidget.__init__(self, parent)
        VTKObservationMixin.__init__(self)
        self.logic = None
        self._parameterNode = None
        self._parameterNodeGuiTag = None
        self._shownArray = None
        self._currentSlice = None

    def setup(self):
        ScriptedLoadableModuleWidget.setup(self)
        uiWidget = slicer.util.loadUI(self.resourcePath("UI/SegMetrics.ui"))
        self.layout.addWidget(uiWidget)
        self.ui = slicer.util.childWidgetVariables(uiWidget)
        uiWidget.setMRMLScene(slicer.mrmlScene)
        self.logic = SegMetricsLogic()

        self.addObserver(slicer.mrmlScene, slicer.mrmlScene.StartCloseEvent, self.onSceneStartClose)
        self.addObserver(slicer.mrmlScene, slicer.mrmlScene.EndCloseEvent, self.onSceneEndClose)
        for selector in (self.ui.referenceSegmentSelector, self.ui.testSegmentSelector):
            selector.connect("currentNodeChanged(vtkMRMLNode*)", self.onSegmentSelectionChanged)
            selector.connect("currentSegmentChanged(QString)", self.onSegmentSelectionChanged)
        self.ui.applyButton.connect("clicked(bool)", self.onApplyButton)
        self.ui.pairComboBox.connect("currentTextChanged(QString)", self.onPairChanged)
        self.ui.showWorstSliceButton.connect("clicked(bool)", lambda: self.showSlice(self.logic.stepSlice(self.currentPair(), None, 1)))
        self.ui.previousSliceButton.connect("clicked(bool)", lambda: self.onStep(-1))
        self.ui.nextSliceButton.connect("clicked(bool)", lambda: self.onStep(1))
        self.ui.sliceTable.connect("cellClicked(int,int)", self.onSliceTableClicked)
        self.ui.sliceTable.setColumnCount(len(SLICE_COLUMNS))
        self.ui.sliceTable.setHorizontalHeaderLabels([title for title, _key in SLICE_COLUMNS])
        self.initializeParameterNode()

    def cleanup(self):
        self.removeObservers()

    def enter(self):
        self.initializeParameterNode()

    def exit(self):
        if self._parameterNode:
            self._parameterNode.disconnectGui(self._parameterNodeGuiTag)
            self._parameterNodeGuiTag = None
            self.removeObserver(self._parameterNode, vtk.vtkCommand.ModifiedEvent, self.onParameterNodeModified)

    def onSceneStartClose(self, caller, event):
        self.setParameterNode(None)
        self.logic.clearOutputs()
        self.showOutputs(None)

    def onSceneEndClose(self, caller, event):
        if self.parent.isEntered:
            self.initializeParameterNode()

    def initializeParameterNode(self):
        self.setParameterNode(self.logic.getParameterNode())

    def setParameterNode(self, inputParameterNode):
        if self._parameterNode:
            self._parameterNode.disconnectGui(self._parameterNodeGuiTag)
            self.removeObserver(self._parameterNode, vtk.vtkCommand.ModifiedEvent, self.onParameterNodeModified)
        self._parameterNode = inputParameterNode
        if self._parameterNode:
            self._parameterNodeGuiTag = self._parameterNode.connectGui(self.ui)
            self.addObserver(self._parameterNode, vtk.vtkCommand.ModifiedEvent, self.onParameterNodeModified)
            self.onParameterNodeModified()

    def onParameterNodeModified(self, caller=None, event=None):
        """Sync the segment selectors, the MSI widths, the Apply button and the colouring array."""
        p = self._parameterNode
        for selector, node, segmentID in (
            (self.ui.referenceSegmentSelector, p.referenceSegmentation, p.referenceSegmentID),
            (self.ui.testSegmentSelector, p.testSegmentation, p.testSegmentID),
        ):
            wasBlocked = selector.blockSignals(True)
            selector.setCurrentNode(node)
            selector.setCurrentSegmentID(segmentID)
            selector.blockSignals(wasBlocked)
        self.ui.msiInnerWidthLabel.text = self.logic.msiWidthText(p.msiInnerLevel)
        self.ui.msiOuterWidthLabel.text = self.logic.msiWidthText(p.msiOuterLevel)
        problem = self.logic.validationError(p)
        self.ui.applyButton.enabled = problem is None
        self.ui.applyButton.toolTip = problem or _("Compute the selected metrics")
        if p.colorArray != self._shownArray:
            self._shownArray = p.colorArray
            self.logic.showArray(p.colorArray)

    def onSegmentSelectionChanged(self, *args):
        if self._parameterNode is None:
            return
        ref, test = self.ui.referenceSegmentSelector, self.ui.testSegmentSelector
        # read both selectors before writing: each write re-syncs the selectors from the node
        selection = (ref.currentNode(), ref.currentSegmentID() or "", test.currentNode(), test.currentSegmentID() or "")
        p = self._parameterNode
        p.referenceSegmentation, p.referenceSegmentID, p.testSegmentation, p.testSegmentID = selection

    def onApplyButton(self):
        with slicer.util.tryWithErrorDisplay(_("Failed to compute the segmentation metrics."), waitCursor=True):
            self.logic.ensureRequirements(confirm=lambda text: slicer.util.confirmOkCancelDisplay(text, _("SegMetrics")))
            dialog = slicer.util.createProgressDialog(labelText=_("Comparing segmentations..."), maximum=100)
            try:
                outputs = self.logic.process(self._parameterNode, progress=lambda f, m: self.onProgress(dialog, f, m))
            except mrml.Cancelled:
                self.ui.resultsLabel.text = _("Cancelled: the scene is as it was before Apply.")
                return
            finally:
                dialog.close()
            self._shownArray = self._parameterNode.colorArray
            self.showOutputs(outputs)
            self.logic.showResults(slicer.app.applicationLogic())

    @staticmethod
    def onProgress(dialog, fraction, message):
        """Update the progress dialog; stop the run (:class:`segmetrics.mrml.Cancelled`) on Cancel."""
        slicer.app.processEvents()
        if dialog.wasCanceled:
            raise mrml.Cancelled()
        dialog.labelText = message
        dialog.value = int(100 * fraction)

    def showOutputs(self, outputs):
        """Fill the results panel (summary and pair list) from a run, or clear it for None."""
        self.ui.resultsLabel.text = self.logic.summary(outputs) if outputs else _("No results yet.")
        wasBlocked = self.ui.pairComboBox.blockSignals(True)
        self.ui.pairComboBox.clear()
        self.ui.pairComboBox.addItems([s.structure for s in outputs.result.structures] if outputs else [])
        self.ui.pairComboBox.blockSignals(wasBlocked)
        self.onPairChanged()

    def currentPair(self):
        return self.ui.pairComboBox.currentText

    def onPairChanged(self, *args):
        """List the selected pair's slices (worst MSI first) and enable the navigation buttons."""
        rows = self.logic.reviewRows(self.currentPair())
        table = self.ui.sliceTable
        table.setRowCount(len(rows))
        for rowIndex, row in enumerate(rows):
            for column, (_title, key) in enumerate(SLICE_COLUMNS):
                value = row[key]
                text = f"{value:.3f}" if isinstance(value, float) else str(value)
                table.setItem(rowIndex, column, qt.QTableWidgetItem(text))
        for button in (self.ui.showWorstSliceButton, self.ui.previousSliceButton, self.ui.nextSliceButton):
            button.enabled = bool(rows)
        self._currentSlice = None

    def onSliceTableClicked(self, rowIndex, column):
        rows = self.logic.reviewRows(self.currentPair())
        if 0 <= rowIndex < len(rows):
            self.showSlice(rows[rowIndex]["slice"])

    def onStep(self, step):
        index = self.logic.stepSlice(self.currentPair(), self._currentSlice, step)
        if index is not None:
            self.showSlice(index)

    def showSlice(self, index):
        """Centre the slice views on a slice of the selected pair, mark it on the chart, select its row."""
        if index is None or self.logic.jumpToSlice(self.currentPair(), index) is None:
            return
        self._currentSlice = index
        order = self.logic.reviewOrder(self.currentPair())
        self.ui.sliceTable.selectRow(order.index(index))


class SegMetricsLogic(ScriptedLoadableModuleLogic):
    """Everything the module does except Qt calls; callable from the Python console.

    Example::

        logic = SegMetricsLogic()
        outputs = logic.run(referenceNode, testNode, metrics=["overlap", "distance"])
        print(outputs.result.records())
        logic.jumpToSlice("Segment_1", logic.reviewOrder("Segment_1")[0])  # worst slice
    """

    def __init__(self):
        ScriptedLoadableModuleLogic.__init__(self)
        self.outputs = None

    def getParameterNode(self):
        return SegMetricsParameterNode(super().getParameterNode())

    # --- packages ------------------------------------------------------------------------------

    @staticmethod
    def requirementsPath():
        return os.path.join(os.path.dirname(__file__), "Resources", "requirements.txt")

    @classmethod
    def missingRequirements(cls):
        """Lines of Resources/requirements.txt that the Python environment does not satisfy
        (package absent, or its version outside the specifier)."""
        from importlib.metadata import PackageNotFoundError, version

        from packaging.requirements import Requirement

        with open(cls.requirementsPath()) as handle:
            lines = [line.split("#")[0].strip() for line in handle]
        missing = []
        for line in filter(None, lines):
            requirement = Requirement(line)
            try:
                installed = version(requirement.name)
            except PackageNotFoundError:
                installed = None
            if installed is None or not requirement.specifier.contains(installed, prereleases=True):
                missing.append(line)
        return missing

    @staticmethod
    def bundledConstraints():
        """A pip constraints file (path) holding :data:`BUNDLED_PACKAGES` at their installed versions."""
        import tempfile
        from importlib.metadata import version

        with tempfile.NamedTemporaryFile("w", suffix="-constraints.txt", prefix="SegMetrics-", delete=False) as handle:
            handle.writelines(f"{name}=={version(name)}\n" for name in BUNDLED_PACKAGES)
        return handle.name

    @classmethod
    def ensureRequirements(cls, confirm=None, installInTesting=False):
        """Install what Slicer does not bundle (Resources/requirements.txt), asking first.

        Slicer 5.12 and later: ``slicer.packaging.pip_ensure`` (``import slicer`` does not import
        that submodule), which checks, asks and installs; in testing mode it installs only with
        ``installInTesting`` (then without any dialog). Slicer 5.10: the missing requirements are
        listed first; nothing happens when there are none, else ``confirm(text)`` is asked
        (when given) and ``slicer.util.pip_install`` installs only those. Raises RuntimeError
        when the user declines. Either way pip keeps Slicer's own numpy and scipy
        (:meth:`bundledConstraints`).
        """
        try:
            packaging = importlib.import_module("slicer.packaging")
        except ImportError:
            packaging = None
        missing = [] if packaging is not None else cls.missingRequirements()
        if packaging is None and not missing:
            return
        if missing:
            text = _("SegMetrics needs these Python packages, which will now be installed: {packages}").format(packages=", ".join(missing))
            if confirm is not None and not confirm(text):
                raise RuntimeError(_("SegMetrics cannot run without: {packages}").format(packages=", ".join(missing)))
        constraints = cls.bundledConstraints()
        try:
            if packaging is not None:
                packaging.pip_ensure(packaging.load_requirements(cls.requirementsPath()), constraints=constraints,
                                     requester="SegMetrics", prompt_install=not installInTesting,
                                     prompt_restart=not installInTesting, skip_in_testing=not installInTesting)
            else:
                slicer.util.pip_install(["-c", constraints, *missing])
        finally:
            os.remove(constraints)

    # --- parameters ----------------------------------------------------------------------------

    @staticmethod
    def validationError(p):
        """Why the parameters cannot be run (a sentence), or None when they can."""
        if p.referenceSegmentation is None or p.testSegmentation is None:
            return _("Select a reference and a test segmentation.")
        if not p.allSegments and not (p.referenceSegmentID and p.testSegmentID):
            return _("Select a reference and a test segment, or tick 'All segments matched by name'.")
        if not p.allSegments and p.referenceSegmentation == p.testSegmentation and p.referenceSegmentID == p.testSegmentID:
            return _("The reference and test segments are the same segment.")
        if not any(getattr(p, group) for group in METRIC_GROUPS):
            return _("Select at least one metric group.")
        return None

    @staticmethod
    def msiWidthMm(level):
        """Width σ (mm) of the MSI weight at a severity level: 10 / level (infinite at level 0)."""
        return 10.0 / level if level > 0 else math.inf

    @classmethod
    def msiWidthText(cls, level):
        """The MSI level's weight width for display beside the level, e.g. 'σ = 10 mm'."""
        return _("σ = {width:.3g} mm").format(width=cls.msiWidthMm(level))

    @staticmethod
    def metricParameters(p):
        """The chosen metric groups that this segmetrics version has, and :class:`segmetrics.Parameters`."""
        groups = [group for group in METRIC_GROUPS if getattr(p, group) and group in all_groups()]
        params = Parameters(
            hd_percentile=p.hdPercentile,
            nsd_tolerance_mm=p.nsdToleranceMm,
            msi_il=p.msiInnerLevel,
            msi_ol=p.msiOuterLevel,
            msi_axis=None if p.msiAxis < 0 else p.msiAxis,
            roughness_window_mm=p.roughnessWindowMm or None,
        )
        return groups, params

    # --- running -------------------------------------------------------------------------------

    def process(self, p, progress=None):
        """Run with the parameter node's settings; stores the output table in it."""
        groups, params = self.metricParameters(p)
        ids = (None, None) if p.allSegments else ([p.referenceSegmentID], [p.testSegmentID])
        outputs = self.run(p.referenceSegmentation, p.testSegmentation, *ids, metrics=groups, params=params,
                           tableNode=p.outputTable, colorArray=p.colorArray, progress=progress)
        p.outputTable = outputs.table
        return outputs

    def run(self, referenceNode, testNode, referenceSegmentIDs=None, testSegmentIDs=None, metrics=None,
            params=None, tableNode=None, colorArray=mrml.SURFACE_ARRAYS[0], progress=None):
        """Compare segment pairs (the given IDs, or all segments matched by name); see :func:`segmetrics.mrml.run`.

        ``progress(fraction, message)`` may raise :class:`segmetrics.mrml.Cancelled`: the run then
        stops, the previous outputs stay as they were and nothing new is added to the scene.
        """
        pairs = None
        if referenceSegmentIDs is not None or testSegmentIDs is not None:
            pairs = mrml.segment_pairs(referenceNode, testNode, referenceSegmentIDs, testSegmentIDs)
        self.outputs = mrml.run(referenceNode, testNode, pairs, metrics, params, tableNode, colorArray, progress)
        return self.outputs

    def clearOutputs(self):
        """Forget the last run (on scene close: its nodes are gone)."""
        self.outputs = None

    def summary(self, outputs):
        """A few lines for the results panel: Dice and HD95 per pair, status and notes."""
        lines = []
        for s in outputs.result.structures:
            values = {v.metric: v.value for v in s.values}
            shown = [f"{name} {values[name]:.3g}" for name in ("dice", "hd95_mm", "msi") if name in values]
            lines.append(f"{s.structure}: {', '.join(shown) or _('computed')} ({s.status})")
        return "\n".join(lines + [_("Note: {note}").format(note=note) for note in outputs.result.notes])

    def showResults(self, appLogic):
        """Switch to a layout with a table and a chart view and show the results table and MSI chart."""
        if self.outputs is not None and self.outputs.table.GetScene() is not None:
            mrml.show_results(appLogic, self.outputs)

    # --- review --------------------------------------------------------------------------------

    def showArray(self, arrayName):
        """Colour every pair's surfaces and contours by one point array; models removed from the
        scene (deleted by the user, or a closed scene) are skipped. Returns the pairs coloured."""
        return mrml.show_outputs_array(self.outputs, arrayName) if self.outputs else 0

    def _structure(self, structure):
        if self.outputs is None:
            return None
        return next((s for s in self.outputs.result.structures if s.structure == structure), None)

    def reviewOrder(self, structure):
        """The pair's slice indices, lowest MSI first (:func:`segmetrics.mrml.review_order`)."""
        found = self._structure(structure)
        return mrml.review_order(found) if found is not None else []

    def reviewRows(self, structure):
        """The pair's per-slice rows (dicts: slice, position_mm, msi, status, ...) in review order."""
        found = self._structure(structure)
        if found is None:
            return []
        rows = {int(r["slice"]): r for r in mrml.slice_rows(found)}
        return [rows[index] for index in mrml.review_order(found)]

    def stepSlice(self, structure, current, step):
        """The slice ``step`` places from ``current`` in review order (the worst one for None)."""
        found = self._structure(structure)
        return mrml.step_slice(found, current, step) if found is not None else None

    def jumpToSlice(self, structure, index):
        """Centre all slice views on slice ``index`` of a pair (centred jump through the centre of
        both segments in that slice) and mark it on the chart; returns its RAS position or None."""
        if self.outputs is None or self.outputs.table.GetScene() is None:
            return None
        position = mrml.slice_ras(self.outputs, structure, index)
        if position is None:
            return None
        mrml.jump_to(self.outputs.table.GetScene(), position)
        mrml.mark_slice(self.outputs, structure, index)
        return position

    def worstSliceRAS(self, structure):
        """RAS position (mm) of the worst MSI slice of one pair, or None without per-slice MSI."""
        return mrml.worst_slice_ras(self.outputs, structure) if self.outputs else None


class SegMetricsTest(ScriptedLoadableModuleTest):
    """Runs in Slicer (Reload and Test, and Slicer's CI through ``slicer_add_python_unittest``).

    Testing mode installs no packages by default, but every test here computes metrics: the
    requirements are installed first (without a prompt), and a failure to install fails the test.
    """

    def setUp(self):
        slicer.mrmlScene.Clear()

    def runTest(self):
        self.setUp()
        self.test_requirements()
        self.setUp()
        self.test_overlap_table()
        self.setUp()
        self.test_slice_review()

    def test_requirements(self):
        SegMetricsLogic.ensureRequirements(installInTesting=True)
        self.assertEqual(SegMetricsLogic.missingRequirements(), [])

    def _segmentations(self, reference, test, spacing, name):
        return [
            mrml.add_segmentation_from_label_image(slicer.mrmlScene, LabelImage(a, spacing, names={1: name}), role)
            for a, role in ((reference, "Reference"), (test, "Test"))
        ]

    def test_overlap_table(self):
        """Two boxes of known overlap: the table holds the hand-computed Dice and volumes."""
        self.delayDisplay("Overlap of two boxes")
        reference = np.zeros((20, 30, 40), np.uint8)
        reference[5:15, 10:20, 10:30] = 1  # 2000 voxels
        test = np.zeros_like(reference)
        test[5:15, 10:20, 20:35] = 1  # 1500 voxels, 1000 shared
        nodes = self._segmentations(reference, test, (2.0, 1.0, 0.5), "box")  # mm, (z, y, x): voxel = 1 mm³
        table = SegMetricsLogic().run(*nodes, metrics=["overlap"]).table
        self.assertEqual(table.GetNumberOfRows(), 1)
        self.assertEqual(table.GetCellText(0, table.GetColumnIndex("Structure")), "box")
        self.assertAlmostEqual(float(table.GetCellText(0, table.GetColumnIndex("dice"))), 2 * 1000 / 3500, places=5)
        self.assertAlmostEqual(float(table.GetCellText(0, table.GetColumnIndex("volume_reference_ml [ml]"))), 2.0, places=5)
        self.assertEqual(table.GetCellText(0, table.GetColumnIndex("Status")), "ok")

    def test_slice_review(self):
        """A ball whose test misses a 4 mm cap: the reference contour shows the miss, the review
        starts at the slices through the cap, and the views centre on them."""
        self.delayDisplay("Slice review of a missed cap")
        z, y, x = np.mgrid[:32, :40, :40]
        reference = ((z - 16) ** 2 + (y - 20) ** 2 + (x - 20) ** 2 <= 12**2).astype(np.uint8)
        test = reference.copy()
        test[:, :, 28:] = 0  # the cap beyond x = 28 voxels (1 mm) is missed
        nodes = self._segmentations(reference, test, (1.0, 1.0, 1.0), "ball")
        logic = SegMetricsLogic()
        outputs = logic.run(*nodes, metrics=["overlap", "msi"])
        dice = outputs.table.GetTable().GetColumnByName("dice").GetValue(0)
        self.assertAlmostEqual(dice, 2 * test.sum() / (reference.sum() + test.sum()), places=6)
        missed = outputs.reference_models["ball"].GetPolyData().GetPointData().GetArray("SignedDistance_mm")
        self.assertGreater(missed.GetRange()[1], 3.0)  # the cap is up to 4 mm deep
        order = logic.reviewOrder("ball")
        msi = {int(r["slice"]): r["msi"] for r in mrml.slice_rows(outputs.result["ball"])}
        self.assertEqual(sorted(msi.values())[0], msi[order[0]])
        position = logic.jumpToSlice("ball", order[0])
        red = slicer.app.layoutManager().sliceWidget("Red").mrmlSliceNode()
        center = [red.GetSliceToRAS().GetElement(row, 3) for row in range(3)]
        for got, expected in zip(center, position):
            self.assertAlmostEqual(got, expected, places=3)
        logic.showResults(slicer.app.applicationLogic())
        layout = slicer.mrmlScene.GetFirstNodeByClass("vtkMRMLLayoutNode")
        self.assertEqual(layout.GetViewArrangement(), slicer.vtkMRMLLayoutNode.SlicerLayoutFourUpPlotTableView)
        slicer.mrmlScene.Clear()  # the outputs' nodes are gone: recolouring skips them
        self.assertEqual(logic.showArray("MSI"), 0)
        logic.clearOutputs()
        self.assertIsNone(logic.jumpToSlice("ball", order[0]))
        self.delayDisplay("Test passed")
