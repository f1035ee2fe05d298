"""Lesion-wise detection of 3-D structures (``compare --metrics lesions``) on hand-built balls."""
import json

import numpy as np
import pytest

import segmetrics
from segmetrics.cli import main
from segmetrics.registry import ParameterError, Parameters

SHAPE = (11, 11, 56)  # (z, y, x)


def ball(center_x, radius=3.0, shift=(0, 0)):
    """Boolean ball of ``radius`` voxels centred at (5 + dz, 5 + dy, center_x)."""
    z, y, x = np.indices(SHAPE)
    return (z - 5 - shift[0]) ** 2 + (y - 5 - shift[1]) ** 2 + (x - center_x) ** 2 <= radius ** 2


# Three reference lesions; the test finds the first exactly, the second shifted by one voxel,
# misses the third and adds one lesion where the reference has none.
REFERENCE = ball(6) | ball(18) | ball(30)
TEST = ball(6) | ball(18, shift=(1, 0)) | ball(46)
SHIFTED_IOU = (ball(18) & ball(18, shift=(1, 0))).sum() / (ball(18) | ball(18, shift=(1, 0))).sum()


def lesion_values(result, label="1"):
    return {v.metric: v.value for v in result[label].values}


def test_two_hits_one_miss_one_false_positive():
    assert 0.5 <= SHIFTED_IOU < 0.95  # the shifted ball matches at 0.5 but not at 0.95
    result = segmetrics.compare(REFERENCE.astype(np.uint8), TEST.astype(np.uint8), spacing=(2.0, 1.0, 1.0),
                                metrics="lesions")
    values = lesion_values(result)
    assert (values["lesion_tp"], values["lesion_fp"], values["lesion_fn"]) == (2, 1, 1)
    assert values["lesion_f1"] == pytest.approx(2 / 3)
    assert values["lesion_precision"] == pytest.approx(2 / 3) and values["lesion_recall"] == pytest.approx(2 / 3)
    assert result["1"].values[0].params["lesion_iou"] == 0.5


def test_iou_threshold_decides_the_shifted_lesion():
    result = segmetrics.compare(REFERENCE.astype(np.uint8), TEST.astype(np.uint8), spacing=(1.0, 1.0, 1.0),
                                metrics="lesions", params=Parameters(lesion_iou=0.95))
    values = lesion_values(result)
    assert (values["lesion_tp"], values["lesion_fp"], values["lesion_fn"]) == (1, 2, 2)
    assert values["lesion_f1"] == pytest.approx(2 / 6)
    with pytest.raises(ParameterError, match="lesion_iou"):
        Parameters(lesion_iou=1.5)


def test_per_structure_and_missed_structure():
    # Label 1: the balls above; label 2: one reference lesion the test misses entirely.
    reference = REFERENCE.astype(np.uint8)
    reference[:3, :3, 50:] = 2
    result = segmetrics.compare(reference, TEST.astype(np.uint8), spacing=(1.0, 1.0, 1.0), metrics="lesions")
    assert lesion_values(result)["lesion_tp"] == 2
    missed = lesion_values(result, "2")
    assert (missed["lesion_tp"], missed["lesion_fp"], missed["lesion_fn"]) == (0, 0, 1)
    assert missed["lesion_f1"] == 0 and np.isnan(missed["lesion_precision"])
    assert result["2"].values[0].status == "test_empty"


def test_cli_compare_metrics_lesions(tmp_path):
    import SimpleITK as sitk

    paths = []
    for name, mask in (("reference", REFERENCE), ("test", TEST)):
        paths.append(tmp_path / f"{name}.nrrd")
        sitk.WriteImage(sitk.GetImageFromArray(mask.astype(np.uint8)), str(paths[-1]))
    out = tmp_path / "out.json"
    assert main(["compare", str(paths[0]), str(paths[1]), "--metrics", "lesions", "--format", "json",
                 "-o", str(out), "--params", '{"lesion_iou": 0.5}']) == 0
    records = {r["metric"]: r for r in json.loads(out.read_text())["records"] if r["structure"] == "1"}
    for metric, expected in (("lesion_tp", 2), ("lesion_fp", 1), ("lesion_fn", 1), ("lesion_f1", 2 / 3)):
        assert records[metric]["value"] == pytest.approx(expected)
    assert records["lesion_f1"]["params"] == {"lesion_iou": 0.5, "connectivity": 3}
