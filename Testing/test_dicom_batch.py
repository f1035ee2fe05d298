"""Batch runs on folders of DICOM files: discovery by header, pairing by patient and frame of
reference, the referenced CT series as grid, and the cases that cannot be paired with their reason.

The test set is built in tmp_path from the real breast structure set and CT slice of
``dicompyler_core`` (shared data): a CT series made of that slice's header at every contour plane,
patients with new UIDs, a copied test, a test with one ROI shifted and one dropped, a patient
without test, a frame-of-reference mismatch, two references in one frame, a patient without CT;
and the real liver DICOM SEG of ``dcmqi`` (with its CT) against a copy with new UIDs.
"""
import json
import shutil

import numpy as np
import pytest

from segmetrics.cli import main
from segmetrics.evaluation.batch import match_folders, read_case_log, run_batch
from segmetrics.inputs.dicom_folders import scan_dicom_folder

pydicom = pytest.importorskip("pydicom")
from pydicom.uid import generate_uid  # noqa: E402

#: ROIs kept from the breast structure set (the others would only slow the tests).
KEPT_ROIS = ("Scar", "Tumor Bed")
SHIFT_X_MM = 3.0
CT_SIZE, CT_SPACING_MM = 256, 2 * 1.074219  # the real slice's field of view, half the pixels
CT_PLANES_MM = np.arange(-38.44, 18.57, 3.0)  # the kept ROIs lie on -35.44 .. 15.56


def _structure_set(data_dir, patient: str, frame: str, series: str, shift_roi=None, drop_roi=None):
    """The real structure set with only :data:`KEPT_ROIS`, for ``patient`` in ``frame``, referring to
    CT ``series``; ``shift_roi`` moved by :data:`SHIFT_X_MM` along x, ``drop_roi`` removed."""
    ds = pydicom.dcmread(data_dir / "dicompyler_core/rtss.dcm")
    names = {roi.ROINumber: roi.ROIName for roi in ds.StructureSetROISequence}
    keep = {number for number, name in names.items() if name in KEPT_ROIS and name != drop_roi}
    ds.StructureSetROISequence = [r for r in ds.StructureSetROISequence if r.ROINumber in keep]
    ds.ROIContourSequence = [r for r in ds.ROIContourSequence if r.ReferencedROINumber in keep]
    ds.RTROIObservationsSequence = [r for r in ds.RTROIObservationsSequence if r.ReferencedROINumber in keep]
    for roi in ds.ROIContourSequence:
        if names[roi.ReferencedROINumber] == shift_roi:
            for contour in roi.ContourSequence:
                points = np.array(contour.ContourData, float).reshape(-1, 3)
                points[:, 0] += SHIFT_X_MM
                contour.ContourData = [f"{v:.4f}" for v in points.ravel()]
    ds.PatientID = patient
    ds.SOPInstanceUID = ds.file_meta.MediaStorageSOPInstanceUID = generate_uid()
    ds.SeriesInstanceUID = generate_uid()
    frame_item = ds.ReferencedFrameOfReferenceSequence[0]
    frame_item.FrameOfReferenceUID = frame
    frame_item.RTReferencedStudySequence[0].RTReferencedSeriesSequence[0].SeriesInstanceUID = series
    for roi in ds.StructureSetROISequence:
        roi.ReferencedFrameOfReferenceUID = frame
    return ds


def _write_structure_set(path, *args, **kwargs):
    path.parent.mkdir(parents=True, exist_ok=True)
    _structure_set(*args, **kwargs).save_as(path)


def _write_ct(folder, data_dir, patient: str, frame: str, series: str):
    """A CT series of :data:`CT_PLANES_MM` slices (zeros) with the real slice's header."""
    folder.mkdir(parents=True, exist_ok=True)
    for index, z in enumerate(CT_PLANES_MM):
        ds = pydicom.dcmread(data_dir / "dicompyler_core/ct.0.dcm")
        ds.Rows = ds.Columns = CT_SIZE
        ds.PixelSpacing = [f"{CT_SPACING_MM:.6f}"] * 2
        ds.PixelData = np.zeros((CT_SIZE, CT_SIZE), np.uint16).tobytes()
        ds.ImagePositionPatient = [ds.ImagePositionPatient[0], ds.ImagePositionPatient[1], f"{z:.4f}"]
        ds.SliceLocation = f"{z:.4f}"
        ds.InstanceNumber = index + 1
        ds.PatientID, ds.FrameOfReferenceUID, ds.SeriesInstanceUID = patient, frame, series
        ds.SOPInstanceUID = ds.file_meta.MediaStorageSOPInstanceUID = generate_uid()
        ds.save_as(folder / f"slice{index:03d}")  # no suffix: found by the DICOM preamble


@pytest.fixture(scope="module")
def dicom_folders(data_dir, tmp_path_factory):
    """``(reference folder, test folder)`` of seven patients (see the module docstring)."""
    root = tmp_path_factory.mktemp("dicom")
    ref, test = root / "reference", root / "test"
    uids = {name: generate_uid() for name in ("F1", "F2", "F3", "F4", "F4b", "F6", "F7", "S1", "S2", "S2b", "S3")}
    # P1: copied test. P2: Tumor Bed shifted, Scar dropped; a second, unreferenced CT in the same frame.
    for patient, series in (("P1", "S1"), ("P2", "S2"), ("P3", "S3")):
        frame = uids["F" + patient[1]]
        _write_ct(ref / patient / "study" / "CT", data_dir, patient, frame, uids[series])
        _write_structure_set(ref / patient / "study" / "RS" / "rs.dcm", data_dir, patient, frame, uids[series])
    _write_ct(ref / "P2" / "study" / "CT2", data_dir, "P2", uids["F2"], uids["S2b"])
    _write_structure_set(test / "auto" / "p1.dcm", data_dir, "P1", uids["F1"], uids["S1"])
    _write_structure_set(test / "auto" / "deeper" / "p2.dcm", data_dir, "P2", uids["F2"], uids["S2"],
                         shift_roi="Tumor Bed", drop_roi="Scar")
    # P4: test in another frame of reference. P6: two references in one frame. P7: no CT anywhere.
    _write_structure_set(ref / "P4" / "rs.dcm", data_dir, "P4", uids["F4"], generate_uid())
    _write_structure_set(test / "p4.dcm", data_dir, "P4", uids["F4b"], generate_uid())
    for name in ("a", "b"):
        _write_structure_set(ref / "P6" / f"rs_{name}.dcm", data_dir, "P6", uids["F6"], generate_uid())
    _write_structure_set(test / "p6.dcm", data_dir, "P6", uids["F6"], generate_uid())
    _write_structure_set(ref / "P7" / "rs.dcm", data_dir, "P7", uids["F7"], generate_uid())
    _write_structure_set(test / "p7.dcm", data_dir, "P7", uids["F7"], generate_uid())
    # patient 99000: a DICOM SEG against a copy (no grid needed: a SEG carries its own)
    shutil.copytree(data_dir / "dcmqi/ct-3slice", ref / "99000" / "CT")
    shutil.copy(data_dir / "dcmqi/liver.dcm", ref / "99000" / "liver.dcm")
    seg = pydicom.dcmread(data_dir / "dcmqi/liver.dcm")
    seg.SOPInstanceUID = seg.file_meta.MediaStorageSOPInstanceUID = generate_uid()
    seg.SeriesInstanceUID = generate_uid()
    seg.save_as(test / "liver_auto.dcm")
    (test / "notes.txt").write_text("not DICOM")
    return ref, test, uids


def test_the_scan_finds_structure_sets_and_series_in_any_nesting(dicom_folders, data_dir):
    ref, _test, uids = dicom_folders
    found = scan_dicom_folder(ref)
    assert found.patients() == ["99000", "P1", "P2", "P3", "P4", "P6", "P7"]
    assert len(found.segmentations) == 8
    assert {s.kind for s in found.segmentations if s.patient_id == "99000"} == {"seg"}
    series = {s.series_uid: s for s in found.series}
    liver_ct = pydicom.dcmread(data_dir / "dcmqi/ct-3slice/01.dcm", stop_before_pixels=True).SeriesInstanceUID
    assert set(series) == {uids[name] for name in ("S1", "S2", "S2b", "S3")} | {liver_ct}
    assert series[uids["S1"]].n_files == len(CT_PLANES_MM) and series[uids["S1"]].problem is None
    assert series[uids["S1"]].folder == str(ref / "P1" / "study" / "CT")


def test_cases_are_paired_by_patient_and_frame_and_the_others_carry_their_reason(dicom_folders):
    ref, test, uids = dicom_folders
    cases, unmatched, skipped = match_folders(ref, test)
    by_id = {case.case_id: case for case in cases}
    assert sorted(by_id) == ["99000", "P1", "P2", "P3", "P4_none_p4", "P4_rs_none", "P6_none_p6", "P6_rs_a_none",
                             "P6_rs_b_none", "P7"]
    assert by_id["99000"].image == str(ref / "99000" / "CT") and not by_id["99000"].not_run  # the SEGs' CT
    assert by_id["P1"].image == str(ref / "P1" / "study" / "CT") and not by_id["P1"].not_run
    assert by_id["P2"].image == str(ref / "P2" / "study" / "CT")  # the referenced series, not CT2
    assert by_id["P2"].test == str(test / "auto" / "deeper" / "p2.dcm")
    reasons = {case_id: case.not_run for case_id, case in by_id.items() if case.not_run}
    assert reasons["P3"] == "no test segmentation for patient P3"
    assert reasons["P4_rs_none"].startswith(f"frame of reference mismatch: no test of patient P4 in frame {uids['F4']}")
    assert reasons["P4_none_p4"].startswith(f"frame of reference mismatch: no reference of patient P4 in frame "
                                            f"{uids['F4b']}")
    assert reasons["P6_none_p6"].startswith(f"ambiguous: 2 reference segmentations of patient P6 in frame "
                                            f"{uids['F6']}")
    assert reasons["P6_rs_a_none"].startswith("not paired: one of 2 reference segmentations of patient P6")
    assert reasons["P7"].startswith(f"no image series of patient P7 in frame {uids['F7']}")
    assert unmatched == {"reference": [], "test": []}
    assert skipped["test"] == [f"{test / 'notes.txt'} (not DICOM)"] and skipped["reference"] == []


def _inside(points_xy, x, y):
    """Even-odd point-in-polygon of the points (x, y) (arrays, mm) for one closed polygon."""
    inside = np.zeros(x.shape, bool)
    start = points_xy
    end = np.roll(points_xy, -1, axis=0)
    for (x0, y0), (x1, y1) in zip(start, end):
        crosses = (y0 > y) != (y1 > y)
        with np.errstate(divide="ignore", invalid="ignore"):
            x_cross = x0 + (y - y0) * (x1 - x0) / (y1 - y0)
        inside ^= crosses & (x < x_cross)
    return inside


def _independent_mask(data_dir, roi_name: str, shift_x_mm: float) -> np.ndarray:
    """The ROI's pixels (centres inside, even-odd per plane) on the test CT grid, (z, y, x)."""
    ds = pydicom.dcmread(data_dir / "dicompyler_core/ct.0.dcm")
    x0, y0 = float(ds.ImagePositionPatient[0]), float(ds.ImagePositionPatient[1])
    coords = np.arange(CT_SIZE) * float(f"{CT_SPACING_MM:.6f}")
    y, x = np.meshgrid(y0 + coords, x0 + coords, indexing="ij")
    rtss = pydicom.dcmread(data_dir / "dicompyler_core/rtss.dcm")
    number = next(r.ROINumber for r in rtss.StructureSetROISequence if r.ROIName == roi_name)
    roi = next(r for r in rtss.ROIContourSequence if r.ReferencedROINumber == number)
    mask = np.zeros((len(CT_PLANES_MM), CT_SIZE, CT_SIZE), bool)
    for contour in roi.ContourSequence:
        points = np.array(contour.ContourData, float).reshape(-1, 3)
        k = int(np.argmin(np.abs(CT_PLANES_MM - points[0, 2])))
        mask[k] ^= _inside(points[:, :2] + [shift_x_mm, 0.0], x, y)
    return mask


def test_paired_cases_are_evaluated_on_the_referenced_ct(dicom_folders, data_dir, tmp_path):
    ref, test, _uids = dicom_folders
    cases, _unmatched, _skipped = match_folders(ref, test)
    summary = run_batch(cases, tmp_path / "out", metrics="dice", workers=0, progress=False)
    assert summary.failed == {} and summary.exit_code == 0
    assert sorted(summary.not_run) == ["P3", "P4_none_p4", "P4_rs_none", "P6_none_p6", "P6_rs_a_none", "P6_rs_b_none",
                                       "P7"]
    records = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    dice = {(r["case_id"], r["structure"]): (r["value"], r["status"]) for r in records if r["metric"] == "dice"}
    assert dice[("P1", "Tumor Bed")] == (1.0, "ok") and dice[("P1", "Scar")] == (1.0, "ok")
    assert [value for (case_id, _), (value, _) in dice.items() if case_id == "99000"] == [1.0]
    reference = _independent_mask(data_dir, "Tumor Bed", 0.0)
    shifted = _independent_mask(data_dir, "Tumor Bed", SHIFT_X_MM)
    truth = 2 * np.count_nonzero(reference & shifted) / (np.count_nonzero(reference) + np.count_nonzero(shifted))
    assert 0.5 < truth < 0.99
    assert dice[("P2", "Tumor Bed")][0] == pytest.approx(truth, abs=1e-12)
    assert dice[("P2", "Scar")][1] != "ok"  # dropped from the test: a miss, not a number
    log = read_case_log(tmp_path / "out")
    assert log["P3"]["status"] == "not run" and log["P3"]["error"] == "no test segmentation for patient P3"
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["provenance"]["not_run"] == summary.not_run


@pytest.mark.needs("rich", "pandas", "jinja2")  # the command, its table and its report
def test_the_command_reports_the_cases_it_cannot_pair(dicom_folders, tmp_path, capsys):
    ref, test, _uids = dicom_folders
    code = main(["batch", "--reference-dir", str(ref), "--test-dir", str(test), "-o", str(tmp_path / "out"),
                 "--metrics", "dice", "--workers", "0", "--no-progress", "--report", str(tmp_path / "report")])
    err = capsys.readouterr()
    assert code == 0
    assert "not run P3: no test segmentation for patient P3" in err.err
    assert "10 cases: 3 evaluated now, 0 already done, 0 failed, 7 not run" in err.out
    report = (tmp_path / "report" / "report.md").read_text()
    assert "not run: no test segmentation for patient P3" in report
    assert "10 cases (3 evaluated, 0 failed, 7 not run)" in report
    again = main(["batch", "--reference-dir", str(ref), "--test-dir", str(test), "-o", str(tmp_path / "out"),
                  "--metrics", "dice", "--workers", "0", "--no-progress"])
    assert again == 0 and "10 cases: 0 evaluated now, 3 already done, 0 failed, 7 not run" in capsys.readouterr().out


def test_a_shared_series_folder_is_no_grid_a_ct_beside_the_tests_is_and_a_test_needs_a_patient(data_dir, tmp_path):
    frame, series, other = generate_uid(), generate_uid(), generate_uid()
    ref, test = tmp_path / "ref", tmp_path / "test"
    _write_ct(tmp_path / "ct", data_dir, "P1", frame, series)
    _write_ct(tmp_path / "ct_other", data_dir, "P1", frame, other)
    (ref / "P1").mkdir(parents=True)
    for index, path in enumerate(sorted((tmp_path / "ct").iterdir()) + sorted((tmp_path / "ct_other").iterdir())):
        shutil.copy(path, ref / "P1" / f"image{index:03d}.dcm")
    _write_structure_set(ref / "P1" / "rs.dcm", data_dir, "P1", frame, series)
    _write_structure_set(test / "p1.dcm", data_dir, "P1", frame, series)
    [case], _unmatched, _skipped = match_folders(ref, test)
    assert case.not_run == (f"image series {series} cannot serve as the grid: its folder {ref / 'P1'} holds 2 image "
                            "series; give each series a folder of its own")
    shutil.copytree(tmp_path / "ct", test / "ct")  # the series in a folder of its own, beside the tests
    [case], _unmatched, _skipped = match_folders(ref, test)
    assert case.image == str(test / "ct") and not case.not_run
    anonymous = _structure_set(data_dir, "", frame, series)
    (test / "odd").mkdir()
    anonymous.save_as(test / "odd" / "p9.dcm")
    cases, _unmatched, _skipped = match_folders(ref, test)
    assert cases[1].case_id == "test_odd_p9"
    assert cases[1].not_run == (f"test segmentation {test / 'odd' / 'p9.dcm'} cannot be paired: "
                                "no PatientID in its header")


def test_one_reference_is_compared_with_every_test_of_its_frame(data_dir, tmp_path):
    frame, series = generate_uid(), generate_uid()
    _write_ct(tmp_path / "ref" / "P1" / "CT", data_dir, "P1", frame, series)
    _write_structure_set(tmp_path / "ref" / "P1" / "rs.dcm", data_dir, "P1", frame, series)
    for system in ("system_a", "system_b"):
        _write_structure_set(tmp_path / "test" / f"{system}.dcm", data_dir, "P1", frame, series)
    cases, _unmatched, _skipped = match_folders(tmp_path / "ref", tmp_path / "test")
    assert [(c.case_id, c.test, c.image, c.not_run) for c in cases] == [
        (f"P1_rs_{system}", str(tmp_path / "test" / f"{system}.dcm"), str(tmp_path / "ref" / "P1" / "CT"), None)
        for system in ("system_a", "system_b")]
