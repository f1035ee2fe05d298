"""Read label maps and masks with their geometry: NRRD, NIfTI, MHA/MHD, ``.seg.nrrd``, PNG/JPEG,
DICOM RT Structure Sets and DICOM SEG (:mod:`segmetrics.inputs.dicom`).

Everything returns a :class:`~segmetrics.spatial.geometry.LabelImage` (array in ``(z, y, x)`` order,
spacing in mm in the same order). 2-D pictures (PNG, BMP, TIFF) carry no spacing and get
1 mm pixels, i.e. results are in pixel units. Every input passes the checks of
:mod:`segmetrics.inputs.validation` (refusals are one-line :class:`ReadError`); :class:`InputPolicy`
holds the explicit overrides (lossy JPEG masks, many labels, external data files, files
that state no voxel size).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import SimpleITK as sitk

from . import dicom
from ..spatial._threads import thread_pool
from ..spatial.geometry import LabelImage, as_label_image, distinct_values
from .validation import (InputPolicy, ReadError, VoxelCheck, check_evaluation_options, check_file, check_label_map, check_picture,
                         check_spacing_numbers, check_structure_names, check_threshold, check_threshold_separates,
                         check_unique_names)

PICTURE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff"}

__all__ = ["InputPolicy", "ReadError", "apply_name_map", "load_label_image", "load_pair", "read_label_image",
           "read_name_map"]


def load_label_image(source, spacing=None, threshold: float | None = None, *,
                     input_policy: InputPolicy | None = None, name: str | None = None) -> LabelImage:
    """Return a :class:`LabelImage` from a path, a LabelImage, a SimpleITK image or an array.

    Parameters
    ----------
    source : str, Path, LabelImage, SimpleITK.Image or ndarray
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
    see :mod:`segmetrics.inputs.validation`.
    """
    policy = input_policy or InputPolicy()
    check_threshold(threshold)
    from_file = isinstance(source, (str, Path))
    label = str(source) if from_file else name or "array"
    if from_file:
        image = read_label_image(source, input_policy=policy, threshold=threshold)
        if Path(source).suffix.lower() in PICTURE_SUFFIXES:
            check_picture(Path(source), image, policy, threshold)
        if dicom.dicom_kind(source) is not None:  # binary segments already (threshold applied to a SEG)
            threshold = None
    else:
        if spacing is not None:
            check_spacing_numbers(spacing, label)
        try:
            image = as_label_image(source, spacing)
        except ValueError as error:  # e.g. a NumPy array without spacing, an invalid geometry
            raise ReadError(f"{label}: {error}") from error
    image = _as_labels(image, threshold, label)
    if threshold is None:
        check_label_map(image, label, policy)
    else:
        check_structure_names(image, label)
    return image


def read_label_image(path, *, input_policy: InputPolicy | None = None, threshold: float | None = None) -> LabelImage:
    """Read one file into a :class:`LabelImage` (labels unchanged; see :func:`load_label_image`).

    The file-level checks of :func:`segmetrics.inputs.validation.check_file` run first (DICOM class,
    external data files, header spacing, compressed-stream integrity; the checksum of compressed
    NIfTI, NRRD and MetaImage data is checked on the voxels as read, so that it is decompressed once). An RT Structure Set is
    rasterised on its own contour grid (:func:`segmetrics.inputs.dicom.contour_grid`; see
    :func:`load_pair` for other grids); ``threshold`` binarises a FRACTIONAL DICOM SEG (default 0.5).
    """
    path = Path(path)
    if not path.is_file():
        raise ReadError(f"{path}: {_not_a_file(path)}")
    voxel_check = check_file(path, input_policy or InputPolicy(), defer_data_check=True)
    name = path.name.lower()
    kind = dicom.dicom_kind(path)
    if kind == "rtstruct":
        return dicom.read_rtstruct(path)
    if kind == "seg":
        return dicom.read_dicom_seg(path, threshold)
    try:
        if name.endswith(".seg.nrrd"):
            return _read_seg_nrrd(path, voxel_check)
        if path.suffix.lower() in PICTURE_SUFFIXES:
            return _read_picture(path)
        image = sitk.ReadImage(str(path))
    except ReadError:
        raise
    except Exception as error:  # SimpleITK, PIL and slicerio raise many types for one cause
        if voxel_check is not None:
            voxel_check.check_stream()  # a damaged gzip stream is named as such
        raise ReadError(f"{path}: cannot be read as an image ({_reason(error)})") from error
    if image.GetNumberOfComponentsPerPixel() != 1:
        raise ReadError(f"{path}: has {image.GetNumberOfComponentsPerPixel()} components per voxel, not a label map")
    try:
        label_image = LabelImage.from_sitk(image)
    except ValueError as error:  # geometry refused (spacing, origin, direction)
        raise ReadError(f"{path}: {error}") from error
    if voxel_check is not None:
        voxel_check.verify(label_image.array)
    return label_image


def load_pair(reference, test, spacing=None, threshold: float | None = None, *,
              input_policy: InputPolicy | None = None, image=None, contour_resolution_mm: float | None = None):
    """``(reference, test)`` as :func:`load_label_image` reads them, with RT Structure Sets
    rasterised on one shared grid: the image series ``image`` (a DICOM folder or an image file)
    when given, else the other input's grid (an RTSTRUCT against a label map), else a grid built
    from the contour planes of both structure sets with ``contour_resolution_mm`` pixels (default
    :data:`segmetrics.inputs.dicom.DEFAULT_CONTOUR_RESOLUTION_MM`)."""
    check_evaluation_options(threshold=threshold, image=image, contour_resolution_mm=contour_resolution_mm,
                             input_policy=input_policy)
    sources = {"reference": reference, "test": test}
    structure_sets = {side: dicom.read_structure_set(source) for side, source in sources.items()
                      if isinstance(source, (str, Path)) and Path(source).is_file()
                      and dicom.dicom_kind(source) == "rtstruct"}
    # both read and checked at once: the checks' pass over each image's voxels releases the GIL
    sides = [side for side in sources if side not in structure_sets]
    loaded = dict(zip(sides, thread_pool().map(
        lambda side: load_label_image(sources[side], spacing, threshold, input_policy=input_policy, name=side), sides)))
    if structure_sets:
        identity = (None, None)
        if image is not None:
            grid, identity = dicom.read_image_series(image, input_policy)
        elif loaded:
            grid = next(iter(loaded.values()))
        else:
            resolution = dicom.DEFAULT_CONTOUR_RESOLUTION_MM if contour_resolution_mm is None else contour_resolution_mm
            grid = dicom.contour_grid(structure_sets.values(), resolution)
        others = [source for side, source in sources.items() if side not in structure_sets]
        dicom.check_frames_of_reference(structure_sets.values(), others, image, identity[0])
        for side, structures in structure_sets.items():  # names checked by the reader: no check_label_map again
            loaded[side] = dicom.rasterise(structures, grid)
            loaded[side].notes += dicom.series_warnings(structures, image, identity[1])
    return loaded["reference"], loaded["test"]


def apply_name_map(image: LabelImage, names: dict) -> None:
    """Name the labels ``image`` holds, and its named empty structures (an RT Structure Set's ROI
    without contours, an empty SEG segment), from a ``{label value: name}`` map (others stay unnamed).

    Raises :class:`ReadError` when names would merge structures (see
    :func:`segmetrics.inputs.validation.check_structure_names`).
    """
    image.names = {label: names[label] for label in sorted({*image.labels(), *image.names}) if label in names}
    check_structure_names(image, "name map")


def _not_a_file(path: Path) -> str:
    """Why ``path`` (not a regular file) cannot be read as an image file."""
    if path.is_dir():
        return "is a folder, not an image file (a DICOM series folder can only serve as a grid: --image, --resample-to)"
    if path.is_symlink():
        return "is a symbolic link to nothing (broken, or a loop of links)"
    return "no such file" if not path.exists() else "is not a regular file"


def _reason(error: Exception) -> str:
    """The informative line of a reader's exception: the last line of NRRD's own trace (``[nrrd] ...``,
    which names the cause), else the line SimpleITK puts after ``ERROR:``."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    teem = [line.removeprefix("[nrrd]").strip() for line in lines if line.startswith("[nrrd]")]
    detail = next((line.split("ERROR:", 1)[1].strip() for line in lines if "ERROR:" in line), None)
    return (teem[-1] if teem else detail) or (lines[0] if lines else type(error).__name__)


def read_name_map(path) -> dict:
    """Read a JSON object mapping label values to structure names, e.g. ``{"1": "liver"}``."""
    path = Path(path)
    expected = f'{path}: expected a JSON object of label values and names like {{"1": "liver"}}'
    try:
        pairs = json.loads(path.read_text(), object_pairs_hook=list)  # a list of (key, value): keeps repeated keys
        labels = [_whole_number(key) for key, _ in pairs]
    except FileNotFoundError as error:
        raise ReadError(f"{path}: no such file") from error
    except (ValueError, TypeError) as error:
        raise ReadError(f"{expected} ({error})") from error
    if not all(isinstance(pair, tuple) and isinstance(pair[1], str) for pair in pairs):
        raise ReadError(expected)
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise ReadError(f"{path}: label(s) {', '.join(map(str, repeated))} named more than once")
    names = {label: name for label, (_, name) in zip(labels, pairs)}
    check_unique_names(names, str(path))
    return names


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


def _read_picture(path: Path) -> LabelImage:
    """A 2-D picture with 1 × 1 mm pixels. Grey pictures stored as RGB(A) are accepted; real colour
    pictures (photographs) are refused, since their grey levels are not labels, and so are pictures
    whose transparency tells apart pixels of one grey value (a mask drawn as transparency would be
    read from its colour alone); a transparent background under a grey mask is read."""
    from PIL import Image

    with Image.open(path) as picture:
        pages = getattr(picture, "n_frames", 1)
        if pages > 1:
            raise ReadError(f"{path}: holds {pages} pages (a stack); only single-page pictures are read: save a "
                            "3-D mask as NRRD, NIfTI or MHA")
        if "A" in picture.getbands():
            alpha = np.asarray(picture.getchannel("A")).astype(np.int32)  # PIL's alpha modes are 8-bit
            grey = np.asarray(picture.getchannel(0)).astype(np.int32)  # L or R (colour is refused below)
            if len(distinct_values(grey * 256 + alpha)) > len(distinct_values(grey)):
                raise ReadError(f"{path}: its transparency (alpha channel) varies between pixels of one grey value, "
                                "and only grey values are read as labels: save the mask as grey values (e.g. 0/255)")
        if picture.mode in ("RGB", "RGBA", "LA", "CMYK", "YCbCr", "HSV"):
            rgb = np.asarray(picture.convert("RGB"))
            if not (np.array_equal(rgb[..., 0], rgb[..., 1]) and np.array_equal(rgb[..., 0], rgb[..., 2])):
                raise ReadError(f"{path}: is a colour picture, not a mask or label map")
            array = rgb[..., 0]
        else:
            array = np.asarray(picture)
    return LabelImage(array, (1.0, 1.0))


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


def _read_seg_nrrd(path: Path, voxel_check: VoxelCheck | None = None) -> LabelImage:
    """A Slicer ``.seg.nrrd``: segment names kept; label values kept for single-layer files.
    ``voxel_check`` (from :func:`~segmetrics.inputs.validation.check_file`) is verified on the voxels as read.

    Segments of a multi-layer file are numbered 1..N in file order (their label values repeat
    across layers); a segment overlapping an earlier one is kept in ``segment_masks``.
    """
    import slicerio

    segmentation = slicerio.read_segmentation(str(path))
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
