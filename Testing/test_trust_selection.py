"""Trust round three (issues 24 and 27): a label selection decides alone what a grid may crop, a
given dose is never read for nothing, and a structure a grid empties is never measured as empty.
Each test failed before its fix."""
import csv
import json

import numpy as np
import pytest
import SimpleITK as sitk

from segmetrics import compare
from segmetrics.cli import main
from segmetrics.evaluation.batch import Case, read_results, run_batch
from segmetrics.inputs.io import InputPolicy, ReadError, load_pair
from segmetrics.inputs.readers.rtdose import DoseGrid
from segmetrics.spatial.geometry import GeometryMismatchError, LabelImage
from test_dicom import rectangle, write_rtstruct

CROP = InputPolicy(allow_crop=True)


def write_image(path, image: LabelImage):
    sitk.WriteImage(image.to_sitk(), str(path))
    return path


def reference_and_wider_test():
    """Reference: label 5, a box in a 10 × 20 × 20 mm field of view (1 mm voxels, origin 0). Test on
    a grid 30 mm wider in x: label 5 on the same voxels, label 7 beyond the reference's field of view."""
    reference = np.zeros((10, 20, 20), np.uint8)
    reference[2:8, 5:15, 5:15] = 5
    test = np.zeros((10, 20, 50), np.uint8)
    test[2:8, 5:15, 6:16] = 5
    test[2:8, 5:15, 35:45] = 7
    return LabelImage(reference, (1.0, 1.0, 1.0)), LabelImage(test, (1.0, 1.0, 1.0))


# --------------------------------------------------------- 1. only the selected structures decide
def test_resampling_refusal_counts_only_the_selected_structures():
    """``labels=[5]`` was refused because the unselected label 7 lies outside the reference grid."""
    reference, test = reference_and_wider_test()
    result = compare(reference, test, labels=[5], metrics="dice", resample_to="reference")
    assert [s.structure for s in result.structures] == ["5"]
    assert result.structures[0].value("dice") == pytest.approx(0.9)  # shifted by 1 of 10 voxels in x
    assert not any("discarded" in note for note in result.notes)  # label 7 is not the user's concern
    with pytest.raises(GeometryMismatchError, match="would discard all of '7'"):
        compare(reference, test, labels=[7], metrics="dice", resample_to="reference")
    with pytest.raises(GeometryMismatchError, match="would discard all of '7'"):
        compare(reference, test, metrics="dice", resample_to="reference")


def test_resampling_refusal_follows_a_selection_by_name_and_names_only_the_selected_loss():
    reference, test = reference_and_wider_test()
    test.array[2:8, 15:18, 15:18] = 9  # a small label 9 inside, kept by the grid
    test.array[2:8, 5:8, 45:48] = 9  # ... and some of it outside: partly discarded
    names = {5: "Heart", 7: "Liver", 9: "Cord"}
    result = compare(reference, test, labels=["Heart"], metrics="dice", resample_to="reference", names=names)
    assert [s.structure for s in result.structures] == ["Heart"]
    partly = compare(reference, test, labels=["Cord"], metrics="dice", resample_to="reference", names=names)
    warning = [note for note in partly.notes if "discarded" in note]
    assert len(warning) == 1 and "50.0 % of the test selected structures' foreground" in warning[0]


def test_resampling_both_onto_an_image_grid_counts_only_the_selected_structures(tmp_path):
    reference, test = reference_and_wider_test()
    grid = write_image(tmp_path / "grid.nii.gz", LabelImage(np.zeros((10, 20, 20), np.uint8), (1.0, 1.0, 1.0)))
    result = compare(reference, test, labels=[5], metrics="dice", resample_to=str(grid))
    assert result.structures[0].value("dice") == pytest.approx(0.9)
    with pytest.raises(GeometryMismatchError, match="would discard all of '7'"):
        compare(reference, test, metrics="dice", resample_to=str(grid))


@pytest.mark.needs("rich")
def test_cli_and_batch_labels_decide_the_resampling_refusal(tmp_path, capsys):
    reference, test = reference_and_wider_test()
    paths = {side: write_image(tmp_path / f"{side}.nii.gz", image)
             for side, image in (("reference", reference), ("test", test))}
    out = tmp_path / "out.csv"
    assert main(["compare", str(paths["reference"]), str(paths["test"]), "--labels", "5", "--metrics", "dice",
                 "--resample-to", "reference", "--format", "csv", "-o", str(out)]) == 0, capsys.readouterr().err
    assert [row["structure"] for row in csv.DictReader(out.open())] == ["5"]
    assert main(["compare", str(paths["reference"]), str(paths["test"]), "--metrics", "dice",
                 "--resample-to", "reference"]) == 2
    assert "would discard all of '7'" in capsys.readouterr().err
    summary = run_batch([Case("one", str(paths["reference"]), str(paths["test"]))], tmp_path / "batch", metrics="dice",
                        labels=[5], resample_to="reference", progress=False, workers=0)
    assert not summary.failed
    assert [r["structure"] for r in read_results(tmp_path / "batch")] == ["5"]


def contours_partly_beyond_a_ct(tmp_path):
    """An RT Structure Set whose Heart lies on planes z 10..12 mm, beyond a CT of slices z 0..2,
    and whose Box lies on planes 0..1; and that CT."""
    write_rtstruct(tmp_path / "rt.dcm", {"Heart": [rectangle(9.5, 4.5, 29.5, 14.5, z) for z in (10.0, 11.0, 12.0)],
                                         "Box": [rectangle(9.5, 4.5, 29.5, 14.5, z) for z in (0.0, 1.0)]})
    return tmp_path / "rt.dcm", write_image(tmp_path / "ct.nii.gz", LabelImage(np.zeros((3, 30, 40)), (1.0, 1.0, 1.0)))


@pytest.mark.needs("rich")
def test_contours_beyond_the_image_grid_refuse_only_a_selected_structure(tmp_path, capsys):
    """``--labels Box`` was refused because the unselected Heart lies beyond the CT's slices."""
    rtss, ct = contours_partly_beyond_a_ct(tmp_path)
    result = compare(rtss, rtss, labels=["Box"], metrics="dice", image=ct)
    assert [s.structure for s in result.structures] == ["Box"] and result["Box"].value("dice") == 1.0
    by_number = compare(rtss, rtss, labels=[2], metrics="dice", image=ct)
    assert [s.structure for s in by_number.structures] == ["Box"]
    with pytest.raises(ReadError, match="3 of 3 contour.*'Heart'.*lie outside the grid of .*ct.nii.gz"):
        compare(rtss, rtss, labels=["Heart"], metrics="dice", image=ct)
    out = tmp_path / "out.csv"
    assert main(["compare", str(rtss), str(rtss), "--image", str(ct), "--labels", "Box", "--metrics", "dice",
                 "--format", "csv", "-o", str(out)]) == 0, capsys.readouterr().err
    assert main(["compare", str(rtss), str(rtss), "--image", str(ct), "--metrics", "dice"]) == 2
    assert "'Heart' would be compared without any of its voxels" in capsys.readouterr().err
    summary = run_batch([Case("one", str(rtss), str(rtss), image=str(ct))], tmp_path / "batch", metrics="dice",
                        labels=["Box"], progress=False, workers=0)
    assert not summary.failed


def test_a_structure_cropped_on_both_sides_alike_passes_only_with_its_own_partner(tmp_path):
    """Part of the Heart lies beyond the CT on both sides: comparable. The test's partly cropped
    structure is paired with a reference structure that keeps all its contours: refused."""
    inside, beyond = (0.0, 1.0, 2.0), (3.0, 4.0)
    heart = [rectangle(9.5, 4.5, 29.5, 14.5, z) for z in inside + beyond]
    box = [rectangle(9.5, 4.5, 29.5, 14.5, z) for z in inside]
    write_rtstruct(tmp_path / "reference.dcm", {"Heart": heart, "Box": box})
    write_rtstruct(tmp_path / "test.dcm", {"Heart": heart, "Box": heart})
    ct = write_image(tmp_path / "ct.nii.gz", LabelImage(np.zeros((3, 30, 40)), (1.0, 1.0, 1.0)))
    result = compare(tmp_path / "reference.dcm", tmp_path / "test.dcm", labels=["Heart"], metrics="dice", image=ct)
    assert result["Heart"].value("dice") == 1.0
    with pytest.raises(ReadError, match="the test alone would lose part of 'Box'"):
        compare(tmp_path / "reference.dcm", tmp_path / "test.dcm", labels=["Box"], metrics="dice", image=ct)


# ------------------------------------------------------------ a structure the resampling empties
def thin_test_on_a_finer_grid():
    """Reference grid: 3 mm slices at z 0, 3, 6. Test grid: 1 mm slices at z 0..8, label 1 a
    thick box (z 2..6), label 2 one slice at z = 1 mm, between the reference's slice centres."""
    reference = np.zeros((3, 20, 20), np.uint8)
    reference[1:3, 5:15, 5:15] = 1
    test = np.zeros((9, 20, 20), np.uint8)
    test[2:7, 5:15, 5:15] = 1
    test[1, 5:15, 5:15] = 2
    return LabelImage(reference, (3.0, 1.0, 1.0)), LabelImage(test, (1.0, 1.0, 1.0))


def test_a_structure_that_resampling_leaves_without_voxels_is_refused():
    """Label 2 vanished between the reference's slice centres and was not listed at all (an unnamed
    label no longer present after resampling), exit 0."""
    reference, test = thin_test_on_a_finer_grid()
    with pytest.raises(GeometryMismatchError, match="left no voxel of '2'.*--allow-crop"):
        compare(reference, test, metrics="dice", resample_to="reference")
    selected = compare(reference, test, labels=[1], metrics="dice", resample_to="reference")
    assert [s.structure for s in selected.structures] == ["1"]
    cropped = compare(reference, test, metrics="dice", resample_to="reference", input_policy=CROP)
    assert [s.structure for s in cropped.structures] == ["1", "2"]
    assert cropped["2"].status == "both_empty"  # listed, with a warning, not dropped
    assert any(note.startswith("warning: resampling the test") and "'2'" in note for note in cropped.notes)


# ------------------------------------------------------------------ 2. a given dose is used
def uniform_dose():
    return DoseGrid(np.full((12, 22, 22), 7.0), (1.0, 1.0, 1.0), (-1.0, -1.0, -1.0), tuple(np.eye(3).ravel()))


def test_a_given_dose_selects_the_dose_group_beside_the_chosen_metrics():
    """``compare(..., metrics="dice", dose=...)`` read the dose and computed nothing from it."""
    reference, _ = reference_and_wider_test()
    result = compare(reference, reference, metrics="dice", dose=uniform_dose())
    assert "dice" in result.metrics() and result.structures[0].value("dose_dmean_reference_gy") == 7.0
    chosen = compare(reference, reference, metrics="dice,dose_dmean_test_gy", dose=uniform_dose())
    assert chosen.metrics() == ["dice", "dose_dmean_test_gy"]  # dose metrics named: those alone


@pytest.mark.needs("rich")
def test_cli_dose_with_other_metrics_gives_dose_metrics_and_the_dvh(tmp_path, capsys):
    from test_dose import write_rtdose

    reference, _ = reference_and_wider_test()
    path = write_image(tmp_path / "reference.nii.gz", reference)
    dose = write_rtdose(tmp_path / "dose.dcm", np.full((12, 22, 22), 7.0), (1.0, 1.0, 1.0), (-1.0, -1.0, -1.0))
    out, dvh = tmp_path / "out.json", tmp_path / "dvh.csv"
    assert main(["compare", str(path), str(path), "--metrics", "dice", "--dose", str(dose), "--format", "json",
                 "-o", str(out), "--dvh", str(dvh), "--sort", "dose_dmean_reference_gy"]) == 0, capsys.readouterr().err
    values = {r["metric"]: r["value"] for r in json.loads(out.read_text())["records"]}
    assert values["dice"] == 1.0 and values["dose_dmean_reference_gy"] == pytest.approx(7.0)
    assert dvh.exists()
    manifest_case = Case("one", str(path), str(path), dose=str(dose))
    assert not run_batch([manifest_case], tmp_path / "batch", metrics="dice", progress=False, workers=0).failed
    metrics = {r["metric"] for r in read_results(tmp_path / "batch")}
    assert "dice" in metrics and "dose_dmean_reference_gy" in metrics


# ------------------------------------------- 3. missing planes in patient coordinates, alike
@pytest.mark.parametrize("stored", ["increasing", "z reversed", "sagittal"])
def test_planes_one_side_contours_are_patient_z_for_polygons_and_masks_alike(tmp_path, stored):
    """Reference contours on z = -7, -5, -3, -1 mm, the test on -7 and -5 only: the reference alone
    contours z = -3 and -1, as the polygons said and as a planning system shows them. Masks said
    4 and 6 (mm from the pair's first slice)."""
    planes = (-7.0, -5.0, -3.0, -1.0)
    write_rtstruct(tmp_path / "reference.dcm", {"Cord": [rectangle(2.5, 3.5, 8.5, 7.5, z) for z in planes]})
    write_rtstruct(tmp_path / "test.dcm", {"Cord": [rectangle(2.5, 3.5, 8.5, 7.5, z) for z in planes[:2]]})
    polygons = compare(tmp_path / "reference.dcm", tmp_path / "test.dcm", metrics="contours")
    assert polygons["Cord"].get("contour_hd_mm").params["reference_only_planes_mm"] == [-3.0, -1.0]
    ct = LabelImage(np.zeros((6, 12, 12), np.uint8), (2.0, 1.0, 1.0), (0.0, 0.0, -9.0))  # slices z = -9 .. 1
    if stored == "z reversed":
        ct = LabelImage(ct.array, ct.spacing, (0.0, 0.0, 1.0), (1, 0, 0, 0, 1, 0, 0, 0, -1))
    elif stored == "sagittal":  # array axes (x, z, y): ITK i = y, j = z, k = x
        ct = LabelImage(np.zeros((12, 6, 12), np.uint8), (1.0, 2.0, 1.0), (0.0, 0.0, -9.0), (0, 0, 1, 1, 0, 0, 0, 1, 0))
    grid = write_image(tmp_path / "ct.nrrd", ct)
    reference, test = (LabelImage(side.array, side.spacing, side.origin, side.direction, dict(side.names))
                       for side in load_pair(tmp_path / "reference.dcm", tmp_path / "test.dcm", image=grid))
    masks = compare(reference, test, metrics="dice,contours")  # plain label maps: the mask path
    assert masks["Cord"].value("dice") == pytest.approx(2 / 3)  # the test holds 2 of the 4 slices
    assert masks["Cord"].get("contour_hd_mm").params["reference_only_planes_mm"] == pytest.approx([-3.0, -1.0])
    assert masks["Cord"].get("contour_hd_mm").params["test_only_planes_mm"] == []


# --------------------------------------------------------------------- 4. pairing, selection
def test_label_maps_holding_one_different_label_each_are_not_paired():
    """Reference: only label 1 (liver); test: only label 2 (tumour). They were paired as one
    'foreground' structure (the rule for 0/1 against 0/255 masks): Dice of liver against tumour."""
    reference, test = np.zeros((4, 10, 10), np.uint8), np.zeros((4, 10, 10), np.uint8)
    reference[1:3, 2:6, 2:6] = 1
    test[1:3, 2:6, 2:6] = 2
    result = compare(LabelImage(reference, (1.0, 1.0, 1.0)), LabelImage(test, (1.0, 1.0, 1.0)), metrics="dice")
    assert [(s.structure, s.status) for s in result.structures] == [("1", "test_empty"), ("2", "reference_empty")]
    selected = compare(LabelImage(reference, (1.0, 1.0, 1.0)), LabelImage(test, (1.0, 1.0, 1.0)), labels=[2],
                       metrics="dice")
    assert [(s.structure, s.reference_label, s.test_label) for s in selected.structures] == [("2", 2, 2)]
    picture = compare(LabelImage(reference * 255, (1.0, 1.0, 1.0)), LabelImage(reference, (1.0, 1.0, 1.0)),
                      metrics="dice")
    assert [(s.structure, s.value("dice")) for s in picture.structures] == [("foreground", 1.0)]


def test_a_label_value_given_as_a_float_selects_that_label():
    """``labels=[5.0]`` compared label 5 but named it '5.0' and noted it 'absent from both images'."""
    reference, test = reference_and_wider_test()
    test = LabelImage(test.array[:, :, :20].copy(), (1.0, 1.0, 1.0))
    result = compare(reference, test, labels=[5.0], metrics="dice")
    assert [s.structure for s in result.structures] == ["5"] and not result.notes
    assert result.structures[0].value("dice") == pytest.approx(0.9)
    absent = compare(reference, test, labels=[6.0], metrics="dice")
    assert [s.structure for s in absent.structures] == ["6"] and absent.structures[0].status == "both_empty"


def test_contours_reaching_beyond_the_edges_of_the_slices_are_refused_for_the_selected_structure(tmp_path):
    """The label map's grid holds x 0..39 mm; the Heart's contours reach x 50 mm: the part beyond
    was silently cut from the structure set's side alone (Dice 1 for a Heart a third larger)."""
    write_rtstruct(tmp_path / "rt.dcm", {"Heart": [rectangle(29.5, 4.5, 49.5, 14.5, z) for z in (0.0, 1.0, 2.0)],
                                         "Box": [rectangle(9.5, 4.5, 19.5, 14.5, z) for z in (0.0, 1.0, 2.0)]})
    labels = np.zeros((3, 30, 40), np.uint8)
    labels[:, 5:15, 30:40] = 1
    labels[:, 5:15, 10:20] = 2
    auto = write_image(tmp_path / "auto.nii.gz", LabelImage(labels, (1.0, 1.0, 1.0)))
    names = {1: "Heart", 2: "Box"}
    with pytest.raises(ReadError, match="3 of 3 contour.*'Heart' reach beyond the edges.*the reference alone would "
                                        "lose part of 'Heart'.*--allow-crop"):
        compare(tmp_path / "rt.dcm", auto, metrics="dice", names=names)
    box = compare(tmp_path / "rt.dcm", auto, labels=["Box"], metrics="dice", names=names)
    assert box["Box"].value("dice") == 1.0
    cropped = compare(tmp_path / "rt.dcm", auto, metrics="dice", names=names, input_policy=CROP)
    assert cropped["Heart"].value("dice") == 1.0
    assert any("3 contour(s) of 'Heart' reach beyond the edges" in note for note in cropped.notes)
    # two structure sets cropped alike on one CT stay comparable
    ct = write_image(tmp_path / "ct.nii.gz", LabelImage(np.zeros((3, 30, 40), np.uint8), (1.0, 1.0, 1.0)))
    assert compare(tmp_path / "rt.dcm", tmp_path / "rt.dcm", image=ct, metrics="dice")["Heart"].value("dice") == 1.0


def test_an_unnamed_label_map_does_not_pair_with_rt_rois_by_roi_number(tmp_path):
    """Label 1 of an unnamed label map (a Heart) was paired with ROI 1 of the structure set (BODY)
    by value: Dice of BODY against Heart, status ok. ROI numbers are not label values."""
    write_rtstruct(tmp_path / "rt.dcm", {"BODY": [rectangle(0.5, 0.5, 38.5, 28.5, z) for z in (0.0, 1.0, 2.0)],
                                         "Heart": [rectangle(9.5, 4.5, 19.5, 14.5, z) for z in (0.0, 1.0, 2.0)]})
    labels = np.zeros((3, 30, 40), np.uint8)
    labels[:, 5:15, 10:20] = 1
    auto = write_image(tmp_path / "auto.nii.gz", LabelImage(labels, (1.0, 1.0, 1.0)))
    result = compare(tmp_path / "rt.dcm", auto, metrics="dice")
    assert [(s.structure, s.reference_label, s.test_label, s.status) for s in result.structures] == [
        ("BODY", 1, None, "test_empty"), ("Heart", 2, None, "test_empty"), ("1", None, 1, "reference_empty")]
    assert any("not paired with ROI 1 ('BODY')" in note and "--names" in note for note in result.notes)
    named = compare(tmp_path / "rt.dcm", auto, metrics="dice", names={1: "Heart"})
    assert named["Heart"].value("dice") == 1.0


def test_an_image_grid_the_inputs_are_not_on_is_said(tmp_path):
    """``image=`` (CLI ``--image``) was silently left unused for label images whose voxels are not its voxels."""
    mask = np.zeros((4, 6, 6), np.uint8)
    mask[1:3, 2:4, 2:4] = 1
    for name, array, spacing in (("ref.nii.gz", mask, (1.0, 1.0, 1.0)), ("test.nii.gz", mask, (1.0, 1.0, 1.0)),
                                 ("ct.nii.gz", np.zeros((3, 5, 5), np.int16), (0.7, 0.7, 2.3))):
        image = sitk.GetImageFromArray(array)
        image.SetSpacing(spacing)
        sitk.WriteImage(image, str(tmp_path / name))
    result = compare(tmp_path / "ref.nii.gz", tmp_path / "test.nii.gz", metrics="dice", image=tmp_path / "ct.nii.gz")
    assert sum("that grid is not used" in note for note in result.notes) == 2
