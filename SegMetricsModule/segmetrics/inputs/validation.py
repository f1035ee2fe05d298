"""The checks every input passes before its voxels are trusted; one layer for all entry points.

:mod:`segmetrics.inputs.io` calls these for every file and in-memory input, so that ``compare``, batch
runs, frame folders and the Slicer logic refuse the same things with the same one-line
:class:`ReadError`:

- files: DICOM objects that are neither images, RT Structure Sets nor Segmentations (by SOP class), header-only formats whose
  data file lies outside the header's folder, spacings that ITK would silently replace by 1 mm
  (read from the header itself; a NRRD spatial axis without a direction too, a MetaImage spacing
  without one value per axis, and a NRRD or MetaImage header that states no voxel size at all),
  compressed data
  (gzip, zlib) cut short, damaged or followed by garbage, NIfTI, NRRD and MetaImage data shorter
  or longer than its header declares (ITK zero-fills the one and drops the rest of the other),
  impossible NIfTI dimensions and data offsets, ASCII NRRD data that is not numbers (ITK crashes
  on some);
- pictures: lossy formats (JPEG), more grey levels than a mask has, PNG chunks damaged or cut short;
- label maps: intensity-like content (negative values, more than :data:`MAX_LABELS` distinct
  values, many values varying from voxel to voxel) and names that would merge structures;
- thresholds that are not finite numbers, or that make every voxel foreground;
- options of an evaluation (:func:`check_evaluation_options`): metrics, labels, paths, before any
  input is read.

:class:`InputPolicy` holds the explicit overrides. Spacing and direction rules themselves live in
:func:`segmetrics.spatial.geometry.check_spacing` / :func:`~segmetrics.spatial.geometry.check_placement`.
"""
from __future__ import annotations

import gzip
import hashlib
import math
import numbers
import os
import re
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..spatial.geometry import DIRECTION_TOLERANCE, LabelImage, check_spacing

#: More distinct non-zero values than this in a label map suggests an intensity image.
MAX_LABELS = 500
#: More grey levels than this in a picture read as labels suggests a grey picture or a soft map.
MAX_PICTURE_LEVELS = 64
#: A map with more than ``MAX_PICTURE_LEVELS`` values whose neighbouring voxels (along the last
#: axis) are equal less often than this is noisy like an intensity image; label maps are
#: piecewise constant (typically > 0.9).
MIN_EQUAL_NEIGHBOURS = 0.5
#: Header-only formats may name their data file(s); those outside the header's folder are refused.
_DETACHED_SUFFIXES = (".mhd", ".mha", ".nhdr", ".nrrd")
_DICOM_SUFFIXES = (".dcm", ".dicom")
#: NIfTI-1 (and Analyze 7.5) files: one ``.nii`` or a ``.hdr``/``.img`` pair, each possibly gzipped.
_NIFTI_NAME = re.compile(r"\.(nii|hdr|img)(\.gz)?$", re.IGNORECASE)
_NIFTI1_HEADER_BYTES = 348
_GZIP_MAGIC = b"\x1f\x8b"
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_HEADER_BYTES_LIMIT = 1 << 16
#: Bytes of a DICOM file's start that key its parsed header (:func:`dicom_class`).
_DICOM_HEAD_BYTES = 1 << 16
#: Bytes per element of the MetaImage element types whose size does not depend on the platform.
_META_ELEMENT_BYTES = {"MET_CHAR": 1, "MET_UCHAR": 1, "MET_SHORT": 2, "MET_USHORT": 2, "MET_INT": 4, "MET_UINT": 4,
                       "MET_FLOAT": 4, "MET_LONG_LONG": 8, "MET_ULONG_LONG": 8, "MET_DOUBLE": 8}


class ReadError(ValueError):
    """A file is missing or unreadable, or an input is not trustworthy as a label map (one line)."""


class NothingToCompareError(ValueError):
    """The inputs hold no structure to evaluate (no non-zero voxel, no named segment, no class) and
    none was asked for by name: an empty result would look like a success."""


@dataclass(frozen=True)
class InputPolicy:
    """Explicit overrides of the input checks (all off by default).

    allow_lossy : bool
        Accept lossy pictures (JPEG); they must then be binarised with a ``threshold``.
    allow_many_labels : bool
        Accept label maps that look like intensity images (negative values, more than
        :data:`MAX_LABELS` distinct values, many values varying from voxel to voxel) and pictures
        with more than :data:`MAX_PICTURE_LEVELS` grey levels.
    allow_external_data : bool
        Accept ``.mhd``/``.nhdr`` headers whose data file lies outside the header's folder.
    assume_unit_spacing : bool
        Accept NRRD and MetaImage files that state no voxel size at all (no ``space directions``
        or ``spacings``; no ``ElementSpacing`` or ``ElementSize``), read as 1 mm voxels: results in
        millimetres are then in voxel units. Pictures (PNG, TIFF) always have 1 mm pixels.
    """

    allow_lossy: bool = False
    allow_many_labels: bool = False
    allow_external_data: bool = False
    assume_unit_spacing: bool = False


# ------------------------------------------------------------------------------------- files
def check_file(path: Path, policy: InputPolicy, *, defer_data_check: bool = False) -> VoxelCheck | None:
    """Refuse a file that ITK or PIL would read wrongly or silently repair (see the module doc).

    ``defer_data_check``: a gzipped NIfTI, or gzip-encoded NRRD data (``.seg.nrrd`` too), whose
    gzip trailer declares the length its header asks for, and a MetaImage zlib stream exactly
    ``CompressedDataSize`` long are not decompressed here; the returned :class:`VoxelCheck`
    verifies the stream's checksum on the voxels as the reader decompressed them (one
    decompression instead of two). Otherwise (and by default) every compressed stream is
    read to its end here and ``None`` is returned.
    """
    name = path.name.lower()
    try:
        with open(path, "rb") as handle:
            head = handle.read(132)
    except OSError as error:
        raise ReadError(f"{path}: cannot be read ({error.strerror or error})") from error
    if not head:
        raise ReadError(f"{path}: is empty (0 bytes); the file was probably not written or copied completely")
    if looks_like_dicom(path, head):
        _check_dicom(path)
    if name.endswith(_DETACHED_SUFFIXES) and not policy.allow_external_data:
        _check_data_files(path)
    if _NIFTI_NAME.search(path.name):
        return _check_nifti(path, defer_data_check)
    if name.endswith((".nrrd", ".nhdr")):
        return _check_nrrd(path, policy, defer_data_check)
    elif name.endswith((".mha", ".mhd")):
        return _check_meta(path, policy, defer_data_check)
    elif head[:2] == _GZIP_MAGIC:
        _data_length(path)
    elif head.startswith(_PNG_SIGNATURE):
        _check_png(path)
    return None


def _check_png(path: Path) -> None:
    """Refuse a PNG whose chunks are damaged (CRC) or that ends before its end chunk: PIL reads the
    pixels of such a file as if it were whole."""
    from PIL import Image

    try:
        with Image.open(path) as picture:
            picture.verify()
    except Exception as error:  # PIL raises SyntaxError, OSError, struct.error ... for one cause
        raise ReadError(f"{path}: the PNG file is damaged or cut short ({error}); the file was probably not copied "
                        "or downloaded completely") from error


@dataclass(frozen=True)
class VoxelCheck:
    """The integrity check of a compressed data file (gzip: NIfTI, NRRD; zlib: MetaImage), done on
    the voxels a reader decompressed.

    ``path``: the data file; ``offset``: decompressed bytes before the voxels (NIfTI header,
    extensions); ``crc``: the checksum the stream declares for its whole decompressed data: a gzip
    trailer's CRC-32 (the trailer already showed the length to be ``offset`` + the voxels' bytes)
    or, with ``checksum="adler32"``, a zlib stream's Adler-32; ``stream_start``: bytes of the file
    before the stream (an attached NRRD or MetaImage header); ``length``: the decompressed bytes
    the header of ``header`` declares, checked by :meth:`check_stream` (a zlib stream does not
    state its length).
    """

    path: Path
    offset: int
    crc: int
    stream_start: int = 0
    checksum: str = "crc32"
    length: int | None = None
    header: Path | None = None

    def verify(self, voxels: np.ndarray) -> None:
        """Accept ``voxels`` (the data as read, C order) when their bytes after the file's first
        ``offset`` bytes give the stream's checksum; otherwise read the stream to its end
        (:meth:`check_stream`): a damaged stream is refused, an intact one whose voxels the reader
        converted (byte order, scaling) is accepted as before."""
        checksum = getattr(zlib, self.checksum)
        start = checksum(_read_start(self.path, self.offset))
        if checksum(np.ascontiguousarray(voxels).view(np.uint8), start) != self.crc:
            self.check_stream()

    def check_stream(self) -> None:
        """Read the stream to its end: :class:`ReadError` when it is cut short or damaged, or (with
        ``length``) of another length than its header declares."""
        inflated = _inflated_length(self.path, self.stream_start)
        if self.length is not None:
            _check_data_size(self.path, self.header or self.path, inflated, self.length)


def _gzip_trailer(path: Path) -> tuple:
    """``(CRC-32, length mod 2**32)`` of the decompressed data as a gzip file's last 8 bytes
    declare them (``(None, None)`` for a file too short to hold a trailer)."""
    with open(path, "rb") as handle:
        if handle.seek(0, 2) < 8:
            return None, None
        handle.seek(-8, 2)
        crc, length = np.frombuffer(handle.read(8), "<u4")
    return int(crc), int(length)


def check_picture(path: Path, image: LabelImage, policy: InputPolicy, threshold) -> None:
    """Refuse a 2-D picture that is lossy (JPEG; allowed only on request and with a ``threshold``),
    or that holds more grey levels than a mask would (a grey picture or a soft map, unthresholded)."""
    lossy = _lossy_format(path)
    if lossy is not None and not policy.allow_lossy:
        raise ReadError(
            f"{path}: {lossy} is a lossy format: its compression adds grey levels that would be read as extra "
            "structures; save masks losslessly (PNG, NRRD, NIfTI), or opt in with allow_lossy=True and a threshold "
            "(CLI: --allow-lossy --threshold 128)"
        )
    if lossy is not None and threshold is None:
        raise ReadError(f"{path}: a lossy {lossy} mask must be binarised: give a threshold "
                        "(CLI: --threshold 128; Python: threshold=128)")
    levels = len(image.labels())
    if threshold is None and not policy.allow_many_labels and levels > MAX_PICTURE_LEVELS:
        raise ReadError(
            f"{path}: holds {levels} grey levels: a grey picture or a soft (probability) map rather than a mask? "
            "Binarise it with a threshold (CLI: --threshold 128; Python: threshold=128), or allow_many_labels=True "
            "(CLI: --allow-many-labels) if it really is a label map"
        )


def _lossy_format(path: Path) -> str | None:
    """``"JPEG"`` (or a JPEG-compressed TIFF) when PIL recognises a lossy picture, else None."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as picture:
            if picture.format in ("JPEG", "MPO"):
                return "JPEG"
            if picture.format == "TIFF" and "jpeg" in str(picture.info.get("compression", "")):
                return "JPEG-compressed TIFF"
    except (UnidentifiedImageError, OSError):
        return None  # not a picture PIL knows: the reader reports it
    return None


def looks_like_dicom(path: Path, head: bytes | None = None) -> bool:
    """Whether a file is to be read as DICOM: named ``.dcm``/``.dicom`` or starting with the DICOM
    preamble (``head``: its first 132 bytes, read here when not given)."""
    if path.name.lower().endswith(_DICOM_SUFFIXES):
        return True
    if head is None:
        with open(path, "rb") as handle:
            head = handle.read(132)
    return head[128:132] == b"DICM"


def file_version(status: os.stat_result) -> tuple:
    """What tells one version of a file from another (``os.stat`` of it): its size, modification
    and status-change times (ns), inode and device. The status-change time and the inode catch a
    file rewritten with the same size and modification time (two writes within one tick of the
    file system's clock, a copy or ``os.utime`` that set the old time back)."""
    return status.st_size, status.st_mtime_ns, status.st_ctime_ns, status.st_ino, status.st_dev


def dicom_class(path: Path) -> tuple:
    """``(SOP Class UID, Modality or None)`` of a DICOM file (pixel data not read); ReadError when
    it cannot be read as DICOM. The header is parsed once per file version, however often the
    checks and the reader's dispatch ask: a version is :func:`file_version` and the bytes of the
    file's start (:data:`_DICOM_HEAD_BYTES`, where the SOP class and modality are)."""
    from pydicom.errors import InvalidDicomError

    path = Path(path)
    try:
        with open(path, "rb") as handle:
            status = os.fstat(handle.fileno())
            head = hashlib.blake2b(handle.read(_DICOM_HEAD_BYTES)).digest()
        return _dicom_class(str(path.resolve()), (*file_version(status), head))
    except (InvalidDicomError, OSError, ValueError) as error:
        raise ReadError(f"{path}: not a readable DICOM file ({error})") from error


@lru_cache(maxsize=256)
def _dicom_class(path: str, version: tuple) -> tuple:
    """:func:`dicom_class` of one file version (``version`` keys the cache)."""
    import pydicom
    from pydicom.uid import UID

    dataset = pydicom.dcmread(path, stop_before_pixels=True, force=True, specific_tags=["SOPClassUID", "Modality"])
    return UID(str(dataset.get("SOPClassUID", ""))), dataset.get("Modality")


def _check_dicom(path: Path) -> None:
    """Refuse DICOM objects that are neither images nor structures (RT Dose/Plan, SR, ...); RT
    Structure Sets and Segmentations are read by :mod:`segmetrics.inputs.dicom`."""
    from pydicom.uid import RTStructureSetStorage, SegmentationStorage

    sop_class, modality = dicom_class(path)
    kind = sop_class.name if sop_class else "object without SOP Class UID"
    if not kind.endswith("Image Storage") and sop_class not in (RTStructureSetStorage, SegmentationStorage):
        raise ReadError(
            f"{path}: is a DICOM {kind}{f' ({modality})' if modality else ''}, not a segmentation; SegMetrics reads "
            "DICOM RT Structure Sets, DICOM SEG and image label maps"
        )


def _data_length(path: Path) -> int:
    """Bytes a file holds, decompressed; a gzip stream is read to its end (:func:`_inflated_length`),
    so a stream cut short, damaged (CRC, length) or followed by garbage is refused here instead of
    being zero-filled by ITK."""
    return _inflated_length(path, 0) if _is_gzip(path) else path.stat().st_size


def _read_start(path: Path, size: int) -> bytes:
    """The first ``size`` bytes of a file, decompressed when it is gzipped."""
    try:
        with (gzip.open if _is_gzip(path) else open)(path, "rb") as handle:
            return handle.read(size)
    except (EOFError, OSError, zlib.error) as error:
        raise _damaged(path, error) from error


def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as handle:
        return handle.read(2) == _GZIP_MAGIC


def _damaged(path: Path, error: Exception) -> ReadError:
    return ReadError(f"{path}: compressed data is cut short or damaged ({error}); the file was probably not "
                     "copied or downloaded completely")


def _check_nifti(path: Path, defer_data_check: bool = False) -> VoxelCheck | None:
    """Check a NIfTI-1 / Analyze header's voxel sizes (``pixdim``) and that its data is all there.

    ITK replaces ``pixdim`` values that are 0, negative or not finite by 1 mm and zero-fills
    missing data, so both are read from the header here. ``path`` is a ``.nii`` file or either
    file of a ``.hdr``/``.img`` pair (gzipped or not). With ``defer_data_check`` the CRC of a
    gzipped data file of the declared length is left to the returned :class:`VoxelCheck`.
    """
    header, data = _nifti_parts(path)
    if header is None or data is None:
        return None  # a pair with a missing part: ITK reports it
    head = _read_start(header, _NIFTI1_HEADER_BYTES)
    if len(head) < _NIFTI1_HEADER_BYTES:
        raise ReadError(f"{header}: the NIfTI header is cut short ({len(head)} of {_NIFTI1_HEADER_BYTES} bytes)")
    order = next((o for o in "<>" if np.frombuffer(head, o + "i4", 1)[0] == _NIFTI1_HEADER_BYTES), None)
    if order is None:
        return None  # not NIfTI-1 (e.g. NIfTI-2): left to ITK
    dims = np.frombuffer(head, order + "i2", 8, 40)
    bits = int(np.frombuffer(head, order + "i2", 1, 72)[0])
    pixdim = np.frombuffer(head, order + "f4", 8, 76)
    offset = float(np.frombuffer(head, order + "f4", 1, 108)[0])
    if not 1 <= dims[0] <= 7 or np.any(dims[1:1 + dims[0]] < 1):
        raise ReadError(f"{header}: NIfTI dim {list(map(int, dims))} is invalid: dim[0] (the number of dimensions) "
                        "must be 1 to 7 and each size at least 1 (a damaged header?)")
    if head[344:348] == b"n+1\0" and not _NIFTI1_HEADER_BYTES <= offset < math.inf:
        raise ReadError(f"{header}: NIfTI vox_offset {offset:g} lies inside the header (it must be at least "
                        f"{_NIFTI1_HEADER_BYTES}): a damaged header?")
    spatial = int(min(dims[0], 3))
    _check_header_spacing(header, f"NIfTI pixdim[1..{spatial}]", pixdim[1:1 + spatial])
    _check_sform_scales(header, head, order, pixdim[1:1 + spatial])
    expected = int(offset) + int(np.prod(dims[1:1 + dims[0]].astype(np.int64))) * bits // 8
    if defer_data_check and _is_gzip(data):
        crc, length = _gzip_trailer(data)
        if length == expected % (1 << 32):  # a stream cut short ends in compressed data, not in this length
            return VoxelCheck(data, int(offset), crc)
    _check_data_size(data, header, _data_length(data), expected, "bytes of NIfTI data")
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
    """``(header file, data file)`` of a NIfTI file or pair; a missing part is None."""
    if re.search(r"\.nii(\.gz)?$", path.name, re.IGNORECASE):
        return path, path
    stem = _NIFTI_NAME.sub("", path.name)
    header = next((p for s in (".hdr", ".hdr.gz") if (p := path.with_name(stem + s)).is_file()), None)
    data = next((p for s in (".img", ".img.gz") if (p := path.with_name(stem + s)).is_file()), None)
    return header, data


def _check_nrrd(path: Path, policy: InputPolicy, defer_data_check: bool = False) -> VoxelCheck | None:
    """A NRRD header's voxel sizes and its data (:func:`_check_nrrd_data`)."""
    fields, _, header_size = _nrrd_header(path)
    _check_nrrd_spacing(path, fields, policy)
    return _check_nrrd_data(path, fields, header_size, defer_data_check)


def _check_nrrd_spacing(path: Path, fields: dict, policy: InputPolicy) -> None:
    """NRRD voxel sizes from ``spacings`` or the lengths of ``space directions``; ``none`` is allowed
    only for non-spatial axes (a ``.seg.nrrd``'s layers), not in place of a 2-D or 3-D axis; a
    ``.seg.nrrd`` needs ``space directions`` (slicerio ignores ``spacings``). A header with
    neither field (ITK reads 1 mm voxels) needs ``policy.assume_unit_spacing``."""
    if "space directions" in fields:
        vectors = re.findall(r"\(([^)]*)\)", fields["space directions"])
        lengths = [math.hypot(*header_floats(v.split(","))) for v in vectors]
        spatial = min(len(_nrrd_domain_axes(fields)), 3)
        if len(vectors) < spatial:
            raise ReadError(f"{path}: NRRD space directions ({fields['space directions']}) give no voxel size for "
                            f"{spatial - len(vectors)} of its {spatial} axes, which would be read as 1 mm")
        _check_header_spacing(path, "NRRD space directions of length", lengths)
    elif "spacings" in fields and path.name.lower().endswith(".seg.nrrd"):
        raise ReadError(f"{path}: gives its voxel size in NRRD 'spacings', which the .seg.nrrd reader (slicerio) "
                        "ignores: it would read 1 mm voxels; save it with 'space directions' (as 3D Slicer does)")
    elif "spacings" in fields:
        _check_header_spacing(path, "NRRD spacings", header_floats(fields["spacings"].split()))
    elif "sizes" in fields and not policy.assume_unit_spacing:  # without sizes ITK refuses the file itself
        _refuse_unit_spacing(path, "'space directions' or 'spacings'")


def _nrrd_domain_axes(fields: dict) -> list:
    """Indices of a NRRD's domain (sample position) axes: those whose ``kinds`` entry is
    ``domain``, ``space``, ``time`` or unknown (``???``, ``none``), as teem and ITK count them;
    every axis when the header has no ``kinds``. The others (``vector``, ``RGB-color``, ``list``
    ...) hold a voxel's components or a ``.seg.nrrd``'s layers, and have no direction."""
    axes = range(len(fields.get("sizes", "").split()))
    kinds = fields.get("kinds", "").lower().split()
    if len(kinds) != len(axes):
        return list(axes)
    return [axis for axis in axes if kinds[axis] in ("domain", "space", "time", "???", "none")]


def _refuse_unit_spacing(path: Path, fields: str) -> None:
    """Refuse a header that states no voxel size (``fields``: the ones it lacks)."""
    raise ReadError(f"{path}: states no voxel size (no {fields}): ITK would read 1 mm voxels; add the spacing to the "
                    "header, or pass --assume-unit-spacing (Python: InputPolicy(assume_unit_spacing=True)) to "
                    "measure in voxel units")


def _check_nrrd_data(path: Path, fields: dict, header_size: int | None,
                     defer_data_check: bool = False) -> VoxelCheck | None:
    """The data of a NRRD file (attached, or one detached file): raw data exactly as long as
    ``sizes`` x ``type`` declare, a gzip stream intact (ITK reads a damaged one as zeros) and of that
    length, ASCII data of that many numbers (ITK crashes on long unparsable text). Data read with a
    byte or line skip, split over several files or in other encodings is left to ITK.
    ``defer_data_check``: a gzip stream whose trailer declares that length is returned as a
    :class:`VoxelCheck` instead of being decompressed here."""
    sizes = _whole_numbers(path, "NRRD sizes", fields.get("sizes", ""), minimum=1)
    element = _nrrd_element_bytes(fields.get("type", ""))
    source = fields.get("data file", fields.get("datafile"))
    skips = fields.get("byte skip", "0") != "0" or fields.get("line skip", "0") != "0"
    if element is None or not sizes or skips:
        return
    if source is None:
        if header_size is None:
            return
        data, offset = path, header_size
    elif len(source.split()) == 1 and source != "LIST" and (path.parent / source).is_file():
        data, offset = path.parent / source, 0
    else:
        return  # several data files, or a missing one (ITK reports it)
    count = int(np.prod(sizes))
    encoding = fields.get("encoding", "").lower()
    if encoding == "raw":
        _check_data_size(data, path, data.stat().st_size - offset, count * element)
    elif encoding in ("gzip", "gz"):
        crc, length = _gzip_trailer(data)
        if defer_data_check and length == count * element % (1 << 32):  # a stream cut short ends otherwise
            return VoxelCheck(data, 0, crc, offset)
        _check_data_size(data, path, _inflated_length(data, offset), count * element)
    elif encoding in ("ascii", "text", "txt"):
        _check_ascii_numbers(data, path, offset, count)
    return None


def _nrrd_element_bytes(type_name: str) -> int | None:
    """Bytes per element of a NRRD ``type`` (any of its spellings, e.g. ``unsigned short``, ``uint16_t``)."""
    words = type_name.lower().replace("_t", "")
    for keys, size in ((("float",), 4), (("double",), 8), (("char", "int8"), 1), (("short", "int16"), 2),
                       (("long", "int64"), 8), (("int",), 4)):
        if any(key in words for key in keys):
            return size
    return None  # "block" or unknown: left to ITK


def _check_ascii_numbers(data: Path, header: Path, offset: int, count: int) -> None:
    """Refuse ASCII image data that is not ``count`` numbers (separated by white space or commas)."""
    with open(data, "rb") as handle:
        handle.seek(offset)
        tokens = handle.read().replace(b",", b" ").split()
    numbers = header_floats(token.decode("latin-1") for token in tokens)
    bad = next((token for token, number in zip(tokens, numbers) if math.isnan(number)
                and token.lower().lstrip(b"+-") != b"nan"), None)
    if bad is not None:
        raise ReadError(f"{data}: ASCII image data holds {bad[:20].decode('latin-1')!r}, which is not a number "
                        "(binary data under an ASCII header?)")
    _check_data_size(data, header, len(tokens), count, "numbers of ASCII image data")


def _check_meta(path: Path, policy: InputPolicy, defer_data_check: bool = False) -> VoxelCheck | None:
    """MetaImage voxel sizes (``ElementSpacing``, else ``ElementSize``: one per ``NDims`` axis; a
    header with neither needs ``policy.assume_unit_spacing``), origin and data length.

    The data length is checked for data stored ``LOCAL`` or in one file, raw (element count ×
    element size) or compressed (``CompressedDataSize``): ITK reports data cut short only as
    "No such file or directory". ``defer_data_check``: a zlib stream exactly ``CompressedDataSize``
    long is returned as a :class:`VoxelCheck` (its Adler-32) instead of being decompressed here.
    """
    fields, _, header_size = _meta_header(path)
    dimensions = _whole_numbers(path, "MetaImage NDims", fields.get("NDims", ""), minimum=1)
    for field in ("ElementSpacing", "ElementSize"):  # ITK cannot parse the header with a wrong count
        count = len(fields.get(field, "").split())
        if field in fields and dimensions and count != dimensions[0]:
            raise ReadError(f"{path}: MetaImage {field} ({fields[field]}) has {count} values but NDims is "
                            f"{dimensions[0]}: one voxel size per axis is needed (a damaged header?)")
    spacing = fields.get("ElementSpacing", fields.get("ElementSize"))
    if spacing:
        _check_header_spacing(path, "MetaImage ElementSpacing", header_floats(spacing.split()))
    elif "DimSize" in fields and not policy.assume_unit_spacing:  # without DimSize ITK refuses the file itself
        _refuse_unit_spacing(path, "'ElementSpacing' or 'ElementSize'")
    for field in ("Offset", "Origin", "Position"):  # synonyms; ITK reads a value it cannot parse as 0
        if field in fields and not all(math.isfinite(x) for x in header_floats(fields[field].split())):
            raise ReadError(f"{path}: MetaImage {field} ({fields[field]}) is not a finite position in mm")
    source = fields.get("ElementDataFile", "")
    if not source or source.split()[0] == "LIST" or "%" in source:
        return
    element = _META_ELEMENT_BYTES.get(fields.get("ElementType", ""))
    sizes = _whole_numbers(path, "MetaImage DimSize", fields.get("DimSize", ""), minimum=1)
    channels = _whole_numbers(path, "MetaImage ElementNumberOfChannels", fields.get("ElementNumberOfChannels", "1"),
                              minimum=1)
    if element is None or not sizes:
        return
    expected = int(np.prod(sizes)) * (channels or [1])[0] * element
    if source == "LOCAL":
        data, offset = path, header_size
    elif (path.parent / source).is_file():
        data, offset = path.parent / source, 0
    else:
        return  # a missing data file: ITK reports it
    skip = (_whole_numbers(path, "MetaImage HeaderSize", fields.get("HeaderSize", ""), minimum=-1) or [0])[0]
    if skip < 0:
        return  # data at the end of the file: where it starts is not known
    available = data.stat().st_size - offset - skip
    if fields.get("CompressedData", "False").lower() == "true":
        declared = (_whole_numbers(path, "MetaImage CompressedDataSize", fields.get("CompressedDataSize", ""),
                                   minimum=0) or [0])[0]
        if available < declared:
            _check_data_size(data, path, available, declared)
        adler = _zlib_adler32(data, offset + skip, declared) if defer_data_check and available == declared else None
        if adler is not None:
            return VoxelCheck(data, 0, adler, offset + skip, "adler32", expected, path)
        available = _inflated_length(data, offset + skip)
    _check_data_size(data, path, available, expected)
    return None


def _zlib_adler32(path: Path, start: int, size: int) -> int | None:
    """The Adler-32 that the zlib stream of ``size`` bytes at byte ``start`` of a file declares
    for its decompressed data (its last 4 bytes), or None when it does not begin with a zlib
    header (e.g. a gzip stream)."""
    if size < 6:  # 2 bytes of header, 4 of checksum
        return None
    with open(path, "rb") as handle:
        handle.seek(start)
        head = handle.read(2)
        handle.seek(start + size - 4)
        tail = handle.read(4)
    if len(head) < 2 or head[0] & 0x0F != zlib.DEFLATED or int.from_bytes(head, "big") % 31:
        return None
    return int.from_bytes(tail, "big")


def _check_data_size(data: Path, header: Path, available: int, expected: int,
                     what: str = "bytes of image data") -> None:
    """Refuse image data shorter or longer than its header declares (``what``: the unit counted)."""
    if available == expected:
        return
    declarer = "its header" if data == header else f"the header {header.name}"
    problem = ("the file is cut short (not copied or downloaded completely?)" if available < expected else
               "the data is longer than its header says (a header of another image, or data appended?)")
    raise ReadError(f"{data}: holds {available} {what} where {declarer} declares {expected}; {problem}")


def _inflated_length(path: Path, offset: int) -> int:
    """Bytes of the zlib or gzip stream(s) that start ``offset`` bytes into a file, decompressed.

    Refuses a stream cut short or damaged (its checksum), and anything after its end but zero
    padding or further gzip members.
    """
    total, rest = 0, b""
    with open(path, "rb") as handle:
        handle.seek(offset)
        try:
            while True:
                inflater = zlib.decompressobj(32 + zlib.MAX_WBITS)  # zlib or gzip header, detected
                pending = rest
                while not inflater.eof and (pending or (pending := handle.read(1 << 24))):
                    total += len(inflater.decompress(pending, 1 << 26))  # at most 64 MiB at a time
                    pending = inflater.unconsumed_tail
                if not inflater.eof:
                    raise EOFError("the compressed stream ends before its end marker")
                rest = inflater.unused_data + handle.read()
                if not rest.startswith(_GZIP_MAGIC):
                    break
        except (EOFError, zlib.error) as error:
            raise _damaged(path, error) from error
    if rest.strip(b"\0"):
        raise ReadError(f"{path}: holds {len(rest)} bytes after the end of its compressed data (garbage appended, "
                        "or two files joined?)")
    return total


def _whole_numbers(path: Path, what: str, text: str, minimum: int) -> list:
    """The whole numbers of a header field (white-space separated); ReadError naming the field when
    one is not a whole number of at least ``minimum``."""
    numbers = header_floats(text.split())
    if not all(math.isfinite(n) and n.is_integer() and n >= minimum for n in numbers):
        raise ReadError(f"{path}: {what} ({text}) must be whole numbers of at least {minimum}; a damaged header?")
    return [int(n) for n in numbers]


def _check_header_spacing(path: Path, what: str, values) -> None:
    try:
        check_spacing(values, what)
    except ValueError as error:
        raise ReadError(f"{path}: {error}") from None


def header_floats(texts) -> list:
    """Numbers of a header field's tokens (NRRD, MetaImage, DICOM multi-values); an unparsable
    token counts as NaN (so it is refused)."""
    values = []
    for text in texts:
        try:
            values.append(float(text))
        except ValueError:
            values.append(math.nan)
    return values


# ---------------------------------------------------------------------- header-only formats
def _check_data_files(path: Path) -> None:
    """Refuse a header whose data file(s) lie outside its own folder (symbolic links resolved)."""
    folder = path.parent.resolve()
    for name in _data_file_names(path):
        target = (path.parent / name).resolve()
        if not target.is_relative_to(folder):
            raise ReadError(f"{path}: its data file {name} lies outside the header's folder {folder}; "
                            "allow it with allow_external_data=True (CLI: --allow-external-data) if you trust it")


def _data_file_names(path: Path) -> list:
    """File names a MetaImage (``ElementDataFile``) or NRRD (``data file``) header reads its data from.

    Covers a single name, a ``LIST`` of names on the following lines, and a ``printf``-style
    pattern followed by its numbers (the pattern's folder is what matters).
    """
    if path.name.lower().endswith((".mhd", ".mha")):
        fields, tail, _ = _meta_header(path)
        value = fields.get("ElementDataFile", "LOCAL")
    else:
        fields, tail, _ = _nrrd_header(path)
        value = fields.get("data file", fields.get("datafile", ""))
    if not value or value == "LOCAL":
        return []
    if value.split()[0] == "LIST":
        return [line for line in tail if line]
    return [value.split()[0] if "%" in value else value]


def _header_lines(path: Path):
    """Text lines at the start of a file (at most 64 KiB, decoded as Latin-1), without line ends."""
    with open(path, "rb") as handle:
        text = handle.read(_HEADER_BYTES_LIMIT).decode("latin-1")
    return text.split("\n")


def _meta_header(path: Path):
    """``({key: value}, following lines, header bytes)`` of a MetaImage header, up to ``ElementDataFile``
    (where data stored ``LOCAL`` begins)."""
    fields, lines, size = {}, _header_lines(path), 0
    for index, line in enumerate(lines):
        key, separator, value = line.partition("=")
        if not separator:
            break
        fields[key.strip()] = value.strip()
        size += len(line) + 1
        if key.strip() == "ElementDataFile":
            tail = [line.strip() for line in lines[index + 1:]] if value.strip().startswith("LIST") else []
            return fields, tail, size
    return fields, [], size


def _nrrd_header(path: Path):
    """``({field: value}, following lines, header bytes)`` of a NRRD header, up to its blank line
    (header bytes: where attached data begins; None when no blank line ends the header in its
    first 64 KiB, or for ``data file: LIST``, whose names follow that field up to the end of the
    header file).
    """
    fields, lines = {}, _header_lines(path)
    size = len(lines[0]) + 1
    for index, line in enumerate(lines[1:], start=1):
        size += len(line) + 1
        line = line.rstrip("\r")
        if not line:
            return fields, [], size if index < len(lines) - 1 else None
        if line.startswith("#") or ":=" in line:  # comments and key:=value pairs
            continue
        key, separator, value = line.partition(": ")
        if separator:
            fields[key.strip()] = value.strip()
        if key.strip() in ("data file", "datafile") and value.strip().startswith("LIST"):
            return fields, [rest.strip() for rest in lines[index + 1:]], None
    return fields, [], None


# -------------------------------------------------------------------------------- label maps
def check_label_map(image: LabelImage, source: str, policy: InputPolicy) -> None:
    """Refuse an image that is not plausibly a label map, or whose structure names repeat."""
    check_structure_names(image, source)
    if policy.allow_many_labels:
        return
    labels = image.labels()
    hint = ("an intensity image (CT, MR) given as a label map? Pass the segmentation, or allow_many_labels=True "
            "(CLI: --allow-many-labels) if it really is a label map")
    if labels and labels[0] < 0:
        raise ReadError(f"{source}: holds negative values (down to {labels[0]}): {hint}")
    if len(labels) > MAX_LABELS:
        raise ReadError(f"{source}: holds {len(labels)} distinct non-zero values (more than {MAX_LABELS}): {hint}")
    if len(labels) > MAX_PICTURE_LEVELS and (share := _equal_neighbours(image.array)) < MIN_EQUAL_NEIGHBOURS:
        raise ReadError(f"{source}: holds {len(labels)} values that vary from voxel to voxel (only {share:.0%} of "
                        f"neighbours are equal): {hint}")


def _equal_neighbours(array: np.ndarray) -> float:
    """Share of neighbouring voxel pairs along the last axis that hold the same value (one slice
    at a time, to bound the temporary memory)."""
    pairs = array.size - array.size // max(array.shape[-1], 1)
    if pairs == 0:
        return 1.0
    return sum(np.count_nonzero(part[..., 1:] == part[..., :-1]) for part in array) / pairs


def check_structure_names(image: LabelImage, source: str) -> None:
    """Refuse names that would merge structures: one name for several labels, or a name equal to the
    value of an unnamed label (which is then named by its value)."""
    check_unique_names(image.names, source)
    unnamed = {str(label): label for label in image.labels() if label not in image.names}
    clashes = [f"{name!r} (label {label})" for label, name in image.names.items() if name in unnamed]
    if clashes:
        raise ReadError(f"{source}: structure name(s) {'; '.join(clashes)} equal the value of an unnamed label; "
                        "name that label too, or choose another name")


def check_unique_names(names: dict, source: str) -> None:
    """Refuse a ``{label: name}`` map that gives one structure name to several labels."""
    labels_by_name: dict = {}
    for label, name in names.items():
        labels_by_name.setdefault(name, []).append(label)
    repeated = [f"{name!r} (labels {', '.join(map(str, labels))})"
                for name, labels in labels_by_name.items() if len(labels) > 1]
    if repeated:
        raise ReadError(f"{source}: structure names must be unique, but {'; '.join(repeated)} share a name")


def check_threshold(threshold) -> None:
    """Refuse a binarisation threshold that is not a finite real number (``None`` = no threshold)."""
    if threshold is None:
        return
    if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real) or not math.isfinite(threshold):
        raise ValueError(f"threshold must be a finite number, got {threshold!r}")


def check_threshold_separates(binary: np.ndarray, values: np.ndarray, threshold, source: str) -> None:
    """Refuse a threshold at or below every value of a non-constant image (``values``), which made
    every voxel of ``binary`` foreground, the background included."""
    if values.size and binary.all() and values.min() != values.max():
        raise ReadError(f"{source}: threshold {threshold:g} is at or below every value (from {values.min():g} to "
                        f"{values.max():g}), so every voxel, background included, would be foreground; choose a "
                        "threshold above the background value")


# ---------------------------------------------------------------------------- run options
def check_spacing_numbers(spacing, source: str) -> None:
    """Refuse a ``spacing`` argument that is not a sequence of real numbers (mm, array order): text
    (``"125"`` would be read digit by digit), booleans, ``None`` or a single number. Their values
    are checked by :func:`segmetrics.spatial.geometry.check_spacing`."""
    if isinstance(spacing, (str, bytes)) or not isinstance(spacing, Iterable) or not all(
            isinstance(s, numbers.Real) and not isinstance(s, bool) for s in spacing):
        raise ReadError(f"{source}: spacing must be voxel sizes in mm, one number per array axis (e.g. (2.5, 0.8, "
                        f"0.8) for (z, y, x)), got {spacing!r}")


def check_labels(labels) -> None:
    """Refuse a ``labels`` selection that cannot name structures: a bare text (one label is
    ``["liver"]``), booleans, or numbers that are not whole label values (1.5, NaN; also as text)."""
    if labels is None:
        return
    if isinstance(labels, (str, bytes)) or not isinstance(labels, Iterable):
        raise ValueError(f"labels must be a list of label values or structure names (e.g. [1, 2] or ['liver']), "
                         f"got {labels!r}")
    for label in labels:
        number = label if isinstance(label, numbers.Real) else _number(label)
        if isinstance(label, bool) or (number is not None and not float(number).is_integer()):
            raise ValueError(f"labels: {label!r} is not a label value (a whole number) or a structure name")


def check_class_ids(classes) -> None:
    """Refuse frame classes (``{class id: name}`` or class ids) that are not whole label values:
    a bare text, booleans, NaN, 1.5 (such a class can never be found: it was scored as empty)."""
    if classes is None:
        return
    if isinstance(classes, (str, bytes)) or not isinstance(classes, Iterable):
        raise ValueError(f"classes must be class ids or {{class id: name}} (e.g. [1, 2]), got {classes!r}")
    for class_id in classes:
        if isinstance(class_id, bool) or not isinstance(class_id, numbers.Real) or not float(class_id).is_integer():
            raise ValueError(f"classes: {class_id!r} is not a class id (a whole label value)")


def _number(text):
    """``text`` as a float when it reads as a number (including nan and inf), else None."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def check_contour_resolution(resolution_mm) -> None:
    """Refuse a contour-grid pixel size (mm) that is not a positive finite number."""
    if isinstance(resolution_mm, bool) or not isinstance(resolution_mm, numbers.Real) \
            or not 0 < resolution_mm < math.inf:
        raise ReadError(f"contour resolution must be a positive number of mm (CLI: --contour-resolution), "
                        f"got {resolution_mm!r}")


def check_evaluation_options(*, metrics=None, labels=None, threshold=None, resample_to=None, image=None,
                             contour_resolution_mm=None, input_policy=None) -> None:
    """Refuse options of an evaluation before any input is read (``compare``, ``run_batch`` and the
    Slicer logic call this; the CLI's flags end up here through them): unknown or no metrics,
    :func:`check_labels`, :func:`check_threshold`, a ``resample_to`` or ``image`` path that does not
    exist, a contour resolution that is not a positive number of mm, an ``input_policy`` that is not
    an :class:`InputPolicy`. Raises ``ValueError`` (:class:`ReadError` for paths) in one line."""
    from ..registry import resolve_selection

    check_threshold(threshold)
    check_labels(labels)
    if metrics is not None and not isinstance(metrics, (str, Iterable)):
        raise ValueError(f"metrics must be metric or group names (e.g. 'dice,hd95' or ['overlap']), got {metrics!r}")
    if metrics is not None and not resolve_selection(metrics):  # unknown names raise ValueError
        raise ValueError(f"metrics {metrics!r}: no metric selected; give metric or group names")
    for option, path in (("resample_to", resample_to), ("image", image)):
        if path is not None and not (option == "resample_to" and path == "reference") and not Path(path).exists():
            expected = "'reference' or " if option == "resample_to" else ""
            raise ReadError(f"{option} {path}: no such image folder or file (expected {expected}a DICOM series "
                            "folder or an image file)")
    if contour_resolution_mm is not None:
        check_contour_resolution(contour_resolution_mm)
    if input_policy is not None and not isinstance(input_policy, InputPolicy):
        raise ValueError(f"input_policy must be segmetrics.inputs.io.InputPolicy, got {input_policy!r}")
