"""The numpy/scipy twins of the roughness kernels (``segmetrics.spatial._bundled_roughness``) against
the compiled kernels (``segmetrics.spatial._kernels``, numba): the same values, bit for bit, on
random and degenerate inputs (rays through vertices and edges, rays in a cell's plane, ties at the
window radius, empty sets), and the roughness metrics with ``SEGMETRICS_ACCELERATOR=off`` against
the accelerated path on spheres and the roughness paper's objects.

Truth: the compiled kernels, an independent implementation (loops over buckets); both are checked
against analytic geometry and exhaustive searches in ``test_roughness.py`` and ``test_kernels.py``.
Everything here skips without numba.
"""
import numpy as np
import pytest
from vtkmodules.util.numpy_support import vtk_to_numpy

pytest.importorskip("numba")

from segmetrics import compare, registry  # noqa: E402
from segmetrics.metrics import roughness  # noqa: E402
from segmetrics.registry import Parameters, StructurePair  # noqa: E402
from segmetrics.spatial import _bundled_roughness, _kernels, accelerator, mesh  # noqa: E402


def _same(bundled, compiled):
    """Tuples (or arrays) of arrays equal bit for bit, NaN where NaN."""
    if isinstance(compiled, np.ndarray):
        bundled, compiled = (bundled,), (compiled,)
    assert len(bundled) == len(compiled)
    for ours, theirs in zip(bundled, compiled):
        assert ours.shape == theirs.shape
        np.testing.assert_array_equal(ours, theirs)


def _both(name, *args):
    """``name`` of both kernel modules on the same arguments, checked equal; the compiled output."""
    compiled = getattr(_kernels, name)(*args)
    _same(getattr(_bundled_roughness, name)(*args), compiled)
    return compiled


def _gaps_both(points, centre, vertices, cells, tolerance=1e-9):
    """Every kernel of :func:`segmetrics.metrics.roughness.radial_gaps` through both modules (points,
    centre and vertices as rows of 3 components); the compiled gaps."""
    offsets = points - centre
    zeta = np.linalg.norm(offsets, axis=1)
    directions = offsets / np.maximum(zeta, 1e-300)[:, None]
    cells = _both("ray_cells", vertices, np.asarray(cells, dtype=np.int64), centre)
    finest = roughness._direction_buckets(cells[1])
    grid = _both("direction_grid", cells[0], cells[1], finest)
    return _both("radial_gaps", directions, zeta, *cells, tolerance, finest, *grid)[0]


@pytest.fixture(params=[None, 5], ids=["blocks", "tiny-blocks"])
def block_size(request, monkeypatch):
    """The twins' blocks of rays and window centres: as shipped, and a few pairs each (every block
    boundary exercised)."""
    if request.param:
        monkeypatch.setattr(_bundled_roughness, "PAIRS_PER_BLOCK", request.param)
        monkeypatch.setattr(_bundled_roughness, "SCANNED_PER_BLOCK", request.param)


# --- rays -----------------------------------------------------------------------------------------


def test_rays_of_a_sphere_through_its_own_vertices_edges_and_faces(block_size):
    """Rays from inside a closed surface through each of its vertices (shared by several cells),
    edge midpoints and face centres: every tie at a cell's boundary decided alike."""
    surface = mesh.smooth_surface(np.pad(np.ones((5, 6, 7), bool), 2), (1.0, 0.9, 1.3))
    vertices, cells = surface.points, surface.cells
    corners = vertices[cells]
    points = np.concatenate([vertices, (corners[:, 0] + corners[:, 1]) / 2, corners.mean(axis=1)])
    for centre in (vertices.mean(axis=0), vertices[0] * 0.9 + vertices.mean(axis=0) * 0.1):
        gaps = _gaps_both(points, centre, vertices, cells)
        assert np.all(gaps < 1e-9 * np.linalg.norm(points - centre, axis=1).max())  # each point lies on the surface


def test_rays_against_random_triangles_and_a_cell_at_the_centre(block_size):
    rng = np.random.default_rng(3)
    vertices = rng.normal(size=(60, 3)) * 5
    cells = rng.integers(0, 60, size=(80, 3))
    cells[0] = (0, 0, 1)  # a corner repeated: area 0
    centre = vertices[5].copy()  # the centre on the corner of some cells
    points = np.concatenate([vertices, rng.normal(size=(200, 3)) * 5, centre[None]])  # one ray of length 0
    _gaps_both(points, centre, vertices, cells)


def test_rays_in_a_cells_plane_and_behind_the_centre():
    """A square of two triangles in the plane z = 0 with the centre in that plane: rays in the plane
    (det 0), through the shared diagonal and the corners; rays pointing away hit nothing."""
    vertices = np.array([[1.0, -1.0, 0.0], [3.0, -1.0, 0.0], [3.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    cells = np.array([[0, 1, 2], [0, 2, 3]])
    points = np.array([[2.0, 0.0, 0.0], [3.0, 1.0, 0.0], [-2.0, 0.0, 0.0], [2.0, 0.0, 1.0]])
    gaps = _gaps_both(points, np.zeros(3), vertices, cells)
    np.testing.assert_array_equal(gaps, np.linalg.norm(points, axis=1))  # no ray crosses the square's plane
    lifted = vertices + [0.0, 0.0, 1.0]  # the square at z = 1: rays through its corners and diagonal
    points = np.concatenate([lifted * 2, [[2.0, 0.0, 2.0], [-2.0, 0.0, -2.0]]])
    _gaps_both(points, np.zeros(3), lifted, cells)
    _gaps_both(points * 1e-7, np.zeros(3), lifted * 1e-7, cells)  # det of order 1e-14


def test_rays_against_segments_in_the_plane(block_size):
    """2-D: segments of a polygon (z = 0), rays through their end points and parallel to one."""
    angles = np.linspace(0, 2 * np.pi, 40, endpoint=False)
    vertices = np.stack([10 * np.cos(angles), 6 * np.sin(angles), np.zeros(40)], axis=1)
    cells = np.stack([np.arange(40), (np.arange(40) + 1) % 40], axis=1)
    points = np.concatenate([vertices, vertices * 1.3, [[0.0, 6.0, 0.0], [10.0, 0.0, 0.0]]])
    _gaps_both(points, np.zeros(3), vertices, cells)
    _gaps_both(points, vertices[0].copy(), vertices, cells)  # rays along the segments at vertex 0


def test_a_vertex_that_is_not_a_number():
    vertices = np.array([[1.0, 0.0, 0.0], [np.nan, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 1.0, 1.0]])
    _gaps_both(np.ones((3, 3)), np.zeros(3), vertices, np.array([[0, 1, 2], [0, 2, 3]]))


def test_no_cells_no_rays_and_a_wide_grid():
    vertices = np.eye(3)
    _gaps_both(np.ones((4, 3)), np.zeros(3), vertices, np.zeros((0, 3), dtype=np.int64))
    _gaps_both(np.zeros((0, 3)), np.zeros(3), vertices, np.array([[0, 1, 2]]))
    cells = _both("ray_cells", vertices, np.array([[0, 1, 2]]), np.zeros(3))
    for finest in (1, 2, _bundled_roughness.MAX_DIRECTION_BUCKETS):
        grid = _both("direction_grid", cells[0], cells[1], finest)
        _both("radial_gaps", np.eye(3), np.ones(3), *cells, 1e-9, finest, *grid)


def test_direction_grid_of_random_caps_and_nan():
    rng = np.random.default_rng(7)
    directions = rng.normal(size=(500, 3))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    reach = np.concatenate([rng.uniform(0, 0.05, 400), rng.uniform(0, 2.0, 98), [np.nan, 2.0]])
    for finest in (1, 4, 32, 128):
        _both("direction_grid", directions, reach, finest)


@pytest.mark.parametrize("module", [_kernels, _bundled_roughness], ids=["compiled", "bundled"])
def test_both_refuse_the_same_inputs(module):
    with pytest.raises(ValueError, match="out of range"):
        module.ray_cells(np.eye(3), np.array([[0, 1, 3]]), np.zeros(3))
    cells = module.ray_cells(np.eye(3), np.array([[0, 1, 2]]), np.zeros(3))
    with pytest.raises(ValueError, match="power of 2"):
        module.direction_grid(cells[0], cells[1], 3)
    grid = module.direction_grid(cells[0], cells[1], 2)
    with pytest.raises(ValueError, match="does not fit"):
        module.radial_gaps(np.ones((1, 3)) / np.sqrt(3), np.ones(1), *cells, 1e-9, 3, *grid)
    base, first, members = grid
    with pytest.raises(ValueError, match="member is out of range"):
        module.radial_gaps(np.ones((1, 3)) / np.sqrt(3), np.ones(1), *cells, 1e-9, 2, base, first, members + 1)


# --- windows --------------------------------------------------------------------------------------


def _windows_both(centres, points, zeta, weights, radius):
    grid = mesh.point_grid(points, weights)
    return _both("window_deviations", centres, zeta, weights, radius, *grid)[0]


@pytest.mark.parametrize("radius", [0.0, 1.0, 2.0, 3.0, 1e20, np.inf])
def test_windows_on_a_lattice_with_ties_at_the_radius(radius, block_size):
    """Points on an integer lattice: many squared distances equal the squared radius exactly."""
    rng = np.random.default_rng(11)
    points = np.argwhere(np.ones((6, 5, 4))).astype(float)
    zeta = rng.uniform(5, 10, len(points))
    weights = rng.uniform(0, 1, len(points))
    weights[::7] = 0.0  # some windows of a single weightless vertex: NaN
    centres = np.concatenate([points, points[:20] + 0.5, [[100.0, 100.0, 100.0]],  # no vertex near
                              [[np.nan, 0.0, 0.0], [np.inf, 1.0, 1.0]]])  # an infinite radius holds all beside inf
    _windows_both(centres, points, zeta, weights, radius)


def test_windows_on_a_surface_and_none():
    surface = mesh.smooth_surface(np.pad(np.ones((6, 5, 7), bool), 2), (1.0, 0.8, 1.2))
    zeta = np.linalg.norm(surface.points - surface.points.mean(axis=0), axis=1)
    _windows_both(surface.points, surface.points, zeta, surface.sizes, 2.5)
    _windows_both(np.zeros((0, 3)), surface.points, zeta, surface.sizes, 2.5)
    _windows_both(np.ones((2, 3)), np.zeros((0, 3)), np.zeros(0), np.zeros(0), 2.5)


@pytest.mark.parametrize("module", [_kernels, _bundled_roughness], ids=["compiled", "bundled"])
def test_windows_refuse_the_same_inputs(module):
    points = np.eye(3)
    grid = mesh.point_grid(points, np.ones(3))
    with pytest.raises(ValueError, match="one zeta and one weight"):
        module.window_deviations(points, np.ones(2), np.ones(2), 1.0, *grid)
    with pytest.raises(ValueError, match="radius"):
        module.window_deviations(points, np.ones(3), np.ones(3), np.nan, *grid)
    bucket_mm, low, shape, first, order, sorted_xyz = grid
    with pytest.raises(ValueError, match="out of range"):
        module.window_deviations(points, np.ones(3), np.ones(3), 1.0, bucket_mm, low, shape, first, order + 1, sorted_xyz)


# --- the metrics, accelerator off and on -----------------------------------------------------------


def _off_and_on(reference, test, spacing, monkeypatch):
    """The roughness group of one pair (default convention, mm) with the accelerator off, then on:
    every value and the per-vertex roughness of both 3-D surfaces agree to 1e-9 relative."""
    results = []
    for setting in ("off", "auto"):
        monkeypatch.setenv(accelerator.ENVIRONMENT_VARIABLE, setting)
        pair = StructurePair("s", np.asarray(reference, bool), np.asarray(test, bool), spacing)
        values = [v.value for v in roughness.compute(pair, Parameters())]
        views = [pair.extras.get(key) for key in ("reference_surface", "test_surface")]
        results.append((values, [vtk_to_numpy(v.GetPointData().GetArray(roughness.ROUGHNESS_ARRAY)) for v in views if v]))
    (off, off_vertices), (on, on_vertices) = results
    assert np.all(np.isfinite(on))
    np.testing.assert_allclose(off, on, rtol=1e-9, atol=0)
    assert len(off_vertices) == len(on_vertices)
    for ours, theirs in zip(off_vertices, on_vertices):
        np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=0)


def _ball(shape, spacing, centre_mm, radius_mm):
    grid = np.ogrid[tuple(slice(0, n) for n in shape)]
    return sum((x * s - c) ** 2 for x, s, c in zip(grid, spacing, centre_mm)) <= radius_mm**2


@pytest.mark.parametrize("spacing", [(1.0, 1.0, 1.0), (2.5, 0.8, 0.7)])
def test_metrics_off_and_on_on_shifted_spheres(spacing, monkeypatch):
    shape = tuple(int(48 / s) for s in spacing)
    reference = _ball(shape, spacing, (24.0, 24.0, 24.0), 14.0)
    test = _ball(shape, spacing, (25.5, 23.0, 24.5), 12.0) | _ball(shape, spacing, (24.0, 36.0, 24.0), 4.0)
    _off_and_on(reference, test, spacing, monkeypatch)


def test_metrics_off_and_on_in_2d(monkeypatch):
    reference = _ball((60, 70), (0.7, 0.9), (20.0, 30.0), 15.0)
    test = _ball((60, 70), (0.7, 0.9), (22.0, 31.0), 12.0)
    test[5:40, 30:33] = True
    _off_and_on(reference, test, (0.7, 0.9), monkeypatch)


def test_metrics_off_and_on_on_the_roughness_papers_objects(data_dir, monkeypatch):
    import SimpleITK as sitk
    from PIL import Image

    folder = data_dir / "roughness_paper"
    sphere, one_spike, spikes = (sitk.GetArrayFromImage(sitk.ReadImage(str(folder / f"{name}.nii.gz"))) > 0
                                 for name in ("a1", "a2", "a3"))
    _off_and_on(sphere, one_spike, (1.0, 1.0, 1.0), monkeypatch)
    _off_and_on(sphere, spikes, (1.0, 1.0, 1.0), monkeypatch)
    circle, spiky = (np.asarray(Image.open(folder / f"{name}.jpg"))[..., 0] <= 128 for name in ("G1", "P1"))
    _off_and_on(circle, spiky, (1.0, 1.0), monkeypatch)


def test_compare_off_and_on_on_a_multirater_nodule(data_dir, monkeypatch):
    """Through the public entry point, on a spiculated nodule of two radiologists."""
    monkeypatch.setattr(registry, "_GROUP_MODULES", ("segmetrics.metrics.roughness",))
    folder = data_dir / "lidc_idri_pylidc_multirater"
    reference = sorted(folder.glob("*_rater1.nii.gz"))[-1]
    test = str(reference).replace("rater1", "rater3")
    values = []
    for setting in ("off", "auto"):
        monkeypatch.setenv(accelerator.ENVIRONMENT_VARIABLE, setting)
        values.append([v.value for s in compare(reference, test, metrics="roughness").structures for v in s.values])
    assert len(values[1]) == 4 and np.all(np.isfinite(values[1]))
    np.testing.assert_allclose(values[0], values[1], rtol=1e-9, atol=0)
