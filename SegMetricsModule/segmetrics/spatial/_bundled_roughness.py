"""The roughness kernels of :mod:`segmetrics.spatial._kernels` on numpy and scipy only, for a Python
without numba (3D Slicer's bundled packages): same names, arguments and values, chosen by
:func:`segmetrics.spatial.accelerator.kernels` in :mod:`segmetrics.metrics.roughness`.

Each twin runs the compiled kernel's arithmetic in the same order on whole arrays, so the values
are the same to the last bit: :func:`ray_cells` and :func:`direction_grid` cell by cell,
:func:`radial_gaps` on every (ray, candidate cell) pair the direction buckets give (the same cap
test, the same Möller–Trumbore with the same tolerance), :func:`window_deviations` on the window
members in the order the compiled bucket scan visits them (increasing grid column), found by a
KD-tree (:class:`scipy.spatial.cKDTree`) and kept by the same squared-distance test.

The constants shared by both implementations are defined here (this module imports no numba).
Points and directions are rows of 3 components (x, y, z) in mm; cells are triangles (3 vertex
indices) or segments (2, in the plane z = 0).
"""
import numpy as np
from scipy.spatial import cKDTree

#: Most buckets per axis of the finest level of :func:`direction_grid` (a power of 2).
MAX_DIRECTION_BUCKETS = 128
#: Most (ray, cell) pairs that :func:`radial_gaps` tests at once (a block of rays): blocks whose
#: work arrays stay in the processor's cache run several times faster than whole-surface arrays.
PAIRS_PER_BLOCK = 2**14
#: Most vertices that the compiled kernel's bucket scan visits for a block of window centres of
#: :func:`window_deviations` (the windows hold about a tenth of them: the block's memory bound).
SCANNED_PER_BLOCK = 2**18
#: Relative widening of the KD-tree's search radius: the squared-distance test decides membership.
_SEARCH_MARGIN = 1e-6


# --- rays from one centre -------------------------------------------------------------------------


def ray_cells(vertices, cells, centre):
    """What rays from ``centre`` need of each cell (triangles: 3 vertex indices; segments: 2) of
    ``vertices`` (rows x, y, z in mm; segments in the plane z = 0) for :func:`radial_gaps`:
    ``(cell_dirs, reach, frames, numerators)``, as :func:`segmetrics.spatial._kernels.ray_cells`
    (see there). ValueError for a vertex index out of range."""
    corners = cells.shape[1]
    if vertices.shape[1] != 3 or len(centre) != 3 or corners not in (2, 3):
        raise ValueError("ray_cells: needs vertices of 3 components and cells of 2 or 3 corners")
    if cells.size and not (cells.min() >= 0 and cells.max() < len(vertices)):
        raise ValueError("ray_cells: a cell's vertex index is out of range")
    m = len(cells)
    seen = [vertices[cells[:, c]] - centre for c in range(corners)]  # per corner: position relative to centre
    unit = [s / _length(s)[:, None] for s in seen]
    cell_dirs = sum(unit[1:], unit[0])
    cell_dirs = cell_dirs / _length(cell_dirs)[:, None]
    chord = np.zeros(m)
    for u in unit:  # the largest so far, kept when the next is NaN (as the compiled max does)
        distance = np.sqrt(_dot(u - cell_dirs, u - cell_dirs))
        chord = np.where(distance > chord, distance, chord)
    reach = np.where(chord > 1.0, 2.0, chord) * (1 + 1e-9) + 1e-12
    a = seen[0]
    e1 = seen[1] - a
    frames = np.zeros((m, 3, 3))
    if corners == 2:  # segment a + s e1 against the ray t d (in the plane): d x e1 = det, a x d = s det
        frames[:, 0, 0], frames[:, 0, 1] = e1[:, 1], -e1[:, 0]
        frames[:, 1, 0], frames[:, 1, 1] = -a[:, 1], a[:, 0]
        numerators = a[:, 0] * e1[:, 1] - a[:, 1] * e1[:, 0]
    else:
        minus_a = -a
        e2 = seen[2] - a
        q = _cross(minus_a, e1)
        frames[:, 0], frames[:, 1], frames[:, 2] = _cross(e2, e1), _cross(e2, minus_a), q
        numerators = _dot(e2, q)
    return cell_dirs, reach, frames, numerators


def direction_grid(cell_dirs, reach, finest):
    """Levels of buckets over the cube ``[-1, 1]**3`` of unit directions, for :func:`radial_gaps`:
    ``(base, first, members)``, as :func:`segmetrics.spatial._kernels.direction_grid` (see there),
    members in increasing order in each bucket. ValueError for a ``finest`` that is not a power of
    2 up to :data:`MAX_DIRECTION_BUCKETS` or for rows that are not 3 components."""
    if finest < 1 or finest & (finest - 1) != 0 or finest > MAX_DIRECTION_BUCKETS:
        raise ValueError("direction_grid: finest must be a power of 2 up to MAX_DIRECTION_BUCKETS")
    if cell_dirs.shape[1] != 3 or len(reach) != len(cell_dirs):
        raise ValueError("direction_grid: needs one reach per cell direction of 3 components")
    base = _level_bases(finest)
    level, low, high = _filing(cell_dirs, reach, finest)
    n = finest >> level
    span = high - low + 1
    origin = base[level] + (low[0] * n + low[1]) * n + low[2]  # key of the box's first bucket
    # every bucket (i, j, l) of each cell's box: its key is the origin's plus (di * n + dj) * n + dl
    cell, rank = _expand(span[0] * span[1] * span[2])
    plane = span[1].take(cell) * span[2].take(cell)
    row, dl = np.divmod(rank % plane, span[2].take(cell))
    width = n.take(cell)
    keys = origin.take(cell) + (rank // plane * width + row) * width + dl
    first = np.concatenate([[0], np.cumsum(np.bincount(keys, minlength=base[-1]))]).astype(np.int64)
    count = max(len(cell_dirs), 1)
    return base, first, np.sort(keys * count + cell) % count  # by bucket, then cell (each pair once)


def _level_bases(finest):
    """First bucket key of each level of a direction grid (level ``L``: ``(finest >> L)**3``
    buckets) and, last, their total."""
    sizes = [finest >> level for level in range(int(finest).bit_length())]
    return np.concatenate([[0], np.cumsum([n**3 for n in sizes])]).astype(np.int64)


def _filing(cell_dirs, reach, finest):
    """Where :func:`direction_grid` files each cell: its level (the first whose buckets are at
    least ``reach`` wide; NaN: the last) and the first and last bucket of its cap's bounding box
    on that level along each axis (arrays of shape (3, cells))."""
    levels = int(finest).bit_length()
    level = np.full(len(cell_dirs), levels - 1)
    for coarser in range(levels - 2, -1, -1):
        level[reach <= 2.0 / (finest >> coarser)] = coarser
    n = finest >> level
    low = np.array([_bucket(cell_dirs[:, axis] - reach, -1.0, 2.0 / n, n) for axis in range(3)])
    high = np.array([_bucket(cell_dirs[:, axis] + reach, -1.0, 2.0 / n, n) for axis in range(3)])
    return level, low, high


def radial_gaps(directions, zeta, cell_dirs, reach, frames, numerators, tolerance, finest, base, first, members):
    """Per ray ``t * directions[r]`` (t > 0, unit rows of 3, from the origin), the least
    ``|zeta[r] - t|`` over its hits of the cells, or ``zeta[r]`` when it hits none; returned as a
    1-tuple, as :func:`segmetrics.spatial._kernels.radial_gaps` (see there): the same (ray, cell)
    pairs, those of the ray's bucket on every level, in blocks of rays. ValueError for a grid that
    does not fit ``finest`` or a member out of range."""
    levels = len(base) - 1
    if levels < 1 or (finest >> (levels - 1)) != 1 or not np.array_equal(base, _level_bases(finest)) \
            or len(first) != base[levels] + 1 or first[-1] != len(members):
        raise ValueError("radial_gaps: the grid does not fit finest")
    if directions.shape[1] != 3 or cell_dirs.shape[1] != 3 or frames.shape[1] != 3 or frames.shape[2] != 3:
        raise ValueError("radial_gaps: needs rows and frames of 3 components")
    if len(zeta) != len(directions) or len(reach) != len(cell_dirs) or len(frames) != len(cell_dirs) \
            or len(numerators) != len(cell_dirs):
        raise ValueError("radial_gaps: one zeta per direction, one reach, frame and numerator per cell")
    if len(members) and not (members.min() >= 0 and members.max() < len(cell_dirs)):
        raise ValueError("radial_gaps: a member is out of range")
    if not (first[0] >= 0 and np.all(first[1:] >= first[:-1])):
        raise ValueError("radial_gaps: bucket bounds are not increasing")
    # the run of members of each ray's bucket on every level: members[starts[r, L]:][:counts[r, L]]
    keys = np.empty((len(directions), levels), dtype=np.int64)
    for level in range(levels):
        n = finest >> level
        i, j, l = (_bucket(directions[:, axis], -1.0, 2.0 / n, n) for axis in range(3))
        keys[:, level] = base[level] + (i * n + j) * n + l
    starts, counts = first[keys], first[keys + 1] - first[keys]
    cell_xyz = np.ascontiguousarray(cell_dirs.T, dtype=float)
    frame_rows = np.ascontiguousarray(frames.reshape(-1, 9).T, dtype=float)  # row 3 r + a: component a of frame row r
    gaps = zeta.copy()
    for block in _blocks(counts.sum(axis=1), PAIRS_PER_BLOCK):
        run, rank = _expand(counts[block].ravel())
        cell = members.take(starts[block].ravel().take(run) + rank)
        per_ray = counts[block].sum(axis=1)
        d = [np.repeat(directions[block, axis], per_ray) for axis in range(3)]
        ex, ey, ez = (d[axis] - cell_xyz[axis].take(cell) for axis in range(3))
        inside = np.flatnonzero(np.sqrt(ex * ex + ey * ey + ez * ez) <= reach.take(cell))
        ray = block.start + run.take(inside) // levels
        ray, t = _crossings([axis.take(inside) for axis in d], frame_rows, numerators, tolerance, ray, cell.take(inside))
        np.minimum.at(gaps, ray, np.abs(zeta.take(ray) - t))
    return (gaps,)


def _crossings(d, frames, numerators, tolerance, ray, cell):
    """The rays of the (ray, cell) pairs whose ray (directions ``d``: x, y, z of each pair) crosses
    the cell, and the distances along them: Möller–Trumbore in the arithmetic of the compiled
    kernel, on frames given as 9 rows (row ``3 r + a``: component ``a`` of frame row ``r``)."""
    dx, dy, dz = d
    det = dx * frames[0].take(cell) + dy * frames[1].take(cell) + dz * frames[2].take(cell)
    solvable = np.flatnonzero(np.abs(det) > 1e-300)
    ray, cell, dx, dy, dz, det = ray[solvable], cell[solvable], dx[solvable], dy[solvable], dz[solvable], det[solvable]
    inv = 1.0 / det
    u = (dx * frames[3].take(cell) + dy * frames[4].take(cell) + dz * frames[5].take(cell)) * inv
    v = (dx * frames[6].take(cell) + dy * frames[7].take(cell) + dz * frames[8].take(cell)) * inv
    t = numerators.take(cell) * inv
    hit = (u >= -tolerance) & (v >= -tolerance) & (u + v <= 1 + tolerance) & (t > 0)
    return ray[hit], t[hit]


# --- windows on a surface -------------------------------------------------------------------------


def window_deviations(centres, zeta, weights, radius, bucket_mm, low, shape, first, order, sorted_xyz):
    """Per centre (rows x, y, z in mm), over the vertices of a vertex grid
    (:func:`segmetrics.spatial._kernels.vertex_grid`) within ``radius`` mm of it (squared distance
    at most ``radius ** 2``): the ``weights``-weighted mean of ``|zeta - m|``, with ``m`` their
    weighted mean of ``zeta``; returned as a 1-tuple (NaN for a window of zero weight), as
    :func:`segmetrics.spatial._kernels.window_deviations`. The sums run over each window's vertices
    in the grid's column order, as the compiled scan adds them. ValueError for a grid whose vertex
    coordinates or indices do not fit the per-vertex arrays, or a radius that is negative or NaN."""
    if centres.shape[1] != 3:
        raise ValueError("window_deviations: needs centres of 3 components")
    if sorted_xyz.shape != (3, len(order)) or len(first) != np.prod(shape) + 1:
        raise ValueError("the grid is not one of vertex_grid (buckets, runs of vertices or coordinates)")
    if len(zeta) != len(order) or len(weights) != len(order):
        raise ValueError("window_deviations: one zeta and one weight per vertex of the grid")
    if not radius >= 0:  # also NaN
        raise ValueError("window_deviations: the radius must be a number >= 0 (mm)")
    if len(order) and not (order.min() >= 0 and order.max() < len(order)):
        raise ValueError("window_deviations: a vertex of the grid is out of range")
    result = np.full(len(centres), np.nan)
    if len(order) == 0 or len(centres) == 0:
        return (result,)
    vertices = cKDTree(sorted_xyz.T, leafsize=64, balanced_tree=False, compact_nodes=False)
    xs, ys, zs = sorted_xyz
    bounds = _scanned_vertices(centres, radius, bucket_mm, low, shape, first)
    limit = radius ** 2
    for block in _blocks(bounds, SCANNED_PER_BLOCK):
        inside = centres[block]
        centre, column = _window_candidates(inside, vertices, radius)
        x, y, z = (inside[:, axis].take(centre) for axis in range(3))
        squared = (x - xs.take(column)) ** 2 + (y - ys.take(column)) ** 2 + (z - zs.take(column)) ** 2
        member = np.flatnonzero(squared <= limit)
        centre, vertex = centre[member], order.take(column[member])
        weight, value = weights.take(vertex), zeta.take(vertex)
        total = np.bincount(centre, weight, minlength=len(inside))
        mean = np.bincount(centre, weight * value, minlength=len(inside)) / np.where(total > 0, total, 1.0)
        deviation = np.bincount(centre, weight * np.abs(value - mean.take(centre)), minlength=len(inside))
        result[block] = np.where(total > 0, deviation, np.nan) / np.where(total > 0, total, 1.0)
    return (result,)


def _window_candidates(centres, vertices, radius):
    """``(centre, column)`` pairs, by centre then grid column, of every vertex (a KD-tree of the
    grid's columns) that may lie within ``radius`` mm of a centre: those the tree finds within a
    slightly wider radius, and every vertex for a centre that is not finite (the tree takes none)."""
    count = vertices.n
    finite = np.isfinite(centres).all(axis=1)
    searched = np.flatnonzero(finite)
    near = cKDTree(centres[searched]).sparse_distance_matrix(vertices, radius * (1 + _SEARCH_MARGIN), output_type="ndarray")
    keys = [searched.take(near["i"]) * count + near["j"]]
    keys += [centre * count + np.arange(count) for centre in np.flatnonzero(~finite)]
    return np.divmod(np.sort(np.concatenate(keys)), count)


def _scanned_vertices(centres, radius, bucket_mm, low, shape, first):
    """Per centre, the vertices in the cube of buckets that the compiled kernel scans for its
    window (buckets within ``ceil(radius / bucket_mm)`` of the centre's, clamped to the grid):
    a bound of the window's size, from a summed-volume table of the grid's bucket counts."""
    widest = max(shape)
    rings = int(np.ceil(radius / bucket_mm)) if radius / bucket_mm < widest else widest
    table = np.zeros(np.asarray(shape) + 1, dtype=np.int64)
    table[1:, 1:, 1:] = np.diff(first).reshape(shape).cumsum(0).cumsum(1).cumsum(2)
    index = [_bucket(centres[:, axis], low[axis], bucket_mm, shape[axis]) for axis in range(3)]
    lows = [np.maximum(i - rings, 0) for i in index]
    highs = [np.minimum(i + rings, n - 1) + 1 for i, n in zip(index, shape)]
    count = np.zeros(len(centres), dtype=np.int64)
    for corner in np.ndindex(2, 2, 2):  # inclusion-exclusion over the cube's 8 corners
        sign = (-1) ** (3 - sum(corner))
        count += sign * table[tuple(highs[axis] if c else lows[axis] for axis, c in enumerate(corner))]
    return count


# --- arrays -------------------------------------------------------------------------------------


def _bucket(values, low, bucket_mm, buckets):
    """Index of the bucket along one axis holding each coordinate (mm; ``bucket_mm`` and ``buckets``
    scalars or per value), clamped to ``0 … buckets - 1`` (0 for NaN)."""
    index = np.floor((values - low) / bucket_mm)
    return np.where(index > 0, np.minimum(index, buckets - 1), 0).astype(np.int64)


def _expand(counts):
    """``(owner, rank)`` of ``counts.sum()`` items: ``counts[k]`` items for each ``k`` in order,
    ranked ``0 … counts[k] - 1``."""
    owner = np.repeat(np.arange(len(counts)), counts)
    return owner, np.arange(len(owner)) - (np.cumsum(counts) - counts)[owner]


def _blocks(pairs, most):
    """Slices of consecutive items, given their numbers of pairs, holding at most ``most`` pairs
    besides the block's first item."""
    ends = np.cumsum(pairs)
    limits = np.arange(1, (ends[-1] if len(ends) else 0) // most + 1) * most
    stops = np.maximum(np.searchsorted(ends, limits, side="right"), 1)
    bounds = np.unique(np.concatenate([[0], stops, [len(pairs)]]).astype(np.int64)).tolist()
    return [slice(start, stop) for start, stop in zip(bounds[:-1], bounds[1:])]


def _length(rows):
    """Euclidean length of each row of 3 (x, y, z summed in order), at least 1e-300."""
    return np.maximum(np.sqrt(_dot(rows, rows)), 1e-300)


def _dot(u, v):
    """Row-wise dot product of rows of 3, summed x, y, z in order."""
    return u[:, 0] * v[:, 0] + u[:, 1] * v[:, 1] + u[:, 2] * v[:, 2]


def _cross(u, v):
    """Row-wise cross product of rows of 3."""
    return np.stack([u[:, 1] * v[:, 2] - u[:, 2] * v[:, 1],
                     u[:, 2] * v[:, 0] - u[:, 0] * v[:, 2],
                     u[:, 0] * v[:, 1] - u[:, 1] * v[:, 0]], axis=1)
