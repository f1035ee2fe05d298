"""Per-structure masks packed into one :class:`~segmetrics.spatial.geometry.LabelImage` (the DICOM
readers' last step); structures overlapping an earlier one are kept in ``segment_masks``."""
from __future__ import annotations

import numpy as np

from ..spatial.geometry import LabelImage


def pack_masks(masks: dict, names: dict, spacing, origin, direction, kind=LabelImage, shape=None,
               slice_axis: int = 0) -> LabelImage:
    """Pack ``{label: mask}`` into one label array of the smallest unsigned type holding the labels;
    a mask is a 3-D boolean array or ``{slice index: 2-D mask}`` on a grid of ``shape``, slices
    along array axis ``slice_axis`` (only the slices that hold the structure are touched). A mask
    overlapping an earlier one is kept whole in ``segment_masks``. Every name is kept, so empty
    structures stay listed; the names are checked by the reader (RTSTRUCT) or by
    :func:`segmetrics.inputs.io.load_label_image` (SEG), not here again. ``spacing`` (mm), ``origin``
    and ``direction`` are those of a :class:`LabelImage` (array order ``(z, y, x)``)."""

    def along(volume):  # a view of volume with the slices first
        return np.moveaxis(volume, slice_axis, 0)

    by_slice = {label: mask if isinstance(mask, dict) else dict(enumerate(along(mask))) for label, mask in masks.items()}
    if shape is None:
        shape = next(iter(masks.values())).shape if masks else (1, 1, 1)
    array = np.zeros(shape, dtype=np.min_scalar_type(max(masks, default=0)))
    overlapping = {}
    for label, slices in by_slice.items():
        if any(np.any(along(array)[k][fill]) for k, fill in slices.items()):
            overlapping[label] = np.zeros(shape, dtype=bool)
            for k, fill in slices.items():
                along(overlapping[label])[k] = fill
        else:
            for k, fill in slices.items():
                along(array)[k][fill] = label
    image = kind(array, tuple(spacing), tuple(origin), tuple(direction), dict(names))
    image.segment_masks = overlapping
    return image
