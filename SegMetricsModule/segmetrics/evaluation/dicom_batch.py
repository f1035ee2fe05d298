"""Cases from two folders of DICOM files (any nesting): reference and test segmentations paired by
patient and frame of reference, each case rasterised on the image series its structure sets refer to.

Rules (:func:`pair_dicom_folders`), each decided from the headers of
:func:`segmetrics.inputs.dicom_folders.scan_dicom_folder`:

- a reference RT Structure Set or SEG pairs with the test segmentations of the same PatientID and
  FrameOfReferenceUID: one case per test (several tests of one reference are all evaluated);
- of several references of one patient in one frame of reference, a test pairs with the one that
  refers to an image series the test refers to; when that leaves the choice open the test is not
  run, with the reason (never a guess), and so is a reference no test chose;
- the grid of a case is the image series (CT) of the patient in that frame of reference that the
  reference (else the test) refers to; when none is referred to, the only series in that frame.
  RT Structure Sets are rasterised on it and a SEG is placed on it (a SEG stores only the planes
  that hold a segment, so two SEGs, or a SEG and a structure set, meet on the CT). With a structure
  set and no such series (none, or several without a reference) the case is not run; two SEGs
  without one are compared on their own grids. A series found in both folders serves from the
  first folder where it is usable (a folder of its own);
- whatever cannot be paired becomes a *not-run* case (:attr:`Case.not_run` holds the reason:
  no test for the patient, frame of reference mismatch, no image series for the frame...), logged
  in ``cases.jsonl`` and listed in the report.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

from ..inputs.dicom_folders import scan_dicom_folder
from .batch import Case


def pair_dicom_folders(reference_dir, test_dir, names=None) -> tuple:
    """``(cases, skipped)`` for the DICOM files below two folders.

    ``cases`` are :class:`~segmetrics.evaluation.batch.Case` objects, sorted by case id, those that
    cannot run carrying the reason in ``not_run``; ``skipped`` is ``{"reference": [...], "test":
    [...]}``, the files that are neither segmentations nor images, each ``"path (reason)"``.
    ``names`` (a label map JSON) is passed to every case.
    """
    folders = {"reference": scan_dicom_folder(reference_dir), "test": scan_dicom_folder(test_dir)}
    series = folders["reference"].series + folders["test"].series  # a series may lie in both: the usable copy serves
    found = {side: _by_patient_and_frame(folder.segmentations) for side, folder in folders.items()}
    entries = []
    for patient in sorted(found["reference"].keys() | found["test"].keys()):
        entries += _pair_patient(patient, found["reference"].get(patient, {}), found["test"].get(patient, {}),
                                 series)
    cases = [_case(case_id, entry, names) for case_id, entry in zip(_case_ids(entries), entries)]
    for side, folder in folders.items():  # ids from the path in the folder: unique per side
        cases += [Case(f"{side}_{Path(path).relative_to(folder.root).with_suffix('').as_posix().replace('/', '_')}",
                       path if side == "reference" else "", path if side == "test" else "", names,
                       not_run=f"{side} segmentation {path} cannot be paired: {reason}")
                  for path, reason in folder.unusable.items()]
    skipped = {side: [f"{path} ({reason})" for path, reason in folder.left_out.items()]
               for side, folder in folders.items()}
    return sorted(cases, key=lambda case: case.case_id), skipped


def _by_patient_and_frame(segmentations) -> dict:
    """``{patient: {frame of reference: [Segmentation, ...]}}``."""
    grouped = defaultdict(lambda: defaultdict(list))
    for segmentation in segmentations:
        grouped[segmentation.patient_id][segmentation.frame_of_reference].append(segmentation)
    return grouped


def _pair_patient(patient: str, references: dict, tests: dict, series: list) -> list:
    """Entries ``(reference, test, image folder, not-run reason)`` of one patient (each item may be
    None: a side that is missing, no image folder for two SEGs without a CT, no reason for a case
    that runs)."""
    if not tests:
        return [(r, None, None, f"no test segmentation for patient {patient}")
                for rs in references.values() for r in rs]
    if not references:
        return [(None, t, None, f"no reference segmentation for patient {patient}")
                for ts in tests.values() for t in ts]
    entries = []
    for frame in sorted(references.keys() | tests.keys()):
        refs, tsts = references.get(frame, []), tests.get(frame, [])
        if not tsts:
            entries += [(r, None, None, f"frame of reference mismatch: no test of patient {patient} in frame {frame} "
                                        f"(the tests are in {', '.join(sorted(tests))})") for r in refs]
        elif not refs:
            entries += [(None, t, None, f"frame of reference mismatch: no reference of patient {patient} in frame "
                                        f"{frame} (the references are in {', '.join(sorted(references))})")
                        for t in tsts]
        else:
            entries += _pair_frame(patient, frame, refs, tsts, series)
    return entries


def _pair_frame(patient: str, frame: str, refs: list, tests: list, series: list) -> list:
    """Entries of one patient's frame of reference: each test with the one reference, or, of
    several references, with the one that refers to an image series the test refers to; a test
    that leaves the choice open, and a reference no test chose, are not run."""
    entries, chosen = [], set()
    for test in tests:
        partners = refs if len(refs) == 1 else [r for r in refs if r.referenced_series & test.referenced_series]
        if len(partners) == 1:
            entries.append((partners[0], test, *_grid(patient, frame, partners[0], test, series)))
            chosen.add(partners[0].path)
        else:
            files = ", ".join(r.path for r in (partners or refs))
            entries.append((None, test, None, f"ambiguous: {len(partners or refs)} reference segmentations of patient "
                                              f"{patient} in frame {frame} ({files}) and the test refers to the image "
                                              f"series of {'none' if not partners else 'several'} of them; keep one "
                                              "per frame of reference"))
    entries += [(r, None, None, f"not paired: one of {len(refs)} reference segmentations of patient {patient} in "
                                f"frame {frame}, and no test refers to its image series alone")
                for r in refs if r.path not in chosen and len(refs) > 1]
    return entries


def _grid(patient: str, frame: str, reference, test, series: list) -> tuple:
    """``(image folder, None)``: the image series a case is evaluated on (RT Structure Sets are
    rasterised on it, a SEG is placed on it: a SEG stores only the planes that hold a segment);
    ``(None, reason)`` when a case with an RT Structure Set has none; ``(None, None)`` for two SEGs
    without one (each carries its grid)."""
    needs_grid = "rtstruct" in (reference.kind, test.kind)
    candidates = [s for s in series if s.patient_id == patient and s.frame_of_reference == frame]
    referenced = ([s for s in candidates if s.series_uid in reference.referenced_series]
                  or [s for s in candidates if s.series_uid in test.referenced_series])
    chosen = referenced or candidates
    uids = list(dict.fromkeys(s.series_uid for s in chosen))
    usable = [s for s in chosen if not s.problem]
    if len(uids) == 1 and usable:
        return usable[0].folder, None
    if not needs_grid:
        return None, None
    if not uids:
        return None, f"no image series of patient {patient} in frame {frame} to rasterise the structure sets on"
    if len(uids) > 1:
        return None, (f"ambiguous grid: {len(uids)} image series of patient {patient} in frame {frame} "
                      f"({', '.join(uids)})")
    return None, f"image series {uids[0]} cannot serve as the grid: {chosen[0].problem}"


def _case(case_id: str, entry: tuple, names) -> Case:
    reference, test, image, reason = entry
    return Case(case_id, reference.path if reference else "", test.path if test else "", names, image=image,
                not_run=reason)


def _case_ids(entries: list) -> list:
    """One id per entry: the patient ID; for a patient with several entries, the patient ID and the
    file names (without suffix) of reference and test; numbered when still not unique."""
    def patient(entry):
        return next(s.patient_id for s in entry[:2] if s is not None)

    per_patient = Counter(patient(entry) for entry in entries)
    ids = []
    for entry in entries:
        parts = [patient(entry)]
        if per_patient[parts[0]] > 1:
            parts += [Path(s.path).stem if s is not None else "none" for s in entry[:2]]
        ids.append("_".join(parts))
    repeated, seen = Counter(ids), Counter()
    unique = []
    for case_id in ids:
        seen[case_id] += 1
        unique.append(f"{case_id}_{seen[case_id]}" if repeated[case_id] > 1 else case_id)
    return unique
