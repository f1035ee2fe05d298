"""DICOM RT Structure Sets (RTSTRUCT) and DICOM Segmentations (SEG) as label images.

Both readers return a :class:`~segmetrics.spatial.geometry.LabelImage` (array ``(z, y, x)``, spacing in
mm in that order, ITK origin and direction in patient LPS mm); structures that overlap another
one (a body outline around the organs, overlapping SEG segments) are kept in ``segment_masks``.

DICOM SEG (read with highdicom)
    The SEG's own frame positions give the grid (highdicom's ``Segmentation.get_volume``: plane
    positions and orientation, pixel spacing, slice spacing from the positions). Segment numbers
    become label values and segment labels become structure names. FRACTIONAL segments are
    binarised at ``fraction >= threshold`` (default 0.5).

RT Structure Set (read with pydicom)
    Each ROI (``ROINumber`` becomes the label value, ``ROIName`` the structure name) is a set of
    ``CLOSED_PLANAR`` polygons in patient mm. ROIs without any contour are kept as empty
    structures; ROIs made only of ``POINT``/``OPEN_*`` contours (markers, isocentres) are not
    volumes and are left out, as are polygons enclosing no area (:func:`encloses_area`; a note
    counts them per ROI); a NaN or infinite coordinate is refused. Polygons are rasterised on a
    grid (:func:`rasterise`):

    - **rule**: a pixel belongs to the ROI when its *centre* lies inside by the **even-odd rule**
      over all polygons of that ROI on that slice (a contour inside another is a hole, "keyhole"
      contours work too); a centre exactly on an edge counts as inside on the edge of lower
      patient coordinate and outside on the higher one (half-open spans, taken in the patient
      order of the slice so that every storage of a grid gets the same voxels:
      :func:`fill_in_patient_order`), the rule of ``skimage.draw.polygon`` up to such ties
      (:func:`fill_even_odd`, tested against it);
    - a polygon is put on the slice nearest to its plane; polygons whose plane is not parallel to
      the slices, or lies outside the grid, are refused / reported in ``notes``;
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

import math
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..spatial.geometry import GEOMETRY_TOLERANCE, LabelImage, check_spacing
from .validation import (InputPolicy, ReadError, check_contour_resolution, check_file, check_threshold_separates,
                         check_unique_names, dicom_class, header_floats, looks_like_dicom)

#: In-plane pixel size (mm) of grids built from contour planes: about the pixel size of the
#: planning CTs contours are drawn on (0.9-1.3 mm), so the half-pixel rasterisation error stays at
#: the precision the contours were drawn with, while a 50 cm body outline keeps a 500 x 500 slice.
DEFAULT_CONTOUR_RESOLUTION_MM = 1.0
#: Contour planes closer than this (mm) are one plane.
PLANE_TOLERANCE_MM = 0.01
#: Largest grid (voxels) :func:`contour_grid` builds: 1 GiB of labels, e.g. 200 planes of 2300 x 2300
#: pixels (0.2 mm over a 46 cm body outline); a finer resolution is refused before any memory is taken.
MAX_CONTOUR_GRID_VOXELS = 2**30
#: Largest contour coordinate accepted (mm): 100 m from the origin of the patient frame. Beyond it
#: the numbers are not patient millimetres (metres x 1000, a damaged file); the polygon metrics,
#: which sample boundaries every fraction of a mm, would otherwise take all memory (a point at 1e7 mm
#: asked for 3 GB).
MAX_COORDINATE_MM = 1e5
#: Largest deviation of a DICOM series' slice positions from one regular grid, in slice spacings.
SLICE_POSITION_TOLERANCE = 0.05


@dataclass
class ContourImage(LabelImage):
    """A rasterised RT Structure Set that keeps its polygons.

    ``contours`` maps label value -> list of ``(N, 3)`` arrays of closed planar polygons (patient
    LPS x, y, z in mm, the last point joined to the first); ``notes`` says what rasterising lost.
    """

    contours: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)


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


def dicom_kind(path) -> str | None:
    """``"rtstruct"``, ``"seg"`` or None (not DICOM, or another DICOM object), from the SOP class.

    Only files named ``.dcm``/``.dicom`` or starting with the DICOM preamble are opened."""
    from pydicom.uid import RTStructureSetStorage, SegmentationStorage

    path = Path(path)
    try:
        if not looks_like_dicom(path):
            return None
        sop_class, _modality = dicom_class(path)
    except Exception:  # unreadable: segmetrics.inputs.validation reports it in one line
        return None
    return {RTStructureSetStorage: "rtstruct", SegmentationStorage: "seg"}.get(sop_class)


# ------------------------------------------------------------------------------- DICOM SEG
def read_dicom_seg(path, threshold: float | None = None) -> LabelImage:
    """A DICOM Segmentation on its own grid; FRACTIONAL segments binarised at ``threshold``
    (fraction in [0, 1], default 0.5). Segment numbers are the labels, segment labels the names."""
    import highdicom

    threshold = 0.5 if threshold is None else threshold
    try:
        segmentation = highdicom.seg.segread(str(path))
        _check_seg_frames(path, segmentation)
        volume = segmentation.get_volume()
    except ReadError:
        raise
    except Exception as error:  # highdicom raises many types for one cause (e.g. irregular frames)
        raise ReadError(f"{path}: cannot be read as a DICOM SEG volume ({error})") from error
    numbers = [int(n) for n in volume.get_channel_values(volume.channel_descriptors[0])]
    names = {n: str(segmentation.get_segment_description(n).segment_label) for n in numbers}
    fractional = "FRACTIONAL" in str(segmentation.segmentation_type)
    channels = np.moveaxis(np.asarray(volume.array), -1, 0)
    masks = {n: (channel >= threshold) if fractional else channel > 0 for n, channel in zip(numbers, channels)}
    if fractional:
        for n, channel in zip(numbers, channels):
            check_threshold_separates(masks[n], channel, threshold, f"{path} (segment {names[n]!r})")
    # highdicom's affine maps (slice, row, column) indices to LPS; ITK's (i, j, k) is the reverse
    axes = np.asarray(volume.affine, dtype=float)[:3, :3][:, ::-1]
    spacing_ijk = np.linalg.norm(axes, axis=0)
    return _label_image(masks, names, str(path), spacing_ijk[::-1], volume.affine[:3, 3], (axes / spacing_ijk).ravel())


def _check_seg_frames(path, segmentation) -> None:
    """Refuse a DICOM SEG whose frames do not add up: a frame count other than its per-frame items,
    frames of a segment the file does not describe, or (uncompressed) pixel data of another length
    than rows x columns x frames declare (highdicom reads such data as other frames or rows)."""
    frames = int(segmentation.get("NumberOfFrames", 1))
    items = segmentation.get("PerFrameFunctionalGroupsSequence", [])
    if len(items) != frames:
        raise ReadError(f"{path}: the DICOM SEG declares {frames} frame(s) but describes {len(items)}; a damaged file?")
    described = {int(item.SegmentNumber) for item in segmentation.get("SegmentSequence", [])}
    referenced = {int(ref.ReferencedSegmentNumber) for item in items
                  for ref in item.get("SegmentIdentificationSequence", [])}
    if referenced - described:
        raise ReadError(f"{path}: frames of segment(s) {', '.join(map(str, sorted(referenced - described)))} that the "
                        "DICOM SEG does not describe; a damaged file?")
    if "PixelData" not in segmentation or segmentation.file_meta.TransferSyntaxUID.is_compressed:
        return
    bits = int(segmentation.Rows) * int(segmentation.Columns) * frames * int(segmentation.BitsAllocated)
    expected, stored = -(-bits // 8), len(segmentation.PixelData)
    if stored not in (expected, expected + 1):  # + 1: padding to an even length
        raise ReadError(f"{path}: holds {stored} bytes of pixel data where its {frames} frame(s) of "
                        f"{segmentation.Rows} x {segmentation.Columns} declare {expected}; a damaged file?")


# -------------------------------------------------------------------------- RT Structure Set
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


def encloses_area(points) -> bool:
    """Whether a closed planar polygon (``(N, 3)`` mm) encloses an area by the even-odd rule
    (:func:`even_odd_region` in its plane, more than 1e-6 mm²). Fewer than 3 points, a polygon
    folded onto a line (within 1e-6 mm) or one going out and back along its own edges encloses
    nothing: the reader leaves it out and counts it (``StructureSet.dropped``)."""
    if len(points) < 3 or np.linalg.matrix_rank(points - points.mean(axis=0), tol=1e-6) < 2:
        return False
    return even_odd_region([points @ plane_axes([points])[:2].T]).area > 1e-6


def read_rtstruct(path) -> ContourImage:
    """An RTSTRUCT rasterised on its own :func:`contour_grid` (see :func:`rasterise` for other grids)."""
    structures = read_structure_set(path)
    return rasterise(structures, contour_grid([structures]))


def plane_axes(polygons) -> np.ndarray:
    """Rows ``u, v, n``: in-plane axes and the common normal of planar polygons (patient frame).

    ``u`` and ``v`` are the two patient axes least aligned with ``n`` made orthogonal to it, so
    axial contours give the identity (x, y, z).
    """
    largest = max(polygons, key=len)
    centred = largest - largest.mean(axis=0)
    normal = np.linalg.svd(centred, full_matrices=False)[2][2]
    normal = normal * np.sign(normal[np.argmax(np.abs(normal))])
    first, _ = sorted(set(range(3)) - {int(np.argmax(np.abs(normal)))})
    u = np.eye(3)[first] - normal[first] * normal
    u /= np.linalg.norm(u)
    return np.array([u, np.cross(normal, u), normal])


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
                        f"voxels; give a coarser --contour-resolution or the image series (--image DIR)")
    return LabelImage(np.zeros(shape, np.uint8), (step, resolution_mm, resolution_mm), origin, axes.T.ravel())


def distinct_planes(values) -> np.ndarray:
    """Sorted plane positions (mm) with neighbours closer than :data:`PLANE_TOLERANCE_MM` merged."""
    values = np.sort(values)
    return values[np.concatenate([[True], np.diff(values) > PLANE_TOLERANCE_MM])]


def nearest_planes(planes, positions) -> np.ndarray:
    """Index into ``planes`` (:func:`distinct_planes`, mm) of the plane nearest to each of ``positions`` (mm)."""
    return np.argmin(np.abs(np.subtract.outer(np.asarray(positions, float), planes)), axis=1)


def rings_by_plane(reference, test) -> tuple:
    """``(axes, planes)`` of two sides' planar polygons (patient mm): ``axes`` the rows ``u, v, n``
    of :func:`plane_axes`, ``planes`` ``{position along n (mm): (reference rings, test rings)}`` in
    increasing order, each side a list (maybe empty) of ``(N, 2)`` rings in in-plane ``(u, v)`` mm,
    closed implicitly (polygons closer than :data:`PLANE_TOLERANCE_MM` share a plane). A polygon's
    position is the median of its points' (a mean adds float noise: -122.44 became -122.44000000000004),
    so an axial plane's position is its z coordinate as written in the file."""
    polygons = list(reference) + list(test)
    if not polygons:
        return np.eye(3), {}
    axes = plane_axes(polygons)
    offsets = np.array([float(np.median(p @ axes[2])) for p in polygons])  # one of the points': exact
    planes = distinct_planes(offsets)
    rings: dict = {}
    for index, (polygon, nearest) in enumerate(zip(polygons, nearest_planes(planes, offsets))):
        rings.setdefault(float(planes[nearest]), ([], []))[index >= len(reference)].append(polygon @ axes[:2].T)
    return axes, dict(sorted(rings.items()))


def nearest_slice(index: float, increasing: bool) -> int:
    """The slice nearest to a contour plane at continuous slice ``index``; a plane halfway between
    two slices (within 1e-6 slice) goes to the one lower along the contour normal, whichever way
    the grid is stored (``increasing``: the slice index grows along the normal). Rounding half to
    even put such a plane on the other physical slice when the grid was stored flipped."""
    return int(math.ceil(index - 0.5 - 1e-6)) if increasing else int(math.floor(index + 0.5 + 1e-6))


def rasterise(structures: StructureSet, grid: LabelImage) -> ContourImage:
    """Fill every ROI's polygons on ``grid`` (3-D): pixel centres inside, even-odd per slice.

    A polygon goes to the slice nearest to its plane (:func:`nearest_slice`), along whichever grid
    axis is normal to the contour planes (a grid stored transposed gives the same voxels); polygons
    outside the grid are counted in ``notes``; a polygon not parallel to the slices raises
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
    along_normal = direction.T @ plane_axes(every_polygon)[2] if every_polygon else np.eye(3)[2]
    normal_axis = int(np.argmax(np.abs(along_normal)))
    rows, columns = sorted(set(range(3)) - {normal_axis}, reverse=True)  # ITK axes of a slice's rows, columns
    patient_axis = np.argmax(np.abs(direction), axis=0)  # of each ITK axis
    reversed_axis = direction[patient_axis, range(3)] < 0
    storage = ((bool(reversed_axis[rows]), bool(reversed_axis[columns])), bool(patient_axis[rows] < patient_axis[columns]))
    masks, outside, shared = {}, {}, {}
    for label, polygons in structures.contours.items():
        by_slice: dict = {}  # slice -> [(position along the slice normal (mm), ring)]
        for points in polygons:
            index = ((points - grid.origin) @ direction) / scale  # continuous ITK indices (i, j, k)
            if np.ptp(index[:, normal_axis]) > 0.1:
                raise ReadError(f"{structures.source}: a contour of {structures.names[label]!r} is not parallel "
                                "to the image slices (oblique image or non-planar contour)")
            plane = nearest_slice(index[:, normal_axis].mean(), along_normal[normal_axis] > 0)
            if 0 <= plane < shape[2 - normal_axis]:
                by_slice.setdefault(plane, []).append((index[:, normal_axis].mean() * scale[normal_axis],
                                                       index[:, [rows, columns]]))
            else:
                outside[label] = outside.get(label, 0) + 1
        in_plane = tuple(n for a, n in enumerate(shape) if a != 2 - normal_axis)
        filled = {plane: _fill_planes(entries, in_plane, *storage) for plane, entries in by_slice.items()}
        masks[label] = {plane: mask for plane, (mask, _count) in filled.items()}
        if any(count > 1 for _mask, count in filled.values()):
            shared[label] = sum(count > 1 for _mask, count in filled.values())
    image = _label_image(masks, structures.names, structures.source, grid.spacing, grid.origin, grid.direction,
                         ContourImage, shape, slice_axis=2 - normal_axis)
    image.contours = {label: list(polygons) for label, polygons in structures.contours.items()}
    image.notes = [f"{structures.source}: {count} contour(s) of {structures.names[label]!r} lie outside the grid "
                   "and were not rasterised" for label, count in outside.items()]
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


def fill_in_patient_order(rings, shape, flips=(False, False), swap=False) -> np.ndarray:
    """:func:`fill_even_odd` of ``rings`` ((row, column) pixel coordinates of a slice of ``shape``)
    done in the patient order of the slice, so that a pixel centre exactly on an edge is inside or
    outside whatever the storage: ``flips`` says which of the stored (row, column) axes run against
    their patient axis, ``swap`` that the stored rows follow the earlier patient axis (a transposed
    grid). A coordinate within 1e-6 pixel of a whole number (a row or column of pixel centres) is
    taken as on it (float noise of the origin). The mask is returned in the stored order."""
    size = np.asarray(shape, dtype=float) - 1
    moved = []
    for ring in rings:
        ring = np.where(flips, size - ring, ring)
        ring = ring[:, ::-1] if swap else ring
        nearest = np.round(ring)
        moved.append(np.where(np.abs(ring - nearest) < 1e-6, nearest, ring))
    mask = fill_even_odd(moved, tuple(shape[::-1]) if swap else tuple(shape))
    return np.flip(mask.T if swap else mask, [axis for axis in range(2) if flips[axis]])


def fill_even_odd(rings, shape) -> np.ndarray:
    """Boolean ``(rows, columns)`` mask of the pixels whose centre is inside ``rings`` by the
    even-odd rule; each ring is an ``(N, 2)`` array of (row, column) pixel coordinates, closed
    implicitly. Scanline fill: time grows with pixels plus edge crossings (``skimage.draw.polygon``
    tests every pixel of the bounding box against every vertex, 17 s for one real structure set).
    """
    starts = np.concatenate(rings)
    ends = np.concatenate([np.roll(ring, -1, axis=0) for ring in rings])
    low, high = np.minimum(starts[:, 0], ends[:, 0]), np.maximum(starts[:, 0], ends[:, 0])
    first, stop = np.ceil(low).astype(int), np.ceil(high).astype(int)  # rows r with low <= r < high
    first, stop = np.clip(first, 0, shape[0]), np.clip(stop, 0, shape[0])
    counts = np.maximum(stop - first, 0)
    edge = np.repeat(np.arange(len(starts)), counts)
    rows = np.repeat(first, counts) + np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    (r0, c0), (r1, c1) = starts[edge].T, ends[edge].T
    columns = c0 + (rows - r0) * (c1 - c0) / (r1 - r0)  # where each edge crosses each row centre
    order = np.lexsort((columns, rows))
    rows, columns = rows[order].reshape(-1, 2), np.ceil(columns[order]).astype(int).reshape(-1, 2)
    columns = np.clip(columns, 0, shape[1])  # pairs of crossings: [enter, leave) spans of columns
    steps = np.zeros((shape[0], shape[1] + 1), dtype=np.int32)
    np.add.at(steps, (rows[:, 0], columns[:, 0]), 1)
    np.add.at(steps, (rows[:, 0], columns[:, 1]), -1)
    return np.cumsum(steps, axis=1)[:, :-1] > 0


def even_odd_region(rings):
    """The region (shapely geometry, in-plane mm) inside closed ``rings`` (``(N, 2)`` arrays, closed
    implicitly) by the even-odd rule of :func:`fill_even_odd`, exactly: the faces of the arrangement
    of all ring edges (noded by shapely) whose interior is crossed an odd number of times. A ring
    inside another is a hole, a ring given twice (or traced twice) cancels, an out-and-back polygon
    encloses nothing, a self-crossing ring keeps each of its lobes. Rings that are valid polygons
    (no crossing, no repeated edge: the usual case) are combined by symmetric difference, the same
    region found faster."""
    import shapely
    from skimage.measure import points_in_poly

    rings = [np.asarray(ring, dtype=float) for ring in rings if len(ring) >= 3]
    polygons = [shapely.Polygon(ring) for ring in rings]
    if all(polygon.is_valid for polygon in polygons):
        region = shapely.Polygon()
        for polygon in polygons:
            region = region.symmetric_difference(polygon)
        return region
    edges = shapely.union_all([shapely.LineString(np.vstack([ring, ring[:1]])) for ring in rings])
    faces = shapely.get_parts(shapely.polygonize(shapely.get_parts(edges)))
    faces = faces[shapely.area(faces) > 0]
    if not len(faces):
        return shapely.Polygon()
    probes = shapely.get_coordinates(shapely.point_on_surface(faces))  # inside a face: on no edge
    odd = np.logical_xor.reduce([points_in_poly(probes, ring) for ring in rings])
    return shapely.union_all(faces[odd])


def read_image_grid(path, input_policy: InputPolicy | None = None) -> LabelImage:
    """The grid of an image: a DICOM series folder (sorted by position with SimpleITK's
    ``ImageSeriesReader``; the folder must hold one image series) or any image file (checked by
    :func:`segmetrics.inputs.validation.check_file` with ``input_policy``)."""
    return read_image_series(path, input_policy)[0]


def read_image_series(path, input_policy: InputPolicy | None = None) -> tuple:
    """``(grid, (FrameOfReferenceUID, SeriesInstanceUID))`` of an image (see :func:`read_image_grid`);
    the UIDs are None for a file that is not DICOM."""
    import SimpleITK as sitk

    path = Path(path)
    identity, voxel_check = (None, None), None
    if path.is_dir():
        with _itk_warnings_off():  # "No Series were found": said below in one line
            every = [sitk.ImageSeriesReader.GetGDCMSeriesFileNames(str(path), uid)
                     for uid in sitk.ImageSeriesReader.GetGDCMSeriesIDs(str(path))]
        series = [names for names in every if names and dicom_kind(names[0]) is None]
        if len(series) != 1:
            raise ReadError(f"{path}: holds {len(series)} DICOM image series; give a folder with exactly one")
        check_no_file_left_out(path, {Path(name).resolve() for names in every for name in names})
        reader = sitk.ImageSeriesReader()
        reader.SetFileNames(series[0])
        reader.MetaDataDictionaryArrayUpdateOn()  # each slice's header, for check_even_slices

        def reader_call():
            with _itk_warnings_off():  # ITK's "Non uniform sampling or missing slices": refused in one line
                image = reader.Execute()
            check_slice_headers(path, reader)
            check_even_slices(path, reader)
            return image

        identity = dicom_identity(series[0][0])
    elif path.is_file():
        # header spacing ITK would replace by 1 mm, DICOM class; a gzip stream's integrity is checked
        # on the voxels as ITK decompresses them (voxel_check), so that the file is decompressed once
        voxel_check = check_file(path, input_policy or InputPolicy(), defer_data_check=True)
        reader_call = lambda: sitk.ReadImage(str(path))  # noqa: E731
        identity = dicom_identity(path) if looks_like_dicom(path) else identity
    else:
        raise ReadError(f"{path}: no such image folder or file")
    try:
        image = reader_call()
    except RuntimeError as error:
        if voxel_check is not None:
            voxel_check.check_stream()  # a damaged gzip stream is named as such
        raise ReadError(f"{path}: cannot be read as an image ({str(error).strip().splitlines()[-1]})") from error
    if voxel_check is not None:
        voxel_check.verify(sitk.GetArrayViewFromImage(image))
    try:
        grid = LabelImage.from_sitk(image)
    except ValueError as error:
        raise ReadError(f"{path}: {error}") from error
    return grid.with_array(np.zeros(grid.array.shape, np.uint8)), identity


@contextmanager
def _itk_warnings_off():
    """SimpleITK's warnings (several lines on standard error) off within the block."""
    import SimpleITK as sitk

    shown = sitk.ProcessObject.GetGlobalWarningDisplay()
    sitk.ProcessObject.SetGlobalWarningDisplay(False)
    try:
        yield
    finally:
        sitk.ProcessObject.SetGlobalWarningDisplay(shown)


def check_no_file_left_out(folder: Path, in_series: set) -> None:
    """Refuse a series folder holding a DICOM image file (by name or preamble; other objects such
    as structure sets may lie beside the series) that no series took up: GDCM skips a file it
    cannot parse (e.g. cut short), and the grid then lacks its slice."""
    for candidate in sorted(folder.iterdir()):
        if not candidate.is_file() or candidate.resolve() in in_series or not looks_like_dicom(candidate):
            continue
        try:
            sop_class, _ = dicom_class(candidate)
            image = sop_class.name.endswith("Image Storage")
        except ReadError:
            image = True  # not even its header can be read
        if image:
            raise ReadError(f"{candidate}: a DICOM image of the series folder {folder} that cannot be read (cut short "
                            "or damaged?); its slice would be missing from the grid")


def check_slice_headers(path, reader) -> None:
    """Refuse a DICOM series (``reader`` as in :func:`check_even_slices`) whose slices disagree on
    their pixel spacing or orientation by more than :data:`~segmetrics.spatial.geometry.GEOMETRY_TOLERANCE`
    (relative and absolute: values written with other rounding agree), or whose pixel spacing is not
    a valid voxel size: ITK takes the first slice's values for all, and replaces an invalid spacing
    by 1 mm."""
    tags = {"pixel spacing": "0028|0030", "image orientation": "0020|0037"}
    for what, tag in tags.items():
        values = [reader.GetMetaData(i, tag).strip() if reader.HasMetaDataKey(i, tag) else None
                  for i in range(len(reader.GetFileNames()))]
        parsed = [np.array(header_floats(value.split("\\"))) for value in values if value is not None]
        if parsed and (len(parsed) != len(values) or any(len(p) != len(parsed[0]) or not np.allclose(
                p, parsed[0], rtol=GEOMETRY_TOLERANCE, atol=GEOMETRY_TOLERANCE) for p in parsed)):
            raise ReadError(f"{path}: the slices of the DICOM series differ in {what} ({values[0]} vs "
                            f"{next(v for v, p in zip(values, parsed) if v != values[0])}); give one regular series")
        if what == "pixel spacing" and parsed:
            try:
                check_spacing(parsed[0], "DICOM PixelSpacing")
            except ValueError as error:
                raise ReadError(f"{path}: {error}") from None


def check_even_slices(path, reader) -> None:
    """Refuse the DICOM series of folder ``path`` read by ``reader`` (a SimpleITK
    ``ImageSeriesReader`` that kept each slice's header, files in slice order) when its slices are
    not evenly spaced along their normal: ITK builds one regular grid from it (with a warning
    only), so a missing slice or a change of slice spacing would put every later slice, and the
    contours on it, at a wrong place. Positions (mm) may deviate from the regular grid by
    :data:`SLICE_POSITION_TOLERANCE` of a slice spacing (or 0.01 mm)."""
    count, tags = len(reader.GetFileNames()), ("0020|0032", "0020|0037")  # ImagePosition/OrientationPatient
    if count < 3 or not all(reader.HasMetaDataKey(i, tag) for i in range(count) for tag in tags):
        return

    def numbers(i, tag):
        return np.array([float(value) for value in reader.GetMetaData(i, tag).split("\\")])

    row, column = numbers(0, tags[1]).reshape(2, 3)
    positions = np.array([numbers(i, tags[0]) @ np.cross(row, column) for i in range(count)])
    regular = np.linspace(positions[0], positions[-1], len(positions))
    spacing = abs(positions[-1] - positions[0]) / (len(positions) - 1)
    if np.max(np.abs(positions - regular)) > max(SLICE_POSITION_TOLERANCE * spacing, 0.01):
        gaps = np.abs(np.diff(positions))
        raise ReadError(f"{path}: the slices of the DICOM series are not evenly spaced (gaps from {gaps.min():g} to "
                        f"{gaps.max():g} mm): a missing slice, or slices of varying spacing; give a series on a "
                        "regular grid (or resample it to one)")


def dicom_identity(path) -> tuple:
    """``(FrameOfReferenceUID, SeriesInstanceUID)`` of a DICOM file, each None when absent."""
    import pydicom

    try:
        dataset = pydicom.dcmread(path, stop_before_pixels=True, force=True,
                                  specific_tags=["FrameOfReferenceUID", "SeriesInstanceUID"])
    except Exception as error:  # pydicom raises many types for a damaged file
        raise ReadError(f"{path}: not a readable DICOM file ({error})") from error
    return tuple(str(dataset[tag].value) if dataset.get(tag) else None
                 for tag in ("FrameOfReferenceUID", "SeriesInstanceUID"))


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


def _label_image(masks: dict, names: dict, source: str, spacing, origin, direction, kind=LabelImage,
                 shape=None, slice_axis: int = 0) -> LabelImage:
    """Pack ``{label: mask}`` into one label array of the smallest unsigned type holding the labels;
    a mask is a 3-D boolean array or ``{slice index: 2-D mask}`` on a grid of ``shape``, slices
    along array axis ``slice_axis`` (only the slices that hold the structure are touched). A mask
    overlapping an earlier one is kept whole in ``segment_masks``. Every name is kept, so empty
    structures stay listed; the names are checked by the reader (RTSTRUCT) or by
    :func:`segmetrics.inputs.io.load_label_image` (SEG), not here again."""

    def along(volume):  # a view of volume with the slices first
        return np.moveaxis(volume, slice_axis, 0)

    by_slice = {label: mask if isinstance(mask, dict) else dict(enumerate(along(mask))) for label, mask in masks.items()}
    if shape is None:
        shape = next(iter(masks.values())).shape if masks else (1, 1, 1)
    array = np.zeros(shape, dtype=np.min_scalar_type(max(masks, default=0)))
    overlapping = {}
    for label, slices in by_slice.items():
        if any(np.any(along(array)[k][fill]) for k, fill in slices.items()):
            overlapping[label] = np.zeros(shape, dtype=bool)
            for k, fill in slices.items():
                along(overlapping[label])[k] = fill
        else:
            for k, fill in slices.items():
                along(array)[k][fill] = label
    image = kind(array, tuple(spacing), tuple(origin), tuple(direction), dict(names))
    image.segment_masks = overlapping
    return image
