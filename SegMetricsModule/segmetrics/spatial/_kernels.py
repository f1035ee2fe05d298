"""Compiled kernels of :mod:`segmetrics.spatial.mesh`: the blur and clamp of the surface field, triangle areas,
and for :func:`segmetrics.spatial.mesh.distances_to_surface` the nearest vertex of a surface to each
query point (a grid of buckets) and the closest point by a walk over the surface's cells; and of
the slice contours (:func:`segmetrics.spatial.mesh.contours_2d`, slice-wise MSI, the contours group):
marching squares, nearest points between two 2-D point sets, the inside test.

Points are 3-component rows in mm (2-D contours padded with a zero third component); cells are
triangles (3 vertex indices) or segments (2). The kernels are compiled with numba (cached on disk
after the first call) and release the GIL; :func:`segmetrics.spatial._threads.in_threads` runs one on the
query points on the package's threads (:mod:`segmetrics.spatial._threads`).

numba does not check array bounds, so every index a kernel follows is in range by construction,
for any input: a query's bucket is clamped to the grid, index inputs (cell corners, nearest
vertices, grids) are checked on entry, or in the walk just before each is read (ValueError),
degenerate cells (zero length or area) and empty sets have defined results, and no division is
by zero. The tests compile the kernels with ``NUMBA_BOUNDSCHECK=1`` (``Testing/conftest.py``) so
that a slip fails with IndexError.
"""
import numba
import numpy as np

from ._bundled_surface import (FACE, FEATURE_CORNERS, MAX_BUCKETS, MAX_BUCKETS_PER_AXIS, MAX_COORDINATE_MM,  # noqa: F401
                               MAX_RINGS, MAX_SIGMA_VOXELS, MAX_WALK_STEPS, SLIVER, VERTICES_PER_BUCKET, gaussian_weights)
from ._bundled_roughness import MAX_DIRECTION_BUCKETS


# --- closest point: the walk --------------------------------------------------------------------



@numba.njit(cache=True, nogil=True, inline="always")
def _triangle(p, a, b, c):
    """``(p - q, feature code)`` for the point ``q`` of triangle ``abc`` closest to ``p`` (3-tuples
    of mm): the Voronoi regions of Ericson, *Real-Time Collision Detection* (2005), section 5.1.5.
    A degenerate triangle (corners at one point, on a line, or so nearly so that rounding would
    decide its regions: :data:`SLIVER`) is taken as its three edges (:func:`_triangle_edges`),
    and so is one whose region's division would be by zero."""
    ab, ac, ap = _minus(b, a), _minus(c, a), _minus(p, a)
    d1, d2 = _dot(ab, ap), _dot(ac, ap)
    if d1 <= 0 and d2 <= 0:
        return ap, 0
    bp = _minus(p, b)
    d3, d4 = _dot(ab, bp), _dot(ac, bp)
    if d3 >= 0 and d4 <= d3:
        return bp, 1
    cp = _minus(p, c)
    d5, d6 = _dot(ab, cp), _dot(ac, cp)
    if d6 >= 0 and d5 <= d6:
        return cp, 2
    normal = _cross(ab, ac)
    if _dot(normal, normal) <= SLIVER * _dot(ab, ab) * _dot(ac, ac):  # the regions below need an area
        return _triangle_edges(p, a, b, c)
    vc = d1 * d4 - d3 * d2
    if vc <= 0 and d1 >= 0 and d3 <= 0:
        if d1 - d3 <= 0:  # |ab|² = 0
            return _triangle_edges(p, a, b, c)
        return _step(ap, d1 / (d1 - d3), ab, 0.0, ac), 3
    vb = d5 * d2 - d1 * d6
    if vb <= 0 and d2 >= 0 and d6 <= 0:
        if d2 - d6 <= 0:  # |ac|² = 0
            return _triangle_edges(p, a, b, c)
        return _step(ap, 0.0, ab, d2 / (d2 - d6), ac), 4
    va = d3 * d6 - d5 * d4
    if va <= 0 and d4 - d3 >= 0 and d5 - d6 >= 0:
        if (d4 - d3) + (d5 - d6) <= 0:  # |bc|² = 0
            return _triangle_edges(p, a, b, c)
        w = (d4 - d3) / ((d4 - d3) + (d5 - d6))
        return _step(ap, 1.0 - w, ab, w, ac), 5
    denominator = va + vb + vc
    if not (denominator > 0 and va >= 0 and vb >= 0 and vc >= 0):  # no face (corners on a line), or rounding
        return _triangle_edges(p, a, b, c)
    return _step(ap, vb / denominator, ab, vc / denominator, ac), FACE


@numba.njit(cache=True, nogil=True)
def _triangle_edges(p, a, b, c):
    """:func:`_triangle` of a degenerate triangle: the closest point of its three edges, with
    the triangle's feature codes."""
    best, code = _segment(p, a, b)  # codes 0 a, 1 b, 2 ab: as the triangle's 0, 1, 3
    code = 3 if code == 2 else code
    found, found_code = _segment(p, a, c)
    if _dot(found, found) < _dot(best, best):
        best, code = found, (0, 2, 4)[found_code]
    found, found_code = _segment(p, b, c)
    if _dot(found, found) < _dot(best, best):
        best, code = found, (1, 2, 5)[found_code]
    return best, code


@numba.njit(cache=True, nogil=True, inline="always")
def _segment(p, a, b):
    """``(p - q, feature code)`` for the point ``q`` of segment ``ab`` closest to ``p`` (vertex
    ``a`` for a segment of length 0)."""
    ab, ap = _minus(b, a), _minus(p, a)
    length_squared = _dot(ab, ab)
    if not length_squared > 0:
        return ap, 0
    t = _dot(ap, ab) / length_squared
    if t <= 0:
        return ap, 0
    if t >= 1:
        return _minus(p, b), 1
    return _step(ap, t, ab, 0.0, ab), 2


@numba.njit(cache=True, nogil=True, inline="always")
def _minus(u, v):
    return (u[0] - v[0], u[1] - v[1], u[2] - v[2])


@numba.njit(cache=True, nogil=True, inline="always")
def _cross(u, v):
    return (u[1] * v[2] - u[2] * v[1], u[2] * v[0] - u[0] * v[2], u[0] * v[1] - u[1] * v[0])


@numba.njit(cache=True, nogil=True, inline="always")
def _dot(u, v):
    return u[0] * v[0] + u[1] * v[1] + u[2] * v[2]


@numba.njit(cache=True, nogil=True, inline="always")
def _step(u, s, v, t, w):
    """``u - s v - t w`` of 3-tuples."""
    return (u[0] - s * v[0] - t * w[0], u[1] - s * v[1] - t * w[1], u[2] - s * v[2] - t * w[2])


@numba.njit(cache=True, nogil=True)
def _vertex(points, index):
    return (points[index, 0], points[index, 1], points[index, 2])


@numba.njit(cache=True, nogil=True, inline="always")  # inlined: the walk is about 20 % faster
def _closest_in_stars(p, centre_a, centre_b, points, cells, by_vertex, first, count, best):
    """Closest point to ``p`` among the cells around the vertices ``centre_a`` and ``centre_b``
    (-1 = none), if closer than ``best`` (squared mm): ``(squared distance, p - q, cell,
    feature)``; cell -1 when none is closer. The first closest cell wins ties. ValueError for a
    run of cells per vertex, a cell or a corner index out of range (checked before it is read)."""
    offset, cell, feature = (0.0, 0.0, 0.0), -1, 0
    for centre in (centre_a, centre_b):
        if centre < 0:
            continue
        if not (first[centre] >= 0 and 0 <= count[centre] <= len(by_vertex) - first[centre]):
            raise ValueError("closest points: the cells per vertex are not those of these points (a run out of range)")
        for k in range(first[centre], first[centre] + count[centre]):
            candidate = by_vertex[k]
            if not 0 <= candidate < len(cells):
                raise ValueError("closest points: the cells per vertex are not those of these cells (an index out of range)")
            for c in range(cells.shape[1]):
                if not 0 <= cells[candidate, c] < len(points):
                    raise ValueError("closest points: a cell's corner index is out of range")
            if cells.shape[1] == 3:
                found, code = _triangle(p, _vertex(points, cells[candidate, 0]), _vertex(points, cells[candidate, 1]), _vertex(points, cells[candidate, 2]))
            else:
                found, code = _segment(p, _vertex(points, cells[candidate, 0]), _vertex(points, cells[candidate, 1]))
            squared = _dot(found, found)
            if squared < best:  # NaN (a degenerate cell) never wins
                best, offset, cell, feature = squared, found, candidate, code
    return best, offset, cell, feature


@numba.njit(cache=True, nogil=True)
def closest_points(queries, nearest, points, cells, by_vertex, first, count, feature_corners):
    """For each query point (rows, mm), walking from its nearest vertex ``nearest[i]``: ``p - q``
    (rows), the cell holding ``q`` and the code of its feature there (cell -1 and ``q`` the
    nearest vertex itself when no cell is around that vertex).

    ``by_vertex``, ``first``, ``count``: the cells around vertex ``v`` are
    ``by_vertex[first[v]:first[v] + count[v]]``, as :func:`cells_by_vertex` of ``cells`` and
    ``len(points)`` gives them. ValueError for inputs that would lead the walk out of range
    (``nearest``, :func:`_check_star`, :func:`_closest_in_stars`).
    """
    if queries.shape[1] != 3 or len(nearest) != len(queries):
        raise ValueError("closest_points: needs query rows of 3 components and a nearest vertex per query")
    _check_star(points, cells, by_vertex, first, count, feature_corners)
    offsets = np.empty((len(queries), 3))
    found_cells = np.full(len(queries), -1, dtype=np.int64)
    features = np.zeros(len(queries), dtype=np.int8)
    for i in range(len(queries)):
        if not 0 <= nearest[i] < len(points):
            raise ValueError("closest_points: a nearest-vertex index is out of range")
        _walk(queries, i, nearest[i], points, cells, by_vertex, first, count, feature_corners, offsets, found_cells, features)
    return offsets, found_cells, features


@numba.njit(cache=True, nogil=True)
def closest_points_near(queries, bucket_mm, low, shape, first, order, sorted_xyz, points, cells, by_vertex, cell_first, count,
                        feature_corners):
    """:func:`closest_points` walking from each query's :func:`nearest_vertices` (grid ``bucket_mm``
    … ``sorted_xyz`` of ``points``), in one pass: ``(p - q`` (rows, mm), ``cell, feature, nearest vertex)``.
    A query on a vertex is not walked (``p - q`` 0, cell -1); one with no vertex within
    :data:`MAX_RINGS` buckets has nearest vertex -1 and nothing else (for a search further out).
    ValueError for a grid or cells per vertex that are not those of ``points`` and ``cells``
    (as in :func:`nearest_vertices` and :func:`closest_points`)."""
    if len(order) != len(points):
        raise ValueError("closest_points_near: the grid's vertices are not those of these points")
    for v in order:
        if not 0 <= v < len(points):
            raise ValueError("closest_points_near: the grid's vertex order is not one of these points")
    _check_star(points, cells, by_vertex, cell_first, count, feature_corners)
    nearest, squared = nearest_vertices(queries, bucket_mm, low, shape, first, order, sorted_xyz)  # values of `order`, or -1
    offsets = np.zeros((len(queries), 3))
    found_cells = np.full(len(queries), -1, dtype=np.int64)
    features = np.zeros(len(queries), dtype=np.int8)
    for i in range(len(queries)):
        if nearest[i] >= 0 and squared[i] > 0:
            _walk(queries, i, nearest[i], points, cells, by_vertex, cell_first, count, feature_corners, offsets, found_cells, features)
    return offsets, found_cells, features, nearest


@numba.njit(cache=True, nogil=True)
def _check_star(points, cells, by_vertex, first, count, feature_corners):
    """ValueError unless the walk's inputs (see :func:`closest_points`) have the shapes it reads:
    points of 3 components, triangles or segments with their feature corners (columns of a cell,
    -1 = none), cells per vertex for each point. The indices within the cells and the cells per
    vertex are checked where the walk follows them (:func:`_closest_in_stars`): a pass over them
    on entry would cost about 8 % of a chunk of :func:`closest_points_near`."""
    corners_shape = (FACE + 1, 3) if cells.shape[1] == 3 else (3, 2)
    if points.shape[1] != 3 or cells.shape[1] not in (2, 3) or feature_corners.shape != corners_shape:
        raise ValueError("closest points: needs points of 3 components, triangles or segments and their feature corners")
    for corner in feature_corners.ravel():
        if not -1 <= corner < cells.shape[1]:
            raise ValueError("closest points: a feature corner is not a column of a cell")
    if len(first) != len(points) or len(count) != len(points):
        raise ValueError("closest points: the cells per vertex are not those of these points")


@numba.njit(cache=True, nogil=True, inline="always")
def _walk(queries, i, start, points, cells, by_vertex, first, count, feature_corners, offsets, found_cells, features):
    """The walk of :func:`closest_points` for query ``i`` from vertex ``start``, written into row ``i`` of the outputs."""
    p = _vertex(queries, i)
    offsets[i, 0], offsets[i, 1], offsets[i, 2] = _minus(p, _vertex(points, start))
    best, centre_a, centre_b = np.inf, start, -1
    for _ in range(MAX_WALK_STEPS):
        best, offset, cell, feature = _closest_in_stars(p, centre_a, centre_b, points, cells, by_vertex, first, count, best)
        if cell < 0:  # nothing closer around the searched vertices
            break
        offsets[i, 0], offsets[i, 1], offsets[i, 2] = offset
        found_cells[i], features[i] = cell, feature
        corners = feature_corners[feature]
        if corners[-1] >= 0:  # the whole cell (face or segment): it touches a searched vertex
            break
        rim_a = cells[cell, corners[0]]
        rim_b = cells[cell, corners[1]] if corners[1] >= 0 else -1
        if rim_a == centre_a or rim_a == centre_b or (rim_b >= 0 and (rim_b == centre_a or rim_b == centre_b)):
            break  # a local minimum of the distance over the surface
        centre_a, centre_b = rim_a, rim_b


# --- nearest vertex: a uniform grid of buckets ---------------------------------------------------



@numba.njit(cache=True, nogil=True)
def vertex_grid(points, bucket_mm):
    """Buckets of ``bucket_mm`` (cubes) holding the vertices ``points`` (rows, mm, finite):
    ``(low corner, buckets per axis, first, order, sorted)``. ``sorted`` (3 rows x, y, z) holds
    the vertices bucket by bucket: those of bucket ``(i, j, k)`` are columns
    ``first[key]:first[key + 1]`` with ``key = (i * n[1] + j) * n[2] + k``, and ``order`` maps
    a column back to the vertex index. No points give one empty bucket at the origin.
    ValueError for points that are not finite or beyond :data:`MAX_COORDINATE_MM`, a bucket size
    that is not positive and finite, more than :data:`MAX_BUCKETS_PER_AXIS` buckets along an axis or more
    than :data:`MAX_BUCKETS` in all."""
    if not 0 < bucket_mm < np.inf:
        raise ValueError("vertex_grid: the bucket size must be positive and finite")
    if points.shape[1] != 3:
        raise ValueError("vertex_grid: needs points of 3 components")
    low = np.zeros(3)
    shape = np.ones(3, dtype=np.int64)
    for axis in range(3):
        if len(points):
            low[axis] = points[:, axis].min()
            if not (-MAX_COORDINATE_MM <= low[axis] and points[:, axis].max() <= MAX_COORDINATE_MM):  # also NaN
                raise ValueError("vertex_grid: the points must be finite and within MAX_COORDINATE_MM (1e150 mm)")
            buckets = (points[:, axis].max() - low[axis]) / bucket_mm
            if not buckets < MAX_BUCKETS_PER_AXIS:
                raise ValueError("vertex_grid: too many buckets for the points' extent (bucket size too small)")
            shape[axis] = int(buckets) + 1
    if shape[0] * shape[1] * shape[2] > MAX_BUCKETS:  # each factor is below 2**20: no overflow
        raise ValueError("vertex_grid: too many buckets for the points' extent (bucket size too small)")
    keys = np.empty(len(points), dtype=np.int64)
    for v in range(len(points)):
        i, j, k = _cells(points[v, 0], points[v, 1], points[v, 2], low, bucket_mm, shape)
        keys[v] = (i * shape[1] + j) * shape[2] + k
    first = np.zeros(shape[0] * shape[1] * shape[2] + 1, dtype=np.int64)
    for key in keys:
        first[key + 1] += 1
    first = np.cumsum(first)
    order, filled = np.empty(len(points), dtype=np.int64), first[:-1].copy()
    for v in range(len(points)):
        order[filled[keys[v]]] = v
        filled[keys[v]] += 1
    return low, shape, first, order, np.ascontiguousarray(points[order].T)


@numba.njit(cache=True, nogil=True, inline="always")
def _cell(value, low, bucket_mm, buckets):
    """Index of the bucket along one axis nearest to a coordinate (mm): its own bucket, clamped
    to ``0 … buckets - 1`` (0 for NaN)."""
    index = np.floor((value - low) / bucket_mm)
    if not index > 0:
        return 0
    return int(min(index, buckets - 1))


@numba.njit(cache=True, nogil=True, inline="always")
def _cells(x, y, z, low, bucket_mm, shape):
    """:func:`_cell` on the three axes."""
    return _cell(x, low[0], bucket_mm, shape[0]), _cell(y, low[1], bucket_mm, shape[1]), _cell(z, low[2], bucket_mm, shape[2])


@numba.njit(cache=True, nogil=True, inline="always")
def _reach(value, low, index, buckets, rings, bucket_mm):
    """Distance (mm, at least 0) along one axis from a coordinate to the nearest bucket more than
    ``rings`` buckets from bucket ``index``; inf when those buckets cover the whole axis."""
    reach = np.inf
    if index - rings > 0:
        reach = value - (low + (index - rings) * bucket_mm)
    if index + rings < buckets - 1:
        reach = min(reach, low + (index + rings + 1) * bucket_mm - value)
    return max(reach, 0.0)


@numba.njit(cache=True, nogil=True, inline="always")
def _outside(value, low, index, bucket_mm):
    """Distance (mm) from a coordinate to bucket ``index`` along one axis (0 within it)."""
    start = low + index * bucket_mm
    return max(start - value, value - start - bucket_mm, 0.0)


@numba.njit(cache=True, nogil=True)
def nearest_vertices(queries, bucket_mm, low, shape, first, order, sorted_xyz):
    """Index of the vertex nearest to each query point (rows, mm) and its squared distance (mm²).

    Scans the cube of buckets (:func:`vertex_grid`) around the point's bucket (the nearest one
    for a point outside the grid) that holds every vertex as near as the previous point's nearest
    vertex (one bucket out for the first point, and more when nothing is found), and again
    farther out if the nearest vertex found may have a nearer one beyond; columns of buckets
    (along z) farther than the nearest vertex so far are skipped. Of vertices at the same least
    distance, the one of lowest index (so that the answer does not depend on the points searched
    before, nor on the chunks the points are split into). Fastest for points in surface order
    (each near the one before). -1 (and inf) for points with no vertex within :data:`MAX_RINGS`
    buckets (``MAX_RINGS * bucket_mm``), and for every point when there are no vertices.
    ValueError for a grid whose buckets are not those of :func:`vertex_grid` (3 axes of 1 to
    :data:`MAX_BUCKETS_PER_AXIS` buckets, runs of vertices in order), which could lead the search
    out of range."""
    if queries.shape[1] != 3:
        raise ValueError("nearest_vertices: needs query points of 3 components")
    _check_grid(bucket_mm, low, shape, first, order, sorted_xyz)
    nearest = np.full(len(queries), -1, dtype=np.int64)
    squared = np.full(len(queries), np.inf)
    xs, ys, zs = sorted_xyz[0], sorted_xyz[1], sorted_xyz[2]
    previous = -1
    for q in range(len(queries)):
        x, y, z = queries[q, 0], queries[q, 1], queries[q, 2]
        if not max(abs(x), abs(y), abs(z)) <= MAX_COORDINATE_MM:  # NaN, inf or beyond: no nearest vertex
            continue
        i, j, k = _cells(x, y, z, low, bucket_mm, shape)  # in the grid: every index below is in range
        # every vertex nearer than `reach(rings)` lies in the cube `rings` buckets out; `whole` covers the grid
        gap = _reach_all(x, y, z, low, i, j, k, shape, 0, bucket_mm)
        whole = max(i, shape[0] - 1 - i, j, shape[1] - 1 - j, k, shape[2] - 1 - k, 1)
        best, found, rings = np.inf, -1, 1
        if previous >= 0:  # the previous point's nearest vertex bounds the search (points come in surface order)
            best, found = (xs[previous] - x) ** 2 + (ys[previous] - y) ** 2 + (zs[previous] - z) ** 2, previous
            needed = _rings_for(best, gap, bucket_mm, whole)
            if needed > MAX_RINGS:
                best, found = np.inf, -1
            else:
                rings = max(1, int(needed))
        while rings <= MAX_RINGS:
            start, stop = max(k - rings, 0), min(k + rings, shape[2] - 1)
            for a in range(max(i - rings, 0), min(i + rings, shape[0] - 1) + 1):
                along_x = _outside(x, low[0], a, bucket_mm) ** 2
                if along_x > best:  # (a bucket at the bound may hold a tie)
                    continue
                for b in range(max(j - rings, 0), min(j + rings, shape[1] - 1) + 1):
                    if along_x + _outside(y, low[1], b, bucket_mm) ** 2 > best:
                        continue
                    column = (a * shape[1] + b) * shape[2]  # its buckets start..stop are one run of vertices
                    for n in range(first[column + start], first[column + stop + 1]):
                        d = (xs[n] - x) ** 2 + (ys[n] - y) ** 2 + (zs[n] - z) ** 2
                        if d < best or (d == best and found >= 0 and order[n] < order[found]):
                            best, found = d, n
            reach = _reach_all(x, y, z, low, i, j, k, shape, rings, bucket_mm)
            if found >= 0 and best < reach * reach:  # also when the cube covers the grid (reach inf); a tie may be beyond
                nearest[q], squared[q], previous = order[found], best, found
                break
            if reach == np.inf:  # the whole grid holds no vertex
                break
            if found < 0:
                rings += 1
            else:
                rings = max(rings + 1, int(min(_rings_for(best, gap, bucket_mm, whole), MAX_RINGS)))
    return nearest, squared


@numba.njit(cache=True, nogil=True)
def _check_grid(bucket_mm, low, shape, first, order, sorted_xyz):
    """ValueError unless a grid has the structure :func:`vertex_grid` gives it, which the searches
    over its buckets rely on to stay in range: a positive, finite bucket size (mm), 3 axes of 1 to
    :data:`MAX_BUCKETS_PER_AXIS` buckets, runs of vertices per bucket from 0 to the number of
    vertices, never decreasing, and 3 coordinates per vertex. (The vertex indices in ``order``
    are checked by each caller against what it indexes with them.)"""
    if not (0 < bucket_mm < np.inf and len(low) == 3 and len(shape) == 3 and np.all(shape >= 1)
            and np.all(shape <= MAX_BUCKETS_PER_AXIS)
            and len(first) == shape[0] * shape[1] * shape[2] + 1 and first[0] == 0 and first[-1] == len(order)
            and np.all(first[1:] >= first[:-1]) and sorted_xyz.shape == (3, len(order))):
        raise ValueError("the grid is not one of vertex_grid (buckets, runs of vertices or coordinates)")


@numba.njit(cache=True, nogil=True, inline="always")
def _rings_for(squared, gap, bucket_mm, whole):
    """Rings of buckets around a point (a float from 1 to ``whole``) that hold every vertex within
    ``sqrt(squared)`` mm of it, when its own bucket holds every vertex within ``gap`` mm."""
    return max(1.0, min(np.ceil((np.sqrt(squared) - gap) / bucket_mm), whole))


@numba.njit(cache=True, nogil=True, inline="always")
def _reach_all(x, y, z, low, i, j, k, shape, rings, bucket_mm):
    """:func:`_reach` of the nearest axis."""
    return min(
        _reach(x, low[0], i, shape[0], rings, bucket_mm),
        _reach(y, low[1], j, shape[1], rings, bucket_mm),
        _reach(z, low[2], k, shape[2], rings, bucket_mm),
    )


@numba.njit(cache=True, nogil=True)
def cells_by_vertex(cells, vertex_count):
    """``(cells, first, count)``: the cells around vertex ``v`` are ``cells[first[v]:first[v] + count[v]]``,
    in increasing order (a counting sort of the cells' corners; a cell that repeats a corner is
    listed that many times). ValueError for a corner index outside ``0 … vertex_count - 1``."""
    if vertex_count < 0:
        raise ValueError("cells_by_vertex: the vertex count is negative")
    count = np.zeros(vertex_count, dtype=np.int64)
    for v in cells.ravel():
        if not 0 <= v < vertex_count:
            raise ValueError("cells_by_vertex: a cell's corner index is out of range")
        count[v] += 1
    first = np.cumsum(count) - count
    filled, by_vertex = first.copy(), np.empty(cells.size, dtype=np.int64)
    for cell in range(len(cells)):
        for v in cells[cell]:
            by_vertex[filled[v]] = cell
            filled[v] += 1
    return by_vertex, first, count


# --- sorting distances ---------------------------------------------------------------------------

#: Bits of the key that each pass of :func:`ascending_order` sorts on.
RADIX_BITS = 11


@numba.njit(cache=True, nogil=True)
def ascending_order(values):
    """Indices that sort ``values`` (1-D float64, not negative: distances in mm, ``inf`` allowed)
    in ascending order, equal values in their input order: a radix sort of the values' bits,
    which for floats that are not negative are ordered as the values (several times faster than
    ``np.argsort``). Negative values or NaN are sorted by their bits (a defined order, not the
    values'); every index stays in range."""
    keys = np.ascontiguousarray(values).view(np.uint64)
    digits = 1 << RADIX_BITS
    order, spare = np.arange(len(keys)), np.empty(len(keys), dtype=np.int64)
    for shift in range(0, 64, RADIX_BITS):
        starts = np.zeros(digits + 1, dtype=np.int64)
        for key in keys:
            starts[((key >> shift) & (digits - 1)) + 1] += 1
        if starts.max() == len(keys):  # one digit for all: this pass keeps the order
            continue
        starts = np.cumsum(starts)
        for index in order:
            digit = (keys[index] >> shift) & (digits - 1)
            spare[starts[digit]] = index
            starts[digit] += 1
        order, spare = spare, order
    return order


# --- surface building ---------------------------------------------------------------------------


def gaussian_blur(mask: np.ndarray, sigma_voxels: float, dtype) -> np.ndarray:
    """Gaussian blur of a 1-D to 3-D boolean mask (any shape, even one voxel), zero outside, as
    ``scipy.ndimage.gaussian_filter`` with ``mode="constant"`` and ``truncate=3`` (the same sampled
    kernel, equal to rounding in ``dtype``), about three times faster: each axis is one pass of
    vectorised rows. A sigma of 0 (or less) returns the mask; ValueError for NaN or one above
    :data:`MAX_SIGMA_VOXELS`."""
    if mask.ndim not in (1, 2, 3):
        raise ValueError(f"gaussian_blur needs a 1-D to 3-D mask, got shape {mask.shape}")
    if sigma_voxels <= 0:
        return mask.astype(dtype)
    weights = gaussian_weights(sigma_voxels).astype(dtype)
    volume = np.ascontiguousarray(mask, dtype=bool).reshape((1,) * (3 - mask.ndim) + mask.shape).view(np.uint8)
    blurred = np.empty(volume.shape, dtype)
    _blur_rows(volume, weights, blurred)
    if mask.ndim >= 2:  # the axes added by the reshape are not blurred
        _blur_columns(blurred, weights)
    if mask.ndim == 3:
        _blur_slices(blurred, weights)
    return blurred.reshape(mask.shape)


@numba.njit(cache=True, nogil=True)
def _blur_rows(source, weights, out):
    """Blur along the last axis (zero outside), each row copied into a zero-padded buffer first."""
    radius = (len(weights) - 1) // 2
    length = source.shape[2]
    padded_row = np.zeros(length + 2 * radius, out.dtype)
    for z in range(source.shape[0]):
        for y in range(source.shape[1]):
            for x in range(length):
                padded_row[x + radius] = source[z, y, x]
                out[z, y, x] = 0
            for j in range(len(weights)):
                weight = weights[j]
                for x in range(length):
                    out[z, y, x] += weight * padded_row[x + j]


@numba.njit(cache=True, nogil=True)
def _blur_columns(volume, weights):
    """Blur along the middle axis in place (zero outside), one slice copied aside at a time."""
    radius = (len(weights) - 1) // 2
    rows = volume.shape[1]
    for z in range(volume.shape[0]):
        source = volume[z].copy()
        for y in range(rows):
            _weighted_rows(source, y - radius, weights, volume[z, y])


@numba.njit(cache=True, nogil=True)
def _blur_slices(volume, weights):
    """Blur along the first axis in place (zero outside), one plane of rows copied aside at a time."""
    radius = (len(weights) - 1) // 2
    for y in range(volume.shape[1]):
        source = volume[:, y, :].copy()
        for z in range(volume.shape[0]):
            _weighted_rows(source, z - radius, weights, volume[z, y])


@numba.njit(cache=True, nogil=True, inline="always")
def _weighted_rows(source, first_row, weights, out):
    """``out = sum_j weights[j] * source[first_row + j]`` over the rows that exist."""
    for x in range(len(out)):
        out[x] = 0
    for j in range(max(0, -first_row), min(len(weights), len(source) - first_row)):
        weight = weights[j]
        row = source[first_row + j]
        for x in range(len(out)):
            out[x] += weight * row[x]


@numba.njit(cache=True, nogil=True)
def clamp_field(field, inside, margin):
    """Clamp a blurred field in place (arrays flat): inside voxels to at least 0.5 + margin,
    outside ones to at most 0.5 - margin. Returns the inside voxels the blur left below 0.5
    (flat indices) and their blurred values before the clamp."""
    if inside.size != field.size:
        raise ValueError("clamp_field: the mask and the field differ in size")
    lost, values = [], []
    for n in range(field.size):
        if inside[n]:
            if field[n] < 0.5:
                lost.append(n)
                values.append(field[n])
            field[n] = max(field[n], 0.5 + margin)
        else:
            field[n] = min(field[n], 0.5 - margin)
    return np.array(lost, dtype=np.int64), np.array(values, dtype=field.dtype)


@numba.njit(cache=True, nogil=True)
def triangle_areas(vertices, cells):
    """Area of each triangle ``cells`` (rows of 3 vertex indices) of ``vertices`` (rows x, y, z).
    ValueError for a vertex index out of range."""
    if vertices.shape[1] != 3 or cells.shape[1] != 3:
        raise ValueError("triangle_areas: needs vertices of 3 components and triangles of 3 corners")
    areas = np.empty(len(cells))
    for t in range(len(cells)):
        for corner in range(3):
            if not 0 <= cells[t, corner] < len(vertices):
                raise ValueError("triangle_areas: a triangle's vertex index is out of range")
        a, b, c = _vertex(vertices, cells[t, 0]), _vertex(vertices, cells[t, 1]), _vertex(vertices, cells[t, 2])
        u, v = _minus(b, a), _minus(c, a)
        cross = _cross(u, v)
        areas[t] = 0.5 * np.sqrt(_dot(cross, cross))
    return areas


@numba.njit(cache=True, nogil=True)
def corner_shares(cells, sizes, vertex_count):
    """Per vertex ``0 … vertex_count - 1``, the sum of ``size / corners`` over its cells (rows of
    vertex indices, ``sizes`` one per cell), added in the order of the cells' corners: what
    ``np.bincount(cells.ravel(), np.repeat(sizes / corners, corners), vertex_count)`` gives.
    ValueError for a corner index out of range, or sizes that are not one per cell of corners."""
    if len(sizes) != len(cells) or (len(cells) and cells.shape[1] == 0):
        raise ValueError("corner_shares: needs one size per cell, and cells of at least one corner")
    if vertex_count < 0:
        raise ValueError("corner_shares: the vertex count is negative")
    shares = np.zeros(vertex_count)
    corners = cells.shape[1]
    for cell in range(len(cells)):
        share = sizes[cell] / corners
        for corner in range(corners):
            v = cells[cell, corner]
            if not 0 <= v < vertex_count:
                raise ValueError("corner_shares: a cell's corner index is out of range")
            shares[v] += share
    return shares


# --- rays from one centre -----------------------------------------------------------------------


@numba.njit(cache=True, nogil=True)
def ray_cells(vertices, cells, centre):
    """What rays from ``centre`` need of each cell (triangles: 3 vertex indices; segments: 2) of
    ``vertices`` (rows x, y, z in mm; segments in the plane z = 0) for :func:`radial_gaps`:
    ``(cell_dirs, reach, frames, numerators)``.

    ``cell_dirs``: unit mean direction of the cell's corners as seen from ``centre``; ``reach``:
    the largest chord between it and a corner's direction (2 beyond 1, where the cap may no longer
    hold the cell), widened by a relative 1e-9 and 1e-12 so that a ray through a corner stays
    in despite rounding. ``frames`` (3 × 3) and ``numerators``: Möller–Trumbore with the ray's
    origin at ``centre``: for a ray of direction ``d`` and ``det = d · frames[k, 0]`` the
    barycentric coordinates of the crossing are ``d · frames[k, 1:] / det`` (the segment
    parameter and 0 for a segment) and its distance along the ray ``numerators[k] / det``.
    ValueError for a vertex index out of range."""
    corners = cells.shape[1]
    if vertices.shape[1] != 3 or len(centre) != 3 or corners not in (2, 3):
        raise ValueError("ray_cells: needs vertices of 3 components and cells of 2 or 3 corners")
    m = len(cells)
    cell_dirs, reach = np.zeros((m, 3)), np.empty(m)
    frames, numerators = np.zeros((m, 3, 3)), np.empty(m)
    seen = np.empty((3, 3))  # per corner: position relative to centre
    unit = np.empty((3, 3))
    for k in range(m):
        for c in range(corners):
            if not 0 <= cells[k, c] < len(vertices):
                raise ValueError("ray_cells: a cell's vertex index is out of range")
            for axis in range(3):
                seen[c, axis] = vertices[cells[k, c], axis] - centre[axis]
            length = max(np.sqrt(seen[c, 0] ** 2 + seen[c, 1] ** 2 + seen[c, 2] ** 2), 1e-300)
            for axis in range(3):
                unit[c, axis] = seen[c, axis] / length
                cell_dirs[k, axis] += unit[c, axis]
        length = max(np.sqrt(cell_dirs[k, 0] ** 2 + cell_dirs[k, 1] ** 2 + cell_dirs[k, 2] ** 2), 1e-300)
        for axis in range(3):
            cell_dirs[k, axis] /= length
        chord = 0.0
        for c in range(corners):
            dx, dy, dz = unit[c, 0] - cell_dirs[k, 0], unit[c, 1] - cell_dirs[k, 1], unit[c, 2] - cell_dirs[k, 2]
            chord = max(chord, np.sqrt(dx * dx + dy * dy + dz * dz))
        reach[k] = (2.0 if chord > 1.0 else chord) * (1 + 1e-9) + 1e-12
        a = (seen[0, 0], seen[0, 1], seen[0, 2])
        e1 = _minus(seen[1], a)
        if corners == 2:  # segment a + s e1 against the ray t d (in the plane): d x e1 = det, a x d = s det
            frames[k, 0, 0], frames[k, 0, 1] = e1[1], -e1[0]
            frames[k, 1, 0], frames[k, 1, 1] = -a[1], a[0]
            numerators[k] = a[0] * e1[1] - a[1] * e1[0]
        else:
            minus_a = (-a[0], -a[1], -a[2])
            e2 = _minus(seen[2], a)
            q = _cross(minus_a, e1)
            for row, vector in enumerate((_cross(e2, e1), _cross(e2, minus_a), q)):
                frames[k, row, 0], frames[k, row, 1], frames[k, row, 2] = vector
            numerators[k] = _dot(e2, q)
    return cell_dirs, reach, frames, numerators


@numba.njit(cache=True)
def direction_grid(cell_dirs, reach, finest):
    """Levels of buckets over the cube ``[-1, 1]**3`` of unit directions, for :func:`radial_gaps`.

    Cell ``k`` is seen from the rays' origin within the cap of chord ``reach[k]`` around the unit
    vector ``cell_dirs[k]`` (rows of 3). Level ``L`` has ``n = finest >> L`` buckets per axis of
    side ``2 / n``; a cell is filed in every bucket of its cap's bounding box on the first level
    whose buckets are at least ``reach[k]`` wide (at most 3 per axis; the last level is one
    bucket). Returns ``(base, first, members)``: bucket ``(i, j, l)`` of level ``L`` is
    ``key = base[L] + (i * n + j) * n + l`` and holds cells ``members[first[key]:first[key + 1]]``.
    ValueError for a ``finest`` that is not a power of 2 or for rows that are not 3 components."""
    if finest < 1 or finest & (finest - 1) != 0 or finest > MAX_DIRECTION_BUCKETS:
        raise ValueError("direction_grid: finest must be a power of 2 up to MAX_DIRECTION_BUCKETS")
    if cell_dirs.shape[1] != 3 or len(reach) != len(cell_dirs):
        raise ValueError("direction_grid: needs one reach per cell direction of 3 components")
    levels = 1
    while finest >> levels > 0:
        levels += 1
    base = np.zeros(levels + 1, dtype=np.int64)
    for level in range(levels):
        n = finest >> level
        base[level + 1] = base[level] + n * n * n
    keys = np.empty((len(cell_dirs), 3, 2), dtype=np.int64)  # per cell and axis: first and last bucket
    level_of = np.empty(len(cell_dirs), dtype=np.int64)
    first = np.zeros(base[levels] + 1, dtype=np.int64)
    for k in range(len(cell_dirs)):
        level = 0
        while level < levels - 1 and not reach[k] <= 2.0 / (finest >> level):  # NaN: the last level
            level += 1
        level_of[k] = level
        n = finest >> level
        for axis in range(3):
            keys[k, axis, 0] = _cell(cell_dirs[k, axis] - reach[k], -1.0, 2.0 / n, n)
            keys[k, axis, 1] = _cell(cell_dirs[k, axis] + reach[k], -1.0, 2.0 / n, n)
        for i in range(keys[k, 0, 0], keys[k, 0, 1] + 1):
            for j in range(keys[k, 1, 0], keys[k, 1, 1] + 1):
                for l in range(keys[k, 2, 0], keys[k, 2, 1] + 1):
                    first[base[level] + (i * n + j) * n + l + 1] += 1
    first = np.cumsum(first)
    members = np.empty(first[-1], dtype=np.int64)
    filled = first[:-1].copy()
    for k in range(len(cell_dirs)):
        n = finest >> level_of[k]
        for i in range(keys[k, 0, 0], keys[k, 0, 1] + 1):
            for j in range(keys[k, 1, 0], keys[k, 1, 1] + 1):
                for l in range(keys[k, 2, 0], keys[k, 2, 1] + 1):
                    key = base[level_of[k]] + (i * n + j) * n + l
                    members[filled[key]] = k
                    filled[key] += 1
    return base, first, members


@numba.njit(cache=True, nogil=True)
def radial_gaps(directions, zeta, cell_dirs, reach, frames, numerators, tolerance, finest, base, first, members):
    """Per ray ``t * directions[r]`` (t > 0, unit rows of 3, from the origin), the least
    ``|zeta[r] - t|`` over its hits of the cells, or ``zeta[r]`` when it hits none; returned as a
    1-tuple. A ray meets the cells filed in its bucket of each level of :func:`direction_grid`
    whose cap holds it (chord at most ``reach``); a hit is the Möller–Trumbore test on the cell's
    ``frames`` (3 × 3: the vector giving ``det``, then those giving the barycentric coordinates;
    zero rows for segments) and ``numerators`` (``t * det``), corners included up to
    ``tolerance``. ValueError for a grid that does not fit ``finest`` or a member out of range."""
    levels = len(base) - 1
    if levels < 1 or (finest >> (levels - 1)) != 1 or base[0] != 0 or len(first) != base[levels] + 1 \
            or first[-1] != len(members):
        raise ValueError("radial_gaps: the grid does not fit finest")
    for level in range(levels):
        if base[level + 1] - base[level] != (finest >> level) ** 3:
            raise ValueError("radial_gaps: the grid does not fit finest")
    if directions.shape[1] != 3 or cell_dirs.shape[1] != 3 or frames.shape[1] != 3 or frames.shape[2] != 3:
        raise ValueError("radial_gaps: needs rows and frames of 3 components")
    if len(zeta) != len(directions) or len(reach) != len(cell_dirs) or len(frames) != len(cell_dirs) \
            or len(numerators) != len(cell_dirs):
        raise ValueError("radial_gaps: one zeta per direction, one reach, frame and numerator per cell")
    for m in members:
        if not 0 <= m < len(cell_dirs):
            raise ValueError("radial_gaps: a member is out of range")
    for k in range(len(first) - 1):
        if not 0 <= first[k] <= first[k + 1]:
            raise ValueError("radial_gaps: bucket bounds are not increasing")
    gaps = zeta.copy()
    for r in range(len(directions)):
        dx, dy, dz = directions[r, 0], directions[r, 1], directions[r, 2]
        for level in range(levels):
            n = finest >> level
            i, j, l = _cell(dx, -1.0, 2.0 / n, n), _cell(dy, -1.0, 2.0 / n, n), _cell(dz, -1.0, 2.0 / n, n)
            key = base[level] + (i * n + j) * n + l
            for p in range(first[key], first[key + 1]):
                k = members[p]
                ex, ey, ez = dx - cell_dirs[k, 0], dy - cell_dirs[k, 1], dz - cell_dirs[k, 2]
                if not np.sqrt(ex * ex + ey * ey + ez * ez) <= reach[k]:
                    continue
                det = dx * frames[k, 0, 0] + dy * frames[k, 0, 1] + dz * frames[k, 0, 2]
                if not abs(det) > 1e-300:
                    continue
                inv = 1.0 / det
                u = (dx * frames[k, 1, 0] + dy * frames[k, 1, 1] + dz * frames[k, 1, 2]) * inv
                v = (dx * frames[k, 2, 0] + dy * frames[k, 2, 1] + dz * frames[k, 2, 2]) * inv
                t = numerators[k] * inv
                if u >= -tolerance and v >= -tolerance and u + v <= 1 + tolerance and t > 0:
                    gaps[r] = min(gaps[r], abs(zeta[r] - t))
    return (gaps,)


# --- windows on a surface -----------------------------------------------------------------------


@numba.njit(cache=True, nogil=True)
def window_deviations(centres, zeta, weights, radius, bucket_mm, low, shape, first, order, sorted_xyz):
    """Per centre (rows x, y, z in mm), over the vertices of a :func:`vertex_grid` within
    ``radius`` mm of it (squared distance at most ``radius ** 2``): the ``weights``-weighted mean
    of ``|zeta - m|``, with ``m`` their weighted mean of ``zeta``; returned as a 1-tuple (NaN for
    a window of zero weight). ValueError for a grid that is not one of :func:`vertex_grid`,
    per-vertex arrays of another length or a radius that is negative or NaN."""
    if centres.shape[1] != 3:
        raise ValueError("window_deviations: needs centres of 3 components")
    _check_grid(bucket_mm, low, shape, first, order, sorted_xyz)
    if len(zeta) != len(order) or len(weights) != len(order):
        raise ValueError("window_deviations: one zeta and one weight per vertex of the grid")
    if not radius >= 0:  # also NaN
        raise ValueError("window_deviations: the radius must be a number >= 0 (mm)")
    for vertex in order:
        if not 0 <= vertex < len(order):
            raise ValueError("window_deviations: a vertex of the grid is out of range")
    limit = radius ** 2
    widest = max(shape[0], shape[1], shape[2])
    rings = int(np.ceil(radius / bucket_mm)) if radius / bucket_mm < widest else widest  # no int overflow
    xs, ys, zs = sorted_xyz[0], sorted_xyz[1], sorted_xyz[2]
    result = np.empty(len(centres))
    for c in range(len(centres)):
        x, y, z = centres[c, 0], centres[c, 1], centres[c, 2]
        i, j, k = _cells(x, y, z, low, bucket_mm, shape)
        start, stop = max(k - rings, 0), min(k + rings, shape[2] - 1)
        total, moment, deviation = 0.0, 0.0, 0.0
        for stage in range(2):  # the window's mean, then the mean deviation from it
            mean = moment / total if stage == 1 and total > 0 else 0.0
            for a in range(max(i - rings, 0), min(i + rings, shape[0] - 1) + 1):
                for b in range(max(j - rings, 0), min(j + rings, shape[1] - 1) + 1):
                    column = (a * shape[1] + b) * shape[2]
                    for n in range(first[column + start], first[column + stop + 1]):
                        if (x - xs[n]) ** 2 + (y - ys[n]) ** 2 + (z - zs[n]) ** 2 <= limit:
                            vertex = order[n]
                            if stage == 0:
                                total += weights[vertex]
                                moment += weights[vertex] * zeta[vertex]
                            else:
                                deviation += weights[vertex] * abs(zeta[vertex] - mean)
        result[c] = deviation / total if total > 0 else np.nan
    return (result,)


def compile_roughness_kernels() -> None:
    """Compile, or load from numba's disk cache, the kernels of :mod:`segmetrics.metrics.roughness`
    (:func:`ray_cells`, :func:`direction_grid`, :func:`radial_gaps`, :func:`window_deviations`)
    on one triangle (the argument types are those of every call)."""
    corners = np.eye(3)
    cells = ray_cells(corners, np.array([[0, 1, 2]], dtype=np.int64), np.zeros(3))
    radial_gaps(np.ones((1, 3)) / np.sqrt(3), np.ones(1), *cells, 1e-9, 1, *direction_grid(cells[0], cells[1], 1))
    window_deviations(corners, np.ones(3), np.ones(3), 1.0, 1.0, *vertex_grid(corners, 1.0))


# --- 2-D slice contours and slice-wise MSI ----------------------------------------------------
#
# Marching squares on a label image, nearest-point distances between two point sets and the
# even-odd inside test, for :func:`segmetrics.spatial.mesh.contours_2d` and :mod:`segmetrics.metrics.msi`. Each
# gives bit for bit what the NumPy / scikit-image / SciPy code it replaces gives (the same
# arithmetic in the same order), so the metrics do not move.

#: Marching-squares segments of a cell by case (bit 1: upper-left pixel is foreground, 2: upper
#: right, 4: lower left, 8: lower right), as ``(from, to)`` edge pairs in the order
#: :func:`skimage.measure.find_contours` emits them with ``fully_connected="low"`` (foreground
#: 4-connected); edges 0 top, 1 bottom, 2 left, 3 right; -1 pads.
_SQUARE_SEGMENTS = np.array([
    [-1, -1, -1, -1], [0, 2, -1, -1], [3, 0, -1, -1], [3, 2, -1, -1], [2, 1, -1, -1], [0, 1, -1, -1],
    [3, 0, 2, 1], [3, 1, -1, -1], [1, 3, -1, -1], [0, 2, 1, 3], [1, 0, -1, -1], [1, 2, -1, -1],
    [2, 3, -1, -1], [0, 3, -1, -1], [2, 0, -1, -1], [-1, -1, -1, -1]], dtype=np.int64)


#: Most pieces :func:`label_contours` cuts one segment into.
MAX_PIECES_PER_SEGMENT = 2**20


@numba.njit(cache=True, nogil=True)
def label_contours(labels, origins, scale, max_length):
    """Closed boundaries (marching squares at level 0.5) of every object of a 2-D label image.

    ``labels`` (rows, cols) int: 0 background, objects 1..n, the first and last row and column
    background. Each boundary is what :func:`skimage.measure.find_contours` returns for the object
    alone, padded (same points, same first point, same direction, objects' boundaries in the same
    order), without the closing point, less the object's ``origins[label]`` (row, col; pixels),
    times ``scale`` (mm per pixel, row and column), then, when ``max_length`` > 0, with each
    segment cut into ``ceil(length / max_length)`` equal pieces (mm); ValueError when that is more
    than :data:`MAX_PIECES_PER_SEGMENT`.

    Returns ``(points (P, 2) mm, lengths (P,) mm of the segment starting at each point,
    first (C + 1,) index of each boundary's first point, label (C,) of each boundary)``, boundaries
    in the order of their first segment in a row-major scan of the cells.
    """
    table = _SQUARE_SEGMENTS
    rows, cols = labels.shape
    if labels.size == 0:
        raise ValueError("label_contours: the label image is empty")
    if labels.min() < 0 or origins.shape[0] <= labels.max() or origins.shape[1] != 2 or len(scale) != 2:
        raise ValueError("label_contours: needs labels >= 0, an origin (row, col) per label and a scale of 2")
    for r in range(rows):  # boundaries must close inside the image
        if labels[r, 0] != 0 or labels[r, cols - 1] != 0:
            raise ValueError("label_contours: the first and last column must be background (pad the labels)")
    for c in range(cols):
        if labels[0, c] != 0 or labels[rows - 1, c] != 0:
            raise ValueError("label_contours: the first and last row must be background (pad the labels)")
    cells = max(rows - 1, 0) * max(cols - 1, 0)
    seg_from = np.empty(2 * cells, np.int64)
    seg_to = np.empty(2 * cells, np.int64)
    leaving = np.full(2 * rows * cols, -1, np.int64)  # the segment leaving each edge vertex
    count = 0
    for r in range(rows - 1):
        for c in range(cols - 1):
            case = ((labels[r, c] > 0) + 2 * (labels[r, c + 1] > 0) + 4 * (labels[r + 1, c] > 0)
                    + 8 * (labels[r + 1, c + 1] > 0))
            for s in range(0, 4, 2):
                if table[case, s] < 0:
                    break
                for end in range(2):
                    edge = table[case, s + end]
                    # vertex ids: 2 * pixel (horizontal edge to its right neighbour) + 1 (vertical edge below it)
                    if edge == 0:
                        vertex = 2 * (r * cols + c)
                    elif edge == 1:
                        vertex = 2 * ((r + 1) * cols + c)
                    elif edge == 2:
                        vertex = 2 * (r * cols + c) + 1
                    else:
                        vertex = 2 * (r * cols + c + 1) + 1
                    if end == 0:
                        seg_from[count] = vertex
                        leaving[vertex] = count
                    else:
                        seg_to[count] = vertex
                count += 1
    # cycles: first segment in scan order; skimage starts each at the end of its last segment
    visited = np.zeros(count, np.bool_)
    cycle_start = np.empty(count, np.int64)
    cycle_size = np.empty(count, np.int64)
    cycles = 0
    for first in range(count):
        if visited[first]:
            continue
        last, size, segment = first, 0, first
        while True:
            visited[segment] = True
            last = max(last, segment)
            size += 1
            segment = leaving[seg_to[segment]]
            if segment == first:
                break
            if segment < 0 or visited[segment]:  # an open or merging boundary: never from the table, but no endless walk
                raise ValueError("label_contours: a boundary does not close")
        cycle_start[cycles] = seg_to[last]
        cycle_size[cycles] = size
        cycles += 1
    total = 0
    for k in range(cycles):
        total += cycle_size[k]
    raw = np.empty((total, 2))
    label = np.empty(cycles, np.int64)
    raw_first = np.zeros(cycles + 1, np.int64)
    for k in range(cycles):
        vertex = cycle_start[k]
        pixel = vertex // 2
        r, c = pixel // cols, pixel % cols
        other = labels[r + 1, c] if vertex % 2 else labels[r, c + 1]
        label[k] = max(labels[r, c], other)
        origin_r, origin_c = origins[label[k], 0], origins[label[k], 1]
        at = raw_first[k]
        for i in range(cycle_size[k]):
            pixel = vertex // 2
            r, c = pixel // cols, pixel % cols
            if vertex % 2:
                raw[at + i, 0], raw[at + i, 1] = r + 0.5, float(c)
            else:
                raw[at + i, 0], raw[at + i, 1] = float(r), c + 0.5
            raw[at + i, 0] = (raw[at + i, 0] - origin_r) * scale[0]
            raw[at + i, 1] = (raw[at + i, 1] - origin_c) * scale[1]
            vertex = seg_to[leaving[vertex]]
        raw_first[k + 1] = at + cycle_size[k]
    if max_length > 0:
        pieces = np.empty(total, np.int64)
        first = np.zeros(cycles + 1, np.int64)
        for k in range(cycles):
            size = 0
            for i in range(raw_first[k], raw_first[k + 1]):
                j = i + 1 if i + 1 < raw_first[k + 1] else raw_first[k]
                d0, d1 = raw[j, 0] - raw[i, 0], raw[j, 1] - raw[i, 1]
                cuts = np.ceil(np.sqrt(d0 * d0 + d1 * d1) / max_length)
                if not cuts <= MAX_PIECES_PER_SEGMENT:  # also NaN (a scale that is not finite)
                    raise ValueError("label_contours: max_length too small for the segments (or a scale not finite)")
                pieces[i] = max(1, int(cuts))
                size += pieces[i]
            first[k + 1] = first[k] + size
        points = np.empty((first[cycles], 2))
        at = 0
        for k in range(cycles):
            for i in range(raw_first[k], raw_first[k + 1]):
                j = i + 1 if i + 1 < raw_first[k + 1] else raw_first[k]
                for piece in range(pieces[i]):
                    fraction = piece / pieces[i]
                    points[at, 0] = raw[i, 0] + fraction * (raw[j, 0] - raw[i, 0])
                    points[at, 1] = raw[i, 1] + fraction * (raw[j, 1] - raw[i, 1])
                    at += 1
    else:
        points, first = raw, raw_first
    lengths = np.empty(len(points))
    for k in range(cycles):
        for i in range(first[k], first[k + 1]):
            j = i + 1 if i + 1 < first[k + 1] else first[k]
            d0, d1 = points[j, 0] - points[i, 0], points[j, 1] - points[i, 1]
            lengths[i] = np.sqrt(d0 * d0 + d1 * d1)
    return points, lengths, first, label


@numba.njit(cache=True, nogil=True)
def _nearest_in_grid(queries, points):
    """For each query (rows, 2-D): the smallest squared distance ``dx² + dy²`` to ``points``, the
    index of a point that near (-1 without points) and whether several are. The points go into
    square buckets (about sqrt(N) along the longer side); a query scans rings of buckets around
    its own (the nearest one when outside) until the buckets left are all farther than the best
    distance found, so that every point as near is seen."""
    best = np.full(len(queries), np.inf)
    nearest = np.full(len(queries), -1, np.int64)
    tied = np.zeros(len(queries), np.bool_)
    if len(points) == 0:
        return best, nearest, tied
    if not (np.all(np.abs(points) <= MAX_COORDINATE_MM) and np.all(np.abs(queries) <= MAX_COORDINATE_MM)):  # also NaN
        raise ValueError("nearest_between: the points must be finite and within MAX_COORDINATE_MM (1e150 mm), so that "
                         "their squared distances stay below the largest float")
    low_x, low_y = points[:, 0].min(), points[:, 1].min()
    extent = max(points[:, 0].max() - low_x, points[:, 1].max() - low_y)
    bucket = extent / np.sqrt(len(points))
    if not bucket > 0:  # the points at one place, or within a float's rounding of it
        bucket = 1.0
    shape_x = int((points[:, 0].max() - low_x) / bucket) + 1
    shape_y = int((points[:, 1].max() - low_y) / bucket) + 1
    keys = np.empty(len(points), np.int64)
    first = np.zeros(shape_x * shape_y + 1, np.int64)  # points of bucket key: order[first[key]:first[key + 1]]
    for n in range(len(points)):
        keys[n] = _cell(points[n, 0], low_x, bucket, shape_x) * shape_y + _cell(points[n, 1], low_y, bucket, shape_y)
        first[keys[n] + 1] += 1
    first = np.cumsum(first)
    order, filled = np.empty(len(points), np.int64), first[:-1].copy()
    for n in range(len(points)):
        order[filled[keys[n]]] = n
        filled[keys[n]] += 1
    margin = 1e-9 * bucket  # rounding of a point's bucket and of the bounds below
    for q in range(len(queries)):
        x, y = queries[q, 0], queries[q, 1]
        i, j = _cell(x, low_x, bucket, shape_x), _cell(y, low_y, bucket, shape_y)
        for ring in range(max(shape_x, shape_y)):
            for a in range(max(i - ring, 0), min(i + ring, shape_x - 1) + 1):
                edge = a == i - ring or a == i + ring
                for b in range(max(j - ring, 0), min(j + ring, shape_y - 1) + 1):
                    if not edge and b != j - ring and b != j + ring:
                        continue  # inside the ring: seen before
                    for n in range(first[a * shape_y + b], first[a * shape_y + b + 1]):
                        p = order[n]
                        d0, d1 = points[p, 0] - x, points[p, 1] - y
                        squared = d0 * d0 + d1 * d1
                        if squared < best[q]:
                            best[q], nearest[q], tied[q] = squared, p, False
                        elif squared == best[q]:
                            tied[q] = True
            # nearest distance to a bucket outside the square scanned so far
            beyond = min(_reach(x, low_x, i, shape_x, ring, bucket), _reach(y, low_y, j, shape_y, ring, bucket)) - margin
            if beyond == np.inf or (beyond > 0 and beyond * beyond > best[q]):
                break
    return best, nearest, tied


@numba.njit(cache=True, nogil=True)
def nearest_between(test_points, reference_points):
    """Nearest-point distances between two 2-D point sets (rows, mm), exact.

    Returns ``(forward (N,)`` distance from each test point to the nearest reference point,
    ``back (M,)`` from each reference point to the nearest test point, ``nearest (M,)`` the index
    of that test point (any of them on ties), ``tied (M,)`` whether several test points are that
    near). Distances are the square root of the smallest ``dx² + dy²``, as
    :class:`scipy.spatial.cKDTree` gives them. Without points on the other side: inf and index -1.
    ValueError for coordinates that are not finite or beyond :data:`MAX_COORDINATE_MM`.
    """
    if test_points.shape[1] != 2 or reference_points.shape[1] != 2:
        raise ValueError("nearest_between: needs rows of 2 components (mm)")
    forward = _nearest_in_grid(test_points, reference_points)[0]
    back, nearest, tied = _nearest_in_grid(reference_points, test_points)
    return np.sqrt(forward), np.sqrt(back), nearest, tied


@numba.njit(cache=True, nogil=True, inline="always")
def _first_index(ascending, value, above):
    """The first index of ``ascending`` whose value is > ``value`` (``above``) or >= it, else its
    length (:func:`numpy.searchsorted` ``side="right"`` or ``"left"``)."""
    low, high = 0, len(ascending)
    while low < high:
        middle = (low + high) // 2
        if ascending[middle] < value or (above and ascending[middle] == value):
            low = middle + 1
        else:
            high = middle
    return low


@numba.njit(cache=True, nogil=True)
def inside_contours(points, order, vertices, first, eps):
    """Even-odd inside test of 2-D points against closed contours (``vertices[first[k]:first[k + 1]]``
    is contour k): a point is inside when inside an odd number of them, each decided as
    :func:`skimage.measure.points_in_poly` decides it (the same crossing tests on the same
    numbers, each edge against the points whose second coordinate lies in its extent widened
    by ``eps``; on an edge or within ``eps`` of a vertex counts as inside). ``order`` sorts the
    points by their second coordinate (``np.argsort(points[:, 1])``; ValueError otherwise)."""
    if points.shape[1] != 2 or vertices.shape[1] != 2:
        raise ValueError("inside_contours: needs points and vertices of 2 components")
    if len(first) == 0 or first[0] != 0 or first[-1] != len(vertices) or np.any(first[1:] < first[:-1]):
        raise ValueError("inside_contours: first must run from 0 to the number of vertices, never decreasing")
    if len(order) != len(points) or (len(order) and (order.min() < 0 or order.max() >= len(points))):
        raise ValueError("inside_contours: order must index the points")
    ys = points[order, 1]
    if np.any(ys[1:] < ys[:-1]):  # the search of each edge's points below relies on it
        raise ValueError("inside_contours: order must sort the points by their second coordinate")
    inside = np.zeros(len(points), np.bool_)
    right = np.zeros(len(points), np.int64)
    left = np.zeros(len(points), np.int64)
    near_vertex = np.zeros(len(points), np.bool_)
    for k in range(len(first) - 1):
        right[:] = 0
        left[:] = 0
        near_vertex[:] = False
        for e in range(first[k], first[k + 1]):
            q = e - 1 if e > first[k] else first[k + 1] - 1  # the edge runs from the previous vertex q to e
            xp, yp, xq, yq = vertices[e, 0], vertices[e, 1], vertices[q, 0], vertices[q, 1]
            for n in range(_first_index(ys, min(yp, yq) - eps, False), _first_index(ys, max(yp, yq) + eps, True)):
                p = order[n]
                x0, y0, x1, y1 = xp - points[p, 0], yp - points[p, 1], xq - points[p, 0], yq - points[p, 1]
                if abs(x0) < eps and abs(y0) < eps:
                    near_vertex[p] = True
                goes_right, goes_left = (y0 > 0) != (y1 > 0), (y0 < 0) != (y1 < 0)
                if goes_right or goes_left:
                    cross = (x0 * y1 - x1 * y0) / (y1 - y0)
                    if goes_right and cross > 0:
                        right[p] += 1
                    if goes_left and cross < 0:
                        left[p] += 1
        for p in range(len(points)):
            if near_vertex[p] or right[p] % 2 == 1 or left[p] % 2 == 1:
                inside[p] = not inside[p]
    return inside


@numba.njit(cache=True, nogil=True)
def object_statistics(labels, count):
    """Per object of a 2-D label image (0 background, objects 1..``count``): ``(sizes (count,)
    pixels, sums (count, 2) of the pixels' row and column indices, corners (count + 1, 2) the
    row and column (pixels) where the bounding box of label k starts at ``corners[k]``, with
    ``corners[0]`` = (0, 0) for the background)``, the ``origins`` of :func:`label_contours`.
    ValueError for labels outside 0..count, or a negative count."""
    if count < 0:
        raise ValueError("object_statistics: the count is negative")
    sizes = np.zeros(count, np.int64)
    sums = np.zeros((count, 2), np.int64)
    corners = np.zeros((count + 1, 2), np.int64)
    corners[1:] = np.iinfo(np.int64).max
    for r in range(labels.shape[0]):
        for c in range(labels.shape[1]):
            label = labels[r, c]
            if label == 0:
                continue
            if not 0 < label <= count:
                raise ValueError("object_statistics: a label is outside 0..count")
            sizes[label - 1] += 1
            sums[label - 1, 0] += r
            sums[label - 1, 1] += c
            corners[label, 0] = min(corners[label, 0], r)
            corners[label, 1] = min(corners[label, 1], c)
    return sizes, sums, corners


@numba.njit(cache=True, nogil=True)
def label_pairs(first_labels, first_count, second_labels, second_count):
    """Pixels of each pair of labels (0..count on each side) of two 2-D label images of one shape:
    ``(first_count + 1, second_count + 1)`` counts. ValueError for other shapes or labels."""
    if first_labels.shape != second_labels.shape:
        raise ValueError("label_pairs: the label images differ in shape")
    if first_count < 0 or second_count < 0:
        raise ValueError("label_pairs: a count is negative")
    counts = np.zeros((first_count + 1, second_count + 1), np.int64)
    for r in range(first_labels.shape[0]):
        for c in range(first_labels.shape[1]):
            a, b = first_labels[r, c], second_labels[r, c]
            if not (0 <= a <= first_count and 0 <= b <= second_count):
                raise ValueError("label_pairs: a label is outside 0..count")
            counts[a, b] += 1
    return counts


def compile_contour_kernels() -> None:
    """Compile, or load from numba's disk cache, the 2-D contour and slice-wise MSI kernels
    (:func:`label_contours`, :func:`object_statistics`, :func:`label_pairs`, :func:`nearest_between`,
    :func:`inside_contours`) with the argument
    types of every call."""
    labels = np.zeros((4, 4), np.int32)
    labels[1:3, 1:3] = 1
    points, _, first, _ = label_contours(labels, object_statistics(labels, 1)[2], np.ones(2), 0.25)
    label_pairs(labels, 1, labels, 1)
    nearest_between(points, points)
    inside_contours(points, np.argsort(points[:, 1]), points, first, 1e-12)
