"""The 3-D surface kernels of :mod:`segmetrics.spatial._kernels` on numpy and scipy only, for a Python
without numba (3D Slicer's bundled packages): same names, arguments and values (bit for bit on
the tests' inputs), chosen by :func:`segmetrics.spatial.accelerator.kernels`.

Each twin does the compiled kernel's arithmetic in the same order, on whole arrays: the blur adds
its weighted rows in the order of the weights; the walk of :func:`closest_points` moves every
query at once, one round per move, over all its candidate cells, the first closest cell winning
as in the loop; the sorts are stable sorts of the same keys. The search for the nearest vertex
is another algorithm, a KD-tree (:class:`scipy.spatial.cKDTree`) instead of the buckets, with the
same answer: the least squared distance, of the lowest vertex index among equals (which the walk
starts from, so that ties must go alike), also beyond the bucket search's :data:`MAX_RINGS`.

The constants shared by both implementations are defined here (this module imports no numba).
Points are rows of 3 components in mm; cells are triangles (3 vertex indices) or segments (2).
"""
import numpy as np
from scipy.spatial import cKDTree

# --- constants of both implementations ------------------------------------------------------------

#: Closest-feature codes. Triangles: 0–2 vertex a, b, c; 3 edge ab; 4 edge ac; 5 edge bc; 6 the
#: face. Segments: 0–1 vertex a, b; 2 the segment.
FACE = 6
#: Triangles whose squared sine of the angle at the first corner is at most this are taken as
#: their three edges by the walk: the face and edge regions of a flatter one are decided by rounding.
SLIVER = 1e-20
#: Longest walk, in moves of about one cell (1–2 are usual).
MAX_WALK_STEPS = 32
#: Cell-local corners of each feature code (-1 = none), for triangles (3 columns) and segments (2).
FEATURE_CORNERS = {
    3: np.array([[0, -1, -1], [1, -1, -1], [2, -1, -1], [0, 1, -1], [0, 2, -1], [1, 2, -1], [0, 1, 2]]),
    2: np.array([[0, -1], [1, -1], [0, 1]]),
}
#: Vertices a bucket of :func:`vertex_grid` holds on average on a flat patch of surface.
VERTICES_PER_BUCKET = 12
#: Buckets the compiled ``nearest_vertices`` searches out from a point before giving up on it.
MAX_RINGS = 4
#: Most buckets per axis of :func:`vertex_grid`.
MAX_BUCKETS_PER_AXIS = 2**20
#: Most buckets of :func:`vertex_grid` in all (16 GiB of bucket bounds: more is a bucket size
#: far too small for the points, refused with a message rather than an allocation failure).
MAX_BUCKETS = 2**31
#: Largest coordinate (mm, absolute) the nearest-point searches take: the squared distance of
#: two such points (up to 12e300 mm²) stays finite, so a search always finds a nearest point.
MAX_COORDINATE_MM = 1e150
#: Relative margin of distance within which :func:`nearest_vertices` compares the squared distances
#: of vertices exactly (the KD-tree's distances may differ from them in the last bits).
TIE_TOLERANCE = 1e-9
#: Nearest vertices :func:`nearest_vertices` compares for a point with a tie (more when all are as near).
TIE_NEIGHBOURS = 8
#: Widest Gaussian of :func:`gaussian_weights` (voxels): a kernel of up to about 6 million weights.
MAX_SIGMA_VOXELS = 1e6


# --- surface building -----------------------------------------------------------------------------


def gaussian_weights(sigma_voxels: float) -> np.ndarray:
    """The sampled Gaussian of ``sigma_voxels`` (> 0) truncated at 3 sigma, summing to 1 (scipy's kernel).
    ValueError for a sigma that is not a number in ``(0, MAX_SIGMA_VOXELS]``."""
    if not 0 < sigma_voxels <= MAX_SIGMA_VOXELS:  # also NaN
        raise ValueError(f"the Gaussian's sigma must be in (0, {MAX_SIGMA_VOXELS:g}] voxels, got {sigma_voxels}")
    radius = int(3.0 * sigma_voxels + 0.5)
    weights = np.exp(-0.5 * (np.arange(-radius, radius + 1) / sigma_voxels) ** 2)
    return weights / weights.sum()


def gaussian_blur(mask: np.ndarray, sigma_voxels: float, dtype) -> np.ndarray:
    """Gaussian blur of a 1-D to 3-D boolean mask, zero outside (``scipy.ndimage.gaussian_filter``
    with ``mode="constant"``, ``truncate=3``): one axis after the other, last axis first, each
    value the sum of its weighted neighbours in the order of the weights, in ``dtype``. A sigma
    of 0 (or less) returns the mask; ValueError for NaN or one above :data:`MAX_SIGMA_VOXELS`."""
    if mask.ndim not in (1, 2, 3):
        raise ValueError(f"gaussian_blur needs a 1-D to 3-D mask, got shape {mask.shape}")
    if sigma_voxels <= 0:
        return mask.astype(dtype)
    weights = gaussian_weights(sigma_voxels).astype(dtype)
    blurred = np.asarray(mask, dtype=bool).astype(dtype)
    for axis in range(mask.ndim - 1, -1, -1):
        blurred = _blur_axis(blurred, weights, axis)
    return blurred


def _blur_axis(values: np.ndarray, weights: np.ndarray, axis: int) -> np.ndarray:
    """``out[i] = sum_j weights[j] * values[i - radius + j]`` along ``axis`` over the values that
    exist, added in the order of ``j``."""
    radius = (len(weights) - 1) // 2
    length = values.shape[axis]
    moved = np.moveaxis(values, axis, 0)
    out = np.zeros_like(moved)
    for j, weight in enumerate(weights):
        shift = j - radius  # out[i] takes values[i + shift]
        low, high = max(0, -shift), min(length, length - shift)
        if low < high:
            out[low:high] += weight * moved[low + shift:high + shift]
    return np.moveaxis(out, 0, axis)


def clamp_field(field, inside, margin):
    """Clamp a blurred field in place (arrays flat): inside voxels to at least 0.5 + margin,
    outside ones to at most 0.5 - margin. Returns the inside voxels the blur left below 0.5
    (flat indices) and their blurred values before the clamp."""
    if inside.size != field.size:
        raise ValueError("clamp_field: the mask and the field differ in size")
    inside = inside.astype(bool)
    lost = np.flatnonzero(inside & (field < 0.5))
    values = field[lost]
    field[inside] = np.maximum(field[inside], 0.5 + margin)
    outside = ~inside
    field[outside] = np.minimum(field[outside], 0.5 - margin)
    return lost.astype(np.int64), values


def triangle_areas(vertices, cells):
    """Area of each triangle ``cells`` (rows of 3 vertex indices) of ``vertices`` (rows x, y, z).
    ValueError for a vertex index out of range."""
    if vertices.shape[1] != 3 or cells.shape[1] != 3:
        raise ValueError("triangle_areas: needs vertices of 3 components and triangles of 3 corners")
    _require_indices(cells, len(vertices), "triangle_areas: a triangle's vertex index is out of range")
    columns = _columns(vertices)
    a, b, c = (_take(columns, cells[:, corner]) for corner in range(3))
    cross = _cross(b - a, c - a)
    return 0.5 * np.sqrt(_dot(cross, cross))


def corner_shares(cells, sizes, vertex_count):
    """Per vertex ``0 … vertex_count - 1``, the sum of ``size / corners`` over its cells (rows of
    vertex indices, ``sizes`` one per cell), added in the order of the cells' corners.
    ValueError for a corner index out of range, or sizes that are not one per cell of corners."""
    if len(sizes) != len(cells) or (len(cells) and cells.shape[1] == 0):
        raise ValueError("corner_shares: needs one size per cell, and cells of at least one corner")
    if vertex_count < 0:
        raise ValueError("corner_shares: the vertex count is negative")
    _require_indices(cells, vertex_count, "corner_shares: a cell's corner index is out of range")
    corners = cells.shape[1]
    shares = np.asarray(sizes, dtype=float) / corners
    return np.bincount(cells.ravel(), np.repeat(shares, corners), vertex_count).astype(float, copy=False)  # adds in input order


def cells_by_vertex(cells, vertex_count):
    """``(cells, first, count)``: the cells around vertex ``v`` are ``cells[first[v]:first[v] + count[v]]``,
    in increasing order (a cell that repeats a corner is listed that many times). ValueError for
    a corner index outside ``0 … vertex_count - 1``."""
    if vertex_count < 0:
        raise ValueError("cells_by_vertex: the vertex count is negative")
    corners = np.asarray(cells).ravel()
    _require_indices(corners, vertex_count, "cells_by_vertex: a cell's corner index is out of range")
    count = np.bincount(corners, minlength=vertex_count).astype(np.int64)
    by_vertex = np.argsort(corners, kind="stable") // max(cells.shape[1], 1)
    return by_vertex.astype(np.int64), np.cumsum(count) - count, count


def ascending_order(values):
    """Indices that sort ``values`` (1-D float64, not negative: distances in mm, ``inf`` allowed)
    in ascending order, equal values in their input order: a stable sort of the values' bits, which
    for floats that are not negative are ordered as the values (negative values or NaN: by their bits)."""
    return np.argsort(np.ascontiguousarray(values, dtype=float).view(np.uint64), kind="stable")


# --- nearest vertex -------------------------------------------------------------------------------


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
    low, shape = np.zeros(3), np.ones(3, dtype=np.int64)
    if len(points):
        low, high = points.min(axis=0), points.max(axis=0)
        if not (np.all(-MAX_COORDINATE_MM <= low) and np.all(high <= MAX_COORDINATE_MM)):  # also NaN
            raise ValueError("vertex_grid: the points must be finite and within MAX_COORDINATE_MM (1e150 mm)")
        buckets = (high - low) / bucket_mm
        if not np.all(buckets < MAX_BUCKETS_PER_AXIS):
            raise ValueError("vertex_grid: too many buckets for the points' extent (bucket size too small)")
        shape = buckets.astype(np.int64) + 1
    if shape[0] * shape[1] * shape[2] > MAX_BUCKETS:
        raise ValueError("vertex_grid: too many buckets for the points' extent (bucket size too small)")
    index = [_bucket(points[:, axis], low[axis], bucket_mm, shape[axis]) for axis in range(3)]
    keys = (index[0] * shape[1] + index[1]) * shape[2] + index[2]
    first = np.concatenate([[0], np.cumsum(np.bincount(keys, minlength=int(np.prod(shape))))]).astype(np.int64)
    order = np.argsort(keys, kind="stable").astype(np.int64)
    return low, shape, first, order, np.ascontiguousarray(points[order].T)


def _bucket(values, low, bucket_mm, buckets):
    """Index of the bucket along one axis holding each coordinate (mm), clamped to ``0 … buckets - 1``."""
    index = np.floor((values - low) / bucket_mm)
    return np.where(index > 0, np.minimum(index, buckets - 1), 0).astype(np.int64)


def nearest_vertices(queries, bucket_mm, low, shape, first, order, sorted_xyz):
    """Index of the vertex nearest to each query point (rows, mm) and its squared distance (mm²),
    the vertices being those of a :func:`vertex_grid`; of vertices at the same least distance, the
    one of lowest index. A KD-tree search of all of them (so, unlike the compiled bucket search,
    also for points more than :data:`MAX_RINGS` buckets away), then for the points whose two
    nearest vertices are about as near, the least squared distance (summed as the compiled search
    sums it) and lowest index among all vertices about as near. -1 (and inf) for points that are
    not finite or beyond :data:`MAX_COORDINATE_MM`, and for every point when there are no vertices.
    ValueError for a grid that is not one of :func:`vertex_grid`."""
    if queries.shape[1] != 3:
        raise ValueError("nearest_vertices: needs query points of 3 components")
    _check_grid(bucket_mm, low, shape, first, order, sorted_xyz)
    nearest = np.full(len(queries), -1, dtype=np.int64)
    squared = np.full(len(queries), np.inf)
    valid = np.flatnonzero(np.logical_and.reduce([np.abs(queries[:, axis]) <= MAX_COORDINATE_MM for axis in range(3)]))  # also NaN
    if len(order) == 0 or len(valid) == 0:
        return nearest, squared
    queries = queries[valid]
    tree = cKDTree(sorted_xyz.T, leafsize=64, balanced_tree=False, compact_nodes=False)  # builds fast: see mesh.kd_tree
    distances, columns = tree.query(queries, k=min(2, len(order)))
    if columns.ndim == 1:  # a single vertex
        columns = columns[:, None]
    found = columns[:, 0]
    if columns.shape[1] == 2:
        tied = np.flatnonzero(distances[:, 1] <= distances[:, 0] * (1 + TIE_TOLERANCE))
        if len(tied):
            found[tied] = _lowest_of_nearest(tree, queries[tied], distances[tied, 0] * (1 + TIE_TOLERANCE), order, sorted_xyz)
    squared[valid] = _squared_to(queries, sorted_xyz, found)
    nearest[valid] = order[found]
    return nearest, squared


def _lowest_of_nearest(tree, queries, radius, order, sorted_xyz):
    """Per query, the column of the grid (of ``tree``'s points) whose squared distance (as the
    compiled search sums it) is least, of lowest vertex index among equals, of the columns within
    ``radius`` (mm, per query, at least the least distance): among the :data:`TIE_NEIGHBOURS`
    nearest, or all within the radius when those are all within it."""
    count = min(TIE_NEIGHBOURS, len(order))
    distances, columns = (found.reshape(len(queries), count) for found in tree.query(queries, k=count))
    found = _lowest_in_runs(queries, radius, np.full(len(queries), count), columns.ravel(), distances.ravel(), order, sorted_xyz)
    more = np.flatnonzero(distances[:, -1] <= radius) if count < len(order) else []
    if len(more):  # every neighbour asked is within the radius: there may be more
        within = tree.query_ball_point(queries[more], radius[more])
        runs = np.array([len(columns) for columns in within])
        columns = np.concatenate(within).astype(np.int64)
        found[more] = _lowest_in_runs(queries[more], radius[more], runs, columns, np.zeros(len(columns)), order, sorted_xyz)
    return found


def _lowest_in_runs(queries, radius, runs, columns, distances, order, sorted_xyz):
    """Per query, of its run of candidate ``columns`` (``runs`` per query, in order) at a KD-tree
    ``distance`` within ``radius``, the one of least squared distance and lowest vertex index."""
    owner = np.repeat(np.arange(len(queries)), runs)
    squared = _squared_to(queries[owner], sorted_xyz, columns)
    squared[distances > radius[owner]] = np.inf
    starts = np.cumsum(runs) - runs
    least = np.minimum.reduceat(squared, starts)
    ranked = np.where(squared == least[owner], order[columns], len(order))
    lowest = np.minimum.reduceat(ranked, starts)
    return columns[ranked == lowest[owner]]  # one per query: the vertex indices differ


def _squared_to(queries, sorted_xyz, columns):
    """Squared distances (mm²) from query rows to the grid's vertices ``columns``, summed as the
    compiled search sums them (x, then y, then z)."""
    xs, ys, zs = sorted_xyz[0, columns], sorted_xyz[1, columns], sorted_xyz[2, columns]
    return (xs - queries[:, 0]) ** 2 + (ys - queries[:, 1]) ** 2 + (zs - queries[:, 2]) ** 2


def _check_grid(bucket_mm, low, shape, first, order, sorted_xyz):
    """ValueError unless a grid has the structure :func:`vertex_grid` gives it."""
    if not (0 < bucket_mm < np.inf and len(low) == 3 and len(shape) == 3 and np.all(shape >= 1)
            and np.all(shape <= MAX_BUCKETS_PER_AXIS)
            and len(first) == shape[0] * shape[1] * shape[2] + 1 and first[0] == 0 and first[-1] == len(order)
            and np.all(first[1:] >= first[:-1]) and sorted_xyz.shape == (3, len(order))):
        raise ValueError("the grid is not one of vertex_grid (buckets, runs of vertices or coordinates)")


# --- closest point: the walk ----------------------------------------------------------------------


def closest_points(queries, nearest, points, cells, by_vertex, first, count, feature_corners):
    """For each query point (rows, mm), walking from its nearest vertex ``nearest[i]``: ``p - q``
    (rows), the cell holding ``q`` and the code of its feature there (cell -1 and ``q`` the
    nearest vertex itself when no cell is around that vertex).

    The walk: among the cells around the searched vertices (first the nearest one), the closest
    point (the first closest cell wins ties) if closer than the best so far; when it lies on a
    vertex or edge touching none of the searched vertices, those become the searched vertices
    and the walk goes on, else it ends. All queries move at once, one round per move.
    ``by_vertex``, ``first``, ``count``: the cells around vertex ``v`` are
    ``by_vertex[first[v]:first[v] + count[v]]`` (:func:`cells_by_vertex`). ValueError for
    inputs that would lead the walk out of range.
    """
    if queries.shape[1] != 3 or len(nearest) != len(queries):
        raise ValueError("closest_points: needs query rows of 3 components and a nearest vertex per query")
    _check_star(points, cells, by_vertex, first, count, feature_corners)
    nearest = np.asarray(nearest, dtype=np.int64)
    _require_indices(nearest, len(points), "closest_points: a nearest-vertex index is out of range")
    return _walk(queries, nearest, points, cells, by_vertex, first, count, feature_corners)


def _walk(queries, nearest, points, cells, by_vertex, first, count, feature_corners):
    """:func:`closest_points` of inputs already checked."""
    offsets = queries - points[nearest]
    found_cells = np.full(len(queries), -1, dtype=np.int64)
    features = np.zeros(len(queries), dtype=np.int8)
    star = (_columns(points), cells, by_vertex, first, count)
    query_columns = _columns(queries)
    walking = np.arange(len(queries))
    best = np.full(len(queries), np.inf)
    centre_a, centre_b = nearest.copy(), np.full(len(queries), -1, dtype=np.int64)
    for _ in range(MAX_WALK_STEPS):
        if len(walking) == 0:
            break
        closer, squared, offset, cell, feature = _closest_in_stars(_take(query_columns, walking), centre_a, centre_b,
                                                                   best[walking], *star)
        walking, centre_a, centre_b = walking[closer], centre_a[closer], centre_b[closer]
        best[walking], found_cells[walking], features[walking] = squared, cell, feature
        offsets[walking] = offset.T
        corners = feature_corners[feature]
        rim_a = cells[cell, corners[:, 0]]
        rim_b = np.where(corners[:, 1] >= 0, cells[cell, np.maximum(corners[:, 1], 0)], -1)
        on_rim = corners[:, -1] < 0  # else the whole cell (face or segment): it touches a searched vertex
        local_minimum = (rim_a == centre_a) | (rim_a == centre_b) | ((rim_b >= 0) & ((rim_b == centre_a) | (rim_b == centre_b)))
        going_on = on_rim & ~local_minimum
        walking, centre_a, centre_b = walking[going_on], rim_a[going_on], rim_b[going_on]
    return offsets, found_cells, features


def closest_points_near(queries, bucket_mm, low, shape, first, order, sorted_xyz, points, cells, by_vertex, cell_first, count,
                        feature_corners):
    """:func:`closest_points` walking from each query's :func:`nearest_vertices` (grid ``bucket_mm``
    … ``sorted_xyz`` of ``points``): ``(p - q`` (rows, mm), ``cell, feature, nearest vertex)``.
    A query on a vertex is not walked (``p - q`` 0, cell -1); one with no nearest vertex (not
    finite, or no vertices) has nearest vertex -1 and nothing else. ValueError for a grid or cells
    per vertex that are not those of ``points`` and ``cells``."""
    if len(order) != len(points):
        raise ValueError("closest_points_near: the grid's vertices are not those of these points")
    _require_indices(order, len(points), "closest_points_near: the grid's vertex order is not one of these points")
    _check_star(points, cells, by_vertex, cell_first, count, feature_corners)
    nearest, squared = nearest_vertices(queries, bucket_mm, low, shape, first, order, sorted_xyz)
    offsets = np.zeros((len(queries), 3))
    found_cells = np.full(len(queries), -1, dtype=np.int64)
    features = np.zeros(len(queries), dtype=np.int8)
    walked = np.flatnonzero((nearest >= 0) & (squared > 0))
    offsets[walked], found_cells[walked], features[walked] = _walk(
        queries[walked], nearest[walked], points, cells, by_vertex, cell_first, count, feature_corners)
    return offsets, found_cells, features, nearest


def _check_star(points, cells, by_vertex, first, count, feature_corners):
    """ValueError unless the walk's inputs (see :func:`closest_points`) have the shapes it reads and
    their indices are in range."""
    corners_shape = (FACE + 1, 3) if cells.shape[1] == 3 else (3, 2)
    if points.shape[1] != 3 or cells.shape[1] not in (2, 3) or feature_corners.shape != corners_shape:
        raise ValueError("closest points: needs points of 3 components, triangles or segments and their feature corners")
    if not np.all((-1 <= feature_corners) & (feature_corners < cells.shape[1])):
        raise ValueError("closest points: a feature corner is not a column of a cell")
    if len(first) != len(points) or len(count) != len(points):
        raise ValueError("closest points: the cells per vertex are not those of these points")
    if not np.all((first >= 0) & (count >= 0) & (count <= len(by_vertex) - first)):
        raise ValueError("closest points: the cells per vertex are not those of these points (a run out of range)")
    _require_indices(by_vertex, len(cells), "closest points: the cells per vertex are not those of these cells (an index out of range)")
    _require_indices(cells, len(points), "closest points: a cell's corner index is out of range")


def _closest_in_stars(p, centre_a, centre_b, best, points, cells, by_vertex, first, count):
    """One round of the walk: for each query ``p`` (columns x, y, z) the closest point among the
    cells around its vertices ``centre_a`` and ``centre_b`` (-1 = none), in that order, if closer
    than ``best`` (squared mm); ``points`` are columns too. Returns ``(closer, squared, p - q, cell,
    feature)``: which queries found a closer point (a boolean mask), and for those alone the rest
    (``p - q`` as columns)."""
    runs_a = count[centre_a]
    runs_b = np.where(centre_b >= 0, count[np.maximum(centre_b, 0)], 0)
    runs = runs_a + runs_b
    starts = np.cumsum(runs) - runs
    owner = np.repeat(np.arange(len(runs)), runs)
    place = np.arange(len(owner)) - np.repeat(starts, runs)  # position in the owner's run
    from_a = place < np.repeat(runs_a, runs)
    run_start = np.where(from_a, np.repeat(first[centre_a], runs), np.repeat(first[np.maximum(centre_b, 0)] - runs_a, runs))
    candidate = by_vertex[run_start + place]
    corners = [cells[candidate, corner] for corner in range(cells.shape[1])]
    at = np.repeat(p, runs, axis=1)
    if len(corners) == 3:
        offset, feature = _triangle(at, *(_take(points, corner) for corner in corners))
    else:
        offset, feature = _segment(at, *(_take(points, corner) for corner in corners))
    squared = _dot(offset, offset)
    # the first candidate of each run at the run's least squared distance, if below the best so far
    least = np.full(len(runs), np.inf)
    some = np.flatnonzero(runs > 0)
    if len(some):
        least[some] = np.fmin.reduceat(squared, starts[some])  # NaN (a degenerate cell) never wins
    winning = np.flatnonzero((squared == least[owner]) & (squared < best[owner]))
    if len(winning):
        winning = winning[np.concatenate([[True], owner[winning[1:]] != owner[winning[:-1]]])]
    closer = np.zeros(len(runs), dtype=bool)
    closer[owner[winning]] = True
    return closer, squared[winning], _take(offset, winning), candidate[winning], feature[winning]


def _triangle(p, a, b, c):
    """``(p - q, feature code)`` for the points ``q`` of triangles ``abc`` closest to points ``p``
    (columns): the Voronoi regions of Ericson, *Real-Time Collision Detection* (2005), section
    5.1.5, tested in the compiled kernel's order; a degenerate triangle (:data:`SLIVER`, or a
    region's division by zero) is taken as its three edges (:func:`_triangle_edges`)."""
    offset, feature = np.empty_like(p), np.zeros(p.shape[1], dtype=np.int8)
    ab, ac, ap = b - a, c - a, p - a
    d1, d2 = _dot(ab, ap), _dot(ac, ap)
    bp = p - b
    d3, d4 = _dot(ab, bp), _dot(ac, bp)
    cp = p - c
    d5, d6 = _dot(ab, cp), _dot(ac, cp)
    normal = _cross(ab, ac)
    vc, vb, va = d1 * d4 - d3 * d2, d5 * d2 - d1 * d6, d3 * d6 - d5 * d4
    open_ = np.ones(len(d1), dtype=bool)  # not decided yet

    def decide(condition):
        taken = np.flatnonzero(open_ & condition)
        open_[taken] = False
        return taken

    for taken, vector, code in ((decide((d1 <= 0) & (d2 <= 0)), ap, 0), (decide((d3 >= 0) & (d4 <= d3)), bp, 1),
                                (decide((d6 >= 0) & (d5 <= d6)), cp, 2)):
        offset[:, taken] = _take(vector, taken)
        feature[taken] = code
    edges = [decide(_dot(normal, normal) <= SLIVER * _dot(ab, ab) * _dot(ac, ac))]
    with np.errstate(divide="ignore", invalid="ignore"):
        taken = decide((vc <= 0) & (d1 >= 0) & (d3 <= 0))  # edge ab, unless |ab|² = 0
        edges.append(taken[d1[taken] - d3[taken] <= 0])
        taken = taken[~(d1[taken] - d3[taken] <= 0)]  # NaN goes on, as in the compiled kernel
        along = d1[taken] / (d1[taken] - d3[taken])
        offset[:, taken] = _step(_take(ap, taken), along, _take(ab, taken), 0.0, _take(ac, taken))
        feature[taken] = 3
        taken = decide((vb <= 0) & (d2 >= 0) & (d6 <= 0))  # edge ac, unless |ac|² = 0
        edges.append(taken[d2[taken] - d6[taken] <= 0])
        taken = taken[~(d2[taken] - d6[taken] <= 0)]
        along = d2[taken] / (d2[taken] - d6[taken])
        offset[:, taken] = _step(_take(ap, taken), 0.0, _take(ab, taken), along, _take(ac, taken))
        feature[taken] = 4
        taken = decide((va <= 0) & (d4 - d3 >= 0) & (d5 - d6 >= 0))  # edge bc, unless |bc|² = 0
        towards_b, towards_c = d4[taken] - d3[taken], d5[taken] - d6[taken]
        degenerate = towards_b + towards_c <= 0
        edges.append(taken[degenerate])
        taken, towards_b, towards_c = taken[~degenerate], towards_b[~degenerate], towards_c[~degenerate]
        along = towards_b / (towards_b + towards_c)
        offset[:, taken] = _step(_take(ap, taken), 1.0 - along, _take(ab, taken), along, _take(ac, taken))
        feature[taken] = 5
        denominator = va + vb + vc
        edges.append(decide(~((denominator > 0) & (va >= 0) & (vb >= 0) & (vc >= 0))))  # no face, or rounding
        taken = np.flatnonzero(open_)
        offset[:, taken] = _step(_take(ap, taken), vb[taken] / denominator[taken], _take(ab, taken),
                                 vc[taken] / denominator[taken], _take(ac, taken))
        feature[taken] = FACE
    edges = np.concatenate(edges)
    found, feature[edges] = _triangle_edges(*(_take(v, edges) for v in (p, a, b, c)))
    offset[:, edges] = found
    return offset, feature


def _triangle_edges(p, a, b, c):
    """:func:`_triangle` of degenerate triangles: the closest point of their three edges, with
    the triangle's feature codes (the first closest edge of ab, ac, bc)."""
    best, code = _segment(p, a, b)  # codes 0 a, 1 b, 2 ab: as the triangle's 0, 1, 3
    code = np.array([0, 1, 3], dtype=np.int8)[code]
    for start, end, codes in ((a, c, (0, 2, 4)), (b, c, (1, 2, 5))):
        found, found_code = _segment(p, start, end)
        closer = np.flatnonzero(_dot(found, found) < _dot(best, best))
        best[:, closer] = _take(found, closer)
        code[closer] = np.array(codes, dtype=np.int8)[found_code[closer]]
    return best, code


def _segment(p, a, b):
    """``(p - q, feature code)`` for the points ``q`` of segments ``ab`` closest to points ``p``
    (columns; vertex ``a`` for a segment of length 0)."""
    ab, ap = b - a, p - a
    length_squared = _dot(ab, ab)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = _dot(ap, ab) / length_squared
    at_a = ~(length_squared > 0) | (t <= 0)
    at_b = np.flatnonzero(~at_a & (t >= 1))
    inner = np.flatnonzero(~at_a & ~(t >= 1))
    offset = ap.copy()
    offset[:, at_b] = _take(p, at_b) - _take(b, at_b)
    offset[:, inner] = _step(_take(ap, inner), t[inner], _take(ab, inner), 0.0, _take(ab, inner))
    code = np.zeros(len(t), dtype=np.int8)
    code[at_b], code[inner] = 1, 2
    return offset, code


# --- arithmetic of points as rows of coordinates (x, y, z), in the compiled kernels' order ---------


def _columns(rows: np.ndarray) -> np.ndarray:
    """Points given as rows of 3 components, as an array of 3 contiguous rows (x, y, z)."""
    return np.ascontiguousarray(rows.T, dtype=float)


def _take(u: np.ndarray, index) -> np.ndarray:
    """The points ``index`` of points given as 3 rows."""
    return np.take(u, index, axis=1)  # several times faster than u[:, index]


def _dot(u, v):
    """``u · v`` of points given as 3 rows, added x, then y, then z."""
    return u[0] * v[0] + u[1] * v[1] + u[2] * v[2]


def _cross(u, v):
    """``u × v`` of points given as 3 rows."""
    return np.stack([u[1] * v[2] - u[2] * v[1], u[2] * v[0] - u[0] * v[2], u[0] * v[1] - u[1] * v[0]])


def _step(u, s, v, t, w):
    """``u - s v - t w`` of points given as 3 rows, for factors ``s`` and ``t`` (per point, or one for all)."""
    return u - s * v - t * w


def _require_indices(indices, size: int, message: str) -> None:
    """ValueError(message) unless every index is in ``0 … size - 1``."""
    indices = np.asarray(indices)
    if indices.size and not (indices.min() >= 0 and indices.max() < size):
        raise ValueError(message)
