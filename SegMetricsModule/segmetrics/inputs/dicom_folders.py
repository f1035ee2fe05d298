"""What folders of DICOM files hold, in any nesting, from the files' headers alone (pixel data and
contours are not read): each patient's RT Structure Sets and DICOM SEGs with their frame of
reference, and the image series (CT, MR, ...) they can be rasterised on.

:func:`scan_dicom_folder` gives a :class:`DicomFolder`; pairing the objects of two folders into
cases is the evaluation layer's work (:mod:`segmetrics.evaluation.dicom_batch`).
"""
from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from .readers.dicom_header import dicom_kind, looks_like_dicom
from .readers.rtstruct import structure_set_frames

#: Header elements read from each file (``specific_tags`` of pydicom): identity and references only.
HEADER_TAGS = ["SOPClassUID", "PatientID", "FrameOfReferenceUID", "SeriesInstanceUID",
               "ReferencedFrameOfReferenceSequence", "ReferencedSeriesSequence", "StructureSetROISequence"]


@dataclass(frozen=True)
class Segmentation:
    """One RT Structure Set (``kind`` ``"rtstruct"``) or DICOM SEG (``"seg"``) file.

    ``frame_of_reference`` is the FrameOfReferenceUID its coordinates are in, ``referenced_series``
    the Series Instance UIDs of the images it was drawn on (may be empty).
    """

    path: str
    kind: str
    patient_id: str
    frame_of_reference: str
    referenced_series: frozenset


@dataclass(frozen=True)
class ImageSeries:
    """One DICOM image series: its UID, patient, frame of reference and the folder of its files. ``problem`` says why it cannot serve as a grid (None when it can): the reader takes a
    folder holding exactly one image series."""

    series_uid: str
    patient_id: str
    frame_of_reference: str
    folder: str
    n_files: int
    problem: str | None = None


@dataclass
class DicomFolder:
    """The DICOM content of a folder tree: segmentations, image series, the segmentations that cannot
    be paired (``unusable``: ``{path: reason}``, no PatientID or frame of reference, several frames)
    and the other files left out (``left_out``: ``{path: reason}``, not DICOM, unreadable header,
    another DICOM object such as RT Dose, an image without PatientID or frame of reference)."""

    root: str
    segmentations: list = field(default_factory=list)
    series: list = field(default_factory=list)
    unusable: dict = field(default_factory=dict)
    left_out: dict = field(default_factory=dict)

    def patients(self) -> list:
        """Patient IDs of the segmentations, sorted."""
        return sorted({s.patient_id for s in self.segmentations})


def holds_dicom_segmentations(folder) -> bool:
    """Whether any file below ``folder`` (any depth, hidden files ignored) is a DICOM RT Structure
    Set or SEG (by its SOP class)."""
    return any(dicom_kind(path) is not None for path in _files(Path(folder)))


def scan_dicom_folder(folder) -> DicomFolder:
    """Read the header of every file below ``folder`` (any nesting; hidden files and folders
    ignored) and sort the DICOM objects into segmentations and image series."""
    from pydicom.uid import RTStructureSetStorage, SegmentationStorage

    found = DicomFolder(str(folder))
    images = defaultdict(list)  # series UID -> [(path, patient, frame)]
    for path in _files(Path(folder)):
        header, reason = _header(path)
        if header is None:
            found.left_out[str(path)] = reason
            continue
        sop_class = header.get("SOPClassUID")
        kind = {RTStructureSetStorage: "rtstruct", SegmentationStorage: "seg"}.get(sop_class)
        patient = str(header.get("PatientID") or "").strip()
        if kind is None and not (sop_class and sop_class.name.endswith("Image Storage")):
            found.left_out[str(path)] = f"DICOM {sop_class.name if sop_class else 'object without SOP class'}, " \
                                        "neither a segmentation nor an image"
            continue
        frames = _frames_of_reference(header, kind)
        missing = [what for what, value in (("PatientID", patient), ("frame of reference", frames)) if not value]
        if missing or len(frames) > 1:
            reason = f"no {' and no '.join(missing)} in its header" if missing else \
                f"{len(frames)} frames of reference"
            (found.left_out if kind is None else found.unusable)[str(path)] = reason
            continue
        frame = frames.pop()
        if kind is None:
            images[str(header.get("SeriesInstanceUID") or path)].append((path, patient, frame))
            continue
        found.segmentations.append(Segmentation(str(path), kind, patient, frame, _referenced_series(header, kind)))
    found.series = _image_series(images)
    return found


def _files(folder: Path):
    """Every regular file below ``folder``, sorted, hidden files and folders left out; linked
    folders are followed, each real folder read once (a link back up ends there)."""
    seen = set()
    for root, folders, names in os.walk(folder, followlinks=True):
        real = os.path.realpath(root)
        if real in seen:
            folders[:] = []
            continue
        seen.add(real)
        folders[:] = sorted(name for name in folders if not name.startswith("."))
        for name in sorted(names):
            path = Path(root) / name
            if not name.startswith(".") and path.is_file():
                yield path


def _header(path: Path) -> tuple:
    """``(dataset of HEADER_TAGS, None)`` of a DICOM file, or ``(None, reason)``."""
    import pydicom

    try:
        if not looks_like_dicom(path):
            return None, "not DICOM"
        return pydicom.dcmread(path, stop_before_pixels=True, force=True, specific_tags=HEADER_TAGS), None
    except Exception as error:  # pydicom raises many types for a damaged file
        return None, f"unreadable DICOM header ({error})"


def _frames_of_reference(header, kind: str | None) -> set:
    """The FrameOfReferenceUIDs of an object: an RT Structure Set's as its reader takes them (its
    ROIs', else its referenced frames': :func:`.readers.rtstruct.structure_set_frames`), else its own."""
    if kind == "rtstruct":
        return structure_set_frames(header)
    return {str(header.FrameOfReferenceUID)} if header.get("FrameOfReferenceUID") else set()


def _referenced_series(header, kind: str) -> frozenset:
    """Series Instance UIDs of the images a structure set or SEG refers to."""
    if kind == "rtstruct":
        items = [series for frame in header.get("ReferencedFrameOfReferenceSequence", [])
                 for study in frame.get("RTReferencedStudySequence", [])
                 for series in study.get("RTReferencedSeriesSequence", [])]
    else:
        items = list(header.get("ReferencedSeriesSequence", []))
    return frozenset(str(item.SeriesInstanceUID) for item in items if item.get("SeriesInstanceUID"))


def _image_series(images: dict) -> list:
    """:class:`ImageSeries` of the image files grouped by series UID, each with its ``problem``."""
    folders_of = {uid: {str(path.parent) for path, *_ in files} for uid, files in images.items()}
    series_in = defaultdict(set)
    for uid, folders in folders_of.items():
        for folder in folders:
            series_in[folder].add(uid)
    found = []
    for uid, files in sorted(images.items()):
        _path, patient, frame = files[0]
        folders = sorted(folders_of[uid])
        problem = None
        if len(folders) > 1:
            problem = f"its files lie in {len(folders)} folders ({', '.join(folders)}); gather them in one folder"
        elif len(series_in[folders[0]]) > 1:
            problem = (f"its folder {folders[0]} holds {len(series_in[folders[0]])} image series; "
                       "give each series a folder of its own")
        elif len({(p, f) for _, p, f in files}) > 1:
            problem = "its files disagree on the patient or the frame of reference"
        found.append(ImageSeries(uid, patient, frame, folders[0], len(files), problem))
    return found
