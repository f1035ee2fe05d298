"""Read label maps and masks with their geometry, and pair a reference with a test.

Data flows down: a file goes to the reader of its format (:mod:`segmetrics.inputs.readers`, picked
from its content), which reads and verifies it; the :class:`~segmetrics.spatial.geometry.LabelImage`
it returns (array in ``(z, y, x)`` order, spacing in mm in the same order) then passes the generic
label-map checks of :mod:`segmetrics.inputs.validation`; :func:`load_pair` finally puts RT
Structure Sets on one shared grid. Refusals are one-line :class:`ReadError`; :class:`InputPolicy`
holds the explicit overrides (lossy JPEG masks, many labels, external data files, files that state
no voxel size).
"""
from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..spatial._threads import thread_pool
from ..spatial.geometry import LabelImage, geometry_differences
from . import readers
from .grids import check_contours_kept, placed_on, stored_as
from .readers import arrays, rtstruct
from .validation import (InputPolicy, ReadError, check_evaluation_options, check_label_map, check_structure_names,
                         check_threshold, check_threshold_separates, check_unique_names)

__all__ = ["InputPolicy", "ReadError", "apply_name_map", "label_names", "load_label_image", "load_pair", "name_unnamed",
           "read_label_image", "read_name_map"]


def load_label_image(source, spacing=None, threshold: float | None = None, *,
                     input_policy: InputPolicy | None = None, name: str | None = None) -> LabelImage:
    """Return a :class:`LabelImage` from a path, a LabelImage, a SimpleITK image or an array.

    Parameters
    ----------
    source : str, Path, LabelImage, SimpleITK.Image, nibabel or MONAI image, or ndarray
    spacing : tuple of float, optional
        Voxel size in mm in array-axis order; required for NumPy arrays, ignored otherwise.
    threshold : float, optional
        Binarise (``value >= threshold`` → 1) instead of requiring integer labels, e.g. 0.5 for
        probability maps. For a DICOM SEG it binarises FRACTIONAL segments (fraction in [0, 1],
        default 0.5) and keeps the segments apart.
    input_policy : InputPolicy, optional
        Overrides of the input checks (default: none).
    name : str, optional
        How messages name an in-memory input (e.g. ``"reference"``); default ``"array"``.

    Raises :class:`ReadError` (a ``ValueError``) for files and label maps that cannot be trusted:
    see :mod:`segmetrics.inputs.readers` and :mod:`segmetrics.inputs.validation`.
    """
    policy = input_policy or InputPolicy()
    check_threshold(threshold)
    if isinstance(source, (str, Path)):
        label = str(source)
        image = read_label_image(source, input_policy=policy, threshold=threshold)
        if readers.reader_for(source) in readers.STRUCTURE_READERS:  # binary segments (threshold applied to a SEG)
            threshold = None
    else:
        label = name or "array"
        image = arrays.read(source, spacing, label)
    image = _as_labels(image, threshold, label)
    if threshold is None:
        check_label_map(image, label, policy)
    else:
        check_structure_names(image, label)
    return image


def read_label_image(path, *, input_policy: InputPolicy | None = None, threshold: float | None = None) -> LabelImage:
    """Read one file into a :class:`LabelImage` with its labels as stored (see :func:`load_label_image`):
    the reader of its format (:func:`segmetrics.inputs.readers.reader_for`) reads and verifies it.
    An RT Structure Set is rasterised on its own contour grid (:func:`~.readers.rtstruct.contour_grid`;
    see :func:`load_pair` for other grids); ``threshold`` binarises a FRACTIONAL DICOM SEG (default 0.5).
    """
    return readers.read_file(path, input_policy, threshold)


def load_pair(reference, test, spacing=None, threshold: float | None = None, *,
              input_policy: InputPolicy | None = None, image=None, contour_resolution_mm: float | None = None,
              check_crops: bool = True):
    """``(reference, test)`` as :func:`load_label_image` reads them, paired:

    - RT Structure Sets are rasterised on one shared grid: the image series ``image`` (a DICOM
      folder or an image file) when given, else the other input's grid (an RTSTRUCT against a label
      map), else a grid built from the contour planes of both structure sets with
      ``contour_resolution_mm`` pixels (default
      :data:`segmetrics.inputs.readers.rtstruct.DEFAULT_CONTOUR_RESOLUTION_MM`). A structure that
      loses contours to that grid (all of them, or part of them on one side only) is refused unless
      ``input_policy.allow_crop`` (:func:`segmetrics.inputs.grids.check_contours_kept`), or left to the
      caller with ``check_crops=False`` (:func:`segmetrics.compare` refuses it for the selected
      structures only);
    - a label image (e.g. a DICOM SEG of some of the planes of ``image``) whose voxel centres are
      voxel centres of ``image`` is placed on the whole of that grid, voxel for voxel
      (:func:`segmetrics.inputs.grids.placed_on`);
    - a test on the reference's lattice of voxels stored in another axis order or direction is
      stored as the reference is (:func:`segmetrics.inputs.grids.stored_as`): compared voxel for
      voxel, without resampling.
    """
    check_evaluation_options(threshold=threshold, image=image, contour_resolution_mm=contour_resolution_mm,
                             input_policy=input_policy)
    policy = input_policy or InputPolicy()
    sources = {"reference": reference, "test": test}
    structure_sets = {side: rtstruct.read_structure_set(source) for side, source in sources.items()
                      if isinstance(source, (str, Path)) and readers.reader_for(source) is rtstruct}
    # both read and checked at once: the checks' pass over each image's voxels releases the GIL
    sides = [side for side in sources if side not in structure_sets]
    loaded = dict(zip(sides, thread_pool().map(
        lambda side: load_label_image(sources[side], spacing, threshold, input_policy=input_policy, name=side), sides)))
    identity = (None, None)
    if image is not None:
        grid, identity = readers.read_image_series(image, input_policy)
        for side in sides:  # e.g. a DICOM SEG of some of the image's planes: placed on all of them
            if geometry_differences(loaded[side], grid):
                placed = placed_on(loaded[side], grid)
                if placed is None:
                    loaded[side].notes = getattr(loaded[side], "notes", []) + [
                        f"the {side}'s voxels are not voxels of the grid of {image}: that grid is not used for it"]
                loaded[side] = placed or loaded[side]
    if structure_sets:
        if image is None and loaded:
            grid = next(iter(loaded.values()))
        elif image is None:
            resolution = (rtstruct.DEFAULT_CONTOUR_RESOLUTION_MM if contour_resolution_mm is None
                          else contour_resolution_mm)
            grid = rtstruct.contour_grid(structure_sets.values(), resolution)
        others = [source for side, source in sources.items() if side not in structure_sets]
        rtstruct.check_frames_of_reference(structure_sets.values(), others, image, identity[0])
        for side, structures in structure_sets.items():  # names checked by the reader: no check_label_map again
            loaded[side] = rtstruct.rasterise(structures, grid)
            loaded[side].notes += rtstruct.series_warnings(structures, image, identity[1])
        grid_name = image if image is not None else sources[sides[0]] if sides else "the contour planes"
        for side in structure_sets:
            loaded[side].grid_name = str(grid_name)
    reference, test = loaded["reference"], loaded["test"]
    if check_crops and not policy.allow_crop:
        check_contours_kept(reference, test)
    if geometry_differences(reference, test):
        test = stored_as(test, reference) or test
    return reference, test


def name_unnamed(reference: LabelImage, test: LabelImage, names, source: str = "name map") -> tuple:
    """``(reference, test, notes)`` with the ``{label value: name}`` map ``names`` (from ``source``, e.g.
    a JSON file; keys may be label values or their text, ``"1"`` as JSON gives them) applied to the
    side(s) that carry no names of their own; a side whose file names its structures (RT Structure
    Set, DICOM SEG, ``.seg.nrrd``) keeps them. The inputs are not changed. A note lists the labels
    the map names that no unnamed side holds (the background 0 aside).

    Raises :class:`ReadError` when both sides carry names (the map would name nothing), when the
    map names none of the labels an unnamed side holds (a map for other files), or when it is no
    valid map (:func:`label_names`)."""
    names = label_names(names, source)
    sides = {"reference": reference, "test": test}
    unnamed = [side for side, image in sides.items() if not image.names]
    if not unnamed:
        raise ReadError(f"{source}: both inputs name their own structures, and a name map only names the labels of "
                        "a label map without names (NIfTI, NRRD, MHA, pictures); leave it out")
    held = set()
    for side in unnamed:
        labels = sides[side].labels()
        if labels and not set(labels) & set(names):
            raise ReadError(f"{source}: names none of the labels of the {side} ({', '.join(map(str, labels[:10]))}); "
                            f"it names {', '.join(map(str, sorted(names)[:10]))}")
        held.update(labels)
        sides[side] = replace(sides[side])
        apply_name_map(sides[side], names)
    named = [side for side in sides if side not in unnamed]
    own = f" (the {named[0]} keeps the names its file carries)" if named else ""
    notes = [f"{source}: names given to the labels of the {' and '.join(unnamed)}{own}"]
    absent = [f"{label} ({names[label]!r})" for label in sorted(set(names) - held - {0})]  # 0: the background
    if absent:
        more = f" and {len(absent) - 10} more" if len(absent) > 10 else ""
        notes.append(f"{source}: names label(s) that the {' and '.join(unnamed)} do(es) not hold, so no structure "
                     f"has these names: {', '.join(absent[:10])}{more}")
    return sides["reference"], sides["test"], notes


def apply_name_map(image: LabelImage, names: dict) -> None:
    """Name the labels ``image`` holds, and its named empty structures (an RT Structure Set's ROI
    without contours, an empty SEG segment), from a ``{label value: name}`` map (others stay unnamed).

    Raises :class:`ReadError` when names would merge structures (see
    :func:`segmetrics.inputs.validation.check_structure_names`).
    """
    image.names = {label: names[label] for label in sorted({*image.labels(), *image.names}) if label in names}
    check_structure_names(image, "name map")


def read_name_map(path) -> dict:
    """Read a map of label values to structure names: a JSON object like ``{"1": "liver"}``, or a
    ``.csv`` file of ``label,name`` rows (a first row ``label,name`` is a header). See :func:`label_names`."""
    path = Path(path)
    expected = (f'{path}: expected a JSON object of label values and names like {{"1": "liver"}}, or a .csv file of '
                "label,name rows")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError as error:
        raise ReadError(f"{path}: no such file") from error
    except UnicodeDecodeError as error:
        raise ReadError(f"{expected} ({error})") from error
    if path.suffix.lower() == ".csv":
        rows = [row for row in csv.reader(text.splitlines()) if any(cell.strip() for cell in row)]
        if rows and [cell.strip().lower() for cell in rows[0]] == ["label", "name"]:
            rows = rows[1:]
        if not all(len(row) == 2 for row in rows):
            raise ReadError(f"{expected} (a row without exactly two cells)")
        pairs = [(label.strip(), name) for label, name in rows]
    else:
        try:
            pairs = json.loads(text, object_pairs_hook=list)  # a list of (key, value): keeps repeated keys
        except ValueError as error:
            raise ReadError(f"{expected} ({error})") from error
        if not isinstance(pairs, list) or not all(isinstance(pair, tuple) for pair in pairs):
            raise ReadError(expected)
    return label_names(pairs, str(path), expected)


def label_names(names, source: str = "name map", expected: str | None = None) -> dict:
    """``{label value: name}`` from a dict or a sequence of ``(label, name)`` pairs whose labels are
    whole numbers or their text (``1``, ``"1"``, ``"1.0"``) and whose names are text. Raises
    :class:`ReadError` (naming ``source``; ``expected``, the form the file should have, leads the
    message for a wrong label or name) for other labels or names, a label given twice (also as
    ``"1"`` and ``1``) and a name given to several labels."""
    expected = expected or f'{source}: expected whole label values and names like {{1: "liver"}}'
    pairs = list(names.items()) if isinstance(names, dict) else list(names)
    try:
        labels = [_whole_number(str(key)) for key, _ in pairs]
    except (ValueError, TypeError) as error:
        raise ReadError(f"{expected} ({error})") from error
    if not all(isinstance(name, str) and name.strip() for _, name in pairs):
        raise ReadError(f"{expected} (every name is non-empty text)")
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise ReadError(f"{source}: label(s) {', '.join(map(str, repeated))} named more than once")
    mapping = {label: name for label, (_, name) in zip(labels, pairs)}
    check_unique_names(mapping, source)
    return mapping


def _whole_number(text: str) -> int:
    """A label value written as text (``"3"``, ``"3.0"``); ValueError for ``"1.5"``, ``"nan"`` or a name."""
    value = float(text)
    if not value.is_integer():
        raise ValueError(f"label value {text!r} is not a whole number")
    return int(value)


def _as_labels(image: LabelImage, threshold, source: str) -> LabelImage:
    """Binarise at ``threshold`` or make sure the labels are integers (float files are accepted)."""
    array = image.array
    if threshold is not None:
        if np.issubdtype(array.dtype, np.floating) and not np.isfinite(array).all():
            raise ReadError(f"{source}: holds NaN or infinite values ({np.count_nonzero(~np.isfinite(array))} voxels), "
                            "which no threshold can classify (NaN would silently become background)")
        binary = array >= threshold
        check_threshold_separates(binary, array, threshold, source)
        return image.with_array(binary.view(np.uint8))
    if array.dtype == bool:
        return image.with_array(array.view(np.uint8))  # 0/1 bytes as they are: no copy
    if np.issubdtype(array.dtype, np.floating):
        if not np.all(np.isfinite(array)) or not np.array_equal(array, np.round(array)):
            raise ReadError(
                f"{source}: holds non-integer values (a probability map, or an intensity image?); binarise it "
                "with a threshold (CLI: --threshold 0.5; Python: threshold=0.5)"
            )
        return image.with_array(array.astype(np.int64))
    if not np.issubdtype(array.dtype, np.integer):
        raise ReadError(f"{source}: pixel type {array.dtype} is not a label type")
    return image
