"""MetaImage (``.mha`` with its data, ``.mhd`` header with a data file).

The header's own checks (:func:`check`), read from its ``key = value`` lines before ITK reads the
file: data files outside the header's folder (unless allowed), one voxel size per axis (ITK
cannot parse the header otherwise), no voxel size at all (unless allowed), an origin that is not a
finite position, raw or zlib data of another length than the header declares, or damaged.
"""
from __future__ import annotations

import math
import re
import zlib
from pathlib import Path

import numpy as np

from ...spatial.geometry import LabelImage
from ..validation import InputPolicy, ReadError
from . import files

SUFFIXES = (".mha", ".mhd")
#: Bytes per element of the MetaImage element types whose size does not depend on the platform.
ELEMENT_BYTES = {"MET_CHAR": 1, "MET_UCHAR": 1, "MET_SHORT": 2, "MET_USHORT": 2, "MET_INT": 4, "MET_UINT": 4,
                 "MET_FLOAT": 4, "MET_LONG_LONG": 8, "MET_ULONG_LONG": 8, "MET_DOUBLE": 8}
#: A MetaImage header starts with one of these keys (``ObjectType`` as ITK writes it).
_FIRST_KEY = re.compile(rb"\s*(ObjectType|NDims|ObjectSubType|Comment)\s*=")


def recognises(head: bytes) -> bool:
    """Whether a file's first bytes are a MetaImage header (a ``key = value`` line of its keys)."""
    return _FIRST_KEY.match(head) is not None


def read(path: Path, policy: InputPolicy, threshold=None) -> LabelImage:
    """The image of a MetaImage file, its header checked first (:func:`check`)."""
    return files.read_with_itk(path, check(path, policy, defer_data_check=True), "MetaImageIO")


def header(path: Path):
    """``({key: value}, following lines, header bytes)`` of a MetaImage header, up to ``ElementDataFile``
    (where data stored ``LOCAL`` begins)."""
    fields, lines, size = {}, files.header_lines(path), 0
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


def data_file_names(fields: dict, tail: list) -> list:
    """File names a header reads its data from (``ElementDataFile``): none for ``LOCAL`` data, a
    single name, a ``LIST`` of names on the following lines (``tail``), or a ``printf``-style
    pattern followed by its numbers (the pattern's folder is what matters)."""
    value = fields.get("ElementDataFile", "LOCAL")
    if not value or value == "LOCAL":
        return []
    if value.split()[0] == "LIST":
        return [line for line in tail if line]
    return [value.split()[0] if "%" in value else value]


def check(path: Path, policy: InputPolicy, defer_data_check: bool = False) -> files.VoxelCheck | None:
    """MetaImage data files outside the header's folder (unless allowed), voxel sizes
    (``ElementSpacing``, else ``ElementSize``: one per ``NDims`` axis; a
    header with neither needs ``policy.assume_unit_spacing``), origin and data length.

    The data length is checked for data stored ``LOCAL`` or in one file, raw (element count ×
    element size) or compressed (``CompressedDataSize``): ITK reports data cut short only as
    "No such file or directory". ``defer_data_check``: a zlib stream exactly ``CompressedDataSize``
    long is returned as a :class:`VoxelCheck` (its Adler-32) instead of being decompressed here.
    """
    fields, tail, header_size = header(path)
    if not policy.allow_external_data:
        files.check_data_files(path, data_file_names(fields, tail))
    dimensions = files.whole_numbers(path, "MetaImage NDims", fields.get("NDims", ""), minimum=1)
    for field in ("ElementSpacing", "ElementSize"):  # ITK cannot parse the header with a wrong count
        count = len(fields.get(field, "").split())
        if field in fields and dimensions and count != dimensions[0]:
            raise ReadError(f"{path}: MetaImage {field} ({fields[field]}) has {count} values but NDims is "
                            f"{dimensions[0]}: one voxel size per axis is needed (a damaged header?)")
    spacing = fields.get("ElementSpacing", fields.get("ElementSize"))
    if spacing:
        files.check_header_spacing(path, "MetaImage ElementSpacing", files.header_floats(spacing.split()))
    elif "DimSize" in fields and not policy.assume_unit_spacing:  # without DimSize ITK refuses the file itself
        files.refuse_unit_spacing(path, "'ElementSpacing' or 'ElementSize'")
    for field in ("Offset", "Origin", "Position"):  # synonyms; ITK reads a value it cannot parse as 0
        if field in fields and not all(math.isfinite(x) for x in files.header_floats(fields[field].split())):
            raise ReadError(f"{path}: MetaImage {field} ({fields[field]}) is not a finite position in mm")
    source = fields.get("ElementDataFile", "")
    if not source or source.split()[0] == "LIST" or "%" in source:
        return
    element = ELEMENT_BYTES.get(fields.get("ElementType", ""))
    sizes = files.whole_numbers(path, "MetaImage DimSize", fields.get("DimSize", ""), minimum=1)
    channels = files.whole_numbers(path, "MetaImage ElementNumberOfChannels", fields.get("ElementNumberOfChannels", "1"),
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
    skip = (files.whole_numbers(path, "MetaImage HeaderSize", fields.get("HeaderSize", ""), minimum=-1) or [0])[0]
    if skip < 0:
        return  # data at the end of the file: where it starts is not known
    available = data.stat().st_size - offset - skip
    if fields.get("CompressedData", "False").lower() == "true":
        declared = (files.whole_numbers(path, "MetaImage CompressedDataSize", fields.get("CompressedDataSize", ""),
                                   minimum=0) or [0])[0]
        if available < declared:
            files.check_data_size(data, path, available, declared)
        adler = _zlib_adler32(data, offset + skip, declared) if defer_data_check and available == declared else None
        if adler is not None:
            return files.VoxelCheck(data, 0, adler, offset + skip, "adler32", expected, path)
        available = files.inflated_length(data, offset + skip)
    files.check_data_size(data, path, available, expected)
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
