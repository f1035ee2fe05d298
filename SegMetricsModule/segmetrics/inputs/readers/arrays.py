"""In-memory images: a :class:`~segmetrics.spatial.geometry.LabelImage`, a SimpleITK image, an image
with an affine (nibabel, MONAI ``MetaTensor``) or a NumPy array with its spacing.

The format's checks: a ``spacing`` that is not one real number per array axis (mm, ``(z, y, x)``
order), a NumPy array without spacing, a geometry :mod:`segmetrics.spatial.geometry` refuses.
"""
from __future__ import annotations

from ...spatial.geometry import LabelImage, as_label_image
from ..validation import ReadError, check_spacing_numbers


def read(source, spacing=None, name: str = "array") -> LabelImage:
    """``source`` as a :class:`LabelImage`; ``spacing`` (mm, array-axis order) is required for a
    NumPy array and ignored for inputs that carry their geometry; ``name`` names the input in
    messages."""
    if spacing is not None:
        check_spacing_numbers(spacing, name)
    try:
        return as_label_image(source, spacing)
    except ValueError as error:  # e.g. a NumPy array without spacing, an invalid geometry
        raise ReadError(f"{name}: {error}") from error
