"""Image formats without a reader of their own (VTK, GIPL, ... whatever ITK reads), read by ITK as
they are; a gzip-compressed file is first read to its end, so that a stream cut short or damaged
is refused instead of being zero-filled."""
from __future__ import annotations

from pathlib import Path

from ...spatial.geometry import LabelImage
from ..validation import InputPolicy
from . import files


def read(path: Path, policy: InputPolicy | None = None, threshold=None) -> LabelImage:
    """The image ITK reads from ``path``."""
    if files.is_gzip(path):
        files.data_length(path)
    return files.read_with_itk(path)
