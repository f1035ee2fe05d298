"""The compare entry point and the command line: pairing, selection, statuses, output formats, errors."""
import json
import math

import numpy as np
import pytest
import SimpleITK as sitk

import segmetrics
from segmetrics.cli import main
from segmetrics.geometry import LabelImage


def _write(path, array, spacing_xyz=(1.0, 1.0, 1.0), origin=(0.0, 0.0, 0.0)):
    image = sitk.GetImageFromArray(array)
    image.SetSpacing(spacing_xyz)
    image.SetOrigin(origin)
    sitk.WriteImage(image, str(path))
    return path


@pytest.fixture
def label_pair(tmp_path):
    reference = np.zeros((12, 14, 16), np.uint8)
    test = np.zeros_like(reference)
    reference[2:8, 3:9, 4:10] = 1
    test[2:8, 3:9, 5:11] = 1  # shifted by one voxel along x
    reference[9:11, 9:12, 9:12] = 2  # label 2 missing from the test
    test[1:3, 11:13, 1:3] = 3  # label 3 only in the test
    return _write(tmp_path / "ref.nii.gz", reference), _write(tmp_path / "test.nii.gz", test), reference, test


def test_every_label_of_either_image_is_reported_with_status(label_pair):
    ref_path, test_path, reference, test = label_pair
    result = segmetrics.compare(ref_path, test_path, metrics="overlap")
    assert [s.structure for s in result.structures] == ["1", "2", "3"]
    assert result["1"].value("dice") == pytest.approx(2 * 180 / 432)  # 6*6*5 overlap of two 216-voxel boxes
    assert {v.status for v in result["2"].values} == {"test_empty"}
    assert {v.status for v in result["3"].values} == {"reference_empty"}
    means = result.class_means()["dice"]
    assert means["n_used"] == 3 and means["mean"] == pytest.approx((2 * 180 / 432) / 3)


def test_label_selection_and_names_and_array_input(label_pair):
    _, _, reference, test = label_pair
    names = {1: "liver", 2: "spleen"}
    ref_image = LabelImage(reference, (1, 1, 1), names=names)
    test_image = LabelImage(test, (1, 1, 1), names={1: "liver", 3: "kidney"})
    result = segmetrics.compare(ref_image, test_image, metrics=["dice"])
    assert [s.structure for s in result.structures] == ["liver", "spleen", "kidney"]
    assert math.isnan(result["spleen"].value("dice")) is False and result["spleen"].value("dice") == 0.0
    only = segmetrics.compare(reference, test, spacing=(1, 1, 1), labels=[1], metrics="dice")
    assert [s.structure for s in only.structures] == ["1"]


def test_unknown_metric_is_a_clear_error(label_pair):
    ref_path, test_path, _, _ = label_pair
    with pytest.raises(ValueError, match="unknown metric"):
        segmetrics.compare(ref_path, test_path, metrics="dcie")


def test_cli_json_records(label_pair, tmp_path, capsys):
    ref_path, test_path, _, _ = label_pair
    out = tmp_path / "out.json"
    assert main(["compare", str(ref_path), str(test_path), "--metrics", "dice,jaccard", "--format", "json", "-o", str(out)]) == 0
    records = json.loads(out.read_text())
    assert {tuple(sorted(r)) for r in records} == {
        ("metric", "params", "reference_label", "status", "structure", "test_label", "unit", "value")
    }
    dice_1 = next(r for r in records if r["structure"] == "1" and r["metric"] == "dice")
    assert dice_1["value"] == pytest.approx(2 * 180 / 432) and dice_1["status"] == "ok"


def test_cli_table_and_csv(label_pair, capsys):
    ref_path, test_path, _, _ = label_pair
    assert main(["compare", str(ref_path), str(test_path), "--metrics", "dice"]) == 0
    table = capsys.readouterr().out
    assert "0.8333" in table and "test_empty" in table and "reference_empty" in table
    assert main(["compare", str(ref_path), str(test_path), "--metrics", "dice", "--format", "csv"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "structure,reference_label,test_label,metric,value,unit,status,params"
    assert len(lines) == 4


def test_cli_bad_inputs_exit_2_with_one_line(tmp_path, label_pair, capsys):
    ref_path, _, reference, _ = label_pair
    assert main(["compare", str(ref_path), str(tmp_path / "nope.nii.gz")]) == 2
    err = capsys.readouterr().err
    assert "no such file" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    other = _write(tmp_path / "other.nii.gz", reference, spacing_xyz=(1.0, 1.0, 2.0))
    assert main(["compare", str(ref_path), str(other)]) == 2
    err = capsys.readouterr().err
    assert "spacing differs" in err and "--resample-to reference" in err
    assert main(["compare", str(ref_path), str(other), "--metrics", "dice", "--resample-to", "reference"]) == 0


def test_binary_masks_with_different_foreground_values_pair_as_one(tmp_path):
    reference = np.zeros((20, 20), np.uint8)
    reference[5:15, 5:15] = 255
    test = np.zeros_like(reference)
    test[5:15, 6:16] = 1
    result = segmetrics.compare(reference, test, spacing=(1, 1), metrics="dice")
    assert [s.structure for s in result.structures] == ["foreground"]
    assert result.structures[0].value("dice") == pytest.approx(2 * 90 / 200)
    assert "different foreground values" in result.notes[0]


def test_unknown_structure_name_is_an_error_and_absent_values_are_both_empty(label_pair):
    ref_path, test_path, _, _ = label_pair
    with pytest.raises(ValueError, match="unknown structure.*nonexistent.*available: 1, 2, 3"):
        segmetrics.compare(ref_path, test_path, labels=["1", "nonexistent"], metrics="dice")
    result = segmetrics.compare(ref_path, test_path, labels=["999"], metrics="dice")
    assert result.structures[0].status == "both_empty" and math.isnan(result.structures[0].value("dice"))
    assert result.notes == ["label 999 is absent from both images (reported as both_empty)"]


def test_named_structures_keep_numeric_label_order():
    labels = np.zeros((4, 30), np.uint8)
    for value in (2, 10, 11, 100):
        labels[:, value % 30] = value
    names = {2: "two", 10: "ten", 11: "eleven", 100: "hundred"}
    image = LabelImage(labels, (1, 1), names=names)
    result = segmetrics.compare(image, image, metrics="dice")
    assert [s.structure for s in result.structures] == ["two", "ten", "eleven", "hundred"]


def test_name_map_only_renames_present_labels(label_pair, tmp_path, capsys):
    ref_path, test_path, _, _ = label_pair
    names = tmp_path / "names.json"
    names.write_text(json.dumps({"1": "liver", "2": "spleen", "3": "kidney", "4": "never_present"}))
    assert main(["compare", str(ref_path), str(test_path), "--names", str(names), "--metrics", "dice",
                 "--format", "json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert [r["structure"] for r in records] == ["liver", "spleen", "kidney"]


def test_threshold_binarises_probability_maps_in_the_api():
    probability = np.zeros((10, 10))
    probability[2:6, 2:6] = 0.7
    probability[6:8, 2:6] = 0.3
    result = segmetrics.compare(probability, probability > 0.5, spacing=(1, 1), threshold=0.5, metrics="dice")
    assert result.structures[0].value("dice") == 1.0
