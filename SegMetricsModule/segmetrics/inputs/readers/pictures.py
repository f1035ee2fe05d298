"""2-D pictures (PNG, BMP, TIFF; JPEG only on request) read as masks with 1 x 1 mm pixels: results
are then in pixel units.

The format's checks: a PNG whose chunks are damaged or cut short (PIL reads its pixels as if it
were whole), lossy compression (JPEG adds grey levels that would be read as extra structures),
more grey levels than a mask has (:data:`~segmetrics.inputs.validation.MAX_PICTURE_LEVELS`),
colour, several pages, and transparency that tells apart pixels of one grey value.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ...spatial.geometry import LabelImage, distinct_values
from ..validation import MAX_PICTURE_LEVELS, InputPolicy, ReadError
from . import files

SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_SIGNATURES = (PNG_SIGNATURE, b"\xff\xd8\xff", b"BM", b"II*\x00", b"MM\x00*")  # PNG, JPEG, BMP, TIFF


def recognises(head: bytes) -> bool:
    """Whether a file's first bytes are those of a PNG, JPEG, BMP or TIFF picture."""
    return head.startswith(_SIGNATURES)


def read(path: Path, policy: InputPolicy, threshold=None) -> LabelImage:
    """The picture's grey values as a 2-D label map (1 mm pixels), checked as the module says."""
    with open(path, "rb") as handle:
        png = handle.read(len(PNG_SIGNATURE)) == PNG_SIGNATURE
    if png:
        _check_png(path)
    try:
        image = _read_pixels(path)
    except ReadError:
        raise
    except Exception as error:  # PIL raises many types for one cause
        raise ReadError(f"{path}: cannot be read as an image ({files.reason(error)})") from error
    _check_levels(path, image, policy, threshold)
    return image


def _check_png(path: Path) -> None:
    """Refuse a PNG whose chunks are damaged (CRC) or that ends before its end chunk: PIL reads the
    pixels of such a file as if it were whole."""
    from PIL import Image

    try:
        with Image.open(path) as picture:
            picture.verify()
    except Exception as error:  # PIL raises SyntaxError, OSError, struct.error ... for one cause
        raise ReadError(f"{path}: the PNG file is damaged or cut short ({error}); the file was probably not copied "
                        "or downloaded completely") from error



def _check_levels(path: Path, image: LabelImage, policy: InputPolicy, threshold) -> None:
    """Refuse a 2-D picture that is lossy (JPEG; allowed only on request and with a ``threshold``),
    or that holds more grey levels than a mask would (a grey picture or a soft map, unthresholded)."""
    lossy = _lossy_format(path)
    if lossy is not None and not policy.allow_lossy:
        raise ReadError(
            f"{path}: {lossy} is a lossy format: its compression adds grey levels that would be read as extra "
            "structures; save masks losslessly (PNG, NRRD, NIfTI), or opt in with allow_lossy=True and a threshold "
            "(CLI: --allow-lossy --threshold 128)"
        )
    if lossy is not None and threshold is None:
        raise ReadError(f"{path}: a lossy {lossy} mask must be binarised: give a threshold "
                        "(CLI: --threshold 128; Python: threshold=128)")
    levels = len(image.labels())
    if threshold is None and not policy.allow_many_labels and levels > MAX_PICTURE_LEVELS:
        raise ReadError(
            f"{path}: holds {levels} grey levels: a grey picture or a soft (probability) map rather than a mask? "
            "Binarise it with a threshold (CLI: --threshold 128; Python: threshold=128), or allow_many_labels=True "
            "(CLI: --allow-many-labels) if it really is a label map"
        )


def _lossy_format(path: Path) -> str | None:
    """``"JPEG"`` (or a JPEG-compressed TIFF) when PIL recognises a lossy picture, else None."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as picture:
            if picture.format in ("JPEG", "MPO"):
                return "JPEG"
            if picture.format == "TIFF" and "jpeg" in str(picture.info.get("compression", "")):
                return "JPEG-compressed TIFF"
    except (UnidentifiedImageError, OSError):
        return None  # not a picture PIL knows: the reader reports it
    return None



def _read_pixels(path: Path) -> LabelImage:
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
