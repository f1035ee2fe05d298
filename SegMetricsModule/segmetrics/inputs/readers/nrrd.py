"""NRRD (``.nrrd``, detached ``.nhdr``): the header (:func:`header`) and its own checks.

The header's own checks (:func:`check`), read from its text before ITK reads the file: data files
outside the header's folder (unless allowed), voxel sizes ITK would replace by 1 mm (a spatial
axis without a direction, no voxel size at all unless allowed), raw or gzip data of another length
than ``sizes`` x ``type`` declare or damaged, ASCII data that is not numbers. A NRRD whose header
describes segments (:func:`is_segmentation`) is a 3D Slicer segmentation, read by :mod:`.seg_nrrd`.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...spatial.geometry import LabelImage
from ..validation import InputPolicy, ReadError
from . import files

SUFFIXES = (".nrrd", ".nhdr")
#: Bytes a header may take up to its blank line (3D Slicer writes about 1 KiB per segment).
HEADER_LIMIT = 1 << 24
#: A key of 3D Slicer's segment description (``Segment0_ID``, ``Segment12_LabelValue``, ...):
#: the segment's index and the name of its property.
SEGMENT_KEY = re.compile(r"Segment(0|[1-9][0-9]*)_(.+)")


@dataclass(frozen=True)
class Header:
    """A NRRD header up to its blank line.

    ``fields``: the ``field: value`` lines; ``key_values``: the ``key:=value`` lines (UTF-8, else
    Latin-1; NRRD's escapes ``\\n`` and ``\\\\`` undone); ``listed_files``: the lines after
    ``data file: LIST``; ``size``: bytes up to and with the blank line, where attached data begins
    (None without a blank line: a detached header, or one longer than :data:`HEADER_LIMIT`).
    """

    fields: dict
    key_values: dict = field(default_factory=dict)
    listed_files: list = field(default_factory=list)
    size: int | None = None


def recognises(head: bytes) -> bool:
    """Whether a file's first bytes are a NRRD header (magic ``NRRD000``)."""
    return head.startswith(b"NRRD000")


def read(path: Path, policy: InputPolicy, threshold=None) -> LabelImage:
    """The image of a NRRD file, its header checked first (:func:`check`)."""
    voxel_check = check(path, policy, defer_data_check=True)
    return files.read_with_itk(path, voxel_check, "NrrdImageIO")


def is_segmentation(path: Path) -> bool:
    """Whether a NRRD file is a 3D Slicer segmentation: its header describes segments
    (``Segment0_ID:=...``), whatever the file's name. A ``.seg.nrrd`` without any segment is an
    image, as 3D Slicer reads it."""
    return any(SEGMENT_KEY.fullmatch(key) for key in header(path).key_values)


def header(path: Path) -> Header:
    """The header of a NRRD file (:class:`Header`), read line by line up to its blank line."""
    fields, key_values = {}, {}
    with open(path, "rb") as handle:
        handle.readline()  # the magic, NRRD000x
        while handle.tell() < HEADER_LIMIT:
            raw = handle.readline(HEADER_LIMIT)
            line = raw.rstrip(b"\n").rstrip(b"\r")
            if not raw or not line:
                return Header(fields, key_values, [], handle.tell() if raw else None)
            if line.startswith(b"#"):
                continue
            name, separator, value = line.decode("latin-1").partition(": ")
            if ":=" in name:
                key, _, value = line.partition(b":=")
                key_values[_key_value_text(key)] = _key_value_text(value)
            elif separator:
                fields[name.strip()] = value.strip()
                if name.strip() in ("data file", "datafile") and value.strip().startswith("LIST"):
                    listed = handle.read(HEADER_LIMIT).decode("latin-1").split("\n")
                    return Header(fields, key_values, [entry.strip() for entry in listed])
    return Header(fields, key_values)


def _key_value_text(raw: bytes) -> str:
    """A key or value of a ``key:=value`` line as text: UTF-8 (3D Slicer's segment names), else
    Latin-1; NRRD's escapes ``\\n`` (a line break) and ``\\\\`` (a backslash) undone."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
    return re.sub(r"\\([n\\])", lambda escape: "\n" if escape[1] == "n" else "\\", text)


def check(path: Path, policy: InputPolicy, defer_data_check: bool = False) -> files.VoxelCheck | None:
    """A NRRD header's data files (:func:`data_file_names`), voxel sizes (:func:`_check_spacing`) and
    data (:func:`_check_data`)."""
    found = header(path)
    if not policy.allow_external_data:
        files.check_data_files(path, data_file_names(found.fields, found.listed_files))
    _check_spacing(path, found.fields, policy)
    return _check_data(path, found.fields, found.size, defer_data_check)


def data_file_names(fields: dict, listed_files: list) -> list:
    """File names a detached header reads its data from (``data file``): a single name, a ``LIST``
    of names on the following lines (``listed_files``), or a ``printf``-style pattern followed by its
    numbers (the pattern's folder is what matters)."""
    value = fields.get("data file", fields.get("datafile", ""))
    if not value:
        return []
    if value.split()[0] == "LIST":
        return [line for line in listed_files if line]
    return [value.split()[0] if "%" in value else value]


def _check_spacing(path: Path, fields: dict, policy: InputPolicy) -> None:
    """NRRD voxel sizes from ``spacings`` or the lengths of ``space directions``; ``none`` is allowed
    only for non-spatial axes (a ``.seg.nrrd``'s layers), not in place of a 2-D or 3-D axis. A
    header with neither field (ITK reads 1 mm voxels) needs ``policy.assume_unit_spacing``."""
    if "space directions" in fields:
        vectors = re.findall(r"\(([^)]*)\)", fields["space directions"])
        lengths = [math.hypot(*files.header_floats(v.split(","))) for v in vectors]
        spatial = min(len(_domain_axes(fields)), 3)
        if len(vectors) < spatial:
            raise ReadError(f"{path}: NRRD space directions ({fields['space directions']}) give no voxel size for "
                            f"{spatial - len(vectors)} of its {spatial} axes, which would be read as 1 mm")
        files.check_header_spacing(path, "NRRD space directions of length", lengths)
    elif "spacings" in fields:
        files.check_header_spacing(path, "NRRD spacings", files.header_floats(fields["spacings"].split()))
    elif "sizes" in fields and not policy.assume_unit_spacing:  # without sizes ITK refuses the file itself
        files.refuse_unit_spacing(path, "'space directions' or 'spacings'")


def _domain_axes(fields: dict) -> list:
    """Indices of a NRRD's domain (sample position) axes: those whose ``kinds`` entry is
    ``domain``, ``space``, ``time`` or unknown (``???``, ``none``), as teem and ITK count them;
    every axis when the header has no ``kinds``. The others (``vector``, ``RGB-color``, ``list``
    ...) hold a voxel's components or a ``.seg.nrrd``'s layers, and have no direction."""
    axes = range(len(fields.get("sizes", "").split()))
    kinds = fields.get("kinds", "").lower().split()
    if len(kinds) != len(axes):
        return list(axes)
    return [axis for axis in axes if kinds[axis] in ("domain", "space", "time", "???", "none")]


def _check_data(path: Path, fields: dict, header_size: int | None,
                defer_data_check: bool = False) -> files.VoxelCheck | None:
    """The data of a NRRD file (attached, or one detached file): raw data exactly as long as
    ``sizes`` x ``type`` declare, a gzip stream intact (ITK reads a damaged one as zeros) and of that
    length, ASCII data of that many numbers (ITK crashes on long unparsable text). Data read with a
    byte or line skip, split over several files or in other encodings is left to ITK.
    ``defer_data_check``: a gzip stream whose trailer declares that length is returned as a
    :class:`VoxelCheck` instead of being decompressed here."""
    sizes = files.whole_numbers(path, "NRRD sizes", fields.get("sizes", ""), minimum=1)
    element = _element_bytes(fields.get("type", ""))
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
        files.check_data_size(data, path, data.stat().st_size - offset, count * element)
    elif encoding in ("gzip", "gz"):
        crc, length = files.gzip_trailer(data)
        if defer_data_check and length == count * element % (1 << 32):  # a stream cut short ends otherwise
            return files.VoxelCheck(data, 0, crc, offset)
        files.check_data_size(data, path, files.inflated_length(data, offset), count * element)
    elif encoding in ("ascii", "text", "txt"):
        _check_ascii_numbers(data, path, offset, count)
    return None


def _element_bytes(type_name: str) -> int | None:
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
    numbers = files.header_floats(token.decode("latin-1") for token in tokens)
    bad = next((token for token, number in zip(tokens, numbers) if math.isnan(number)
                and token.lower().lstrip(b"+-") != b"nan"), None)
    if bad is not None:
        raise ReadError(f"{data}: ASCII image data holds {bad[:20].decode('latin-1')!r}, which is not a number "
                        "(binary data under an ASCII header?)")
    files.check_data_size(data, header, len(tokens), count, "numbers of ASCII image data")
