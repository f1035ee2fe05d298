"""SegMetrics Slicer module: compare two segmentations segment by segment.

The work is done by :mod:`segmetrics.mrml` (scene glue) and :func:`segmetrics.compare` (metrics);
this file only wires the user interface and the parameter node to them.
"""
import importlib.util
import os
from typing import Annotated

import numpy as np
import slicer
import vtk
from slicer import vtkMRMLSegmentationNode, vtkMRMLTableNode
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


class SegMetrics(ScriptedLoadableModule):
    def __init__(self, parent):
        ScriptedLoadableModule.__init__(self, parent)
        self.parent.title = "SegMetrics"
        self.parent.categories = ["Quantification"]
        self.parent.dependencies = []
        self.parent.contributors = ["SegMetrics developers"]
        self.parent.helpText = (
            "Compare a test segmentation with a reference, segment by segment: overlap (Dice, Jaccard, "
            "volumes), surface distances (HD, HD percentile, ASSD, NSD), slice-wise and per-vertex MSI and "
            "roughness. Results go to a table, a per-slice MSI plot and test-surface models coloured by the "
            "local error. Both segmentations are compared on the reference segmentation's geometry."
        )
        self.parent.acknowledgementText = "Built on SimpleITK, VTK and scikit-image."


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
    colorArray: Annotated[str, Choice(list(mrml.SURFACE_ARRAYS))] = "MSI"


class SegMetricsWidget(ScriptedLoadableModuleWidget, VTKObservationMixin):
    def __init__(self, parent=None):
        ScriptedLoadableModuleWidget.__init__(self, parent)
        VTKObservationMixin.__init__(self)
        self.logic = None
        self._parameterNode = None
        self._parameterNodeGuiTag = None

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
        self.ui.colorArrayComboBox.connect("currentTextChanged(QString)", self.logic.showArray)
        self.ui.pairComboBox.connect("currentTextChanged(QString)", self.updateWorstSliceButton)
        self.ui.showWorstSliceButton.connect("clicked(bool)", self.onShowWorstSlice)
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
        """Copy the segment selection to the selectors and update the Apply button."""
        p = self._parameterNode
        for selector, node, segmentID in (
            (self.ui.referenceSegmentSelector, p.referenceSegmentation, p.referenceSegmentID),
            (self.ui.testSegmentSelector, p.testSegmentation, p.testSegmentID),
        ):
            wasBlocked = selector.blockSignals(True)
            selector.setCurrentNode(node)
            selector.setCurrentSegmentID(segmentID)
            selector.blockSignals(wasBlocked)
        problem = self.logic.validationError(p)
        self.ui.applyButton.enabled = problem is None
        self.ui.applyButton.toolTip = problem or "Compute the selected metrics"

    def onSegmentSelectionChanged(self, *args):
        if self._parameterNode is None:
            return
        ref, test = self.ui.referenceSegmentSelector, self.ui.testSegmentSelector
        # read both selectors before writing: each write re-syncs the selectors from the node
        selection = (ref.currentNode(), ref.currentSegmentID() or "", test.currentNode(), test.currentSegmentID() or "")
        p = self._parameterNode
        p.referenceSegmentation, p.referenceSegmentID, p.testSegmentation, p.testSegmentID = selection

    def onApplyButton(self):
        with slicer.util.tryWithErrorDisplay("Failed to compute the segmentation metrics.", waitCursor=True):
            self.logic.ensureRequirements()
            dialog = slicer.util.createProgressDialog(labelText="Comparing segmentations...", maximum=100)
            try:
                outputs = self.logic.process(self._parameterNode, progress=lambda f, m: self.onProgress(dialog, f, m))
            finally:
                dialog.close()
            self.ui.resultsLabel.text = self.logic.summary(outputs)
            self.ui.pairComboBox.clear()
            self.ui.pairComboBox.addItems([s.structure for s in outputs.result.structures])
            selection = slicer.app.applicationLogic().GetSelectionNode()
            selection.SetActiveTableID(outputs.table.GetID())
            slicer.app.applicationLogic().PropagateTableSelection()

    @staticmethod
    def onProgress(dialog, fraction, message):
        dialog.labelText = message
        dialog.value = int(100 * fraction)
        slicer.app.processEvents()

    def updateWorstSliceButton(self, structure=""):
        self.ui.showWorstSliceButton.enabled = self.logic.worstSliceRAS(structure) is not None

    def onShowWorstSlice(self):
        position = self.logic.worstSliceRAS(self.ui.pairComboBox.currentText)
        if position is not None:
            slicer.vtkMRMLSliceNode.JumpAllSlices(slicer.mrmlScene, *position)


class SegMetricsLogic(ScriptedLoadableModuleLogic):
    """Thin wrapper over :mod:`segmetrics.mrml`; callable from the Python console.

    Example::

        logic = SegMetricsLogic()
        outputs = logic.run(referenceNode, testNode, metrics=["overlap", "distance"])
        print(outputs.result.records())
    """

    def __init__(self):
        ScriptedLoadableModuleLogic.__init__(self)
        self.outputs = None

    def getParameterNode(self):
        return SegMetricsParameterNode(super().getParameterNode())

    @staticmethod
    def ensureRequirements():
        """Install what Slicer does not bundle (Resources/requirements.txt), asking the user first."""
        path = os.path.join(os.path.dirname(__file__), "Resources", "requirements.txt")
        if hasattr(slicer, "packaging"):
            slicer.packaging.pip_ensure(slicer.packaging.load_requirements(path), requester="SegMetrics")
        else:
            slicer.util.pip_install(["-r", path])

    @staticmethod
    def validationError(p):
        """Why the parameters cannot be run (a sentence), or None when they can."""
        if p.referenceSegmentation is None or p.testSegmentation is None:
            return "Select a reference and a test segmentation."
        if not p.allSegments and not (p.referenceSegmentID and p.testSegmentID):
            return "Select a reference and a test segment, or tick 'All segments matched by name'."
        if not p.allSegments and p.referenceSegmentation == p.testSegmentation and p.referenceSegmentID == p.testSegmentID:
            return "The reference and test segments are the same segment."
        if not any(getattr(p, group) for group in METRIC_GROUPS):
            return "Select at least one metric group."
        return None

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

    def process(self, p, progress=None):
        """Run with the parameter node's settings; stores the output table in it."""
        groups, params = self.metricParameters(p)
        ids = (None, None) if p.allSegments else ([p.referenceSegmentID], [p.testSegmentID])
        outputs = self.run(p.referenceSegmentation, p.testSegmentation, *ids, metrics=groups, params=params,
                           tableNode=p.outputTable, colorArray=p.colorArray, progress=progress)
        p.outputTable = outputs.table
        return outputs

    def run(self, referenceNode, testNode, referenceSegmentIDs=None, testSegmentIDs=None, metrics=None,
            params=None, tableNode=None, colorArray="MSI", progress=None):
        """Compare segment pairs (the given IDs, or all segments matched by name); see :func:`segmetrics.mrml.run`."""
        pairs = None
        if referenceSegmentIDs is not None or testSegmentIDs is not None:
            pairs = mrml.segment_pairs(referenceNode, testNode, referenceSegmentIDs, testSegmentIDs)
        self.outputs = mrml.run(referenceNode, testNode, pairs, metrics, params, tableNode, colorArray, progress)
        return self.outputs

    def summary(self, outputs):
        """A few lines for the results panel: Dice and HD95 per pair, status and notes."""
        lines = []
        for s in outputs.result.structures:
            values = {v.metric: v.value for v in s.values}
            shown = [f"{name} {values[name]:.3g}" for name in ("dice", "hd95_mm", "msi") if name in values]
            lines.append(f"{s.structure}: {', '.join(shown) or 'computed'} ({s.status})")
        return "\n".join(lines + [f"Note: {note}" for note in outputs.result.notes])

    def showArray(self, arrayName):
        """Colour every output surface model by one point array (with its colour legend)."""
        for model in (self.outputs.models.values() if self.outputs else []):
            mrml.show_array(model, arrayName)

    def worstSliceRAS(self, structure):
        """RAS position (mm) of the worst MSI slice of one pair, or None without per-slice MSI."""
        return mrml.worst_slice_ras(self.outputs, structure) if self.outputs else None


class SegMetricsTest(ScriptedLoadableModuleTest):
    def setUp(self):
        slicer.mrmlScene.Clear()

    def runTest(self):
        self.setUp()
        self.test_overlap_table()

    def test_overlap_table(self):
        """Two boxes of known overlap: the table holds the hand-computed Dice and volumes."""
        missing = [name for name in ("skimage", "numba") if importlib.util.find_spec(name) is None]
        if missing:  # testing mode installs no packages
            self.delayDisplay(f"{', '.join(missing)} not installed: SegMetrics test skipped")
            return
        self.delayDisplay("Starting the SegMetrics test")
        reference = np.zeros((20, 30, 40), np.uint8)
        reference[5:15, 10:20, 10:30] = 1  # 2000 voxels
        test = np.zeros_like(reference)
        test[5:15, 10:20, 20:35] = 1  # 1500 voxels, 1000 shared
        spacing = (2.0, 1.0, 0.5)  # mm, array order (z, y, x): voxel = 1 mm³
        nodes = [
            mrml.add_segmentation_from_label_image(slicer.mrmlScene, LabelImage(a, spacing, names={1: "box"}), name)
            for a, name in ((reference, "Reference"), (test, "Test"))
        ]
        outputs = SegMetricsLogic().run(*nodes, metrics=["overlap"])
        table = outputs.table
        self.assertEqual(table.GetNumberOfRows(), 1)
        self.assertEqual(table.GetCellText(0, table.GetColumnIndex("Structure")), "box")
        self.assertAlmostEqual(float(table.GetCellText(0, table.GetColumnIndex("dice"))), 2 * 1000 / 3500, places=5)
        self.assertAlmostEqual(float(table.GetCellText(0, table.GetColumnIndex("volume_reference_ml [ml]"))), 2.0, places=5)
        self.assertEqual(table.GetCellText(0, table.GetColumnIndex("Status")), "ok")
        self.delayDisplay("Test passed")
