"""What a DICOM file is (its SOP class, parsed once per file version) and where it belongs (its
frame of reference and series): the dispatch of DICOM files to :mod:`.rtstruct`,
:mod:`.dicom_seg` and :mod:`.dicom_series`.
"""
from __future__ import annotations

import hashlib
import os
from functools import lru_cache
from pathlib import Path

from ..validation import ReadError, file_version

SUFFIXES = (".dcm", ".dicom")
#: Bytes of a DICOM file's start that key its parsed header (:func:`dicom_class`).
_HEAD_BYTES = 1 << 16


def recognises(head: bytes) -> bool:
    """Whether a file's first bytes hold the DICOM preamble (``DICM`` after 128 bytes)."""
    return head[128:132] == b"DICM"


def looks_like_dicom(path: Path) -> bool:
    """Whether a file is to be read as DICOM: named ``.dcm``/``.dicom`` or starting with the DICOM
    preamble."""
    if path.name.lower().endswith(SUFFIXES):
        return True
    with open(path, "rb") as handle:
        return recognises(handle.read(132))



def dicom_class(path: Path) -> tuple:
    """``(SOP Class UID, Modality or None)`` of a DICOM file (pixel data not read); ReadError when
    it cannot be read as DICOM. The header is parsed once per file version, however often the
    checks and the reader's dispatch ask: a version is :func:`file_version` and the bytes of the
    file's start (:data:`_HEAD_BYTES`, where the SOP class and modality are)."""
    from pydicom.errors import InvalidDicomError

    path = Path(path)
    try:
        with open(path, "rb") as handle:
            status = os.fstat(handle.fileno())
            head = hashlib.blake2b(handle.read(_HEAD_BYTES)).digest()
        return _dicom_class(str(path.resolve()), (*file_version(status), head))
    except (InvalidDicomError, OSError, ValueError) as error:
        raise ReadError(f"{path}: not a readable DICOM file ({error})") from error


@lru_cache(maxsize=256)
def _dicom_class(path: str, version: tuple) -> tuple:
    """:func:`dicom_class` of one file version (``version`` keys the cache)."""
    import pydicom
    from pydicom.uid import UID

    dataset = pydicom.dcmread(path, stop_before_pixels=True, force=True, specific_tags=["SOPClassUID", "Modality"])
    return UID(str(dataset.get("SOPClassUID", ""))), dataset.get("Modality")


def readable_kind(path: Path) -> str:
    """``"rtstruct"``, ``"seg"`` or ``"image"``: the kind of a DICOM file SegMetrics reads; DICOM
    objects that are neither images nor structures (RT Dose/Plan, SR, ...) are refused."""
    sop_class, modality = dicom_class(path)
    kind = dicom_kind(path)
    if kind is not None:
        return kind
    description = sop_class.name if sop_class else "object without SOP Class UID"
    if description.endswith("Image Storage"):
        return "image"
    raise ReadError(f"{path}: is a DICOM {description}{f' ({modality})' if modality else ''}, not a segmentation; "
                    "SegMetrics reads DICOM RT Structure Sets, DICOM SEG and image label maps")



def dicom_kind(path) -> str | None:
    """``"rtstruct"``, ``"seg"`` or None (not DICOM, or another DICOM object), from the SOP class.

    Only files named ``.dcm``/``.dicom`` or starting with the DICOM preamble are opened."""
    from pydicom.uid import RTStructureSetStorage, SegmentationStorage

    path = Path(path)
    try:
        if not looks_like_dicom(path):
            return None
        sop_class, _modality = dicom_class(path)
    except Exception:  # unreadable: readable_kind reports it in one line
        return None
    return {RTStructureSetStorage: "rtstruct", SegmentationStorage: "seg"}.get(sop_class)



def dicom_identity(path) -> tuple:
    """``(FrameOfReferenceUID, SeriesInstanceUID)`` of a DICOM file, each None when absent."""
    import pydicom

    try:
        dataset = pydicom.dcmread(path, stop_before_pixels=True, force=True,
                                  specific_tags=["FrameOfReferenceUID", "SeriesInstanceUID"])
    except Exception as error:  # pydicom raises many types for a damaged file
        raise ReadError(f"{path}: not a readable DICOM file ({error})") from error
    return tuple(str(dataset[tag].value) if dataset.get(tag) else None
                 for tag in ("FrameOfReferenceUID", "SeriesInstanceUID"))
