"""The generic checks every input passes, whatever its format; one layer below the readers.

The readers (:mod:`segmetrics.inputs.readers`) check their own formats; :mod:`segmetrics.inputs.io`
then runs these on every file and in-memory input, so that ``compare``, batch runs, frame folders
and the Slicer logic refuse the same things with the same one-line :class:`ReadError`:

- label maps: intensity-like content (negative values, more than :data:`MAX_LABELS` distinct
  values, many values varying from voxel to voxel) and names that would merge structures;
- thresholds that are not finite numbers, or that make every voxel foreground;
- options of an evaluation (:func:`check_evaluation_options`): metrics, labels, paths, before any
  input is read.

:class:`InputPolicy` holds the explicit overrides. Spacing and direction rules themselves live in
:func:`segmetrics.spatial.geometry.check_spacing` / :func:`~segmetrics.spatial.geometry.check_placement`.
"""
from __future__ import annotations

import math
import numbers
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..spatial.geometry import LabelImage

#: More distinct non-zero values than this in a label map suggests an intensity image.
MAX_LABELS = 500
#: More grey levels than this in a picture read as labels suggests a grey picture or a soft map.
MAX_PICTURE_LEVELS = 64
#: A map with more than ``MAX_PICTURE_LEVELS`` values whose neighbouring voxels (along the last
#: axis) are equal less often than this is noisy like an intensity image; label maps are
#: piecewise constant (typically > 0.9).
MIN_EQUAL_NEIGHBOURS = 0.5


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
    allow_crop : bool
        Accept losing structures to a grid: RT Structure Set contours outside the image grid they
        are rasterised on (all of a structure's, or part on one side only), and resampling that
        discards a whole structure or a field of view that does not overlap (a warning note says
        what was lost).
    """

    allow_lossy: bool = False
    allow_many_labels: bool = False
    allow_external_data: bool = False
    assume_unit_spacing: bool = False
    allow_crop: bool = False


def file_version(status: os.stat_result) -> tuple:
    """What tells one version of a file from another (``os.stat`` of it): its size, modification
    and status-change times (ns), inode and device. The status-change time and the inode catch a
    file rewritten with the same size and modification time (two writes within one tick of the
    file system's clock, a copy or ``os.utime`` that set the old time back)."""
    return status.st_size, status.st_mtime_ns, status.st_ctime_ns, status.st_ino, status.st_dev



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
