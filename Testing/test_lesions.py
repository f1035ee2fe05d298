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


@pytest.mark.needs("rich")
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


def cube(mask, x0, side):
    """Set a cube of ``side`` voxels at (2, 2, x0) in ``mask``; returns it."""
    mask[2:2 + side, 2:2 + side, x0:x0 + side] = True
    return mask


def test_size_bins_count_reference_lesions_by_their_size_and_false_positives_by_theirs():
    # Reference: A (2^3 = 8 voxels) and B (1 voxel) small, C (5^3) medium, D (10^3) large.
    # Test: finds A and C exactly, misses B and D, adds a 1-voxel and a 10^3 lesion elsewhere.
    shape = (14, 14, 64)
    reference = np.zeros(shape, bool)
    for x0, side in ((2, 2), (8, 1), (12, 5), (22, 10)):
        cube(reference, x0, side)
    test = np.zeros(shape, bool)
    for x0, side in ((2, 2), (12, 5), (36, 1), (40, 10)):
        cube(test, x0, side)

    def diameter(volume_mm3):  # of the ball with that volume
        return (6 * volume_mm3 / np.pi) ** (1 / 3)

    # 1 mm voxels: A 2.48 mm, B 1.24 mm (< 3: small), C 6.20 mm (medium), D 12.4 mm (large)
    assert diameter(8) < 3 and diameter(1) < 3 and 3 <= diameter(125) < 10 and diameter(1000) >= 10
    values = lesion_values(segmetrics.compare(reference.astype(np.uint8), test.astype(np.uint8),
                                              spacing=(1.0, 1.0, 1.0), metrics="lesions"))
    counts = {size: tuple(values[f"lesion_{kind}_{size}"] for kind in ("tp", "fn", "fp"))
              for size in ("small", "medium", "large")}
    assert counts == {"small": (1, 1, 1), "medium": (1, 0, 0), "large": (0, 1, 1)}
    assert (values["lesion_recall_small"], values["lesion_recall_medium"], values["lesion_recall_large"]) == (0.5, 1, 0)
    assert sum(values[f"lesion_tp_{s}"] for s in ("small", "medium", "large")) == values["lesion_tp"] == 2

    # 2 mm voxels: every volume x 8, every diameter x 2: A 4.96 (medium), C 12.4 (large), B 2.48 (small)
    assert 3 <= diameter(64) < 10 and diameter(1000) >= 10 and diameter(8) < 3
    values = lesion_values(segmetrics.compare(reference.astype(np.uint8), test.astype(np.uint8),
                                              spacing=(2.0, 2.0, 2.0), metrics="lesions"))
    assert [values[f"lesion_tp_{s}"] for s in ("small", "medium", "large")] == [0, 1, 1]
    assert [values[f"lesion_fn_{s}"] for s in ("small", "medium", "large")] == [1, 0, 1]
    assert [values[f"lesion_fp_{s}"] for s in ("small", "medium", "large")] == [1, 0, 1]
    assert [values[f"lesion_recall_{s}"] for s in ("small", "medium", "large")] == [0, 1, 0.5]
    # other edges move the lesions between bins: everything below 100 mm is small
    result = segmetrics.compare(reference.astype(np.uint8), test.astype(np.uint8), spacing=(1.0, 1.0, 1.0),
                                metrics="lesions", params={"lesion_size_edges_mm": [100, 200]})
    values = lesion_values(result)
    assert [values[f"lesion_tp_{s}"] for s in ("small", "medium", "large")] == [2, 0, 0]
    assert np.isnan(values["lesion_recall_large"])  # no large reference lesion
    assert result["1"].value("lesion_fp_small") == 2
    assert next(v for v in result["1"].values if v.metric == "lesion_fp_small").params["lesion_size_edges_mm"] == [100, 200]


@pytest.mark.parametrize("edges", [(10, 3), (3,), "3,10", (0, 3), (3, float("nan")), (3, 10, 30), 5])
def test_size_edges_are_checked(edges):
    with pytest.raises(ParameterError, match="lesion_size_edges_mm"):
        Parameters(lesion_size_edges_mm=edges)


def test_size_edges_default_and_from_a_list():
    assert Parameters().lesion_size_edges_mm == (3.0, 10.0)
    assert Parameters(lesion_size_edges_mm=[5, 20]).lesion_size_edges_mm == (5.0, 20.0)
    assert Parameters(lesion_size_edges_mm=np.array([5.0, 20.0])).lesion_size_edges_mm == (5.0, 20.0)
    with pytest.raises(ParameterError, match="must be two diameters"):
        Parameters(lesion_size_edges_mm=np.array([5.0, 20.0, 30.0]))


def test_equivalent_diameter_is_that_of_the_ball_or_disc_of_equal_size():
    from segmetrics.metrics.instances import equivalent_diameter_mm

    # 3-D: 1000 voxels of 2 x 1 x 0.5 mm = 1000 mm³; a ball of volume V has diameter (6 V / pi)^(1/3)
    np.testing.assert_allclose(equivalent_diameter_mm([1000], (2.0, 1.0, 0.5)), [(6000 / np.pi) ** (1 / 3)])
    # 2-D: 100 pixels of 0.5 x 0.5 mm = 25 mm²; a disc of area A has diameter (4 A / pi)^(1/2)
    np.testing.assert_allclose(equivalent_diameter_mm([100, 0], (0.5, 0.5)), [np.sqrt(100 / np.pi), 0])
    # a ball of radius 10 mm rasterised on a 0.5 mm grid comes out close to 20 mm
    z, y, x = np.indices((48, 48, 48)) * 0.5 - 11.75
    assert equivalent_diameter_mm([np.sum(z ** 2 + y ** 2 + x ** 2 <= 100)], (0.5, 0.5, 0.5))[0] == pytest.approx(20, rel=0.01)
