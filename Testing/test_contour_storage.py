"""The contour group in any storage of one grid: percentiles reached exactly on a plateau of the
distance, and the planes one side only contours, named alike whatever the summation order or the
array's axis direction."""
import numpy as np
import pytest

from segmetrics.evaluation.compare import compare
from segmetrics.metrics.contours import DistanceProfile
from segmetrics.spatial.geometry import LabelImage


def constant_profile(lengths, distances) -> DistanceProfile:
    """Consecutive pieces of one plane at constant distances (mm), ``lengths`` mm long."""
    high = np.cumsum(lengths)
    count = len(lengths)
    return DistanceProfile(np.zeros(count, int), high - np.asarray(lengths), high, np.zeros(count), np.zeros(count),
                           np.asarray(distances, float) ** 2)


@pytest.mark.parametrize("order", [(0, 1, 2, 3, 4, 5), (0, 3, 1, 4, 2, 5), (5, 4, 3, 2, 1, 0)])
def test_median_on_a_plateau_is_its_lower_end_in_any_piece_order(order):
    """Pieces 0.1, 0.7, 0.2 mm at 1 mm and 0.1, 0.2, 0.7 mm at 3 mm: exactly half the length is
    within 1 mm, so the median is 1 mm, though the lengths sum differently in floating point."""
    lengths = np.array([0.1, 0.7, 0.2, 0.1, 0.2, 0.7])[list(order)]
    distances = np.array([1.0, 1.0, 1.0, 3.0, 3.0, 3.0])[list(order)]
    assert constant_profile(lengths, distances).percentile(50) == pytest.approx(1.0, abs=1e-9)


def test_planes_one_side_contours_are_named_alike_when_the_slice_axis_is_stored_reversed():
    """A 2 × 3 voxel block on slices 2-5 (reference) and 2-3 (test), slice spacing 2.5 mm from z = 0:
    the reference alone contours the slices at z = 2.5 × 4 and 2.5 × 5 mm (patient coordinates),
    whether z is stored increasing or reversed (the same physical voxels)."""
    reference, test = np.zeros((8, 5, 6), np.uint8), np.zeros((8, 5, 6), np.uint8)
    reference[2:6, 1:3, 1:4] = 1
    test[2:4, 1:3, 1:4] = 1
    spacing, origin = (2.5, 1.0, 1.0), (0.0, 0.0, 0.0)
    reversed_direction = (1, 0, 0, 0, 1, 0, 0, 0, -1)
    reversed_origin = (0.0, 0.0, 2.5 * 7)  # of the first stored voxel, now the last slice
    results = [compare(LabelImage(reference, spacing, origin), LabelImage(test, spacing, origin), metrics="contours"),
               compare(LabelImage(reference[::-1].copy(), spacing, reversed_origin, reversed_direction),
                       LabelImage(test[::-1].copy(), spacing, reversed_origin, reversed_direction), metrics="contours")]
    for result in results:
        params = result.structures[0].get("contour_hd_mm").params
        assert params["reference_only_planes_mm"] == [10.0, 12.5]
        assert params["test_only_planes_mm"] == []
