"""One reader per input format, each reading its format and verifying it (the header's own checks),
and the dispatcher that picks a file's reader from its content (:func:`reader_for`).

Files: :mod:`.nifti`, :mod:`.nrrd`, :mod:`.seg_nrrd` (3D Slicer segmentations), :mod:`.metaimage`,
:mod:`.pictures`, :mod:`.dicom_series` (image series and single DICOM images), :mod:`.rtstruct`,
:mod:`.dicom_seg`, and :mod:`.other` for what ITK reads without checks of ours; :mod:`.files` holds what they share.
In-memory images: :mod:`.arrays`. Every file reader has ``read(path, policy, threshold)``
returning a :class:`~segmetrics.spatial.geometry.LabelImage` with its labels as stored; the
generic label-map checks (:mod:`segmetrics.inputs.validation`) come after, in
:mod:`segmetrics.inputs.io`.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..validation import InputPolicy, ReadError
from . import dicom_header, dicom_seg, dicom_series, files, metaimage, nifti, nrrd, other, pictures, rtstruct, seg_nrrd

#: Readers that know their files by their first bytes, tried in this order, then by their suffixes.
FILE_READERS = (nifti, nrrd, metaimage, pictures)
#: Readers whose images hold binary segments (a threshold applies inside the reader, to a SEG's fractions).
STRUCTURE_READERS = (rtstruct, dicom_seg)
_DICOM_READERS = {"rtstruct": rtstruct, "seg": dicom_seg, "image": dicom_series}
#: Bytes of a file's start that tell its format (the DICOM preamble ends at byte 132).
_HEAD_BYTES = 132


def reader_for(path: Path):
    """The reader module of a file, from its content: the DICOM preamble (then the SOP class), a
    NIfTI, NRRD or MetaImage header (a NRRD header describing segments: :mod:`.seg_nrrd`), a
    picture's signature (gzip-compressed files are looked into); by its suffix when the content
    does not tell; else :mod:`.other`. Raises :class:`ReadError` for
    a path that is not a readable, non-empty file, and for DICOM objects that are not images or
    structures."""
    path = Path(path)
    if not path.is_file():
        raise ReadError(f"{path}: {_not_a_file(path)}")
    try:
        with open(path, "rb") as handle:
            head = handle.read(_HEAD_BYTES)
    except OSError as error:
        raise ReadError(f"{path}: cannot be read ({error.strerror or error})") from error
    if not head:
        raise ReadError(f"{path}: is empty (0 bytes); the file was probably not written or copied completely")
    if dicom_header.recognises(head):
        return _DICOM_READERS[dicom_header.readable_kind(path)]
    if head.startswith(files.GZIP_MAGIC):
        head = files.read_start(path, _HEAD_BYTES)
    name = path.name.lower()
    by_content = [reader for reader in FILE_READERS if reader.recognises(head)]
    by_name = [reader for reader in FILE_READERS if name.endswith(reader.SUFFIXES)]
    if not by_content and name.endswith(dicom_header.SUFFIXES):
        return _DICOM_READERS[dicom_header.readable_kind(path)]
    reader = (by_content + by_name + [other])[0]
    return seg_nrrd if reader is nrrd and nrrd.is_segmentation(path) else reader


def read_file(path, policy: InputPolicy | None = None, threshold: float | None = None):
    """A file's :class:`~segmetrics.spatial.geometry.LabelImage` as its reader (:func:`reader_for`)
    reads and verifies it; ``threshold`` binarises a FRACTIONAL DICOM SEG (default 0.5)."""
    path = Path(path)
    return reader_for(path).read(path, policy or InputPolicy(), threshold)


def read_image_series(path, policy: InputPolicy | None = None) -> tuple:
    """``(grid, (FrameOfReferenceUID, SeriesInstanceUID))`` of an image given as a grid (``--image``,
    ``--resample-to``): a DICOM series folder (:func:`.dicom_series.read_folder`) or any image file
    (:func:`read_file`); the grid's voxels are zeros, the UIDs None for a file that is not DICOM."""
    path = Path(path)
    if path.is_dir():
        return dicom_series.read_folder(path)
    if not path.is_file():
        raise ReadError(f"{path}: no such image folder or file")
    image = read_file(path, policy)
    identity = dicom_header.dicom_identity(path) if dicom_header.looks_like_dicom(path) else (None, None)
    return image.with_array(np.zeros(image.array.shape, np.uint8)), identity


def read_image_grid(path, policy: InputPolicy | None = None):
    """The grid of :func:`read_image_series` alone."""
    return read_image_series(path, policy)[0]


def _not_a_file(path: Path) -> str:
    """Why ``path`` (not a regular file) cannot be read as an image file."""
    if path.is_dir():
        return "is a folder, not an image file (a DICOM series folder can only serve as a grid: --image, --resample-to)"
    if path.is_symlink():
        return "is a symbolic link to nothing (broken, or a loop of links)"
    return "no such file" if not path.exists() else "is not a regular file"
