"""DICOM Segmentations (SEG), read with highdicom (0.27 and later: ``segread``,
``Segmentation.get_volume``, ``get_segment_description``).

The SEG's own frame positions give the grid (highdicom's ``get_volume``: plane positions and
orientation, pixel spacing, slice spacing from the positions). Segment numbers become label values
and segment labels become structure names; segments overlapping an earlier one are kept in
``segment_masks``. FRACTIONAL segments are binarised at ``fraction >= threshold`` (default 0.5).
The format's checks (:func:`_check_frames`): a frame count other than the per-frame items, frames
of an undescribed segment, uncompressed pixel data of another length than the frames declare.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ...spatial.geometry import LabelImage
from ..masks import pack_masks
from ..validation import InputPolicy, ReadError, check_threshold_separates


def read(path: Path, policy: InputPolicy | None = None, threshold: float | None = None) -> LabelImage:
    """A DICOM Segmentation on its own grid; FRACTIONAL segments binarised at ``threshold``
    (fraction in [0, 1], default 0.5). Segment numbers are the labels, segment labels the names."""
    import highdicom

    threshold = 0.5 if threshold is None else threshold
    try:
        segmentation = highdicom.seg.segread(str(path))
        _check_frames(path, segmentation)
        volume = segmentation.get_volume()
    except ReadError:
        raise
    except Exception as error:  # highdicom raises many types for one cause (e.g. irregular frames)
        raise ReadError(f"{path}: cannot be read as a DICOM SEG volume ({error})") from error
    numbers = [int(n) for n in volume.get_channel_values(volume.channel_descriptors[0])]
    names = {n: str(segmentation.get_segment_description(n).segment_label) for n in numbers}
    fractional = "FRACTIONAL" in str(segmentation.segmentation_type)
    channels = np.moveaxis(np.asarray(volume.array), -1, 0)
    masks = {n: (channel >= threshold) if fractional else channel > 0 for n, channel in zip(numbers, channels)}
    if fractional:
        for n, channel in zip(numbers, channels):
            check_threshold_separates(masks[n], channel, threshold, f"{path} (segment {names[n]!r})")
    # highdicom's affine maps (slice, row, column) indices to LPS; ITK's (i, j, k) is the reverse
    axes = np.asarray(volume.affine, dtype=float)[:3, :3][:, ::-1]
    spacing_ijk = np.linalg.norm(axes, axis=0)
    return pack_masks(masks, names, spacing_ijk[::-1], volume.affine[:3, 3], (axes / spacing_ijk).ravel())


def _check_frames(path, segmentation) -> None:
    """Refuse a DICOM SEG whose frames do not add up: a frame count other than its per-frame items,
    frames of a segment the file does not describe, or (uncompressed) pixel data of another length
    than rows x columns x frames declare (highdicom reads such data as other frames or rows)."""
    frames = int(segmentation.get("NumberOfFrames", 1))
    items = segmentation.get("PerFrameFunctionalGroupsSequence", [])
    if len(items) != frames:
        raise ReadError(f"{path}: the DICOM SEG declares {frames} frame(s) but describes {len(items)}; a damaged file?")
    described = {int(item.SegmentNumber) for item in segmentation.get("SegmentSequence", [])}
    referenced = {int(ref.ReferencedSegmentNumber) for item in items
                  for ref in item.get("SegmentIdentificationSequence", [])}
    if referenced - described:
        raise ReadError(f"{path}: frames of segment(s) {', '.join(map(str, sorted(referenced - described)))} that the "
                        "DICOM SEG does not describe; a damaged file?")
    if "PixelData" not in segmentation or segmentation.file_meta.TransferSyntaxUID.is_compressed:
        return
    bits = int(segmentation.Rows) * int(segmentation.Columns) * frames * int(segmentation.BitsAllocated)
    expected, stored = -(-bits // 8), len(segmentation.PixelData)
    if stored not in (expected, expected + 1):  # + 1: padding to an even length
        raise ReadError(f"{path}: holds {stored} bytes of pixel data where its {frames} frame(s) of "
                        f"{segmentation.Rows} x {segmentation.Columns} declare {expected}; a damaged file?")
