"""DICOM RT Structure Sets (RTSTRUCT), read with pydicom and rasterised with numpy.

Each ROI (``ROINumber`` becomes the label value, ``ROIName`` the structure name) is a set of
``CLOSED_PLANAR`` polygons in patient mm. ROIs without any contour are kept as empty structures;
ROIs made only of ``POINT``/``OPEN_*`` contours (markers, isocentres) are not volumes and are left
out, as are polygons enclosing no area (:func:`~segmetrics.inputs.polygons.encloses_area`; a note
counts them per ROI). The format's checks: ROI numbers that are not unique positive numbers, a NaN
or infinite coordinate, one beyond :data:`MAX_COORDINATE_MM`, a point count other than the
declared one, repeated names. Polygons are rasterised on a grid (:func:`rasterise`):

- **rule**: a pixel belongs to the ROI when its *centre* lies inside by the **even-odd rule**
  over all polygons of that ROI on that slice (a contour inside another is a hole, "keyhole"
  contours work too); a centre exactly on an edge counts as inside on the edge of lower
  patient coordinate and outside on the higher one (half-open spans, taken in the patient
  order of the slice so that every storage of a grid gets the same voxels:
  :func:`~segmetrics.inputs.polygons.fill_in_patient_order`);
- a polygon is put on the slice nearest to its plane; polygons whose plane is not parallel to
  the slices are refused, polygons outside the grid's slices, or reaching beyond their edges, are
  counted per structure (``ContourImage.outside``, ``ContourImage.beyond_edges``) and refused by
  :func:`segmetrics.inputs.grids.check_contours_kept` unless cropping is allowed;
- the grid is an image series (``--image DIR``), the other input's grid, or
  :func:`contour_grid`: one slice per contour plane and square pixels of
  :data:`DEFAULT_CONTOUR_RESOLUTION_MM`.

The polygons themselves stay available as ``image.contours`` (:class:`ContourImage`) for the
contour-level metrics of :mod:`segmetrics.metrics.contours` and the polygon MSI of :mod:`segmetrics.metrics.msi`.

Frame of reference: a structure set is refused (:func:`check_frames_of_reference`) when its
FrameOfReferenceUID is not that of the image series it is rasterised on, of the other DICOM input
or of the other structure set; an image series the structure set does not reference gives a
warning note (:func:`series_warnings`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...spatial.geometry import LabelImage
from ..masks import pack_masks
from ..polygons import (distinct_planes, encloses_area, fill_in_patient_order, nearest_planes, nearest_slice,
                        plane_axes)
from ..validation import InputPolicy, ReadError, check_contour_resolution, check_unique_names
from .dicom_header import dicom_identity, looks_like_dicom

#: In-plane pixel size (mm) of grids built from contour planes: about the pixel size of the
#: planning CTs contours are drawn on (0.9-1.3 mm), so the half-pixel rasterisation error stays at
#: the precision the contours were drawn with, while a 50 cm body outline keeps a 500 x 500 slice.
DEFAULT_CONTOUR_RESOLUTION_MM = 1.0
#: Largest grid (voxels) :func:`contour_grid` builds: 1 GiB of labels, e.g. 200 planes of 2300 x 2300
#: pixels (0.2 mm over a 46 cm body outline); a finer resolution is refused before any memory is taken.
MAX_CONTOUR_GRID_VOXELS = 2**30
#: Largest contour coordinate accepted (mm): 100 m from the origin of the patient frame. Beyond it
#: the numbers are not patient millimetres (metres x 1000, a damaged file); the polygon metrics,
#: which sample boundaries every fraction of a mm, would otherwise take all memory (a point at 1e7 mm
#: asked for 3 GB).
MAX_COORDINATE_MM = 1e5
#: A contour vertex farther than this (pixels) beyond the outer edge of a slice's edge pixels lies
#: outside the grid (:attr:`ContourImage.beyond_edges`).
EDGE_TOLERANCE = 1e-3


@dataclass
class ContourImage(LabelImage):
    """A rasterised RT Structure Set that keeps its polygons.

    ``contours`` maps label value -> list of ``(N, 3)`` arrays of closed planar polygons (patient
    LPS x, y, z in mm, the last point joined to the first); ``notes`` says what rasterising lost;
    ``outside`` maps label value -> positions (mm along the contour normal) of the contour planes
    that lie outside the grid (named ``grid_name`` in messages), whose slices span ``slice_range_mm``
    along that normal; ``beyond_edges`` maps label value -> how many of its contours on the grid's
    slices reach beyond the slices' edges (area the grid cannot hold); ``source`` names the RTSTRUCT file.
    """

    contours: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    outside: dict = field(default_factory=dict)
    beyond_edges: dict = field(default_factory=dict)
    slice_range_mm: tuple = ()
    source: str = ""
    grid_name: str = ""


@dataclass(frozen=True)
class StructureSet:
    """The closed planar contours of one RTSTRUCT file: ``names`` and ``contours`` by ROI number;
    the ``frames_of_reference`` (UIDs) its ROIs are drawn in and the image ``referenced_series``
    (Series Instance UIDs) it names, both empty when the file does not say; ``dropped``: by ROI
    number, how many of its closed contours enclose no area (:func:`encloses_area`) and were left out;
    ``open_contours``: by ROI number, how many open (OPEN_PLANAR, POINT) contours of an ROI that
    also has closed ones were left out (an ROI of open contours only is a marker, not a structure)."""

    source: str
    names: dict
    contours: dict
    frames_of_reference: frozenset = frozenset()
    referenced_series: frozenset = frozenset()
    dropped: dict = field(default_factory=dict)
    open_contours: dict = field(default_factory=dict)

    def polygons(self):
        """Every polygon of every ROI (``(N, 3)`` arrays, mm)."""
        return [polygon for polygons in self.contours.values() for polygon in polygons]



def read_structure_set(path) -> StructureSet:
    """The ROI names and closed planar polygons (patient mm) of an RTSTRUCT file."""
    import pydicom
    from pydicom.uid import RTStructureSetStorage

    try:
        dataset = pydicom.dcmread(path, force=True)
    except Exception as error:  # pydicom raises many types for a damaged file
        raise ReadError(f"{path}: not a readable DICOM file ({error})") from error
    if str(dataset.get("SOPClassUID", "")) != RTStructureSetStorage:
        raise ReadError(f"{path}: is not a DICOM RT Structure Set")
    try:
        numbers = [_roi_number(roi, "ROINumber") for roi in dataset.get("StructureSetROISequence", [])]
        contour_numbers = [_roi_number(roi, "ReferencedROINumber") for roi in dataset.get("ROIContourSequence", [])]
    except ValueError as error:
        raise ReadError(f"{path}: {error}") from error
    # an ROI without a name (ROIName is type 2: present, maybe empty) is named by its number
    rois = [(number, str(roi.get("ROIName") or number))
            for number, roi in zip(numbers, dataset.get("StructureSetROISequence", []))]
    for number, name in rois:
        if number < 1 or numbers.count(number) > 1:
            problem = "is not a positive number" if number < 1 else "is used by more than one ROI"
            raise ReadError(f"{path}: ROI number {number} ({name!r}) {problem}; segmetrics uses the ROI numbers as "
                            "label values, one per structure")
    names = dict(rois)
    contours = {number: [] for number in names}
    markers, dropped, open_contours = set(), {}, {}
    for number, roi in zip(contour_numbers, dataset.get("ROIContourSequence", [])):
        for contour in roi.get("ContourSequence", []):
            if contour.get("ContourGeometricType", "CLOSED_PLANAR") != "CLOSED_PLANAR":
                markers.add(number)
                open_contours[number] = open_contours.get(number, 0) + 1
                continue
            try:
                points = _contour_points(contour)
            except ValueError as error:
                raise ReadError(f"{path}: ROI {number} has a contour with unreadable ContourData ({error})") from error
            if encloses_area(points):
                contours.setdefault(number, []).append(points)
            else:
                dropped[number] = dropped.get(number, 0) + 1
    for number in markers - {n for n, polygons in contours.items() if polygons}:
        names.pop(number, None)  # a marker (POINT, OPEN_PLANAR), not a volume
        contours.pop(number, None)
        open_contours.pop(number)
    names = {number: names.get(number, str(number)) for number in contours}
    check_unique_names(names, str(path))
    frames = structure_set_frames(dataset)
    referenced = dataset.get("ReferencedFrameOfReferenceSequence", [])
    series = {str(s.SeriesInstanceUID) for frame in referenced for study in frame.get("RTReferencedStudySequence", [])
              for s in study.get("RTReferencedSeriesSequence", []) if s.get("SeriesInstanceUID")}
    return StructureSet(str(path), names, contours, frozenset(frames), frozenset(series), dropped, open_contours)


def structure_set_frames(dataset) -> set:
    """The frames of reference (UIDs) an RTSTRUCT dataset's ROIs are drawn in (``StructureSetROISequence``),
    else those it references (``ReferencedFrameOfReferenceSequence``); empty when it says neither."""
    frames = {str(roi.ReferencedFrameOfReferenceUID) for roi in dataset.get("StructureSetROISequence", [])
              if roi.get("ReferencedFrameOfReferenceUID")}
    referenced = dataset.get("ReferencedFrameOfReferenceSequence", [])
    return frames or {str(frame.FrameOfReferenceUID) for frame in referenced if frame.get("FrameOfReferenceUID")}


def _roi_number(item, keyword: str) -> int:
    """The ROI number ``keyword`` of a sequence item; ValueError naming it when absent or not an integer."""
    try:
        return int(item.get(keyword))
    except (TypeError, ValueError):
        raise ValueError(f"an item of the structure set has no valid {keyword} ({item.get(keyword)!r})") from None


def _contour_points(contour) -> np.ndarray:
    """``(N, 3)`` points (mm) of a contour's ``ContourData``. The raw text is parsed by NumPy:
    pydicom's one ``DSfloat`` object per number took 3 s for a real 10-ROI structure set."""
    element = contour.get_item("ContourData")
    value = element.value if element is not None else None
    if value is None:
        return np.empty((0, 3))
    if isinstance(value, bytes):  # not converted yet: "x1\\y1\\z1\\..." as in the file
        points = np.array(value.split(b"\\") if value.strip() else [], dtype=float).reshape(-1, 3)
    else:
        points = np.asarray(value, dtype=float).reshape(-1, 3)
    if not np.all(np.isfinite(points)):
        raise ValueError("a coordinate is NaN or infinite")
    declared = contour.get("NumberOfContourPoints")
    if declared is not None and int(declared) != len(points):
        raise ValueError(f"NumberOfContourPoints is {int(declared)} but ContourData holds {len(points)} points: "
                         "cut short or damaged?")
    if len(points) and np.abs(points).max() > MAX_COORDINATE_MM:
        raise ValueError(f"a coordinate is {np.abs(points).max():g} mm from the origin, beyond {MAX_COORDINATE_MM:g} mm "
                         "(100 m): not patient millimetres?")
    return points


def read(path: Path, policy: InputPolicy | None = None, threshold=None) -> ContourImage:
    """An RTSTRUCT rasterised on its own :func:`contour_grid` (see :func:`rasterise` for other grids)."""
    structures = read_structure_set(path)
    return rasterise(structures, contour_grid([structures]))



def contour_grid(structure_sets, resolution_mm: float = DEFAULT_CONTOUR_RESOLUTION_MM) -> LabelImage:
    """An empty grid holding every polygon of ``structure_sets``: one slice per contour plane and
    square ``resolution_mm`` pixels on a lattice of multiples of ``resolution_mm``, one pixel of
    margin. The slice spacing is the smallest gap between planes (``resolution_mm`` for a single
    plane); planes that do not fall on that lattice are refused (give the image series instead)."""
    check_contour_resolution(resolution_mm)
    polygons = [p for s in structure_sets for p in s.polygons()]
    if not polygons:
        return LabelImage(np.zeros((1, 1, 1), np.uint8), (resolution_mm,) * 3)
    axes = plane_axes(polygons)
    local = np.concatenate(polygons) @ axes.T  # (u, v, n) coordinates, mm
    planes = distinct_planes(local[:, 2])
    step = float(np.min(np.diff(planes))) if len(planes) > 1 else resolution_mm
    offsets = (planes - planes[0]) / step
    if np.any(np.abs(offsets - np.round(offsets)) > 0.05):
        sources = ", ".join(s.source for s in structure_sets)
        raise ReadError(f"{sources}: contour planes are irregularly spaced (smallest gap {step:g} mm); give the "
                        "image series they were drawn on (CLI: --image DIR)")
    low = np.floor(local[:, :2].min(axis=0) / resolution_mm - 1) * resolution_mm
    high = local[:, :2].max(axis=0) + resolution_mm
    columns, rows = np.ceil((high - low) / resolution_mm).astype(int) + 1
    origin = low[0] * axes[0] + low[1] * axes[1] + planes[0] * axes[2]
    shape = (int(round(offsets[-1])) + 1, rows, columns)
    if np.prod(shape, dtype=float) > MAX_CONTOUR_GRID_VOXELS:
        sources = ", ".join(s.source for s in structure_sets)
        raise ReadError(f"{sources}: a {resolution_mm:g} mm contour grid would hold {' x '.join(map(str, shape))} "
                        f"voxels (z, y, x); give a coarser --contour-resolution or the image series (--image DIR)")
    return LabelImage(np.zeros(shape, np.uint8), (step, resolution_mm, resolution_mm), origin, axes.T.ravel())



def rasterise(structures: StructureSet, grid: LabelImage) -> ContourImage:
    """Fill every ROI's polygons on ``grid`` (3-D): pixel centres inside, even-odd per slice.

    A polygon goes to the slice nearest to its plane (:func:`nearest_slice`), along whichever grid
    axis is normal to the contour planes (a grid stored transposed gives the same voxels); polygons
    outside the grid are listed in ``outside`` and counted in ``notes``; a polygon not parallel to the slices raises
    :class:`ReadError`. The even-odd rule applies within a plane: when several contour planes fall
    on one slice (slices thicker than the contour spacing), the slice holds the union of their
    fills (and a note says so).
    """
    if grid.ndim != 3:
        raise ReadError(f"{structures.source}: contours need a 3-D grid, got a {grid.ndim}-D one")
    shape = grid.array.shape
    direction = np.asarray(grid.direction).reshape(3, 3)
    scale = np.asarray(grid.spacing[::-1])  # ITK (i, j, k) order
    every_polygon = structures.polygons()
    # the ITK axis normal to the contour planes: k for a grid stored in slices of the planes, another
    # one for a grid stored transposed (e.g. sagittal slices of axial contours): the same voxels
    contour_normal = plane_axes(every_polygon)[2] if every_polygon else direction[:, 2]
    along_normal = direction.T @ contour_normal
    normal_axis = int(np.argmax(np.abs(along_normal)))
    rows, columns = sorted(set(range(3)) - {normal_axis}, reverse=True)  # ITK axes of a slice's rows, columns
    patient_axis = np.argmax(np.abs(direction), axis=0)  # of each ITK axis
    reversed_axis = direction[patient_axis, range(3)] < 0
    storage = ((bool(reversed_axis[rows]), bool(reversed_axis[columns])), bool(patient_axis[rows] < patient_axis[columns]))
    masks, outside, shared, beyond_edges = {}, {}, {}, {}
    for label, polygons in structures.contours.items():
        by_slice: dict = {}  # slice -> [(position along the slice normal (mm), ring)]
        for points in polygons:
            index = ((points - grid.origin) @ direction) / scale  # continuous ITK indices (i, j, k)
            if np.ptp(index[:, normal_axis]) > 0.1:
                raise ReadError(f"{structures.source}: a contour of {structures.names[label]!r} is not parallel "
                                "to the image slices (oblique image or non-planar contour)")
            plane = nearest_slice(index[:, normal_axis].mean(), along_normal[normal_axis] > 0)
            if 0 <= plane < shape[2 - normal_axis]:
                ring = index[:, [rows, columns]]
                by_slice.setdefault(plane, []).append((index[:, normal_axis].mean() * scale[normal_axis], ring))
                edges = np.array([shape[2 - rows], shape[2 - columns]]) - 0.5 + EDGE_TOLERANCE
                if np.any(ring < -0.5 - EDGE_TOLERANCE) or np.any(ring > edges):
                    beyond_edges[label] = beyond_edges.get(label, 0) + 1
            else:
                outside.setdefault(label, []).append(float(np.median(points @ contour_normal)))
        in_plane = tuple(n for a, n in enumerate(shape) if a != 2 - normal_axis)
        filled = {plane: _fill_planes(entries, in_plane, *storage) for plane, entries in by_slice.items()}
        masks[label] = {plane: mask for plane, (mask, _count) in filled.items()}
        if any(count > 1 for _mask, count in filled.values()):
            shared[label] = sum(count > 1 for _mask, count in filled.values())
    image = pack_masks(masks, structures.names, grid.spacing, grid.origin, grid.direction,
                         ContourImage, shape, slice_axis=2 - normal_axis)
    image.contours = {label: list(polygons) for label, polygons in structures.contours.items()}
    image.outside, image.beyond_edges, image.source = outside, beyond_edges, structures.source
    first_slices = [np.asarray(grid.origin) + direction[:, normal_axis] * scale[normal_axis] * index
                    for index in (0, shape[2 - normal_axis] - 1)]
    image.slice_range_mm = tuple(sorted(float(position @ contour_normal) for position in first_slices))
    image.notes = [f"{structures.source}: {len(planes)} contour(s) of {structures.names[label]!r} lie outside the grid "
                   "and were not rasterised" for label, planes in outside.items()]
    image.notes += [f"{structures.source}: {count} contour(s) of {structures.names[label]!r} reach beyond the edges "
                    "of the grid's slices and were cropped" for label, count in beyond_edges.items()]
    image.notes += [f"{structures.source}: {count} slice(s) of the grid hold several contour planes of "
                    f"{structures.names[label]!r} (slices thicker than the contour spacing): each holds their union"
                    for label, count in shared.items()]
    image.notes += [f"{structures.source}: {count} contour(s) of {structures.names.get(label, str(label))!r} "
                    "enclose no area (fewer than 3 points, or zero area) and were left out"
                    for label, count in structures.dropped.items()]
    image.notes += [f"{structures.source}: {count} open contour(s) (OPEN_PLANAR or POINT) of "
                    f"{structures.names.get(label, str(label))!r} enclose no area and were left out"
                    for label, count in structures.open_contours.items()]
    return image



def _fill_planes(entries, shape, flips=(False, False), swap=False) -> tuple:
    """``(mask, number of planes)`` of one slice: the union over the contour planes of ``entries``
    (``(position mm, ring)``; planes closer than :data:`PLANE_TOLERANCE_MM` are one) of each plane's
    even-odd fill (:func:`fill_in_patient_order` with ``flips`` and ``swap``)."""
    positions = np.array([position for position, _ring in entries])
    planes = distinct_planes(positions)
    nearest = nearest_planes(planes, positions)
    fills = [fill_in_patient_order([ring for (_position, ring), n in zip(entries, nearest) if n == index], shape,
                                   flips, swap) for index in range(len(planes))]
    return np.logical_or.reduce(fills), len(planes)



def check_frames_of_reference(structure_sets, others=(), image=None, image_frame: str | None = None) -> None:
    """Refuse, with one line, structure sets whose frame of reference (FrameOfReferenceUID) is not
    that of the image ``image`` (``image_frame``, from :func:`read_image_series`), of the other
    DICOM inputs ``others`` (paths; inputs that are not DICOM carry no frame of reference and are
    not checked) or of each other: their patient coordinates do not belong together."""
    same_scan = "compare {} drawn on the same scan, or register them first"
    known = [(str(image), {image_frame}, "give the image series the contours were drawn on (CLI: --image DIR)")
             ] if image is not None and image_frame else []
    known += [(str(other), {frame}, same_scan.format("inputs")) for other in others
              if isinstance(other, (str, Path)) and Path(other).is_file() and looks_like_dicom(Path(other))
              and (frame := dicom_identity(other)[0])]
    known += [(s.source, s.frames_of_reference, same_scan.format("structure sets"))
              for s in structure_sets if s.frames_of_reference]
    for structures in structure_sets:
        for source, frames, advice in known:
            if structures.frames_of_reference and not structures.frames_of_reference & frames:
                raise ReadError(f"{structures.source}: contours are in frame of reference "
                                f"{', '.join(sorted(structures.frames_of_reference))} but {source} is in "
                                f"{', '.join(sorted(frames))}: not the same patient coordinates ({advice})")


def series_warnings(structures: StructureSet, image, series: str | None) -> list:
    """A warning (note) when the image series ``image`` (Series Instance UID ``series``) is not one
    the structure set references: its contours are then placed on that image by position only."""
    if not series or not structures.referenced_series or series in structures.referenced_series:
        return []
    return [f"warning: {structures.source} references image series {', '.join(sorted(structures.referenced_series))}, "
            f"not {image} (series {series}); its contours were placed on that image by their positions"]
