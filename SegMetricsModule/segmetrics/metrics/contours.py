"""Contour-level metrics per plane, exact on the polygons: added path length, in-plane distances.

When both inputs are RT Structure Sets, their closed planar polygons (patient mm) are measured
themselves, without rasterising. For masks the contours are those of slice-wise MSI: marching
squares boundaries (:func:`segmetrics.spatial.mesh.contours_2d`) of each slice along the MSI slice axis
(:func:`segmetrics.metrics.msi.pair_slice_axis`: ``Parameters.msi_axis`` or the through-plane axis). Polygons
are grouped by plane (:func:`segmetrics.metrics.msi.compared_planes`, shared with the polygon MSI; planes
closer than :data:`segmetrics.inputs.polygons.PLANE_TOLERANCE_MM` are one). Each side's contour on a plane is
the boundary of its even-odd region (:func:`boundary_segments`: every ring edge, less the stretches
two edges run along together, so a contour given twice is none and a keyhole's channel or an
out-and-back spur is not drawn).

**Distances are exact** (numpy only): along every edge of one boundary, the distance to the other
boundary is the lower envelope of the distances to its segments, each a hyperbola
``sqrt((t - t0)² + h²)`` (nearest point: a vertex) or ``|α (t - t0)|`` (nearest point inside a
segment) of the position ``t`` (mm) along the edge. :func:`distance_profile` cuts each edge where
the nearest segment or its nearest part changes (the edge crosses the other contour's medial axis),
so that one such function holds on each piece; maxima, integrals and the length within any
distance then follow in closed form (:class:`DistanceProfile`), and percentiles by bisection on
that length to 1e-12 of the largest distance.

- **added path length** ``apl_mm`` (Vaassen et al., Phys Imaging Radiat Oncol 13, 2020): the
  length of the reference contour farther than ``Parameters.apl_tolerance_mm`` from the test
  contour, i.e. what a person must draw to correct the test. A plane without test contour adds
  its whole reference length; a plane without reference contour adds 0. ``apl_fraction`` =
  ``apl_mm`` / reference length.
- distances, per direction (``reference_to_test``: from every point of the reference contour to
  the test contour, and back) over the planes both sides contour, length-weighted: the largest
  (``hd``), any percentile (``hd95``, ``hdp`` at ``Parameters.hd_percentile``, ``median``) and the
  mean. The two directions combine as the **larger** value for the largest distance and the
  percentiles and as the **mean of the two means** for the mean distance.
- planes one side only contours: the distances cannot be measured there, so the distance metrics
  get status ``missing_planes`` (never ``ok``) and their params name the planes
  (``reference_only_planes_mm`` / ``test_only_planes_mm``: the planes' patient coordinates along
  their normal, mm, increasing; z for axial planes, as a planning system shows them; alike for
  polygons and masks and in every storage of the grid);
  APL counts them (the whole reference length, or nothing). Without any plane both sides contour,
  the distances are ``inf``.

The per-plane rows go to ``extras["contour_slices"]`` (the stored array axis they cut to
``extras["contour_axis"]``): ``slice`` (the user's stored array's slice
index, as in the per-slice MSI rows; for polygons the grid slice the plane was rasterised on),
``position_mm`` (masks: slice × spacing; polygons: position along the plane normal, patient mm),
``dice`` (the slice's Dice: pixel counts, or exact areas of the even-odd filled polygons),
contour lengths, ``apl_mm``, ``hd_mm`` and ``mean_distance_mm`` (same conventions, on the plane);
:mod:`segmetrics.outputs.slices` joins them with the per-slice MSI rows.
Rasterised, the same polygons give the same values within one pixel (tested): the mask boundary
runs half-way between pixel centres, within a pixel of the polygon.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.spatial import cKDTree

from .msi import compared_planes, contour_planes, pair_slice_axis
from ..inputs.polygons import intersection_area, oriented_normal
from ..spatial.geometry import LabelImage
from ..spatial.orientation import Reorientation
from ..registry import (MetricGroup, MetricSpec, MetricValue, Parameters, Status, StructurePair, emptiness_status,
                       register_group, undefined)

#: Edges closer than this (mm, across and along their line) are taken as one where they overlap
#: (:func:`boundary_segments`); far below any drawing precision (RTSTRUCT files keep ~1e-6 mm).
OVERLAP_TOLERANCE_MM = 1e-7
#: Edges of both contours are cut into pieces at most twice the median segment of the other
#: contour long, but into no more than this many, before the nearest segments are searched: a long
#: edge facing a finely drawn contour then meets a few segments per piece (values unchanged).
MAX_EDGE_PIECES = 256
#: Nearest target segments found for each source edge at once; a ball search finds more when needed.
NEAREST_SEGMENTS = 8

_DIRECTIONS = ("reference_to_test", "test_to_reference")
METRICS = (
    MetricSpec("apl_mm", "mm", "lower", "added path length: reference contour farther than "
               "Parameters.apl_tolerance_mm from the test contour, summed over planes"),
    MetricSpec("apl_fraction", "1", "lower", "added path length as a fraction of the reference contour length"),
    MetricSpec("contour_hd_mm", "mm", "lower", "largest in-plane distance between the two contours, the larger "
               "direction (planes contoured on both sides)"),
    MetricSpec("contour_hd95_mm", "mm", "lower", "95th percentile of the in-plane distance along each contour "
               "(length-weighted), the larger direction"),
    MetricSpec("contour_hdp_mm", "mm", "lower", "Parameters.hd_percentile-th percentile of the in-plane distance "
               "along each contour (length-weighted), the larger direction"),
    MetricSpec("contour_median_mm", "mm", "lower", "median in-plane distance along each contour (length-weighted), "
               "the larger direction"),
    MetricSpec("contour_mean_distance_mm", "mm", "lower", "mean in-plane distance between the two contours: mean of "
               "the two directions' length-weighted means"),
    *(MetricSpec(f"contour_{statistic}_{direction}_mm", "mm", "lower",
                 f"{label} in-plane distance from the {direction.replace('_to_', ' contour to the ')} contour")
      for statistic, label in (("hd", "largest"), ("hd95", "95th percentile of the"), ("mean", "mean"))
      for direction in _DIRECTIONS),
)


# ---------------------------------------------------------------- boundaries


def _cross(a, b) -> np.ndarray:
    """z component of the cross products of rows of 2-D vectors."""
    return a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]


def boundary_segments(rings) -> np.ndarray:
    """``(N, 2, 2)`` segments (start, end; in-plane mm) of the boundary of the even-odd region of
    closed ``(M, 2)`` rings (closed implicitly): the ring edges, less every stretch that an even
    number of edges run along (within :data:`OVERLAP_TOLERANCE_MM`), where the region is on both or
    neither side. Zero-length edges are dropped."""
    rings = [np.asarray(ring, dtype=float) for ring in rings if len(ring) >= 2]
    if not rings:
        return np.empty((0, 2, 2))
    segments = np.concatenate([np.stack([ring, np.roll(ring, -1, axis=0)], axis=1) for ring in rings])
    vector = segments[:, 1] - segments[:, 0]
    length = np.hypot(*vector.T)
    segments, vector, length = segments[length > 0], vector[length > 0], length[length > 0]
    unit = vector / length[:, None]
    unit *= np.where((unit[:, 0] < 0) | ((unit[:, 0] == 0) & (unit[:, 1] < 0)), -1.0, 1.0)[:, None]
    angle = np.arctan2(unit[:, 1], unit[:, 0])  # the line's direction, in (-pi/2, pi/2]
    offset = _cross(unit, segments[:, 0])  # signed distance of the line from the origin
    along = np.einsum("ni,nki->nk", unit, segments)
    start, end = along.min(axis=1), along.max(axis=1)
    scale = OVERLAP_TOLERANCE_MM / max(1.0, float(np.abs(segments).max()))  # angle tolerance (rad)
    order = np.lexsort((start, offset, angle))
    new_line = np.r_[True, (np.diff(angle[order]) > scale) | (np.abs(np.diff(offset[order])) > OVERLAP_TOLERANCE_MM)]
    line = np.cumsum(new_line)[np.argsort(order)]
    order = np.lexsort((start, line))
    overlapping = (line[order][1:] == line[order][:-1]) & (start[order][1:] < end[order][:-1] - OVERLAP_TOLERANCE_MM)
    lines = np.unique(line[order][1:][overlapping])
    # a run of edges sorted by start overlaps somewhere iff two consecutive ones do
    kept = [segments[~np.isin(line, lines)]]
    for number in lines:
        members = np.flatnonzero(line == number)
        kept.append(_odd_stretches(start[members], end[members], unit[members[0]], offset[members].mean()))
    return np.concatenate(kept)


def _odd_stretches(start, end, unit, offset) -> np.ndarray:
    """The stretches of one line (``unit`` direction, ``offset`` from the origin, mm) covered by an
    odd number of the intervals ``[start, end]`` (mm along ``unit``), as segments."""
    events = np.concatenate([start, end])
    order = np.argsort(events, kind="stable")
    coverage = np.cumsum(np.r_[np.ones(len(start)), -np.ones(len(end))][order])
    positions = events[order]
    odd = (coverage[:-1] % 2 == 1) & (np.diff(positions) > OVERLAP_TOLERANCE_MM)
    normal = np.array([-unit[1], unit[0]]) * offset
    return np.stack([positions[:-1][odd, None] * unit + normal, positions[1:][odd, None] * unit + normal], axis=1)


# ---------------------------------------------------------------- the distance along a boundary


_PROFILE_FIELDS = ("plane", "low", "high", "curvature", "centre", "floor")


@dataclass
class DistanceProfile:
    """The exact distance (mm) from a boundary to another, piece by piece: on piece ``i``, at ``t``
    mm along its edge (``low[i] <= t <= high[i]``), the distance is
    ``sqrt(curvature[i] (t - centre[i])² + floor[i])``; ``plane[i]`` is the plane the piece lies on."""

    plane: np.ndarray
    low: np.ndarray
    high: np.ndarray
    curvature: np.ndarray
    centre: np.ndarray
    floor: np.ndarray

    def _at(self, t) -> np.ndarray:
        return np.sqrt(self.curvature * (t - self.centre) ** 2 + self.floor)

    @property
    def length(self) -> float:
        """Length of the boundary (mm)."""
        return float(np.sum(self.high - self.low))

    def maximum(self) -> float:
        """Largest distance (mm): at a piece's end, as the distance is convex on each piece."""
        return float(max(self._at(self.low).max(), self._at(self.high).max())) if len(self.low) else 0.0

    def integral(self) -> float:
        """Integral of the distance along the boundary (mm²), in closed form."""
        return float(self._integrals().sum())

    def _integrals(self) -> np.ndarray:
        """Per piece, the integral of the distance along it (mm²), in closed form."""
        width = self.high - self.low
        u_low, u_high = self.low - self.centre, self.high - self.centre
        curved = self.curvature > 0
        squared_h = np.divide(self.floor, self.curvature, out=np.zeros_like(self.floor), where=curved)
        h = np.sqrt(squared_h)
        # straight pieces |u|: (u_high |u_high| - u_low |u_low|) / 2, without cancelling large u
        same_side = u_low * u_high >= 0
        straight = np.where(same_side, width * (np.abs(u_low) + np.abs(u_high)), u_low ** 2 + u_high ** 2) / 2
        with np.errstate(divide="ignore", invalid="ignore"):
            hyperbola = (u_high * np.hypot(u_high, h) - u_low * np.hypot(u_low, h)
                         + squared_h * (np.arcsinh(u_high / h) - np.arcsinh(u_low / h))) / 2
        return np.where(~curved, np.sqrt(self.floor) * width, np.sqrt(self.curvature) * np.where(h > 0, hyperbola, straight))

    def mean(self) -> float:
        """Length-weighted mean distance (mm)."""
        return self.integral() / self.length

    def by_plane(self, planes: int, tolerance_mm: float) -> tuple:
        """``(length, largest, mean, length beyond tolerance_mm)`` (mm) per plane ``0 .. planes - 1``."""
        def total(values):
            return np.bincount(self.plane, weights=values, minlength=planes)

        largest = np.zeros(planes)
        np.maximum.at(largest, self.plane, np.maximum(self._at(self.low), self._at(self.high)))
        length = total(self.high - self.low)
        with np.errstate(divide="ignore", invalid="ignore"):
            mean = total(self._integrals()) / length
        return length, largest, mean, total(self.high - self.low - self._within(tolerance_mm))

    def _within(self, distance: float) -> np.ndarray:
        """Per piece, its length (mm) at most ``distance`` mm from the other boundary."""
        squared = distance ** 2
        with np.errstate(divide="ignore", invalid="ignore"):
            reach = np.sqrt(np.maximum(squared - self.floor, 0.0) / self.curvature)
        inside = np.clip(np.minimum(self.high, self.centre + reach) - np.maximum(self.low, self.centre - reach), 0, None)
        return np.where(self.floor > squared, 0.0, np.where(self.curvature == 0, self.high - self.low, inside))

    def length_within(self, distance: float) -> float:
        """Length of the boundary (mm) at most ``distance`` mm from the other one."""
        return float(self._within(distance).sum())

    def length_beyond(self, distance: float) -> float:
        """Length of the boundary (mm) farther than ``distance`` mm from the other one."""
        return float(np.sum(self.high - self.low - self._within(distance)))

    def percentile(self, percent: float) -> float:
        """The smallest distance (mm) within which ``percent`` % of the boundary's length lies. The
        length within a distance is at least that of the pieces wholly within it and at most that of
        the pieces reaching within it, so the percentile lies between the first distances at which
        these two hold the share: the lower one exactly when the share is reached there (0 where the
        contours coincide), else found by bisection to 1e-12 of the distance (pieces wholly within or
        beyond the bracket leave the search). The share counts as reached within the rounding of a
        sum of the pieces' lengths (4 × pieces × machine epsilon of the length): where it is reached
        exactly (a plateau of the distribution), lengths summed in another order (another storage of
        the grid) must not move the percentile to the plateau's far end."""
        rounding = 4 * len(self.low) * np.finfo(float).eps * self.length
        wanted = percent / 100 * self.length - rounding
        if percent >= 100 or not len(self.low):
            return self.maximum()
        ends = self._at(self.low), self._at(self.high)
        inner = (self.centre > self.low) & (self.centre < self.high)
        nearest = np.where(inner, np.sqrt(self.floor), np.minimum(*ends))
        farthest, width = np.maximum(*ends), self.high - self.low
        low = _first_holding(nearest, width, wanted)
        if self.length_within(low) >= wanted:
            return low
        high = max(_first_holding(farthest, width, wanted), low)
        piece, counted = self, 0.0
        while high - low > 1e-12 * max(high, 1e-300):
            middle = (low + high) / 2
            low, high = (low, middle) if counted + piece.length_within(middle) >= wanted else (middle, high)
            below, beyond = farthest <= low, nearest > high
            if below.any() or beyond.any():
                counted += float(width[below].sum())
                keep = ~(below | beyond)
                piece = DistanceProfile(*(getattr(piece, name)[keep] for name in _PROFILE_FIELDS))
                nearest, farthest, width = nearest[keep], farthest[keep], width[keep]
        return high


def _first_holding(distances, lengths, wanted: float) -> float:
    """The smallest of ``distances`` (mm) at which the ``lengths`` (mm) of the pieces at or below it
    sum to ``wanted`` (the largest when they never do)."""
    order = np.argsort(distances, kind="stable")
    index = min(int(np.searchsorted(np.cumsum(lengths[order]), wanted)), len(order) - 1)
    return float(distances[order[index]])


def _pieces_of_edges(segments, typical: float) -> tuple:
    """``(owner, starts, units, lengths)``: each segment cut into equal pieces at most twice
    ``typical`` mm long, but into no more than :data:`MAX_EDGE_PIECES` (the segment of each piece,
    its start in mm, unit direction and length in mm)."""
    count = np.clip(np.ceil(np.hypot(*(segments[:, 1] - segments[:, 0]).T) / (2 * typical)), 1,
                    MAX_EDGE_PIECES).astype(int)
    owner = np.repeat(np.arange(len(segments)), count)
    index = np.arange(len(owner)) - np.repeat(np.cumsum(count) - count, count)
    vector = segments[:, 1] - segments[:, 0]
    step = vector[owner] / count[owner, None]
    length = np.hypot(*step.T)
    return owner, segments[owner, 0] + index[:, None] * step, step / length[:, None], length


def _point_segment_distance(points, starts, vectors) -> np.ndarray:
    """Distance (mm) from each point to the segment ``start + s vector``, ``0 <= s <= 1``."""
    s = np.clip(np.einsum("ni,ni->n", points - starts, vectors) / np.einsum("ni,ni->n", vectors, vectors), 0, 1)
    return np.hypot(*(points - starts - s[:, None] * vectors).T)


def _candidate_pairs(starts, units, lengths, source_planes, target, target_planes) -> tuple:
    """``(edge, segment, bound)``: for each source edge, every target segment on its plane
    that can be the nearest one somewhere on it (its distance to the edge is at most the least,
    over target segments, of the larger distance from the edge's two ends: a bound on the
    distance along the whole edge, as the distance to one segment is convex along the edge),
    and that bound per source edge (mm).
    The search runs on every plane at once: planes are set apart along a third axis by more than
    any in-plane distance."""
    ends = starts + units * lengths[:, None]
    target_vectors = target[:, 1] - target[:, 0]
    everything = np.concatenate([starts, ends, target[:, 0], target[:, 1]])
    apart = 4 * float(np.ptp(everything, axis=0).sum()) + 1.0

    def stacked(points, planes):
        return np.column_stack([points, planes * apart])

    tree = cKDTree(stacked((target[:, 0] + target[:, 1]) / 2, target_planes))
    middles = stacked((starts + ends) / 2, source_planes)
    distance, index = (found.reshape(len(middles), -1) for found in tree.query(middles, k=min(NEAREST_SEGMENTS, tree.n)))
    nearest = index[:, 0]  # (any of equally near ones: the bound only sets the search radius)
    bound = np.maximum(_point_segment_distance(starts, target[nearest, 0], target_vectors[nearest]),
                       _point_segment_distance(ends, target[nearest, 0], target_vectors[nearest]))
    radius = bound + lengths / 2 + np.hypot(*target_vectors.T).max() / 2
    edge, segment = _within_radius(tree, middles, radius * (1 + 1e-9) + 1e-12, distance, index)
    a, v = target[segment, 0], target_vectors[segment]
    far = np.maximum(_point_segment_distance(starts[edge], a, v), _point_segment_distance(ends[edge], a, v))
    least = np.full(len(starts), np.inf)
    np.minimum.at(least, edge, far)
    gap = _segment_distance(starts[edge], ends[edge], a, a + v)
    keep = (gap <= least[edge] * (1 + 1e-9) + 1e-12) & (source_planes[edge] == target_planes[segment])
    return edge[keep], segment[keep], least


def _within_radius(tree, points, radius, distance, index) -> tuple:
    """``(point, found)`` index arrays of the tree's points within ``radius[point]`` of each point,
    given the ``distance`` and ``index`` ``(points, k)`` of the ``k`` nearest ones (``tree.query``):
    a ball search for the points with more than ``k``."""
    inside = distance <= radius[:, None]
    more = np.flatnonzero(inside[:, -1])
    inside[more] = False
    point, column = np.nonzero(inside)
    found = tree.query_ball_point(points[more], radius[more])
    return (np.concatenate([point, np.repeat(more, [len(f) for f in found])]),
            np.concatenate([index[point, column], *[np.asarray(f, int) for f in found]]))


def _segment_distance(p0, p1, q0, q1) -> np.ndarray:
    """Distance (mm) between segments ``p0 p1`` and ``q0 q1`` (0 when they cross or touch)."""
    def side(a, b, c):
        return _cross(b - a, c - a)

    crossing = (side(q0, q1, p0) * side(q0, q1, p1) <= 0) & (side(p0, p1, q0) * side(p0, p1, q1) <= 0)
    ends = np.minimum.reduce([_point_segment_distance(p0, q0, q1 - q0), _point_segment_distance(p1, q0, q1 - q0),
                              _point_segment_distance(q0, p0, p1 - p0), _point_segment_distance(q1, p0, p1 - p0)])
    return np.where(crossing, 0.0, ends)


def _segment_pieces(starts, units, lengths, edge, segment, target) -> tuple:
    """``(edge, owner, low, high, curvature, centre, floor)``: the distance from each candidate
    pair's edge (``t`` mm along it) to its segment, in up to three pieces: nearest point the
    segment's first end the edge passes, a point inside it, or its other end."""
    p0, u = starts[edge], units[edge]
    a, w = target[segment, 0], target[segment, 1] - target[segment, 0]
    squared_w = np.einsum("ni,ni->n", w, w)
    projection0 = np.einsum("ni,ni->n", p0 - a, w) / squared_w
    slope = np.einsum("ni,ni->n", u, w) / squared_w
    slope = np.where(slope == 0, 1e-300, slope)  # parallel: the segment's end beyond the edge's reach
    with np.errstate(over="ignore"):
        enters, leaves = np.sort([-projection0 / slope, (1 - projection0) / slope], axis=0)
    enters, leaves = np.clip(enters, 0, lengths[edge]), np.clip(leaves, 0, lengths[edge])
    first, second = np.where(slope[:, None] > 0, a, a + w), np.where(slope[:, None] > 0, a + w, a)

    def vertex(point):
        offset = point - p0
        return np.ones(len(edge)), np.einsum("ni,ni->n", offset, u), _cross(u, offset) ** 2

    normal = np.column_stack([-w[:, 1], w[:, 0]]) / np.sqrt(squared_w)[:, None]
    alpha, beta = np.einsum("ni,ni->n", normal, u), np.einsum("ni,ni->n", normal, p0 - a)
    parallel = np.abs(alpha) < 1e-100  # (t - centre)² would overflow: the distance is |beta| within 1e-94 mm
    inner = (alpha ** 2, np.where(parallel, 0.0, -beta / np.where(parallel, 1.0, alpha)),
             np.where(parallel, beta ** 2, 0.0))
    parts = [(np.zeros(len(edge)), enters, vertex(first)), (enters, leaves, inner),
             (leaves, lengths[edge], vertex(second))]
    columns = [np.concatenate(values) for values in zip(*[(edge, segment, low, high, *shape)
                                                          for low, high, shape in parts])]
    keep = columns[3] > columns[2]
    return tuple(column[keep] for column in columns)


def _can_be_lowest(low, high, curvature, centre, floor, bound) -> np.ndarray:
    """Whether each piece's least distance is within ``bound`` (mm, what the distance never exceeds on
    the piece's edge)."""
    ends = np.minimum(curvature * (low - centre) ** 2, curvature * (high - centre) ** 2)
    least = np.where((centre > low) & (centre < high), 0.0, ends) + floor
    return least <= (bound * (1 + 1e-9) + 1e-12) ** 2


def _group_pairs(group) -> tuple:
    """Index pairs ``(i, j)``, ``i < j``, of the entries of a sorted group array in one group."""
    first_of_group = np.searchsorted(group, group, side="right")
    count = first_of_group - np.arange(len(group)) - 1
    i = np.repeat(np.arange(len(group)), count)
    j = i + 1 + np.arange(len(i)) - np.repeat(np.cumsum(count) - count, count)
    return i, j


def _crossings(curvature, centre, floor, i, j, low, high) -> tuple:
    """``(pair, t)``: where the distance functions of pieces ``i`` and ``j`` are equal within
    ``[low, high]`` (roots of the difference of the squared distances, a quadratic in ``t``)."""
    def coefficients(k):
        return curvature[k], -2 * curvature[k] * centre[k], curvature[k] * centre[k] ** 2 + floor[k]

    (a1, b1, c1), (a2, b2, c2) = coefficients(i), coefficients(j)
    a, b, c = a1 - a2, b1 - b2, c1 - c2
    with np.errstate(divide="ignore", invalid="ignore"):
        root = np.sqrt(b * b - 4 * a * c)
        q = -(b + np.copysign(root, b)) / 2
        candidates = [np.where(a != 0, q / a, -c / b), np.where(a != 0, c / q, np.nan)]
    pairs = np.arange(len(i))
    pair = np.concatenate([pairs, pairs])
    t = np.concatenate(candidates)
    inside = np.isfinite(t) & (t > low[pair]) & (t < high[pair])
    return pair[inside], t[inside]


def distance_profile(source, target, source_planes=None, target_planes=None) -> DistanceProfile:
    """The exact distance from every point of the ``source`` segments to the ``target`` segments
    on the same plane (``(N, 2, 2)`` arrays of :func:`boundary_segments`, mm; ``*_planes``: each
    segment's plane number, default all 0; every source plane needs target segments): per
    source edge, the lower envelope of the distances to the target segments that can be
    nearest, cut where they cross. A source edge that is also a target segment (the same two ends)
    is at distance 0 exactly all along, without a search (where contours coincide, as the
    boundaries of two masks often do)."""
    source_planes = np.zeros(len(source), int) if source_planes is None else np.asarray(source_planes)
    target_planes = np.zeros(len(target), int) if target_planes is None else np.asarray(target_planes)
    typical = np.median(np.hypot(*(target[:, 1] - target[:, 0]).T))
    owner, starts, units, lengths = _pieces_of_edges(source, typical)
    edge_planes = source_planes[owner]
    on_target = _shared_segments(source, source_planes, target, target_planes)[owner]
    target_owner, target_starts, target_units, target_lengths = _pieces_of_edges(target, typical)
    target = np.stack([target_starts, target_starts + target_units * target_lengths[:, None]], axis=1)
    searched, shared = np.flatnonzero(~on_target), np.flatnonzero(on_target)
    if len(searched):
        envelope = _lower_envelope(starts[searched], units[searched], lengths[searched], edge_planes[searched], target,
                                   target_planes[target_owner])
    else:  # every edge is shared
        envelope = (np.zeros(0, int), *5 * [np.zeros(0)])
    zero = np.zeros(len(shared))
    edge, low, high, curvature, centre, floor = (np.concatenate(parts) for parts in zip(
        (searched[envelope[0]], *envelope[1:]), (shared, zero, lengths[shared], zero, zero, zero)))
    order = np.argsort(edge, kind="stable")  # the pieces of each edge stay in their order along it
    return DistanceProfile(edge_planes[edge[order]], low[order], high[order], curvature[order], centre[order],
                           floor[order])


def _shared_segments(source, source_planes, target, target_planes) -> np.ndarray:
    """Whether each source segment is also a target segment on its plane: the same two ends (mm,
    equal numbers), in either order."""
    def rows(segments, planes):
        first, second = segments[:, 0] + 0.0, segments[:, 1] + 0.0  # (-0.0 as 0.0)
        swap = (second[:, 0] < first[:, 0]) | ((second[:, 0] == first[:, 0]) & (second[:, 1] < first[:, 1]))
        first[swap], second[swap] = second[swap], first[swap].copy()
        return np.column_stack([planes, first, second])

    keys = np.concatenate([rows(target, target_planes), rows(source, source_planes)])
    order = np.lexsort(keys.T[::-1])
    ordered = keys[order]
    group = np.cumsum(np.r_[True, np.any(ordered[1:] != ordered[:-1], axis=1)]) - 1
    holds_target = np.zeros(len(keys), bool)
    holds_target[group[order < len(target)]] = True
    found = np.empty(len(keys), bool)
    found[order] = holds_target[group]
    return found[len(target):]


def _lower_envelope(starts, units, lengths, edge_planes, target, target_planes) -> tuple:
    """``(edge, low, high, curvature, centre, floor)`` of :func:`distance_profile`'s pieces along the
    source edges (``starts``, ``units``, ``lengths`` mm, index ``edge``) to the target segments
    (``target``, ``(M, 2, 2)`` mm), in order of edge and position along it."""
    edge, segment, bound = _candidate_pairs(starts, units, lengths, edge_planes, target, target_planes)
    pieces = _segment_pieces(starts, units, lengths, edge, segment, target)
    edge, owner, low, high, curvature, centre, floor = (x[_can_be_lowest(*pieces[2:], bound[pieces[0]])]
                                                        for x in pieces)
    order = np.lexsort((low, edge))
    edge, owner, low, high, curvature, centre, floor = (x[order] for x in (edge, owner, low, high, curvature,
                                                                          centre, floor))
    i, j = _group_pairs(edge)
    overlap_low, overlap_high = np.maximum(low[i], low[j]), np.minimum(high[i], high[j])
    meet = (owner[i] != owner[j]) & (overlap_high > overlap_low)
    i, j = i[meet], j[meet]
    pair, t = _crossings(curvature, centre, floor, i, j, overlap_low[meet], overlap_high[meet])
    cut_edge = np.concatenate([edge, edge, edge[i[pair]]])
    cut = np.concatenate([low, high, t])
    order = np.lexsort((cut, cut_edge))
    cut_edge, cut = cut_edge[order], cut[order]
    spans = (cut_edge[1:] == cut_edge[:-1]) & (cut[1:] > cut[:-1])
    span_edge, span_low, span_high = cut_edge[:-1][spans], cut[:-1][spans], cut[1:][spans]
    # per span, the piece of its edge lowest at the span's middle
    first = np.searchsorted(edge, span_edge)
    count = np.searchsorted(edge, span_edge, side="right") - first
    span = np.repeat(np.arange(len(span_edge)), count)
    piece = np.repeat(first, count) + np.arange(len(span)) - np.repeat(np.cumsum(count) - count, count)
    middle = (span_low + span_high)[span] / 2
    covers = (low[piece] <= middle) & (middle <= high[piece])
    span, piece, middle = span[covers], piece[covers], middle[covers]
    value = curvature[piece] * (middle - centre[piece]) ** 2 + floor[piece]
    group = np.flatnonzero(np.r_[True, span[1:] != span[:-1]])  # spans run in order, each covered
    least = np.flatnonzero(value == np.repeat(np.minimum.reduceat(value, group), np.diff(np.r_[group, len(span)])))
    lowest = piece[least[np.r_[True, span[least][1:] != span[least][:-1]]]]
    return span_edge, span_low, span_high, curvature[lowest], centre[lowest], floor[lowest]



# ---------------------------------------------------------------- planes and the metric group


@dataclass
class Plane:
    """One contour plane of a pair: both sides' boundary segments (:func:`boundary_segments`,
    in-plane mm; empty without contour), where it lies and the Dice of its filled contours.

    ``slice`` and ``position_mm`` are those of the per-plane rows (the user's stored array);
    ``location_mm`` is the plane's patient coordinate along its normal (mm; z for axial planes),
    alike for polygons and masks (:func:`slice_location_mm`) and in every storage of the grid."""

    slice: int
    position_mm: float
    location_mm: float
    reference: np.ndarray
    test: np.ndarray
    dice: float


def polygon_dice(reference, test) -> float:
    """Dice of two sides' filled contours on one plane (:func:`segmetrics.inputs.polygons.even_odd_region`, exact
    areas, mm²: :func:`segmetrics.inputs.polygons.intersection_area`); NaN when both are empty."""
    total = reference.area + test.area
    return 2 * intersection_area(reference.rings, test.rings) / total if total > 0 else math.nan


def mask_slices(reference, test, spacing, axis: int):
    """Per slice of two masks along array ``axis`` holding either: ``(slice index, reference
    segments, test segments, Dice)``, the segments ``(N, 2, 2)`` in in-plane (row, column) mm of the
    marching-squares boundaries (:func:`segmetrics.spatial.mesh.contour_segments_2d`): they are their
    own :func:`boundary_segments`, as no two run along one another. A 2-D pair is one slice."""
    from ..spatial.mesh import contour_segments_2d  # the mask path only: polygons need no mesh module

    reference, test, spacing = np.asarray(reference, bool), np.asarray(test, bool), np.asarray(spacing, float)
    if reference.ndim == 2:
        reference, test, spacing, axis = reference[None], test[None], np.r_[1.0, spacing], 0
    reference, test, in_plane = np.moveaxis(reference, axis, 0), np.moveaxis(test, axis, 0), np.delete(spacing, axis)
    sizes = [side.sum(axis=(1, 2)) for side in (reference, test)]
    shared = (reference & test).sum(axis=(1, 2))
    for k in np.flatnonzero(sizes[0] + sizes[1]):
        union = reference[k] | test[k]
        rows, cols = np.flatnonzero(union.any(axis=1)), np.flatnonzero(union.any(axis=0))
        box = slice(rows[0], rows[-1] + 1), slice(cols[0], cols[-1] + 1)  # the slice's contours lie around it
        segments = [contour_segments_2d(side[k][box], in_plane, (rows[0], cols[0])) for side in (reference, test)]
        yield int(k), segments[0], segments[1], 2 * shared[k] / (sizes[0][k] + sizes[1][k])


def _planes(pair: StructurePair, params: Parameters) -> tuple:
    """``(axis, planes)``: the stored array axis the planes cut (None for a 2-D pair) and the
    :class:`Plane` of each plane holding either side, in slice order: the polygons of two RT
    Structure Sets (:func:`segmetrics.metrics.msi.compared_planes`), else the slice contours of the masks."""
    if pair.contours is not None:
        axis, compared = compared_planes(pair)
        rings = contour_planes(pair)[1]
        return axis, [Plane(index, position, position,
                            *(boundary_segments(side) if not region.is_empty else np.empty((0, 2, 2))
                              for side, region in zip(rings[position], regions)),
                            polygon_dice(*regions)) for index, position, regions in compared]
    volume = pair.reference.ndim == 3
    axis = pair_slice_axis(pair, params) if volume else 0
    orientation = pair.orientation or Reorientation.identity(pair.reference.shape)
    image = pair.image if pair.image is not None else LabelImage(pair.reference, pair.spacing)
    planes = []
    for k, reference, test, dice in mask_slices(pair.reference, pair.test, pair.spacing, axis):
        index, position = orientation.stored_slice(axis, k, pair.spacing[axis]) if volume else (0, 0.0)
        planes.append(Plane(index, position, slice_location_mm(image, axis, k) if volume else 0.0,
                            reference, test, dice))
    return (orientation.stored_axis(axis) if volume else None), sorted(planes, key=lambda plane: plane.slice)


def slice_location_mm(image, axis: int, index: int) -> float:
    """The patient coordinate (mm) of slice ``index`` along array ``axis`` of a 3-D ``image``: its
    position along the slice normal oriented as for contour planes
    (:func:`segmetrics.inputs.polygons.oriented_normal`), so z (LPS) for axial slices, as a planning
    system shows it."""
    normal = oriented_normal(np.asarray(image.direction, dtype=float).reshape(3, 3)[:, 2 - axis])  # ITK column
    return float(image.index_to_physical(np.eye(3)[axis] * index) @ normal)


def _length(segments) -> float:
    return float(np.hypot(*(segments[:, 1] - segments[:, 0]).T).sum())


def compute(pair: StructurePair, params: Parameters) -> list:
    """The contour metrics of one pair: on its polygons when both inputs are RT Structure Sets,
    else on the slice contours of its masks."""
    axis, planes = _planes(pair, params)
    rows, values = measure(planes, params)
    if rows is not None:
        pair.extras["contour_slices"] = rows
        pair.extras["contour_axis"] = axis
    return values


def measure(planes, params: Parameters) -> tuple:
    """``(rows, values)``: the per-plane rows and the :class:`MetricValue` list of a structure's
    :class:`Plane` list (rows None when neither side has a contour)."""
    tolerance = {"tolerance_mm": float(params.apl_tolerance_mm)}
    status = emptiness_status(any(len(p.reference) for p in planes), any(len(p.test) for p in planes))
    if status == Status.BOTH_EMPTY:
        return None, [undefined(spec, status, tolerance if spec.name.startswith("apl") else {}) for spec in METRICS]
    shared = {k: i for i, k in enumerate(k for k, p in enumerate(planes) if len(p.reference) and len(p.test))}
    profiles = None
    if shared:  # every plane both sides contour at once
        sides = [(np.concatenate([getattr(planes[k], side) for k in shared]),
                  np.repeat(np.arange(len(shared)), [len(getattr(planes[k], side)) for k in shared]))
                 for side in ("reference", "test")]
        (reference, reference_planes), (test, test_planes) = sides
        profiles = (distance_profile(reference, test, reference_planes, test_planes),
                    distance_profile(test, reference, test_planes, reference_planes))
        forward, backward = (profile.by_plane(len(shared), params.apl_tolerance_mm) for profile in profiles)
    rows = []
    for k, plane in enumerate(planes):
        row = {"slice": plane.slice, "position_mm": plane.position_mm, "dice": plane.dice,
               "reference_length_mm": _length(plane.reference), "test_length_mm": _length(plane.test),
               "apl_mm": _length(plane.reference) if not len(plane.test) else 0.0,
               "hd_mm": math.nan, "mean_distance_mm": math.nan}
        if k in shared:
            i = shared[k]
            row.update(apl_mm=float(forward[3][i]), hd_mm=float(max(forward[1][i], backward[1][i])),
                       mean_distance_mm=float(forward[2][i] + backward[2][i]) / 2)
        rows.append(row)
    apl = sum(row["apl_mm"] for row in rows)
    reference_length = sum(row["reference_length_mm"] for row in rows)
    values = {"apl_mm": (apl, tolerance),
              "apl_fraction": (apl / reference_length if reference_length else math.nan, tolerance)}
    values.update(_distance_values(profiles, params.hd_percentile))
    missing = {f"{side}_only_planes_mm": sorted(float(p.location_mm) for p in planes
                                                if len(getattr(p, side)) and not len(getattr(p, other)))
               for side, other in (("reference", "test"), ("test", "reference"))}
    distance_status = Status.MISSING_PLANES if status == Status.OK and any(missing.values()) else status
    return rows, [MetricValue(spec.name, values[spec.name][0], spec.unit,
                              status if spec.name.startswith("apl") else distance_status,
                              {**values[spec.name][1], **(missing if distance_status == Status.MISSING_PLANES else {})})
                  for spec in METRICS]


def _distance_values(profiles, percentile: float) -> dict:
    """``{metric: (value mm, params)}`` of the distance metrics over the planes both sides
    contour (``profiles``: the reference-to-test and test-to-reference :class:`DistanceProfile`
    of those planes); ``inf`` without such a plane (``profiles`` None)."""
    if profiles is None:
        return {spec.name: (math.inf, {"percentile": float(percentile)} if spec.name == "contour_hdp_mm" else {})
                for spec in METRICS if not spec.name.startswith("apl")}
    percentiles = {percent: [p.percentile(percent) for p in profiles] for percent in {95.0, float(percentile), 50.0}}
    statistics = {"hd": [p.maximum() for p in profiles], "hd95": percentiles[95.0], "hdp": percentiles[float(percentile)],
                  "median": percentiles[50.0], "mean": [p.mean() for p in profiles]}
    values = {f"contour_{name}_{direction}_mm": (statistics[name][k], {})
              for name in ("hd", "hd95", "mean") for k, direction in enumerate(_DIRECTIONS)}
    values.update({f"contour_{name}_mm": (max(statistics[name]), {}) for name in ("hd", "hd95")})
    for name, extra in (("hdp", {"percentile": float(percentile)}), ("median", {})):
        values[f"contour_{name}_mm"] = (max(statistics[name]), {**extra, **{
            f"{direction}_mm": statistics[name][k] for k, direction in enumerate(_DIRECTIONS)}})
    values["contour_mean_distance_mm"] = (sum(statistics["mean"]) / 2, {})
    return values


register_group(MetricGroup("contours", METRICS, compute,
                           "per-slice contours (RT Structure Set polygons or mask slice boundaries), exact: added "
                           "path length (mm, fraction), in-plane contour HD, percentiles, median and mean distance (mm)"))
