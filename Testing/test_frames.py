"""Multi-class frame metrics: hand-computed edge rules, 3-D volumes, folders and the CLI."""
import csv
import io
import json

import numpy as np
import pytest
from PIL import Image

from segmetrics.cli import main
from segmetrics.evaluation.frames import EdgeRules, evaluate_folders, evaluate_frames, frame_overlaps

# Four 2x3 frames, classes 1 and 2 (hand-computed values below):
# A: gt class 1 = 4 px; pred class 1 = 2 px inside it, pred class 2 = 1 px (gt has none).
#    IoU1 = 2/4, IoU2 = 0/1; Dice1 = 4/6, Dice2 = 0. challenge = 0.5, ISI = 0.25.
# B: empty in both.
# C: empty gt, pred class 1 = 3 px. IoU1 = 0, class 2 absent. challenge undefined, ISI = 0.
# D: gt = pred = class 2, 2 px. IoU2 = 1, class 1 absent. challenge = ISI = 1.
GT = {
    "A": [[1, 1, 0], [1, 1, 0]],
    "B": [[0, 0, 0], [0, 0, 0]],
    "C": [[0, 0, 0], [0, 0, 0]],
    "D": [[0, 0, 0], [2, 2, 0]],
}
PRED = {
    "A": [[1, 1, 2], [0, 0, 0]],
    "B": [[0, 0, 0], [0, 0, 0]],
    "C": [[1, 1, 1], [0, 0, 0]],
    "D": [[0, 0, 0], [2, 2, 0]],
}
NAMES = {1: "LAV", 2: "WR"}


def run(rules=None, classes=NAMES):
    frames = sorted(GT)
    return evaluate_frames([np.array(PRED[f]) for f in frames], [np.array(GT[f]) for f in frames],
                           classes, rules, frames)


def test_overlaps_are_a_confusion_matrix():
    inter, pred, ref = frame_overlaps(np.array(PRED["A"]), np.array(GT["A"]), [1, 2])
    assert inter.tolist() == [2, 0] and pred.tolist() == [2, 1] and ref.tolist() == [4, 0]


def test_default_isinet_rules():
    r = run()
    np.testing.assert_allclose(r.frame_challenge_iou, [0.5, np.nan, np.nan, 1.0])
    np.testing.assert_allclose(r.frame_isi_iou, [0.25, np.nan, 0.0, 1.0])
    s = r.summary()
    assert s["challenge_iou"].value == pytest.approx(0.75)
    assert s["isi_iou"].value == pytest.approx(1.25 / 3)
    # class 1: A 0.5, C 0 -> 0.25; class 2: A 0, D 1 -> 0.5
    np.testing.assert_allclose(r.class_iou, [0.25, 0.5])
    assert s["mciou"].value == pytest.approx(0.375)
    # Dice class 1: A 2/3, C 0 -> 1/3; class 2: A 0, D 1 -> 1/2
    assert s["mdice"].value == pytest.approx((1 / 3 + 1 / 2) / 2)
    assert s["challenge_iou"].params["n_frames_used"] == 2
    assert s["isi_iou"].params["empty_frame"] == "skip"


def test_empty_frame_scores_one():
    s = run(EdgeRules(empty_frame="one")).summary()
    assert s["challenge_iou"].value == pytest.approx(2.5 / 3)  # A .5, B 1, D 1
    assert s["isi_iou"].value == pytest.approx(2.25 / 4)  # A .25, B 1, C 0, D 1
    assert s["mciou"].value == pytest.approx(0.375)  # class means unchanged


def test_empty_reference_scores_zero():
    s = run(EdgeRules(empty_reference="zero")).summary()
    assert s["challenge_iou"].value == pytest.approx(0.5)  # A .5, C 0, D 1
    assert s["isi_iou"].value == pytest.approx(1.25 / 3)


def test_absent_class_scores_one():
    r = run(EdgeRules(absent_class="one"))
    # IoU table: A [.5, 0], B [1, 1], C [0, 1], D [1, 1]; B is still an empty (skipped) frame.
    np.testing.assert_allclose(r.frame_isi_iou, [0.25, np.nan, 0.5, 1.0])
    np.testing.assert_allclose(r.class_iou, [2.5 / 4, 3 / 4])
    s = r.summary()
    assert s["challenge_iou"].value == pytest.approx(0.75)
    assert s["mciou"].value == pytest.approx((2.5 / 4 + 3 / 4) / 2)


def test_absent_class_scores_zero_and_averages_every_listed_class():
    # MISAW-Seg recipe. Class 3 is listed but never present: IoU 0 in every frame.
    # IoU table (classes 1, 2, 3): A [.5, 0, 0], B [0, 0, 0], C [0, 0, 0], D [0, 1, 0].
    r = run(EdgeRules(absent_class="zero"), classes={**NAMES, 3: "ND"})
    np.testing.assert_allclose(r.frame_isi_iou, [0.5 / 3, np.nan, 0.0, 1 / 3])  # B is still a skipped empty frame
    np.testing.assert_allclose(r.class_iou, [0.5 / 4, 1 / 4, 0.0])
    s = r.summary()
    assert s["isi_iou"].value == pytest.approx((0.5 / 3 + 1 / 3) / 3)
    assert s["mciou"].value == pytest.approx((0.125 + 0.25 + 0) / 3)
    assert s["mciou"].params["n_classes_used"] == 3
    # Dice: class 1 (2/3)/4, class 2 1/4, class 3 0.
    assert s["mdice"].value == pytest.approx((1 / 6 + 1 / 4) / 3)
    assert s["challenge_iou"].value == pytest.approx(0.75)  # classes in the ground truth only: unchanged


def test_pooled_iou_sums_intersections_and_unions_over_the_set():
    # Class 1: intersections A 2, C 0; unions A 4, C 3 -> 2/7. Class 2: intersections D 2; unions A 1, D 2 -> 2/3.
    # Class 3 never appears: NaN and left out of the mean by default.
    r = run(classes={**NAMES, 3: "ND"})
    np.testing.assert_allclose(r.class_pooled_iou, [2 / 7, 2 / 3, np.nan])
    s = r.summary()["pooled_iou"]
    assert s.value == pytest.approx((2 / 7 + 2 / 3) / 2) and s.params["n_classes_used"] == 2
    records = {(x["structure"], x["metric"]): x["value"] for x in r.records()}
    assert records[("LAV", "pooled_iou")] == pytest.approx(2 / 7)
    assert records[("all classes", "pooled_iou")] == pytest.approx(10 / 21)


@pytest.mark.parametrize("rule, score", [("zero", 0.0), ("one", 1.0)])
def test_pooled_iou_of_a_class_absent_from_every_frame_follows_the_absent_class_rule(rule, score):
    # MISAW-Seg recipe (absent_class="zero"): the never-present class 3 scores 0 and stays in the mean,
    # as it does in mcIoU; "one" scores it 1.
    r = run(EdgeRules(absent_class=rule), classes={**NAMES, 3: "ND"})
    np.testing.assert_allclose(r.class_pooled_iou, [2 / 7, 2 / 3, score])
    s = r.summary()["pooled_iou"]
    assert s.value == pytest.approx((2 / 7 + 2 / 3 + score) / 3) and s.params["n_classes_used"] == 3
    assert r.summary()["mciou"].params["n_classes_used"] == 3


@pytest.mark.needs("rich")
def test_cli_absent_class_zero_and_pooled_iou(tmp_path, capsys):
    pred_dir, gt_dir = write_frames(tmp_path)
    out = tmp_path / "out.json"
    assert main(["frames", str(gt_dir), str(pred_dir), "--absent-class", "zero", "--format", "json", "-o", str(out)]) == 0
    data = json.loads(out.read_text())
    # Classes 1 and 2: class IoU (.5 + 0 + 0 + 0)/4 and (0 + 0 + 0 + 1)/4.
    assert data["mciou"] == pytest.approx((0.125 + 0.25) / 2)
    assert data["edge_rules"]["absent_class"] == "zero"
    assert data["pooled_iou"] == pytest.approx(10 / 21)
    assert main(["frames", str(gt_dir), str(pred_dir), "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [float(r["value"]) for r in rows if r["structure"] == "2" and r["metric"] == "pooled_iou"] == \
        pytest.approx([2 / 3])
    assert main(["frames", str(gt_dir), str(pred_dir)]) == 0
    assert "pooled_iou" in capsys.readouterr().out


def test_frames_table_has_the_style_and_precision_of_compare(tmp_path):
    # ISI-IoU 1.25/3 = 0.41667 and mDice (1/3 + 1/2)/2 = 0.41667: ratios to 3 decimals, as compare shows Dice.
    from segmetrics.evaluation.frames import write_frame_result

    pytest.importorskip("rich")
    out = tmp_path / "table.txt"
    write_frame_result(run(), "table", out)
    text = out.read_text()
    rows = {line.split()[0]: line.split()[1:] for line in text.splitlines() if line.strip()}
    assert rows["isi_iou"] == ["0.417", "ok"] and rows["mdice"] == ["0.417", "ok"]
    assert rows["iou"] == ["0.250", "0.500"] and rows["n_frames_test"] == ["count", "2", "2"]
    assert "0.4167" not in text and "┃" not in text and "─" in text  # compare's rule under the header, no frame
    assert "ratios to 3 decimals" in text


def test_unknown_rule_is_rejected():
    with pytest.raises(ValueError, match="absent_class"):
        EdgeRules(absent_class="half")


def test_class_table_pixel_shares_and_statuses():
    r = run()
    records = {(x["structure"], x["metric"]): x for x in r.records()}
    assert records[("LAV", "reference_pixel_share")]["value"] == pytest.approx(4 / 24)
    assert records[("LAV", "test_pixel_share")]["value"] == pytest.approx(5 / 24)
    assert records[("WR", "reference_pixel_share")]["value"] == pytest.approx(2 / 24)
    assert records[("WR", "n_frames_reference")]["value"] == 1
    assert records[("all classes", "mciou")]["status"] == "ok"
    frame_records = [x for x in r.frame_records() if x["frame"] == "C" and x["metric"] == "iou"]
    assert [(x["structure"], x["status"]) for x in frame_records] == [("LAV", "reference_empty"), ("WR", "both_empty")]
    assert np.isnan(frame_records[1]["value"])


def test_unlisted_labels_are_background_and_zero_never_scored():
    r = run(classes={2: "WR"})
    assert r.class_ids == [2]
    # Only class 2: A has IoU 0 (pred only), C and B are empty frames now, D = 1.
    assert r.summary()["isi_iou"].value == pytest.approx(0.5)
    assert r.summary()["challenge_iou"].value == pytest.approx(1.0)
    assert run(classes=None).class_ids == [1, 2]


def test_all_empty_is_nan_with_status():
    zeros = [np.zeros((2, 2), int)] * 2
    s = evaluate_frames(zeros, zeros, NAMES).summary()
    assert np.isnan(s["challenge_iou"].value) and s["challenge_iou"].status == "both_empty"
    assert np.isnan(s["mciou"].value)


def test_3d_volumes_one_per_case():
    gt = np.stack([GT["A"], GT["D"]])
    pred = np.stack([PRED["A"], PRED["D"]])
    r = evaluate_frames([pred], [gt], NAMES)
    # class 1: inter 2, pred 2, gt 4 -> 1/2; class 2: inter 2, pred 3, gt 2 -> 2/3
    np.testing.assert_allclose(r.iou[0], [0.5, 2 / 3])
    assert r.summary()["challenge_iou"].value == pytest.approx((0.5 + 2 / 3) / 2)
    np.testing.assert_allclose(r.dice[0], [4 / 6, 4 / 5])


def write_frames(tmp_path):
    pred_dir, gt_dir = tmp_path / "pred", tmp_path / "gt"
    pred_dir.mkdir()
    gt_dir.mkdir()
    for name in GT:
        Image.fromarray(np.array(GT[name], dtype=np.uint8)).save(gt_dir / f"{name}.png")
        np.save(pred_dir / f"{name}.npy", np.array(PRED[name], dtype=np.uint8))
    Image.fromarray(np.zeros((2, 3), np.uint8)).save(gt_dir / "E.png")  # unmatched
    (tmp_path / "names.json").write_text(json.dumps({str(k): v for k, v in NAMES.items()}))
    return pred_dir, gt_dir


def test_folders_pair_by_name_and_report_unmatched(tmp_path):
    pred_dir, gt_dir = write_frames(tmp_path)
    r = evaluate_folders(pred_dir, gt_dir, NAMES)
    assert r.frame_names == ["A", "B", "C", "D"]
    assert r.summary()["challenge_iou"].value == pytest.approx(0.75)
    assert any("E" in note and "without prediction" in note for note in r.notes)


def test_cli_json_with_instances(tmp_path, capsys):
    pred_dir, gt_dir = write_frames(tmp_path)
    out = tmp_path / "out.json"
    code = main(["frames", str(gt_dir), str(pred_dir), "--classes", str(tmp_path / "names.json"),
                 "--instances", "--format", "json", "-o", str(out)])
    assert code == 0
    data = json.loads(out.read_text())
    assert data["challenge_iou"] == pytest.approx(0.75)
    assert data["isi_iou"] == pytest.approx(1.25 / 3)
    assert data["mciou"] == pytest.approx(0.375)
    assert data["mdice"] == pytest.approx(5 / 12)
    # Instances (components): class 1 has one gt (A) and detections A (IoU .5) then C (FP):
    # AP 1 at IoU .50, 0 above. Class 2 has one gt (D) and detections A (FP) then D (exact): AP .5.
    assert data["map50"] == pytest.approx((1 + 0.5) / 2)
    assert data["map95"] == pytest.approx((0 + 0.5) / 2)
    assert data["map50_95"] == pytest.approx((0.1 + 0.5) / 2)
    assert data["detection_precision"] == pytest.approx(0.5)
    assert data["detection_recall"] == pytest.approx(1.0)
    assert data["detection_f1"] == pytest.approx(2 / 3)
    lav = {x["metric"]: x["value"] for x in data["records"] if x["structure"] == "LAV"}
    assert lav["ap50"] == pytest.approx(1.0) and lav["iou"] == pytest.approx(0.25)
    assert {x["frame"] for x in data["frames"]} == {"A", "B", "C", "D"}


@pytest.mark.needs("rich")
def test_cli_csv_and_table(tmp_path, capsys):
    pred_dir, gt_dir = write_frames(tmp_path)
    assert main(["frames", str(gt_dir), str(pred_dir), "--format", "csv", "--empty-reference", "zero"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("frame,structure")
    row = next(line for line in lines if ",challenge_iou," in line and line.startswith(","))
    assert float(row.split(",")[5]) == pytest.approx(0.5)
    assert main(["frames", str(gt_dir), str(pred_dir)]) == 0
    assert "mciou" in capsys.readouterr().out


@pytest.mark.parametrize("problem", ["missing_dir", "no_common", "bad_classes", "shape", "bad_scores"])
def test_cli_bad_input_is_one_line(tmp_path, capsys, problem):
    pred_dir, gt_dir = write_frames(tmp_path)
    args = ["frames", str(gt_dir), str(pred_dir)]
    if problem == "missing_dir":
        args[1] = str(tmp_path / "nope")
    elif problem == "no_common":
        args[2] = str(tmp_path)
    elif problem == "bad_classes":
        (tmp_path / "bad.json").write_text("[1, 2]")
        args += ["--classes", str(tmp_path / "bad.json")]
    elif problem == "shape":
        np.save(pred_dir / "A.npy", np.zeros((3, 3), np.uint8))
    else:
        (tmp_path / "scores.csv").write_text("frame,instance,score\nA,1,high\n")
        args += ["--scores", str(tmp_path / "scores.csv")]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("segmetrics frames: error:") and "\n" not in err and "Traceback" not in err


def test_fetreg_sample_frames_against_themselves_and_a_perturbation(data_dir):
    from segmetrics.evaluation.frames import read_frame

    paths = sorted((data_dir / "fetreg2021_sample" / "output").glob("*.png"))
    gts = [read_frame(p) for p in paths]
    perfect = evaluate_frames(gts, gts, {1: "vessel", 2: "tool", 3: "fetus"}).summary()
    assert all(perfect[m].value == 1.0 for m in ("challenge_iou", "isi_iou", "mciou", "mdice"))
    # Shift every prediction one pixel right: independent IoU per class with plain boolean masks.
    preds = [np.roll(g, 1, axis=1) for g in gts]
    r = evaluate_frames(preds, gts, {1: "vessel", 2: "tool", 3: "fetus"})
    for i, (p, g) in enumerate(zip(preds, gts)):
        for k, c in enumerate(r.class_ids):
            union = np.logical_or(p == c, g == c).sum()
            expected = np.logical_and(p == c, g == c).sum() / union if union else np.nan
            np.testing.assert_allclose(r.iou[i, k], expected)


@pytest.mark.parametrize("source", ["json_with_instance_maps", "csv", "probability_maps"])
def test_cli_instance_scores(tmp_path, source):
    pred_dir, gt_dir = write_frames(tmp_path)
    args = ["frames", str(gt_dir), str(pred_dir), "--format", "json", "-o", str(tmp_path / "out.json")]
    if source == "json_with_instance_maps":
        # Instance maps = the frames themselves (one instance per class and frame), ids = class values.
        scores = {"A": {"1": 0.2, "2": 0.9}, "C": {"1": 0.8}, "D": {"2": 0.5}}
        (tmp_path / "scores.json").write_text(json.dumps(scores))
        args += ["--instance-dirs", str(gt_dir), str(pred_dir), "--scores", str(tmp_path / "scores.json")]
    elif source == "csv":  # components numbered in raster order: one per class and frame here
        (tmp_path / "scores.csv").write_text("frame,instance,score\nA,1,0.2\nA,2,0.9\nC,1,0.8\nD,1,0.5\n")
        args += ["--scores", str(tmp_path / "scores.csv")]
    else:
        maps = tmp_path / "prob"
        maps.mkdir()
        for name, value in {"A": 0.2, "B": 0.0, "C": 0.8, "D": 0.5}.items():
            prob = np.full((2, 3), value)
            prob[0, 2] = 0.9 if name == "A" else value  # the class-2 false positive of A
            np.save(maps / f"{name}.npy", prob)
        args += ["--scores", str(maps)]
    assert main(args) == 0
    data = json.loads((tmp_path / "out.json").read_text())
    # Class 1: C (0.8, FP) ranks before A (0.2, IoU .5): AP .5 at IoU .50, 0 above.
    # Class 2: A (0.9, FP) before D (0.5, exact): AP .5 at every threshold.
    assert data["map50"] == pytest.approx(0.5)
    assert data["map95"] == pytest.approx(0.25)
    assert data["map50_95"] == pytest.approx((0.05 + 0.5) / 2)


def test_cli_3d_lesion_volumes_with_threshold(tmp_path, data_dir):
    import SimpleITK as sitk
    from scipy import ndimage

    folder = data_dir / "metricsreloaded_brain_lesions"
    pred_dir, gt_dir = tmp_path / "pred", tmp_path / "gt"
    pred_dir.mkdir()
    gt_dir.mkdir()
    (pred_dir / "case2.nii.gz").symlink_to(folder / "Pred" / "CorrectLesion_0002_01_Pred.nii.gz")
    (gt_dir / "case2.nii.gz").symlink_to(folder / "Ref" / "CorrectLesion_0002_01_Ref.nii.gz")
    out = tmp_path / "out.json"
    assert main(["frames", str(gt_dir), str(pred_dir), "--threshold", "0.5", "--instances", "--connectivity", "3",
                 "--format", "json", "-o", str(out)]) == 0
    data = json.loads(out.read_text())
    pred, ref = (sitk.GetArrayFromImage(sitk.ReadImage(str(d / "case2.nii.gz"))) >= 0.5 for d in (pred_dir, gt_dir))
    assert data["challenge_iou"] == pytest.approx((pred & ref).sum() / (pred | ref).sum())
    full = np.ones((3, 3, 3))
    n_ref, n_pred = ndimage.label(ref, full)[1], ndimage.label(pred, full)[1]
    assert data["true_positives"] + data["false_negatives"] == n_ref
    assert data["true_positives"] + data["false_positives"] == n_pred
    assert 0 < data["detection_f1"] < 1


def test_cli_refuses_folders_in_the_old_order_by_name(tmp_path, capsys):
    """Old scripts passed the prediction folder first: named like that, the positionals are refused."""
    pred_dir, gt_dir = write_frames(tmp_path)
    predictions, labels = pred_dir.rename(tmp_path / "predictions"), gt_dir.rename(tmp_path / "labels")
    assert main(["frames", str(predictions), str(labels)]) == 2
    err = capsys.readouterr().err
    assert "look swapped" in err and "predictions" in err and "--reference" in err and "\n" not in err.strip()
    assert main(["frames", str(labels), str(predictions), "--format", "json"]) == 0  # the right order runs
    assert json.loads(capsys.readouterr().out)["challenge_iou"] == pytest.approx(0.75)
    # named options are explicit: never second-guessed, even when the names suggest the opposite
    assert main(["frames", "--reference", str(predictions), "--test", str(labels), "--format", "json"]) == 0


@pytest.mark.parametrize("first, second", [("preds", "gts"), ("y_pred", "y_true"), ("inferTs", "labelsTs"),
                                           ("PREDICTIONS", "GroundTruth"), ("test", "gt")])
def test_folder_names_in_the_old_order_are_recognised_in_common_spellings(tmp_path, first, second):
    from segmetrics.evaluation.frames import swapped_by_name

    for name in (first, second, "run_a", f"{first}_{second}"):
        (tmp_path / name).mkdir()
    assert swapped_by_name(tmp_path / first, tmp_path / second)
    assert swapped_by_name(tmp_path / second, tmp_path / first) is None
    # a name of neither kind, or of both, says nothing
    assert swapped_by_name(tmp_path / first, tmp_path / "run_a") is None
    assert swapped_by_name(tmp_path / f"{first}_{second}", tmp_path / second) is None


def test_cli_warns_about_probability_maps_given_as_the_reference(tmp_path, capsys):
    first, second = tmp_path / "run_a", tmp_path / "run_b"  # names that tell nothing
    first.mkdir()
    second.mkdir()
    np.save(first / "A.npy", np.array([[0.9, 0.8, 0.1], [0.2, 0.0, 0.0]]))  # a probability map
    np.save(second / "A.npy", np.array([[1, 1, 0], [0, 0, 0]], dtype=np.uint8))
    assert main(["frames", str(first), str(second), "--threshold", "0.5", "--format", "json"]) == 0
    assert "may be swapped" in capsys.readouterr().err  # a warning only: soft references exist
    assert main(["frames", str(second), str(first), "--threshold", "0.5", "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert "swapped" not in captured.err
    assert json.loads(captured.out)["challenge_iou"] == pytest.approx(1.0)  # 0.9, 0.8 >= 0.5
    # a soft reference in a folder named as the reference is not second-guessed
    soft_reference = first.rename(tmp_path / "ground_truth")
    assert main(["frames", str(soft_reference), str(second), "--threshold", "0.5", "--format", "json"]) == 0
    assert "swapped" not in capsys.readouterr().err


def test_cli_detection_counts_per_instance_size(tmp_path, capsys):
    # Instances (components per class): ground truth A/class 1 (4 px) and D/class 2 (2 px), both matched;
    # false positives A/class 2 (1 px) and C/class 1 (3 px). Equivalent diameter of a disc of n px: sqrt(4n/pi).
    pred_dir, gt_dir = write_frames(tmp_path)
    diameter = {n: np.sqrt(4 * n / np.pi) for n in (1, 2, 3, 4)}  # 1.13, 1.60, 1.95, 2.26 px
    assert diameter[1] < 1.5 <= diameter[2] < diameter[3] < 2.0 <= diameter[4]
    out = tmp_path / "out.json"
    assert main(["frames", str(gt_dir), str(pred_dir), "--instances", "--size-edges", "1.5,2", "--format", "json",
                 "-o", str(out)]) == 0
    data = json.loads(out.read_text())
    counts = {size: [data[f"{kind}_{size}"] for kind in ("true_positives", "false_negatives", "false_positives")]
              for size in ("small", "medium", "large")}
    assert counts == {"small": [0, 0, 1], "medium": [1, 0, 1], "large": [1, 0, 0]}
    assert data["detection_recall_medium"] == 1.0 and data["detection_recall_small"] is None  # NaN: no small reference
    # default edges 3 and 10 (pixels count as 1 mm): every instance here is small
    assert main(["frames", str(gt_dir), str(pred_dir), "--instances", "--format", "json", "-o", str(out)]) == 0
    data = json.loads(out.read_text())
    assert [data[f"{kind}_small"] for kind in ("true_positives", "false_negatives", "false_positives")] == [2, 0, 2]
    assert main(["frames", str(gt_dir), str(pred_dir), "--instances", "--size-edges", "10,3"]) == 2
    assert "--size-edges 10,3: lesion_size_edges_mm must increase" in capsys.readouterr().err
    assert main(["frames", str(gt_dir), str(pred_dir), "--instances", "--size-edges", ""]) == 2
    assert "--size-edges expects comma-separated numbers" in capsys.readouterr().err


@pytest.mark.needs("rich")
def test_class_names_that_look_like_rich_markup_are_shown_as_written(tmp_path, capsys):
    pred_dir, gt_dir = write_frames(tmp_path)
    (tmp_path / "markup.json").write_text(json.dumps({"1": "[/b]tool", "2": "[red]tissue"}))
    out = tmp_path / "table.txt"
    assert main(["frames", str(gt_dir), str(pred_dir), "--classes", str(tmp_path / "markup.json"), "-o", str(out)]) == 0
    assert "[/b]tool (1)" in out.read_text() and "[red]tissue (2)" in out.read_text()


def test_old_order_message_names_folders_given_as_dot(tmp_path, monkeypatch):
    """'.' and '..' paths are named by the folders they resolve to (the message showed '()')."""
    from segmetrics.evaluation.frames import swapped_by_name

    (tmp_path / "predictions").mkdir()
    (tmp_path / "labels").mkdir()
    monkeypatch.chdir(tmp_path / "predictions")
    reason = swapped_by_name(".", "../labels")
    assert "(predictions)" in reason and "(labels)" in reason


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("storage", ["flipped", "transposed", "spacing", "origin"])
def test_a_prediction_frame_on_another_grid_is_refused_not_compared_voxel_by_voxel(tmp_path, capsys, seed, storage):
    """Frames are compared voxel by voxel: a prediction stored flipped or transposed (the same
    physical mask, direction and origin saying so), or on another spacing or origin, paired other
    voxels silently (a flipped copy of the ground truth scored mDice 0, exit 0). Refused in one line
    naming the frame; the same prediction stored like the ground truth scores the brute-force Dice."""
    import SimpleITK as sitk

    rng = np.random.default_rng(seed)
    reference = (rng.random((12, 15)) < 0.4).astype(np.uint8)
    prediction = reference.copy()
    prediction[rng.random(reference.shape) < 0.1] ^= 1
    for folder in ("ref", "pred", "moved"):
        (tmp_path / folder).mkdir()
    sitk.WriteImage(sitk.GetImageFromArray(reference), str(tmp_path / "ref" / "f0.nrrd"))
    sitk.WriteImage(sitk.GetImageFromArray(prediction), str(tmp_path / "pred" / "f0.nrrd"))
    moved = sitk.GetImageFromArray(prediction)
    if storage == "flipped":
        moved = sitk.Flip(moved, [True, False])
    elif storage == "transposed":
        moved = sitk.PermuteAxes(moved, [1, 0])
    elif storage == "spacing":
        moved.SetSpacing((1.0, 2.0))
    else:
        moved.SetOrigin((0.0, 3.0))
    sitk.WriteImage(moved, str(tmp_path / "moved" / "f0.nrrd"))
    out = tmp_path / "out.csv"
    assert main(["frames", str(tmp_path / "ref"), str(tmp_path / "pred"), "--format", "csv", "-o", str(out)]) == 0
    dice = next(float(row["value"]) for row in csv.DictReader(out.open()) if row["metric"] == "mdice")
    assert dice == pytest.approx(2 * np.sum(reference & prediction) / (reference.sum() + prediction.sum()))
    capsys.readouterr()
    assert main(["frames", str(tmp_path / "ref"), str(tmp_path / "moved"), "--format", "csv"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "frame f0: the prediction is on another grid" in err


@pytest.mark.parametrize("kind", ["instance-dirs", "scores"])
def test_instance_and_score_maps_on_another_grid_are_refused(tmp_path, capsys, kind):
    """Instance and score maps pair with their frame voxel by voxel too: one stored flipped (its
    header saying so) is refused in one line naming it, instead of giving instances other classes
    or scores."""
    import SimpleITK as sitk

    frame = np.zeros((10, 12), np.uint8)
    frame[2:5, 1:4] = 1
    frame[6:9, 7:11] = 1
    for folder in ("ref", "pred", "ref_inst", "pred_inst"):
        (tmp_path / folder).mkdir()
        sitk.WriteImage(sitk.GetImageFromArray(frame), str(tmp_path / folder / "f0.nrrd"))
    stored = frame if kind == "instance-dirs" else frame.astype(np.float32) * 0.9  # instances, or scores
    sitk.WriteImage(sitk.Flip(sitk.GetImageFromArray(stored), [True, False]), str(tmp_path / "pred_inst" / "f0.nrrd"))
    extra = (["--instance-dirs", str(tmp_path / "ref_inst"), str(tmp_path / "pred_inst")] if kind == "instance-dirs"
             else ["--scores", str(tmp_path / "pred_inst")])
    code = main(["frames", str(tmp_path / "ref"), str(tmp_path / "pred"), "--instances", *extra])
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "frame f0: the" in err and "map f0.nrrd is on another grid" in err


def test_frames_without_geometry_are_paired_by_shape_only(tmp_path):
    """A PNG prediction (no spacing, origin or direction of its own) beside a NRRD ground truth of
    0.5 mm pixels is paired by shape, as before; only files that both carry a geometry must agree."""
    import SimpleITK as sitk

    frame = np.zeros((8, 9), np.uint8)
    frame[2:6, 3:7] = 1
    (tmp_path / "ref").mkdir()
    (tmp_path / "pred").mkdir()
    reference = sitk.GetImageFromArray(frame)
    reference.SetSpacing((0.5, 0.5))
    sitk.WriteImage(reference, str(tmp_path / "ref" / "f0.nrrd"))
    Image.fromarray(frame * 255).save(tmp_path / "pred" / "f0.png")
    result = evaluate_folders(tmp_path / "pred", tmp_path / "ref", threshold=0.5)
    assert result.summary()["mdice"].value == pytest.approx(1.0)


def test_a_shape_mismatch_names_the_axis_order():
    from segmetrics.evaluation.frames import frame_overlaps

    with pytest.raises(ValueError, match=r"shape \(2, 3\) differs from ground truth shape \(2, 4\) \(y, x\)"):
        frame_overlaps(np.zeros((2, 3), int), np.zeros((2, 4), int), [1])
    with pytest.raises(ValueError, match=r"\(1, 2, 4\) \(z, y, x\)"):
        frame_overlaps(np.zeros((1, 2, 3), int), np.zeros((1, 2, 4), int), [1])
