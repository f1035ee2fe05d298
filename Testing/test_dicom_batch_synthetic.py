"""DICOM batches built from scratch with pydicom (no shared data): a DICOM SEG stores only the CT
planes that hold a segment, so a SEG meets a structure set or another SEG on the CT; patients in
any nesting, several series and frames of reference, a patient on one side only, other files.

Truth is counted on the CT's pixel grid directly: a rectangle's pixels are those whose centres
lie inside it (the documented rasterisation rule), pixel centres at ``SPACING_MM * index``.
"""
import json

import numpy as np
import pytest

from segmetrics.evaluation.batch import match_folders, run_batch
from segmetrics.inputs.grids import placed_on
from segmetrics.spatial.geometry import LabelImage
from test_dicom import rectangle, write_rtstruct

pydicom = pytest.importorskip("pydicom")
from pydicom.dataset import Dataset  # noqa: E402
from pydicom.uid import CTImageStorage, ExplicitVRLittleEndian, generate_uid  # noqa: E402

SIZE, SPACING_MM, PLANES_MM = 16, 2.0, np.arange(6) * 3.0  # 16 x 16 pixels of 2 mm, 6 planes 3 mm apart


def write_ct(folder, patient: str, frame: str, series: str) -> list:
    """A CT series (zeros) of :data:`PLANES_MM`, pixel (0, 0) at x = y = 0; the file paths."""
    folder.mkdir(parents=True, exist_ok=True)
    study, paths = generate_uid(), []
    for index, z in enumerate(PLANES_MM):
        ds = Dataset()
        ds.file_meta = pydicom.dataset.FileMetaDataset()
        ds.file_meta.TransferSyntaxUID = ExplicitVRLittleEndian
        ds.file_meta.MediaStorageSOPClassUID = ds.SOPClassUID = CTImageStorage
        ds.file_meta.MediaStorageSOPInstanceUID = ds.SOPInstanceUID = generate_uid()
        ds.Modality, ds.PatientID, ds.PatientName, ds.PatientBirthDate, ds.PatientSex = "CT", patient, f"{patient}^Test", "", ""
        ds.StudyDate, ds.StudyTime, ds.StudyID, ds.AccessionNumber, ds.ReferringPhysicianName = "", "", "1", "", ""
        ds.SeriesNumber = 1
        ds.StudyInstanceUID, ds.SeriesInstanceUID, ds.FrameOfReferenceUID = study, series, frame
        ds.InstanceNumber, ds.ImagePositionPatient = index + 1, [0.0, 0.0, float(z)]
        ds.ImageOrientationPatient, ds.PixelSpacing, ds.SliceThickness = [1, 0, 0, 0, 1, 0], [SPACING_MM] * 2, 3.0
        ds.Rows = ds.Columns = SIZE
        ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
        ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 16, 16, 15, 0
        ds.RescaleIntercept, ds.RescaleSlope = 0, 1
        ds.PixelData = np.zeros((SIZE, SIZE), np.uint16).tobytes()
        paths.append(folder / f"ct{index}.dcm")
        ds.save_as(paths[-1], enforce_file_format=True)
    return paths


def write_structure_set(path, patient: str, frame: str, series: str, rois: dict) -> None:
    """:func:`test_dicom.write_rtstruct` for ``patient`` in ``frame``, referring to CT ``series``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_rtstruct(path, rois)
    ds = pydicom.dcmread(path)
    ds.PatientID = patient
    referenced_series, study, frame_item = Dataset(), Dataset(), Dataset()
    referenced_series.SeriesInstanceUID = series
    study.RTReferencedSeriesSequence = [referenced_series]
    frame_item.FrameOfReferenceUID, frame_item.RTReferencedStudySequence = frame, [study]
    ds.ReferencedFrameOfReferenceSequence = [frame_item]
    ds.save_as(path)


def write_seg(path, ct_paths: list, masks: dict) -> None:
    """A BINARY DICOM SEG of ``{name: mask (plane, y, x) on the CT}`` made by highdicom, which
    keeps only the planes that hold a segment."""
    hd = pytest.importorskip("highdicom")
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptions = [hd.seg.SegmentDescription(
        segment_number=number, segment_label=name,
        segmented_property_category=hd.sr.CodedConcept("91723000", "SCT", "Anatomical Structure"),
        segmented_property_type=hd.sr.CodedConcept("85756007", "SCT", "Tissue"),
        algorithm_type=hd.seg.SegmentAlgorithmTypeValues.MANUAL) for number, name in enumerate(masks, start=1)]
    seg = hd.seg.Segmentation(
        source_images=[pydicom.dcmread(p) for p in ct_paths], pixel_array=np.stack(list(masks.values()), -1)
        .astype(np.uint8), segmentation_type=hd.seg.SegmentationTypeValues.BINARY, segment_descriptions=descriptions,
        series_instance_uid=generate_uid(), series_number=2, sop_instance_uid=generate_uid(), instance_number=1,
        manufacturer="test", manufacturer_model_name="test", software_versions="1", device_serial_number="1")
    seg.save_as(path)


def square_rois(planes, x0=3.0, x1=15.0) -> dict:
    """``{"Organ": rectangles x0..x1, 5..13 mm on the given plane indices}``."""
    return {"Organ": [rectangle(x0, 5.0, x1, 13.0, PLANES_MM[k]) for k in planes]}


def square_mask(planes, x0=3.0, x1=15.0) -> np.ndarray:
    """The pixels (plane, y, x) of :func:`square_rois`: pixel centres inside the rectangle (no centre on
    its edges: they lie at odd mm, the centres at even mm)."""
    centres = np.arange(SIZE) * SPACING_MM
    inside_x, inside_y = (centres > x0) & (centres < x1), (centres > 5.0) & (centres < 13.0)
    mask = np.zeros((len(PLANES_MM), SIZE, SIZE), bool)
    mask[list(planes)] = inside_y[:, None] & inside_x[None, :]
    return mask


def dice(first: np.ndarray, second: np.ndarray) -> float:
    return 2 * np.count_nonzero(first & second) / (np.count_nonzero(first) + np.count_nonzero(second))


def run(cases, output) -> dict:
    summary = run_batch(cases, output, metrics="dice", workers=0, progress=False)
    assert summary.failed == {}
    records = [json.loads(line) for line in (output / "results.jsonl").read_text().splitlines()]
    return {(r["case_id"], r["structure"]): r["value"] for r in records if r["metric"] == "dice"}


def test_a_seg_meets_a_structure_set_and_another_seg_on_their_ct(tmp_path):
    """The SEGs hold 3 and 2 of the 6 planes: before, each case failed on a grid mismatch."""
    ref, test = tmp_path / "ref", tmp_path / "test"
    ct = {}
    for patient in ("P1", "P2"):
        frame, series = generate_uid(), generate_uid()
        ct[patient] = write_ct(ref / patient / "CT", patient, frame, series)
        if patient == "P1":  # a structure set against a SEG of the test's shifted square
            write_structure_set(ref / patient / "rs.dcm", patient, frame, series, square_rois([1, 2, 3]))
            write_seg(test / patient / "seg.dcm", ct[patient], {"Organ": square_mask([1, 2, 3], 7.0, 19.0)})
        else:  # two SEGs of different planes
            write_seg(ref / patient / "seg.dcm", ct[patient], {"Organ": square_mask([1, 2, 3])})
            write_seg(test / patient / "seg.dcm", ct[patient], {"Organ": square_mask([2, 3])})
    cases, _unmatched, _skipped = match_folders(ref, test)
    assert [(c.case_id, c.image, c.not_run) for c in cases] == [
        ("P1", str(ref / "P1" / "CT"), None), ("P2", str(ref / "P2" / "CT"), None)]
    values = run(cases, tmp_path / "out")
    truth = dice(square_mask([1, 2, 3]), square_mask([1, 2, 3], 7.0, 19.0))
    assert 0.3 < truth < 0.9 and values[("P1", "Organ")] == pytest.approx(truth, abs=1e-12)
    assert values[("P2", "Organ")] == pytest.approx(dice(square_mask([1, 2, 3]), square_mask([2, 3])), abs=1e-12)


def test_patients_series_and_frames_in_any_nesting_and_every_unpaired_case_with_its_reason(tmp_path):
    ref, test = tmp_path / "ref", tmp_path / "test"
    uid = {name: generate_uid() for name in ("F1", "F1b", "S1", "S1b", "F2", "F2b", "S2", "F3", "S3", "F4")}
    # P1: two CT series in one frame, the structure sets refer to the second; a second study in another frame
    write_ct(ref / "P1" / "study" / "CT_a", "P1", uid["F1"], uid["S1"])
    write_ct(ref / "P1" / "study" / "CT_b", "P1", uid["F1"], uid["S1b"])
    write_structure_set(ref / "P1" / "study" / "RS" / "rs.dcm", "P1", uid["F1"], uid["S1b"], square_rois([1, 2]))
    write_structure_set(test / "deep" / "er" / "P1.dcm", "P1", uid["F1"], uid["S1b"], square_rois([1, 2, 3]))
    write_structure_set(ref / "P1" / "replan" / "rs.dcm", "P1", uid["F1b"], generate_uid(), square_rois([1]))
    # P2: the test was drawn in another frame of reference; P3: no test; P4: a test without reference
    write_ct(ref / "P2" / "CT", "P2", uid["F2"], uid["S2"])
    write_structure_set(ref / "P2" / "rs.dcm", "P2", uid["F2"], uid["S2"], square_rois([1]))
    write_structure_set(test / "P2.dcm", "P2", uid["F2b"], generate_uid(), square_rois([1]))
    write_ct(ref / "P3" / "CT", "P3", uid["F3"], uid["S3"])
    write_structure_set(ref / "P3" / "rs.dcm", "P3", uid["F3"], uid["S3"], square_rois([1]))
    write_structure_set(test / "P4.dcm", "P4", uid["F4"], generate_uid(), square_rois([1]))
    (test / "deep" / "README.txt").write_text("not DICOM")
    cases, unmatched, skipped = match_folders(ref, test)
    by_id = {case.case_id: case for case in cases}
    assert by_id["P1_rs_P1"].image == str(ref / "P1" / "study" / "CT_b") and not by_id["P1_rs_P1"].not_run
    assert by_id["P1_rs_none"].not_run.startswith(f"frame of reference mismatch: no test of patient P1 in frame "
                                                  f"{uid['F1b']}")
    assert by_id["P2_rs_none"].not_run.startswith(f"frame of reference mismatch: no test of patient P2 in frame "
                                                  f"{uid['F2']}")
    assert by_id["P2_none_P2"].not_run.startswith("frame of reference mismatch: no reference of patient P2")
    assert by_id["P3"].not_run == "no test segmentation for patient P3"
    assert by_id["P4"].not_run == "no reference segmentation for patient P4"
    assert len(cases) == 6 and unmatched == {"reference": [], "test": []}
    assert skipped == {"reference": [], "test": [f"{test / 'deep' / 'README.txt'} (not DICOM)"]}
    values = run(cases, tmp_path / "out")
    assert values == {("P1_rs_P1", "Organ"): pytest.approx(dice(square_mask([1, 2]), square_mask([1, 2, 3])),
                                                           abs=1e-12)}


def test_an_image_is_placed_on_a_grid_only_when_its_voxel_centres_are_the_grids():
    """Some planes of a grid, stored top-down, go back voxel for voxel; half a voxel off, or
    reaching beyond the grid, they do not."""
    grid = LabelImage(np.zeros((6, 4, 5), np.uint8), spacing=(3.0, 2.0, 2.0), origin=(0.0, 0.0, 0.0))
    planes = np.arange(1, 5 * 4 * 3 + 1, dtype=np.uint8).reshape(3, 4, 5)  # grid planes 3, 2, 1
    top_down = LabelImage(planes, spacing=(3.0, 2.0, 2.0), origin=(0.0, 0.0, 9.0),
                          direction=(1, 0, 0, 0, 1, 0, 0, 0, -1))
    placed = placed_on(top_down, grid)
    expected = np.zeros((6, 4, 5), np.uint8)
    expected[1:4] = planes[::-1]
    assert np.array_equal(placed.array, expected) and placed.origin == grid.origin and placed.spacing == grid.spacing
    assert placed_on(LabelImage(planes, spacing=(3.0, 2.0, 2.0), origin=(1.0, 0.0, 3.0)), grid) is None
    assert placed_on(LabelImage(planes, spacing=(3.0, 2.0, 2.0), origin=(0.0, 0.0, 12.0)), grid) is None
    assert placed_on(LabelImage(planes, spacing=(3.0, 4.0, 2.0), origin=(0.0, 0.0, 3.0)), grid) is None


def test_of_several_references_in_one_frame_a_test_pairs_with_the_one_of_its_image_series(tmp_path):
    """Two CT series of one frame (e.g. a planning CT and a re-export), a structure set on each."""
    ref, test = tmp_path / "ref", tmp_path / "test"
    frame, first, second = generate_uid(), generate_uid(), generate_uid()
    for name, series in (("a", first), ("b", second)):
        write_ct(ref / "P1" / f"CT_{name}", "P1", frame, series)
        write_structure_set(ref / "P1" / f"rs_{name}.dcm", "P1", frame, series, square_rois([1, 2]))
    write_structure_set(test / "auto_b.dcm", "P1", frame, second, square_rois([1, 2, 3]))
    cases, _unmatched, _skipped = match_folders(ref, test)
    assert [(c.case_id, c.reference, c.image, c.not_run) for c in cases] == [
        ("P1_rs_a_none", str(ref / "P1" / "rs_a.dcm"), None,
         f"not paired: one of 2 reference segmentations of patient P1 in frame {frame}, and no test refers to its "
         "image series alone"),
        ("P1_rs_b_auto_b", str(ref / "P1" / "rs_b.dcm"), str(ref / "P1" / "CT_b"), None)]
    assert run(cases, tmp_path / "out") == {
        ("P1_rs_b_auto_b", "Organ"): pytest.approx(dice(square_mask([1, 2]), square_mask([1, 2, 3])), abs=1e-12)}
    write_structure_set(test / "auto_other.dcm", "P1", frame, generate_uid(), square_rois([1]))
    cases, _unmatched, _skipped = match_folders(ref, test)
    [other] = [c for c in cases if c.test.endswith("auto_other.dcm")]
    assert other.not_run.startswith(f"ambiguous: 2 reference segmentations of patient P1 in frame {frame}")
    assert other.not_run.endswith("the test refers to the image series of none of them; keep one per frame of "
                                  "reference")


def test_a_structure_set_is_in_the_frame_its_rois_are_drawn_in(tmp_path):
    """It may reference a registered MR's frame too (two frames): its ROIs say which one it is in,
    as the structure set reader decides."""
    ref, test = tmp_path / "ref", tmp_path / "test"
    frame, series, other_frame = generate_uid(), generate_uid(), generate_uid()
    write_ct(ref / "P1" / "CT", "P1", frame, series)
    for path in (ref / "P1" / "rs.dcm", test / "P1.dcm"):
        write_structure_set(path, "P1", frame, series, square_rois([1, 2]))
    ds = pydicom.dcmread(test / "P1.dcm")
    registered = Dataset()
    registered.FrameOfReferenceUID = other_frame
    ds.ReferencedFrameOfReferenceSequence.append(registered)
    ds.StructureSetROISequence[0].ReferencedFrameOfReferenceUID = frame
    ds.save_as(test / "P1.dcm")
    [case], _unmatched, _skipped = match_folders(ref, test)
    assert (case.test, case.image, case.not_run) == (str(test / "P1.dcm"), str(ref / "P1" / "CT"), None)
    assert run([case], tmp_path / "out") == {("P1", "Organ"): 1.0}


def test_linked_folders_are_read_once_and_a_link_back_up_ends_there(tmp_path):
    """Datasets are often gathered by linking patient folders; a link may point back up."""
    frame, series = generate_uid(), generate_uid()
    store, ref, test = tmp_path / "store", tmp_path / "ref", tmp_path / "test"
    write_ct(store / "P1" / "CT", "P1", frame, series)
    write_structure_set(store / "P1" / "rs.dcm", "P1", frame, series, square_rois([1, 2]))
    write_structure_set(test / "P1.dcm", "P1", frame, series, square_rois([1, 2]))
    ref.mkdir()
    (ref / "P1").symlink_to(store / "P1", target_is_directory=True)
    (ref / "again").symlink_to(store / "P1", target_is_directory=True)
    (store / "P1" / "up").symlink_to(ref, target_is_directory=True)
    [case], _unmatched, _skipped = match_folders(ref, test)
    assert (case.case_id, case.reference, case.image, case.not_run) == (
        "P1", str(ref / "P1" / "rs.dcm"), str(ref / "P1" / "CT"), None)
