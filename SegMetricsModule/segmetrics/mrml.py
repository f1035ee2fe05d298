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
from dataclasses import dataclass, field

import numpy as np
import slicer
import vtk
from vtk.util.numpy_support import numpy_to_vtk, vtk_to_numpy

from .compare import ComparisonResult, compare
from .geometry import LabelImage, geometry_differences
from .registry import metric_specs
from .render import ARRAY_STYLES, colour_range, lookup_table

#: Flip of the first two axes: maps LPS to RAS and back (it is its own inverse).
LPS_TO_RAS = np.diag([-1.0, -1.0, 1.0, 1.0])
#: Node attribute marking the nodes this module owns, so that re-runs reuse them.
OUTPUT_ATTRIBUTE = "SegMetrics.Output"
#: Point arrays of the test surface that can colour the 3-D view, in order of preference.
SURFACE_ARRAYS = ("MSI", "SignedDistance_mm", "Roughness_mm")
_LABELMAP = "Binary labelmap"
#: Colour legend width and height as fractions of the view (Slicer's default 0.15 x 0.5 let a long
#: title reach over tall models in the middle of the view).
LEGEND_SIZE = (0.08, 0.4)


@dataclass
class SegmentPair:
    """One reference/test segment pair; a missing side has ID ``None`` (compared as empty)."""

    name: str
    reference_id: str | None
    test_id: str | None


@dataclass
class Outputs:
    """What :func:`run` produced: the core result, its grid (LPS) and the output nodes."""

    result: ComparisonResult
    grid: LabelImage
    table: object
    slice_tables: dict = field(default_factory=dict)
    chart: object = None
    models: dict = field(default_factory=dict)


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


def label_image_from_volume(volume_node, names: dict | None = None) -> LabelImage:
    """Array (z, y, x) and LPS geometry of a volume node; spacing in mm in array-axis order."""
    image = volume_node.GetImageData()
    array = vtk_to_numpy(image.GetPointData().GetScalars()).reshape(image.GetDimensions()[::-1]).copy()
    matrix = vtk.vtkMatrix4x4()
    volume_node.GetIJKToRASMatrix(matrix)
    ijk_to_lps = LPS_TO_RAS @ np.array([[matrix.GetElement(r, c) for c in range(4)] for r in range(4)])
    spacing_xyz = np.linalg.norm(ijk_to_lps[:3, :3], axis=0)
    direction = ijk_to_lps[:3, :3] / spacing_xyz
    return LabelImage(array, spacing_xyz[::-1], ijk_to_lps[:3, 3], direction.ravel(), dict(names or {}))


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
        pairs = []
        for ref_id, test_id in zip(reference_ids, test_ids):
            ref_name, test_name = ref_names[ref_id], test_names[test_id]
            pairs.append(SegmentPair(ref_name if ref_name == test_name else f"{ref_name} vs {test_name}", ref_id, test_id))
        return pairs
    test_by_name = {name.casefold(): segment_id for segment_id, name in test_names.items()}
    pairs = [SegmentPair(name, ref_id, test_by_name.pop(name.casefold(), None)) for ref_id, name in ref_names.items()]
    return pairs + [SegmentPair(test_names[test_id], None, test_id) for test_id in test_by_name.values()]


def _working_copy(node, role: str, notes: list):
    """A hidden copy of a segmentation with its parent transform hardened and a binary labelmap."""
    copy = node.GetScene().AddNewNodeByClass("vtkMRMLSegmentationNode", f"{node.GetName()} (SegMetrics working copy)")
    copy.HideFromEditorsOn()
    copy.GetSegmentation().DeepCopy(node.GetSegmentation())
    if node.GetParentTransformNode() is not None:
        copy.SetAndObserveTransformNodeID(node.GetTransformNodeID())
        copy.HardenTransform()
        notes.append(f"{role} parent transform applied (hardened on a working copy)")
    segmentation = copy.GetSegmentation()
    source = segmentation.GetSourceRepresentationName()
    if source != _LABELMAP and segmentation.GetNumberOfSegments():
        if not segmentation.CreateRepresentation(_LABELMAP):
            raise RuntimeError(f"could not create a binary labelmap of {role} segmentation {node.GetName()!r}")
        notes.append(f"{role} binary labelmap created from its {source.lower()} source")
    return copy


def _export(scene, segmentation_node, segment_ids: list, grid_node):
    """Export segments onto ``grid_node``'s geometry (or the segmentation's own, when None)."""
    labelmap = scene.AddNewNodeByClass("vtkMRMLLabelMapVolumeNode")
    ok = slicer.vtkSlicerSegmentationsModuleLogic.ExportSegmentsToLabelmapNode(
        segmentation_node, segment_ids, labelmap, grid_node, slicer.vtkSegmentation.EXTENT_REFERENCE_GEOMETRY
    )
    if not ok or labelmap.GetImageData() is None:
        raise RuntimeError(f"could not export segments {segment_ids} of {segmentation_node.GetName()!r}")
    return labelmap


def _mask(scene, segmentation_node, segment_id, grid_node, grid: LabelImage) -> np.ndarray:
    """Boolean mask (array order) of one segment on the grid; all False for ``None``."""
    if segment_id is None:
        return np.zeros(grid.array.shape, dtype=bool)
    return label_image_from_volume(_export(scene, segmentation_node, [segment_id], grid_node)).array > 0


def _node_ids(scene) -> set:
    return {scene.GetNthNode(i).GetID() for i in range(scene.GetNumberOfNodes())}


def _remove_nodes_added_since(scene, existing: set) -> None:
    """Remove the temporary nodes (working copies, exports and their display/colour nodes)."""
    for node_id in _node_ids(scene) - existing:
        node = scene.GetNodeByID(node_id)
        if node is not None and not node.GetSingletonTag():
            scene.RemoveNode(node)


def compare_segmentations(reference_node, test_node, pairs=None, metrics=None, params=None, progress=None):
    """Compare segment pairs of two segmentation nodes with :func:`segmetrics.compare`.

    Both segmentations are exported onto one grid, the reference segmentation's geometry; the
    inputs are never modified (transforms are hardened and labelmaps created on working copies).

    Parameters
    ----------
    pairs : list of SegmentPair, optional
        Default: every segment matched by name (:func:`segment_pairs`).
    metrics, params
        As for :func:`segmetrics.compare` (metric/group names, :class:`Parameters`).
    progress : callable, optional
        Called as ``progress(fraction, message)``.

    Returns
    -------
    (ComparisonResult, LabelImage)
        One structure per pair (``reference_label``/``test_label`` are segment IDs) with
        ``notes`` saying how the inputs were prepared; and the common grid (LPS geometry).
    """
    scene = reference_node.GetScene()
    pairs = segment_pairs(reference_node, test_node) if pairs is None else pairs
    report = progress or (lambda fraction, message: None)
    notes = []
    existing = _node_ids(scene)
    try:
        report(0.0, "preparing segmentations")
        reference, test = (_working_copy(n, r, notes) for n, r in ((reference_node, "reference"), (test_node, "test")))
        reference_grid_node = _export(scene, reference, [], None)
        test_grid_node = _export(scene, test, [], None)
        grid = label_image_from_volume(reference_grid_node)
        differences = geometry_differences(grid, label_image_from_volume(test_grid_node))
        notes.append("common grid: the reference segmentation's geometry")
        if differences:
            notes.append("test exported onto the reference geometry (nearest neighbour): " + "; ".join(differences))
        structures = []
        for index, pair in enumerate(pairs):
            report(index / max(len(pairs), 1), f"comparing {pair.name}")
            masks = [_mask(scene, node, segment_id, reference_grid_node, grid)
                     for node, segment_id in ((reference, pair.reference_id), (test, pair.test_id))]
            images = [grid.with_array(m.astype(np.uint8)) for m in masks]
            for image in images:
                image.names = {1: pair.name}
            structure = compare(images[0], images[1], metrics=metrics, params=params).structures[0]
            structure.reference_label, structure.test_label = pair.reference_id, pair.test_id
            structures.append(structure)
        report(1.0, "done")
        return ComparisonResult(structures, notes), grid
    finally:
        _remove_nodes_added_since(scene, existing)


# --- output nodes ------------------------------------------------------------------------------


def _output_node(scene, class_name: str, key: str, name: str, node=None):
    """The node given, else the node this module made earlier for ``key``, else a new one."""
    if node is None:
        node = next((n for n in _owned_nodes(scene, class_name) if n.GetAttribute(OUTPUT_ATTRIBUTE) == key), None)
    if node is None:
        node = scene.AddNewNodeByClass(class_name, name)
    node.SetAttribute(OUTPUT_ATTRIBUTE, key)
    return node


def _owned_nodes(scene, class_name: str) -> list:
    nodes = [scene.GetNthNodeByClass(i, class_name) for i in range(scene.GetNumberOfNodesByClass(class_name))]
    return [n for n in nodes if n.GetAttribute(OUTPUT_ATTRIBUTE)]


def _remove_stale(scene, class_name: str, prefix: str, keep) -> None:
    for node in _owned_nodes(scene, class_name):
        if node.GetAttribute(OUTPUT_ATTRIBUTE).startswith(prefix) and node not in keep:
            scene.RemoveNode(node)


def column_name(metric: str, unit: str) -> str:
    """Table column title of a metric, with its unit unless dimensionless."""
    return metric if unit in ("", "1") else f"{metric} [{unit}]"


def _fill_table(table_node, columns: list) -> None:
    """Replace the table content by ``[(title, values, unit, description), ...]``."""
    table = vtk.vtkTable()
    for title, values, _, _ in columns:
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
    for title, _, unit, description in columns:
        if unit:
            table_node.SetColumnUnitLabel(title, unit)
        if description:
            table_node.SetColumnDescription(title, description)


def fill_results_table(table_node, result: ComparisonResult) -> None:
    """One row per segment pair, one column per metric (unit in the title), a status column."""
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
        columns.append((column_name(name, unit), [math.nan if v is None else v.value for v in values], unit, description))
    columns.append(("Notes", ["; ".join(result.notes)] * len(result.structures), "", "how the inputs were prepared"))
    _fill_table(table_node, columns)


def slice_rows(structure) -> list:
    """Per-slice MSI rows of a structure as dicts (empty when MSI was not computed)."""
    return [dict(r) if isinstance(r, dict) else vars(r) for r in structure.extras.get("msi_slices", [])]


def worst_slice(structure):
    """``(slice index, MSI)`` of the per-slice row with the lowest finite MSI, or None."""
    rows = slice_rows(structure)
    if not rows:
        return None
    finite = [r for r in rows if math.isfinite(r["msi"])]
    if not finite:
        return None
    row = min(finite, key=lambda r: r["msi"])
    return int(row["slice"]), float(row["msi"])


def worst_slice_ras(outputs: Outputs, structure_name: str):
    """RAS position (mm) of the centre of a pair's worst MSI slice, or None without per-slice MSI."""
    structure = next((s for s in outputs.result.structures if s.structure == structure_name), None)
    worst = worst_slice(structure) if structure is not None else None
    if worst is None:
        return None
    axis = next((v.params.get("axis", 0) for v in structure.values if v.metric == "msi"), 0)
    return slice_center_ras(outputs.grid, axis, worst[0])


def slice_center_ras(grid: LabelImage, axis: int, index: int) -> tuple:
    """RAS position (mm) of the centre of slice ``index`` along array axis ``axis`` of the grid."""
    center = (np.asarray(grid.array.shape, dtype=float) - 1) / 2
    center[axis] = index
    lps = grid.index_to_physical(center)
    return tuple(float(x) for x in (LPS_TO_RAS[:3, :3] @ lps))


def _write_slice_tables(scene, result, chart_node=None):
    tables, series = {}, []
    for structure in result.structures:
        rows = slice_rows(structure)
        if not rows:
            continue
        key = f"slices:{structure.structure}"
        table = _output_node(scene, "vtkMRMLTableNode", key, f"SegMetrics MSI per slice {structure.structure}")
        _fill_table(table, [(k, [r[k] for r in rows], "", "") for k in rows[0]])
        tables[structure.structure] = table
        plot = _output_node(scene, "vtkMRMLPlotSeriesNode", f"series:{structure.structure}", f"MSI {structure.structure}")
        plot.SetAndObserveTableNodeID(table.GetID())
        plot.SetXColumnName("slice")
        plot.SetYColumnName("msi")
        plot.SetPlotType(slicer.vtkMRMLPlotSeriesNode.PlotTypeScatter)
        series.append(plot)
    _remove_stale(scene, "vtkMRMLTableNode", "slices:", tables.values())
    _remove_stale(scene, "vtkMRMLPlotSeriesNode", "series:", series)
    if not series:
        _remove_stale(scene, "vtkMRMLPlotChartNode", "chart", [])
        return tables, None
    chart = _output_node(scene, "vtkMRMLPlotChartNode", "chart", "SegMetrics MSI per slice", chart_node)
    chart.RemoveAllPlotSeriesNodeIDs()
    for plot in series:
        chart.AddAndObservePlotSeriesNodeID(plot.GetID())
    chart.SetTitle("MSI per slice")
    chart.SetXAxisTitle("slice index")
    chart.SetYAxisTitle("MSI")
    return tables, chart


def color_node(scene, colormap: str):
    """A colour table node holding a matplotlib colour map (e.g. the diverging ``RdBu_r``), added once."""
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


def show_array(model_node, array_name: str) -> bool:
    """Colour a model by one point array, with a colour legend; False when the array is absent.

    Colour map, range rule and legend title follow :data:`segmetrics.render.ARRAY_STYLES`, as in the
    reports (signed distance: diverging map, range symmetric about 0; MSI: 0..1).
    """
    polydata = model_node.GetPolyData()
    if polydata is None or polydata.GetPointData().GetArray(array_name) is None:
        return False
    colormap, rule, title = ARRAY_STYLES.get(array_name, ("viridis", "data", array_name))
    display = model_node.GetDisplayNode()
    display.SetActiveScalar(array_name, vtk.vtkAssignAttribute.POINT_DATA)
    display.SetAndObserveColorNodeID(color_node(model_node.GetScene(), colormap).GetID())
    display.SetScalarRangeFlag(slicer.vtkMRMLDisplayNode.UseManualScalarRange)
    display.SetScalarRange(*colour_range(polydata, array_name, rule))
    display.SetScalarVisibility(True)
    legend = slicer.vtkSlicerColorLogic.GetColorLegendDisplayNode(model_node) or (
        slicer.vtkSlicerColorLogic.AddDefaultColorLegendDisplayNode(model_node)
    )
    legend.SetTitleText(title)  # two lines: narrower than one long line
    legend.SetSize(*LEGEND_SIZE)
    legend.SetVisibility(True)
    return True


def _to_ras(polydata, grid: LabelImage):
    """Test-surface mesh (index-scaled mm, no origin/direction) in the scene's RAS space."""
    from .mesh import to_physical

    flip = vtk.vtkTransform()
    flip.SetMatrix(LPS_TO_RAS.ravel())
    transformer = vtk.vtkTransformPolyDataFilter()
    transformer.SetInputData(to_physical(polydata, grid))
    transformer.SetTransform(flip)
    transformer.Update()
    return transformer.GetOutput()


def _write_models(scene, result, grid, array_name):
    models = {}
    for structure in result.structures:
        polydata = structure.extras.get("test_surface")
        if polydata is None or polydata.GetNumberOfPoints() == 0:
            continue
        model = _output_node(scene, "vtkMRMLModelNode", f"surface:{structure.structure}", f"SegMetrics {structure.structure} test surface")
        model.SetAndObservePolyData(_to_ras(polydata, grid))
        if model.GetDisplayNode() is None:
            model.CreateDefaultDisplayNodes()
        available = [a for a in (array_name, *SURFACE_ARRAYS) if polydata.GetPointData().GetArray(a) is not None]
        if available:
            show_array(model, available[0])
        models[structure.structure] = model
    _remove_stale(scene, "vtkMRMLModelNode", "surface:", models.values())
    return models


def write_outputs(scene, result: ComparisonResult, grid: LabelImage, table_node=None, chart_node=None, color_array="MSI") -> Outputs:
    """Write a comparison into the scene, reusing the nodes of the previous run.

    Makes the results table, per-slice MSI tables with a plot chart (when MSI ran) and one model of
    the test surface per pair (when a group produced ``extras["test_surface"]``), coloured by
    ``color_array`` (or the first available of :data:`SURFACE_ARRAYS`) with a colour legend.
    """
    table = _output_node(scene, "vtkMRMLTableNode", "results", "SegMetrics results", table_node)
    fill_results_table(table, result)
    slice_tables, chart = _write_slice_tables(scene, result, chart_node)
    models = _write_models(scene, result, grid, color_array)
    return Outputs(result, grid, table, slice_tables, chart, models)


def run(reference_node, test_node, pairs=None, metrics=None, params=None, table_node=None, color_array="MSI", progress=None) -> Outputs:
    """Compare two segmentation nodes and write the outputs (see :func:`compare_segmentations`)."""
    result, grid = compare_segmentations(reference_node, test_node, pairs, metrics, params, progress)
    return write_outputs(reference_node.GetScene(), result, grid, table_node, color_array=color_array)


def render_png(scene, app_logic, path, size=(800, 600)) -> None:
    """Render the scene's models offscreen through Slicer's 3-D displayable managers into a PNG.

    Models keep their display settings (scalar colouring, colour legend); the camera looks from
    anterior and fits all models. Headless Linux needs the Mesa EGL libraries.
    """
    view_logic = slicer.vtkMRMLViewLogic()
    view_logic.SetMRMLApplicationLogic(app_logic)
    view_logic.SetMRMLScene(scene)
    view_node = view_logic.AddViewNode("SegMetricsOffscreen")
    renderer = vtk.vtkRenderer()
    window = vtk.vtkRenderWindow()
    window.SetOffScreenRendering(1)
    window.AddRenderer(renderer)
    window.SetSize(*size)
    interactor = vtk.vtkRenderWindowInteractor()  # some displayable managers need one
    interactor.SetRenderWindow(window)
    factory = slicer.vtkMRMLThreeDViewDisplayableManagerFactory.GetInstance()
    factory.SetMRMLApplicationLogic(app_logic)
    for manager in ("vtkMRMLCameraDisplayableManager", "vtkMRMLViewDisplayableManager",
                    "vtkMRMLModelDisplayableManager", "vtkMRMLColorLegendDisplayableManager"):
        if not factory.IsDisplayableManagerRegistered(manager):
            factory.RegisterDisplayableManager(manager)
    group = slicer.vtkMRMLDisplayableManagerGroup()
    group.Initialize(factory, renderer)  # after the view node exists, so the managers see the scene
    group.SetMRMLDisplayableNode(view_node)
    for index in range(scene.GetNumberOfNodesByClass("vtkMRMLDisplayNode")):
        # the managers only track nodes added after them: announce the existing ones again
        scene.InvokeEvent(slicer.vtkMRMLScene.NodeAddedEvent, scene.GetNthNodeByClass(index, "vtkMRMLDisplayNode"))
    renderer.ResetCamera()
    window.Render()
    grab = vtk.vtkWindowToImageFilter()
    grab.SetInput(window)
    writer = vtk.vtkPNGWriter()
    writer.SetFileName(str(path))
    writer.SetInputConnection(grab.GetOutputPort())
    writer.Write()
    window.Finalize()
    scene.RemoveNode(view_node)
