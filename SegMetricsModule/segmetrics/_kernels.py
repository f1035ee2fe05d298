"""Compiled kernels of :mod:`segmetrics.mesh`: the blur and clamp of the surface field, triangle areas,
and for :func:`segmetrics.mesh.distances_to_surface` the nearest vertex of a surface to each
query point (a grid of buckets) and the closest point by a walk over the surface's cells.

Points are 3-component rows in mm (2-D contours padded with a zero third component); cells are
triangles (3 vertex indices) or segments (2). The kernels are compiled with numba (cached on disk
after the first call) and release the GIL; :func:`in_threads` runs one on the query points on a
pool of a thread per core (plain threads: safe in forked processes, unlike numba's OpenMP layer).
"""
import os
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np

# --- threads ------------------------------------------------------------------------------------

#: Chunks per core that :func:`in_threads` splits the query points into, and their fewest points.
CHUNKS_PER_THREAD = 4
MIN_POINTS_PER_CHUNK = 1024


def in_threads(kernel, per_point: tuple, shared: tuple) -> tuple:
    """``kernel(*per_point, *shared)`` with the ``per_point`` arrays split row-wise into chunks
    (:data:`CHUNKS_PER_THREAD` per core, so that a costly region does not keep one core busy
    alone) run on :func:`thread_pool`; the kernel's output arrays are joined back in order."""
    chunks = min(_THREADS * CHUNKS_PER_THREAD, max(len(per_point[0]) // MIN_POINTS_PER_CHUNK, 1))
    if chunks == 1:
        return kernel(*per_point, *shared)
    bounds = np.linspace(0, len(per_point[0]), chunks + 1).astype(int)
    parts = list(thread_pool().map(lambda lo, hi: kernel(*(a[lo:hi] for a in per_point), *shared), bounds[:-1], bounds[1:]))
    return tuple(np.concatenate(outputs) for outputs in zip(*parts))


_THREADS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
_POOL = []


def set_thread_count(count: int) -> None:
    """Run the kernels on ``count`` threads from now on (batch workers share the cores)."""
    global _THREADS
    _THREADS = max(1, count)
    for pool in _POOL:  # a pool already started lets its threads end
        pool.shutdown(wait=False)
    _POOL.clear()


def thread_pool() -> ThreadPoolExecutor:
    """The package's thread pool (one thread per core), started on first use. Its tasks must not
    wait for other tasks of the pool."""
    if not _POOL:
        _POOL.append(ThreadPoolExecutor(_THREADS, thread_name_prefix="segmetrics"))
    return _POOL[0]


if hasattr(os, "register_at_fork"):  # a forked child has none of the parent's threads
    os.register_at_fork(after_in_child=_POOL.clear)


# --- closest point: the walk --------------------------------------------------------------------

#: Closest-feature codes. Triangles: 0–2 vertex a, b, c; 3 edge ab; 4 edge ac; 5 edge bc; 6 the
#: face. Segments: 0–1 vertex a, b; 2 the segment.
FACE = 6
#: Longest walk, in moves of about one cell (1–2 are usual).
MAX_WALK_STEPS = 32
#: Cell-local corners of each feature code (-1 = none), for triangles (3 columns) and segments (2).
FEATURE_CORNERS = {
    3: np.array([[0, -1, -1], [1, -1, -1], [2, -1, -1], [0, 1, -1], [0, 2, -1], [1, 2, -1], [0, 1, 2]]),
    2: np.array([[0, -1], [1, -1], [0, 1]]),
}


@numba.njit(cache=True, nogil=True)
def _triangle(p, a, b, c):
    """``(p - q, feature code)`` for the point ``q`` of triangle ``abc`` closest to ``p`` (3-tuples
    of mm): the Voronoi regions of Ericson, *Real-Time Collision Detection* (2005), section 5.1.5."""
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
    vc = d1 * d4 - d3 * d2
    if vc <= 0 and d1 >= 0 and d3 <= 0:
        return _step(ap, d1 / (d1 - d3), ab, 0.0, ac), 3
    vb = d5 * d2 - d1 * d6
    if vb <= 0 and d2 >= 0 and d6 <= 0:
        return _step(ap, 0.0, ab, d2 / (d2 - d6), ac), 4
    va = d3 * d6 - d5 * d4
    if va <= 0 and d4 - d3 >= 0 and d5 - d6 >= 0:
        w = (d4 - d3) / ((d4 - d3) + (d5 - d6))
        return _step(ap, 1.0 - w, ab, w, ac), 5
    denominator = va + vb + vc
    return _step(ap, vb / denominator, ab, vc / denominator, ac), FACE


@numba.njit(cache=True, nogil=True)
def _segment(p, a, b):
    """``(p - q, feature code)`` for the point ``q`` of segment ``ab`` closest to ``p``."""
    ab, ap = _minus(b, a), _minus(p, a)
    t = _dot(ap, ab) / _dot(ab, ab)
    if t <= 0:
        return ap, 0
    if t >= 1:
        return _minus(p, b), 1
    return _step(ap, t, ab, 0.0, ab), 2


@numba.njit(cache=True, nogil=True, inline="always")
def _minus(u, v):
    return (u[0] - v[0], u[1] - v[1], u[2] - v[2])


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


@numba.njit(cache=True, nogil=True)
def _closest_in_stars(p, centre_a, centre_b, points, cells, by_vertex, first, count, best):
    """Closest point to ``p`` among the cells around the vertices ``centre_a`` and ``centre_b``
    (-1 = none), if closer than ``best`` (squared mm): ``(squared distance, p - q, cell,
    feature)``; cell -1 when none is closer. The first closest cell wins ties."""
    offset, cell, feature = (0.0, 0.0, 0.0), -1, 0
    for centre in (centre_a, centre_b):
        if centre < 0:
            continue
        for k in range(first[centre], first[centre] + count[centre]):
            candidate = by_vertex[k]
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
    (rows), the cell holding ``q`` and the code of its feature there.

    ``by_vertex``, ``first``, ``count``: the cells around vertex ``v`` are
    ``by_vertex[first[v]:first[v] + count[v]]`` (:attr:`segmetrics.mesh.Surface.cells_by_vertex`).
    """
    offsets = np.zeros((len(queries), 3))
    found_cells = np.zeros(len(queries), dtype=np.int64)
    features = np.zeros(len(queries), dtype=np.int8)
    for i in range(len(queries)):
        p = _vertex(queries, i)
        best, centre_a, centre_b = np.inf, nearest[i], -1
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
    return offsets, found_cells, features


# --- nearest vertex: a uniform grid of buckets ---------------------------------------------------

#: Vertices a bucket of :func:`vertex_grid` holds on average on a flat patch of surface.
VERTICES_PER_BUCKET = 12
#: Buckets :func:`nearest_vertices` searches out from a point before giving up on it.
MAX_RINGS = 4


@numba.njit(cache=True)
def vertex_grid(points, bucket_mm):
    """Buckets of ``bucket_mm`` (cubes) holding the vertices ``points`` (rows, mm):
    ``(low corner, buckets per axis, first, order, sorted)``. ``sorted`` (3 rows x, y, z) holds
    the vertices bucket by bucket: those of bucket ``(i, j, k)`` are columns
    ``first[key]:first[key + 1]`` with ``key = (i * n[1] + j) * n[2] + k``, and ``order`` maps
    a column back to the vertex index."""
    low = np.empty(3)
    shape = np.empty(3, dtype=np.int64)
    for axis in range(3):
        low[axis] = points[:, axis].min()
        shape[axis] = int((points[:, axis].max() - low[axis]) / bucket_mm) + 1
    keys = np.empty(len(points), dtype=np.int64)
    for v in range(len(points)):
        i, j, k = _bucket(points[v, 0], points[v, 1], points[v, 2], low, bucket_mm)
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
def _bucket(x, y, z, low, bucket_mm):
    return int(np.floor((x - low[0]) / bucket_mm)), int(np.floor((y - low[1]) / bucket_mm)), int(np.floor((z - low[2]) / bucket_mm))


@numba.njit(cache=True, nogil=True, inline="always")
def _gap(value, low, index, bucket_mm):
    """Distance (mm) from a coordinate to the nearer face of its bucket along one axis."""
    inside = value - low - index * bucket_mm
    return min(inside, bucket_mm - inside)


@numba.njit(cache=True, nogil=True, inline="always")
def _outside(value, low, index, bucket_mm):
    """Distance (mm) from a coordinate to bucket ``index`` along one axis (0 within it)."""
    start = low + index * bucket_mm
    return max(start - value, value - start - bucket_mm, 0.0)


@numba.njit(cache=True, nogil=True)
def nearest_vertices(queries, bucket_mm, low, shape, first, order, sorted_xyz):
    """Index of the vertex nearest to each query point (rows, mm) and its squared distance (mm²).

    Scans the cube of buckets (:func:`vertex_grid`) around the point that holds every vertex as
    near as the previous point's nearest vertex (one bucket out for the first point, and more
    when nothing is found), and again farther out if the nearest vertex found may have a nearer
    one beyond; columns of buckets (along z) farther than the nearest vertex so far are skipped.
    Fastest for points in surface order (each near the one before). -1 for points farther than
    :data:`MAX_RINGS` buckets from every vertex."""
    nearest = np.full(len(queries), -1, dtype=np.int64)
    squared = np.full(len(queries), np.inf)
    xs, ys, zs = sorted_xyz[0], sorted_xyz[1], sorted_xyz[2]
    previous = -1
    for q in range(len(queries)):
        x, y, z = queries[q, 0], queries[q, 1], queries[q, 2]
        i, j, k = _bucket(x, y, z, low, bucket_mm)
        # every vertex within `reach` of the point lies in the cube `rings` buckets out
        gap = min(_gap(x, low[0], i, bucket_mm), _gap(y, low[1], j, bucket_mm), _gap(z, low[2], k, bucket_mm))
        best, found, rings = np.inf, -1, 1
        if previous >= 0:  # the previous point's nearest vertex bounds the search (points come in surface order)
            best, found = (xs[previous] - x) ** 2 + (ys[previous] - y) ** 2 + (zs[previous] - z) ** 2, previous
            rings = max(1, int(np.ceil((np.sqrt(best) - gap) / bucket_mm)))
            if rings > MAX_RINGS:
                best, found, rings = np.inf, -1, 1
        while rings <= MAX_RINGS:
            start, stop = max(k - rings, 0), min(k + rings, shape[2] - 1)
            for a in range(max(i - rings, 0), min(i + rings, shape[0] - 1) + 1):
                along_x = _outside(x, low[0], a, bucket_mm) ** 2
                if along_x >= best:
                    continue
                for b in range(max(j - rings, 0), min(j + rings, shape[1] - 1) + 1):
                    if along_x + _outside(y, low[1], b, bucket_mm) ** 2 >= best:
                        continue
                    column = (a * shape[1] + b) * shape[2]  # its buckets start..stop are one run of vertices
                    for n in range(first[column + start], first[column + stop + 1]):
                        d = (xs[n] - x) ** 2 + (ys[n] - y) ** 2 + (zs[n] - z) ** 2
                        if d < best:
                            best, found = d, n
            reach = rings * bucket_mm + gap
            if found >= 0 and best <= reach * reach:
                nearest[q], squared[q], previous = order[found], best, found
                break
            rings = rings + 1 if found < 0 else max(rings + 1, int(np.ceil((np.sqrt(best) - gap) / bucket_mm)))
    return nearest, squared


@numba.njit(cache=True)
def cells_by_vertex(cells, vertex_count):
    """``(cells, first, count)``: the cells around vertex ``v`` are ``cells[first[v]:first[v] + count[v]]``,
    in increasing order (a counting sort of the cells' corners)."""
    count = np.zeros(vertex_count, dtype=np.int64)
    for v in cells.ravel():
        count[v] += 1
    first = np.cumsum(count) - count
    filled, by_vertex = first.copy(), np.empty(cells.size, dtype=np.int64)
    for cell in range(len(cells)):
        for v in cells[cell]:
            by_vertex[filled[v]] = cell
            filled[v] += 1
    return by_vertex, first, count


# --- surface building ---------------------------------------------------------------------------


def gaussian_weights(sigma_voxels: float) -> np.ndarray:
    """The sampled Gaussian of ``sigma_voxels`` (> 0) truncated at 3 sigma, summing to 1 (scipy's kernel)."""
    radius = int(3.0 * sigma_voxels + 0.5)
    weights = np.exp(-0.5 * (np.arange(-radius, radius + 1) / sigma_voxels) ** 2)
    return weights / weights.sum()


def gaussian_blur(mask: np.ndarray, sigma_voxels: float, dtype) -> np.ndarray:
    """Gaussian blur of a 2-D or 3-D boolean mask, zero outside, as ``scipy.ndimage.gaussian_filter``
    with ``mode="constant"`` and ``truncate=3`` (the same sampled kernel, equal to rounding in
    ``dtype``), about three times faster: each axis is one pass of vectorised rows."""
    if sigma_voxels <= 0:
        return mask.astype(dtype)
    weights = gaussian_weights(sigma_voxels).astype(dtype)
    volume = np.ascontiguousarray(mask).reshape((1,) * (3 - mask.ndim) + mask.shape).view(np.uint8)
    blurred = np.empty(volume.shape, dtype)
    _blur_rows(volume, weights, blurred)
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
    """Area of each triangle ``cells`` (rows of 3 vertex indices) of ``vertices`` (rows x, y, z)."""
    areas = np.empty(len(cells))
    for t in range(len(cells)):
        a, b, c = _vertex(vertices, cells[t, 0]), _vertex(vertices, cells[t, 1]), _vertex(vertices, cells[t, 2])
        u, v = _minus(b, a), _minus(c, a)
        cross = (u[1] * v[2] - u[2] * v[1], u[2] * v[0] - u[0] * v[2], u[0] * v[1] - u[1] * v[0])
        areas[t] = 0.5 * np.sqrt(_dot(cross, cross))
    return areas
