"""``compare`` measures each structure pair within the bounding box of its voxels, found with the
labels in one pass per image: every value, per-slice MSI row and surface point must equal the
metric groups run on the whole image's masks, and the boxes must equal brute force."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from vtk.util.numpy_support import vtk_to_numpy

from segmetrics.evaluation.compare import compare
from segmetrics.spatial.geometry import LabelImage, bounding_box, label_boxes
from segmetrics.registry import Parameters, StructurePair, all_groups

SPACING = (2.0, 0.7, 0.9)
PARAMETERS = [
    Parameters(),
    Parameters(surface_mode="deepmind", msi_convention="fda", msi_units="pixel", hd_percentile_variant="pooled"),
    Parameters(roughness_convention="paper"),  # depends on the image size: measured on the whole image
]


def _ellipsoid(shape, centre, semi_axes):
    grid = np.ogrid[tuple(slice(0, n) for n in shape)]
    return sum(((g - c) / a) ** 2 for g, c, a in zip(grid, centre, semi_axes)) <= 1


def _label_maps():
    """Two labels per image; label 1 is cut by the image border (z = 0), label 2 lies inside."""
    shape = (24, 50, 45)
    reference, test = np.zeros(shape, np.uint8), np.zeros(shape, np.uint8)
    reference[_ellipsoid(shape, (2, 20, 18), (6, 9, 8))] = 1
    test[_ellipsoid(shape, (3, 21, 17), (6, 8, 9))] = 1
    reference[_ellipsoid(shape, (15, 35, 30), (4, 6, 7))] = 2
    test[_ellipsoid(shape, (15.5, 34, 31), (4, 7, 6))] = 2
    return reference, test


def _whole_image_values(reference, test, label, params):
    """Every group on full-size masks, as the groups' own callers would (no crop, no reorientation)."""
    pair = StructurePair(str(label), reference == label, test == label, SPACING, image=LabelImage(reference, SPACING))
    values = [v for group in all_groups().values() for v in group.compute(pair, params)]
    return values, pair.extras


@pytest.mark.parametrize("params", PARAMETERS, ids=["exact", "deepmind-fda-pixel", "paper"])
def test_values_rows_and_surfaces_equal_the_whole_image(params):
    reference, test = _label_maps()
    result = compare(reference, test, spacing=SPACING, params=params, metrics="all")
    assert [s.structure for s in result.structures] == ["1", "2"]
    for structure in result.structures:
        expected, extras = _whole_image_values(reference, test, int(structure.structure), params)
        assert [v.metric for v in structure.values] == [v.metric for v in expected]
        for got, want in zip(structure.values, expected):
            assert got.status == want.status, got.metric
            assert math.isclose(got.value, want.value, rel_tol=1e-12, abs_tol=1e-12) or (
                math.isnan(got.value) and math.isnan(want.value)), (got.metric, got.value, want.value)
            assert got.params.keys() == want.params.keys(), got.metric
            for key, value in want.params.items():  # numbers (e.g. per-direction percentiles) to 1e-12
                expected_param = pytest.approx(value, rel=1e-12, abs=1e-12) if isinstance(value, float) else value
                assert got.params[key] == expected_param, (got.metric, key)
        got_rows, want_rows = structure.extras["msi_slices"], extras["msi_slices"]
        assert [(r.slice, r.position_mm) for r in got_rows] == [(r.slice, r.position_mm) for r in want_rows]
        np.testing.assert_allclose([r.msi for r in got_rows], [r.msi for r in want_rows], rtol=1e-12)
        for key in ("test_surface", "reference_surface"):
            if key in extras:
                got_points = vtk_to_numpy(structure.extras[key].GetPoints().GetData())
                np.testing.assert_allclose(got_points, vtk_to_numpy(extras[key].GetPoints().GetData()), rtol=0, atol=1e-9)


def test_an_absent_label_is_measured_as_both_empty():
    reference, test = _label_maps()
    (structure,) = compare(reference, test, spacing=SPACING, labels=[7], metrics=["dice", "hd"]).structures
    assert {v.status for v in structure.values} == {"both_empty"}


@settings(max_examples=30, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**16), dtype=st.sampled_from([np.uint8, np.uint16, np.int16, np.int64, bool]),
       shape=st.sampled_from([(7, 9, 11), (13, 6), (1, 5, 4)]))
def test_label_boxes_equal_brute_force(seed, dtype, shape):
    rng = np.random.default_rng(seed)
    array = np.zeros(shape, dtype)
    for _ in range(rng.integers(0, 4)):
        low = [int(rng.integers(0, n)) for n in shape]
        high = [int(rng.integers(a, n)) + 1 for a, n in zip(low, shape)]
        array[tuple(slice(a, b) for a, b in zip(low, high))] = rng.integers(1, 2 if dtype is bool else 120)
    expected = {}
    for value in np.unique(array[array != 0]):
        where = np.argwhere(array == value)
        expected[int(value)] = tuple(slice(int(a), int(b) + 1) for a, b in zip(where.min(0), where.max(0)))
    assert label_boxes(array) == expected
    image = LabelImage(array, (1.0,) * len(shape))
    assert image.labels() == sorted(expected)
    assert all(image.label_box(label) == box for label, box in expected.items())


@settings(max_examples=60, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**16), dtype=st.sampled_from(["bool", "uint8", "int8", "int16", "uint32", "int64", "float32", "float64"]),
       shape=st.sampled_from([(7, 9, 11), (3, 5, 3), (13, 6), (9,), (1, 1, 8)]), layout=st.sampled_from(["C", "F", "strided"]))
def test_bounding_box_equals_brute_force(seed, dtype, shape, layout):
    """The box of the non-zero voxels for any dtype and memory layout (integers are read as words:
    negative values count, float -0.0 does not)."""
    rng = np.random.default_rng(seed)
    array = (rng.random(shape) < rng.choice([0.0, 0.01, 0.2])) * rng.choice([-3, 1, 200])
    array = array.astype(dtype)
    if array.dtype.kind == "f":
        array[array == 0] = -0.0
    array = {"C": array, "F": np.asfortranarray(array), "strided": np.repeat(array, 2, axis=-1)[..., ::2]}[layout]
    where = np.argwhere(array != 0)
    expected = tuple(slice(int(a), int(b) + 1) for a, b in zip(where.min(0), where.max(0))) if len(where) else None
    assert bounding_box(array) == expected


def test_labels_and_boxes_of_negative_and_large_values():
    """Values outside the one-pass range are counted, and boxed one label at a time."""
    array = np.zeros((5, 6, 7), np.int32)
    array[1:3, 2:4, 0:2] = -4
    array[4, 5, 6] = 1 << 20
    image = LabelImage(array, (1.0, 1.0, 1.0))
    assert label_boxes(array) is None
    assert image.labels() == [-4, 1 << 20]
    assert image.label_box(-4) == (slice(1, 3), slice(2, 4), slice(0, 2))
    assert image.label_box(1 << 20) == (slice(4, 5), slice(5, 6), slice(6, 7))
    assert image.label_box(3) is None


def test_a_boolean_mask_is_read_in_place_not_copied():
    """A 0/1 mask whose storage is canonical is measured through a read-only view of the caller's
    array (no copy of the pair's box); a label map's label, or a reversed storage, gives a new mask."""
    from segmetrics.evaluation.compare import _mask
    from segmetrics.inputs.io import load_label_image
    from segmetrics.spatial.orientation import canonical

    array = np.zeros((6, 7, 8), bool)
    array[1:4, 2:5, 3:6] = True
    image = load_label_image(array, spacing=(2.0, 1.0, 1.0))
    box = image.label_box(1)
    mask = _mask(image, 1, canonical(image).within(box))
    assert np.shares_memory(mask, array) and not mask.flags.writeable
    assert np.array_equal(mask, array[box]) and mask.all()
    labels = load_label_image(array * np.uint8(2), spacing=(2.0, 1.0, 1.0))  # label 2
    assert not np.shares_memory(_mask(labels, 2, canonical(labels).within(box)), labels.array)
    reversed_x = LabelImage(array[:, :, ::-1].view(np.uint8), (2.0, 1.0, 1.0), direction=(-1.0, 0, 0, 0, 1.0, 0, 0, 0, 1.0))
    view = canonical(reversed_x).within(reversed_x.label_box(1))
    assert np.array_equal(_mask(reversed_x, 1, view), array[box]) and _mask(reversed_x, 1, view).flags.c_contiguous
