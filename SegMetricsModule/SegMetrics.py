"""SegMetrics Slicer module: review a test segmentation against a reference, slice by slice.

The work is done by :mod:`segmetrics.mrml` (scene glue) and :func:`segmetrics.compare` (metrics);
this file only wires the user interface and the parameter node to them. Needs Slicer 5.10 or later.
Every metric computes with the packages Slicer ships; the optional accelerator (numba) is offered
once, after a first run, and is never required (docs/SLICER.md).
"""
import importlib
import math
import os
import subprocess
from typing import Annotated

import numpy as np
import qt
import slicer
import vtk
from slicer import vtkMRMLScalarVolumeNode, vtkMRMLSegmentationNode, vtkMRMLTableNode
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

import segmetrics
from segmetrics import LabelImage, Parameters, mrml
from segmetrics.registry import MSI_PRESETS
from segmetrics.spatial import accelerator

#: The module's helper package keeps the library's name, ``segmetrics``, so that the Python console
#: in Slicer offers the documented API; this file refuses to run on any other package of that name
#: (an unrelated PyPI project uses it): its numbers would not be ours.
PACKAGE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "segmetrics")
if os.path.realpath(os.path.dirname(segmetrics.__file__)) != os.path.realpath(PACKAGE_DIR):
    raise ImportError(f"SegMetrics found another Python package named 'segmetrics' ({segmetrics.__file__}) "
                      f"before its own ({PACKAGE_DIR}): uninstall it (slicer.util.pip_uninstall('segmetrics'))")

#: Metric groups the user chooses (the parameter node's check boxes).
METRIC_GROUPS = ("overlap", "distance", "msi", "contours", "roughness")
#: The MSI preset choice that lets the user set both levels.
CUSTOM_MSI_LEVELS = "custom"

#: Packages Slicer bundles that the accelerator depends on: installing it must not replace them
#: (pip is held to their installed versions).
BUNDLED_PACKAGES = ("numpy", "scipy")
#: Oldest Slicer release the module supports (Python 3.12; the package needs Python 3.10 or later).
MINIMUM_SLICER_VERSION = "5.10"
DOCUMENTATION_URL = "https://github.com/SegMetrics/SlicerSegMetrics/blob/main/docs/SLICER.md"
#: Application setting remembering that the accelerator was offered (it is offered once).
ACCELERATOR_OFFERED_SETTING = "SegMetrics/AcceleratorOffered"
#: Columns of the per-slice review table: (title, key of a per-slice row, the metric group filling it
#: or None for columns always shown).
SLICE_COLUMNS = ((_("Slice"), "slice", None), (_("Position (mm)"), "position_mm", None), (_("MSI"), "msi", "msi"),
                 (_("Added length (mm)"), "apl_mm", "contours"), (_("Dice"), "dice", "contours"),
                 (_("HD (mm)"), "hd_mm", "contours"), (_("Status"), "status", None))
#: The per-slice rows a metric group adds to a structure's extras.
SLICE_ROWS_OF_GROUP = {"msi": "msi_slices", "contours": "contour_slices"}


class SegMetrics(ScriptedLoadableModule):
    def __init__(self, parent):
        ScriptedLoadableModule.__init__(self, parent)
        self.parent.title = _("SegMetrics")
        self.parent.categories = [translate("qSlicerAbstractCoreModule", "Quantification")]
        self.parent.dependencies = ["Segmentations", "Colors", "Plots"]  # their logics are called
        self.parent.contributors = ["SegMetrics developers (SegMetrics project)"]
        self.parent.helpText = _(
            "Review a test segmentation against a reference, segment by segment and slice by slice: overlap "
            "(Dice, Jaccard, volumes), surface distances (HD, HD percentile, ASSD, NSD), slice-wise and per-vertex "
            "MSI, per-slice contour metrics, roughness and, given the planned dose, dose metrics and DVHs. Both "
            "contours are coloured by the local error in the slice views (signed distance by default; on the "
            "reference, high values show what the test missed), a per-slice table steps through the slices from "
            "the worst MSI up, and results go to a table, a per-slice MSI chart and, with a dose, a DVH chart beside it. "
            "Requires Slicer {version} or later. See the <a href=\"{url}\">documentation</a>."
        ).format(version=MINIMUM_SLICER_VERSION, url=DOCUMENTATION_URL)
        self.parent.acknowledgementText = _("Built on NumPy, SciPy, SimpleITK and VTK; accelerated by numba when installed.")


@parameterNodeWrapper
class SegMetricsParameterNode:
    """Module state. Segment IDs are synced from the segment selectors by hand (no connector)."""

    referenceSegmentation: vtkMRMLSegmentationNode
    referenceSegmentID: str = ""
    testSegmentation: vtkMRMLSegmentationNode
    testSegmentID: str = ""
    allSegments: bool = True
    doseVolume: vtkMRMLScalarVolumeNode
    doseLevels: str = ""  # Gy, as the command line's --dose-levels: "20, 30 Gy"
    overlap: bool = True
    distance: bool = True
    msi: bool = True
    contours: bool = True
    roughness: bool = True
    hdPercentile: Annotated[float, WithinRange(0, 100)] = 95.0
    nsdToleranceMm: Annotated[float, WithinRange(0, 100)] = 2.0
    msiPreset: Annotated[str, Choice([*MSI_PRESETS, CUSTOM_MSI_LEVELS])] = "default"
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
        self._running = False
        self._cancelRequested = False

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
        """Closing the scene cancels a run (at its next progress report) and clears the results."""
        self._cancelRequested = self._running
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
        """Sync the segment selectors, the MSI levels of a preset and their widths, the Apply button
        and the colouring array."""
        p = self._parameterNode
        levels = self.logic.msiLevels(p)
        if (p.msiInnerLevel, p.msiOuterLevel) != levels:  # a preset was chosen: show its levels
            p.msiInnerLevel, p.msiOuterLevel = levels
        for spinBox in (self.ui.msiInnerLevelSpinBox, self.ui.msiOuterLevelSpinBox):
            spinBox.enabled = p.msiPreset == CUSTOM_MSI_LEVELS
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
        self.ui.applyButton.enabled = problem is None and not self._running
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
        """Compute at once with the packages Slicer ships; Apply stays disabled and the window-modal
        progress dialog blocks the scene until the run ends. Offers the accelerator afterwards (once)."""
        self._running, self._cancelRequested = True, False
        self.ui.applyButton.enabled = False
        dialog = slicer.util.createProgressDialog(labelText=_("Comparing segmentations..."), maximum=100,
                                                  windowModality=qt.Qt.WindowModal)
        outputs = None
        try:
            with slicer.util.tryWithErrorDisplay(_("Failed to compute the segmentation metrics."), waitCursor=True):
                try:
                    outputs = self.logic.process(self._parameterNode, progress=lambda f, m: self.onProgress(dialog, f, m))
                except mrml.Cancelled:
                    self.ui.resultsLabel.text = _("Cancelled: the scene is as it was before Apply.")
        finally:
            dialog.close()
            self._running = False
            if self._parameterNode is not None:
                self.onParameterNodeModified()  # enables Apply again
        if outputs is None:
            return
        self._shownArray = self._parameterNode.colorArray
        self.showOutputs(outputs)
        self.logic.showResults(slicer.app.applicationLogic())
        self.offerAccelerator()

    def offerAccelerator(self):
        """Ask once (an application setting remembers it) whether to install the optional accelerator."""
        settings = qt.QSettings()
        question = self.logic.acceleratorOffer(settings.value(ACCELERATOR_OFFERED_SETTING) == "true",
                                               slicer.app.testingEnabled())
        if question is None:
            return
        settings.setValue(ACCELERATOR_OFFERED_SETTING, "true")
        if slicer.util.confirmYesNoDisplay(question, _("SegMetrics accelerator")):
            with slicer.util.tryWithErrorDisplay(_("Failed to install the accelerator."), waitCursor=True):
                slicer.util.showStatusMessage(self.logic.installAccelerator(), 15000)

    def onProgress(self, dialog, fraction, message):
        """Update the progress dialog; stop the run (:class:`segmetrics.mrml.Cancelled`) on Cancel
        or when the scene is being closed."""
        slicer.app.processEvents()
        if dialog.wasCanceled or self._cancelRequested:
            raise mrml.Cancelled()
        dialog.labelText = message
        dialog.value = int(100 * fraction)

    def showOutputs(self, outputs):
        """Fill the results panel (summary, notes and pair list) from a run, or clear it for None."""
        self.ui.resultsLabel.text = self.logic.summary(outputs) if outputs else _("No results yet.")
        self.ui.notesTextEdit.setPlainText("\n".join(self.logic.notes(outputs)) if outputs else "")
        wasBlocked = self.ui.pairComboBox.blockSignals(True)
        self.ui.pairComboBox.clear()
        self.ui.pairComboBox.addItems([s.structure for s in outputs.result.structures] if outputs else [])
        self.ui.pairComboBox.blockSignals(wasBlocked)
        self.onPairChanged()

    def currentPair(self):
        return self.ui.pairComboBox.currentText

    def onPairChanged(self, *args):
        """List the selected pair's slices (worst MSI first), in the columns its metric groups filled,
        and enable the navigation buttons."""
        rows = self.logic.reviewRows(self.currentPair())
        columns = self.logic.reviewColumns(self.currentPair())
        table = self.ui.sliceTable
        table.setColumnCount(len(columns))
        table.setHorizontalHeaderLabels([title for title, _key in columns])
        table.setRowCount(len(rows))
        for rowIndex, row in enumerate(rows):
            for column, (_title, key) in enumerate(columns):
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

    # --- the optional accelerator --------------------------------------------------------------

    @staticmethod
    def acceleratorRequirementsPath():
        return os.path.join(os.path.dirname(__file__), "Resources", "accelerator-requirements.txt")

    @classmethod
    def acceleratorRequirements(cls):
        """The requirement lines of Resources/accelerator-requirements.txt (comments dropped)."""
        with open(cls.acceleratorRequirementsPath()) as handle:
            return [line for line in (raw.split("#")[0].strip() for raw in handle) if line]

    @staticmethod
    def acceleratorOffer(alreadyOffered, testing):
        """The question offering the optional accelerator, or None: it is installed, it was offered
        before, or Slicer runs its tests (which install nothing)."""
        if alreadyOffered or testing or accelerator.numba_installed():
            return None
        return _("Every metric was computed with the packages Slicer ships. The optional accelerator (numba) "
                 "gives the same values faster on large structures (surface distances, MSI, roughness). "
                 "Install it now? This question is asked once.")

    @staticmethod
    def bundledConstraints():
        """A pip constraints file (path) holding :data:`BUNDLED_PACKAGES` at their installed versions."""
        import tempfile
        from importlib.metadata import version

        with tempfile.NamedTemporaryFile("w", suffix="-constraints.txt", prefix="SegMetrics-", delete=False) as handle:
            handle.writelines(f"{name}=={version(name)}\n" for name in BUNDLED_PACKAGES)
        return handle.name

    @classmethod
    def installAccelerator(cls):
        """Install the accelerator (the user has agreed), keeping Slicer's numpy and scipy; returns
        a one-line message: installed, or how to install it from a folder of wheel files when pip
        fails (e.g. offline).

        Slicer 5.12 and later: ``slicer.packaging.pip_ensure`` (``import slicer`` does not import
        that submodule), which installs nothing while Slicer runs its tests; Slicer 5.10:
        ``slicer.util.pip_install``.
        """
        try:
            packaging = importlib.import_module("slicer.packaging")
        except ImportError:
            packaging = None
        requirements = cls.acceleratorRequirements()
        constraints = cls.bundledConstraints()
        try:
            if packaging is not None:
                packaging.pip_ensure(requirements, constraints=constraints, requester="SegMetrics", prompt_install=False)
            else:
                slicer.util.pip_install(["-c", constraints, *requirements])
        except subprocess.CalledProcessError:
            return cls.offlineNote()
        finally:
            os.remove(constraints)
        importlib.invalidate_caches()  # pip wrote into folders whose listing Python may have cached
        accelerator.numba_installed.cache_clear()
        return _("The SegMetrics accelerator is installed: the next Apply uses it.")

    @classmethod
    def offlineNote(cls):
        """One line: how to install the accelerator without network access."""
        return _("Could not install the accelerator (offline?). From a folder of wheel files, run in the Python "
                 "console: slicer.util.pip_install('--no-index --find-links=FOLDER {requirements}')").format(
            requirements=" ".join(cls.acceleratorRequirements()))

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
        if p.colorArray == "Roughness_mm" and not p.roughness:
            return _("Colouring by roughness needs the roughness group: tick it, or choose another colouring.")
        try:
            mrml.dose_levels(p.doseLevels)
        except ValueError as error:
            return _("Dose levels: {problem}").format(problem=error)
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
    def msiLevels(p):
        """``(inner, outer)`` MSI levels: the preset's (:data:`segmetrics.registry.MSI_PRESETS`), or the
        user's with the custom choice."""
        return MSI_PRESETS.get(p.msiPreset, (p.msiInnerLevel, p.msiOuterLevel))

    @staticmethod
    def metricParameters(p):
        """The chosen metric groups and :class:`segmetrics.Parameters` (the MSI levels of the chosen
        preset, by :meth:`segmetrics.Parameters.from_msi_preset`, or the user's; the dose levels in Gy
        by :func:`segmetrics.mrml.dose_levels`). The contours group fills the per-slice review
        table's added path length, Dice and HD."""
        groups = [group for group in METRIC_GROUPS if getattr(p, group)]
        fields = dict(hd_percentile=p.hdPercentile, nsd_tolerance_mm=p.nsdToleranceMm,
                      dose_levels_gy=mrml.dose_levels(p.doseLevels),
                      msi_axis=None if p.msiAxis < 0 else p.msiAxis, roughness_window_mm=p.roughnessWindowMm or None)
        if p.msiPreset == CUSTOM_MSI_LEVELS:
            return groups, Parameters(msi_il=p.msiInnerLevel, msi_ol=p.msiOuterLevel, **fields)
        return groups, Parameters.from_msi_preset(p.msiPreset, **fields)

    # --- running -------------------------------------------------------------------------------

    def process(self, p, progress=None):
        """Run with the parameter node's settings; stores the output table in it."""
        groups, params = self.metricParameters(p)
        ids = (None, None) if p.allSegments else ([p.referenceSegmentID], [p.testSegmentID])
        outputs = self.run(p.referenceSegmentation, p.testSegmentation, *ids, metrics=groups, params=params,
                           tableNode=p.outputTable, colorArray=p.colorArray, progress=progress, doseNode=p.doseVolume)
        p.outputTable = outputs.table
        return outputs

    def run(self, referenceNode, testNode, referenceSegmentIDs=None, testSegmentIDs=None, metrics=None,
            params=None, tableNode=None, colorArray=mrml.SURFACE_ARRAYS[0], progress=None, doseNode=None):
        """Compare segment pairs (the given IDs, or all segments matched by name); see :func:`segmetrics.mrml.run`.
        ``doseNode``: the planned dose volume (Gy), for the dose metrics and the DVH chart; its units
        and frame of reference are checked against the DICOM files in Slicer's DICOM database.

        ``progress(fraction, message)`` may raise :class:`segmetrics.mrml.Cancelled`: the run then
        stops, the previous outputs stay as they were and nothing new is added to the scene.
        """
        pairs = None
        if referenceSegmentIDs is not None or testSegmentIDs is not None:
            pairs = mrml.segment_pairs(referenceNode, testNode, referenceSegmentIDs, testSegmentIDs)
        self.outputs = mrml.run(referenceNode, testNode, pairs, metrics, params, tableNode, colorArray, progress, doseNode,
                                self.fileForInstance())
        return self.outputs

    @staticmethod
    def fileForInstance():
        """Slicer's DICOM database lookup (SOP Instance UID -> file path), or None when the DICOM
        module has not opened one (``slicer.dicomDatabase`` is set by the DICOM module)."""
        database = getattr(slicer, "dicomDatabase", None)
        return database.fileForInstance if database is not None and database.isOpen else None

    def clearOutputs(self):
        """Forget the last run (on scene close: its nodes are gone)."""
        self.outputs = None

    def summary(self, outputs):
        """A few lines for the results panel: Dice and HD95 per pair, and status (the notes are
        shown apart: :meth:`notes`)."""
        lines = []
        for s in outputs.result.structures:
            values = {v.metric: v.value for v in s.values}
            shown = [f"{name} {values[name]:.3g}" for name in ("dice", "hd95_mm", "msi") if name in values]
            lines.append(f"{s.structure}: {', '.join(shown) or _('computed')} ({s.status})")
        return "\n".join(lines)

    @staticmethod
    def notes(outputs):
        """The run's notes, each once, in order: how the inputs were prepared, the dose checks, and
        each pair's notes (dose sampling, share outside the dose grid, summation warning)."""
        return list(outputs.result.notes)

    def showResults(self, appLogic):
        """Show the results table and the charts (MSI, and DVH beside it when a dose was given) with
        the slice views (:func:`segmetrics.mrml.show_results`); returns the view arrangement, or None."""
        return mrml.show_results(appLogic, self.outputs) if self.outputs is not None else None

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

    def reviewColumns(self, structure):
        """``(title, key)`` of the per-slice review table's columns for a pair: those of the metric
        groups that ran (no column of NaN), the MSI title with the width σ of its weights."""
        found = self._structure(structure)
        if found is None:
            return []
        rows = mrml.slice_rows(found)
        sigma = rows[0]["msi_sigma"] if rows else math.nan
        columns = []
        for title, key, group in SLICE_COLUMNS:
            if group is None or SLICE_ROWS_OF_GROUP[group] in found.extras:
                columns.append((f"{title} ({sigma})" if key == "msi" and isinstance(sigma, str) else title, key))
        return columns

    def stepSlice(self, structure, current, step):
        """The slice ``step`` places from ``current`` in review order (the worst one for None)."""
        found = self._structure(structure)
        return mrml.step_slice(found, current, step) if found is not None else None

    def jumpToSlice(self, structure, index):
        """Centre all slice views on slice ``index`` of a pair (centred jump through the centre of
        both segments in that slice) and mark it on the chart; returns its RAS position or None."""
        scene = mrml.outputs_scene(self.outputs) if self.outputs is not None else None
        position = mrml.slice_ras(self.outputs, structure, index) if scene is not None else None
        if position is None:
            return None
        mrml.jump_to(scene, position)
        mrml.mark_slice(self.outputs, structure, index)
        return position

    def worstSliceRAS(self, structure):
        """RAS position (mm) of the worst MSI slice of one pair, or None without per-slice MSI."""
        return mrml.worst_slice_ras(self.outputs, structure) if self.outputs else None


class SegMetricsTest(ScriptedLoadableModuleTest):
    """Runs in Slicer (Reload and Test, and Slicer's CI through ``slicer_add_python_unittest``).

    Slicer runs the ``test_*`` methods in alphabetical order (``unittest``'s loader, or the base
    class's ``runTest``), each after ``setUp``: every method stands alone. They need no network and
    no accelerator, and each one asserts metric values against closed forms.
    """

    def setUp(self):
        slicer.mrmlScene.Clear()

    def _segmentations(self, reference, test, spacing, name):
        return [
            mrml.add_segmentation_from_label_image(slicer.mrmlScene, LabelImage(a, spacing, names={1: name}), role)
            for a, role in ((reference, "Reference"), (test, "Test"))
        ]

    @staticmethod
    def _ball(shape, centre, radius):
        """Boolean ball of ``radius`` voxels around ``centre`` (array indices, (z, y, x))."""
        grid = np.indices(shape)
        return sum((g - c) ** 2 for g, c in zip(grid, centre)) <= radius**2

    def test_distance_of_shifted_balls(self):
        """A ball and the same ball moved 3 mm along x: surfaces translated by 3 mm, so HD = 3 mm
        (every point is within 3 mm of its translate, and the back of one ball is 3 mm from all of
        the other); Dice from the voxel counts."""
        self.delayDisplay("Distances of two shifted balls")
        reference = self._ball((30, 30, 36), (15, 15, 15), 9)
        test = np.roll(reference, 3, axis=2)
        nodes = self._segmentations(reference.astype(np.uint8), test.astype(np.uint8), (1.0, 1.0, 1.0), "ball")
        table = SegMetricsLogic().run(*nodes, metrics=["overlap", "distance"]).table.GetTable()
        self.assertAlmostEqual(table.GetColumnByName("hd_mm").GetValue(0), 3.0, places=6)
        hd95 = table.GetColumnByName("hd95_mm").GetValue(0)
        self.assertTrue(0.0 < hd95 <= 3.0 + 1e-9, hd95)
        shared = np.count_nonzero(reference & test)
        self.assertAlmostEqual(table.GetColumnByName("dice").GetValue(0), 2 * shared / (2 * reference.sum()), places=9)

    def test_dose_of_shifted_boxes(self):
        """A dose of x Gy at x mm: the reference box (x = 2..5 mm) has Dmean 3.5 Gy and half its
        voxels at 3.5 Gy or more, the test box (x = 3..6 mm) 4.5 Gy and three quarters; the DVHs are
        shown beside the MSI chart, and the notes say the dose's units were not checked."""
        self.delayDisplay("Dose of two shifted boxes")
        reference = np.zeros((8, 8, 10), np.uint8)
        reference[2:6, 2:6, 2:6] = 1
        test = np.roll(reference, 1, axis=2)
        nodes = self._segmentations(reference, test, (1.0, 1.0, 1.0), "box")
        grid = LabelImage(reference, (1.0, 1.0, 1.0))
        dose = slicer.mrmlScene.AddNewNodeByClass("vtkMRMLScalarVolumeNode", "dose")
        gradient = np.broadcast_to(np.arange(10.0), (8, 8, 10)).astype(np.float32)  # (z, y, x): Gy = x in mm
        slicer.util.updateVolumeFromArray(dose, gradient)
        dose.SetIJKToRASMatrix(mrml.ras_matrix(grid))
        logic = SegMetricsLogic()
        params = Parameters(dose_levels_gy=mrml.dose_levels("3.5 Gy"))
        outputs = logic.run(*nodes, metrics=["overlap", "msi"], params=params, doseNode=dose)
        column = outputs.table.GetTable().GetColumnByName
        self.assertAlmostEqual(column("dose_dmean_reference_gy").GetValue(0), 3.5, places=5)
        self.assertAlmostEqual(column("dose_dmean_test_gy").GetValue(0), 4.5, places=5)
        self.assertAlmostEqual(column("dose_v3.5gy_reference_percent").GetValue(0), 50.0, places=5)
        self.assertAlmostEqual(column("dose_v3.5gy_test_percent").GetValue(0), 75.0, places=5)
        self.assertTrue(any(note.startswith("dose units not checked") for note in logic.notes(outputs)))
        self.assertEqual(logic.showResults(slicer.app.applicationLogic()), mrml.TWO_CHARTS_LAYOUT_ID)
        self.delayDisplay("Test passed")

    def test_overlap_of_boxes(self):
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
        self.assertAlmostEqual(float(table.GetCellText(0, table.GetColumnIndex("volume_reference_ml"))), 2.0, places=5)
        self.assertAlmostEqual(float(table.GetCellText(0, table.GetColumnIndex("volume_test_ml"))), 1.5, places=5)
        self.assertEqual(table.GetColumnUnitLabel("volume_test_ml"), "ml")
        self.assertEqual(table.GetCellText(0, table.GetColumnIndex("Status")), "ok")

    def test_slice_review(self):
        """A ball whose test misses a 4 mm cap: the reference contour shows the miss, the review
        starts at the slices through the cap, and the views centre on them."""
        self.delayDisplay("Slice review of a missed cap")
        reference = self._ball((32, 40, 40), (16, 20, 20), 12).astype(np.uint8)
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
        self.assertLess(msi[order[0]], 1.0)
        position = logic.jumpToSlice("ball", order[0])
        red = slicer.app.layoutManager().sliceWidget("Red").mrmlSliceNode()
        center = [red.GetSliceToRAS().GetElement(row, 3) for row in range(3)]
        for got, expected in zip(center, position):
            self.assertAlmostEqual(got, expected, places=3)
        arrangement = logic.showResults(slicer.app.applicationLogic())
        self.assertEqual(arrangement, slicer.vtkMRMLLayoutNode.SlicerLayoutFourUpPlotTableView)
        slicer.mrmlScene.Clear()  # the outputs' nodes are gone: recolouring skips them
        self.assertEqual(logic.showArray("MSI"), 0)
        logic.clearOutputs()
        self.assertIsNone(logic.jumpToSlice("ball", order[0]))
        self.delayDisplay("Test passed")
