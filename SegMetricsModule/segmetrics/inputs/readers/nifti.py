"""NIfTI-1 and Analyze 7.5: one ``.nii`` file or a ``.hdr``/``.img`` pair, each possibly gzipped.

The header's own checks (:func:`check`), read from its 348 bytes before ITK reads the file: ITK
replaces ``pixdim`` values that are 0, negative or not finite by 1 mm, zero-fills data cut short
and drops data beyond the declared size; an invalid ``dim`` or a ``vox_offset`` inside the header
is a damaged file; an sform whose voxel sizes disagree with ``pixdim`` gives other millimetres in
nibabel or MONAI than in ITK. NIfTI-2 headers are left to ITK.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

from ...spatial.geometry import DIRECTION_TOLERANCE, LabelImage
from ..validation import InputPolicy, ReadError
from . import files

SUFFIXES = (".nii", ".nii.gz", ".hdr", ".hdr.gz", ".img", ".img.gz")
#: Either file of a ``.hdr``/``.img`` pair.
PAIR_NAME = re.compile(r"\.(hdr|img)(\.gz)?$", re.IGNORECASE)
HEADER_BYTES = 348


def recognises(head: bytes) -> bool:
    """Whether a file's first bytes (decompressed) are a NIfTI-1 or Analyze header: ``sizeof_hdr``
    348 in either byte order."""
    return len(head) >= 4 and HEADER_BYTES in (int.from_bytes(head[:4], "little"), int.from_bytes(head[:4], "big"))


def read(path: Path, policy: InputPolicy, threshold=None) -> LabelImage:
    """The image of a NIfTI file or pair, its header checked first (:func:`check`)."""
    if not path.name.lower().endswith(SUFFIXES):
        raise ReadError(f"{path}: is a NIfTI file, but ITK reads NIfTI only under a .nii, .nii.gz or .hdr/.img name: "
                        "rename it")
    return files.read_with_itk(path, check(path, defer_data_check=True), "NiftiImageIO")


def check(path: Path, defer_data_check: bool = False) -> files.VoxelCheck | None:
    """Check a NIfTI-1 / Analyze header's voxel sizes (``pixdim``) and that its data is all there.

    ITK replaces ``pixdim`` values that are 0, negative or not finite by 1 mm and zero-fills
    missing data, so both are read from the header here. ``path`` is a ``.nii`` file or either
    file of a ``.hdr``/``.img`` pair (gzipped or not). With ``defer_data_check`` the CRC of a
    gzipped data file of the declared length is left to the returned :class:`VoxelCheck`.
    """
    header, data = _nifti_parts(path)
    if header is None or data is None:
        return None  # a pair with a missing part: ITK reports it
    head = files.read_start(header, HEADER_BYTES)
    if len(head) < HEADER_BYTES:
        raise ReadError(f"{header}: the NIfTI header is cut short ({len(head)} of {HEADER_BYTES} bytes)")
    order = next((o for o in "<>" if np.frombuffer(head, o + "i4", 1)[0] == HEADER_BYTES), None)
    if order is None:
        return None  # not NIfTI-1 (e.g. NIfTI-2): left to ITK
    dims = np.frombuffer(head, order + "i2", 8, 40)
    bits = int(np.frombuffer(head, order + "i2", 1, 72)[0])
    pixdim = np.frombuffer(head, order + "f4", 8, 76)
    offset = float(np.frombuffer(head, order + "f4", 1, 108)[0])
    if not 1 <= dims[0] <= 7 or np.any(dims[1:1 + dims[0]] < 1):
        raise ReadError(f"{header}: NIfTI dim {list(map(int, dims))} is invalid: dim[0] (the number of dimensions) "
                        "must be 1 to 7 and each size at least 1 (a damaged header?)")
    if head[344:348] == b"n+1\0" and not HEADER_BYTES <= offset < math.inf:
        raise ReadError(f"{header}: NIfTI vox_offset {offset:g} lies inside the header (it must be at least "
                        f"{HEADER_BYTES}): a damaged header?")
    spatial = int(min(dims[0], 3))
    files.check_header_spacing(header, f"NIfTI pixdim[1..{spatial}]", pixdim[1:1 + spatial])
    _check_sform_scales(header, head, order, pixdim[1:1 + spatial])
    expected = int(offset) + int(np.prod(dims[1:1 + dims[0]].astype(np.int64))) * bits // 8
    if defer_data_check and files.is_gzip(data):
        crc, length = files.gzip_trailer(data)
        if length == expected % (1 << 32):  # a stream cut short ends in compressed data, not in this length
            return files.VoxelCheck(data, int(offset), crc)
    files.check_data_size(data, header, files.data_length(data), expected, "bytes of NIfTI data")
    return None


def _check_sform_scales(header: Path, head: bytes, order: str, pixdim) -> None:
    """Refuse a NIfTI-1 sform (when its code is set) whose column lengths disagree with ``pixdim``
    (the voxel sizes of the spatial axes, mm):
    ITK takes the voxel sizes from ``pixdim`` and nibabel or MONAI from the sform, so the same file
    would give other millimetres in other tools."""
    if int(np.frombuffer(head, order + "i2", 1, 254)[0]) <= 0:
        return
    sform = np.frombuffer(head, order + "f4", 12, 280).reshape(3, 4).astype(float)
    lengths = np.linalg.norm(sform[:, :3], axis=0)[:len(pixdim)]
    if np.all(np.isfinite(lengths)) and not np.allclose(lengths, pixdim, rtol=DIRECTION_TOLERANCE, atol=0):
        raise ReadError(f"{header}: the NIfTI sform gives voxel sizes {_mm(lengths)} but pixdim {_mm(pixdim)}; "
                        "readers disagree on which to use (ITK takes pixdim, nibabel the sform): fix the header")


def _mm(values) -> str:
    return "(" + ", ".join(f"{float(v):g}" for v in values) + ") mm"


def _nifti_parts(path: Path):
    """``(header file, data file)`` of a NIfTI file (any name but a pair's) or ``.hdr``/``.img``
    pair; a missing part is None."""
    if not PAIR_NAME.search(path.name):
        return path, path
    stem = PAIR_NAME.sub("", path.name)
    header = next((p for s in (".hdr", ".hdr.gz") if (p := path.with_name(stem + s)).is_file()), None)
    data = next((p for s in (".img", ".img.gz") if (p := path.with_name(stem + s)).is_file()), None)
    return header, data
