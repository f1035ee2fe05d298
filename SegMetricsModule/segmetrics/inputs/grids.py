"""How the grids of a reference and a test meet: the same lattice stored in another order, fields
of view that do not overlap, and what resampling one onto another would discard.

Positions are physical (patient LPS, mm); arrays are in ``(z, y, x)`` order, ITK index axes
``(i, j, k)`` the reverse (see :class:`~segmetrics.spatial.geometry.LabelImage`).
"""
from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np

from ..spatial.geometry import (DIRECTION_TOLERANCE, GEOMETRY_TOLERANCE, ORIGIN_VOXEL_FRACTION, GeometryMismatchError,
                                LabelImage, _ml, foreground_outside, geometry_differences)


def stored_as(image: LabelImage, target: LabelImage) -> LabelImage | None:
    """``image`` stored the way ``target`` stores its grid, voxel for voxel, when both grids are the
    same lattice (same voxels in space) whose array axes are in another order or reversed (e.g. a
    DICOM SEG stored top-down and the NRRD exported from it bottom-up); None when they are not.
    The result has ``target``'s spacing, origin and direction; names, contours and notes stay."""
    ndim = target.ndim
    if image.ndim != ndim:
        return None
    target_axes = np.asarray(target.direction).reshape(ndim, ndim)
    image_axes = np.asarray(image.direction).reshape(ndim, ndim)
    cosines = image_axes.T @ target_axes  # [b, a]: image ITK axis b against target ITK axis a
    partner = np.argmax(np.abs(cosines), axis=0)  # image ITK axis of each target ITK axis
    signs = np.sign(cosines[partner, range(ndim)])
    image_sizes, target_sizes = np.array(image.array.shape[::-1]), np.array(target.array.shape[::-1])
    image_spacing, target_spacing = np.array(image.spacing[::-1]), np.array(target.spacing[::-1])
    if (sorted(partner) != list(range(ndim))
            or not np.allclose(np.abs(cosines[partner, range(ndim)]), 1, atol=DIRECTION_TOLERANCE)
            or not np.array_equal(image_sizes[partner], target_sizes)
            or not np.allclose(image_spacing[partner], target_spacing, rtol=GEOMETRY_TOLERANCE, atol=0)):
        return None
    first = np.zeros(ndim)  # the image's ITK index of the target's first voxel
    first[partner] = np.where(signs > 0, 0, target_sizes - 1)
    if np.max(np.abs(image.index_to_physical(first[::-1]) - np.asarray(target.origin))) > \
            ORIGIN_VOXEL_FRACTION * min(target.spacing):
        return None

    def restore(array):  # target array axis p is image array axis ndim-1-partner[ndim-1-p], maybe reversed
        moved = np.transpose(array, [ndim - 1 - partner[ndim - 1 - p] for p in range(ndim)])
        return np.ascontiguousarray(np.flip(moved, [p for p in range(ndim) if signs[ndim - 1 - p] < 0]))

    return replace(image, array=restore(image.array), spacing=target.spacing, origin=target.origin,
                   direction=target.direction,
                   segment_masks={label: restore(np.asarray(mask)) for label, mask in image.segment_masks.items()})


def field_of_view(image: LabelImage) -> tuple:
    """``(low, high)``: the physical box (mm, x, y, z) enclosing the image's voxels, voxel edges included."""
    ends = [(-0.5, size - 0.5) for size in image.array.shape]
    corners = image.index_to_physical(np.array(list(itertools.product(*ends))))
    return corners.min(axis=0), corners.max(axis=0)


def fields_of_view_overlap(first: LabelImage, second: LabelImage) -> bool:
    """Whether the boxes of :func:`field_of_view` of two images overlap (disjoint boxes: the images
    share no point of space)."""
    (low_1, high_1), (low_2, high_2) = field_of_view(first), field_of_view(second)
    return bool(np.all(low_1 < high_2) and np.all(low_2 < high_1))


def _describe_field(image: LabelImage) -> str:
    low, high = field_of_view(image)  # 4 significant digits: micrometre grids too
    return ", ".join(f"{axis} {a:.4g} to {b:.4g}" for axis, a, b in zip("xyz", low, high)) + " mm"


def check_fields_of_view(reference: LabelImage, test: LabelImage) -> None:
    """Refuse grids that differ and whose fields of view do not overlap: no resampling can pair them
    (they are not in one patient space), so the message does not suggest one."""
    if geometry_differences(reference, test) and not fields_of_view_overlap(reference, test):
        raise GeometryMismatchError(
            f"reference and test are on different grids whose fields of view do not overlap (reference "
            f"{_describe_field(reference)}; test {_describe_field(test)}): they are not in one patient space; "
            "compare segmentations of the same scan, or register them first")


def check_resampling(moving: LabelImage, target: LabelImage, side: str, target_name: str, allow_crop: bool) -> list:
    """Notes on resampling ``moving`` (the ``side``: ``"test"``, ``"reference"``) onto ``target`` (named
    ``target_name`` in messages, e.g. ``"reference"``): a warning when part of its foreground lies
    outside ``target``'s field of view and would be discarded. Unless ``allow_crop``, refuses
    (:class:`GeometryMismatchError`) fields of view that do not overlap and structures that would
    lose all their voxels."""
    if not allow_crop and not fields_of_view_overlap(moving, target):
        raise GeometryMismatchError(
            f"the {side} field of view ({_describe_field(moving)}) does not overlap that of the {target_name} "
            f"({_describe_field(target)}): resampling would discard the whole {side}; compare segmentations of the "
            "same scan, or allow it with input_policy=InputPolicy(allow_crop=True) (CLI: --allow-crop)")
    lost, discarded, whole = [], 0.0, 0.0
    for label in moving.labels():
        total, outside = foreground_outside(_label_crop(moving, label), target)
        discarded, whole = discarded + outside, whole + total
        if outside == total:
            lost.append(repr(moving.names.get(label, str(label))))
    if lost and not allow_crop:
        raise GeometryMismatchError(
            f"resampling the {side} onto the {target_name} grid would discard all of {', '.join(lost)}: outside its "
            "field of view; compare on a grid that holds both, or allow it with "
            "input_policy=InputPolicy(allow_crop=True) (CLI: --allow-crop)")
    if discarded == 0:
        return []
    return [f"warning: {100 * discarded / whole:.1f} % of the {side} foreground ({_ml(discarded)} of {_ml(whole)} ml) "
            f"lies outside the {target_name} field of view and was discarded by resampling"]


def _label_crop(image: LabelImage, label) -> LabelImage:
    """The mask of one label within its bounding box, placed where it lies in space."""
    box = image.label_box(label)
    mask = image.mask(label)[box] if label in image.segment_masks else image.array[box] == label
    start = image.index_to_physical(np.array([part.start for part in box], dtype=float))
    return LabelImage(mask.view(np.uint8), image.spacing, tuple(start), image.direction)

