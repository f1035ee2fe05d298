"""Planar polygons (RT Structure Set contours) in numpy: their planes, the even-odd rule that fills
them and the area it encloses.

The rule, shared by the rasteriser (:func:`fill_even_odd`), the area (:func:`even_odd_area`) and the
point test (:func:`inside_even_odd`): a point is inside when a ray from it crosses the rings an odd
number of times (a ring inside another is a hole, a ring given twice cancels). Rings are ``(N, 2)``
arrays of in-plane coordinates, closed implicitly (the last point joined to the first).
:func:`even_odd_region` splits the region into connected parts (outer ring and holes) and
:func:`intersection_area` measures what two regions share, for the polygon metrics (MSI, Dice).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

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
    normal = oriented_normal(np.linalg.svd(centred, full_matrices=False)[2][2])
    first, _ = sorted(set(range(3)) - {int(np.argmax(np.abs(normal)))})
    u = np.eye(3)[first] - normal[first] * normal
    u /= np.linalg.norm(u)
    return np.array([u, np.cross(normal, u), normal])


def oriented_normal(normal) -> np.ndarray:
    """A plane normal turned so that its largest component is positive (z up for axial planes): the
    one direction in which plane positions are given, for contours and mask slices alike."""
    normal = np.asarray(normal, dtype=float)
    return normal * np.sign(normal[np.argmax(np.abs(normal))])


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


@dataclass(frozen=True)
class RegionPart:
    """One connected part of an :class:`EvenOddRegion`: ``rings``, its outer ring then its holes
    (``(N, 2)`` in-plane coordinates closed implicitly, the region on their left: the outer ring
    counterclockwise, the holes clockwise), its area and its centroid (squared units, units)."""

    rings: tuple
    area: float
    centroid: np.ndarray


@dataclass(frozen=True)
class EvenOddRegion:
    """The region inside closed rings by the even-odd rule of :func:`fill_even_odd`, as connected
    parts (:func:`even_odd_region`)."""

    parts: tuple

    @property
    def rings(self) -> list:
        """Every boundary ring of the region (outer rings and holes)."""
        return [ring for part in self.parts for ring in part.rings]

    @property
    def area(self) -> float:
        return float(sum(part.area for part in self.parts))

    @property
    def is_empty(self) -> bool:
        return not self.parts


def even_odd_region(rings) -> EvenOddRegion:
    """The region inside closed ``rings`` (``(N, 2)`` arrays, closed implicitly) by the even-odd
    rule of :func:`fill_even_odd`, exactly, split into its connected parts, each an outer ring and
    its holes (what shapely gives for the same region).

    Any rings are accepted: the edges are cut wherever they meet (crossings, a vertex on another
    edge, stretches run along twice) and the region's boundary is made of the pieces covered an
    odd number of times. So a ring inside another is a hole, a ring given twice (or traced twice)
    cancels, an out-and-back spur or a keyhole's channel is no boundary, and a self-crossing ring
    keeps each of its lobes as a part (shapely's faces of the noded edges, the same region). The
    boundary pieces are chained into rings keeping the region on their left, turning as sharply
    left as possible where more than two pieces meet: parts touching at a single point stay two
    parts, as in shapely. Points are matched exactly (vertices as given, a crossing computed once
    for both edges); a boundary that does not close raises ``ValueError``.

    The order is fixed by the region alone, not by how its rings were given: each ring starts at
    its lowest vertex (first coordinate, then second), holes and parts are sorted by that vertex.
    So what depends on the order of points (which of two equally near points the MSI takes) is
    the same for the same region."""
    rings = [ring[np.any(ring != np.roll(ring, -1, axis=0), axis=1)] for ring in map(np.asarray, rings)]
    rings = [ring.astype(float) for ring in rings if len(ring) >= 3]  # fewer points enclose nothing
    loops = _apart(rings)
    if loops is None:
        pieces = _region_on_left(_boundary_pieces(rings))
        loops = [pieces[chain, 0] for chain in _chains(pieces)] if len(pieces) else []
    loops = [_from_lowest_vertex(loop) for loop in loops]
    signed = np.array([_signed_area(loop) for loop in loops])
    outer = [k for k in np.argsort(signed) if signed[k] > 0]  # smallest first
    holes = {k: [] for k in outer}
    for k in np.flatnonzero(signed < 0):
        probe = (loops[k][:1] + loops[k][1:2]) / 2  # the middle of a boundary piece: on no other ring
        containing = [j for j in outer if inside_even_odd(probe, [loops[j]])[0]]
        if not containing:
            raise ValueError("a hole of an even-odd region lies in no outer ring")
        holes[containing[0]].append(k)
    parts = []
    for k in sorted(outer, key=lambda j: tuple(loops[j][0])):
        members = [loops[k]] + sorted((loops[j] for j in holes[k]), key=lambda loop: tuple(loop[0]))
        area = float(sum(signed[j] for j in [k] + holes[k]))
        parts.append(RegionPart(tuple(members), area, sum(_first_moments(m) for m in members) / area))
    return EvenOddRegion(tuple(parts))


def _apart(rings):
    """The rings turned to keep the region on their left (a ring inside an even number of the
    others counterclockwise, else clockwise) when they are the region's boundary as given: no
    point given twice and no edge meeting another (:func:`_meeting_points`), the usual contours;
    else None."""
    if not rings:
        return []
    vertices = np.concatenate(rings)
    if len(np.unique(vertices, axis=0)) < len(vertices):
        return None
    if len(_meeting_points(vertices, np.concatenate([np.roll(ring, -1, axis=0) for ring in rings]))[0]):
        return None
    probes = np.array([ring[0] for ring in rings])
    contains = np.array([inside_even_odd(probes, [ring]) for ring in rings])  # [ring, probe]
    depth = contains.sum(axis=0) - np.diagonal(contains)  # a probe on its own ring is not inside it
    return [ring if (_signed_area(ring) > 0) == (level % 2 == 0) else ring[::-1] for ring, level in zip(rings, depth)]


def _from_lowest_vertex(ring) -> np.ndarray:
    """A closed ring (no vertex twice) started at its lowest vertex (first coordinate, then second)."""
    return np.roll(ring, -int(np.lexsort((ring[:, 1], ring[:, 0]))[0]), axis=0)


def _signed_area(ring) -> float:
    """Shoelace area of a closed ring, positive when counterclockwise."""
    following = np.roll(ring, -1, axis=0)
    return float(np.sum(ring[:, 0] * following[:, 1] - following[:, 0] * ring[:, 1]) / 2)


def _first_moments(ring) -> np.ndarray:
    """The integrals of the two coordinates over a closed ring's interior, signed as
    :func:`_signed_area` (a centroid is their sum over rings divided by the area)."""
    following = np.roll(ring, -1, axis=0)
    cross = ring[:, 0] * following[:, 1] - following[:, 0] * ring[:, 1]
    return np.sum((ring + following) * cross[:, None], axis=0) / 6


def _ramp(counts) -> np.ndarray:
    """``0, 1, ..., n - 1`` for each ``n`` of ``counts``, concatenated."""
    return np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)


def _boundary_pieces(rings) -> np.ndarray:
    """``(P, 2, 2)`` pieces (start, end) of the ring edges cut at every point where edges meet,
    keeping each piece covered an odd number of times once: the boundary of the even-odd region.
    A cut at a vertex takes the vertex's coordinates, a crossing is computed once for both edges.
    No ring may hold a point twice in a row (a zero-length edge)."""
    starts = np.concatenate(rings)
    ends = np.concatenate([np.roll(ring, -1, axis=0) for ring in rings])
    edge, fraction, point = _meeting_points(starts, ends)
    edge = np.concatenate([np.arange(len(starts)), np.arange(len(starts)), edge])
    fraction = np.concatenate([np.zeros(len(starts)), np.ones(len(starts)), fraction])
    point = np.concatenate([starts, ends, point])
    order = np.lexsort((fraction, edge))
    edge, point = edge[order], point[order]
    follows = (edge[1:] == edge[:-1]) & np.any(point[1:] != point[:-1], axis=1)
    pieces = np.stack([point[:-1][follows], point[1:][follows]], axis=1)
    # count each piece whichever way it runs: the lower endpoint first
    flip = (pieces[:, 0, 0] > pieces[:, 1, 0]) | ((pieces[:, 0, 0] == pieces[:, 1, 0]) & (pieces[:, 0, 1] > pieces[:, 1, 1]))
    pieces[flip] = pieces[flip][:, ::-1]
    unique, counts = np.unique(pieces.reshape(-1, 4), axis=0, return_counts=True)
    return unique[counts % 2 == 1].reshape(-1, 2, 2)


def _meeting_points(starts, ends) -> tuple:
    """``(edge, fraction, point)``: where an edge (``starts`` to ``ends``) is met by another inside
    it (not at its own ends), as the fraction of its length and the point: a vertex of another
    edge lying on it (within 1e-12 of the coordinates' size: touching rings, stretches run along
    twice), or a proper crossing of two edges. Only edges whose bounding boxes overlap are tested."""
    low, high = np.minimum(starts, ends), np.maximum(starts, ends)
    order = np.argsort(low[:, 0], kind="stable")
    counts = np.searchsorted(low[order, 0], high[order, 0], side="right") - np.arange(len(order)) - 1
    first = np.repeat(np.arange(len(order)), counts)
    a, b = order[first], order[first + 1 + _ramp(counts)]
    boxes_meet = (low[a, 1] <= high[b, 1]) & (low[b, 1] <= high[a, 1])
    a, b = a[boxes_meet], b[boxes_meet]
    tolerance = 1e-12 * max(1.0, float(np.abs(starts).max()))
    found = []
    for edge, other in ((a, b), (b, a)):  # the other edge's vertices on the edge
        origin, direction = starts[edge], ends[edge] - starts[edge]
        squared = np.sum(direction ** 2, axis=1)
        for vertex in (starts[other], ends[other]):
            fraction = np.sum((vertex - origin) * direction, axis=1) / squared
            off_line = np.abs(_cross(direction, vertex - origin)) / np.sqrt(squared)
            on = (off_line <= tolerance) & (fraction > 0) & (fraction < 1)
            on &= np.any(vertex != starts[edge], axis=1) & np.any(vertex != ends[edge], axis=1)
            found.append((edge[on], fraction[on], vertex[on]))
    # a crossing is computed on the two edges taken in one order and direction whichever way they
    # were given, so that an edge drawn twice is crossed at the very same point
    lower = (starts[:, 0] < ends[:, 0]) | ((starts[:, 0] == ends[:, 0]) & (starts[:, 1] < ends[:, 1]))
    tail, head = np.where(lower[:, None], starts, ends), np.where(lower[:, None], ends, starts)
    rank = np.empty(len(starts), dtype=int)
    rank[np.lexsort((head[:, 1], head[:, 0], tail[:, 1], tail[:, 0]))] = np.arange(len(starts))
    one, other = np.where(rank[a] <= rank[b], a, b), np.where(rank[a] <= rank[b], b, a)
    r, s, offset = head[one] - tail[one], head[other] - tail[other], tail[other] - tail[one]
    denominator = _cross(r, s)
    with np.errstate(divide="ignore", invalid="ignore"):
        along_one, along_other = _cross(offset, s) / denominator, _cross(offset, r) / denominator
    length_one, length_other = np.hypot(*r.T), np.hypot(*s.T)
    proper = ((along_one * length_one > tolerance) & ((1 - along_one) * length_one > tolerance)
              & (along_other * length_other > tolerance) & ((1 - along_other) * length_other > tolerance))
    crossing = tail[one][proper] + along_one[proper, None] * r[proper]
    for edge in (a[proper], b[proper]):
        direction = ends[edge] - starts[edge]
        fraction = np.sum((crossing - starts[edge]) * direction, axis=1) / np.sum(direction ** 2, axis=1)
        found.append((edge, fraction, crossing))
    return tuple(np.concatenate(column) for column in zip(*found))


def _cross(u, v) -> np.ndarray:
    """The z component of the cross product of rows of 2-D vectors."""
    return u[..., 0] * v[..., 1] - u[..., 1] * v[..., 0]


def _region_on_left(pieces) -> np.ndarray:
    """Boundary ``pieces`` (:func:`_boundary_pieces`) turned so the region lies on their left.
    The side is read in a band between vertex heights (:func:`_spans`) that a piece crosses:
    the pieces crossing a band do not cross each other, so the region lies just beyond a piece
    (towards increasing second coordinate) when an odd number of them cross the band beyond it.
    A piece along the second axis is read the same way with the two coordinates swapped."""
    direction = pieces[:, 1] - pieces[:, 0]
    along_second = direction[:, 0] == 0
    # the side beyond a piece is on its left when the piece runs towards increasing first
    # coordinate (a piece along the second axis: towards decreasing second coordinate)
    beyond_on_left = np.where(along_second, direction[:, 1] < 0, direction[:, 0] > 0)
    region_beyond = np.zeros(len(pieces), dtype=bool)
    for swapped in (False, True) if along_second.any() else (False,):
        frame = pieces[:, :, ::-1] if swapped else pieces
        starts, ends = frame[:, 0], frame[:, 1]
        cuts = np.unique(frame[:, :, 0])
        band, edge = _spans(starts, ends, cuts)
        order = np.lexsort((_columns(starts, ends, edge, (cuts[band] + cuts[band + 1]) / 2), band))
        band, edge = band[order], edge[order]
        beyond = np.searchsorted(band, band, side="right") - np.arange(len(band)) - 1
        decided, first = np.unique(edge, return_index=True)
        decided_here = along_second[decided] == swapped
        region_beyond[decided[decided_here]] = beyond[first[decided_here]] % 2 == 1
    turned = pieces.copy()
    flip = region_beyond != beyond_on_left
    turned[flip] = pieces[flip][:, ::-1]
    return turned


def _chains(pieces) -> list:
    """Closed chains of ``pieces`` (start, end; each end the start of as many pieces as end
    there), as arrays of piece indices, none passing a point twice. Where several pieces leave a
    point, the next is the sharpest left turn (first clockwise from the way back); a chain that
    comes back to a point it passed is split there into two (parts touching at a point are two
    outer rings, a hole touching its outer ring is a hole: shapely's valid rings)."""
    points, index = np.unique(pieces.reshape(-1, 2), axis=0, return_inverse=True)
    start, end = index.reshape(-1, 2).T
    leaving_count = np.bincount(start, minlength=len(points))
    if not np.array_equal(leaving_count, np.bincount(end, minlength=len(points))):
        raise ValueError("the boundary of an even-odd region does not close")
    leaving = np.argsort(start, kind="stable")
    first = np.r_[0, np.cumsum(leaving_count)]
    direction = pieces[:, 1] - pieces[:, 0]
    angle = np.arctan2(direction[:, 1], direction[:, 0])
    following = leaving[first[end]]  # the only piece leaving, where one does
    for k in np.flatnonzero(leaving_count[end] > 1):
        candidates = leaving[first[end[k]]:first[end[k] + 1]]
        following[k] = candidates[np.argmin((angle[k] + np.pi - angle[candidates]) % (2 * np.pi))]
    if not np.array_equal(np.sort(following), np.arange(len(pieces))):
        raise ValueError("the boundary of an even-odd region does not close")
    chains = []
    for chain in _cycles(following):
        shared_point = leaving_count[start[chain]] > 1
        chains += _split_at_repeated_points(chain.tolist(), start) if shared_point.any() else [chain]
    return chains


def _cycles(following) -> list:
    """The cycles of a permutation (``following[k]``: the element after ``k``), each an array
    starting at its smallest element, in order. Pointer doubling: each element's distance to the
    cycle's last element (the one before its smallest) is summed along jumps that double."""
    from scipy.sparse import coo_matrix  # scipy loads with the first crossing rings, not with the package
    from scipy.sparse.csgraph import connected_components

    size = len(following)
    label = connected_components(coo_matrix((np.ones(size), (np.arange(size), following)), shape=(size, size)),
                                 connection="weak")[1]
    smallest = np.full(label.max() + 1, size)
    np.minimum.at(smallest, label, np.arange(size))
    last = following == smallest[label]
    jump = np.where(last, np.arange(size), following)
    remaining = (~last).astype(int)
    while np.any(jump != jump[jump]):
        remaining = remaining + remaining[jump]
        jump = jump[jump]
    order = np.lexsort((-remaining, label))
    return np.split(order, np.flatnonzero(np.diff(label[order])) + 1)


def _split_at_repeated_points(chain, start) -> list:
    """A closed chain of pieces (indices; ``start``: each piece's start point) cut into closed
    chains passing each point once: whenever the walk comes back to a point, the loop since then
    is closed off."""
    loops, walk, position = [], [], {}
    for k in chain:
        if start[k] in position:
            loop = walk[position[start[k]]:]
            del walk[position[start[k]]:]
            for piece in loop:
                del position[start[piece]]
            loops.append(loop)
        position[start[k]] = len(walk)
        walk.append(k)
    return loops + [walk]


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
    to rounding (:func:`_area_inside_all`)."""
    return _area_inside_all([rings])


def intersection_area(first, second) -> float:
    """The area inside both the even-odd region of the rings ``first`` and that of ``second``
    (squared units of the coordinates), exact up to rounding: measured directly, so regions that
    only touch (a shared edge or vertex) or lie apart share exactly 0, never a rounding residue."""
    return _area_inside_all([first, second])


def _area_inside_all(ring_sets) -> float:
    """The area inside every one of the even-odd regions of ``ring_sets`` (lists of rings). The
    plane is cut into bands at every vertex height (first coordinate) and every height where two
    edges cross; within a band the edges crossing it are straight and keep their order, so the
    width inside is linear in the height and the band's area is its width at mid-height times its
    height. Each edge runs towards increasing height, so an edge given in both directions crosses
    a band at the same column."""
    sets = [[np.asarray(ring, dtype=float) for ring in rings if len(ring) >= 3] for rings in ring_sets]
    if not all(sets):
        return 0.0
    starts = np.concatenate([ring for rings in sets for ring in rings])
    ends = np.concatenate([np.roll(ring, -1, axis=0) for rings in sets for ring in rings])
    side = np.repeat(np.arange(len(sets)), [sum(len(ring) for ring in rings) for rings in sets])
    downwards = starts[:, 0] > ends[:, 0]
    starts, ends = np.where(downwards[:, None], ends, starts), np.where(downwards[:, None], starts, ends)
    cuts = np.unique(np.concatenate([starts[:, 0], ends[:, 0]]))
    band, edge = _spans(starts, ends, cuts)
    crossings = _crossing_heights(starts, ends, cuts, band, edge)
    if len(crossings):
        cuts = np.union1d(cuts, crossings)
        band, edge = _spans(starts, ends, cuts)
    columns = _columns(starts, ends, edge, (cuts[band] + cuts[band + 1]) / 2)
    order = np.lexsort((columns, band))
    band, edge, columns = band[order], edge[order], columns[order]
    # each side crosses each band an even number of times: the parities start even in every band
    parities = np.cumsum(side[edge] == np.arange(len(sets))[:, None], axis=1) % 2
    inside = np.all(parities[:, :-1] == 1, axis=0) & (band[1:] == band[:-1])
    return float(np.sum((columns[1:] - columns[:-1])[inside] * np.diff(cuts)[band[:-1][inside]]))


def _spans(starts, ends, cuts) -> tuple:
    """``(band, edge)`` for every edge (``starts`` to ``ends``) and band between consecutive
    ``cuts`` (sorted heights, every vertex height among them) that the edge spans; edges along a
    height span none."""
    low, high = np.minimum(starts[:, 0], ends[:, 0]), np.maximum(starts[:, 0], ends[:, 0])
    first, stop = np.searchsorted(cuts, low), np.searchsorted(cuts, high)  # bands first .. stop - 1
    counts = stop - first
    edge = np.repeat(np.arange(len(starts)), counts)
    band = np.repeat(first, counts) + _ramp(counts)
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
