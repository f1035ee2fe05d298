"""The compare entry point and the command line: pairing, selection, statuses, output formats, errors."""
import csv
import io
import json
import math

import numpy as np
import pytest
import SimpleITK as sitk

import segmetrics
from segmetrics.cli import main
from segmetrics.spatial.geometry import LabelImage
from segmetrics.outputs.tables import records_to_csv, safe_csv_cell


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


@pytest.mark.parametrize("named_side", ["reference", "test"])
def test_names_on_one_side_pair_by_value_and_no_label_is_measured_twice(named_side):
    reference = np.zeros((6, 6, 6), np.uint8)
    reference[1:4, 1:4, 1:4] = 1
    reference[3:5, 3:5, 3:5] = 2
    test = reference.copy()
    test[1, 1, 1] = 0  # label 1 (27 voxels less the one label 2 covers) loses one
    names = {1: "liver"}
    images = [LabelImage(reference, (1, 1, 1), names=names if named_side == "reference" else {}),
              LabelImage(test, (1, 1, 1), names=names if named_side == "test" else {})]
    result = segmetrics.compare(*images, metrics="dice")
    assert [(s.structure, s.reference_label, s.test_label) for s in result.structures] == [("liver", 1, 1), ("2", 2, 2)]
    assert result["liver"].value("dice") == pytest.approx(2 * 25 / (26 + 25))
    assert any("paired by value with 'liver'" in note for note in result.notes)
    # both images named: a label value never serves two structures of one image
    both = segmetrics.compare(LabelImage(reference, (1, 1, 1), names={1: "liver"}),
                              LabelImage(test, (1, 1, 1), names={2: "spleen"}), metrics="dice")
    used = [(side, label) for s in both.structures for side, label in (("r", s.reference_label), ("t", s.test_label)) if label is not None]
    assert len(used) == len(set(used)) == 4


def test_unknown_metric_is_a_clear_error(label_pair):
    ref_path, test_path, _, _ = label_pair
    with pytest.raises(ValueError, match="unknown metric"):
        segmetrics.compare(ref_path, test_path, metrics="dcie")


@pytest.mark.needs("rich")
def test_lesion_detection_is_out_of_the_default_metrics_and_one_option_away(label_pair, tmp_path):
    from segmetrics.registry import BUILTIN_METRIC_NAMES, resolve_selection

    assert "lesions" not in resolve_selection(None) and "lesions" in resolve_selection("all")
    assert set(resolve_selection(None)) == set(BUILTIN_METRIC_NAMES) - {"lesions"}
    ref_path, test_path, _, _ = label_pair
    out = tmp_path / "out.json"
    assert main(["compare", str(ref_path), str(test_path), "--format", "json", "-o", str(out)]) == 0
    metrics = {r["metric"] for r in json.loads(out.read_text())["records"]}
    assert "dice" in metrics and "msi" in metrics and not any(m.startswith("lesion_") for m in metrics)
    assert main(["compare", str(ref_path), str(test_path), "--metrics", "lesions", "--format", "json", "-o", str(out)]) == 0
    assert {r["metric"] for r in json.loads(out.read_text())["records"]} == set(BUILTIN_METRIC_NAMES["lesions"])


@pytest.mark.needs("rich")
def test_cli_json_records(label_pair, tmp_path, capsys):
    ref_path, test_path, _, _ = label_pair
    out = tmp_path / "out.json"
    assert main(["compare", str(ref_path), str(test_path), "--metrics", "dice,jaccard", "--format", "json", "-o", str(out)]) == 0
    document = json.loads(out.read_text())
    assert set(document) == {"provenance", "notes", "records"}
    records = document["records"]
    assert {tuple(sorted(r)) for r in records} == {
        ("metric", "params", "reference_label", "status", "structure", "test_label", "unit", "value")
    }
    dice_1 = next(r for r in records if r["structure"] == "1" and r["metric"] == "dice")
    assert dice_1["value"] == pytest.approx(2 * 180 / 432) and dice_1["status"] == "ok"


@pytest.mark.parametrize("fmt", ["csv", "wide-csv", "json"])
@pytest.mark.needs("rich")
def test_sort_orders_the_files_too(label_pair, tmp_path, fmt):
    # Dice: label 1 0.833, labels 2 (missed) and 3 (test only) 0: worst first is 2, 3, then 1.
    ref_path, test_path, _, _ = label_pair
    out = tmp_path / "out.txt"
    assert main(["compare", str(ref_path), str(test_path), "--metrics", "dice,jaccard", "--format", fmt,
                 "--sort", "dice", "-o", str(out)]) == 0
    if fmt == "json":
        rows = json.loads(out.read_text())["records"]
    else:
        rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert list(dict.fromkeys(row["structure"] for row in rows)) == ["2", "3", "1"]


@pytest.mark.needs("rich")
def test_cli_table_and_csv(label_pair, capsys):
    ref_path, test_path, _, _ = label_pair
    assert main(["compare", str(ref_path), str(test_path), "--metrics", "dice"]) == 0
    table = capsys.readouterr().out
    assert "0.833" in table and "test_empty" in table and "reference_empty" in table
    assert main(["compare", str(ref_path), str(test_path), "--metrics", "dice", "--format", "csv"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "structure,reference_label,test_label,metric,value,unit,status,params"
    assert len(lines) == 4


@pytest.mark.needs("rich")
def test_cli_bad_inputs_exit_2_with_one_line(tmp_path, label_pair, capsys):
    ref_path, _, reference, _ = label_pair
    assert main(["compare", str(ref_path), str(tmp_path / "nope.nii.gz")]) == 2
    err = capsys.readouterr().err
    assert "no such file" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    other = _write(tmp_path / "other.nii.gz", reference, spacing_xyz=(1.0, 1.0, 2.0))
    assert main(["compare", str(ref_path), str(other)]) == 2
    err = capsys.readouterr().err
    assert "spacing differs" in err and "--resample-to reference" in err
    # label 2 of the 2 mm test lies beyond the reference's slices: resampling discards it, on request only
    assert main(["compare", str(ref_path), str(other), "--metrics", "dice", "--resample-to", "reference"]) == 2
    assert "would discard all of '2'" in capsys.readouterr().err
    assert main(["compare", str(ref_path), str(other), "--metrics", "dice", "--resample-to", "reference",
                 "--allow-crop"]) == 0


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


@pytest.mark.needs("rich")
def test_name_map_only_renames_present_labels(label_pair, tmp_path, capsys):
    ref_path, test_path, _, _ = label_pair
    names = tmp_path / "names.json"
    names.write_text(json.dumps({"1": "liver", "2": "spleen", "3": "kidney", "4": "never_present"}))
    assert main(["compare", str(ref_path), str(test_path), "--names", str(names), "--metrics", "dice",
                 "--format", "json"]) == 0
    records = json.loads(capsys.readouterr().out)["records"]
    assert [r["structure"] for r in records] == ["liver", "spleen", "kidney"]


def test_threshold_binarises_probability_maps_in_the_api():
    probability = np.zeros((10, 10))
    probability[2:6, 2:6] = 0.7
    probability[6:8, 2:6] = 0.3
    result = segmetrics.compare(probability, probability > 0.5, spacing=(1, 1), threshold=0.5, metrics="dice")
    assert result.structures[0].value("dice") == 1.0


# CSV injection: text cells a spreadsheet would run as formulas are neutralised in every CSV written.
FORMULA = '=HYPERLINK("http://example.com","click")'
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _csv_rows(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def _assert_no_cell_runs_as_formula(rows):
    """Only plain numbers may start with a formula character; everything else was prefixed with '."""
    for row in rows:
        for cell in row.values():
            if cell.startswith(FORMULA_STARTS):
                float(cell)


def test_safe_csv_cell_quotes_formula_text_only():
    assert safe_csv_cell(FORMULA) == "'" + FORMULA
    assert [safe_csv_cell(t) for t in ("@SUM(1)", "+1+1", "-cmd", "\t=1", "\r=1")] == [
        "'@SUM(1)", "'+1+1", "'-cmd", "'\t=1", "'\r=1"]
    assert [safe_csv_cell(v) for v in (-0.5, -math.inf, 3, "-0.5", "-inf", "liver", "a=b")] == [
        -0.5, -math.inf, 3, "-0.5", "-inf", "liver", "a=b"]
    assert safe_csv_cell(safe_csv_cell("=1")) == "'=1"


def test_negative_numbers_stay_numbers_in_csv_records():
    record = {"structure": "@evil", "reference_label": 1, "test_label": 1, "metric": "m", "value": -0.5,
              "unit": "mm", "status": "ok", "params": {}}
    rows = list(csv.DictReader(io.StringIO(records_to_csv([record, {**record, "value": -math.inf}]))))
    assert [(r["structure"], r["value"]) for r in rows] == [("'@evil", "-0.5"), ("'@evil", "-inf")]


@pytest.mark.needs("rich")
def test_compare_csv_and_msi_slices_neutralise_formula_names(label_pair, tmp_path, capsys):
    ref_path, test_path, _, _ = label_pair
    names = tmp_path / "names.json"
    names.write_text(json.dumps({"1": FORMULA, "2": "@SUM(1)", "3": "-2+3"}))
    out, slices = tmp_path / "out.csv", tmp_path / "slices.csv"
    assert main(["compare", str(ref_path), str(test_path), "--names", str(names), "--metrics", "dice,msi",
                 "--format", "csv", "-o", str(out), "--msi-slices", str(slices)]) == 0
    rows = _csv_rows(out)
    assert {r["structure"] for r in rows} == {"'" + FORMULA, "'@SUM(1)", "'-2+3"}
    dice = next(r for r in rows if r["structure"] == "'" + FORMULA and r["metric"] == "dice")
    assert float(dice["value"]) == pytest.approx(2 * 180 / 432)
    _assert_no_cell_runs_as_formula(rows)
    slice_rows = _csv_rows(slices)
    assert {r["structure"] for r in slice_rows} == {"'" + FORMULA, "'@SUM(1)", "'-2+3"}
    _assert_no_cell_runs_as_formula(slice_rows)


def test_batch_results_csv_neutralises_case_ids_and_names(label_pair, tmp_path, capsys):
    ref_path, test_path, _, _ = label_pair
    (tmp_path / "names.json").write_text(json.dumps({"1": FORMULA}))
    manifest = tmp_path / "manifest.csv"
    manifest.write_text(f"case_id,reference,test,names\n@SUM(1),{ref_path.name},{test_path.name},names.json\n")
    assert main(["batch", "--manifest", str(manifest), "-o", str(tmp_path / "out"), "--labels", "1",
                 "--metrics", "dice", "--no-progress"]) == 0
    rows = _csv_rows(tmp_path / "out" / "results.csv")
    assert [(r["case_id"], r["structure"]) for r in rows] == [("'@SUM(1)", "'" + FORMULA)]
    _assert_no_cell_runs_as_formula(rows)
    record = json.loads((tmp_path / "out" / "results.jsonl").read_text().splitlines()[0])
    assert (record["case_id"], record["structure"]) == ("@SUM(1)", FORMULA)  # JSON keeps the exact text
    if (tmp_path / "out" / "results.parquet").exists():  # so does Parquet (not a spreadsheet format)
        import pyarrow.parquet as pq

        row = pq.read_table(tmp_path / "out" / "results.parquet").to_pylist()[0]
        assert (row["case_id"], row["structure"]) == ("@SUM(1)", FORMULA)


def test_frames_csv_neutralises_frame_and_class_names(tmp_path):
    from PIL import Image

    frame = np.zeros((6, 6), np.uint8)
    frame[1:4, 1:4] = 1
    for folder in ("pred", "gt"):
        (tmp_path / folder).mkdir()
        Image.fromarray(frame).save(tmp_path / folder / "=1+1.png")
    (tmp_path / "classes.json").write_text(json.dumps({"1": "@SUM(1)"}))
    out = tmp_path / "frames.csv"
    assert main(["frames", str(tmp_path / "gt"), str(tmp_path / "pred"), "--classes", str(tmp_path / "classes.json"),
                 "--format", "csv", "-o", str(out)]) == 0
    rows = _csv_rows(out)
    assert "'=1+1" in {r["frame"] for r in rows} and "'@SUM(1)" in {r["structure"] for r in rows}
    _assert_no_cell_runs_as_formula(rows)
