"""How the grids of a reference and a test meet: the same lattice stored in another order, fields
of view that do not overlap, and what resampling one onto another, or rasterising RT contours on
one, would discard. Only the compared structures decide a refusal: with a label selection, the
others are never measured.

Positions are physical (patient LPS, mm); arrays are in ``(z, y, x)`` order, ITK index axes
``(i, j, k)`` the reverse (see :class:`~segmetrics.spatial.geometry.LabelImage`).
"""
from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np

from ..spatial.geometry import (DIRECTION_TOLERANCE, GEOMETRY_TOLERANCE, ORIGIN_VOXEL_FRACTION, GeometryMismatchError,
                                LabelImage, _ml, foreground_outside, geometry_differences, resample_nearest)
from .validation import ReadError


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


def placed_on(image: LabelImage, grid: LabelImage) -> LabelImage | None:
    """``image`` on ``grid``, voxel for voxel, zeros around it, when each voxel centre of ``image``
    is a voxel centre of ``grid`` (within :data:`ORIGIN_VOXEL_FRACTION` of a voxel) inside it (a
    DICOM SEG keeps only the planes of its CT that hold a segment, in an order of its own); None
    when it is not. Nearest-neighbour sampling at coinciding centres copies each voxel exactly."""
    ndim = grid.ndim
    if image.ndim != ndim:
        return None
    to_grid = np.linalg.inv(np.asarray(grid.direction).reshape(ndim, ndim) * np.asarray(grid.spacing[::-1]))
    corners = np.array(list(itertools.product(*[(0, size - 1) for size in image.array.shape])))
    steps = np.vstack([np.zeros(ndim), np.eye(ndim), corners])  # array-order indices of the image
    indices = (image.index_to_physical(steps) - np.asarray(grid.origin)) @ to_grid.T  # grid ITK indices
    step_lengths = np.abs(indices[1:ndim + 1] - indices[0])  # one voxel along one grid axis each
    nearest = np.round(indices)
    if (np.max(np.abs(indices - nearest)) > ORIGIN_VOXEL_FRACTION
            or not np.allclose(np.sort(step_lengths, axis=1), np.eye(ndim)[-1], atol=ORIGIN_VOXEL_FRACTION)
            or (nearest < 0).any() or (nearest > np.array(grid.array.shape[::-1]) - 1).any()):
        return None
    placed = resample_nearest(image, grid)
    return replace(image, array=placed.array, spacing=grid.spacing, origin=grid.origin, direction=grid.direction,
                   segment_masks=placed.segment_masks)


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


def check_resampling(moving: LabelImage, target: LabelImage, side: str, target_name: str, allow_crop: bool,
                     labels=None) -> list:
    """Notes on resampling ``moving`` (the ``side``: ``"test"``, ``"reference"``) onto ``target`` (named
    ``target_name`` in messages, e.g. ``"reference"``): a warning when part of the foreground of the
    selected ``labels`` (label values of ``moving``; ``None``: all) lies outside ``target``'s field
    of view and would be discarded. Unless ``allow_crop``, refuses (:class:`GeometryMismatchError`)
    fields of view that do not overlap and a selected structure that would lose all its voxels;
    structures left out of the selection decide nothing."""
    if not allow_crop and not fields_of_view_overlap(moving, target):
        raise GeometryMismatchError(
            f"the {side} field of view ({_describe_field(moving)}) does not overlap that of the {target_name} "
            f"({_describe_field(target)}): resampling would discard the whole {side}; compare segmentations of the "
            "same scan, or allow it with input_policy=InputPolicy(allow_crop=True) (CLI: --allow-crop)")
    selected = moving.labels() if labels is None else sorted(set(moving.labels()) & set(labels))
    lost, discarded, whole = [], 0.0, 0.0
    for label in selected:
        total, outside = foreground_outside(_label_crop(moving, label), target)
        discarded, whole = discarded + outside, whole + total
        if outside == total:
            lost.append(_structure_name(moving, label))
    if lost and not allow_crop:
        raise GeometryMismatchError(
            f"resampling the {side} onto the {target_name} grid would discard all of {', '.join(lost)}: outside its "
            "field of view; compare on a grid that holds both, or allow it with "
            "input_policy=InputPolicy(allow_crop=True) (CLI: --allow-crop)")
    if discarded == 0:
        return []
    which = "foreground" if labels is None else "selected structures' foreground"
    return [f"warning: {100 * discarded / whole:.1f} % of the {side} {which} ({_ml(discarded)} of {_ml(whole)} ml) "
            f"lies outside the {target_name} field of view and was discarded by resampling"]


def check_resampled(before: LabelImage, after: LabelImage, side: str, target_name: str, allow_crop: bool,
                    labels=None) -> list:
    """After resampling the ``side`` (``before``) onto the ``target_name`` grid (``after``): the
    selected ``labels`` (``None``: all) that held voxels and hold none any more, e.g. a structure
    thinner than the target's voxels, which nearest-neighbour sampling misses between voxel centres.
    Refused (:class:`GeometryMismatchError`) unless ``allow_crop``; then a warning note names them."""
    selected = set(before.labels()) if labels is None else set(before.labels()) & set(labels)
    vanished = [_structure_name(before, label) for label in sorted(selected - set(after.labels()))]
    if not vanished:
        return []
    problem = (f"resampling the {side} onto the {target_name} grid left no voxel of {', '.join(vanished)}: no voxel "
               "centre of that grid falls inside it (thinner than its voxels, or outside its field of view)")
    if not allow_crop:
        raise GeometryMismatchError(f"{problem}; compare on the finer grid, or allow it with "
                                    "input_policy=InputPolicy(allow_crop=True) (CLI: --allow-crop)")
    return [f"warning: {problem}"]


def check_contours_kept(reference: LabelImage, test: LabelImage, pairs=None) -> None:
    """Refuse a structure of an RT Structure Set that lost contours to the grid it was rasterised on
    (:class:`~segmetrics.inputs.readers.rtstruct.ContourImage`): all its planes beyond the grid's
    slices (``outside``: it would be compared without any voxel), or part of it (planes beyond the
    slices, contours beyond the slices' edges: ``beyond_edges``) when its partner on the other side
    loses nothing (one side cropped: a biased comparison). ``pairs`` are the compared structures,
    ``(reference label, test label)`` (``None`` for a side without it); structures left out of them
    decide nothing. ``None``: every structure, paired by equal names. Raises :class:`ReadError`."""
    sides = {"reference": reference, "test": test}
    if pairs is None:
        by_name = {side: {name: label for label, name in image.names.items()} for side, image in sides.items()}
        pairs = [(label, by_name["test"].get(name)) for label, name in reference.names.items()]
        pairs += [(by_name["reference"].get(name), label) for label, name in test.names.items()]
    partners = {"reference": {r: t for r, t in pairs if r is not None}, "test": {t: r for r, t in pairs if t is not None}}
    for side, image in sides.items():
        other = sides["test" if side == "reference" else "reference"]
        for label in partners[side]:
            planes, edges = getattr(image, "outside", {}).get(label, []), getattr(image, "beyond_edges", {}).get(label, 0)
            if not planes and not edges:
                continue
            name, total = image.names[label], len(image.contours[label])
            if len(planes) < total and _cropped(other, partners[side][label]):
                continue
            lost = []
            if planes:
                low, high = image.slice_range_mm
                lost.append(f"{len(planes)} of {total} contour(s) of {name!r} (planes at {min(planes):g} to "
                            f"{max(planes):g} mm along the slice normal) lie outside the grid of {image.grid_name} "
                            f"(slices at {low:g} to {high:g} mm)")
            if edges:
                lost.append(f"{edges} of {total} contour(s) of {name!r} reach beyond the edges of the slices of the "
                            f"grid of {image.grid_name}")
            consequence = (f"{name!r} would be compared without any of its voxels" if len(planes) == total
                           else f"the {side} alone would lose part of {name!r}")
            raise ReadError(
                f"{image.source}: {'; '.join(lost)}: {consequence}; give the image series the contours were drawn "
                "on (CLI: --image), or accept the loss with input_policy=InputPolicy(allow_crop=True) (CLI: "
                "--allow-crop)")


def _cropped(image: LabelImage, label) -> bool:
    """Whether the grid cropped structure ``label`` of ``image`` too (contour planes beyond its
    slices, contours beyond their edges); ``False`` for a label map or no structure."""
    return label in getattr(image, "outside", {}) or label in getattr(image, "beyond_edges", {})


def _structure_name(image: LabelImage, label) -> str:
    return repr(image.names.get(label, str(label)))


def _label_crop(image: LabelImage, label) -> LabelImage:
    """The mask of one label within its bounding box, placed where it lies in space."""
    box = image.label_box(label)
    mask = image.mask(label)[box] if label in image.segment_masks else image.array[box] == label
    start = image.index_to_physical(np.array([part.start for part in box], dtype=float))
    return LabelImage(mask.view(np.uint8), image.spacing, tuple(start), image.direction)

