"""Slicer scene glue: segmentation nodes -> :class:`LabelImage` masks -> :func:`compare` -> output nodes.

Needs only what the ``slicer-core`` package provides (MRML nodes and module logics, no Qt, no
``slicer.app``), so it runs inside Slicer and in a headless Python process alike.

Coordinates: the Slicer scene is RAS, SegMetrics/ITK geometry is LPS. The conversion is
:data:`LPS_TO_RAS`, used only by :func:`ras_matrix` and :func:`label_image_from_volume` (grids),
:func:`_to_ras` (meshes) and :func:`slice_center_ras` (points).
"""
from __future__ import annotations

import math
import os
import tempfile
import time
from dataclasses import dataclass, field

import numpy as np
import slicer
import vtk
from vtk.util.numpy_support import numpy_to_vtk, vtk_to_numpy

from .outputs import slices
from .spatial.checkpoints import checkpoint, checkpoints
from .outputs.slices import slice_rows  # per-slice rows as dicts, also for SegMetrics.py
from .evaluation.compare import ComparisonResult, compare
from .inputs.validation import NothingToCompareError, check_evaluation_options
from .spatial.geometry import LabelImage, geometry_differences
from .registry import metric_specs
from .outputs.render import array_style, colour_range, lookup_table, prefer_headless_window

try:  # Slicer's translation of user-facing texts (context "segmetrics.mrml"); slicer-core has none
    from slicer.i18n import tr as _
except ImportError:
    def _(text: str) -> str:
        return text

#: Flip of the first two axes: maps LPS to RAS and back (it is its own inverse).
LPS_TO_RAS = np.diag([-1.0, -1.0, 1.0, 1.0])
#: Node attribute marking the nodes this module owns, so that re-runs reuse them.
OUTPUT_ATTRIBUTE = "SegMetrics.Output"
#: Point arrays that can colour the surfaces (3-D) and contours (slice views), default first.
#: ``SignedDistance_mm`` and ``MSI`` are on both surfaces: on the test surface the signed
#: bidirectional local distance to the reference (+ outside it: over-contoured) and its MSI weight,
#: on the reference surface the same towards the test (+ outside the test: missed by the test).
SURFACE_ARRAYS = ("SignedDistance_mm", "MSI", "Roughness_mm")
#: Contour width in the slice views (pixels): the test contour, and the thinner reference contour.
CONTOUR_WIDTHS = {"test": 4, "reference": 2}
#: printf format of the colour-legend labels (distances in mm of a few tenths, MSI 0..1).
LEGEND_LABEL_FORMAT = "%.3g"
_LABELMAP = "Binary labelmap"
#: SlicerRT's representation of RT structure set contours (closed polylines, one per contour).
PLANAR_CONTOUR = "Planar contour"
#: Colour legend width and height as fractions of the view (Slicer's default 0.15 x 0.5 let a long
#: title reach over tall models in the middle of the view).
LEGEND_SIZE = (0.08, 0.4)
#: Shortest time (s) between two progress reports repeated from the checkpoints of a run.
REPORT_INTERVAL_S = 0.1
#: SlicerRT's marks of an imported dose (``vtkSlicerRtCommon``, SlicerRT ``SlicerRtCommon/vtkSlicerRtCommon.cxx``):
#: the dose volume's identifier attribute, and the ``DoseUnits`` (3004,0002) of its RTDOSE, kept on
#: the subject hierarchy study item.
SLICERRT_DOSE_VOLUME_ATTRIBUTE = "DicomRtImport.DoseVolume"
SLICERRT_DOSE_UNIT_NAME_ATTRIBUTE = "DicomRtImport.DoseUnitName"
#: Node attribute listing the SOP Instance UIDs a node was loaded from (Slicer's DICOM plugins).
DICOM_INSTANCE_UIDS_ATTRIBUTE = "DICOM.instanceUIDs"
#: Custom layout of :func:`show_results` when both charts are shown: Slicer's four-up view with
#: plot and table, the DVH chart's plot view (``PlotView2``) beside the MSI chart's (``PlotView1``).
TWO_CHARTS_LAYOUT_ID = 7301
TWO_CHARTS_LAYOUT = """<layout type="vertical" split="true">
 <item splitSize="500">
  <layout type="vertical">
   <item>
    <layout type="horizontal">
     <item><view class="vtkMRMLSliceNode" singletontag="Red">
      <property name="orientation" action="default">Axial</property>
      <property name="viewlabel" action="default">R</property>
      <property name="viewcolor" action="default">#F34A33</property></view></item>
     <item><view class="vtkMRMLPlotViewNode" singletontag="PlotView1">
      <property name="viewlabel" action="default">P</property></view></item>
     <item><view class="vtkMRMLPlotViewNode" singletontag="PlotView2">
      <property name="viewlabel" action="default">P2</property></view></item>
    </layout>
   </item>
   <item>
    <layout type="horizontal">
     <item><view class="vtkMRMLSliceNode" singletontag="Green">
      <property name="orientation" action="default">Coronal</property>
      <property name="viewlabel" action="default">G</property>
      <property name="viewcolor" action="default">#6EB04B</property></view></item>
     <item><view class="vtkMRMLSliceNode" singletontag="Yellow">
      <property name="orientation" action="default">Sagittal</property>
      <property name="viewlabel" action="default">Y</property>
      <property name="viewcolor" action="default">#EDD54C</property></view></item>
    </layout>
   </item>
  </layout>
 </item>
 <item splitSize="300">
  <view class="vtkMRMLTableViewNode" singletontag="TableView1">
   <property name="viewlabel" action="default">T</property></view>
 </item>
</layout>"""


@dataclass
class SegmentPair:
    """One reference/test segment pair; a missing side has ID ``None`` (compared as empty)."""

    name: str
    reference_id: str | None
    test_id: str | None


class Cancelled(Exception):
    """Raised by a ``progress`` callback to stop a run; the scene is left as it was."""


@dataclass
class Outputs:
    """What :func:`run` produced: the core result, its grid (LPS) and the output nodes.

    ``models`` and ``reference_models`` map pair names to the test and reference surface models;
    ``marker`` is the plot series marking the current slice on the chart; ``dvh_chart`` the
    dose-volume histograms' chart when the dose group ran; ``scene`` is the scene they were
    written into (see :func:`outputs_scene`).
    """

    result: ComparisonResult
    grid: LabelImage
    table: object
    slice_tables: dict = field(default_factory=dict)
    chart: object = None
    models: dict = field(default_factory=dict)
    reference_models: dict = field(default_factory=dict)
    marker: object = None
    scene: object = None
    dvh_chart: object = None


def outputs_scene(outputs: Outputs):
    """The scene of a run's outputs while any of its output nodes is still there (the user may have
    deleted some, e.g. the results table), else None (all removed, or the scene was closed)."""
    nodes = [outputs.table, outputs.chart, outputs.dvh_chart, *outputs.models.values(), *outputs.reference_models.values()]
    return outputs.scene if any(n is not None and n.GetScene() is not None for n in nodes) else None


@dataclass
class HeadlessScene:
    """A scene with the module logics Slicer would provide; keep this object alive while in use."""

    scene: object
    app_logic: object
    logics: dict
    #: Home and temporary folder of the application logic; removed when this object is collected.
    home: tempfile.TemporaryDirectory | None = None


def create_headless_scene() -> HeadlessScene:
    """A new MRML scene with application, colour, segmentation, volume, model, table and plot logics.

    The application logic holds the module logics by raw pointer only, so they are kept in the
    returned object. Its home and temporary path are a new temporary folder (also kept there), with
    an empty ``share/ColorFiles``: the colour logics look for default colour files there instead of
    logging "HomeDirectory is not set"; the built-in default colour tables are added as usual.
    Inside Slicer use ``slicer.mrmlScene`` instead.
    """
    home = tempfile.TemporaryDirectory(prefix="segmetrics-slicer-")
    os.makedirs(os.path.join(home.name, "share", "ColorFiles"))
    scene = slicer.vtkMRMLScene()
    app_logic = slicer.vtkSlicerApplicationLogic()
    app_logic.SetHomeDirectory(home.name)
    app_logic.SetShareDirectory("share")  # relative to the home directory
    app_logic.SetTemporaryPath(home.name)
    app_logic.SetMRMLScene(scene)
    app_logic.GetColorLogic().SetMRMLScene(scene)
    app_logic.GetColorLogic().AddDefaultColorNodes()
    logics = {
        "Colors": slicer.vtkSlicerColorLogic(),  # registers the colour legend display node
        "Segmentations": slicer.vtkSlicerSegmentationsModuleLogic(),
        "Volumes": slicer.vtkSlicerVolumesLogic(),
        "Models": slicer.vtkSlicerModelsLogic(),
        "Tables": slicer.vtkSlicerTablesLogic(),
        "Plots": slicer.vtkSlicerPlotsLogic(),
    }
    for name, logic in logics.items():
        logic.SetMRMLApplicationLogic(app_logic)
        logic.SetMRMLScene(scene)
        app_logic.SetModuleLogic(name, logic)
    return HeadlessScene(scene, app_logic, logics, home)


# --- geometry: LabelImage (LPS) <-> volume node (RAS) -------------------------------------------


def ras_matrix(image: LabelImage) -> vtk.vtkMatrix4x4:
    """IJK-to-RAS matrix of a 3-D label image (whose geometry is ITK/LPS)."""
    ijk_to_lps = np.eye(4)
    ijk_to_lps[:3, :3] = np.asarray(image.direction).reshape(3, 3) * np.asarray(image.spacing[::-1])
    ijk_to_lps[:3, 3] = image.origin
    matrix = vtk.vtkMatrix4x4()
    matrix.DeepCopy((LPS_TO_RAS @ ijk_to_lps).ravel())
    return matrix


def _numpy_matrix(matrix: vtk.vtkMatrix4x4) -> np.ndarray:
    return np.array([[matrix.GetElement(r, c) for c in range(4)] for r in range(4)])


def _label_image(array: np.ndarray, ijk_to_ras: np.ndarray, names: dict | None = None) -> LabelImage:
    """A label image of ``array`` (z, y, x) whose index (0, 0, 0) sits at ``ijk_to_ras`` (4 x 4, RAS)."""
    ijk_to_lps = LPS_TO_RAS @ ijk_to_ras
    spacing_xyz = np.linalg.norm(ijk_to_lps[:3, :3], axis=0)
    direction = ijk_to_lps[:3, :3] / spacing_xyz
    return LabelImage(array, spacing_xyz[::-1], ijk_to_lps[:3, 3], direction.ravel(), dict(names or {}))


def label_image_from_volume(volume_node, names: dict | None = None) -> LabelImage:
    """Array (z, y, x) and LPS geometry of a volume node; spacing in mm in array-axis order."""
    image = volume_node.GetImageData()
    array = vtk_to_numpy(image.GetPointData().GetScalars()).reshape(image.GetDimensions()[::-1]).copy()
    matrix = vtk.vtkMatrix4x4()
    volume_node.GetIJKToRASMatrix(matrix)
    return _label_image(array, _numpy_matrix(matrix), names)


def dose_levels(text: str) -> tuple:
    """The dose levels (Gy) of the V metrics written as the command line's ``--dose-levels`` takes
    them (``"20, 30 Gy"``, :func:`segmetrics.registry.parse_dose_levels`), each checked > 0 as :class:`segmetrics.Parameters` does;
    ``()`` for blank text. ``ValueError`` with one line for anything else."""
    from .registry import Parameters, parse_dose_levels

    if not text.strip():
        return ()
    return Parameters(dose_levels_gy=parse_dose_levels(text)).dose_levels_gy


def _subject_hierarchy_item(node):
    """``(subject hierarchy node, the node's item ID)``; the ID is 0 (invalid) when there is none."""
    scene = node.GetScene()
    hierarchy = scene.GetFirstNodeByClass("vtkMRMLSubjectHierarchyNode") if scene is not None else None
    return hierarchy, (hierarchy.GetItemByDataNode(node) if hierarchy is not None else 0)


def dicom_source_file(node, file_for_instance) -> str | None:
    """The first DICOM file a node was loaded from, or None when not known.

    Its SOP Instance UIDs are the node's ``DICOM.instanceUIDs`` attribute (Slicer's DICOM plugins),
    else its subject hierarchy item's ``DICOMInstanceUID`` UID (SlicerRT's RT import, Slicer's
    ``DICOMPlugin.addSeriesInSubjectHierarchy``); ``file_for_instance`` maps one to its file
    (Slicer's ``slicer.dicomDatabase.fileForInstance``: ``""`` when not in the database)."""
    if file_for_instance is None:
        return None
    uids = (node.GetAttribute(DICOM_INSTANCE_UIDS_ATTRIBUTE) or "").split()
    hierarchy, item = _subject_hierarchy_item(node)
    if not uids and item:
        uids = hierarchy.GetItemUID(item, slicer.vtkMRMLSubjectHierarchyConstants.GetDICOMInstanceUIDName()).split()
    return next((path for path in map(file_for_instance, uids) if path), None)


def dose_grid_from_volume(volume_node, file_for_instance=None, notes: list | None = None):
    """The :class:`segmetrics.inputs.readers.rtdose.DoseGrid` (Gy, LPS) of a scalar volume node
    holding a dose in Gy, e.g. an RTDOSE loaded by SlicerRT's DICOM import (which scales it to Gy).

    The grid's frame of reference, ``DoseType`` and ``DoseSummationType`` come from the volume's
    RTDOSE file when :func:`dicom_source_file` finds it (else None: not checked). ``ValueError`` for
    a dose not in Gy (SlicerRT's ``DicomRtImport.DoseUnitName`` of its study, or the file's
    ``DoseUnits``, other than ``GY``), a ``DoseType`` ``ERROR``, a volume under a parent transform
    (harden it first: the dose would be placed without it) or without voxels. When the units
    cannot be checked, ``notes`` (if given) gets a note saying so."""
    from .inputs.readers.rtdose import DoseGrid, read_dose_header

    name = volume_node.GetName()
    if volume_node.GetParentTransformNode() is not None:
        raise ValueError(f"dose volume {name!r} has a parent transform: harden it first")
    if volume_node.GetImageData() is None or volume_node.GetImageData().GetPointData().GetScalars() is None:
        raise ValueError(f"dose volume {name!r} holds no voxels")
    hierarchy, item = _subject_hierarchy_item(volume_node)
    study = slicer.vtkMRMLSubjectHierarchyConstants.GetDICOMLevelStudy()
    units = hierarchy.GetAttributeFromItemAncestor(item, SLICERRT_DOSE_UNIT_NAME_ATTRIBUTE, study) if item else ""
    path = dicom_source_file(volume_node, file_for_instance)
    header = read_dose_header(path) if path is not None else {}
    units = header.get("DoseUnits") or units
    if not units and notes is not None:
        marked = volume_node.GetAttribute(SLICERRT_DOSE_VOLUME_ATTRIBUTE) is not None
        notes.append(_("dose units not checked: the dose volume {name!r} ({marked}) has no dose unit known to SlicerRT "
                       "nor a DICOM file known to Slicer's DICOM database; its voxels are taken as Gy").format(
            name=name, marked=_("marked as a dose by SlicerRT") if marked else _("not marked as a dose by SlicerRT")))
    if units and units.upper() != "GY":
        raise ValueError(f"dose volume {name!r} is in DoseUnits {units!r}, not GY: the dose metrics need an absolute "
                         "dose in Gy")
    if header.get("DoseType") == "ERROR":
        raise ValueError(f"dose volume {name!r} is DoseType ERROR, a dose error map, not a dose")
    image = label_image_from_volume(volume_node)
    return DoseGrid(image.array.astype(np.float32), image.spacing, image.origin, image.direction,
                    header.get("FrameOfReferenceUID"), f"dose volume {name!r}", header.get("DoseType"),
                    header.get("DoseSummationType"))


def frames_of_reference(segmentation_node, file_for_instance=None) -> set:
    """The FrameOfReferenceUIDs of a segmentation loaded from DICOM: its subject hierarchy item's
    ``DICOM.FrameOfReferenceUID`` attribute (Slicer's DICOM plugins), else those its source file
    (:func:`dicom_source_file`: an RT Structure Set's ROIs', a DICOM SEG's) says; empty when unknown."""
    from .inputs.readers.rtdose import input_frames_of_reference

    hierarchy, item = _subject_hierarchy_item(segmentation_node)
    attribute = slicer.vtkMRMLSubjectHierarchyConstants.GetDICOMFrameOfReferenceUIDAttributeName()
    frame = hierarchy.GetItemAttribute(item, attribute) if item else ""
    if frame:
        return {frame}
    path = dicom_source_file(segmentation_node, file_for_instance)
    return input_frames_of_reference(path) if path is not None else set()


def check_dose_frame_of_reference(dose, segmentation_nodes: dict, file_for_instance=None) -> list:
    """Refuse (``ValueError``, one line) a dose whose frame of reference differs from that of a
    segmentation (``segmentation_nodes``: role -> node) when both are known; returns notes saying
    which could not be checked (the dose is then placed by patient coordinates alone)."""
    if dose.frame_of_reference is None:
        return [_("frame of reference not checked: the {dose} has no DICOM file known to Slicer's DICOM database; it "
                  "is placed on the segmentations by patient coordinates alone").format(dose=dose.source)]
    notes = []
    for role, node in segmentation_nodes.items():
        frames = frames_of_reference(node, file_for_instance)
        if not frames:
            notes.append(_("frame of reference not checked for the {role} segmentation {name!r} (no DICOM source known): "
                           "the dose is placed on it by patient coordinates alone").format(role=role, name=node.GetName()))
        elif dose.frame_of_reference not in frames:
            raise ValueError(f"{dose.source} is in frame of reference {dose.frame_of_reference} but the {role} "
                             f"segmentation {node.GetName()!r} is in {', '.join(sorted(frames))}: not the same patient "
                             "coordinates")
    return notes


def add_segmentation_from_label_image(scene, image: LabelImage, name: str):
    """Add a segmentation node with one segment per label of a 3-D label image.

    Segments are named from ``image.names`` (else ``Label_<value>``).
    """
    if image.ndim != 3:
        raise ValueError("Slicer segmentations need a 3-D label image")
    labelmap = scene.AddNewNodeByClass("vtkMRMLLabelMapVolumeNode", f"{name} labelmap")
    data = vtk.vtkImageData()
    data.SetDimensions(image.array.shape[::-1])
    data.GetPointData().SetScalars(numpy_to_vtk(np.ascontiguousarray(image.array, dtype=np.int32).ravel(), deep=True))
    labelmap.SetAndObserveImageData(data)
    labelmap.SetIJKToRASMatrix(ras_matrix(image))
    node = add_segmentation_from_labelmap(scene, labelmap, name, image.names)
    scene.RemoveNode(labelmap)
    return node


def add_segmentation_from_labelmap(scene, labelmap_node, name: str, names: dict | None = None):
    """Add a segmentation node made from a labelmap volume node, on the labelmap's grid.

    ``names`` maps label values to segment names (default ``Label_<value>``), whatever the number
    of labels (Slicer itself would name a lone segment after the labelmap node).
    """
    segmentation_node = scene.AddNewNodeByClass("vtkMRMLSegmentationNode", name)
    segmentation_node.SetReferenceImageGeometryParameterFromVolumeNode(labelmap_node)
    if not slicer.vtkSlicerSegmentationsModuleLogic.ImportLabelmapToSegmentationNode(labelmap_node, segmentation_node):
        raise RuntimeError(f"could not import {labelmap_node.GetName()!r} into segmentation {name!r}")
    segmentation = segmentation_node.GetSegmentation()
    for index in range(segmentation.GetNumberOfSegments()):
        segment = segmentation.GetNthSegment(index)
        value = segment.GetLabelValue()
        segment.SetName(str((names or {}).get(value, f"Label_{value}")))
    return segmentation_node


# --- segment pairing and comparison ------------------------------------------------------------


def _segments(segmentation_node) -> list:
    segmentation = segmentation_node.GetSegmentation()
    return [
        (segmentation.GetNthSegmentID(i), segmentation.GetNthSegment(i).GetName())
        for i in range(segmentation.GetNumberOfSegments())
    ]


def segment_pairs(reference_node, test_node, reference_ids=None, test_ids=None) -> list:
    """Pair segments: the given ID lists position by position, or else all segments by name.

    Matching by name is case-insensitive; a segment without a partner is paired with ``None``.
    """
    ref_names, test_names = dict(_segments(reference_node)), dict(_segments(test_node))
    if reference_ids is not None or test_ids is not None:
        reference_ids, test_ids = list(reference_ids or []), list(test_ids or [])
        if len(reference_ids) != len(test_ids):
            raise ValueError("give as many reference segment IDs as test segment IDs")
        for side, node, ids, known in (("reference", reference_node, reference_ids, ref_names),
                                       ("test", test_node, test_ids, test_names)):
            unknown = [segment_id for segment_id in ids if segment_id not in known]
            if unknown:
                raise ValueError(f"{side} segment ID(s) {', '.join(map(repr, unknown))} not in {node.GetName()!r}; "
                                 f"its segments: {', '.join(map(repr, known)) or 'none'}")
        pairs = []
        for ref_id, test_id in zip(reference_ids, test_ids):
            ref_name, test_name = ref_names[ref_id], test_names[test_id]
            pairs.append(SegmentPair(ref_name if ref_name == test_name else f"{ref_name} vs {test_name}", ref_id, test_id))
        return pairs
    test_by_name = {name.casefold(): segment_id for segment_id, name in test_names.items()}
    pairs = [SegmentPair(name, ref_id, test_by_name.pop(name.casefold(), None)) for ref_id, name in ref_names.items()]
    return pairs + [SegmentPair(test_names[test_id], None, test_id) for test_id in test_by_name.values()]


class _TemporaryNodes:
    """The nodes a run adds for its own use; :meth:`remove` deletes them with their display and
    storage nodes and the colour tables made for them, and nothing else (nodes the user adds
    meanwhile stay)."""

    def __init__(self, scene):
        self.scene = scene
        self.nodes = []
        self._before = _node_ids(scene)

    def add(self, class_name: str, name: str = ""):
        node = self.scene.AddNewNodeByClass(class_name, name)
        self.nodes.append(node)
        return node

    def remove(self) -> None:
        for node in reversed(self.nodes):
            _remove_node(self.scene, node, self._before)
        self.nodes = []


def _remove_node(scene, node, keep_colours=None) -> None:
    """Remove a node from the scene with its display nodes (colour legends included) and storage
    node; with ``keep_colours`` (node IDs), also the colour tables of its display nodes that are
    not among them (made for the node, e.g. by an export)."""
    if node is None or node.GetScene() is None:
        return
    displays = [node.GetNthDisplayNode(i) for i in range(node.GetNumberOfDisplayNodes())] \
        if node.IsA("vtkMRMLDisplayableNode") else []
    colours = [d.GetColorNode() for d in displays if d is not None] if keep_colours is not None else []
    colours = [c for c in colours if c is not None and c.GetID() not in keep_colours]
    storage = node.GetStorageNode() if node.IsA("vtkMRMLStorableNode") else None
    for owned in (*displays, storage, node, *colours):
        if owned is not None and owned.GetScene() is not None:
            scene.RemoveNode(owned)


def _working_copy(temporary: _TemporaryNodes, node, role: str, notes: list):
    """A hidden copy of a segmentation with its parent transform hardened and a binary labelmap.

    It gets a display node switched off first, so that it never shows in the views (the exports
    would otherwise create a visible one).
    """
    copy = temporary.add("vtkMRMLSegmentationNode", f"{node.GetName()} (SegMetrics working copy)")
    copy.HideFromEditorsOn()
    copy.CreateDefaultDisplayNodes()
    copy.GetDisplayNode().SetVisibility(False)
    copy.GetSegmentation().DeepCopy(node.GetSegmentation())
    if node.GetParentTransformNode() is not None:
        copy.SetAndObserveTransformNodeID(node.GetTransformNodeID())
        copy.HardenTransform()
        notes.append(_("{role} parent transform applied (hardened on a working copy)").format(role=role))
    segmentation = copy.GetSegmentation()
    source = segmentation.GetSourceRepresentationName()
    if source != _LABELMAP and segmentation.GetNumberOfSegments():
        if not segmentation.CreateRepresentation(_LABELMAP):
            if source != PLANAR_CONTOUR:
                raise RuntimeError(f"could not create a binary labelmap of {role} segmentation {node.GetName()!r}")
            _rasterise_planar_contours(segmentation, node.GetName())
            source += " (rasterised by segmetrics.inputs.readers.rtstruct: pixel centres inside, even-odd)"
        notes.append(_("{role} binary labelmap created from its {source} source").format(role=role, source=source.lower()))
    return copy


def _rasterise_planar_contours(segmentation, name: str) -> None:
    """Give every segment of a planar-contour segmentation a binary labelmap, rasterised by
    :func:`segmetrics.inputs.readers.rtstruct.rasterise` on a grid built from its contour planes (when no
    converter, such as SlicerRT's, is installed)."""
    from .inputs.readers.rtstruct import StructureSet, contour_grid, rasterise

    segments = dict(enumerate((segmentation.GetNthSegment(i) for i in range(segmentation.GetNumberOfSegments())),
                              start=1))  # label value -> segment
    structures = StructureSet(name, {label: segment.GetName() for label, segment in segments.items()},
                              {label: contour_polygons(segment.GetRepresentation(PLANAR_CONTOUR))
                               for label, segment in segments.items()})
    grid = contour_grid([structures])
    image = rasterise(structures, grid)
    for label, segment in segments.items():
        if not structures.contours[label]:  # Slicer cannot export an empty rasterised segment
            segmentation.RemoveSegment(segment)
            continue
        labelmap = _oriented_image(grid)
        labelmap.AllocateScalars(vtk.VTK_UNSIGNED_CHAR, 1)
        vtk_to_numpy(labelmap.GetPointData().GetScalars())[:] = image.mask(label).ravel()
        segment.AddRepresentation(_LABELMAP, labelmap)
    segmentation.SetConversionParameter(slicer.vtkSegmentationConverter.GetReferenceImageGeometryParameterName(),
                                        slicer.vtkSegmentationConverter.SerializeImageGeometry(_oriented_image(grid)))
    segmentation.SetSourceRepresentationName(_LABELMAP)  # the working copy's contours are done with


def _oriented_image(grid: LabelImage):
    """An empty ``vtkOrientedImageData`` with the dimensions and RAS placement of ``grid``."""
    image = slicer.vtkOrientedImageData()
    image.SetDimensions(grid.array.shape[::-1])
    image.SetImageToWorldMatrix(ras_matrix(grid))
    return image


def contour_polygons(polydata) -> list:
    """``(N, 3)`` LPS polygons (mm) of the closed polylines of planar-contour polydata (RAS)."""
    if polydata is None or polydata.GetNumberOfPoints() == 0:
        return []
    points = vtk_to_numpy(polydata.GetPoints().GetData()) * np.diag(LPS_TO_RAS)[:3]
    polygons = []
    for index in range(polydata.GetNumberOfCells()):
        cell = polydata.GetCell(index)
        ring = points[[cell.GetPointId(j) for j in range(cell.GetNumberOfPoints())]]
        if len(ring) > 1 and np.allclose(ring[0], ring[-1]):
            ring = ring[:-1]  # a closed polyline repeats its first point
        if len(ring) >= 3:
            polygons.append(ring)
    return polygons


def contour_polydata(polygons) -> vtk.vtkPolyData:
    """Planar-contour polydata (RAS, one closed polyline per polygon) of ``(N, 3)`` LPS polygons."""
    points, lines = vtk.vtkPoints(), vtk.vtkCellArray()
    for polygon in polygons:
        start = points.GetNumberOfPoints()
        for point in np.asarray(polygon, float) * np.diag(LPS_TO_RAS)[:3]:
            points.InsertNextPoint(*point)
        lines.InsertNextCell(len(polygon) + 1)
        for offset in [*range(len(polygon)), 0]:
            lines.InsertCellPoint(start + offset)
    polydata = vtk.vtkPolyData()
    polydata.SetPoints(points)
    polydata.SetLines(lines)
    return polydata


def add_segmentation_from_contours(scene, image, name: str):
    """Add a segmentation node whose source representation is planar contours (as SlicerRT makes
    from an RT structure set), one segment per structure of a :class:`segmetrics.inputs.readers.rtstruct.ContourImage`."""
    node = scene.AddNewNodeByClass("vtkMRMLSegmentationNode", name)
    segmentation = node.GetSegmentation()
    segmentation.SetSourceRepresentationName(PLANAR_CONTOUR)
    for label, polygons in image.contours.items():
        segment = slicer.vtkSegment()
        segment.SetName(image.names.get(label, str(label)))
        segment.AddRepresentation(PLANAR_CONTOUR, contour_polydata(polygons))
        segmentation.AddSegment(segment)
    return node


def _export(temporary: _TemporaryNodes, segmentation_node, segment_ids: list, grid_node):
    """Export segments onto ``grid_node``'s geometry; None when Slicer exports no image (an empty segment)."""
    labelmap = temporary.add("vtkMRMLLabelMapVolumeNode", "SegMetrics export")
    labelmap.HideFromEditorsOn()
    ok = slicer.vtkSlicerSegmentationsModuleLogic.ExportSegmentsToLabelmapNode(
        segmentation_node, segment_ids, labelmap, grid_node, slicer.vtkSegmentation.EXTENT_REFERENCE_GEOMETRY)
    image = labelmap.GetImageData()
    if not ok or image is None or image.GetPointData().GetScalars() is None:
        return None
    return labelmap


def _geometry(segmentation_node, extent):
    """``(IJK-to-RAS matrix, extent (i0, i1, j0, j1, k0, k1))`` of a segmentation's labelmap
    geometry by Slicer's ``extent`` rule (``vtkSegmentation.EXTENT_*``), or None when there is none
    (no segment with voxels and no image geometry). Nothing is exported."""
    serialized = segmentation_node.GetSegmentation().DetermineCommonLabelmapGeometry(extent, None)
    if not serialized:
        return None
    image = slicer.vtkOrientedImageData()
    slicer.vtkSegmentationConverter.DeserializeImageGeometry(serialized, image, False)
    bounds = np.array(image.GetExtent())
    if np.any(bounds[1::2] < bounds[::2]):
        return None
    matrix = vtk.vtkMatrix4x4()
    image.GetImageToWorldMatrix(matrix)
    return _numpy_matrix(matrix), bounds


def _geometry_image(geometry) -> LabelImage:
    """An all-zero label image on a geometry of :func:`_geometry` (zeros are allocated lazily)."""
    ijk_to_ras, bounds = geometry
    start = np.append(bounds[::2], 1.0)
    shifted = ijk_to_ras.copy()
    shifted[:, 3] = ijk_to_ras @ start
    return _label_image(np.zeros(tuple(int(n) for n in (bounds[1::2] - bounds[::2] + 1)[::-1]), np.uint8), shifted)


def _has_image_geometry(segmentation_node) -> bool:
    """Whether a segmentation carries a reference image geometry (e.g. its CT's grid)."""
    name = slicer.vtkSegmentationConverter.GetReferenceImageGeometryParameterName()
    return bool(segmentation_node.GetSegmentation().GetConversionParameter(name))


def _covering_grid(lattice, covered: list) -> LabelImage:
    """An empty grid on the voxel lattice (spacing, direction, voxel centres) of the geometry
    ``lattice`` whose extent holds the lattice's own extent and every lattice voxel that overlaps a
    voxel of the ``covered`` geometries (their corners at ±0.5 index; lattice voxel i spans
    i ± 0.5). Geometries as :func:`_geometry` gives them."""
    lattice_to_ras, bounds = lattice
    low, high = bounds[::2].astype(float), bounds[1::2].astype(float)  # (i, j, k)
    ras_to_lattice = np.linalg.inv(lattice_to_ras)
    for to_ras, extent in covered:
        corners = np.array(np.meshgrid(*[(a - 0.5, b + 0.5) for a, b in extent.reshape(3, 2)], indexing="ij")).reshape(3, -1)
        ijk = (ras_to_lattice @ to_ras @ np.vstack([corners, np.ones(corners.shape[1])]))[:3]
        low = np.minimum(low, np.floor(ijk.min(axis=1) + 0.5))
        high = np.maximum(high, np.ceil(ijk.max(axis=1) - 0.5))
    return _geometry_image((lattice_to_ras, np.ravel(np.column_stack([low, high])).astype(int)))


def _common_grid(temporary: _TemporaryNodes, reference, test, notes: list):
    """``(grid volume node, LabelImage)`` both segmentations are exported onto, so that no voxel
    of either is lost.

    The lattice (spacing, direction, voxel centres) is the reference segmentation's image
    geometry; a reference without one (e.g. a closed-surface-only segmentation, or an RT
    structure set loaded before its CT) takes the test's when the test has one. The extent is the
    union of that geometry and both segmentations' non-empty segments (Slicer's own fallback, the
    union of the reference's segments, would drop test voxels outside them).
    """
    sides = {"reference": reference, "test": test}
    geometries = {role: _geometry(node, slicer.vtkSegmentation.EXTENT_REFERENCE_GEOMETRY) for role, node in sides.items()}
    lattice_role = "reference"
    if geometries["reference"] is None or (not _has_image_geometry(reference) and _has_image_geometry(test)):
        lattice_role = "test"
    if geometries[lattice_role] is None:
        raise NothingToCompareError("nothing to compare: neither segmentation holds a voxel or an image geometry")
    covered = [_geometry(node, slicer.vtkSegmentation.EXTENT_UNION_OF_EFFECTIVE_SEGMENTS) for node in sides.values()]
    grid = _covering_grid(geometries[lattice_role], [g for g in covered if g is not None])
    grid_node = temporary.add("vtkMRMLLabelMapVolumeNode", "SegMetrics common grid")
    grid_node.HideFromEditorsOn()
    data = vtk.vtkImageData()
    data.SetDimensions(grid.array.shape[::-1])
    data.AllocateScalars(vtk.VTK_UNSIGNED_CHAR, 1)
    grid_node.SetAndObserveImageData(data)
    grid_node.SetIJKToRASMatrix(ras_matrix(grid))
    lattice = _geometry_image(geometries[lattice_role])
    notes.append((_("common grid: the {role} segmentation's voxel lattice, extended to hold both segmentations")
                  if grid.array.shape != lattice.array.shape else
                  _("common grid: the {role} segmentation's geometry")).format(role=lattice_role))
    if None not in geometries.values():
        differences = geometry_differences(*(_geometry_image(g) for g in geometries.values()))
        if differences:
            other = "test" if lattice_role == "reference" else "reference"
            notes.append(_("{other} exported onto the {role} lattice (nearest neighbour): {differences}").format(
                other=other, role=lattice_role, differences="; ".join(differences)))
    return grid_node, grid


def _mask(temporary: _TemporaryNodes, segmentation_node, segment_id, grid_node, grid: LabelImage) -> np.ndarray:
    """Boolean mask (array order) of one segment on the grid; all False for ``None``, for an empty
    segment and for segments the working copy dropped (empty planar contours)."""
    if segment_id is None or segmentation_node.GetSegmentation().GetSegment(segment_id) is None:
        return np.zeros(grid.array.shape, dtype=bool)
    checkpoint()
    labelmap = _export(temporary, segmentation_node, [segment_id], grid_node)
    checkpoint()
    if labelmap is None:
        return np.zeros(grid.array.shape, dtype=bool)
    image = labelmap.GetImageData()
    mask = vtk_to_numpy(image.GetPointData().GetScalars()).reshape(image.GetDimensions()[::-1]) > 0
    if mask.shape != grid.array.shape:
        raise RuntimeError(f"segment {segment_id!r} of {segmentation_node.GetName()!r} was exported on "
                           f"{mask.shape} voxels instead of the common grid's {grid.array.shape}")
    return mask


def msi_axis(structure) -> int:
    """Array axis of the structure's per-slice MSI rows (0 when MSI did not run)."""
    return next((v.params.get("axis", 0) for v in structure.values if v.metric == "msi"), 0) or 0


def slice_centres(mask: np.ndarray, axis: int) -> dict:
    """``{slice index: centre}`` of the voxels of each non-empty slice of a mask along ``axis``;
    centres are array indices (z, y, x) as floats."""
    centres = {}
    for index in np.flatnonzero(mask.any(axis=tuple(a for a in range(mask.ndim) if a != axis))):
        checkpoint()
        inside = np.nonzero(np.take(mask, index, axis=axis))
        centre = [float(np.mean(i)) for i in inside]
        centre.insert(axis, float(index))
        centres[int(index)] = tuple(centre)
    return centres


def _add_point_array(polydata, name: str, values) -> None:
    array = numpy_to_vtk(np.ascontiguousarray(values, dtype=float), deep=True)
    array.SetName(name)
    polydata.GetPointData().AddArray(array)


def _checked(function, *args):
    """``function(*args)`` after a :func:`~segmetrics.spatial.checkpoints.checkpoint`."""
    checkpoint()
    return function(*args)


def add_review_surfaces(structure, reference_mask: np.ndarray, test_mask: np.ndarray, spacing, params) -> None:
    """Put both surfaces of a 3-D pair, with the arrays that colour them, into ``structure.extras``.

    ``extras["test_surface"]`` and ``extras["reference_surface"]`` become ``vtkPolyData`` of the two
    masks as given here (the reference grid's array order; index-scaled mm, see
    :mod:`segmetrics.spatial.mesh`). The surfaces :func:`segmetrics.compare` built for the metrics are used
    when the structure keeps them (``extras["surfaces"]``, a comparison of these same masks), with
    the polydata it made (and their arrays, e.g. ``Roughness_mm``); otherwise both masks are meshed
    here, and a test surface the metric groups made in whatever frame is kept, with its arrays, only
    when it is the same surface. Each surface gets ``SignedDistance_mm`` (signed bidirectional local
    distance to the other surface, + outside it) and ``MSI`` (its weight at the levels of
    ``params``) unless it has them. On the reference surface the levels swap sides: a reference
    vertex outside the test was missed (the inner level's error), one inside the test is
    over-contoured (the outer level's). A pair with one empty side gets that side's surface only,
    without arrays.
    """
    from .spatial import mesh
    from .metrics import msi

    if reference_mask.ndim != 3:
        return
    built = structure.extras.get("surfaces")
    if built is not None:  # compare's surfaces of these masks, in its working frame
        reference, test = built.reference, built.test
        polydata = {role: structure.extras.get(f"{role}_surface") for role in ("reference", "test")}
        polydata = {role: _checked(built.polydata, role) if view is None else view for role, view in polydata.items()}
    else:
        reference, test = mesh.pair_surfaces(reference_mask, test_mask, spacing)
        polydata = {"reference": mesh.to_polydata(reference), "test": mesh.to_polydata(test)}
        computed = structure.extras.get("test_surface")
        if computed is not None and test is not None and computed.GetNumberOfPoints() == len(test.points) \
                and np.allclose(mesh.points(computed), test.points + test.origin, atol=1e-6):
            polydata["test"] = computed
    for role, surface in (("reference", reference), ("test", test)):
        if surface is not None:
            structure.extras[f"{role}_surface"] = polydata[role]
        else:
            structure.extras.pop(f"{role}_surface", None)
    if reference is None or test is None:
        return
    for role, (own, other, inner, outer) in (("test", (test, reference, params.msi_il, params.msi_ol)),
                                             ("reference", (reference, test, params.msi_ol, params.msi_il))):
        checkpoint()
        arrays = polydata[role].GetPointData()
        if arrays.GetArray("SignedDistance_mm") is None or arrays.GetArray("MSI") is None:
            signed, weights = msi.surface_msi(own, other, inner, outer)[:2]
            for name, values in (("SignedDistance_mm", signed), ("MSI", weights)):
                if arrays.GetArray(name) is None:
                    _add_point_array(polydata[role], name, values)


def compare_segmentations(reference_node, test_node, pairs=None, metrics=None, params=None, progress=None,
                          dose_node=None, file_for_instance=None):
    """Compare segment pairs of two segmentation nodes with :func:`segmetrics.compare`.

    Both segmentations are exported onto one grid that holds every voxel of both
    (:func:`_common_grid`: the reference's lattice, extended); the inputs are never modified (transforms are hardened and labelmaps created on hidden working
    copies, removed afterwards with everything else the run added for itself).

    Parameters
    ----------
    pairs : list of SegmentPair, optional
        Default: every segment matched by name (:func:`segment_pairs`).
    metrics, params
        As for :func:`segmetrics.compare` (metric/group names, :class:`Parameters`).
    progress : callable, optional
        Called as ``progress(fraction, message)`` before each stage of each pair (export,
        metrics, review surfaces), after each metric group, and in between from the checkpoints
        of the long loops (per slice, per side; at most every :data:`REPORT_INTERVAL_S` seconds,
        repeating the last report); it may raise :class:`Cancelled` to stop the run. Messages
        are translated in Slicer. A scene closed during the run stops it at the next checkpoint
        (:class:`Cancelled`).
    dose_node : vtkMRMLScalarVolumeNode, optional
        The planned dose in Gy (:func:`dose_grid_from_volume`) of the dose metrics and DVHs
        (``extras["dvh"]``); the dose group then runs with the chosen ones. Refused when not in Gy
        or in another frame of reference than a segmentation (:func:`check_dose_frame_of_reference`).
    file_for_instance : callable, optional
        SOP Instance UID -> DICOM file path (``""`` when unknown), e.g. Slicer's
        ``slicer.dicomDatabase.fileForInstance``: finds the DICOM files the dose and the
        segmentations were loaded from, to check their frames of reference and the dose's units.

    Returns
    -------
    (ComparisonResult, LabelImage)
        One structure per pair (``reference_label``/``test_label`` are segment IDs) with
        ``notes`` saying how the inputs were prepared and what the dose checks could not check,
        then each pair's notes from :func:`segmetrics.compare` (dose sampling, outside the dose
        grid, summation), without repeats, in order; and the common grid (LPS geometry). Each
        structure's extras also hold ``slice_centres`` (:func:`slice_centres` of both masks along
        the MSI axis) and the review surfaces (:func:`add_review_surfaces`).
    """
    from .registry import as_parameters

    params = as_parameters(params)
    check_evaluation_options(metrics=metrics)
    notes = []
    dose = None if dose_node is None else dose_grid_from_volume(dose_node, file_for_instance, notes)
    if dose is not None:
        notes += check_dose_frame_of_reference(dose, {"reference": reference_node, "test": test_node}, file_for_instance)
    if dose is not None and metrics is not None:
        metrics = [metrics] if isinstance(metrics, str) else list(metrics)
        metrics += [] if "dose" in metrics else ["dose"]
    scene = reference_node.GetScene()
    pairs = segment_pairs(reference_node, test_node) if pairs is None else pairs
    if not pairs:
        raise NothingToCompareError("nothing to compare: no segment pair (the segmentations hold no segment, or no "
                                    "segment IDs were given)")
    reporter = _Reporter(progress)
    temporary = _TemporaryNodes(scene)

    def checked():
        if reference_node.GetScene() is None:
            raise Cancelled("the scene was closed during the run")
        reporter.repeat()

    try:
        with checkpoints(checked):
            reporter(0.0, _("preparing segmentations"))
            reference, test = (_working_copy(temporary, n, r, notes) for n, r in ((reference_node, "reference"), (test_node, "test")))
            grid_node, grid = _common_grid(temporary, reference, test, notes)
            structures = []
            for index, pair in enumerate(pairs):
                step = lambda stage, message: reporter((index * 3 + stage) / (len(pairs) * 3), f"{pair.name}: {message}")  # noqa: E731
                structure, pair_notes = _compare_pair(temporary, reference, test, pair, grid_node, grid, metrics, params,
                                                      dose, step)
                structures.append(structure)
                notes += pair_notes
        reporter(1.0, _("done"))
        return ComparisonResult(structures, list(dict.fromkeys(notes))), grid
    finally:
        temporary.remove()


def _compare_pair(temporary: _TemporaryNodes, reference, test, pair: SegmentPair, grid_node, grid: LabelImage, metrics,
                  params, dose, step):
    """One pair's :class:`StructureResult` with its review extras, and the notes of its comparison;
    ``step(stage, message)`` reports the stages 0 (export), 1 to 2 (metrics, a fraction after each
    group) and 2 (review surfaces)."""
    step(0, _("exporting"))
    masks = [_mask(temporary, node, segment_id, grid_node, grid)
             for node, segment_id in ((reference, pair.reference_id), (test, pair.test_id))]
    images = [grid.with_array(m.view(np.uint8)) for m in masks]  # the 0/1 bytes of the masks, not a copy
    for image in images:
        image.names = {1: pair.name}
    step(1, _("computing metrics"))
    result = compare(images[0], images[1], labels=[1], metrics=metrics, params=params, keep_surfaces=True, dose=dose,
                     progress=lambda done, total, name: step(1 + done / total, _("computing metrics")))
    structure = result.structures[0]
    structure.reference_label, structure.test_label = pair.reference_id, pair.test_id
    step(2, _("building the review surfaces"))
    structure.extras["slice_centres"] = slice_centres(masks[0] | masks[1], msi_axis(structure))
    add_review_surfaces(structure, masks[0], masks[1], grid.spacing, params)
    return structure, result.notes


class _Reporter:
    """A run's ``progress(fraction, message)``, called at each stage and, through :meth:`repeat`, at
    the checkpoints inside the long loops (:mod:`segmetrics.spatial.checkpoints`), where it repeats
    the last report at most every :data:`REPORT_INTERVAL_S` seconds: often enough for the user
    interface to stay responsive and for a cancel to stop the run within a second."""

    def __init__(self, progress):
        self.progress = progress
        self.last = (0.0, "")
        self.time = time.monotonic()

    def __call__(self, fraction: float, message: str) -> None:
        self.last = (fraction, message)
        self.time = time.monotonic()
        if self.progress is not None:
            self.progress(fraction, message)

    def repeat(self) -> None:
        if time.monotonic() - self.time >= REPORT_INTERVAL_S:
            self(*self.last)


# --- output nodes ------------------------------------------------------------------------------


def _output_node(scene, class_name: str, key: str, name: str, node=None):
    """The node given (the user's: left unmarked, so that a later run without it never writes
    into it), else the node this module made earlier for ``key``, else a new one marked with
    :data:`OUTPUT_ATTRIBUTE` = ``key``."""
    if node is not None:
        return node
    node = next((n for n in _owned_nodes(scene, class_name) if n.GetAttribute(OUTPUT_ATTRIBUTE) == key), None)
    if node is None:
        node = scene.AddNewNodeByClass(class_name, name)
        node.SetAttribute(OUTPUT_ATTRIBUTE, key)
    return node


def _owned_nodes(scene, class_name: str) -> list:
    nodes = [scene.GetNthNodeByClass(i, class_name) for i in range(scene.GetNumberOfNodesByClass(class_name))]
    return [n for n in nodes if n.GetAttribute(OUTPUT_ATTRIBUTE)]


def _remove_stale(scene, class_name: str, prefix: str, keep) -> None:
    """Remove this module's nodes of a key ``prefix`` that are not in ``keep``, with their display,
    colour legend and storage nodes."""
    for node in _owned_nodes(scene, class_name):
        if node.GetAttribute(OUTPUT_ATTRIBUTE).startswith(prefix) and node not in keep:
            _remove_node(scene, node)


def _fill_table(table_node, columns: list) -> None:
    """Replace the table content by ``[(name, values, unit, description), ...]``; a column may
    hold a fifth item, its title.

    A column with a unit (other than "" and the dimensionless "1") gets it as its unit label and
    the name without the unit's suffix as its title: Slicer shows ``title [unit]``, e.g.
    ``hd95 [mm]`` for ``hd95_mm``."""
    table = vtk.vtkTable()
    for title, values in (column[:2] for column in columns):
        if all(isinstance(v, (int, float)) for v in values):
            array = vtk.vtkDoubleArray()
            for v in values:
                array.InsertNextValue(float(v))
        else:
            array = vtk.vtkStringArray()
            for v in values:
                array.InsertNextValue("" if v is None else str(v))
        array.SetName(title)
        table.AddColumn(array)
    table_node.RemoveAllColumns()
    table_node.SetAndObserveTable(table)
    for name, _values, unit, description, *title in columns:
        if unit not in ("", "1"):
            table_node.SetColumnUnitLabel(name, unit)
            table_node.SetColumnTitle(name, name.removesuffix(f"_{unit}"))
        if title:
            table_node.SetColumnTitle(name, title[0])
        if description:
            table_node.SetColumnDescription(name, description)


def fill_results_table(table_node, result: ComparisonResult) -> None:
    """One row per segment pair, one column per metric (named as the metric; its unit as the unit
    label; the MSI columns titled with the width σ of their weights, e.g. ``msi (σ 10 mm)``, as
    the command line shows them), a status column."""
    from .outputs.tables import sigma_of

    specs = metric_specs()
    computed = {v.metric for s in result.structures for v in s.values}
    names = [m for m in specs if m in computed] + sorted(computed - set(specs))
    columns = [
        ("Structure", [s.structure for s in result.structures], "", "segment pair"),
        ("Reference segment", [s.reference_label for s in result.structures], "", "segment ID"),
        ("Test segment", [s.test_label for s in result.structures], "", "segment ID"),
        ("Status", [s.status for s in result.structures], "", "ok, or the non-ok statuses of the row"),
    ]
    for name in names:
        values = [next((v for v in s.values if v.metric == name), None) for s in result.structures]
        unit = next(v.unit for v in values if v is not None)
        description = specs[name].description if name in specs else ""
        sigma = sigma_of(name, [v.params for v in values if v is not None])
        columns.append((name, [math.nan if v is None else v.value for v in values], unit, description,
                        *([f"{name} ({sigma})"] if sigma else [])))
    columns.append(("Notes", ["; ".join(result.notes)] * len(result.structures), "", "notes of the run: how the inputs were prepared, dose checks, warnings"))
    _fill_table(table_node, columns)


def review_order(structure) -> list:
    """Slice indices of a structure's per-slice rows in review order: lowest MSI first, ties by
    slice index, slices with an undefined (NaN) MSI last."""
    rows = slice_rows(structure)
    key = lambda r: (not math.isfinite(r["msi"]), r["msi"] if math.isfinite(r["msi"]) else 0.0, r["slice"])  # noqa: E731
    return [int(r["slice"]) for r in sorted(rows, key=key)]


def step_slice(structure, current, step: int):
    """The slice ``step`` places from ``current`` in :func:`review_order` (+1: next worse-to-better,
    -1: back); the worst slice when ``current`` is None or not a row; None past either end."""
    order = review_order(structure)
    if not order:
        return None
    if current not in order:
        return order[0]
    position = order.index(current) + step
    return order[position] if 0 <= position < len(order) else None


def worst_slice(structure):
    """``(slice index, MSI)`` of the per-slice row with the lowest finite MSI, or None. Ties go to
    the first of the ``msi`` value's ``worst_slices`` (ranked in the canonical orientation, so the
    same physical slice for every storage of the grid)."""
    finite = [r for r in slice_rows(structure) if math.isfinite(r["msi"])]
    if not finite:
        return None
    ranked = next((v.params.get("worst_slices", []) for v in structure.values if v.metric == "msi"), [])
    row = min(finite, key=lambda r: (r["msi"], ranked.index(r["slice"]) if r["slice"] in ranked else len(ranked), r["slice"]))
    return int(row["slice"]), float(row["msi"])


def _structure(outputs: Outputs, structure_name: str):
    return next((s for s in outputs.result.structures if s.structure == structure_name), None)


def slice_ras(outputs: Outputs, structure_name: str, index: int):
    """RAS position (mm) on which to centre the views for slice ``index`` of a pair, or None for an
    unknown pair.

    ``index`` counts along the pair's MSI axis of the reference grid (the per-slice table's
    ``slice``). The position is the centre of both segments' voxels in that slice, so that the
    other two slice views cut through the structure; the centre of the grid's slice when the slice
    holds no voxel.
    """
    structure = _structure(outputs, structure_name)
    if structure is None:
        return None
    centre = structure.extras.get("slice_centres", {}).get(int(index))
    if centre is None:
        return slice_center_ras(outputs.grid, msi_axis(structure), int(index))
    return _index_to_ras(outputs.grid, centre)


def worst_slice_ras(outputs: Outputs, structure_name: str):
    """RAS position (mm) of a pair's worst MSI slice (:func:`slice_ras`), or None without per-slice MSI."""
    structure = _structure(outputs, structure_name)
    worst = worst_slice(structure) if structure is not None else None
    return None if worst is None else slice_ras(outputs, structure_name, worst[0])


def _index_to_ras(grid: LabelImage, index) -> tuple:
    lps = grid.index_to_physical(np.asarray(index, dtype=float))
    return tuple(float(x) for x in (LPS_TO_RAS[:3, :3] @ lps))


def slice_center_ras(grid: LabelImage, axis: int, index: int) -> tuple:
    """RAS position (mm) of the centre of slice ``index`` along array axis ``axis`` of the grid."""
    center = (np.asarray(grid.array.shape, dtype=float) - 1) / 2
    center[axis] = index
    return _index_to_ras(grid, center)


def jump_to(scene, ras) -> None:
    """Centre every slice view of the scene on a RAS position (mm) (centred jump, not the default
    offset jump, which only moves each slice plane through the point)."""
    slicer.vtkMRMLSliceNode.JumpAllSlices(scene, *ras, slicer.vtkMRMLSliceNode.CenteredJumpSlice)


def series_colour(index: int) -> tuple:
    """RGB (0–1) of the ``index``-th pair's chart series: hues a golden-ratio turn apart, so
    neighbours differ clearly, at a fixed saturation and brightness, so none is dark like the black
    current-slice marker. (Slicer's ``SetUniqueColor`` draws from the Random colour table, whose
    colours can be almost black.)"""
    import colorsys

    return colorsys.hsv_to_rgb((index * 0.618034) % 1.0, 0.75, 0.85)


def _write_marker(scene):
    """The chart's current-slice marker: a black diamond series over a one-row table."""
    table = _output_node(scene, "vtkMRMLTableNode", "marker", "SegMetrics current slice")
    _fill_table(table, [("slice", [], "", ""), ("msi", [], "", "")])
    marker = _output_node(scene, "vtkMRMLPlotSeriesNode", "marker", "Current slice")
    marker.SetAndObserveTableNodeID(table.GetID())
    marker.SetXColumnName("slice")
    marker.SetYColumnName("msi")
    marker.SetPlotType(slicer.vtkMRMLPlotSeriesNode.PlotTypeScatter)
    marker.SetMarkerStyle(slicer.vtkMRMLPlotSeriesNode.MarkerStyleDiamond)
    marker.SetMarkerSize(14)
    marker.SetColor(0.0, 0.0, 0.0)
    return marker


def _write_slice_tables(scene, result, chart_node=None):
    reviewed = [s for s in result.structures if slice_rows(s)]
    if not reviewed:
        for class_name in ("vtkMRMLPlotChartNode", "vtkMRMLPlotSeriesNode", "vtkMRMLTableNode"):
            for prefix in ("chart", "marker", "series:", "slices:"):
                _remove_stale(scene, class_name, prefix, [])
        return {}, None, None
    marker = _write_marker(scene)
    tables, series = {}, []
    for index, structure in enumerate(reviewed):
        rows = slice_rows(structure)
        key = f"slices:{structure.structure}"
        table = _output_node(scene, "vtkMRMLTableNode", key, f"SegMetrics MSI per slice {structure.structure}")
        columns = {**slices.SLICE_COLUMNS, **dict.fromkeys(slices.MSI_DETAIL_COLUMNS, ("", ""))}
        _fill_table(table, [(k, [r[k] for r in rows], *columns[k]) for k in rows[0]])
        tables[structure.structure] = table
        plot = _output_node(scene, "vtkMRMLPlotSeriesNode", f"series:{structure.structure}", f"MSI {structure.structure}")
        plot.SetAndObserveTableNodeID(table.GetID())
        plot.SetXColumnName("slice")
        plot.SetYColumnName("msi")
        plot.SetPlotType(slicer.vtkMRMLPlotSeriesNode.PlotTypeScatter)
        plot.SetColor(*series_colour(index))  # one colour per pair, never dark like the marker
        series.append(plot)
    _remove_stale(scene, "vtkMRMLTableNode", "slices:", tables.values())
    _remove_stale(scene, "vtkMRMLPlotSeriesNode", "series:", series)
    chart = _output_node(scene, "vtkMRMLPlotChartNode", "chart", "SegMetrics MSI per slice", chart_node)
    chart.RemoveAllPlotSeriesNodeIDs()
    for plot in (*series, marker):
        chart.AddAndObservePlotSeriesNodeID(plot.GetID())
    chart.SetTitle(_("MSI per slice"))
    chart.SetXAxisTitle(_("slice index"))
    chart.SetYAxisTitle(_("MSI"))
    return tables, chart, marker


def _write_dvh(scene, result):
    """The chart of the cumulative DVHs (volume in % of each side's volume inside the dose grid
    against dose in Gy) of the pairs with ``extras["dvh"]``, one colour per pair, the reference
    dashed and the test solid, over one table per pair; None (and the previous run's DVH nodes
    removed) without any."""
    from .outputs.dvh import DVH_COLUMNS

    tables, series = [], []
    for index, structure in enumerate(s for s in result.structures if "dvh" in s.extras):
        rows = structure.extras["dvh"].rows()
        table = _output_node(scene, "vtkMRMLTableNode", f"dvh:{structure.structure}", f"SegMetrics DVH {structure.structure}")
        _fill_table(table, [(key, [r[key] for r in rows], *DVH_COLUMNS[key]) for key in rows[0]])
        tables.append(table)
        for side, style in (("reference", slicer.vtkMRMLPlotSeriesNode.LineStyleDash),
                            ("test", slicer.vtkMRMLPlotSeriesNode.LineStyleSolid)):
            plot = _output_node(scene, "vtkMRMLPlotSeriesNode", f"dvh series:{structure.structure} {side}",
                                f"DVH {structure.structure} {side}")
            plot.SetAndObserveTableNodeID(table.GetID())
            plot.SetXColumnName("dose_gy")
            plot.SetYColumnName(f"{side}_percent")
            plot.SetPlotType(slicer.vtkMRMLPlotSeriesNode.PlotTypeScatter)
            plot.SetMarkerStyle(slicer.vtkMRMLPlotSeriesNode.MarkerStyleNone)
            plot.SetLineStyle(style)
            plot.SetColor(*series_colour(index))
            series.append(plot)
    _remove_stale(scene, "vtkMRMLTableNode", "dvh:", tables)
    _remove_stale(scene, "vtkMRMLPlotSeriesNode", "dvh series:", series)
    if not series:
        _remove_stale(scene, "vtkMRMLPlotChartNode", "dvh chart", [])
        return None
    chart = _output_node(scene, "vtkMRMLPlotChartNode", "dvh chart", "SegMetrics DVH")
    chart.RemoveAllPlotSeriesNodeIDs()
    for plot in series:
        chart.AddAndObservePlotSeriesNodeID(plot.GetID())
    chart.SetTitle(_("Dose-volume histograms (reference dashed, test solid)"))
    chart.SetXAxisTitle(_("dose (Gy)"))
    chart.SetYAxisTitle(_("volume (%)"))
    return chart


def mark_slice(outputs: Outputs, structure_name: str, index: int):
    """Mark slice ``index`` of a pair on the chart (the marker series' single point); returns that
    slice's per-slice row, or None (marker cleared) when the pair has no such row."""
    structure = _structure(outputs, structure_name)
    row = next((r for r in slice_rows(structure) if int(r["slice"]) == int(index)), None) if structure else None
    if outputs.marker is None or outputs.marker.GetScene() is None:
        return row
    table = outputs.marker.GetTableNode()
    _fill_table(table, [("slice", [float(row["slice"])] if row else [], "", ""), ("msi", [float(row["msi"])] if row else [], "", "")])
    return row


def color_node(scene, colormap: str):
    """A colour table node holding a colour map of :data:`segmetrics.outputs.render.COLOUR_MAPS` (e.g. the
    diverging ``RdBu_r``), added once."""
    name = f"SegMetrics {colormap}"
    node = scene.GetFirstNodeByName(name)
    if node is None:
        lookup = lookup_table(colormap, (0.0, 1.0))
        node = scene.AddNewNodeByClass("vtkMRMLColorTableNode", name)
        node.SetTypeToUser()
        node.SetNumberOfColors(lookup.GetNumberOfTableValues())
        for index in range(lookup.GetNumberOfTableValues()):
            node.SetColor(index, "", *lookup.GetTableValue(index))
    return node


def _usable(model_node) -> bool:
    """A model still in a scene, with a display node (removed nodes resolve their references to None)."""
    return model_node is not None and model_node.GetScene() is not None and model_node.GetDisplayNode() is not None


def legend_title(array_name: str) -> str:
    """Colour legend title of a point array: the title of
    :data:`segmetrics.outputs.render.ARRAY_STYLES` (two lines: narrower than one long line),
    spelled out here so that Slicer's translation tools find it."""
    titles = {"SignedDistance_mm": _("signed distance\n(mm, + outside)"), "MSI": _("MSI\n(1 = acceptable)"),
              "Roughness_mm": _("roughness (mm)")}
    return titles.get(array_name, array_style(array_name)[2])


def show_array(model_node, array_name: str, value_range=None, legend: bool = True) -> bool:
    """Colour a model, in 3-D and in the slice views, by one point array; False (and drawn in its
    plain colour) when the model lacks the array, or has been removed from the scene.

    Colour map, default range rule and legend title follow :data:`segmetrics.outputs.render.ARRAY_STYLES`,
    as in the reports (signed distance: diverging map, range symmetric about 0; MSI: 0..1).
    ``value_range`` overrides the range (e.g. one range shared by several models); ``legend``
    shows the colour legend (3-D and slice views) or hides it.
    """
    if not _usable(model_node):
        return False
    display = model_node.GetDisplayNode()
    polydata = model_node.GetPolyData()
    existing = slicer.vtkSlicerColorLogic.GetColorLegendDisplayNode(model_node)
    if polydata is None or polydata.GetPointData().GetArray(array_name) is None:
        display.SetScalarVisibility(False)
        if existing is not None:
            existing.SetVisibility(False)
        return False
    colormap, rule = array_style(array_name)[:2]
    display.SetActiveScalar(array_name, vtk.vtkAssignAttribute.POINT_DATA)
    display.SetAndObserveColorNodeID(color_node(model_node.GetScene(), colormap).GetID())
    display.SetScalarRangeFlag(slicer.vtkMRMLDisplayNode.UseManualScalarRange)
    display.SetScalarRange(*(value_range or colour_range(polydata, array_name, rule)))
    display.SetScalarVisibility(True)
    if not legend:
        if existing is not None:
            existing.SetVisibility(False)
        return True
    node = existing or slicer.vtkSlicerColorLogic.AddDefaultColorLegendDisplayNode(model_node)
    node.SetTitleText(legend_title(array_name))
    node.SetSize(*LEGEND_SIZE)
    node.SetLabelFormat(LEGEND_LABEL_FORMAT)
    node.SetVisibility2D(True)
    node.SetVisibility(True)
    return True


def shared_range(models, array_name: str):
    """One colour range of ``array_name`` over several models (by the array's rule in
    :data:`segmetrics.outputs.render.ARRAY_STYLES`), so that a colour means the same value on each; None
    without the array."""
    polydata = [m.GetPolyData() for m in models if _usable(m) and m.GetPolyData() is not None]
    polydata = [p for p in polydata if p.GetPointData().GetArray(array_name) is not None]
    if not polydata:
        return None
    rule = array_style(array_name)[1]
    ranges = np.array([colour_range(p, array_name, rule) for p in polydata])
    return float(ranges[:, 0].min()), float(ranges[:, 1].max())


def show_outputs_array(outputs: Outputs, array_name: str) -> int:
    """Colour every pair's surfaces and contours by one array with one shared range (a colour means
    the same value on every structure) and one colour legend, on the first model showing it;
    removed models are skipped. Returns how many pairs show the array."""
    names = sorted(set(outputs.models) | set(outputs.reference_models))
    pairs = {name: (outputs.models.get(name), outputs.reference_models.get(name)) for name in names}
    value_range = shared_range([model for pair in pairs.values() for model in pair], array_name)
    shown_pairs, legend_shown = 0, False
    for pair in pairs.values():
        shown = False
        for model in pair:
            if show_array(model, array_name, value_range, legend=not legend_shown):
                shown = legend_shown = True
        shown_pairs += shown
    return shown_pairs


def _to_ras(polydata, grid: LabelImage):
    """Surface mesh (index-scaled mm, no origin/direction) in the scene's RAS space."""
    from .spatial.mesh import to_physical

    flip = vtk.vtkTransform()
    flip.SetMatrix(LPS_TO_RAS.ravel())
    transformer = vtk.vtkTransformPolyDataFilter()
    transformer.SetInputData(to_physical(polydata, grid))
    transformer.SetTransform(flip)
    transformer.Update()
    return transformer.GetOutput()


def _write_models(scene, result, grid, role: str) -> dict:
    """One model per pair of its ``role`` ("test" or "reference") surface, shown in 3-D and as a
    contour in the slice views."""
    models, prefix = {}, "surface:" if role == "test" else "reference surface:"
    for structure in result.structures:
        polydata = structure.extras.get(f"{role}_surface")
        if polydata is None or polydata.GetNumberOfPoints() == 0:
            continue
        model = _output_node(scene, "vtkMRMLModelNode", prefix + structure.structure,
                             f"SegMetrics {structure.structure} {role} surface")
        model.SetAndObservePolyData(_to_ras(polydata, grid))
        if model.GetDisplayNode() is None:
            model.CreateDefaultDisplayNodes()
        display = model.GetDisplayNode()
        display.SetVisibility2D(True)  # model display nodes default to 3-D only
        display.SetSliceIntersectionThickness(CONTOUR_WIDTHS[role])
        models[structure.structure] = model
    _remove_stale(scene, "vtkMRMLModelNode", prefix, models.values())
    return models


def write_outputs(scene, result: ComparisonResult, grid: LabelImage, table_node=None, chart_node=None,
                  color_array=SURFACE_ARRAYS[0]) -> Outputs:
    """Write a comparison into the scene, reusing the nodes of the previous run.

    Makes the results table, per-slice MSI tables with a plot chart (one colour per pair, and a
    marker series for the current slice) when MSI ran, DVH tables with their chart when the dose
    group ran (:func:`_write_dvh`), and per pair a model of the test surface
    and one of the reference surface (``extras["test_surface"]``/``["reference_surface"]``), shown
    in 3-D and as contours in the slice views, coloured by ``color_array`` (or the first available
    of :data:`SURFACE_ARRAYS`) with a colour legend.
    """
    table = _output_node(scene, "vtkMRMLTableNode", "results", "SegMetrics results", table_node)
    fill_results_table(table, result)
    slice_tables, chart, marker = _write_slice_tables(scene, result, chart_node)
    outputs = Outputs(result, grid, table, slice_tables, chart, _write_models(scene, result, grid, "test"),
                      _write_models(scene, result, grid, "reference"), marker, scene, _write_dvh(scene, result))
    models = [*outputs.models.values(), *outputs.reference_models.values()]
    shown = next((a for a in (color_array, *SURFACE_ARRAYS) if shared_range(models, a) is not None), color_array)
    show_outputs_array(outputs, shown)
    return outputs


def run(reference_node, test_node, pairs=None, metrics=None, params=None, table_node=None,
        color_array=SURFACE_ARRAYS[0], progress=None, dose_node=None, file_for_instance=None) -> Outputs:
    """Compare two segmentation nodes and write the outputs (see :func:`compare_segmentations`,
    which takes ``dose_node``, the planned dose volume, and ``file_for_instance``).

    Nothing is written before every pair is computed, so a run stopped by :class:`Cancelled`
    (raised by ``progress``, or because the scene was closed meanwhile) leaves the scene as it was.
    """
    result, grid = compare_segmentations(reference_node, test_node, pairs, metrics, params, progress, dose_node,
                                         file_for_instance)
    scene = reference_node.GetScene()
    if scene is None:
        raise Cancelled("the scene was closed during the run")
    return write_outputs(scene, result, grid, table_node, color_array=color_array)


def show_results(app_logic, outputs: Outputs):
    """Show the results table and the charts in a layout set explicitly (deriving it from the
    current layout, as the Tables and Plots logics do, turns the one-up 3-D layout into a four-up
    plot view without a table): with both the MSI and the DVH chart, :data:`TWO_CHARTS_LAYOUT`, each
    chart in its own plot view, side by side (their x axes differ: slice index, Gy); with one of
    them, Slicer's four-up view with plot and table; with none, four-up with table. Output nodes
    the user deleted are skipped. Returns the view arrangement set, or None (no layout node, or no
    output left in the scene)."""
    scene = outputs_scene(outputs)
    layout = scene.GetFirstNodeByClass("vtkMRMLLayoutNode") if scene is not None else None
    if layout is None:
        return None
    charts = [c for c in (outputs.chart, outputs.dvh_chart) if c is not None and c.GetScene() is not None]
    if len(charts) == 2:
        if not layout.IsLayoutDescription(TWO_CHARTS_LAYOUT_ID):
            layout.AddLayoutDescription(TWO_CHARTS_LAYOUT_ID, TWO_CHARTS_LAYOUT)
        layout.SetViewArrangement(TWO_CHARTS_LAYOUT_ID)
    else:
        layout.SetViewArrangement(slicer.vtkMRMLLayoutNode.SlicerLayoutFourUpPlotTableView if charts
                                  else slicer.vtkMRMLLayoutNode.SlicerLayoutFourUpTableView)
    if outputs.table.GetScene() is not None:
        outputs.table.SetUseColumnTitleAsColumnHeader(True)
        app_logic.GetSelectionNode().SetActiveTableID(outputs.table.GetID())
        app_logic.PropagateTableSelection()
    if len(charts) == 2:
        for view_name, chart in zip(("PlotView1", "PlotView2"), charts):
            view = scene.GetSingletonNode(view_name, "vtkMRMLPlotViewNode")  # made by the layout logic for the layout
            if view is not None:
                view.SetPlotChartNodeID(chart.GetID())
    elif charts:
        app_logic.GetModuleLogic("Plots").ShowChartInLayout(charts[0])
    return layout.GetViewArrangement()


def _offscreen_window(size):
    """Renderer and offscreen window of ``size`` pixels (with the interactor some displayable managers need)."""
    prefer_headless_window()
    renderer = vtk.vtkRenderer()
    window = vtk.vtkRenderWindow()
    window.SetOffScreenRendering(1)
    window.AddRenderer(renderer)
    window.SetSize(*size)
    interactor = vtk.vtkRenderWindowInteractor()
    interactor.SetRenderWindow(window)
    return renderer, window


def _managers(factory, app_logic, renderer, view_node, names):
    """A displayable manager group of ``names`` on the view node, aware of the scene's existing nodes."""
    factory.SetMRMLApplicationLogic(app_logic)
    for manager in names:
        if not factory.IsDisplayableManagerRegistered(manager):
            factory.RegisterDisplayableManager(manager)
    group = slicer.vtkMRMLDisplayableManagerGroup()
    group.Initialize(factory, renderer)  # after the view node exists, so the managers see the scene
    group.SetMRMLDisplayableNode(view_node)
    scene = view_node.GetScene()
    for index in range(scene.GetNumberOfNodesByClass("vtkMRMLDisplayNode")):
        # the managers only track nodes added after them: announce the existing ones again
        scene.InvokeEvent(slicer.vtkMRMLScene.NodeAddedEvent, scene.GetNthNodeByClass(index, "vtkMRMLDisplayNode"))
    return group


def _node_ids(scene) -> set:
    return {scene.GetNthNode(i).GetID() for i in range(scene.GetNumberOfNodes())}


def _remove_nodes_except(scene, keep: set) -> None:
    """Remove the nodes an offscreen render added (view, camera, slice composite and slice model
    nodes): these renders run synchronously in scripts, so nothing else adds nodes meanwhile."""
    for node_id in _node_ids(scene) - keep:
        node = scene.GetNodeByID(node_id)
        if node is not None:
            scene.RemoveNode(node)


def _write_png(window, path) -> None:
    window.Render()
    grab = vtk.vtkWindowToImageFilter()
    grab.SetInput(window)
    writer = vtk.vtkPNGWriter()
    writer.SetFileName(str(path))
    writer.SetInputConnection(grab.GetOutputPort())
    writer.Write()
    window.Finalize()


def render_png(scene, app_logic, path, size=(800, 600)) -> None:
    """Render the scene's models offscreen through Slicer's 3-D displayable managers into a PNG.

    Models keep their display settings (scalar colouring, colour legend); the camera looks from
    anterior and fits all models. Headless Linux needs the Mesa EGL libraries.
    """
    before = _node_ids(scene)
    view_logic = slicer.vtkMRMLViewLogic()
    view_logic.SetMRMLApplicationLogic(app_logic)
    view_logic.SetMRMLScene(scene)
    view_node = view_logic.AddViewNode("SegMetricsOffscreen")
    renderer, window = _offscreen_window(size)
    group = _managers(slicer.vtkMRMLThreeDViewDisplayableManagerFactory.GetInstance(), app_logic, renderer, view_node,
                      ("vtkMRMLCameraDisplayableManager", "vtkMRMLViewDisplayableManager",
                       "vtkMRMLModelDisplayableManager", "vtkMRMLColorLegendDisplayableManager"))
    renderer.ResetCamera()
    _write_png(window, path)
    del group
    _remove_nodes_except(scene, before)


def worst_slice_view(outputs: Outputs, structure_name: str, margin: float = 1.4):
    """``(ras, orientation, field of view in mm)`` showing a pair's worst MSI slice: centred as
    :func:`worst_slice_ras`, in the orientation of the MSI slices (:func:`slice_orientation`), wide
    enough for both surfaces' in-plane extent times ``margin``; None without per-slice MSI."""
    structure, ras = _structure(outputs, structure_name), worst_slice_ras(outputs, structure_name)
    models = [m for m in (outputs.models.get(structure_name), outputs.reference_models.get(structure_name)) if _usable(m)]
    if ras is None or not models:
        return None
    orientation = slice_orientation(outputs.grid, msi_axis(structure))
    bounds = np.array([m.GetPolyData().GetBounds() for m in models]).reshape(-1, 3, 2)
    extent = bounds[:, :, 1].max(axis=0) - bounds[:, :, 0].min(axis=0)
    in_plane = np.delete(extent, ("Sagittal", "Coronal", "Axial").index(orientation))
    return ras, orientation, margin * float(in_plane.max())


def slice_orientation(grid: LabelImage, axis: int) -> str:
    """Slice view orientation (``Axial``, ``Sagittal``, ``Coronal``) closest to the slices along
    array axis ``axis`` of the grid (its normal is the grid's index axis ``2 - axis``)."""
    normal = LPS_TO_RAS[:3, :3] @ np.asarray(grid.direction, dtype=float).reshape(3, 3)[:, grid.array.ndim - 1 - axis]
    return ("Sagittal", "Coronal", "Axial")[int(np.argmax(np.abs(normal)))]


def render_slice_png(scene, app_logic, path, ras, orientation: str = "Axial", field_of_view_mm: float = 100.0,
                     size=(600, 600)) -> None:
    """Render one slice view offscreen through Slicer's slice displayable managers into a PNG.

    The view is centred on ``ras`` (mm) and spans ``field_of_view_mm`` across; models shown in 2-D
    (the surfaces' contours, coloured by their active arrays) and colour legends are drawn, on a
    black background (no volume layers). The nodes the render adds are removed afterwards.
    """
    before = _node_ids(scene)
    logic = slicer.vtkMRMLSliceLogic()
    logic.SetMRMLApplicationLogic(app_logic)
    logic.SetMRMLScene(scene)
    slice_node = logic.AddSliceNode("SegMetricsOffscreen")
    slice_node.SetOrientation(orientation)
    slice_node.SetDimensions(size[0], size[1], 1)
    slice_node.SetFieldOfView(field_of_view_mm, field_of_view_mm * size[1] / size[0], 1.0)
    slice_node.JumpSliceByCentering(*ras)
    renderer, window = _offscreen_window(size)
    group = _managers(slicer.vtkMRMLSliceViewDisplayableManagerFactory.GetInstance(), app_logic, renderer, slice_node,
                      ("vtkMRMLModelSliceDisplayableManager", "vtkMRMLColorLegendDisplayableManager"))
    _write_png(window, path)
    del group
    logic.SetMRMLScene(None)
    _remove_nodes_except(scene, before)
