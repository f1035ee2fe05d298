"""3D Slicer segmentations (``.seg.nrrd``), read with the NRRD reader's header and checks
(:mod:`.nrrd`) and ITK's voxels; no other package.

The file is a NRRD whose header describes segment i = 0, 1, ... in ``Segment<i>_<key>:=<value>``
pairs (:func:`segments`): ``ID``; ``Name`` (the structure name, which pairs the structures; the ID
when absent); ``LabelValue``, the value of its voxels in ``Layer``; ``Extent``, the box that holds
them, ``i0 i1 j0 j1 k0 k1`` in the file's voxel indices (empty when a minimum exceeds its maximum).
``Color``, ``Tags`` and the ``Segmentation_*`` pairs are for display and provenance: they change
no voxel and are not read.

The voxels are 3-D (one layer) or 4-D with the layers first (``kinds: list domain domain domain``):
segments that overlap lie in different layers. Positions are patient LPS mm; a header in
``right-anterior-superior`` space is turned into LPS by ITK, as for any NRRD.

Refused in one line (:func:`layout`, :func:`segments`, :func:`read`): other dimensions,
kinds or spaces; segment indices with a gap or without an ID (3D Slicer stops at the first
missing ID); a segment without a label value or a layer, in a layer the file does not have, of
label value 0, or of the label value of another segment of its layer; an extent that is not six
whole numbers or lies outside the grid; voxels of a segment outside its extent (3D Slicer drops
them, slicerio keeps them); voxel values that no segment declares; one name for two segments.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...spatial.geometry import LabelImage, distinct_values
from ..validation import InputPolicy, ReadError, check_unique_names
from . import files, nrrd

#: The ``space`` values read; ITK turns RAS positions into LPS.
SPACES = ("left-posterior-superior", "right-anterior-superior")
#: ``kinds`` of a spatial axis.
SPATIAL_KINDS = ("domain", "space")


@dataclass(frozen=True)
class Segment:
    """One segment of the header: its structure ``name``, the ``label_value`` of its voxels in
    ``layer``, and ``extent``, the box that holds them as ``(min, max)`` voxel indices per axis in
    array order (z, y, x), both included; None when the header gives none (the whole grid)."""

    name: str
    label_value: int
    layer: int
    extent: tuple | None

    def is_empty(self) -> bool:
        """Whether the extent holds no voxel (a minimum above its maximum, as 3D Slicer writes it)."""
        return self.extent is not None and any(low > high for low, high in self.extent)

    def box(self) -> tuple | None:
        """The extent as array slices (the whole grid without an extent); None when it is empty."""
        if self.extent is None:
            return (slice(None),) * 3
        return None if self.is_empty() else tuple(slice(low, high + 1) for low, high in self.extent)


def read(path: Path, policy: InputPolicy, threshold=None) -> LabelImage:
    """The label image of a ``.seg.nrrd``: the NRRD header's checks (:func:`.nrrd.check`), its
    layout (:func:`layout`) and segments (:func:`segments`), then the voxels read by ITK.

    A single-layer file keeps its label values. The segments of a multi-layer file are numbered
    1..N in file order (their label values repeat across layers); a segment that overlaps an
    earlier one is kept in ``segment_masks``. Each segment is looked for within its extent only;
    a count per layer shows that no voxel lies outside. ``threshold`` does not apply.
    """
    import SimpleITK as sitk

    voxel_check = nrrd.check(path, policy, defer_data_check=True)
    header = nrrd.header(path)
    layered, shape = layout(path, header.fields)
    described = segments(path, header.key_values, shape)
    image = files.read_itk_image(path, voxel_check, "NrrdImageIO")
    voxels = sitk.GetArrayFromImage(image)  # (z, y, x), or (z, y, x, layer): the file's order of bytes
    if voxel_check is not None:
        voxel_check.verify(voxels)
    layers = np.moveaxis(voxels, -1, 0) if voxels.ndim == 4 else voxels[np.newaxis]
    _check_undeclared_values(path, layers, described)
    array = np.zeros(shape[1:], dtype=np.int32) if layered else layers[0]
    names, overlapping, inside = {}, {}, [0] * len(layers)  # inside: voxels found within their extents, per layer
    for number, segment in enumerate(described, start=1):
        label = number if layered else segment.label_value
        names[label] = segment.name
        box = segment.box()
        if box is None:
            continue
        found = layers[segment.layer][box] == segment.label_value
        inside[segment.layer] += np.count_nonzero(found)
        if not layered:
            continue
        target = array[box]
        if np.any(target[found]):  # overlaps an earlier segment: kept apart
            overlapping[label] = np.zeros(shape[1:], bool)
            overlapping[label][box] = found
        else:
            target[found] = label
    for layer, count in enumerate(inside):
        if np.count_nonzero(layers[layer]) != count:
            _refuse_voxels_outside_extents(path, layers[layer], [s for s in described if s.layer == layer])
    check_unique_names(names, str(path))
    try:
        label_image = LabelImage(array, image.GetSpacing()[::-1], image.GetOrigin(), image.GetDirection(), names)
    except ValueError as error:  # geometry refused (spacing, origin, direction)
        raise ReadError(f"{path}: {error}") from error
    label_image.segment_masks = overlapping
    return label_image


def layout(path: Path, fields: dict) -> tuple:
    """``(layered, shape)`` of a segmentation's voxels from its header: whether they are 4-D with
    the layers first, and their shape ``(layers, z, y, x)``. Refuses other dimensions, axis kinds
    and spaces."""
    sizes = files.whole_numbers(path, "NRRD sizes", fields.get("sizes", ""), minimum=1)
    layered = len(sizes) == 4
    kinds = fields.get("kinds", "").lower().split()
    if len(sizes) == 4:
        if len(kinds) != 4 or kinds[0] != "list" or not set(kinds[1:]) <= set(SPATIAL_KINDS):
            raise ReadError(f"{path}: a 4-D segmentation must hold its layers on its first axis ('kinds: list domain "
                            f"domain domain'), not kinds {fields.get('kinds', '(none)')!r}")
    elif len(sizes) == 3:
        if kinds and not set(kinds) <= set(SPATIAL_KINDS):
            raise ReadError(f"{path}: a 3-D segmentation must have three spatial axes, not kinds {fields['kinds']!r}")
        sizes = [1, *sizes]
    else:
        raise ReadError(f"{path}: a segmentation is 3-D (one layer) or 4-D (layers first), not of {len(sizes)} "
                        "dimension(s)")
    space = fields.get("space", SPACES[0]).lower()
    if space not in SPACES:
        raise ReadError(f"{path}: a segmentation in space {fields['space']!r} is not read; 3D Slicer writes "
                        f"{SPACES[0]!r} ({SPACES[1]!r} is read too)")
    return layered, (sizes[0], *reversed(sizes[1:]))


def segments(path: Path, key_values: dict, shape: tuple) -> list:
    """The :class:`Segment` list a header's ``Segment<i>_<key>`` pairs describe, i = 0, 1, ... in
    order, checked against the voxels' ``shape`` ``(layers, z, y, x)`` (:func:`layout`)."""
    properties: dict = {}
    for key, value in key_values.items():
        match = nrrd.SEGMENT_KEY.fullmatch(key)
        if match:
            properties.setdefault(int(match[1]), {})[match[2]] = value.strip()
    described, by_value = [], {}  # by_value: {(layer, label value): name}
    for index in range(len(properties)):
        found = properties.get(index, {})
        if "ID" not in found:
            raise ReadError(f"{path}: describes {len(properties)} segments, but not Segment{index}_ID: 3D Slicer would "
                            f"read only the first {index} (a damaged or hand-edited header?)")
        segment = _segment(path, index, found, shape)
        place = (segment.layer, segment.label_value)
        if place in by_value:
            raise ReadError(f"{path}: segments {by_value[place]!r} and {segment.name!r} share label value "
                            f"{segment.label_value} in layer {segment.layer}, so their voxels cannot be told apart")
        by_value[place] = segment.name
        described.append(segment)
    return described


def _segment(path: Path, index: int, found: dict, shape: tuple) -> Segment:
    """Segment ``index`` of the header from its properties ``found`` (``{"ID": ..., "Name": ...}``)."""
    name = found.get("Name") or found["ID"]
    for key in ("LabelValue", "Layer"):
        if key not in found:
            raise ReadError(f"{path}: segment {name!r} has no {key} (Segment{index}_{key}); a file of 3D Slicer "
                            "before 4.11? Open it in a current 3D Slicer and save it again")
    label_value, layer = (_whole_numbers(path, f"Segment{index}_{key}", found[key], 1)[0]
                          for key in ("LabelValue", "Layer"))
    if not 0 <= layer < shape[0]:
        raise ReadError(f"{path}: segment {name!r} is in layer {layer}, but the file has {shape[0]} layer(s)")
    if label_value < 1:
        raise ReadError(f"{path}: segment {name!r} has label value {label_value}, which is the background")
    if "Extent" not in found:
        return Segment(name, label_value, layer, None)
    bounds = _whole_numbers(path, f"Segment{index}_Extent", found["Extent"], 6)
    extent = tuple(zip(bounds[4::-2], bounds[5::-2]))  # (i0, i1, j0, j1, k0, k1) in array order (k, j, i)
    segment = Segment(name, label_value, layer, extent)
    if not segment.is_empty() and any(low < 0 or high >= size for (low, high), size in zip(extent, shape[1:])):
        raise ReadError(f"{path}: segment {name!r} has extent {found['Extent']} (i, j, k) outside the grid of "
                        f"{' x '.join(map(str, shape[1:]))} voxels (z, y, x) (a damaged or hand-edited header?)")
    return segment


def _whole_numbers(path: Path, key: str, text: str, count: int) -> list:
    """The ``count`` whole numbers of a segment's property; ReadError naming it otherwise."""
    try:
        numbers = [int(word) for word in text.split()]
    except ValueError:
        numbers = []
    if len(numbers) != count:
        raise ReadError(f"{path}: {key} ({text!r}) must be {count} whole number(s); a damaged header?")
    return numbers


def _refuse_voxels_outside_extents(path: Path, voxels: np.ndarray, described: list) -> None:
    """Name the first segment of a layer (``voxels``, array order) with voxels outside its extent:
    3D Slicer would drop them."""
    for segment in described:
        box = segment.box()
        mask = voxels == segment.label_value
        outside = np.count_nonzero(mask) - (np.count_nonzero(mask[box]) if box else 0)
        if outside:
            extent = " ".join(str(bound) for low_high in segment.extent[::-1] for bound in low_high)
            raise ReadError(f"{path}: segment {segment.name!r} has {outside} voxel(s) outside its extent {extent}, "
                            "which 3D Slicer would drop (a damaged or hand-edited file?)")


def _check_undeclared_values(path: Path, layers: np.ndarray, described: list) -> None:
    """Refuse voxel values that no segment of their layer declares (``layers``: ``(layer, z, y, x)``)."""
    for layer, voxels in enumerate(layers):
        declared = {segment.label_value for segment in described if segment.layer == layer}
        undeclared = [value for value in distinct_values(voxels) if value != 0 and value not in declared]
        if undeclared:
            raise ReadError(f"{path}: layer {layer} holds voxels of value(s) {', '.join(map(str, undeclared[:10]))} "
                            "that no segment declares (a damaged or hand-edited file?); they would be left out")
