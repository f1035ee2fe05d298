"""Overlap metrics against hand counts and SimpleITK's LabelOverlapMeasuresImageFilter."""
import math

import numpy as np
import pytest
import SimpleITK as sitk

from segmetrics.metrics.overlap import compute_overlap, confusion_counts, dice, jaccard
from segmetrics.registry import StructurePair


def _boxes():
    reference = np.zeros((8, 10, 12), bool)
    test = np.zeros_like(reference)
    reference[1:5, 2:6, 3:9] = True  # 4*4*6 = 96 voxels
    test[2:6, 2:6, 3:9] = True  # shifted one slice: overlap 3*4*6 = 72
    return reference, test


def test_counts_and_ratios_by_hand():
    reference, test = _boxes()
    counts = confusion_counts(reference, test)
    assert (counts.tp, counts.fp, counts.fn) == (72, 24, 24)
    assert dice(reference, test) == pytest.approx(2 * 72 / 192)
    assert jaccard(reference, test) == pytest.approx(72 / 120)


def test_volumes_use_spacing_in_array_order():
    reference, test = _boxes()
    pair = StructurePair("box", reference, test, spacing=(2.5, 0.8, 0.5))
    values = {v.metric: v for v in compute_overlap(pair)}
    voxel_ml = 2.5 * 0.8 * 0.5 / 1000
    assert values["volume_reference_ml"].value == pytest.approx(96 * voxel_ml)
    assert values["false_positive_volume_ml"].value == pytest.approx(24 * voxel_ml)
    assert values["volume_reference_ml"].unit == "ml"
    assert values["volumetric_similarity"].value == pytest.approx(1.0)


def test_agrees_with_simpleitk_label_overlap():
    rng = np.random.default_rng(3)
    reference = rng.random((20, 30, 25)) > 0.6
    test = rng.random((20, 30, 25)) > 0.5
    measures = sitk.LabelOverlapMeasuresImageFilter()
    # ITK's convention: Execute(source=segmentation, target=ground truth).
    measures.Execute(sitk.GetImageFromArray(test.astype(np.uint8)), sitk.GetImageFromArray(reference.astype(np.uint8)))
    values = {v.metric: v.value for v in compute_overlap(StructurePair("r", reference, test, (1, 1, 1)))}
    assert values["dice"] == pytest.approx(measures.GetDiceCoefficient(), abs=1e-12)
    assert values["jaccard"] == pytest.approx(measures.GetJaccardCoefficient(), abs=1e-12)
    assert values["volumetric_similarity"] == pytest.approx(1 - abs(measures.GetVolumeSimilarity()) / 2, abs=1e-12)
    # ITK's false-negative error is |R minus T| / |R| = 1 - sensitivity; with the roles swapped it gives 1 - precision.
    assert values["sensitivity"] == pytest.approx(1 - measures.GetFalseNegativeError(), abs=1e-12)
    measures.Execute(sitk.GetImageFromArray(reference.astype(np.uint8)), sitk.GetImageFromArray(test.astype(np.uint8)))
    assert values["precision"] == pytest.approx(1 - measures.GetFalseNegativeError(), abs=1e-12)


@pytest.mark.parametrize(
    "ref_on, test_on, status",
    [(True, False, "test_empty"), (False, True, "reference_empty"), (False, False, "both_empty")],
)
def test_empty_masks_have_status_and_nan_where_undefined(ref_on, test_on, status):
    reference = np.zeros((4, 4), bool)
    test = np.zeros((4, 4), bool)
    reference[1, 1] = ref_on
    test[2, 2] = test_on
    values = {v.metric: v for v in compute_overlap(StructurePair("s", reference, test, (1, 1)))}
    assert {v.status for v in values.values()} == {status}
    if status == "both_empty":
        assert math.isnan(values["dice"].value) and math.isnan(values["jaccard"].value)
    else:
        assert values["dice"].value == 0.0
    assert math.isnan(values["sensitivity"].value) == (not ref_on)
    assert math.isnan(values["precision"].value) == (not test_on)
    assert values["volume_reference_ml"].unit == "mm2"  # 2-D masks report areas
