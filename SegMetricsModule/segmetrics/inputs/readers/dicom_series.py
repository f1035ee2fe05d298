"""DICOM image series: a folder of slices read as one regular grid (SimpleITK's
``ImageSeriesReader``, sorted by position), and single DICOM image files.

The format's checks: the folder holds exactly one image series (structure sets may lie beside
it), no DICOM image of the folder is left out (GDCM skips a file it cannot parse, and the grid
then lacks its slice), the slices agree on pixel spacing and orientation
(:func:`check_slice_headers`) and are evenly spaced (:func:`check_even_slices`): ITK builds one
regular grid from them with a warning only.
"""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import numpy as np

from ...spatial.geometry import GEOMETRY_TOLERANCE, LabelImage, check_spacing
from ..validation import InputPolicy, ReadError
from . import files
from .dicom_header import dicom_class, dicom_identity, dicom_kind, looks_like_dicom

#: Largest deviation of a DICOM series' slice positions from one regular grid, in slice spacings.
SLICE_POSITION_TOLERANCE = 0.05


def read(path: Path, policy: InputPolicy | None = None, threshold=None) -> LabelImage:
    """One DICOM image file (e.g. a label map stored as a DICOM image)."""
    return files.read_with_itk(path)


def read_folder(path: Path) -> tuple:
    """``(grid, (FrameOfReferenceUID, SeriesInstanceUID))`` of the one image series of a folder,
    checked as the module says; the grid's voxels are zeros."""
    import SimpleITK as sitk

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
    try:
        with _itk_warnings_off():  # ITK's "Non uniform sampling or missing slices": refused in one line
            image = reader.Execute()
    except RuntimeError as error:
        raise ReadError(f"{path}: cannot be read as an image ({str(error).strip().splitlines()[-1]})") from error
    check_slice_headers(path, reader)
    check_even_slices(path, reader)
    try:
        grid = LabelImage.from_sitk(image)
    except ValueError as error:
        raise ReadError(f"{path}: {error}") from error
    return grid.with_array(np.zeros(grid.array.shape, np.uint8)), dicom_identity(series[0][0])


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
        parsed = [np.array(files.header_floats(value.split("\\"))) for value in values if value is not None]
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
