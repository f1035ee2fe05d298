"""Pairing a reference with a test (issue 24, items 1-4): name maps go to the unnamed side only,
contours and structures lost to a grid are refused unless cropping is asked for, and one lattice
stored in another axis order is compared voxel for voxel."""
import csv
import json

import numpy as np
import pytest
import SimpleITK as sitk

from segmetrics import compare
from segmetrics.cli import main
from segmetrics.inputs.io import InputPolicy, ReadError, load_pair
from segmetrics.spatial.geometry import GeometryMismatchError, LabelImage
from test_dicom import rectangle, write_rtstruct

CROP = InputPolicy(allow_crop=True)


def label_map(path, array, spacing=(1.0, 1.0, 1.0), origin=(0.0, 0.0, 0.0)):
    """Write ``array`` ((z, y, x)) with ITK ``spacing`` and ``origin`` (x, y, z, mm)."""
    image = sitk.GetImageFromArray(np.asarray(array, np.uint8))
    image.SetSpacing(spacing)
    image.SetOrigin(origin)
    sitk.WriteImage(image, str(path))
    return path


def boxes(shape=(4, 30, 40)):
    """Label 1 at x 10..29, y 5..14 mm, label 2 at x 2..6, y 20..25 mm, on every slice (1 mm voxels)."""
    array = np.zeros(shape, np.uint8)
    array[:, 5:15, 10:30] = 1
    array[:, 20:26, 2:7] = 2
    return array


# ------------------------------------------------------------------------- 1. name maps
@pytest.fixture
def rtstruct_and_label_map(tmp_path):
    """An RT Structure Set whose ROI 1 is BODY (everything) and ROI 2 the box of label 1, and a
    label map of the same grid with labels 1 (the box) and 2."""
    planes = (0.0, 1.0, 2.0, 3.0)
    write_rtstruct(tmp_path / "rt.dcm", {"BODY": [rectangle(-0.5, -0.5, 39.5, 29.5, z) for z in planes],
                                         "Heart": [rectangle(9.5, 4.5, 29.5, 14.5, z) for z in planes]})
    label_map(tmp_path / "auto.nii.gz", boxes())
    return tmp_path / "rt.dcm", tmp_path / "auto.nii.gz"


@pytest.mark.needs("rich")
def test_a_name_map_names_the_label_map_and_leaves_the_structure_set_its_names(rtstruct_and_label_map, tmp_path):
    """{"1": "Heart", "2": "Tumor Bed"} meant for the label map renamed the RTSTRUCT's ROI 1 (BODY)
    "Heart" too, and paired it with the label map's heart (Dice 0.16, status ok)."""
    rtss, auto = rtstruct_and_label_map
    result = compare(rtss, auto, metrics="dice", names={1: "Heart", 2: "Tumor Bed"})
    assert result["Heart"].value("dice") == 1.0
    assert {s.structure for s in result.structures} == {"BODY", "Heart", "Tumor Bed"}
    named = "name map: names given to the labels of the test (the reference keeps the names its file carries)"
    assert named in result.notes
    (tmp_path / "names.json").write_text(json.dumps({"1": "Heart", "2": "Tumor Bed"}))
    out = tmp_path / "out.csv"
    assert main(["compare", str(rtss), str(auto), "--names", str(tmp_path / "names.json"), "--metrics", "dice",
                 "--format", "csv", "-o", str(out)]) == 0
    rows = list(csv.DictReader(out.read_text().splitlines()))
    assert {(row["structure"], row["reference_label"], row["test_label"], row["value"]) for row in rows} == {
        ("BODY", "1", "", "0.0"), ("Heart", "2", "1", "1.0"), ("Tumor Bed", "", "2", "0.0")}


def test_a_name_map_that_names_nothing_on_the_unnamed_side_is_refused(rtstruct_and_label_map):
    rtss, auto = rtstruct_and_label_map
    with pytest.raises(ReadError, match=r"names none of the labels of the test \(1, 2\)"):
        compare(rtss, auto, metrics="dice", names={7: "Liver"})


def test_a_name_map_for_two_named_inputs_is_refused(rtstruct_and_label_map):
    rtss, _ = rtstruct_and_label_map
    with pytest.raises(ReadError, match="both inputs name their own structures"):
        compare(rtss, rtss, metrics="dice", names={1: "Heart"})


def test_a_name_map_names_both_unnamed_label_maps_and_changes_no_input():
    reference = LabelImage(boxes(), (1.0, 1.0, 1.0))
    result = compare(reference, reference, metrics="dice", names={1: "Heart", 2: "Lung"})
    assert [s.structure for s in result.structures] == ["Heart", "Lung"]
    assert reference.names == {}


def test_a_name_map_with_label_text_as_json_gives_it_names_labels_in_the_api_too():
    """names={"1": "Heart"} (a dict loaded from JSON) was refused as naming none of the labels (1, 2)."""
    reference = LabelImage(boxes(), (1.0, 1.0, 1.0))
    result = compare(reference, reference, metrics="dice", names={"1": "Heart", "2.0": "Lung"})
    assert [s.structure for s in result.structures] == ["Heart", "Lung"]
    with pytest.raises(ReadError, match=r"name map: label\(s\) 1 named more than once"):
        compare(reference, reference, metrics="dice", names={"1": "Heart", 1: "Lung"})
    with pytest.raises(ReadError, match="name map: expected whole label values and names"):
        compare(reference, reference, metrics="dice", names={"Heart": "1"})


def test_a_name_map_naming_labels_no_image_holds_says_so():
    reference = LabelImage(boxes(), (1.0, 1.0, 1.0))
    result = compare(reference, reference, metrics="dice", names={0: "background", 1: "Heart", 2: "Lung", 9: "Liver"})
    assert [s.structure for s in result.structures] == ["Heart", "Lung"]
    assert ("name map: names label(s) that the reference and test do(es) not hold, so no structure has these "
            "names: 9 ('Liver')") in result.notes


def test_a_csv_name_map_is_read_like_a_json_one(tmp_path):
    reference = LabelImage(boxes(), (1.0, 1.0, 1.0))
    (tmp_path / "names.csv").write_text("label,name\n1,Heart\n2,Tumor Bed\n")
    result = compare(reference, reference, metrics="dice", names=tmp_path / "names.csv")
    assert [s.structure for s in result.structures] == ["Heart", "Tumor Bed"]
    (tmp_path / "bad.csv").write_text("1,Heart,extra\n")
    with pytest.raises(ReadError, match=r"bad.csv: expected .*\(a row without exactly two cells\)"):
        compare(reference, reference, metrics="dice", names=tmp_path / "bad.csv")


@pytest.mark.needs("rich")
def test_cli_name_map_refusals_name_the_file(rtstruct_and_label_map, tmp_path, capsys):
    rtss, auto = rtstruct_and_label_map
    (tmp_path / "liver.json").write_text(json.dumps({"7": "Liver"}))
    assert main(["compare", str(rtss), str(auto), "--names", str(tmp_path / "liver.json"), "--metrics", "dice"]) == 2
    assert f"{tmp_path / 'liver.json'}: names none of the labels of the test (1, 2)" in capsys.readouterr().err


# ------------------------------------------------------------- 2. contours outside the image grid
def test_contours_the_image_grid_misses_are_refused_naming_the_structure_and_extent(tmp_path):
    """A CT whose slices (z 0..2) miss the Heart's planes (z 10..12) gave Heart 'both_empty', exit 0."""
    write_rtstruct(tmp_path / "rt.dcm", {"Heart": [rectangle(9.5, 4.5, 29.5, 14.5, z) for z in (10.0, 11.0, 12.0)],
                                         "Box": [rectangle(9.5, 4.5, 29.5, 14.5, z) for z in (0.0, 1.0)]})
    ct = label_map(tmp_path / "ct.nii.gz", np.zeros((3, 30, 40)))
    with pytest.raises(ReadError, match=r"3 of 3 contour\(s\) of 'Heart' \(planes at 10 to 12 mm along the slice "
                                        r"normal\) lie outside the grid of .*ct.nii.gz \(slices at 0 to 2 mm\): "
                                        r"'Heart' would be compared without any of its voxels.*--allow-crop"):
        compare(tmp_path / "rt.dcm", tmp_path / "rt.dcm", metrics="dice", image=ct)
    result = compare(tmp_path / "rt.dcm", tmp_path / "rt.dcm", metrics="dice", image=ct, input_policy=CROP)
    assert result["Heart"].status == "both_empty" and result["Box"].value("dice") == 1.0
    assert any("3 contour(s) of 'Heart' lie outside the grid" in note for note in result.notes)


def test_contours_partly_outside_on_one_side_only_are_refused(tmp_path):
    """The reference's Heart goes beyond the label map's slices, the label map's cannot: one side
    cropped is a biased comparison. Both structure sets cropped alike stay comparable."""
    write_rtstruct(tmp_path / "rt.dcm", {"Heart": [rectangle(9.5, 4.5, 29.5, 14.5, z) for z in range(6)]})
    label_map(tmp_path / "heart.nii.gz", boxes()[:, :, :] == 1)
    with pytest.raises(ReadError, match=r"2 of 6 contour\(s\) of 'Heart' .* the reference alone would lose part"):
        load_pair(tmp_path / "rt.dcm", tmp_path / "heart.nii.gz")
    reference, _ = load_pair(tmp_path / "rt.dcm", tmp_path / "heart.nii.gz", input_policy=CROP)
    assert reference.mask(1).sum() == 4 * 200
    ct = label_map(tmp_path / "ct.nii.gz", np.zeros((4, 30, 40)))
    reference, test = load_pair(tmp_path / "rt.dcm", tmp_path / "rt.dcm", image=ct)
    assert reference.mask(1).sum() == test.mask(1).sum() == 4 * 200


# --------------------------------------------------------------------------------- 3. resampling
def test_resampling_onto_a_field_of_view_that_does_not_overlap_is_refused():
    """900 mm apart: '100.0 % of the test foreground was discarded', then a table of misses, exit 0."""
    reference = LabelImage(boxes(), (1.0, 1.0, 1.0))
    test = LabelImage(boxes(), (1.0, 1.0, 1.0), origin=(0.0, 0.0, 900.0))
    with pytest.raises(GeometryMismatchError, match="does not overlap that of the reference.*--allow-crop"):
        compare(reference, test, metrics="dice", resample_to="reference")
    result = compare(reference, test, metrics="dice", resample_to="reference", input_policy=CROP)
    assert any("100.0 % of the test foreground" in note for note in result.notes)


def test_a_grid_mismatch_suggests_resampling_only_when_the_fields_of_view_overlap():
    reference = LabelImage(boxes(), (1.0, 1.0, 1.0))
    far = LabelImage(boxes(), (1.0, 1.0, 1.0), origin=(0.0, 0.0, 900.0))
    with pytest.raises(GeometryMismatchError, match="fields of view do not overlap") as refused:
        compare(reference, far, metrics="dice")
    assert "resample" not in str(refused.value)
    near = LabelImage(boxes(), (1.0, 1.0, 1.0), origin=(0.0, 0.0, 1.0))
    with pytest.raises(GeometryMismatchError, match="--resample-to reference"):
        compare(reference, near, metrics="dice")


def test_resampling_that_discards_a_whole_structure_is_refused_and_a_partial_loss_warned():
    reference = LabelImage(boxes()[:, :, 8:], (1.0, 1.0, 1.0), origin=(8.0, 0.0, 0.0))  # x 8..39 mm: label 2 is at 2..6
    test = LabelImage(boxes(), (1.0, 1.0, 1.0))
    with pytest.raises(GeometryMismatchError, match="would discard all of '2'"):
        compare(reference, test, metrics="dice", resample_to="reference")
    result = compare(reference, test, metrics="dice", resample_to="reference", input_policy=CROP)
    lost = 5 * 6 * 4 / (5 * 6 * 4 + 20 * 10 * 4)
    assert any(f"{100 * lost:.1f} % of the test foreground" in note for note in result.notes)
    partial = LabelImage(boxes()[:, :, 4:], (1.0, 1.0, 1.0), origin=(4.0, 0.0, 0.0))  # cuts label 2 at x 4
    result = compare(partial, test, metrics="dice", resample_to="reference")
    share = 2 * 6 * 4 / (5 * 6 * 4 + 20 * 10 * 4)
    assert any(f"{100 * share:.1f} % of the test foreground" in note for note in result.notes)


# ------------------------------------------------------------------- 4. one lattice, another order
def stored_otherwise(image: LabelImage, axes, flips) -> LabelImage:
    """The same physical voxels with the array axes in the order ``axes`` and those in ``flips``
    (of the new order) reversed: direction and origin computed here by hand from the index map."""
    array = np.flip(np.transpose(image.array, axes), flips)
    old_shape = np.array(image.array.shape)
    direction = np.asarray(image.direction).reshape(3, 3)
    columns, first = [], np.zeros(3)  # ITK columns of the new image; old array index of its first voxel
    for new_axis in (2, 1, 0):  # ITK i, j, k = array axes 2, 1, 0
        old_axis = axes[new_axis]
        sign = -1.0 if new_axis in flips else 1.0
        columns.append(sign * direction[:, 2 - old_axis])
        first[old_axis] = old_shape[old_axis] - 1 if new_axis in flips else 0
    spacing = tuple(image.spacing[a] for a in axes)
    return LabelImage(array, spacing, tuple(image.index_to_physical(first)), tuple(np.array(columns).T.ravel()))


@pytest.mark.parametrize("axes, flips", [((0, 1, 2), (0,)), ((2, 1, 0), ()), ((1, 0, 2), (0, 2)), ((2, 0, 1), (1,))])
def test_one_lattice_stored_in_another_order_is_compared_without_resampling(axes, flips):
    """A DICOM SEG stored top-down and the NRRD exported from it bottom-up were refused ('origin
    differs ... direction differs'). The values equal those of the same test stored as the reference."""
    rng = np.random.default_rng(4)
    reference = LabelImage(boxes(), (2.5, 0.8, 0.7), origin=(10.0, -5.0, 3.0))
    shifted = np.roll(boxes(), 2, axis=2) * (rng.random(boxes().shape) > 0.1)
    test = LabelImage(shifted, reference.spacing, reference.origin, reference.direction)
    expected = compare(reference, test, metrics="dice,hd95,assd")
    result = compare(reference, stored_otherwise(test, axes, flips), metrics="dice,hd95,assd")
    for structure in expected.structures:
        for metric in ("dice", "hd95_mm", "assd_mm"):
            assert result[structure.structure].value(metric) == pytest.approx(structure.value(metric), abs=1e-9)
    assert not any("resampled" in note for note in result.notes)


def test_a_grid_off_the_lattice_by_half_a_voxel_is_still_refused():
    reference = LabelImage(boxes(), (1.0, 1.0, 1.0))
    moved = stored_otherwise(reference, (0, 1, 2), (0,))
    moved.origin = (moved.origin[0], moved.origin[1], moved.origin[2] + 0.5)
    with pytest.raises(GeometryMismatchError, match="different grids"):
        compare(reference, moved, metrics="dice")


def test_a_dicom_seg_and_the_nrrd_exported_from_it_are_one_grid(data_dir):
    """dcmqi's liver SEG (stored top-down) and its NRRD export (bottom-up): 'different grids: origin
    differs ... direction differs'; the same voxels give Dice 1 and HD 0."""
    result = compare(data_dir / "dcmqi/liver.dcm", data_dir / "dcmqi/liver_seg.nrrd", metrics="dice,hd")
    assert result["Liver"].value("dice") == 1.0 and result["Liver"].value("hd_mm") == 0.0
