"""The surface kernels on Slicer's bundled packages (:mod:`segmetrics.spatial._bundled_surface`) give
the compiled kernels' values, kernel by kernel and through ``segmetrics.compare`` (distance group,
``exact`` and ``deepmind`` modes, ``SEGMETRICS_ACCELERATOR=off`` against the accelerated path).

The comparisons with the compiled kernels skip without numba; the tests of the bundled path alone
(analytic values, imports without numba or scikit-image) run everywhere.
"""
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import segmetrics
from segmetrics.metrics import distance as D
from segmetrics.spatial import _bundled_surface as bundled
from segmetrics.spatial import mesh

PACKAGE_ROOT = Path(__file__).resolve().parents[1] / "SegMetricsModule"


@pytest.fixture(scope="module")
def compiled():
    """The compiled kernels (skips without numba)."""
    pytest.importorskip("numba")
    from segmetrics.spatial import _kernels

    return _kernels


def assert_same(expected, got):
    """Same outputs (tuples of arrays, or one array): equal values, dtypes and shapes."""
    expected, got = (x if isinstance(x, tuple) else (x,) for x in (expected, got))
    assert len(expected) == len(got)
    for e, g in zip(expected, got):
        e, g = np.asarray(e), np.asarray(g)
        assert e.dtype == g.dtype and e.shape == g.shape
        np.testing.assert_array_equal(e, g)


def ball(radius_mm, spacing, centre_mm, shape):
    grid = np.ogrid[tuple(slice(0, n) for n in shape)]
    return sum(((g * s - c) / radius_mm) ** 2 for g, s, c in zip(grid, spacing, centre_mm)) <= 1


def surface_star(surface):
    """The walk's inputs for a surface: its points (3 components), cells, cells per vertex, feature corners."""
    points = mesh._three_components(surface.points)
    return (points, surface.cells, *bundled.cells_by_vertex(surface.cells, len(points)),
            bundled.FEATURE_CORNERS[surface.cells.shape[1]])


# --- kernel by kernel ---------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(1,), (7,), (1, 1, 1), (5, 9), (9, 40, 33), (3, 2, 5), (30, 1, 4)])
@pytest.mark.parametrize("sigma", [0.0, 0.5, 1.0, 3.0])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gaussian_blur(compiled, shape, sigma, dtype):
    mask = np.random.default_rng(len(shape) * 100 + int(10 * sigma)).random(shape) < 0.4
    assert_same(compiled.gaussian_blur(mask, sigma, dtype), bundled.gaussian_blur(mask, sigma, dtype))


@pytest.mark.parametrize("size", [0, 1, 1000])
def test_clamp_field(compiled, size):
    rng = np.random.default_rng(size)
    field = rng.random(size).astype(np.float32)
    field[: size // 3] = 0.5  # the level itself, and values around the clamp bounds
    field[size // 3: size // 2] = np.float32(0.55)
    inside = rng.random(size) < 0.5
    expected, got = field.copy(), field.copy()
    assert_same(compiled.clamp_field(expected, inside, 0.05), bundled.clamp_field(got, inside, 0.05))
    assert_same(expected, got)


def random_cells(rng, vertex_count, cell_count, corners):
    cells = rng.integers(0, vertex_count, size=(cell_count, corners))
    cells[: cell_count // 4, 1] = cells[: cell_count // 4, 0]  # cells that repeat a corner
    return cells


@pytest.mark.parametrize("counts", [(0, 0), (1, 0), (5, 1), (200, 500)])
@pytest.mark.parametrize("corners", [2, 3])
def test_cells_by_vertex_and_corner_shares(compiled, counts, corners):
    rng = np.random.default_rng(sum(counts) + corners)
    vertex_count, cell_count = counts
    cells = random_cells(rng, vertex_count, cell_count, corners) if vertex_count else np.zeros((0, corners), np.int64)
    sizes = rng.random(len(cells))
    for count in (vertex_count, vertex_count + 3):  # also vertices without a cell
        assert_same(compiled.cells_by_vertex(cells, count), bundled.cells_by_vertex(cells, count))
        assert_same(compiled.corner_shares(cells, sizes, count), bundled.corner_shares(cells, sizes, count))
    if corners == 3 and vertex_count:
        vertices = rng.normal(size=(vertex_count, 3))
        assert_same(compiled.triangle_areas(vertices, cells), bundled.triangle_areas(vertices, cells))


def test_index_errors_are_refused_alike(compiled):
    cells = np.array([[0, 1, 5]])
    for module in (compiled, bundled):
        with pytest.raises(ValueError):
            module.cells_by_vertex(cells, 3)
        with pytest.raises(ValueError):
            module.corner_shares(cells, np.ones(1), 3)
        with pytest.raises(ValueError):
            module.triangle_areas(np.zeros((3, 3)), cells)


@pytest.mark.parametrize("values", [
    [], [2.5], [1.0, 1.0, 0.0, np.inf, 0.0, 1.0], list(np.random.default_rng(0).integers(0, 50, 5000) / 7.0),
    [0.0, -0.0, -1.0, np.nan, 3.0, -2.0],  # negative values and NaN: by their bits in both
])
def test_ascending_order(compiled, values):
    values = np.asarray(values, dtype=float)
    assert_same(compiled.ascending_order(values), bundled.ascending_order(values))


def lattice_points(rng, count):
    """Points of a 1 mm lattice (many equal distances) with a few duplicates."""
    points = rng.integers(-6, 7, size=(count, 3)).astype(float)
    return np.concatenate([points, points[:3]])


@pytest.mark.parametrize("case", ["random", "lattice", "one", "none"])
def test_vertex_grid_and_nearest_vertices(compiled, case):
    """Same grid; same nearest vertex (the lowest index of equally near ones) and squared distance
    wherever the compiled search, limited to its rings of buckets, finds one."""
    rng = np.random.default_rng(7)
    points = {"random": rng.normal(scale=10.0, size=(3000, 3)), "lattice": lattice_points(rng, 400),
              "one": np.array([[1.0, 2.0, 3.0]]), "none": np.zeros((0, 3))}[case]
    queries = np.concatenate([rng.uniform(-15, 15, size=(3000, 3)), rng.integers(-8, 9, size=(2000, 3)) / 2.0,
                              points[:50], [[np.nan, 0, 0], [np.inf, 0, 0], [2e150, 0, 0]]])
    for bucket_mm in (0.7, 3.0):
        grid = compiled.vertex_grid(points, bucket_mm)
        assert_same(grid, bundled.vertex_grid(points, bucket_mm))
        expected, got = compiled.nearest_vertices(queries, bucket_mm, *grid), bundled.nearest_vertices(queries, bucket_mm, *grid)
        found = expected[0] >= 0
        assert found[:-3].sum() > (len(queries) // 2 if len(points) else -1)
        assert_same((expected[0][found], expected[1][found]), (got[0][found], got[1][found]))
        assert np.all(got[0][-3:] == -1) and np.all(got[1][-3:] == np.inf)
        if len(points):  # beyond the rings: still the nearest vertex
            squared = np.sum((points[None] - queries[:-3, None]) ** 2, axis=2)
            np.testing.assert_allclose(got[1][:-3], squared.min(axis=1), rtol=1e-12)


def test_ties_go_to_the_lowest_vertex_index(compiled):
    """A point as near to two vertices gets the lower index, whatever was searched before it
    (before the fix, the compiled search kept the previous point's vertex)."""
    vertices = np.array([[2.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 2.0, 0.0]])
    queries = np.array([[0.1, 0.0, 0.0], [1.0, 0.0, 0.0], [1.9, 0.0, 0.0], [1.0, 0.0, 0.0]])
    # twelve vertices as near to the origin (more than the KD-tree's first look), in shuffled order
    edges_of_cube = np.array([p for p in np.ndindex(3, 3, 3) if np.sum(np.abs(np.array(p) - 1)) == 2], dtype=float) - 1
    around = np.concatenate([[[5.0, 5.0, 5.0]], np.random.default_rng(2).permutation(edges_of_cube)])
    lowest = 1 + np.argmin([np.sum(p**2) for p in around[1:]])  # all equal: the first of them
    for module in (compiled, bundled):
        grid = module.vertex_grid(vertices, 1.0)
        assert list(module.nearest_vertices(queries, 1.0, *grid)[0]) == [1, 0, 0, 0]
        assert list(module.nearest_vertices(queries[1:2], 1.0, *grid)[0]) == [0]
        grid = module.vertex_grid(around, 0.5)
        assert list(module.nearest_vertices(np.zeros((2, 3)), 0.5, *grid)[0]) == [lowest, lowest]


def surfaces():
    """Surfaces to walk on: a ball and a box (3-D), a disc with a hole (2-D), a few degenerate
    triangles (corners at one point, on a line, a sliver) and segments (of length 0), each beside
    an isolated vertex."""
    ball_mask = ball(6.0, (2.0, 0.8, 0.8), (10.0, 9.0, 9.1), (11, 24, 24))
    box = np.zeros((8, 9, 10), bool)
    box[2:6, 2:7, 3:8] = True
    yy, xx = np.mgrid[:30, :30]
    ring = ((yy - 15) ** 2 + (xx - 14) ** 2 <= 100) & ((yy - 15) ** 2 + (xx - 14) ** 2 > 9)
    points = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 0], [2, 0, 0], [3, 0, 0], [4, 0, 0],
                       [0, 0, 5], [1, 0, 5], [2, 1e-12, 5], [9, 9, 9]], dtype=float)
    cells = np.array([[0, 1, 2], [0, 3, 3], [4, 5, 6], [7, 8, 9], [1, 4, 2]])
    degenerate = mesh.Surface(points, np.ones(len(points)), cells)
    segments = mesh.Surface(points[[0, 1, 2, 3, 4, 10], :2], np.ones(6), np.array([[0, 1], [1, 3], [3, 0], [0, 2], [2, 4], [4, 4]]))
    return [mesh.smooth_surface(ball_mask, (2.0, 0.8, 0.8)), mesh.smooth_surface(box, (1.0, 1.0, 1.0)),
            mesh.smooth_surface(ring, (0.7, 1.1)), degenerate, segments]


@pytest.mark.parametrize("which", range(5))
def test_closest_points(compiled, which):
    """The walk from each query's nearest vertex (and from other vertices): same offsets, cells,
    features, on random points, lattice points (ties) and the vertices themselves."""
    surface = surfaces()[which]
    star = surface_star(surface)
    points = star[0]
    rng = np.random.default_rng(which)
    low, high = points.min(axis=0) - 3, points.max(axis=0) + 3
    queries = np.concatenate([rng.uniform(low, high, size=(4000, 3)), np.round(rng.uniform(low, high, size=(2000, 3))),
                              points, points + 1e-9])
    if surface.cells.shape[1] == 2:
        queries[:, 2] = 0.0
    grid = mesh.point_grid(surface.points, surface.sizes)
    expected, got = compiled.closest_points_near(queries, *grid, *star), bundled.closest_points_near(queries, *grid, *star)
    found = expected[3] >= 0
    assert found.sum() > len(queries) // 2
    assert_same(tuple(x[found] for x in expected), tuple(x[found] for x in got))
    starts = rng.integers(0, len(points), len(queries))  # any start vertex: the same walk
    assert_same(compiled.closest_points(queries, starts, *star), bundled.closest_points(queries, starts, *star))
    none = np.zeros((0, 3))
    assert_same(compiled.closest_points_near(none, *grid, *star), bundled.closest_points_near(none, *grid, *star))


def test_walk_inputs_out_of_range_are_refused(compiled):
    surface = surfaces()[1]
    points, cells, by_vertex, first, count, corners = surface_star(surface)
    queries = points[:5] + 0.1
    for module in (compiled, bundled):
        with pytest.raises(ValueError):
            module.closest_points(queries, np.full(5, len(points)), points, cells, by_vertex, first, count, corners)
        with pytest.raises(ValueError):
            module.closest_points(queries, np.zeros(5, np.int64), points, cells, by_vertex + len(cells), first, count, corners)


# --- the distance group, accelerated and not ---------------------------------------------------


def distance_values(monkeypatch, accelerator, reference, test, spacing, mode):
    monkeypatch.setenv("SEGMETRICS_ACCELERATOR", accelerator)
    result = segmetrics.compare(reference, test, spacing=spacing, metrics="distance",
                                params=segmetrics.Parameters(surface_mode=mode))
    return {(r["structure"], r["metric"]): r["value"] for r in result.records()}


def assert_close_values(expected: dict, got: dict):
    assert expected.keys() == got.keys()
    for key, value in expected.items():
        if math.isnan(value) or math.isinf(value):
            assert got[key] == value or (math.isnan(value) and math.isnan(got[key])), key
        else:
            assert got[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key


def pairs():
    spacing = (2.5, 0.8, 0.8)
    shape = (24, 70, 70)
    labels_a = ball(20.0, spacing, (30.0, 28.0, 28.3), shape).astype(np.uint8)
    labels_b = ball(18.0, spacing, (31.5, 29.0, 27.0), shape).astype(np.uint8)
    labels_a[2:6, 5:15, 50:66] = 2  # a box beside the ball, shifted by a voxel in the test
    labels_b[3:6, 6:15, 50:65] = 2
    labels_a[20, 60, 5] = 3  # a speck on one side only
    yield labels_a, labels_b, spacing
    yield labels_a[12], labels_b[12], spacing[1:]  # 2-D


@pytest.mark.parametrize("mode", D.SURFACE_MODES)
@pytest.mark.parametrize("pair", range(2))
def test_distance_group_same_without_the_accelerator(compiled, monkeypatch, mode, pair):
    reference, test, spacing = list(pairs())[pair]
    expected = distance_values(monkeypatch, "auto", reference, test, spacing, mode)
    assert_close_values(expected, distance_values(monkeypatch, "off", reference, test, spacing, mode))


@pytest.mark.parametrize("mode", D.SURFACE_MODES)
def test_real_pair_same_without_the_accelerator(compiled, monkeypatch, data_dir, mode):
    """TotalSegmentator's two models on one CT (40 labels at 3 mm: many equal distances on the lattice)."""
    sitk = pytest.importorskip("SimpleITK")
    folder = data_dir / "totalsegmentator"
    images = [sitk.ReadImage(str(folder / name)) for name in ("example_seg.nii.gz", "example_seg_fast.nii.gz")]
    reference, test = (sitk.GetArrayFromImage(image) for image in images)
    spacing = images[0].GetSpacing()[::-1]
    expected = distance_values(monkeypatch, "auto", reference, test, spacing, mode)
    assert_close_values(expected, distance_values(monkeypatch, "off", reference, test, spacing, mode))


# --- the bundled path alone ----------------------------------------------------------------------


def test_bundled_path_gives_concentric_ball_distances(monkeypatch):
    """Without the accelerator: concentric balls 3 mm apart in radius are 3 mm apart everywhere
    (within the sub-voxel surface's error); in DeepMind mode, a box one voxel (2 mm) longer is
    2 mm from the other at most."""
    monkeypatch.setenv("SEGMETRICS_ACCELERATOR", "off")
    spacing = (1.0, 1.0, 1.0)
    outer, inner = ball(12.0, spacing, (16.0, 16.0, 16.0), (33, 33, 33)), ball(9.0, spacing, (16.0, 16.0, 16.0), (33, 33, 33))
    sd = D.surface_distances(outer, inner, spacing)
    assert D.assd(sd) == pytest.approx(3.0, abs=0.1) and D.hausdorff(sd) == pytest.approx(3.0, abs=0.25)
    box, longer = np.zeros((10, 8, 8), bool), np.zeros((10, 8, 8), bool)
    box[2:6, 2:6, 2:6], longer[2:7, 2:6, 2:6] = True, True
    assert D.hausdorff(D.surface_distances(box, longer, (2.0, 1.0, 1.0), mode="deepmind")) == pytest.approx(2.0)


def test_surfel_table_is_the_marching_cubes_one():
    """The DeepMind-mode surfel areas (VTK flying edges on each 2×2×2 neighbourhood): a single
    inside corner cuts a triangle of legs 1/2 (area √3/8 at unit spacing), a face of four corners
    a unit square, and the 2-D table's one-corner segment is √2/2 long."""
    sizes = D._surfel_size_table((1.0, 1.0, 1.0))
    assert sizes[0b00000001] == pytest.approx(math.sqrt(3) / 8, rel=1e-12)
    assert sizes[0b00001111] == pytest.approx(1.0, rel=1e-12)  # the four corners of one face
    assert sizes[0b11111110] == pytest.approx(sizes[0b00000001], rel=1e-12)  # the complement's triangle
    assert D._surfel_size_table((1.0, 1.0))[0b0001] == pytest.approx(math.sqrt(0.5), rel=1e-12)
    anisotropic = D._surfel_size_table((2.0, 1.0, 3.0))
    assert anisotropic[0b00001111] == pytest.approx(3.0, rel=1e-12)  # the face spans axes 1 and 2: 1 × 3 mm²


def test_surfel_table_matches_scikit_image():
    measure = pytest.importorskip("skimage.measure")
    for spacing in ((1.0, 1.0, 1.0), (2.5, 0.8, 0.7)):
        expected = []
        for code in range(256):
            bits = np.array([(code >> (7 - i)) & 1 for i in range(8)], dtype=float)
            bits = 1.0 - bits if bits.sum() > 4 else bits
            if not bits.any():
                expected.append(0.0)
                continue
            vertices, faces, _, _ = measure.marching_cubes(bits.reshape(2, 2, 2), 0.5, method="lorensen")
            corners = vertices[faces].astype(float) * spacing
            expected.append(np.sum(np.linalg.norm(np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0]), axis=1)) / 2)
        np.testing.assert_allclose(D._surfel_size_table(spacing), expected, rtol=1e-12)


def test_marching_squares_matches_scikit_image():
    """The 2-D surface's vertices and directed segments are those of scikit-image's find_contours."""
    measure = pytest.importorskip("skimage.measure")
    rng = np.random.default_rng(5)
    for trial in range(40):
        mask = rng.random((rng.integers(3, 25), rng.integers(3, 25))) < rng.random()
        if not mask.any():
            continue
        field = mesh._surface_field(np.pad(mask, 2), 1.0)
        vertices, segments = mesh._marching_squares(field)
        contours = [c[:-1] for c in measure.find_contours(field, 0.5)]
        expected = np.concatenate([np.stack([c, np.roll(c, -1, axis=0)], axis=1) for c in contours]).reshape(-1, 4)
        assert sorted(map(tuple, expected)) == sorted(map(tuple, vertices[segments].reshape(-1, 4)))


def test_imports_and_distances_without_numba_or_scikit_image():
    """In a Python where numba, scikit-image and shapely cannot be imported: the distance group
    imports, computes, and compile_kernels does nothing."""
    code = (
        "import sys\n"
        "for name in ('numba', 'skimage', 'shapely'):\n"
        "    sys.modules[name] = None\n"
        "import numpy as np\n"
        "from segmetrics.metrics import distance as D\n"
        "from segmetrics.spatial import mesh\n"
        "mesh.compile_kernels()\n"
        "a = np.zeros((12, 12, 12), bool); a[3:9, 3:9, 3:9] = True\n"
        "b = np.zeros_like(a); b[4:9, 3:9, 3:9] = True\n"
        "for mode in D.SURFACE_MODES:\n"
        "    print(D.hausdorff(D.surface_distances(a, b, (1.0, 1.0, 1.0), mode)))\n"
        "assert 'segmetrics.spatial._kernels' not in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(PACKAGE_ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    hd_exact, hd_deepmind = map(float, done.stdout.split())
    assert 0.5 < hd_exact < 1.5 and hd_deepmind == pytest.approx(1.0)
