"""Planar polygons (RT Structure Set contours) in numpy: their planes, the even-odd rule that fills
them and the area it encloses.

The rule, shared by the rasteriser (:func:`fill_even_odd`), the area (:func:`even_odd_area`) and the
point test (:func:`inside_even_odd`): a point is inside when a ray from it crosses the rings an odd
number of times (a ring inside another is a hole, a ring given twice cancels). Rings are ``(N, 2)``
arrays of in-plane coordinates, closed implicitly (the last point joined to the first).
:func:`even_odd_region` gives the same region as a shapely geometry for the contour metrics.
"""
from __future__ import annotations

import math

import numpy as np

#: Contour planes closer than this (mm) are one plane.
PLANE_TOLERANCE_MM = 0.01


def plane_axes(polygons) -> np.ndarray:
    """Rows ``u, v, n``: in-plane axes and the common normal of planar polygons (patient frame).

    ``u`` and ``v`` are the two patient axes least aligned with ``n`` made orthogonal to it, so
    axial contours give the identity (x, y, z).
    """
    largest = max(polygons, key=len)
    centred = largest - largest.mean(axis=0)
    normal = np.linalg.svd(centred, full_matrices=False)[2][2]
    normal = normal * np.sign(normal[np.argmax(np.abs(normal))])
    first, _ = sorted(set(range(3)) - {int(np.argmax(np.abs(normal)))})
    u = np.eye(3)[first] - normal[first] * normal
    u /= np.linalg.norm(u)
    return np.array([u, np.cross(normal, u), normal])



def distinct_planes(values) -> np.ndarray:
    """Sorted plane positions (mm) with neighbours closer than :data:`PLANE_TOLERANCE_MM` merged."""
    values = np.sort(values)
    return values[np.concatenate([[True], np.diff(values) > PLANE_TOLERANCE_MM])]


def nearest_planes(planes, positions) -> np.ndarray:
    """Index into ``planes`` (:func:`distinct_planes`, mm) of the plane nearest to each of ``positions`` (mm)."""
    return np.argmin(np.abs(np.subtract.outer(np.asarray(positions, float), planes)), axis=1)


def rings_by_plane(reference, test) -> tuple:
    """``(axes, planes)`` of two sides' planar polygons (patient mm): ``axes`` the rows ``u, v, n``
    of :func:`plane_axes`, ``planes`` ``{position along n (mm): (reference rings, test rings)}`` in
    increasing order, each side a list (maybe empty) of ``(N, 2)`` rings in in-plane ``(u, v)`` mm,
    closed implicitly (polygons closer than :data:`PLANE_TOLERANCE_MM` share a plane). A polygon's
    position is the median of its points' (a mean adds float noise: -122.44 became -122.44000000000004),
    so an axial plane's position is its z coordinate as written in the file."""
    polygons = list(reference) + list(test)
    if not polygons:
        return np.eye(3), {}
    axes = plane_axes(polygons)
    offsets = np.array([float(np.median(p @ axes[2])) for p in polygons])  # one of the points': exact
    planes = distinct_planes(offsets)
    rings: dict = {}
    for index, (polygon, nearest) in enumerate(zip(polygons, nearest_planes(planes, offsets))):
        rings.setdefault(float(planes[nearest]), ([], []))[index >= len(reference)].append(polygon @ axes[:2].T)
    return axes, dict(sorted(rings.items()))


def nearest_slice(index: float, increasing: bool) -> int:
    """The slice nearest to a contour plane at continuous slice ``index``; a plane halfway between
    two slices (within 1e-6 slice) goes to the one lower along the contour normal, whichever way
    the grid is stored (``increasing``: the slice index grows along the normal). Rounding half to
    even put such a plane on the other physical slice when the grid was stored flipped."""
    return int(math.ceil(index - 0.5 - 1e-6)) if increasing else int(math.floor(index + 0.5 + 1e-6))



def fill_in_patient_order(rings, shape, flips=(False, False), swap=False) -> np.ndarray:
    """:func:`fill_even_odd` of ``rings`` ((row, column) pixel coordinates of a slice of ``shape``)
    done in the patient order of the slice, so that a pixel centre exactly on an edge is inside or
    outside whatever the storage: ``flips`` says which of the stored (row, column) axes run against
    their patient axis, ``swap`` that the stored rows follow the earlier patient axis (a transposed
    grid). A coordinate within 1e-6 pixel of a whole number (a row or column of pixel centres) is
    taken as on it (float noise of the origin). The mask is returned in the stored order."""
    size = np.asarray(shape, dtype=float) - 1
    moved = []
    for ring in rings:
        ring = np.where(flips, size - ring, ring)
        ring = ring[:, ::-1] if swap else ring
        nearest = np.round(ring)
        moved.append(np.where(np.abs(ring - nearest) < 1e-6, nearest, ring))
    mask = fill_even_odd(moved, tuple(shape[::-1]) if swap else tuple(shape))
    return np.flip(mask.T if swap else mask, [axis for axis in range(2) if flips[axis]])


def fill_even_odd(rings, shape) -> np.ndarray:
    """Boolean ``(rows, columns)`` mask of the pixels whose centre is inside ``rings`` by the
    even-odd rule; each ring is an ``(N, 2)`` array of (row, column) pixel coordinates, closed
    implicitly. Scanline fill: time grows with pixels plus edge crossings (``skimage.draw.polygon``
    tests every pixel of the bounding box against every vertex, 17 s for one real structure set).
    """
    starts = np.concatenate(rings)
    ends = np.concatenate([np.roll(ring, -1, axis=0) for ring in rings])
    low, high = np.minimum(starts[:, 0], ends[:, 0]), np.maximum(starts[:, 0], ends[:, 0])
    first, stop = np.ceil(low).astype(int), np.ceil(high).astype(int)  # rows r with low <= r < high
    first, stop = np.clip(first, 0, shape[0]), np.clip(stop, 0, shape[0])
    counts = np.maximum(stop - first, 0)
    edge = np.repeat(np.arange(len(starts)), counts)
    rows = np.repeat(first, counts) + np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    (r0, c0), (r1, c1) = starts[edge].T, ends[edge].T
    columns = c0 + (rows - r0) * (c1 - c0) / (r1 - r0)  # where each edge crosses each row centre
    order = np.lexsort((columns, rows))
    rows, columns = rows[order].reshape(-1, 2), np.ceil(columns[order]).astype(int).reshape(-1, 2)
    columns = np.clip(columns, 0, shape[1])  # pairs of crossings: [enter, leave) spans of columns
    steps = np.zeros((shape[0], shape[1] + 1), dtype=np.int32)
    np.add.at(steps, (rows[:, 0], columns[:, 0]), 1)
    np.add.at(steps, (rows[:, 0], columns[:, 1]), -1)
    return np.cumsum(steps, axis=1)[:, :-1] > 0


def even_odd_region(rings):
    """The region (shapely geometry, in-plane mm) inside closed ``rings`` (``(N, 2)`` arrays, closed
    implicitly) by the even-odd rule of :func:`fill_even_odd`, exactly: the faces of the arrangement
    of all ring edges (noded by shapely) whose interior is crossed an odd number of times. A ring
    inside another is a hole, a ring given twice (or traced twice) cancels, an out-and-back polygon
    encloses nothing, a self-crossing ring keeps each of its lobes. Rings that are valid polygons
    (no crossing, no repeated edge: the usual case) are combined by symmetric difference, the same
    region found faster. Needs shapely (the contour metrics); reading needs only :func:`even_odd_area`."""
    import shapely

    rings = [np.asarray(ring, dtype=float) for ring in rings if len(ring) >= 3]
    polygons = [shapely.Polygon(ring) for ring in rings]
    if all(polygon.is_valid for polygon in polygons):
        region = shapely.Polygon()
        for polygon in polygons:
            region = region.symmetric_difference(polygon)
        return region
    edges = shapely.union_all([shapely.LineString(np.vstack([ring, ring[:1]])) for ring in rings])
    faces = shapely.get_parts(shapely.polygonize(shapely.get_parts(edges)))
    faces = faces[shapely.area(faces) > 0]
    if not len(faces):
        return shapely.Polygon()
    probes = shapely.get_coordinates(shapely.point_on_surface(faces))  # inside a face: on no edge
    odd = inside_even_odd(probes, rings)
    return shapely.union_all(faces[odd])


def encloses_area(points) -> bool:
    """Whether a closed planar polygon (``(N, 3)`` mm) encloses an area by the even-odd rule
    (:func:`even_odd_area` in its plane, more than 1e-6 mm²). Fewer than 3 points, a polygon
    folded onto a line (within 1e-6 mm) or one going out and back along its own edges encloses
    nothing."""
    if len(points) < 3 or np.linalg.matrix_rank(points - points.mean(axis=0), tol=1e-6) < 2:
        return False
    return even_odd_area([points @ plane_axes([points])[:2].T]) > 1e-6


def even_odd_area(rings) -> float:
    """The area inside ``rings`` by the even-odd rule (squared units of the coordinates), exact up
    to rounding. The plane is cut into bands at every vertex height (first coordinate) and every
    height where two edges cross; within a band the edges crossing it are straight and keep their
    order, so the width inside is linear in the height and the band's area is its width at
    mid-height times its height."""
    rings = [np.asarray(ring, dtype=float) for ring in rings if len(ring) >= 3]
    if not rings:
        return 0.0
    starts = np.concatenate(rings)
    ends = np.concatenate([np.roll(ring, -1, axis=0) for ring in rings])
    cuts = np.unique(starts[:, 0])
    band, edge = _spans(starts, ends, cuts)
    crossings = _crossing_heights(starts, ends, cuts, band, edge)
    if len(crossings):
        cuts = np.union1d(cuts, crossings)
        band, edge = _spans(starts, ends, cuts)
    columns = _columns(starts, ends, edge, (cuts[band] + cuts[band + 1]) / 2)
    order = np.lexsort((columns, band))
    pairs = columns[order].reshape(-1, 2)  # each band is crossed an even number of times
    heights = np.diff(cuts)[band[order][::2]]
    return float(np.sum((pairs[:, 1] - pairs[:, 0]) * heights))


def _spans(starts, ends, cuts) -> tuple:
    """``(band, edge)`` for every edge (``starts`` to ``ends``) and band between consecutive
    ``cuts`` (sorted heights, every vertex height among them) that the edge spans; edges along a
    height span none."""
    low, high = np.minimum(starts[:, 0], ends[:, 0]), np.maximum(starts[:, 0], ends[:, 0])
    first, stop = np.searchsorted(cuts, low), np.searchsorted(cuts, high)  # bands first .. stop - 1
    counts = stop - first
    edge = np.repeat(np.arange(len(starts)), counts)
    band = np.repeat(first, counts) + np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    return band, edge


def _columns(starts, ends, edge, heights) -> np.ndarray:
    """The second coordinate of each ``edge`` (not along a height) at ``heights``."""
    (r0, c0), (r1, c1) = starts[edge].T, ends[edge].T
    return c0 + (heights - r0) * (c1 - c0) / (r1 - r0)


def _crossing_heights(starts, ends, cuts, band, edge) -> np.ndarray:
    """Heights strictly inside the bands between ``cuts`` where two edges spanning the band
    (:func:`_spans`) cross: self-crossing rings, rings crossing each other; none for simple rings."""
    bottom, top = _columns(starts, ends, edge, cuts[band]), _columns(starts, ends, edge, cuts[band + 1])
    order = np.lexsort((top, bottom, band))
    band, bottom, top = band[order], bottom[order], top[order]
    # sorted by the bottom column, a band whose top columns ever decrease holds a crossing
    crossed = np.unique(band[1:][(band[1:] == band[:-1]) & (top[1:] < top[:-1])])
    heights = []
    for index in crossed:
        b, t = bottom[band == index], top[band == index]
        db, dt = np.subtract.outer(b, b), np.subtract.outer(t, t)
        crossing = db * dt < 0
        share = db[crossing] / (db[crossing] - dt[crossing])  # of the band's height, below the crossing
        heights.append(cuts[index] + share * (cuts[index + 1] - cuts[index]))
    return np.concatenate(heights) if heights else np.empty(0)


def inside_even_odd(points, rings) -> np.ndarray:
    """Whether each of ``points`` (``(P, 2)``) lies inside ``rings`` by the even-odd rule: a ray from
    it towards increasing second coordinate crosses an odd number of edges (edges taken half-open
    in the first coordinate). Points exactly on an edge may go either way."""
    points = np.asarray(points, dtype=float).reshape(-1, 2)
    starts = np.concatenate([np.asarray(ring, dtype=float) for ring in rings])
    ends = np.concatenate([np.roll(np.asarray(ring, dtype=float), -1, axis=0) for ring in rings])
    (r0, c0), (r1, c1) = starts.T, ends.T
    row, column = points[:, :1], points[:, 1:]
    spans = (r0 <= row) != (r1 <= row)  # the edge crosses the point's height (half-open)
    with np.errstate(divide="ignore", invalid="ignore"):
        crossing_column = c0 + (row - r0) * (c1 - c0) / (r1 - r0)
    return np.count_nonzero(spans & (crossing_column > column), axis=1) % 2 == 1
