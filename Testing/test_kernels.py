"""The compiled kernels on degenerate input, with numba's bounds checking on (see conftest.py).

Every kernel of :mod:`segmetrics._kernels` against an independent truth (scipy's KD-tree, brute
force in numpy, ``scipy.ndimage.gaussian_filter``) on the inputs that break index arithmetic:
single points, lattices, far-apart specks, collinear and coplanar sets, queries beyond the grid
on every side and far away, empty sets, zero-length segments and zero-area triangles, volumes of
one voxel. The reported crashes run end to end in a child process, so that a segmentation fault
fails its test with the exit code instead of ending the test run.
"""
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import pytest

numba = pytest.importorskip("numba", reason="the compiled kernels need numba")
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import ndimage
from scipy.spatial import cKDTree

from segmetrics.spatial import _kernels, geometry, mesh
from segmetrics.registry import Parameters

PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
#: For the tests whose truth is exact rational arithmetic (slow).
EXACT = settings(PROPERTY, max_examples=25)


# --- bounds checking is really on ----------------------------------------------------------------


def test_the_tests_compile_with_bounds_checking_into_their_own_cache():
    assert numba.config.BOUNDSCHECK == 1
    assert os.environ["NUMBA_CACHE_DIR"] == numba.config.CACHE_DIR and "boundscheck" in numba.config.CACHE_DIR


def test_an_index_out_of_range_raises_in_a_fresh_and_in_a_cached_kernel():
    """A new njit function and a package kernel compiled with ``cache=True`` (possibly loaded from
    the disk cache) both raise IndexError instead of reading past the array."""

    @numba.njit
    def read(values, index):
        return values[index]

    with pytest.raises(IndexError):
        read(np.zeros(3), 3)
    with pytest.raises(IndexError):
        _kernels._vertex(np.zeros((2, 3)), 2)


def test_child_processes_check_bounds_too():
    code = "import numpy as np; from segmetrics.spatial import _kernels; _kernels._vertex(np.zeros((2, 3)), 5)"
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert child.returncode == 1 and "IndexError" in child.stderr, child.stderr[-2000:]


# --- point sets ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PointSet:
    """Points (rows, mm) of one degenerate kind at a scale (0.01 to 100 mm), anywhere; built from
    a seed so that a failing example prints in full."""

    kind: str
    count: int
    scale: float
    seed: int

    @property
    def points(self) -> np.ndarray:
        rng, count = np.random.default_rng(self.seed), self.count
        if self.kind == "single":
            points = rng.normal(size=(1, 3))
        elif self.kind == "repeated":
            points = np.repeat(rng.normal(size=(1, 3)), count, axis=0)
        elif self.kind == "lattice":
            sides = rng.integers(1, 6, size=3)
            points = np.stack(np.meshgrid(*map(np.arange, sides), indexing="ij"), axis=-1).reshape(-1, 3) * rng.uniform(0.5, 4)
        elif self.kind == "specks":  # tight clusters thousands of sizes apart
            centres = rng.uniform(-1000, 1000, size=(rng.integers(2, 5), 3))
            points = centres[rng.integers(len(centres), size=count)] + rng.normal(scale=0.2, size=(count, 3))
        elif self.kind == "line":
            points = rng.normal(size=3) + rng.uniform(-20, 20, size=(count, 1)) * rng.normal(size=3)
        elif self.kind == "plane":  # any plane, or one along the grid's axes
            axes = rng.normal(size=(2, 3)) if rng.random() < 0.5 else np.eye(3)[rng.permutation(3)[:2]]
            points = rng.uniform(-20, 20, size=(count, 2)) @ axes
        else:
            points = rng.normal(size=(count, 3)) * rng.uniform(0.1, 10, size=3)
        return points * self.scale + rng.uniform(-500, 500, size=3)


def point_sets(min_points=1):
    return st.builds(
        PointSet,
        kind=st.sampled_from(["single", "repeated", "lattice", "specks", "line", "plane", "cloud"]),
        count=st.integers(max(min_points, 1), 60),
        scale=st.sampled_from([0.01, 1.0, 100.0]),
        seed=st.integers(0, 2**32 - 1),
    )


def queries_around(points, rng):
    """Queries near the points, on them, in and beyond the points' box on every side, and far away."""
    low, high = points.min(axis=0), points.max(axis=0)
    size = max(float(np.max(high - low)), 1.0)
    directions = rng.normal(size=(20, 3))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    beyond = np.repeat((low + high)[None] / 2, 6, axis=0) + np.concatenate([np.eye(3), -np.eye(3)]) * 3 * size
    return np.concatenate([
        points[rng.integers(len(points), size=20)] + rng.normal(scale=0.05 * size, size=(20, 3)),
        points[:5],
        rng.uniform(low - 2 * size, high + 2 * size, size=(40, 3)),
        beyond,
        (low + high) / 2 + directions * size * 10.0 ** rng.uniform(1, 5, size=(20, 1)),
    ])


def sizes_for(points, rng):
    """Surface sizes (mm²) per point: typical, tiny, or zero."""
    return np.full(len(points), rng.choice([0.0, 1e-6, 0.5, 4.0]))


@PROPERTY
@given(point_set=point_sets(), seed=st.integers(0, 2**32 - 1))
def test_nearest_vertices_against_a_kd_tree(point_set, seed):
    """The bucket search finds the true nearest vertex (distance as the KD-tree's) or gives up
    (-1) only for points more than its rings away; with the KD-tree fallback every query gets it."""
    rng, points = np.random.default_rng(seed), point_set.points
    queries = queries_around(points, rng)
    truth, _ = cKDTree(points).query(queries)
    tolerance = 1e-9 * (1 + np.abs(queries).max())
    grid = mesh.point_grid(points, sizes_for(points, rng))
    nearest, squared = _kernels.nearest_vertices(queries, *grid)
    found = nearest >= 0
    np.testing.assert_allclose(np.sqrt(squared[found]), truth[found], rtol=1e-12, atol=tolerance)
    np.testing.assert_allclose(np.linalg.norm(points[nearest[found]] - queries[found], axis=1), truth[found], rtol=1e-12, atol=tolerance)
    assert np.all(truth[~found] >= _kernels.MAX_RINGS * grid[0] - tolerance)
    distances, indices = mesh.nearest_points(queries, points, grid)
    np.testing.assert_allclose(distances, truth, rtol=1e-12, atol=tolerance)
    np.testing.assert_allclose(np.linalg.norm(points[indices] - queries, axis=1), truth, rtol=1e-12, atol=tolerance)


@PROPERTY
@given(point_set=point_sets(), seed=st.integers(0, 2**32 - 1), buckets_per_side=st.sampled_from([1, 2, 7, 40]))
def test_nearest_vertices_on_grids_of_any_size(point_set, seed, buckets_per_side):
    """Grids of one bucket up to 40 per axis, with queries beyond them: every vertex found is the
    nearest, -1 only beyond the rings, and with one bucket per axis every query is answered."""
    rng, points = np.random.default_rng(seed), point_set.points
    queries = queries_around(points, rng)
    bucket_mm = max(float(np.ptp(points, axis=0).max()), 1e-3) / buckets_per_side
    nearest, squared = _kernels.nearest_vertices(queries, bucket_mm, *_kernels.vertex_grid(points, bucket_mm))
    truth, _ = cKDTree(points).query(queries)
    found = nearest >= 0
    tolerance = 1e-9 * (1 + np.abs(queries).max())
    np.testing.assert_allclose(np.sqrt(squared[found]), truth[found], rtol=1e-12, atol=tolerance)
    assert np.all(truth[~found] >= _kernels.MAX_RINGS * bucket_mm - tolerance)
    if buckets_per_side == 1:  # one bucket per axis: the first ring covers the grid
        assert found.all()


def test_a_long_line_of_many_points_stays_within_the_buckets_per_axis():
    """300,000 points on a line with tiny sizes would ask for 2.4 million buckets along it."""
    points = np.zeros((300_000, 3))
    points[:, 0] = np.arange(len(points)) * 1.0
    grid = mesh.point_grid(points, np.full(len(points), 1e-4))
    assert grid[2].max() < _kernels.MAX_BUCKETS_PER_AXIS
    queries = np.random.default_rng(8).uniform(-1000, 301_000, size=(200, 3))
    np.testing.assert_allclose(mesh.nearest_points(queries, points, grid)[0], cKDTree(points).query(queries)[0], rtol=1e-12)


@pytest.mark.parametrize("columns", [2, 3])
def test_empty_point_sets(columns):
    """No points: distances inf and indices -1; no queries: empty results."""
    none = np.zeros((0, columns))
    grid = mesh.point_grid(none, np.zeros(0))
    queries = np.ones((4, columns))
    distances, indices = mesh.nearest_points(queries, none, grid)
    assert np.all(distances == np.inf) and np.all(indices == -1)
    nearest, squared = _kernels.nearest_vertices(mesh._three_components(queries), *grid)
    assert np.all(nearest == -1) and np.all(squared == np.inf)
    points = np.arange(3 * columns, dtype=float).reshape(3, columns)
    distances, indices = mesh.nearest_points(none, points, mesh.point_grid(points, np.ones(3)))
    assert distances.shape == indices.shape == (0,)
    surface = mesh.Surface(none, np.zeros(0), np.zeros((0, columns), dtype=np.int64))
    assert np.all(mesh.distances_to_surface(queries, surface) == np.inf)


def test_points_that_are_not_finite_are_refused():
    points = np.zeros((3, 3))
    with pytest.raises(ValueError, match="finite"):
        mesh.nearest_points(np.array([[0.0, np.nan, 0.0]]), points, mesh.point_grid(points, np.ones(3)))
    with pytest.raises(ValueError, match="finite"):
        mesh.point_grid(np.array([[0.0, np.inf, 0.0]]), np.ones(1))
    with pytest.raises(ValueError, match="finite"):
        _kernels.vertex_grid(np.array([[0.0, np.nan, 0.0], [1.0, 1.0, 1.0]]), 1.0)
    with pytest.raises(ValueError, match="positive"):
        _kernels.vertex_grid(points, 0.0)
    nearest, squared = _kernels.nearest_vertices(np.array([[np.nan, 0.0, 0.0], [0.0, 0.0, 0.0]]), 1.0, *_kernels.vertex_grid(points, 1.0))
    assert nearest.tolist() == [-1, 0] and squared.tolist() == [np.inf, 0.0]


# --- the walk over the cells ---------------------------------------------------------------------


def point_segment(p, a, b):
    """Distance (mm) from ``p`` to segment ``ab`` (the point ``a`` when ``a == b``), in exact
    rational arithmetic up to the final square root."""
    return float(_squared_to_segment(*_exact(p, a, b))) ** 0.5


def point_triangle(p, a, b, c):
    """Distance (mm) from ``p`` to the triangle ``abc`` (any, also degenerate), in exact rational
    arithmetic up to the final square root: the projection on the plane when it falls inside
    (barycentric coordinates from the normal equations), else the nearest edge."""
    p, a, b, c = _exact(p, a, b, c)
    candidates = [_squared_to_segment(p, a, b), _squared_to_segment(p, a, c), _squared_to_segment(p, b, c)]
    ab, ac, ap = _minus(b, a), _minus(c, a), _minus(p, a)
    aa, ab_ac, cc = _dot(ab, ab), _dot(ab, ac), _dot(ac, ac)
    determinant = aa * cc - ab_ac * ab_ac
    if determinant > 0:
        s = (_dot(ab, ap) * cc - _dot(ac, ap) * ab_ac) / determinant
        t = (aa * _dot(ac, ap) - ab_ac * _dot(ab, ap)) / determinant
        if s >= 0 and t >= 0 and s + t <= 1:
            rest = [x - s * y - t * z for x, y, z in zip(ap, ab, ac)]
            candidates.append(_dot(rest, rest))
    return float(min(candidates)) ** 0.5


def _exact(*points):
    return [[Fraction(float(x)) for x in point] for point in points]


def _minus(u, v):
    return [x - y for x, y in zip(u, v)]


def _dot(u, v):
    return sum(x * y for x, y in zip(u, v))


def _squared_to_segment(p, a, b):
    ab, ap = _minus(b, a), _minus(p, a)
    length = _dot(ab, ab)
    t = min(max(_dot(ap, ab) / length, 0), 1) if length else 0
    rest = [x - t * y for x, y in zip(ap, ab)]
    return _dot(rest, rest)


def point_cell(p, corners):
    return point_triangle(p, *corners) if len(corners) == 3 else point_segment(p, *corners)


def walk(queries, nearest, points, cells):
    """:func:`segmetrics.spatial._kernels.closest_points` with the cells per vertex from its kernel."""
    return _kernels.closest_points(
        queries, nearest, points, cells, *_kernels.cells_by_vertex(cells, len(points)), _kernels.FEATURE_CORNERS[cells.shape[1]]
    )


@dataclass(frozen=True)
class Cell:
    """Corner points (rows, mm) of one segment or triangle: random, with corners at one place, on
    a line (also nearly); built from a seed so that a failing example prints in full."""

    corners: int
    kind: str
    scale: float
    seed: int

    @property
    def points(self) -> np.ndarray:
        rng = np.random.default_rng(self.seed)
        cell = rng.normal(size=(self.corners, 3)) * self.scale
        if self.kind == "one place":
            cell[:] = cell[0]
        elif self.kind == "two at one place":
            cell[rng.integers(self.corners)] = cell[(rng.integers(self.corners - 1) + 1) % self.corners]
        elif self.kind in ("line", "nearly a line"):
            cell = cell[0] + rng.uniform(-2, 2, size=(self.corners, 1)) * cell[1]
            if self.kind == "nearly a line":
                cell += rng.normal(scale=10.0 ** rng.uniform(-15, -3), size=cell.shape) * self.scale
        return cell


@EXACT
@given(
    cell=st.builds(
        Cell,
        corners=st.sampled_from([2, 3]),
        kind=st.sampled_from(["random", "one place", "two at one place", "line", "nearly a line"]),
        scale=st.sampled_from([0.01, 1.0, 50.0]),
        seed=st.integers(0, 2**32 - 1),
    ),
    seed=st.integers(0, 2**32 - 1),
)
def test_walk_on_one_cell_is_exact(cell, seed):
    """One triangle or segment, however degenerate: the distance and the closest point equal exact
    arithmetic, from any starting vertex, and no division by zero is raised."""
    rng, corners = np.random.default_rng(seed), cell.points
    size = 1 + np.abs(corners).max()
    queries = np.concatenate([
        corners.mean(axis=0) + rng.normal(size=(12, 3)) * np.ptp(corners, axis=0).max(initial=1.0),
        corners + rng.normal(scale=1e-3, size=corners.shape),
        corners.copy(),
    ])
    cells = np.arange(len(corners))[None]
    offsets, found_cells, features = walk(queries, rng.integers(len(corners), size=len(queries)), corners, cells)
    truth = [point_cell(p, corners) for p in queries]
    np.testing.assert_allclose(np.linalg.norm(offsets, axis=1), truth, rtol=1e-9, atol=1e-9 * size)
    on_cell = [point_cell(q, corners) for q in queries - offsets]  # the closest point lies on the cell
    np.testing.assert_allclose(on_cell, 0, atol=1e-9 * size)
    assert np.all(found_cells == 0) and np.all((features >= 0) & (features < len(_kernels.FEATURE_CORNERS[len(corners)])))


@EXACT
@given(point_set=point_sets(min_points=3), seed=st.integers(0, 2**32 - 1), corners=st.sampled_from([2, 3]))
def test_walk_on_random_meshes_never_underestimates(point_set, seed, corners):
    """Random cells (repeated corners, zero areas and all) on degenerate point sets: the walk from
    the nearest vertex returns the distance to a point of the cell it names (or to that vertex when
    no cell holds it), never less than the distance to the nearest cell or vertex (brute force) and
    never more than to the nearest vertex; on a fan (every cell around the starting vertex) it
    finds the nearest cell."""
    rng, points = np.random.default_rng(seed), point_set.points[:12]
    cells = rng.integers(len(points), size=(int(rng.integers(1, 16)), corners))
    if rng.random() < 0.5:  # a fan around vertex 0
        cells[:, 0] = 0
    queries = queries_around(points, rng)[::5]
    vertex_distance, nearest = cKDTree(points).query(queries)
    offsets, found_cells, _ = walk(queries, nearest, points, cells)
    got = np.linalg.norm(offsets, axis=1)
    to_cells = np.array([min(point_cell(p, points[c]) for c in cells) for p in queries])
    tolerance = 1e-9 * (1 + np.abs(queries).max())
    assert np.all(got >= np.minimum(to_cells, vertex_distance) - tolerance)
    assert np.all(got <= vertex_distance + tolerance)
    has_cell = found_cells >= 0
    named = [point_cell(p, points[cells[c]]) for p, c in zip(queries[has_cell], found_cells[has_cell])]
    np.testing.assert_allclose(got[has_cell], named, rtol=1e-9, atol=tolerance)
    lonely = ~np.isin(nearest, cells)  # a vertex without cells: the walk stays on it
    assert np.all(found_cells[lonely] == -1)
    np.testing.assert_allclose(got[lonely], vertex_distance[lonely], rtol=1e-12, atol=tolerance)
    fan = np.all(cells[:, 0] == 0)
    if fan:
        start_at_fan = np.zeros(len(queries), dtype=np.int64)
        fan_offsets, _, _ = walk(queries, start_at_fan, points, cells)
        np.testing.assert_allclose(np.linalg.norm(fan_offsets, axis=1), to_cells, rtol=1e-9, atol=tolerance)


@PROPERTY
@given(point_set=point_sets(min_points=3), seed=st.integers(0, 2**32 - 1), corners=st.sampled_from([2, 3]))
def test_search_and_walk_in_one_pass_against_the_kd_tree_and_the_walk(point_set, seed, corners):
    """closest_points_near: the KD-tree's nearest vertex (or -1 beyond the grid search's reach),
    then the walk of closest_points from it; a query on a vertex is not walked (offset 0)."""
    rng, points = np.random.default_rng(seed), point_set.points
    cells = rng.integers(len(points), size=(int(rng.integers(1, 30)), corners))
    queries = queries_around(points, rng)
    bucket_mm, *grid = mesh.point_grid(points, sizes_for(points, rng))
    star = (points, cells, *_kernels.cells_by_vertex(cells, len(points)), _kernels.FEATURE_CORNERS[corners])
    offsets, found_cells, features, nearest = _kernels.closest_points_near(queries, bucket_mm, *grid, *star)
    vertex_distance = cKDTree(points).query(queries)[0]
    searched = nearest >= 0
    np.testing.assert_allclose(np.linalg.norm(queries[searched] - points[nearest[searched]], axis=1), vertex_distance[searched],
                               rtol=1e-12, atol=1e-12 * (1 + np.abs(queries).max()))
    assert np.all(vertex_distance[~searched] > 0)
    on_vertex = searched & np.all(queries == points[np.maximum(nearest, 0)], axis=1)
    assert np.all(offsets[on_vertex] == 0) and np.all(found_cells[on_vertex] == -1)
    walked = searched & ~on_vertex
    expected = walk(queries[walked], nearest[walked], points, cells)
    for got, want in zip((offsets[walked], found_cells[walked], features[walked]), expected):
        assert np.array_equal(got, want)


def test_nearest_points_refuse_a_grid_of_other_points():
    """A grid of 5 points searched for 3 returned indices 3 and 4, past the points."""
    points = np.random.default_rng(2).random((5, 3))
    with pytest.raises(ValueError, match="grid holds 5 points"):
        mesh.nearest_points(points, points[:3], mesh.point_grid(points, np.ones(5)))


def test_search_and_walk_refuse_a_grid_of_other_points():
    points, cells = np.eye(3), np.array([[0, 1, 2]])
    star = (*_kernels.cells_by_vertex(cells, 3), _kernels.FEATURE_CORNERS[3])
    grid = mesh.point_grid(points, np.ones(3))
    with pytest.raises(ValueError, match="not those of these points"):
        _kernels.closest_points_near(np.zeros((1, 3)), *grid, points[:2], cells, *star)
    order = grid[4].copy()
    order[0] = 3  # a vertex index beyond the points
    with pytest.raises(ValueError, match="vertex order"):
        _kernels.closest_points_near(points, *grid[:4], order, grid[5], points, cells, *star)


def bad_stars():
    """Inputs of the walk of a tetrahedron's 4 triangles, each with one set of indices out of range."""
    points, cells = np.array([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]]), np.array([[0, 1, 2], [0, 1, 3], [0, 2, 3], [1, 2, 3]])
    by_vertex, first, count = _kernels.cells_by_vertex(cells, 4)
    corners = _kernels.FEATURE_CORNERS[3]
    good = dict(points=points, cells=cells, by_vertex=by_vertex, first=first, count=count, feature_corners=corners)
    beyond_column = corners.copy()
    beyond_column[3, 0] = 3  # edge ab read as corner columns 3 and 1
    return [
        {**good, "cells": cells + 1},  # corners beyond the points (cells per vertex still fit)
        {**good, "cells": cells - 1},
        {**good, "by_vertex": by_vertex + len(cells)},
        {**good, "by_vertex": -by_vertex - 1},
        {**good, "first": first + 100},
        {**good, "first": first - 100},
        {**good, "count": count + 100},
        {**good, "feature_corners": beyond_column},
    ]


@pytest.mark.parametrize("star", bad_stars(), ids=["corners+1", "corners-1", "cells beyond", "cells negative", "first+100",
                                                    "first-100", "count+100", "feature corner column"])
def test_walk_refuses_indices_out_of_range_in_any_input(star):
    """Every index the walk follows is checked on entry (ValueError), not read out of bounds."""
    queries = np.array([[0.3, 0.3, 0.3], [2.0, 2.0, 2.0], [-1.0, 0.2, 0.1], [0.9, 0.05, 0.0]])
    inputs = (star["points"], star["cells"], star["by_vertex"], star["first"], star["count"], star["feature_corners"])
    with pytest.raises(ValueError, match="closest points"):
        _kernels.closest_points(queries, np.arange(4), *inputs)
    with pytest.raises(ValueError, match="closest points"):
        _kernels.closest_points_near(queries, *mesh.point_grid(star["points"], np.ones(4)), *inputs)


def test_nearest_vertex_search_refuses_grids_not_of_vertex_grid():
    """Grids whose buckets would lead the search out of bounds: ValueError."""
    points = np.random.default_rng(3).random((20, 3))
    bucket_mm, low, shape, first, order, sorted_xyz = mesh.point_grid(points, np.full(20, 0.01))
    assert len(first) > 3  # buckets enough to break their order
    unordered = first.copy()
    unordered[1:-1] = len(order) + 100  # runs beyond the vertices
    too_many = np.array([2**32, 2**32, 1])  # 2**64 buckets: 0 in 64-bit integers
    for grid in ((low[:2], shape, first), (low, shape[:2], first), (low, shape, unordered), (low, too_many, np.zeros(1, np.int64))):
        with pytest.raises(ValueError, match="not one of vertex_grid"):
            _kernels.nearest_vertices(points, bucket_mm, *grid, order[:0] if len(grid[2]) == 1 else order,
                                      sorted_xyz[:, :0] if len(grid[2]) == 1 else sorted_xyz)


def test_search_and_walk_refuse_a_grid_order_of_negative_vertices():
    points, cells = np.eye(3), np.array([[0, 1, 2]])
    bucket_mm, low, shape, first, order, sorted_xyz = mesh.point_grid(points, np.ones(3))
    with pytest.raises(ValueError, match="vertex order"):
        _kernels.closest_points_near(points + 0.1, bucket_mm, low, shape, first, order - 5, sorted_xyz, points, cells,
                                     *_kernels.cells_by_vertex(cells, 3), _kernels.FEATURE_CORNERS[3])


def test_walk_refuses_a_nearest_vertex_out_of_range():
    points, cells = np.eye(3), np.array([[0, 1, 2]])
    for nearest in (-1, 3):
        with pytest.raises(ValueError, match="out of range"):
            walk(np.zeros((1, 3)), np.array([nearest]), points, cells)


def test_distances_to_degenerate_surfaces_against_brute_force():
    """A surface of one triangle, of one point and of a flat strip of slivers: exact distances."""
    rng = np.random.default_rng(7)
    queries = rng.normal(scale=5.0, size=(200, 3))
    triangle = np.array([[0.0, 0, 0], [3, 0, 0], [0, 2, 1]])
    one = mesh.Surface(triangle, np.ones(3), np.array([[0, 1, 2]]))
    truth = [point_triangle(p, *triangle) for p in queries]
    np.testing.assert_allclose(mesh.distances_to_surface(queries, one), truth, rtol=1e-12, atol=1e-12)
    point = mesh.Surface(np.array([[1.0, 2, 3]]), np.zeros(1), np.array([[0, 0, 0]]))
    np.testing.assert_allclose(mesh.distances_to_surface(queries, point), np.linalg.norm(queries - [1, 2, 3], axis=1), rtol=1e-12)
    line = np.stack([np.linspace(0, 10, 8), np.zeros(8), np.zeros(8)], axis=1)  # collinear: every triangle has area 0
    slivers = np.stack([np.arange(6), np.arange(1, 7), np.arange(2, 8)], axis=1)
    strip = mesh.Surface(line, np.zeros(8), slivers)
    truth = [point_segment(p, line[0], line[-1]) for p in queries]
    np.testing.assert_allclose(mesh.distances_to_surface(queries, strip), truth, rtol=1e-12, atol=1e-12)


def test_distances_to_a_2d_contour_from_points_beyond_the_grid_search():
    """Points of a 2-D contour's frame farther than the bucket search reaches take the KD-tree of
    the contour's 2-D points: exact distances to a straight contour of 1 m."""
    count = 200
    line = np.stack([np.linspace(0, 1000, count), np.zeros(count)], axis=1)
    contour = mesh.Surface(line, np.full(count, 5.0), np.stack([np.arange(count - 1), np.arange(1, count)], axis=1))
    queries = np.array([[500.0, 3.0], [500.0, 2000.0], [-3000.0, 0.0], [1004.0, -3.0]])
    assert np.any(_kernels.closest_points_near(mesh._three_components(queries), *contour.vertex_grid, mesh._three_components(line),
                                               contour.cells, *contour.cells_by_vertex, _kernels.FEATURE_CORNERS[2])[3] < 0)
    np.testing.assert_allclose(mesh.distances_to_surface(queries, contour), [3.0, 2000.0, 3000.0, 5.0], rtol=1e-12)


# --- cells per vertex, areas, blur, clamp --------------------------------------------------------


@PROPERTY
@given(seed=st.integers(0, 2**32 - 1), corners=st.sampled_from([2, 3]), vertex_count=st.integers(1, 12), cell_count=st.integers(0, 20))
def test_cells_by_vertex_against_numpy(seed, corners, vertex_count, cell_count):
    cells = np.random.default_rng(seed).integers(vertex_count, size=(cell_count, corners))
    by_vertex, first, count = _kernels.cells_by_vertex(cells, vertex_count)
    for v in range(vertex_count):  # a cell is listed once per corner at v
        expected = np.flatnonzero(cells.ravel() == v) // corners
        assert by_vertex[first[v]:first[v] + count[v]].tolist() == expected.tolist()


@pytest.mark.parametrize("bad", [-1, 4])
def test_cells_and_triangles_out_of_range_are_refused(bad):
    cells = np.array([[0, 1, 2], [1, 2, bad]])
    with pytest.raises(ValueError, match="out of range"):
        _kernels.cells_by_vertex(cells, 4)
    with pytest.raises(ValueError, match="out of range"):
        _kernels.triangle_areas(np.zeros((4, 3)), cells)


@PROPERTY
@given(seed=st.integers(0, 2**32 - 1), corners=st.sampled_from([2, 3]), vertex_count=st.integers(1, 12), cell_count=st.integers(0, 20))
def test_corner_shares_against_numpy(seed, corners, vertex_count, cell_count):
    rng = np.random.default_rng(seed)
    cells = rng.integers(vertex_count, size=(cell_count, corners))
    sizes = rng.choice([0.0, 1e-9, 0.7, 3.0], size=cell_count) * rng.random(cell_count)
    expected = np.bincount(cells.ravel(), np.repeat(sizes / corners, corners), vertex_count)
    assert np.array_equal(_kernels.corner_shares(cells, sizes, vertex_count), expected)


def test_corner_shares_refuse_corners_out_of_range_and_missing_sizes():
    for bad in (-1, 4):
        with pytest.raises(ValueError, match="out of range"):
            _kernels.corner_shares(np.array([[0, 1, 2], [1, 2, bad]]), np.ones(2), 4)
    with pytest.raises(ValueError, match="one size per cell"):
        _kernels.corner_shares(np.array([[0, 1, 2]]), np.ones(2), 4)
    with pytest.raises(ValueError, match="one size per cell"):  # cells of no corners: nothing to share the sizes
        _kernels.corner_shares(np.zeros((2, 0), dtype=np.int64), np.ones(2), 4)


@PROPERTY
@given(point_set=point_sets(min_points=3), seed=st.integers(0, 2**32 - 1))
def test_triangle_areas_against_numpy(point_set, seed):
    points = point_set.points
    cells = np.random.default_rng(seed).integers(len(points), size=(20, 3))
    corners = points[cells]
    expected = 0.5 * np.linalg.norm(np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0]), axis=1)
    np.testing.assert_allclose(_kernels.triangle_areas(points, cells), expected, rtol=1e-9, atol=1e-9 * np.abs(points).max() ** 2)


@PROPERTY
@given(
    shape=st.lists(st.integers(1, 6), min_size=1, max_size=3),
    sigma=st.floats(0.2, 3.0),
    seed=st.integers(0, 2**32 - 1),
    dtype=st.sampled_from([np.float32, np.float64]),
)
def test_blur_of_tiny_shapes_matches_scipy(shape, sigma, seed, dtype):
    """Masks of one voxel, one row, one column, one slice: as ``scipy.ndimage.gaussian_filter``."""
    mask = np.random.default_rng(seed).random(shape) > 0.5
    expected = ndimage.gaussian_filter(mask, sigma, output=dtype, mode="constant", truncate=3.0)
    atol = 1e-6 if dtype == np.float32 else 1e-14
    np.testing.assert_allclose(_kernels.gaussian_blur(mask, sigma, dtype), expected, rtol=0, atol=atol)


@PROPERTY
@given(size=st.integers(0, 30), seed=st.integers(0, 2**32 - 1))
def test_clamp_field_against_numpy(size, seed):
    rng = np.random.default_rng(seed)
    field, inside = rng.random(size), rng.random(size) > 0.5
    clamped = field.copy()
    lost, values = _kernels.clamp_field(clamped, inside, 0.05)
    expected_lost = np.flatnonzero(inside & (field < 0.5))
    assert lost.tolist() == expected_lost.tolist() and values.tolist() == field[expected_lost].tolist()
    np.testing.assert_array_equal(clamped, np.where(inside, np.maximum(field, 0.55), np.minimum(field, 0.45)))
    with pytest.raises(ValueError, match="size"):
        _kernels.clamp_field(clamped, np.zeros(size + 1, bool), 0.05)


# --- the reported crashes, end to end in a child process -------------------------------------------

COMPARE_IN_A_CHILD = """
import json, sys
import numpy as np
import segmetrics
from segmetrics.registry import Parameters
pairs = np.load(sys.argv[1])
spacing = json.loads(sys.argv[2])
values = []
for index in range(len(pairs.files) // 2):
    reference, test = pairs[f"reference{index}"], pairs[f"test{index}"]
    values.append({})
    for mode in ("exact", "deepmind"):
        result = segmetrics.compare(reference, test, spacing=spacing, metrics=["hd_mm", "nsd", "msi_3d"], params=Parameters(surface_mode=mode))
        values[-1][mode] = {metric: result.structures[0].value(metric) for metric in ("hd_mm", "nsd", "msi_3d")}
print(json.dumps(values))
"""


def compare_in_a_child(pairs, spacing, tmp_path):
    """``segmetrics.compare`` of each ``(reference, test)`` in both surface modes, in a child
    process: a list of ``{mode: {metric: value}}``; a crash of the child fails the test with its
    exit code."""
    arrays = {f"{name}{index}": mask for index, pair in enumerate(pairs) for name, mask in zip(("reference", "test"), pair)}
    np.savez(tmp_path / "pairs.npz", **arrays)
    command = [sys.executable, "-c", COMPARE_IN_A_CHILD, str(tmp_path / "pairs.npz"), json.dumps(list(spacing))]
    child = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert child.returncode == 0, f"exit code {child.returncode}:\n{child.stderr[-3000:]}"
    return json.loads(child.stdout.strip().splitlines()[-1])


def deepmind_truth(reference, test, spacing, tolerance_mm=2.0):
    """HD and NSD from DeepMind's ``surface_distance`` (the reference for ``deepmind`` mode)."""
    surface_distance = pytest.importorskip("surface_distance")
    distances = surface_distance.compute_surface_distances(reference.astype(bool), test.astype(bool), tuple(spacing))
    return {
        "hd_mm": surface_distance.compute_robust_hausdorff(distances, 100),
        "nsd": surface_distance.compute_surface_dice_at_tolerance(distances, tolerance_mm),
    }


def assert_both_modes(values, reference, test, spacing):
    """deepmind mode equals the library to 1e-6; exact mode's HD is within a voxel diagonal of it
    (the sub-voxel surface lies within half a voxel of the corner surfels' boundary); MSI in [0, 1]."""
    truth = deepmind_truth(reference, test, spacing)
    for metric in ("hd_mm", "nsd"):
        assert values["deepmind"][metric] == pytest.approx(truth[metric], abs=1e-6), metric
    assert abs(values["exact"]["hd_mm"] - truth["hd_mm"]) <= np.linalg.norm(spacing)
    for mode in values:
        assert 0 <= values[mode]["msi_3d"] <= 1 and 0 <= values[mode]["nsd"] <= 1


def single_voxel(shape=(20, 20, 20), at=(10, 10, 10)):
    mask = np.zeros(shape, np.uint8)
    mask[at] = 1
    return mask


def test_single_voxel_against_a_lattice(tmp_path):
    """The reported segfault (exit 139): HD of a voxel at (10, 10, 10) against specks every 4
    voxels is the distance to the farthest speck, sqrt(300) mm, to within the sub-voxel surfaces."""
    reference, test = single_voxel(), np.zeros((20, 20, 20), np.uint8)
    test[::4, ::4, ::4] = 1
    (values,) = compare_in_a_child([(reference, test)], (1.0, 1.0, 1.0), tmp_path)
    assert values["exact"]["hd_mm"] == pytest.approx(np.sqrt(300), abs=0.25)
    assert_both_modes(values, reference, test, (1.0, 1.0, 1.0))


def test_single_voxel_against_a_solid_block(tmp_path):
    reference, test = single_voxel(), np.zeros((20, 20, 20), np.uint8)
    test[2:18, 3:19, 1:15] = 1
    spacing = (1.5, 1.0, 0.8)
    (values,) = compare_in_a_child([(reference, test)], spacing, tmp_path)
    assert_both_modes(values, reference, test, spacing)


def test_balls_with_stray_voxels_against_a_ball(tmp_path):
    """About 20 stray voxels around a ball (crashed 1 run in 8 before), eight random draws."""
    grid = np.indices((40, 40, 40)) - 19.5
    test = (np.sum(grid**2, axis=0) <= 12**2).astype(np.uint8)
    ball = (np.sum((grid - [[[[1.0]]], [[[0.5]]], [[[0.0]]]]) ** 2, axis=0) <= 11.5**2).astype(np.uint8)
    references = []
    for seed in range(8):
        references.append(ball.copy())
        references[-1][tuple(np.random.default_rng(seed).integers(0, 40, size=(3, 20)))] = 1
    spacing = (1.2, 0.9, 0.9)
    for reference, values in zip(references, compare_in_a_child([(r, test) for r in references], spacing, tmp_path)):
        assert_both_modes(values, reference, test, spacing)


def test_totalsegmentator_single_voxel_label_against_the_liver(data_dir, tmp_path):
    """TotalSegmentator's label 13 (1 voxel) against the liver (label 5) of the same file."""
    sitk = pytest.importorskip("SimpleITK")
    image = sitk.ReadImage(str(data_dir / "totalsegmentator" / "example_seg.nii.gz"))
    labels = sitk.GetArrayFromImage(image)
    reference, test = (labels == 13).astype(np.uint8), (labels == 5).astype(np.uint8)
    assert reference.sum() == 1 and test.sum() > 1000
    spacing = image.GetSpacing()[::-1]
    (values,) = compare_in_a_child([(reference, test)], spacing, tmp_path)
    assert_both_modes(values, reference, test, spacing)



@pytest.mark.parametrize("bad", [-1, 3])
def test_ray_kernels_refuse_indices_out_of_range(bad):
    with pytest.raises(ValueError, match="out of range"):
        _kernels.ray_cells(np.eye(3), np.array([[0, 1, bad]]), np.zeros(3))
    cells = _kernels.ray_cells(np.eye(3), np.array([[0, 1, 2]]), np.zeros(3))
    base, first, members = _kernels.direction_grid(cells[0], cells[1], 2)
    members[0] = bad
    with pytest.raises(ValueError, match="out of range"):
        _kernels.radial_gaps(np.eye(3), np.ones(3), *cells, 1e-9, 2, base, first, members)
    with pytest.raises(ValueError, match="does not fit"):  # a grid of 2 buckets per axis read as one of 4
        _kernels.radial_gaps(np.eye(3), np.ones(3), *cells, 1e-9, 4, *_kernels.direction_grid(cells[0], cells[1], 2))


@PROPERTY
@given(point_set=point_sets(min_points=1), seed=st.integers(0, 2**32 - 1), radius=st.sampled_from([0.0, 0.5, 3.0, 1e9]))
def test_window_deviations_against_all_pairs(point_set, seed, radius):
    """Weighted mean |zeta - window mean| over the points within radius (squared distance at
    most radius**2, the point itself included) on any grid, against all pairs in NumPy."""
    from segmetrics.spatial.mesh import point_grid

    points = point_set.points
    rng = np.random.default_rng(seed)
    zeta, weights = rng.uniform(0, 10, len(points)), rng.uniform(0.1, 2.0, len(points))
    squared = np.sum((points[:, None] - points[None]) ** 2, axis=2)
    inside = squared <= radius ** 2
    mean = (inside * weights * zeta).sum(axis=1) / (inside * weights).sum(axis=1)
    expected = (inside * weights * np.abs(zeta[None] - mean[:, None])).sum(axis=1) / (inside * weights).sum(axis=1)
    (found,) = _kernels.window_deviations(points, zeta, weights, radius, *point_grid(points, sizes_for(points, rng)))
    assert found == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_window_deviations_refuse_a_grid_of_other_points():
    from segmetrics.spatial.mesh import point_grid

    points = np.eye(3)
    grid = point_grid(points, np.ones(3))
    with pytest.raises(ValueError, match="one zeta and one weight per vertex"):
        _kernels.window_deviations(points, np.ones(2), np.ones(2), 1.0, *grid)
    bucket_mm, low, shape, first, order, sorted_xyz = grid
    with pytest.raises(ValueError, match="out of range"):
        _kernels.window_deviations(points, np.ones(3), np.ones(3), 1.0, bucket_mm, low, shape, first, order + 1, sorted_xyz)


# --- extreme coordinates, sizes and counts -------------------------------------------------------


@PROPERTY
@given(point_set=point_sets(), seed=st.integers(0, 2**32 - 1), scale=st.sampled_from([1e-150, 1e145]))
def test_nearest_points_at_the_extremes_of_the_coordinates(point_set, seed, scale):
    """Points and queries scaled by 1e-150 or 1e145 (up to 1e150 mm; squares still normal floats): every
    query gets a vertex in range, at the KD-tree's distance of the unscaled points times the scale."""
    rng, points = np.random.default_rng(seed), point_set.points
    queries = queries_around(points, rng)
    queries = queries[np.abs(queries).max(axis=1) * scale <= _kernels.MAX_COORDINATE_MM]
    truth = cKDTree(points).query(queries)[0] * scale
    distances, indices = mesh.nearest_points(queries * scale, points * scale, mesh.point_grid(points * scale, np.zeros(len(points))))
    assert np.all((indices >= 0) & (indices < len(points)))
    np.testing.assert_allclose(distances, truth, rtol=1e-9, atol=1e-9 * scale * (1 + np.abs(queries).max()))
    np.testing.assert_allclose(np.linalg.norm(points[indices] - queries, axis=1) * scale, truth, rtol=1e-9,
                               atol=1e-9 * scale * (1 + np.abs(queries).max()))


@pytest.mark.parametrize("columns", [2, 3])
def test_coordinates_whose_squares_overflow_are_refused(columns):
    """At 1e200 mm a squared distance is inf: the 2-D nearest-point search returned index -1 for a
    non-empty set and the 3-D one an index past the points (the KD-tree's 'none'); now one clear
    ValueError on every path, for the points and for the queries."""
    near = np.eye(3)[:, :columns]
    far = near * 1e200 + 1e200
    match = "within"
    if columns == 2:
        for points, queries in ((far, near), (near, far)):
            with pytest.raises(ValueError, match=match):
                _kernels.nearest_between(queries, points)
    with pytest.raises(ValueError, match=match):
        mesh.point_grid(far, np.ones(3))
    with pytest.raises(ValueError, match=match):
        _kernels.vertex_grid(mesh._three_components(far), 1.0)
    with pytest.raises(ValueError, match=match):
        mesh.nearest_points(far, near, mesh.point_grid(near, np.ones(3)))
    cells = np.array([[0, 1, 2]]) if columns == 3 else np.array([[0, 1], [1, 2], [2, 0]])
    with pytest.raises(ValueError, match=match):
        mesh.distances_to_surface(far, mesh.Surface(near, np.ones(3), cells))
    nearest, squared = _kernels.nearest_vertices(mesh._three_components(far), *mesh.point_grid(near, np.ones(3)))
    assert nearest.tolist() == [-1] * 3 and np.all(squared == np.inf)  # the kernel itself: no vertex found


def test_vertex_grid_refuses_more_buckets_than_memory_can_hold():
    """Each axis within its limit, the product 1e18 buckets: ValueError, not an allocation failure."""
    points = np.random.default_rng(1).random((5, 3)) * 1e6
    with pytest.raises(ValueError, match="too many buckets"):
        _kernels.vertex_grid(points, 1.0)


@pytest.mark.parametrize("max_length", [1e-300, 1e-12])
def test_label_contours_refuse_a_piece_length_too_small(max_length):
    """Segments of 1 pixel cut into pieces of 1e-12 asked for 10**12 points (MemoryError); 1e-300
    overflowed the piece count and silently gave the uncut contour."""
    labels = np.zeros((4, 4), np.int64)
    labels[1:3, 1:3] = 1
    with pytest.raises(ValueError, match="max_length"):
        _kernels.label_contours(labels, _kernels.object_statistics(labels, 1)[2], np.ones(2), max_length)


@pytest.mark.parametrize("sigma", [np.nan, np.inf, 1e300])
def test_blur_refuses_a_sigma_that_is_not_a_size(sigma):
    with pytest.raises(ValueError, match="sigma"):
        _kernels.gaussian_blur(np.ones((2, 3), bool), sigma, np.float64)


@pytest.mark.parametrize("radius", [-1.0, -1e-9, np.nan])
def test_window_deviations_refuse_a_negative_radius(radius):
    """A negative radius was searched as the window of its absolute value in the own bucket only."""
    points = np.eye(3)
    with pytest.raises(ValueError, match="radius"):
        _kernels.window_deviations(points, np.ones(3), np.ones(3), radius, *mesh.point_grid(points, np.ones(3)))


@pytest.mark.parametrize("call", [
    lambda: _kernels.cells_by_vertex(np.zeros((0, 3), np.int64), -1),
    lambda: _kernels.corner_shares(np.zeros((0, 3), np.int64), np.zeros(0), -1),
    lambda: _kernels.object_statistics(np.zeros((2, 2), np.int64), -1),
    lambda: _kernels.label_pairs(np.zeros((2, 2), np.int64), -1, np.zeros((2, 2), np.int64), 0),
], ids=["cells_by_vertex", "corner_shares", "object_statistics", "label_pairs"])
def test_negative_counts_are_refused_by_name(call):
    with pytest.raises(ValueError, match="count is negative"):
        call()


def test_inside_test_refuses_contour_bounds_that_decrease_and_an_order_that_does_not_sort():
    """Both were answered: the bounds as empty contours, the order with points silently left out."""
    triangle = np.array([[0.0, 0], [4, 0], [0, 4]])
    with pytest.raises(ValueError, match="never decreasing"):
        _kernels.inside_contours(np.zeros((2, 2)), np.arange(2), triangle, np.array([0, 3, 1, 3]), 1e-9)
    points = np.array([[1.0, 2.0], [1.0, 1.0]])  # both inside
    assert _kernels.inside_contours(points, np.argsort(points[:, 1]), triangle, np.array([0, 3]), 1e-9).tolist() == [True, True]
    with pytest.raises(ValueError, match="sort the points"):
        _kernels.inside_contours(points, np.arange(2), triangle, np.array([0, 3]), 1e-9)


# --- the package's threads ------------------------------------------------------------------------


def test_jobs_queued_together_each_get_their_own_rows_back(monkeypatch):
    """The chunks of several jobs share the pool; each job gets its outputs joined in its own row
    order (jobs of no rows, one row and many chunks, with their own shared arguments)."""
    from segmetrics.spatial import _threads

    monkeypatch.setattr(_threads, "_THREADS", 2)  # several chunks per job on any machine
    rng = np.random.default_rng(5)
    rows = [rng.random((n, 3)) for n in (0, 1, 3 * _threads.MIN_POINTS_PER_CHUNK + 7, 9 * _threads.MIN_POINTS_PER_CHUNK + 1)]
    kernel = lambda points, ids, scale: (points.sum(axis=1) * scale, ids + 1)  # noqa: E731
    jobs = [(kernel, (points, np.arange(len(points))), (float(k + 2),)) for k, points in enumerate(rows)]
    for k, (sums, ids) in enumerate(_threads.in_threads_together(jobs)):
        np.testing.assert_array_equal(sums, rows[k].sum(axis=1) * (k + 2))
        np.testing.assert_array_equal(ids, np.arange(1, len(rows[k]) + 1))


def test_in_threads_refuses_per_point_arrays_of_other_lengths():
    """Directions and zeta of other lengths were cut by the directions' chunks: the extra zeta
    values were dropped without a word."""
    from segmetrics.spatial._threads import in_threads

    cells = _kernels.ray_cells(np.eye(3), np.array([[0, 1, 2]]), np.zeros(3))
    shared = (*cells, 1e-9, 2, *_kernels.direction_grid(cells[0], cells[1], 2))
    directions = np.tile(np.ones(3) / np.sqrt(3), (4, 1))
    with pytest.raises(ValueError, match="differ in length"):
        in_threads(_kernels.radial_gaps, (directions, np.ones(5)), shared)
    (gaps,) = in_threads(_kernels.radial_gaps, (directions, np.ones(4)), shared)
    np.testing.assert_allclose(gaps, 1 - 1 / np.sqrt(3), rtol=1e-12)  # the plane x + y + z = 1 at 1/sqrt(3) mm


NESTED_THREADS = """
import os, sys
import numpy as np
from segmetrics.spatial import _threads
_threads.set_thread_count(1)
points = np.arange(3 * 8 * _threads.MIN_POINTS_PER_CHUNK, dtype=float).reshape(-1, 3)
task = _threads.thread_pool().submit(_threads.in_threads, lambda rows: (rows.sum(axis=1),), (points,), ())
try:
    (sums,) = task.result(timeout=60)
except TimeoutError:
    print("hung", flush=True)
    os._exit(3)
print(int(sums.sum()) == int(points.sum()), flush=True)
os._exit(0)
"""


def test_in_threads_called_from_a_pool_thread_does_not_wait_for_itself():
    """A task of the one-thread pool (as in batch workers) that splits work into chunks waited
    for chunks queued behind itself: forever."""
    child = subprocess.run([sys.executable, "-c", NESTED_THREADS], capture_output=True, text=True, timeout=300)
    assert child.returncode == 0 and child.stdout.strip() == "True", (child.returncode, child.stdout, child.stderr[-2000:])


# --- distances shared by the groups ----------------------------------------------------------------


def test_cached_distances_both_ways_are_each_sides_distances():
    """The pair's distances found both ways at once are, side by side, the distances from each
    surface's vertices to the other surface; a side other than "reference" or "test" is refused."""
    from segmetrics.registry import StructurePair

    reference = np.zeros((8, 9, 10), bool)
    reference[2:6, 2:7, 2:8] = True
    test = np.zeros_like(reference)
    test[3:7, 2:7, 3:9] = True
    spacing = (1.5, 1.0, 0.8)
    pair = StructurePair("box", reference, test, spacing)
    forward, backward = mesh.cached_distances_both_ways(pair)
    surfaces = mesh.pair_surfaces(reference, test, spacing)
    expected = mesh.distances_to_surface(surfaces[0].points, surfaces[1]), mesh.distances_to_surface(surfaces[1].points, surfaces[0])
    assert min(e.max() for e in expected) > 0.5  # the boxes differ by a voxel on several sides
    np.testing.assert_allclose(forward, expected[0], rtol=1e-12)
    np.testing.assert_allclose(backward, expected[1], rtol=1e-12)
    assert mesh.cached_distances(pair, "test") is backward  # kept for the other groups
    with pytest.raises(ValueError, match="reference"):
        mesh.cached_distances(StructurePair("box", reference, test, spacing), "tests")


# --- the public path at the extremes of the spacing ------------------------------------------------


def degenerate_pairs():
    """``(name, reference, test)`` of masks that break meshing and searches: one voxel, a sheet and
    a line one voxel thick, a volume full to every border, far-apart specks, 2-D pixels and lines."""
    voxel = np.zeros((3, 3, 3), np.uint8)
    voxel[1, 1, 1] = 1
    sheet = np.zeros((3, 4, 5), np.uint8)
    sheet[1] = 1
    line = np.zeros((4, 5, 6), np.uint8)
    line[2, 2, :] = 1
    specks = np.zeros((5, 5, 5), np.uint8)
    specks[0, 0, 0] = specks[4, 4, 4] = 1
    specks[2, 1:4, 1:4] = 1
    line2 = np.zeros((3, 4), np.uint8)
    line2[1] = 1
    masks = {"voxel": voxel, "sheet": sheet, "line": line, "full": np.ones((3, 4, 5), np.uint8), "specks": specks,
             "pixel": np.ones((1, 1), np.uint8), "line2": line2, "full2": np.ones((3, 4), np.uint8)}
    for name, mask in masks.items():
        yield name + " vs shifted", mask, np.roll(mask, 1, axis=-1)
        yield name + " vs full", mask, np.ones_like(mask)


LOW, HIGH = geometry.SPACING_RANGE_MM
#: Unit of each metric of the overlap and distance groups as a power of the length unit.
LENGTH_POWER = {"mm": 1, "mm2": 2, "ml": 3}


@pytest.mark.parametrize("mode", ["exact", "deepmind"])
@pytest.mark.parametrize("name, reference, test", list(degenerate_pairs()), ids=[p[0] for p in degenerate_pairs()])
def test_degenerate_masks_at_the_extreme_spacings(name, reference, test, mode):
    """Overlap and distances of degenerate masks on voxels of the smallest and largest size
    validation allows, isotropic or mixed: no error, finite values, and on isotropic voxels of size
    s every length is s times (volumes s**3 times) the value on 1 mm voxels (the NSD tolerance
    scaled alike, away from any distance between the masks)."""
    from segmetrics import compare

    def values(spacing):
        params = Parameters(surface_mode=mode, nsd_tolerance_mm=2.5 * spacing[0])
        (structure,) = compare(reference, test, spacing=spacing, metrics=["overlap", "distance"], params=params).structures
        return {v.metric: (v.value, v.unit, v.status) for v in structure.values}

    unit = values((1.0,) * reference.ndim)
    for size in (LOW, HIGH):
        scaled = values((size,) * reference.ndim)
        for metric, (value, unit_name, status) in unit.items():
            assert status == "ok" and np.isfinite(value), (metric, value, status)
            expected = value * size ** LENGTH_POWER.get(unit_name, 0)
            assert scaled[metric][2] == status and scaled[metric][0] == pytest.approx(expected, rel=1e-6, abs=1e-300), (metric, size)
    mixed = values((LOW, HIGH, 1.0)[-reference.ndim:])
    assert all(status == "ok" and np.isfinite(value) for value, _, status in mixed.values()), mixed
    assert all(0 <= mixed[metric][0] <= 1 for metric in ("dice", "jaccard", "nsd"))


def test_point_grids_of_extents_near_the_largest_coordinate_have_finite_buckets():
    """Extents of 1e148 mm overflowed the bucket-size product to an infinite bucket, which the
    search then took (every bucket corner NaN); the kernels now refuse it and the grid is one
    bucket along the longest axis."""
    points = np.random.default_rng(4).uniform(-1e148, 1e148, size=(30, 3))
    grid = mesh.point_grid(points, np.ones(30))
    assert 0 < grid[0] < np.inf
    queries = points[:5] * 0.5
    np.testing.assert_allclose(mesh.nearest_points(queries, points, grid)[0], cKDTree(points).query(queries)[0], rtol=1e-12)
    for bucket_mm in (np.inf, np.nan, 0.0):
        with pytest.raises(ValueError, match="bucket size"):
            _kernels.vertex_grid(points, bucket_mm)


# --- any damaged input: a ValueError or an answer, never a read out of range -------------------------


def valid_calls(rng):
    """``{kernel name: (kernel, arguments)}``: a valid call of every kernel on small random inputs."""
    points, triangles, segments = rng.normal(size=(12, 3)), rng.integers(0, 12, (10, 3)), rng.integers(0, 12, (10, 2))
    grid = mesh.point_grid(points, np.ones(12))
    star3 = (points, triangles, *_kernels.cells_by_vertex(triangles, 12), _kernels.FEATURE_CORNERS[3])
    star2 = (points, segments, *_kernels.cells_by_vertex(segments, 12), _kernels.FEATURE_CORNERS[2])
    queries = rng.normal(size=(7, 3))
    rays = _kernels.ray_cells(points, triangles, np.zeros(3))
    labels = np.zeros((6, 7), np.int64)
    labels[1:4, 1:3], labels[2:5, 4:6] = 1, 2
    origins = _kernels.object_statistics(labels, 2)[2]
    contours = _kernels.label_contours(labels, origins, np.ones(2), 0.25)
    flat = rng.normal(size=(9, 2))
    return {
        "nearest_vertices": (_kernels.nearest_vertices, [queries, *grid]),
        "closest_points on triangles": (_kernels.closest_points, [queries, rng.integers(0, 12, 7), *star3]),
        "closest_points on segments": (_kernels.closest_points, [queries, rng.integers(0, 12, 7), *star2]),
        "closest_points_near": (_kernels.closest_points_near, [queries, *grid, *star3]),
        "vertex_grid": (_kernels.vertex_grid, [points, 0.5]),
        "cells_by_vertex": (_kernels.cells_by_vertex, [triangles, 12]),
        "triangle_areas": (_kernels.triangle_areas, [points, triangles]),
        "corner_shares": (_kernels.corner_shares, [triangles, np.ones(10), 12]),
        "ray_cells": (_kernels.ray_cells, [points, triangles, np.zeros(3)]),
        "direction_grid": (_kernels.direction_grid, [rays[0], rays[1], 4]),
        "radial_gaps": (_kernels.radial_gaps, [queries / np.linalg.norm(queries, axis=1)[:, None], np.ones(7), *rays, 1e-9, 4,
                                               *_kernels.direction_grid(rays[0], rays[1], 4)]),
        "window_deviations": (_kernels.window_deviations, [queries, np.ones(12), np.ones(12), 1.0, *grid]),
        "label_contours": (_kernels.label_contours, [labels, origins, np.ones(2), 0.25]),
        "object_statistics": (_kernels.object_statistics, [labels, 2]),
        "label_pairs": (_kernels.label_pairs, [labels, 2, labels, 2]),
        "nearest_between": (_kernels.nearest_between, [flat, flat[::2].copy()]),
        "inside_contours": (_kernels.inside_contours, [flat, np.argsort(flat[:, 1]), contours[0], contours[2], 1e-12]),
        "clamp_field": (_kernels.clamp_field, [rng.random(10), rng.random(10) > 0.5, 0.05]),
    }


def damaged(value, rng):
    """``value`` with one kind of damage, of the same type (no new compilation): a count or size
    out of range, a NaN/inf/huge coordinate, an index out of range or negative, an array cut short
    or one row longer, indices reversed or multiplied."""
    if isinstance(value, int):
        return int(rng.choice([-1, 0, 1, value + 1, value * 3, 1000]))
    if isinstance(value, float):
        return float(rng.choice([-1.0, 0.0, np.nan, np.inf, 1e-300, 1e300]))
    array = np.array(value)
    if array.size == 0:
        return array
    kind, flat = rng.integers(0, 5), array.ravel().copy()
    if kind == 0:
        return array[:rng.integers(0, len(array))].copy()
    if kind == 1:
        return np.concatenate([array, array[:1]])
    if array.dtype.kind in "iu":
        if kind == 2:
            flat[rng.integers(0, flat.size)] = rng.choice([-1, -7, flat.max() + 1, flat.max() + 50])
            return flat.reshape(array.shape)
        return array[::-1].copy() if kind == 3 else array * int(rng.integers(2, 5))
    if array.dtype.kind == "f":
        flat[rng.integers(0, flat.size)] = rng.choice([np.nan, np.inf, -np.inf, 1e300, -1e300, 1e-300])
        return flat.reshape(array.shape)
    return array


@settings(PROPERTY, max_examples=300)
@given(seed=st.integers(0, 2**32 - 1), kernel=st.sampled_from(sorted(valid_calls(np.random.default_rng(0)))))
def test_every_kernel_answers_or_refuses_damaged_input(seed, kernel):
    """One or two arguments of a valid call damaged (:func:`damaged`): the kernel returns or
    raises ValueError, never IndexError (bounds checking is on) or another error."""
    rng = np.random.default_rng(seed)
    function, arguments = valid_calls(rng)[kernel]
    for _ in range(rng.integers(1, 3)):
        index = rng.integers(0, len(arguments))
        arguments[index] = damaged(arguments[index], rng)
    try:
        function(*arguments)
    except ValueError:
        pass


@pytest.mark.parametrize("pixel_mm", [1e-2, 1e-3, 1e-6])
def test_contour_distances_on_pixels_of_any_size(pixel_mm):
    """Two discs, 1.5 and 1 pixels apart in-plane: the contour distances in pixels are those on
    1 mm pixels to within a quarter pixel (samples every half pixel at most); boundaries were
    sampled every 0.1 mm at least, i.e. twice per contour on pixels of 1e-3 mm (HD 5.6 and mean
    4.7 pixels instead of 3.2 and 1.3)."""
    from segmetrics import compare

    rows, cols = np.indices((60, 60))
    reference = np.broadcast_to((rows - 30) ** 2 + (cols - 30) ** 2 <= 20**2, (3, 60, 60)).astype(np.uint8)
    test = np.broadcast_to((rows - 31.5) ** 2 + (cols - 29) ** 2 <= 19**2, (3, 60, 60)).astype(np.uint8)
    reference[[0, 2]] = test[[0, 2]] = 0

    def in_pixels(size):
        (structure,) = compare(reference, test, spacing=(3 * size, size, size), metrics="contours").structures
        return np.array([structure.value("contour_hd_mm"), structure.value("contour_mean_distance_mm")]) / size

    np.testing.assert_allclose(in_pixels(pixel_mm), in_pixels(1.0), atol=0.25)


def test_grids_of_micrometre_voxels_that_differ_are_not_taken_as_one():
    """Spacings and origins were compared with an absolute 1e-4 mm: voxels of 1e-6 and 5e-5 mm, or
    grids 50 voxels of 1e-6 mm apart, passed as one grid and were compared voxel by voxel."""
    from segmetrics import compare
    from segmetrics.spatial.geometry import GeometryMismatchError, LabelImage

    mask = np.zeros((4, 5, 6), np.uint8)
    mask[1:3, 1:4, 1:5] = 1
    tiny = (1e-6,) * 3
    with pytest.raises(GeometryMismatchError, match="spacing differs"):
        compare(LabelImage(mask, tiny), LabelImage(mask, (5e-5,) * 3))
    with pytest.raises(GeometryMismatchError, match=r"do not overlap \(reference x -5e-07 to 5\.5e-06"):
        compare(LabelImage(mask, tiny), LabelImage(mask, tiny, origin=(5e-5, 0.0, 0.0)))  # 50 voxels apart
    # files that store one grid with rounded numbers still agree
    (structure,) = compare(LabelImage(mask, (2.5, 0.9765625, 0.9765625), origin=(-249.51171875, -249.51171875, 100.0)),
                           LabelImage(mask, (2.5, 0.976562, 0.976562), origin=(-249.512, -249.512, 100.0))).structures
    assert structure.value("dice") == 1.0


def test_roughness_ratio_on_voxels_of_1e_5_mm():
    """A ball's RI on 1e-5 mm voxels is about 6e-7 mm: the absolute 1e-6 mm 'smooth' tolerance
    made its roughness ratio NaN (reference_smooth); RI and RR in voxels are about those on 1 mm voxels."""
    from segmetrics import compare

    grid = np.indices((16, 16, 16))
    reference = (np.sum((grid - 7.5) ** 2, axis=0) <= 36).astype(np.uint8)
    test = (np.sum((grid - 7.0) ** 2, axis=0) <= 36).astype(np.uint8)

    def roughness(size):
        params = Parameters(roughness_window_mm=3.0 * size)
        (structure,) = compare(reference, test, spacing=(size,) * 3, metrics="roughness", params=params).structures
        return structure.get("rr").status, structure.value("ri_reference_mm") / size, structure.value("rr")

    status, ri, rr = roughness(1e-5)
    unit_status, unit_ri, unit_rr = roughness(1.0)
    assert status == unit_status == "ok" and 0.02 < unit_ri  # a ball of 6 voxels is rough at the voxel scale
    # (on 1e-5 mm voxels RI differs by 0.3 % and RR by 1.2 %: not investigated)
    assert ri == pytest.approx(unit_ri, rel=0.03) and rr == pytest.approx(unit_rr, rel=0.03)
