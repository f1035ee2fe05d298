"""What the file readers share: header text, compressed streams and data lengths, and reading
voxels with ITK.

ITK zero-fills data cut short, drops data beyond what its header declares, reads a damaged gzip
stream as zeros and replaces invalid voxel sizes by 1 mm; the helpers here let each format's
reader refuse such files in one line. :class:`VoxelCheck` verifies a compressed stream's checksum
on the voxels as the reader decompressed them, so that a file is decompressed once.
"""
from __future__ import annotations

import gzip
import math
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...spatial.geometry import LabelImage, check_spacing
from ..validation import ReadError

GZIP_MAGIC = b"\x1f\x8b"
#: Bytes of a file's start that are searched for a text header (NRRD, MetaImage).
HEADER_BYTES_LIMIT = 1 << 16


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
        start = checksum(read_start(self.path, self.offset))
        if checksum(np.ascontiguousarray(voxels).view(np.uint8), start) != self.crc:
            self.check_stream()

    def check_stream(self) -> None:
        """Read the stream to its end: :class:`ReadError` when it is cut short or damaged, or (with
        ``length``) of another length than its header declares."""
        inflated = inflated_length(self.path, self.stream_start)
        if self.length is not None:
            check_data_size(self.path, self.header or self.path, inflated, self.length)


def gzip_trailer(path: Path) -> tuple:
    """``(CRC-32, length mod 2**32)`` of the decompressed data as a gzip file's last 8 bytes
    declare them (``(None, None)`` for a file too short to hold a trailer)."""
    with open(path, "rb") as handle:
        if handle.seek(0, 2) < 8:
            return None, None
        handle.seek(-8, 2)
        crc, length = np.frombuffer(handle.read(8), "<u4")
    return int(crc), int(length)


def data_length(path: Path) -> int:
    """Bytes a file holds, decompressed; a gzip stream is read to its end (:func:`_inflated_length`),
    so a stream cut short, damaged (CRC, length) or followed by garbage is refused here instead of
    being zero-filled by ITK."""
    return inflated_length(path, 0) if is_gzip(path) else path.stat().st_size


def read_start(path: Path, size: int) -> bytes:
    """The first ``size`` bytes of a file, decompressed when it is gzipped."""
    try:
        with (gzip.open if is_gzip(path) else open)(path, "rb") as handle:
            return handle.read(size)
    except (EOFError, OSError, zlib.error) as error:
        raise damaged(path, error) from error


def is_gzip(path: Path) -> bool:
    with open(path, "rb") as handle:
        return handle.read(2) == GZIP_MAGIC


def damaged(path: Path, error: Exception) -> ReadError:
    return ReadError(f"{path}: compressed data is cut short or damaged ({error}); the file was probably not "
                     "copied or downloaded completely")


def check_data_size(data: Path, header: Path, available: int, expected: int,
                     what: str = "bytes of image data") -> None:
    """Refuse image data shorter or longer than its header declares (``what``: the unit counted)."""
    if available == expected:
        return
    declarer = "its header" if data == header else f"the header {header.name}"
    problem = ("the file is cut short (not copied or downloaded completely?)" if available < expected else
               "the data is longer than its header says (a header of another image, or data appended?)")
    raise ReadError(f"{data}: holds {available} {what} where {declarer} declares {expected}; {problem}")


def inflated_length(path: Path, offset: int) -> int:
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
                if not rest.startswith(GZIP_MAGIC):
                    break
        except (EOFError, zlib.error) as error:
            raise damaged(path, error) from error
    if rest.strip(b"\0"):
        raise ReadError(f"{path}: holds {len(rest)} bytes after the end of its compressed data (garbage appended, "
                        "or two files joined?)")
    return total


def whole_numbers(path: Path, what: str, text: str, minimum: int) -> list:
    """The whole numbers of a header field (white-space separated); ReadError naming the field when
    one is not a whole number of at least ``minimum``."""
    numbers = header_floats(text.split())
    if not all(math.isfinite(n) and n.is_integer() and n >= minimum for n in numbers):
        raise ReadError(f"{path}: {what} ({text}) must be whole numbers of at least {minimum}; a damaged header?")
    return [int(n) for n in numbers]


def check_header_spacing(path: Path, what: str, values) -> None:
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


def refuse_unit_spacing(path: Path, fields: str) -> None:
    """Refuse a header that states no voxel size (``fields``: the ones it lacks)."""
    raise ReadError(f"{path}: states no voxel size (no {fields}): ITK would read 1 mm voxels; add the spacing to the "
                    "header, or pass --assume-unit-spacing (Python: InputPolicy(assume_unit_spacing=True)) to "
                    "measure in voxel units")


def check_data_files(path: Path, names: list) -> None:
    """Refuse a header whose data file(s) ``names`` lie outside its own folder (symbolic links resolved)."""
    folder = path.parent.resolve()
    for name in names:
        target = (path.parent / name).resolve()
        if not target.is_relative_to(folder):
            raise ReadError(f"{path}: its data file {name} lies outside the header's folder {folder}; "
                            "allow it with allow_external_data=True (CLI: --allow-external-data) if you trust it")


def header_lines(path: Path):
    """Text lines at the start of a file (at most 64 KiB, decoded as Latin-1), without line ends."""
    with open(path, "rb") as handle:
        text = handle.read(HEADER_BYTES_LIMIT).decode("latin-1")
    return text.split("\n")



def read_with_itk(path: Path, voxel_check: VoxelCheck | None = None, image_io: str = "") -> LabelImage:
    """Read an image file with SimpleITK (one component per voxel, :func:`read_itk_image`);
    ``voxel_check`` (from the format's header check) is verified on the voxels as read."""
    image = read_itk_image(path, voxel_check, image_io)
    if image.GetNumberOfComponentsPerPixel() != 1:
        raise ReadError(f"{path}: has {image.GetNumberOfComponentsPerPixel()} components per voxel, not a label map")
    try:
        label_image = LabelImage.from_sitk(image)
    except ValueError as error:  # geometry refused (spacing, origin, direction)
        raise ReadError(f"{path}: {error}") from error
    if voxel_check is not None:
        voxel_check.verify(label_image.array)
    return label_image


def read_itk_image(path: Path, voxel_check: VoxelCheck | None = None, image_io: str = ""):
    """The SimpleITK image of a file, as ITK reads it; when ITK fails, ``voxel_check`` names a
    damaged stream. ``image_io`` names ITK's reader of the format (e.g. ``"NrrdImageIO"``), so that
    the content decides and not the file's name; by default ITK picks one."""
    import SimpleITK as sitk

    try:
        return sitk.ReadImage(str(path), imageIO=image_io)
    except Exception as error:  # SimpleITK raises RuntimeError, and others for one cause
        if voxel_check is not None:
            voxel_check.check_stream()  # a damaged gzip stream is named as such
        raise ReadError(f"{path}: cannot be read as an image ({reason(error)})") from error


def reason(error: Exception) -> str:
    """The informative line of a reader's exception: the last line of NRRD's own trace (``[nrrd] ...``,
    which names the cause), else the line SimpleITK puts after ``ERROR:``."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    teem = [line.removeprefix("[nrrd]").strip() for line in lines if line.startswith("[nrrd]")]
    detail = next((line.split("ERROR:", 1)[1].strip() for line in lines if "ERROR:" in line), None)
    return (teem[-1] if teem else detail) or (lines[0] if lines else type(error).__name__)
