"""NRRD (``.nrrd``, detached ``.nhdr``) and 3D Slicer segmentations (``.seg.nrrd``).

The header's own checks (:func:`check`), read from its text before ITK or slicerio read the file:
data files outside the header's folder (unless allowed), voxel sizes ITK would replace by 1 mm (a
spatial axis without a direction, no voxel size at all unless allowed, ``spacings`` in a
``.seg.nrrd``, which slicerio ignores), raw or gzip data of another length than ``sizes`` x ``type``
declare or damaged, ASCII data that is not numbers. A ``.seg.nrrd`` (by name, or by the
``Segment0_`` fields Slicer writes) keeps its segment names (:func:`read_segmentation`).
"""
from __future__ import annotations

import math
import re
from itertools import takewhile
from pathlib import Path

import numpy as np

from ...spatial.geometry import LabelImage, distinct_values
from ..validation import InputPolicy, ReadError, check_unique_names
from . import files

SUFFIXES = (".nrrd", ".nhdr")


def recognises(head: bytes) -> bool:
    """Whether a file's first bytes are a NRRD header (magic ``NRRD000``)."""
    return head.startswith(b"NRRD000")


def read(path: Path, policy: InputPolicy, threshold=None) -> LabelImage:
    """The image of a NRRD file, its header checked first (:func:`check`); a segmentation
    (:func:`is_segmentation`) with its segment names."""
    voxel_check = check(path, policy, defer_data_check=True)
    if is_segmentation(path):
        return read_segmentation(path, voxel_check)
    return files.read_with_itk(path, voxel_check, "NrrdImageIO")


def is_segmentation(path: Path) -> bool:
    """Whether a NRRD file is a 3D Slicer segmentation: named ``.seg.nrrd`` or describing segments
    in its header (``Segment0_ID:=...``)."""
    header_text = takewhile(lambda line: line.strip("\r"), files.header_lines(path))  # up to the blank line
    return path.name.lower().endswith(".seg.nrrd") or any(line.startswith("Segment0_") for line in header_text)


def header(path: Path):
    """``({field: value}, following lines, header bytes)`` of a NRRD header, up to its blank line
    (header bytes: where attached data begins; None when no blank line ends the header in its
    first 64 KiB, or for ``data file: LIST``, whose names follow that field up to the end of the
    header file).
    """
    fields, lines = {}, files.header_lines(path)
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



def check(path: Path, policy: InputPolicy, defer_data_check: bool = False) -> files.VoxelCheck | None:
    """A NRRD header's data files (:func:`data_file_names`), voxel sizes (:func:`_check_spacing`) and
    data (:func:`_check_data`)."""
    fields, tail, header_size = header(path)
    if not policy.allow_external_data:
        files.check_data_files(path, data_file_names(fields, tail))
    _check_spacing(path, fields, policy)
    return _check_data(path, fields, header_size, defer_data_check)


def data_file_names(fields: dict, tail: list) -> list:
    """File names a detached header reads its data from (``data file``): a single name, a ``LIST``
    of names on the following lines (``tail``), or a ``printf``-style pattern followed by its
    numbers (the pattern's folder is what matters)."""
    value = fields.get("data file", fields.get("datafile", ""))
    if not value:
        return []
    if value.split()[0] == "LIST":
        return [line for line in tail if line]
    return [value.split()[0] if "%" in value else value]


def _check_spacing(path: Path, fields: dict, policy: InputPolicy) -> None:
    """NRRD voxel sizes from ``spacings`` or the lengths of ``space directions``; ``none`` is allowed
    only for non-spatial axes (a ``.seg.nrrd``'s layers), not in place of a 2-D or 3-D axis; a
    ``.seg.nrrd`` needs ``space directions`` (slicerio ignores ``spacings``). A header with
    neither field (ITK reads 1 mm voxels) needs ``policy.assume_unit_spacing``."""
    if "space directions" in fields:
        vectors = re.findall(r"\(([^)]*)\)", fields["space directions"])
        lengths = [math.hypot(*files.header_floats(v.split(","))) for v in vectors]
        spatial = min(len(_domain_axes(fields)), 3)
        if len(vectors) < spatial:
            raise ReadError(f"{path}: NRRD space directions ({fields['space directions']}) give no voxel size for "
                            f"{spatial - len(vectors)} of its {spatial} axes, which would be read as 1 mm")
        files.check_header_spacing(path, "NRRD space directions of length", lengths)
    elif "spacings" in fields and is_segmentation(path):
        raise ReadError(f"{path}: gives its voxel size in NRRD 'spacings', which the .seg.nrrd reader (slicerio) "
                        "ignores: it would read 1 mm voxels; save it with 'space directions' (as 3D Slicer does)")
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



def _check_segment(path: Path, name: str, layer: int, value: int, declared: list) -> None:
    """Refuse a ``.seg.nrrd`` segment whose voxels cannot be told: a layer the file does not have,
    label value 0 (the background) or a value another segment of its layer already has."""
    if not 0 <= layer < len(declared):
        raise ReadError(f"{path}: segment {name!r} is in layer {layer}, but the file has {len(declared)} layer(s)")
    if value < 1:
        raise ReadError(f"{path}: segment {name!r} has label value {value}, which is the background")
    if value in declared[layer]:
        raise ReadError(f"{path}: segments {declared[layer][value]!r} and {name!r} share label value {value} in layer "
                        f"{layer}, so their voxels cannot be told apart")


def read_segmentation(path: Path, voxel_check: files.VoxelCheck | None = None) -> LabelImage:
    """A Slicer ``.seg.nrrd``: segment names kept; label values kept for single-layer files.
    ``voxel_check`` (from :func:`check`) is verified on the voxels as read.

    Segments of a multi-layer file are numbered 1..N in file order (their label values repeat
    across layers); a segment overlapping an earlier one is kept in ``segment_masks``.
    """
    try:
        import slicerio
    except ImportError as error:  # a dependency of the pip package, not bundled with 3D Slicer
        raise ReadError(f"{path}: reading a .seg.nrrd needs the slicerio package (pip install slicerio)") from error
    try:
        segmentation = slicerio.read_segmentation(str(path))
    except Exception as error:  # slicerio and pynrrd raise many types for one cause
        if voxel_check is not None:
            voxel_check.check_stream()  # a damaged gzip stream is named as such
        raise ReadError(f"{path}: cannot be read as an image ({files.reason(error)})") from error
    voxels = np.asarray(segmentation["voxels"])
    if voxel_check is not None:
        voxel_check.verify(voxels.T)  # pynrrd's ([layer,] i, j, k) array, transposed: the file's order
    ijk_to_lps = np.asarray(segmentation["ijkToLPS"], dtype=float)
    axes = ijk_to_lps[:3, :3]
    spacing_ijk = np.linalg.norm(axes, axis=0)
    direction = (axes / spacing_ijk).ravel()
    segments = segmentation["segments"]
    layered = voxels.ndim == 4
    # slicerio arrays are ([layer,] i, j, k); ours are (k, j, i).
    if layered:
        layers = np.transpose(voxels, (0, 3, 2, 1))
    else:
        layers = np.transpose(voxels, (2, 1, 0))[np.newaxis]
    names, masks = {}, {}
    array = np.zeros(layers.shape[1:], dtype=np.int32)
    declared = [{} for _ in layers]  # per layer: {label value: segment name}
    for number, segment in enumerate(segments, start=1):
        name = segment.get("name", segment.get("id", str(number)))
        layer, value = int(segment.get("layer", 0) or 0), int(segment["labelValue"])
        _check_segment(path, name, layer, value, declared)
        declared[layer][value] = name
        mask = layers[layer] == value
        label = number if layered else value
        names[label] = name
        if np.any(array[mask] != 0):
            masks[label] = mask  # overlaps an earlier segment: keep it separately
        else:
            array[mask] = label
    for layer, (voxels_of_layer, values) in enumerate(zip(layers, declared)):
        undeclared = [int(v) for v in distinct_values(voxels_of_layer) if v != 0 and int(v) not in values]
        if undeclared:
            raise ReadError(f"{path}: layer {layer} holds voxels of value(s) {', '.join(map(str, undeclared[:10]))} "
                            "that no segment declares (a damaged or hand-edited file?); they would be left out")
    check_unique_names(names, str(path))
    image = LabelImage(array, tuple(spacing_ijk[::-1]), tuple(ijk_to_lps[:3, 3]), tuple(direction), names)
    image.segment_masks = masks
    return image
