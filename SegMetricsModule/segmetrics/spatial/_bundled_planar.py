"""The 2-D kernels of :mod:`segmetrics.spatial._kernels` on numpy and scipy alone (what 3D Slicer bundles).

Same names, arguments, return values and errors as the compiled kernels, and the same numbers:
each twin does the same floating-point operations on the same operands, vectorised (marching
squares with the cycles of its segments ranked by pointer jumping, nearest points with
:class:`scipy.spatial.cKDTree`, the crossing test over (edge, point) pairs, counts with
:func:`numpy.bincount`). :func:`segmetrics.spatial.accelerator.kernels` picks this module when numba
does not run. Images are ``(row, col)`` arrays; points are ``(row, col)`` rows in mm.
"""
import numpy as np
from scipy import ndimage
from scipy.spatial import cKDTree

#: Largest coordinate (mm) of a point :func:`nearest_between` takes: its squares stay finite
#: (the compiled kernels' limit, :data:`segmetrics.spatial._kernels.MAX_COORDINATE_MM`).
MAX_COORDINATE_MM = 1e150
#: Most pieces :func:`label_contours` cuts one segment into (as :data:`segmetrics.spatial._kernels.MAX_PIECES_PER_SEGMENT`).
MAX_PIECES_PER_SEGMENT = 2**20

#: Marching-squares segments of a cell by case (bit 1: upper-left pixel is foreground, 2: upper
#: right, 4: lower left, 8: lower right), as ``(from, to)`` edge pairs in the order
#: :func:`skimage.measure.find_contours` emits them with ``fully_connected="low"`` (foreground
#: 4-connected); edges 0 top, 1 bottom, 2 left, 3 right; -1 pads.
_SQUARE_SEGMENTS = np.array([
    [-1, -1, -1, -1], [0, 2, -1, -1], [3, 0, -1, -1], [3, 2, -1, -1], [2, 1, -1, -1], [0, 1, -1, -1],
    [3, 0, 2, 1], [3, 1, -1, -1], [1, 3, -1, -1], [0, 2, 1, 3], [1, 0, -1, -1], [1, 2, -1, -1],
    [2, 3, -1, -1], [0, 3, -1, -1], [2, 0, -1, -1], [-1, -1, -1, -1]], dtype=np.int64)
#: Per cell edge (0 top, 1 bottom, 2 left, 3 right): the pixel (row and column step from the
#: cell's upper-left pixel) whose edge vertex it is, and whether that vertex is on the pixel's
#: vertical edge (1, between it and the pixel below) or horizontal edge (0, to the pixel right).
_EDGE_ROW, _EDGE_COL, _EDGE_VERTICAL = np.array([0, 1, 0, 0]), np.array([0, 0, 0, 1]), np.array([0, 0, 1, 1])


def _check_padded_labels(labels, origins, scale):
    if labels.size == 0:
        raise ValueError("label_contours: the label image is empty")
    if labels.min() < 0 or origins.shape[0] <= labels.max() or origins.shape[1] != 2 or len(scale) != 2:
        raise ValueError("label_contours: needs labels >= 0, an origin (row, col) per label and a scale of 2")
    if labels[:, 0].any() or labels[:, -1].any():
        raise ValueError("label_contours: the first and last column must be background (pad the labels)")
    if labels[0].any() or labels[-1].any():
        raise ValueError("label_contours: the first and last row must be background (pad the labels)")


def _segments(labels):
    """Marching-squares segments as ``(from, to)`` edge-vertex ids (2 * pixel + 1 for the pixel's
    vertical edge, + 0 for its horizontal one), in row-major order of the cells."""
    cols = labels.shape[1]
    filled = labels > 0
    case = filled[:-1, :-1] + 2 * filled[:-1, 1:] + 4 * filled[1:, :-1] + 8 * filled[1:, 1:]
    rows_of, cols_of = np.nonzero((case > 0) & (case < 15))
    pairs = _SQUARE_SEGMENTS[case[rows_of, cols_of]].reshape(-1, 2, 2)  # (cell, slot, from/to)
    used = pairs[:, :, 0] >= 0
    edges = pairs[used]  # cells in row-major order, each cell's slots in order
    cell_row, cell_col = np.repeat(rows_of, used.sum(axis=1)), np.repeat(cols_of, used.sum(axis=1))
    vertex = 2 * ((cell_row[:, None] + _EDGE_ROW[edges]) * cols + cell_col[:, None] + _EDGE_COL[edges]) + _EDGE_VERTICAL[edges]
    return vertex[:, 0], vertex[:, 1]


def _cycle_extremes(successor):
    """The smallest and largest segment of each segment's cycle of the permutation ``successor``
    (pointer jumping: after k rounds, the extremes of the next 2**k segments)."""
    smallest, largest, jump = np.arange(len(successor)), np.arange(len(successor)), successor
    while True:
        new_smallest, new_largest = np.minimum(smallest, smallest[jump]), np.maximum(largest, largest[jump])
        if np.array_equal(new_smallest, smallest) and np.array_equal(new_largest, largest):
            return smallest, largest  # a window that doubled and changed nothing covers the cycle
        smallest, largest, jump = new_smallest, new_largest, jump[jump]


def _steps_to(successor, target):
    """Steps from each segment along ``successor`` to ``target`` of its cycle (list ranking by
    pointer jumping on the cycles cut after their target)."""
    segments = np.arange(len(successor))
    is_target = segments == target
    jump = np.where(is_target, segments, successor)
    steps = (~is_target).astype(np.int64)
    while not np.all(is_target[jump]):
        steps, jump = steps + steps[jump], jump[jump]
    return steps


def label_contours(labels, origins, scale, max_length):
    """Closed boundaries (marching squares at level 0.5) of every object of a 2-D label image,
    as :func:`segmetrics.spatial._kernels.label_contours` gives them (see there): ``(points (P, 2) mm,
    lengths (P,) mm, first (C + 1,), label (C,))``."""
    labels, origins, scale = np.asarray(labels), np.asarray(origins), np.asarray(scale, dtype=float)
    _check_padded_labels(labels, origins, scale)
    rows, cols = labels.shape
    seg_from, seg_to = _segments(labels)
    leaving = np.full(2 * rows * cols, -1, np.int64)
    leaving[seg_from] = np.arange(len(seg_from))
    successor = leaving[seg_to]
    smallest, largest = _cycle_extremes(successor)
    # boundaries in the order of their first segment; each starts at the end of its last segment
    # (skimage's start) and follows the successors
    cycle = np.unique(smallest, return_inverse=True)[1]
    sizes = np.bincount(cycle)
    raw_first = np.concatenate([[0], np.cumsum(sizes)])
    position = -_steps_to(successor, largest) % sizes[cycle]  # the last segment at 0, its successor at 1, ...
    vertex = np.empty(len(seg_to), np.int64)
    vertex[raw_first[cycle] + position] = seg_to
    pixel_row, pixel_col = np.divmod(vertex // 2, cols)
    vertical = vertex % 2 == 1
    # a boundary's label: the object's pixel beside its first point (the pixel or the one below / right)
    start_row, start_col, below = pixel_row[raw_first[:-1]], pixel_col[raw_first[:-1]], vertical[raw_first[:-1]]
    label = np.maximum(labels[start_row, start_col], labels[start_row + below, start_col + ~below]).astype(np.int64)
    origin = origins[np.repeat(label, sizes)]
    raw = np.empty((len(vertex), 2))
    raw[:, 0] = (np.where(vertical, pixel_row + 0.5, pixel_row) - origin[:, 0]) * scale[0]
    raw[:, 1] = (np.where(vertical, pixel_col, pixel_col + 0.5) - origin[:, 1]) * scale[1]
    if max_length > 0:
        following = _following(raw_first)
        d0, d1 = raw[following, 0] - raw[:, 0], raw[following, 1] - raw[:, 1]
        cuts = np.ceil(np.sqrt(d0 * d0 + d1 * d1) / max_length)
        if not np.all(cuts <= MAX_PIECES_PER_SEGMENT):  # also NaN (a scale that is not finite)
            raise ValueError("label_contours: max_length too small for the segments (or a scale not finite)")
        pieces = np.maximum(1, cuts.astype(np.int64))
        piece_ends = np.cumsum(pieces)
        first = np.concatenate([[0], piece_ends[raw_first[1:] - 1]]) if len(raw) else raw_first
        source = np.repeat(np.arange(len(raw)), pieces)
        fraction = (np.arange(len(source)) - (piece_ends - pieces)[source]) / pieces[source]
        start, end = raw[source], raw[following[source]]
        points = np.empty((len(source), 2))
        points[:, 0] = start[:, 0] + fraction * (end[:, 0] - start[:, 0])
        points[:, 1] = start[:, 1] + fraction * (end[:, 1] - start[:, 1])
    else:
        points, first = raw, raw_first
    following = _following(first)
    d0, d1 = points[following, 0] - points[:, 0], points[following, 1] - points[:, 1]
    return points, np.sqrt(d0 * d0 + d1 * d1), first, label


def _following(first):
    """Index of the next point of each point on closed boundaries ``first`` (the first after the last)."""
    following = np.arange(1, first[-1] + 1)
    following[first[1:] - 1] = first[:-1]
    return following


def _check_coordinates(*point_sets):
    if not all(np.all(np.abs(points) <= MAX_COORDINATE_MM) for points in point_sets):  # also NaN
        raise ValueError("nearest_between: the points must be finite and within MAX_COORDINATE_MM (1e150 mm), so that "
                         "their squared distances stay below the largest float")


def _squared(points, queries):
    d0, d1 = points[:, 0] - queries[:, 0], points[:, 1] - queries[:, 1]
    return d0 * d0 + d1 * d1


def nearest_between(test_points, reference_points):
    """Nearest-point distances between two 2-D point sets (rows, mm), exact, as
    :func:`segmetrics.spatial._kernels.nearest_between`: ``(forward (N,), back (M,), nearest (M,), tied (M,))``;
    distances are the square root of the smallest ``dx² + dy²``, inf and index -1 without points
    on the other side."""
    test_points, reference_points = np.asarray(test_points, dtype=float), np.asarray(reference_points, dtype=float)
    if test_points.ndim != 2 or reference_points.ndim != 2 or test_points.shape[1] != 2 or reference_points.shape[1] != 2:
        raise ValueError("nearest_between: needs rows of 2 components (mm)")
    forward = np.full(len(test_points), np.inf)
    back = np.full(len(reference_points), np.inf)
    nearest = np.full(len(reference_points), -1, np.int64)
    tied = np.zeros(len(reference_points), bool)
    if len(test_points) and len(reference_points):
        _check_coordinates(test_points, reference_points)
        found = cKDTree(reference_points).query(test_points)[1]
        forward = np.sqrt(_squared(reference_points[found], test_points))
        candidates = cKDTree(test_points).query(reference_points, k=2)[1].reshape(len(reference_points), -1)
        nearest = candidates[:, 0]
        squared = _squared(test_points[nearest], reference_points)
        back = np.sqrt(squared)
        if len(test_points) > 1:
            tied = _squared(test_points[candidates[:, 1]], reference_points) == squared
    return forward, back, nearest, tied


def inside_contours(points, order, vertices, first, eps):
    """Even-odd inside test of 2-D points against closed contours, as
    :func:`segmetrics.spatial._kernels.inside_contours` decides it (see there): per contour, each edge
    against the points whose second coordinate lies in its extent widened by ``eps`` (``order``
    sorts the points by it), the same crossing tests on the same numbers."""
    points, vertices = np.asarray(points, dtype=float), np.asarray(vertices, dtype=float)
    order, first = np.asarray(order, dtype=np.int64), np.asarray(first, dtype=np.int64)
    if points.shape[1] != 2 or vertices.shape[1] != 2:
        raise ValueError("inside_contours: needs points and vertices of 2 components")
    if len(first) == 0 or first[0] != 0 or first[-1] != len(vertices) or np.any(first[1:] < first[:-1]):
        raise ValueError("inside_contours: first must run from 0 to the number of vertices, never decreasing")
    if len(order) != len(points) or (len(order) and (order.min() < 0 or order.max() >= len(points))):
        raise ValueError("inside_contours: order must index the points")
    ys = points[order, 1]
    if np.any(ys[1:] < ys[:-1]):
        raise ValueError("inside_contours: order must sort the points by their second coordinate")
    inside = np.zeros(len(points), bool)
    for start, stop in zip(first[:-1], first[1:]):
        if start == stop:
            continue
        end = vertices[start:stop]
        begin = np.roll(end, 1, axis=0)  # the edge runs from the previous vertex to each vertex
        low = np.searchsorted(ys, np.minimum(end[:, 1], begin[:, 1]) - eps, side="left")
        high = np.searchsorted(ys, np.maximum(end[:, 1], begin[:, 1]) + eps, side="right")
        counts = np.maximum(high - low, 0)
        edge = np.repeat(np.arange(len(end)), counts)
        point = order[np.arange(len(edge)) - np.repeat(np.cumsum(counts) - counts - low, counts)]
        x0, y0 = end[edge, 0] - points[point, 0], end[edge, 1] - points[point, 1]
        x1, y1 = begin[edge, 0] - points[point, 0], begin[edge, 1] - points[point, 1]
        near_vertex = (np.abs(x0) < eps) & (np.abs(y0) < eps)
        goes_right, goes_left = (y0 > 0) != (y1 > 0), (y0 < 0) != (y1 < 0)
        crossing = goes_right | goes_left
        cross = np.zeros(len(edge))
        cross[crossing] = (x0[crossing] * y1[crossing] - x1[crossing] * y0[crossing]) / (y1[crossing] - y0[crossing])
        right = np.bincount(point[goes_right & (cross > 0)], minlength=len(points)) % 2 == 1
        left = np.bincount(point[goes_left & (cross < 0)], minlength=len(points)) % 2 == 1
        touched = np.zeros(len(points), bool)
        touched[point[near_vertex]] = True
        inside ^= touched | right | left
    return inside


def object_statistics(labels, count):
    """Per object of a 2-D label image (0 background, objects 1..``count``), as
    :func:`segmetrics.spatial._kernels.object_statistics`: ``(sizes (count,) pixels, sums (count, 2) of row
    and column indices, corners (count + 1, 2) of the bounding boxes, (0, 0) for the background
    and the largest int64 for an absent label)``."""
    labels = np.asarray(labels)
    if count < 0:
        raise ValueError("object_statistics: the count is negative")
    if labels.size and (labels.min() < 0 or labels.max() > count):
        raise ValueError("object_statistics: a label is outside 0..count")
    pixels = np.flatnonzero(labels)
    owner = labels.ravel()[pixels]
    rows, cols = np.divmod(pixels, labels.shape[1])
    sizes = np.bincount(owner, minlength=count + 1)[1:].astype(np.int64)
    sums = np.stack([np.bincount(owner, weights=rows, minlength=count + 1)[1:],
                     np.bincount(owner, weights=cols, minlength=count + 1)[1:]], axis=1).astype(np.int64)
    corners = np.zeros((count + 1, 2), np.int64)
    corners[1:] = np.iinfo(np.int64).max
    for label, box in enumerate(ndimage.find_objects(labels, max_label=count), start=1):
        if box is not None:
            corners[label] = box[0].start, box[1].start
    return sizes, sums, corners


def label_pairs(first_labels, first_count, second_labels, second_count):
    """Pixels of each pair of labels (0..count on each side) of two 2-D label images of one shape,
    as :func:`segmetrics.spatial._kernels.label_pairs`: ``(first_count + 1, second_count + 1)`` counts."""
    first_labels, second_labels = np.asarray(first_labels), np.asarray(second_labels)
    if first_labels.shape != second_labels.shape:
        raise ValueError("label_pairs: the label images differ in shape")
    if first_count < 0 or second_count < 0:
        raise ValueError("label_pairs: a count is negative")
    if first_labels.size and (first_labels.min() < 0 or first_labels.max() > first_count
                              or second_labels.min() < 0 or second_labels.max() > second_count):
        raise ValueError("label_pairs: a label is outside 0..count")
    pair = first_labels.ravel().astype(np.int64) * (second_count + 1) + second_labels.ravel()
    return np.bincount(pair, minlength=(first_count + 1) * (second_count + 1)).astype(np.int64).reshape(first_count + 1, second_count + 1)
