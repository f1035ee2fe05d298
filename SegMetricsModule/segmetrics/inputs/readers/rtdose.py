"""DICOM RT Dose (RTDOSE) grids in Gy, placed in patient coordinates, for :mod:`segmetrics.metrics.dose`.

Read with pydicom (:func:`read_rtdose`):

- the dose is the stored pixel values times ``DoseGridScaling``, in Gy as 32-bit floats (``DoseUnits`` must be
  ``GY``: a ``RELATIVE`` dose has no absolute scale; a ``DoseType`` of ``ERROR`` is an error map,
  not a dose); negative or non-finite doses are refused;
- the grid: frames along the normal of ``ImageOrientationPatient`` (row direction × column
  direction) at the ``GridFrameOffsetVector`` offsets from ``ImagePositionPatient`` (relative
  offsets, first 0, or absolute z positions, which DICOM allows only for axial frames); the
  offsets must be evenly spaced (the dose is interpolated on a regular grid); decreasing offsets
  are stored in increasing order; rows are ``PixelSpacing[0]`` apart, columns ``PixelSpacing[1]``;
- the frame of reference (``FrameOfReferenceUID``), checked against the structures' by
  :func:`check_dose_frame`;
- what the dose is: ``DoseType`` (``PHYSICAL``, or ``EFFECTIVE``: weighted by a relative
  biological effectiveness) and ``DoseSummationType`` (``PLAN``, or a part of it such as one
  ``FRACTION`` or ``BEAM``), kept for the notes of :func:`segmetrics.metrics.dose.sampling_notes`.

Every refusal is one :class:`~segmetrics.inputs.validation.ReadError` line naming the file.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from ...spatial.geometry import check_placement, check_spacing
from ..validation import ReadError
from .dicom_header import dicom_identity, dicom_kind, looks_like_dicom
from .rtstruct import structure_set_frames

#: Largest deviation of the dose frame offsets from one regular step, in steps.
FRAME_OFFSET_TOLERANCE = 0.01
#: Structure voxel centres this close to the dose grid's outer planes (in dose voxels) count as inside.
INSIDE_TOLERANCE_VOXELS = 1e-6


@dataclass(frozen=True, eq=False)
class DoseGrid:
    """A dose distribution on a regular grid.

    ``dose``: Gy, array order ``(z, y, x)`` = (frame, row, column), floating point (integers are
    converted to 32-bit floats: interpolation in integers would truncate); ``spacing``: mm in the same
    order; ``origin``: patient position (mm, ITK x, y, z = LPS) of the first voxel's centre;
    ``direction``: row-major ITK direction matrix (its columns are the x, y, z index axes in patient
    coordinates); ``frame_of_reference``: the FrameOfReferenceUID (None for a grid built in memory);
    ``source``: what it was read from, for messages; ``dose_type`` and ``summation``: the
    RTDOSE's ``DoseType`` and ``DoseSummationType`` (None when not known).
    """

    dose: np.ndarray
    spacing: tuple
    origin: tuple
    direction: tuple
    frame_of_reference: str | None = None
    source: str = "dose"
    dose_type: str | None = None
    summation: str | None = None

    def __post_init__(self):
        """``ValueError`` (one line naming ``source``) for a grid or doses that cannot be trusted."""
        if self.dose.dtype.kind != "f":
            object.__setattr__(self, "dose", self.dose.astype(np.float32))
        try:
            if self.dose.ndim != 3:
                raise ValueError(f"a dose grid is 3-D, got shape {self.dose.shape}")
            check_spacing(self.spacing, "dose spacing (array order)")
            check_placement(self.origin, self.direction, 3)
            if not (np.isfinite(self.max_gy) and self.dose.min() >= 0):  # NaN fails too
                raise ValueError("holds negative or non-finite doses: not a physical dose distribution")
        except ValueError as error:
            raise ValueError(f"{self.source}: {error}") from None

    @cached_property
    def max_gy(self) -> float:
        """The highest dose of the grid (Gy)."""
        return float(self.dose.max())

    def index_map(self, image) -> tuple:
        """``(matrix, offset)`` taking array-order indices ``(..., 3)`` of ``image`` (a
        :class:`~segmetrics.spatial.geometry.LabelImage`) to continuous array-order indices of this
        grid: ``dose_index = index @ matrix.T + offset``."""
        image_axes = np.asarray(image.direction, dtype=float).reshape(3, 3)[:, ::-1] * np.asarray(image.spacing)
        dose_axes = np.asarray(self.direction, dtype=float).reshape(3, 3)[:, ::-1] * np.asarray(self.spacing)
        to_dose = np.linalg.inv(dose_axes)  # patient mm -> dose indices (array order)
        return to_dose @ image_axes, to_dose @ (np.asarray(image.origin) - np.asarray(self.origin))

    def sample(self, indices: np.ndarray) -> tuple:
        """``(dose in Gy, inside)`` at continuous dose-grid indices ``(N, 3)`` (array order):
        trilinear interpolation of the dose at the points inside the grid (between its first and
        last voxel centres, within :data:`INSIDE_TOLERANCE_VOXELS`), and which points those are."""
        from scipy.ndimage import map_coordinates

        upper = np.asarray(self.dose.shape) - 1
        inside = np.all((indices >= -INSIDE_TOLERANCE_VOXELS) & (indices <= upper + INSIDE_TOLERANCE_VOXELS), axis=1)
        points = np.clip(indices[inside], 0, upper).T
        return map_coordinates(self.dose, points, order=1, prefilter=False), inside


def read_rtdose(path) -> DoseGrid:
    """The dose grid of an RTDOSE file (see the module doc); :class:`ReadError` when it cannot be trusted."""
    import pydicom
    from pydicom.uid import RTDoseStorage

    path = Path(path)
    if not path.is_file():
        raise ReadError(f"{path}: no such dose file")
    try:
        dataset = pydicom.dcmread(path)
    except Exception as error:  # pydicom raises many types for a damaged file
        raise ReadError(f"{path}: not a readable DICOM file ({error})") from error
    sop_class = dataset.get("SOPClassUID")
    if sop_class != RTDoseStorage:
        kind = sop_class.name if sop_class else "object without SOP Class UID"
        raise ReadError(f"{path}: is a DICOM {kind}, not an RT Dose")
    header = _dose_header(dataset)
    units, dose_type, summation, frame_of_reference = (header[key] for key in DOSE_HEADER)
    if units != "GY":
        raise ReadError(f"{path}: DoseUnits is {units or 'missing'!r}, not GY: the dose metrics need an absolute dose in Gy")
    if dose_type == "ERROR":
        raise ReadError(f"{path}: DoseType ERROR is a dose error map, not a dose")
    if frame_of_reference is None:
        raise ReadError(f"{path}: has no FrameOfReferenceUID: its position cannot be checked against the structures'")
    scaling = _header_number(path, dataset, "DoseGridScaling")
    if not scaling > 0:
        raise ReadError(f"{path}: DoseGridScaling {scaling:g} must be positive")
    try:
        pixels = dataset.pixel_array
    except Exception as error:  # missing, cut short or compressed without a decoder
        raise ReadError(f"{path}: its dose pixels cannot be read ({error})") from error
    pixels = pixels.reshape(-1, *pixels.shape[-2:])  # one frame comes as a 2-D array
    dose = pixels.astype(np.float32)  # 7 significant digits, far below any dose uncertainty; half the memory
    dose *= np.float32(scaling)
    return _placed(path, dataset, dose, frame_of_reference, dose_type, summation)


#: The RTDOSE header fields that say what a dose is and where it lies.
DOSE_HEADER = ("DoseUnits", "DoseType", "DoseSummationType", "FrameOfReferenceUID")


def read_dose_header(path) -> dict:
    """``{field: value}`` of :data:`DOSE_HEADER` in an RTDOSE file, without its pixels (codes in upper
    case; None when absent), for a dose read by another program (3D Slicer's DICOM import) whose
    file is known; unchecked."""
    import pydicom

    return _dose_header(pydicom.dcmread(path, stop_before_pixels=True, force=True, specific_tags=list(DOSE_HEADER)))


def _dose_header(dataset) -> dict:
    header = {key: str(dataset.get(key, "")).upper() or None for key in DOSE_HEADER[:3]}
    header["FrameOfReferenceUID"] = str(dataset.get("FrameOfReferenceUID", "")) or None
    return header


def _placed(path: Path, dataset, dose: np.ndarray, frame_of_reference: str, dose_type, summation) -> DoseGrid:
    """The :class:`DoseGrid` of ``dose`` (frames, rows, columns) from the dataset's geometry tags."""
    position = np.array(_header_numbers(path, dataset, "ImagePositionPatient", 3))
    orientation = np.array(_header_numbers(path, dataset, "ImageOrientationPatient", 6))
    row_spacing, column_spacing = _header_numbers(path, dataset, "PixelSpacing", 2)
    along_row, along_column = orientation[:3], orientation[3:]
    normal = np.cross(along_row, along_column)
    offsets = _frame_offsets(path, dataset, len(dose), position @ normal, axial=np.allclose(orientation, [1, 0, 0, 0, 1, 0]))
    step = offsets[1] - offsets[0] if len(offsets) > 1 else float(dataset.get("SliceThickness") or 1.0)
    if step < 0:  # frames stored in decreasing order along the normal: store them increasing
        dose, offsets, step = dose[::-1], offsets[::-1], -step
    origin = position + offsets[0] * normal
    direction = np.column_stack([along_row, along_column, normal]).ravel()
    try:
        return DoseGrid(np.ascontiguousarray(dose), (step, row_spacing, column_spacing), tuple(origin),
                        tuple(direction), frame_of_reference, str(path), dose_type, summation)
    except ValueError as error:  # the message names the file
        raise ReadError(str(error)) from error


def _frame_offsets(path: Path, dataset, frames: int, first_z: float, axial: bool) -> np.ndarray:
    """The frames' offsets (mm) along the normal from ImagePositionPatient, checked evenly spaced."""
    if frames == 1 and dataset.get("GridFrameOffsetVector") is None:
        return np.zeros(1)
    offsets = np.array(_header_numbers(path, dataset, "GridFrameOffsetVector", frames))
    if offsets[0] != 0:  # absolute z positions: allowed for axial frames only, the first at ImagePositionPatient
        if not (axial and math.isclose(offsets[0], first_z, abs_tol=1e-3)):
            raise ReadError(f"{path}: GridFrameOffsetVector starts at {offsets[0]:g}, neither 0 (relative) nor the "
                            f"z of ImagePositionPatient {first_z:g} (absolute, axial frames only)")
        offsets = offsets - offsets[0]
    steps = np.diff(offsets)
    if len(steps) and (steps[0] == 0 or np.abs(steps - steps[0]).max() > FRAME_OFFSET_TOLERANCE * abs(steps[0])):
        raise ReadError(f"{path}: GridFrameOffsetVector is not evenly spaced (steps {steps.min():g} to "
                        f"{steps.max():g} mm): the dose is interpolated on regular grids only")
    return offsets


def _header_numbers(path: Path, dataset, keyword: str, count: int) -> list:
    """``count`` finite numbers of a tag, or :class:`ReadError` naming it."""
    from pydicom.multival import MultiValue

    element = dataset.get(keyword)
    values = [] if element is None else list(element) if isinstance(element, (MultiValue, list, tuple)) else [element]
    try:
        numbers = [float(value) for value in values]
    except (TypeError, ValueError):
        numbers = []
    if len(numbers) != count or not all(map(math.isfinite, numbers)):
        raise ReadError(f"{path}: {keyword} must be {count} finite number(s), got {element!r}")
    return numbers


def _header_number(path: Path, dataset, keyword: str) -> float:
    return _header_numbers(path, dataset, keyword, 1)[0]


def input_frames_of_reference(source) -> set:
    """The FrameOfReferenceUIDs of a structure input: those an RT Structure Set's ROIs are drawn in, a
    DICOM SEG's; empty for inputs that carry none (label map files, in-memory images). Reads only
    the tags that say so (not the contours)."""
    import pydicom

    if not isinstance(source, (str, Path)) or not Path(source).is_file() or not looks_like_dicom(Path(source)):
        return set()
    kind = dicom_kind(source)
    if kind == "rtstruct":
        try:
            dataset = pydicom.dcmread(source, stop_before_pixels=True, force=True, specific_tags=[
                "StructureSetROISequence", "ReferencedFrameOfReferenceSequence"])
        except Exception as error:  # pydicom raises many types for a damaged file
            raise ReadError(f"{source}: not a readable DICOM file ({error})") from error
        return structure_set_frames(dataset)
    frame = dicom_identity(source)[0] if kind == "seg" else None
    return {frame} if frame else set()


def check_dose_frame(dose: DoseGrid, structures: dict) -> list:
    """Refuse (one :class:`ReadError` line) a dose whose frame of reference differs from that of a
    structure file; ``structures`` maps a name (``"reference"``) to its input. Returns notes for
    what cannot be checked: a dose without a frame of reference, structure files that carry none
    (label map files). In-memory images carry none either and are left to the caller, who knows
    their files (the CLI and batch runs check those)."""
    files = {side: source for side, source in structures.items() if isinstance(source, (str, Path))}
    if dose.frame_of_reference is None:
        return [f"the dose {dose.source} carries no frame of reference: it is placed on the structures by patient "
                "coordinates alone"] if files else []
    notes = []
    for side, source in files.items():
        frames = input_frames_of_reference(source)
        if not frames:
            notes.append(f"the {side} {source} carries no frame of reference (not DICOM): the dose {dose.source} is "
                         "placed on it by patient coordinates alone")
        elif dose.frame_of_reference not in frames:
            raise ReadError(f"{dose.source}: dose is in frame of reference {dose.frame_of_reference} but the {side} "
                            f"{source} is in {', '.join(sorted(frames))}: not the same patient coordinates")
    return notes


def load_dose(dose, structures: dict) -> tuple:
    """``(DoseGrid, notes)``: ``dose`` (an RTDOSE path, or a :class:`DoseGrid` kept as it is)
    checked against the frames of reference of the ``structures`` inputs (:func:`check_dose_frame`)."""
    if not isinstance(dose, DoseGrid):
        dose = read_rtdose(dose)
    return dose, check_dose_frame(dose, structures)
