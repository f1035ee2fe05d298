"""Medical Similarity Index (MSI): slice-wise 2-D MSI, the FDA MISS-tool convention, 3-D surface MSI.

Arrays are in NumPy/SimpleITK order ``(z, y, x)`` (2-D: ``(row, col)``) and every ``spacing`` is
in mm in that array-axis order. Distances are in mm unless ``units="pixel"``.

Building blocks (Kim et al. 2012/2015, Fazekas et al. 2025), for a test point p and the paired
reference boundary:

* FMinD(p): distance from p to the nearest reference boundary point;
* BMaxD(p): the largest FMinD among reference points whose nearest test point is p (0 when none);
* BLD(p) = max(FMinD(p), BMaxD(p));
* WF(d, l) = exp(-d² / (2 (10/l)²)), with l = ``il`` when p lies inside the reference and ``ol``
  otherwise. A point on the reference boundary has d = 0 and weight 1, so MSI(T = R) = 1 and the
  score is continuous when a point crosses the boundary.

Outputs stored on the :class:`~segmetrics.registry.StructurePair`:

``pair.extras["msi_slices"]``
    list of :class:`SliceMSI` (one per slice holding either structure; for two RT Structure Sets
    one per contour plane, :func:`polygon_slice_table`), see there.
``pair.extras["test_surface"]``
    the test ``vtkPolyData`` (via :func:`segmetrics.spatial.mesh.cached_test_surface`) with point-data
    arrays ``SignedDistance_mm`` (signed BLD, negative inside the reference; ``SignedDistance_px``
    with ``units="pixel"``) and ``MSI`` (per-vertex weight).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from scipy import ndimage
from scipy.optimize import linear_sum_assignment
from scipy.spatial import cKDTree
from vtkmodules.util.numpy_support import numpy_to_vtk

from ..spatial import _bundled_planar, accelerator, mesh
from ..spatial.checkpoints import checkpoint
from ..inputs.polygons import even_odd_region, intersection_area, nearest_slice, rings_by_plane
from ..spatial.geometry import through_plane_axis
from ..spatial.orientation import Reorientation
from ..registry import (MetricGroup, MetricSpec, MetricValue, Parameters, Status, StructurePair, emptiness_status,
                       register_group, undefined)

#: Contours are subdivided to at most this fraction of the smallest pixel size before distances
#: are taken between points, which bounds the point-sampling error of FMinD to 1/8 pixel.
SUBDIVISION = 0.25
#: ... but no contour segment is cut into more pieces than this: in a slice of pixels more than
#: MAX_SEGMENT_PIECES x SUBDIVISION = 64 times longer than wide (a thick axis in the slice plane),
#: segments along the long side are sampled every 1/256 of the long pixel size, so that the points
#: of a slice stay bounded (a 1e4 x 1e-4 mm pixel asked for 4e8 points per segment: MemoryError).
MAX_SEGMENT_PIECES = 256
#: Polygon segments (RT Structure Sets) are subdivided to at most this length (mm): SUBDIVISION of
#: the 1 mm pixel of a contour grid (:data:`segmetrics.inputs.readers.rtstruct.DEFAULT_CONTOUR_RESOLUTION_MM`).
POLYGON_SEGMENT_MM = 0.25
#: Number of worst slices listed in the ``msi`` value's params.
WORST_SLICES = 5
#: Fewest query points for which KD-tree searches run in all cores: below, starting the threads
#: costs more than the search (a slice's contours hold hundreds of points).
PARALLEL_QUERY_POINTS = 20_000

#: In-plane 4-connectivity of a slice's objects (:func:`scipy.ndimage.label`'s default, built once).
FOUR_CONNECTED = ndimage.generate_binary_structure(2, 1)

MSI = MetricSpec("msi", "1", "higher", "Medical Similarity Index, slice-wise contour MSI (length-weighted)")
MSI_3D = MetricSpec("msi_3d", "1", "higher", "Medical Similarity Index on the test surface mesh (area-weighted)")


def _planar_kernels():
    """The module running the 2-D kernels: compiled (:mod:`segmetrics.spatial._kernels`) or bundled
    (:mod:`segmetrics.spatial._bundled_planar`), same values (:func:`segmetrics.spatial.accelerator.kernels`)."""
    return accelerator.kernels(_bundled_planar)


def weight_function(distance, level):
    """WF(d, l) = exp(-d² / (2 (10/l)²)): the MSI weight of a distance ``d`` at severity ``l``.

    ``distance`` and the width 10/l are in the same unit (mm, or pixels with ``units="pixel"``).
    """
    return np.exp(-0.5 * (np.asarray(distance, dtype=float) * np.asarray(level, dtype=float) / 10.0) ** 2)


def bidirectional_local_distance(test_points, reference_points, test_to_reference=None, reference_to_test=None, test_tree=None):
    """BLD = max(FMinD, BMaxD) for every test point, with KD-trees (no all-pairs matrix).

    Parameters
    ----------
    test_points, reference_points : ndarray, shape (N, d) and (M, d)
        Boundary points in one frame and unit (mm in this package).
    test_to_reference : ndarray (N,), optional
        FMinD of each test point when known more exactly (e.g. exact point-to-surface distance);
        default: distance to the nearest reference point.
    reference_to_test : ndarray (M,), optional
        Same for the reference points; BMaxD(p) is the largest of these among the reference
        points whose nearest test point is p.
    test_tree : scipy.spatial.cKDTree, optional
        KD-tree of ``test_points`` when one exists (e.g. :attr:`segmetrics.spatial.mesh.Surface.tree`).

    Returns
    -------
    ndarray (N,)
        BLD of each test point (same unit as the points).
    """
    test_points, reference_points = np.asarray(test_points, dtype=float), np.asarray(reference_points, dtype=float)
    if (test_to_reference is None and reference_to_test is None and test_tree is None and test_points.shape[1] == 2
            and len(test_points) and len(reference_points)):
        # a slice's contours: the planar kernel, the same distances as the KD-trees; a reference
        # point with several nearest test points takes the one the KD-tree search finds
        test_to_reference, back_distance, nearest_test, tied = _planar_kernels().nearest_between(test_points, reference_points)
        if tied.any():
            nearest_test[tied] = cKDTree(test_points).query(reference_points[tied])[1]
        bmaxd = np.zeros(len(test_points))
        np.maximum.at(bmaxd, nearest_test, back_distance)
        return np.maximum(test_to_reference, bmaxd)
    if test_to_reference is None:
        test_to_reference = cKDTree(reference_points).query(test_points)[0]
    workers = -1 if len(reference_points) >= PARALLEL_QUERY_POINTS else 1
    back_distance, nearest_test = (cKDTree(test_points) if test_tree is None else test_tree).query(reference_points, workers=workers)
    if reference_to_test is not None:
        back_distance = reference_to_test
    bmaxd = np.zeros(len(test_points))
    np.maximum.at(bmaxd, nearest_test, back_distance)
    return np.maximum(test_to_reference, bmaxd)


@dataclass
class SliceMSI:
    """One row of the per-slice MSI table (``pair.extras["msi_slices"]``).

    Attributes
    ----------
    slice : int
        Index along the MSI axis (0 for a 2-D image).
    position_mm : float
        ``slice * spacing[axis]`` in mm (index-scaled, no origin).
    msi : float
        The slice's MSI (0 when one structure is missing; NaN only for FDA ``multiple_objects``).
    weight : float
        Weight in the structure's mean: contour length in mm (pixels with ``units="pixel"``)
        of the test contours plus unpaired reference contours; in ``fda`` the number of boundary
        pixels.
    reference_contours, test_contours : int
        Closed contours (outer boundaries and holes) in the slice.
    reference_objects, test_objects : int
        4-connected objects in the slice.
    unpaired_reference, unpaired_test : int
        Objects without a partner (missed / spurious); each scores 0.
    status : str
        ``ok``, ``test_empty``, ``reference_empty`` or ``multiple_objects`` (fda only).
    """

    slice: int
    position_mm: float
    msi: float
    weight: float
    reference_contours: int
    test_contours: int
    reference_objects: int
    test_objects: int
    unpaired_reference: int
    unpaired_test: int
    status: str


# ---------------------------------------------------------------- default convention, 2-D


@dataclass
class _Object:
    contours: list
    centroid: np.ndarray

    @property
    def points(self):
        return np.concatenate([c.points for c in self.contours])

    @property
    def point_weights(self):
        return np.concatenate([c.point_weights for c in self.contours])

    @property
    def length(self):
        return sum(c.length for c in self.contours)


def _objects(mask2d, spacing2d):
    """4-connected objects of a slice with their closed contours (mm, array order); the first and
    last row and column of ``mask2d`` must be background."""
    labels, count = ndimage.label(mask2d, structure=FOUR_CONNECTED)
    if count == 0:
        return labels, []
    kernels = _planar_kernels()
    sizes, sums, corners = kernels.object_statistics(labels, count)
    centroids = sums.astype(float) / sizes[:, None] * spacing2d
    # each object's boundaries as mesh.contours_2d gives them on the object's bounding box alone,
    # then moved back by the box's corner: all objects in one pass
    step_mm = max(SUBDIVISION * min(spacing2d), max(spacing2d) / MAX_SEGMENT_PIECES)
    points, lengths, first, owner = kernels.label_contours(labels, corners, np.asarray(spacing2d, dtype=float), step_mm)
    points = points + (corners * spacing2d)[np.repeat(owner, np.diff(first))]
    objects = [_Object([], centroid) for centroid in centroids]
    for start, stop, label in zip(first[:-1], first[1:], owner):
        objects[label - 1].contours.append(mesh.Contour(points[start:stop], lengths[start:stop]))
    return labels, objects


def _inside(points, contours):
    """Even-odd point-in-region test against closed contours (holes are outside): each contour
    decided as :func:`skimage.measure.points_in_poly` decides it, all in one pass."""
    points, vertices = np.asarray(points, dtype=float), [contour.points for contour in contours]
    first = np.cumsum([0] + [len(v) for v in vertices])
    return _planar_kernels().inside_contours(points, np.argsort(points[:, 1]), np.concatenate(vertices).astype(float), first, 1e-12)


def _pair_objects(overlap, sizes_ref, sizes_test, ref_objects, test_objects, align):
    """Group reference and test objects of one slice; return (groups, unpaired refs, unpaired tests).

    ``overlap[r, t]`` is the area shared by reference object r and test object t, ``sizes_*``
    the objects' areas (pixels of a mask, or mm² of polygons: one unit for all three).

    Rule: an optimal one-to-one assignment (Hungarian) minimising the summed cost
    ``(1 - IoU) * (D + 1) + centroid distance`` (mm; D = the largest centroid distance), which
    favours overlapping pairs; with ``align="com"`` the cost is the centroid distance after
    shifting the test centroids onto the reference centre of mass (no IoU term). A left-over object
    that overlaps an object of the other mask joins that object's group (a split or merged
    structure is scored as one); a left-over object overlapping nothing is unpaired.
    """
    if align not in ("none", "com"):
        raise ValueError(f"msi_align must be 'none' or 'com', got {align!r}")
    n_ref, n_test = len(ref_objects), len(test_objects)
    if n_ref == n_test == 1:  # the one assignment there is
        return [([0], [0])], [], []
    ref_centroids = np.array([o.centroid for o in ref_objects])
    test_centroids = np.array([o.centroid for o in test_objects])
    if align == "com":
        shift = np.average(ref_centroids, axis=0, weights=sizes_ref) - np.average(test_centroids, axis=0, weights=sizes_test)
        test_centroids = test_centroids + shift
    cost = np.linalg.norm(ref_centroids[:, None] - test_centroids[None], axis=2)
    if align == "none":
        iou = overlap / (sizes_ref[:, None] + sizes_test[None] - overlap)
        cost = (1.0 - iou) * (cost.max() + 1.0) + cost
    rows, cols = linear_sum_assignment(cost)
    groups = [([r], [c]) for r, c in zip(rows, cols)]
    group_of_ref = dict(zip(rows, range(len(groups))))
    group_of_test = dict(zip(cols, range(len(groups))))
    unpaired_ref, unpaired_test = [], []
    for t in sorted(set(range(n_test)) - set(cols)):
        best = int(np.argmax(overlap[:, t]))
        if overlap[best, t] > 0:
            groups[group_of_ref[best]][1].append(t)
        else:
            unpaired_test.append(t)
    for r in sorted(set(range(n_ref)) - set(rows)):
        best = int(np.argmax(overlap[r]))
        if overlap[r, best] > 0:
            groups[group_of_test[best]][0].append(r)
        else:
            unpaired_ref.append(r)
    return groups, unpaired_ref, unpaired_test


def _slice_default(ref2d, test2d, spacing2d, il, ol, align):
    """(msi, weight, counts..., status) of one slice of two masks in the default convention."""
    ref_labels, ref_objects = _objects(ref2d, spacing2d)
    test_labels, test_objects = _objects(test2d, spacing2d)
    areas = _planar_kernels().label_pairs(ref_labels, len(ref_objects), test_labels, len(test_objects)).astype(float)  # pixels of each (reference, test) label pair
    return _score_objects(ref_objects, test_objects, areas[1:, 1:], areas[1:].sum(axis=1), areas[:, 1:].sum(axis=0),
                          il, ol, align)


def _score_objects(ref_objects, test_objects, overlap, sizes_ref, sizes_test, il, ol, align):
    """(msi, weight, counts..., status) of one slice's objects (see :func:`_pair_objects` for
    ``overlap`` and ``sizes_*``): what masks and polygons share."""
    counts = dict(
        reference_contours=sum(len(o.contours) for o in ref_objects),
        test_contours=sum(len(o.contours) for o in test_objects),
        reference_objects=len(ref_objects),
        test_objects=len(test_objects),
    )
    if not ref_objects or not test_objects:
        missing = ref_objects or test_objects
        status = Status.TEST_EMPTY if ref_objects else Status.REFERENCE_EMPTY
        return 0.0, sum(o.length for o in missing), dict(counts, unpaired_reference=len(ref_objects), unpaired_test=len(test_objects)), status
    groups, unpaired_ref, unpaired_test = _pair_objects(overlap, sizes_ref, sizes_test, ref_objects, test_objects, align)
    score, weight = 0.0, 0.0
    for ref_ids, test_ids in groups:
        refs = [ref_objects[i] for i in ref_ids]
        tests = [test_objects[i] for i in test_ids]
        test_points = np.concatenate([o.points for o in tests])
        point_weights = np.concatenate([o.point_weights for o in tests])
        bld = bidirectional_local_distance(test_points, np.concatenate([o.points for o in refs]))
        inside = _inside(test_points, [c for o in refs for c in o.contours])
        score += float(np.sum(point_weights * weight_function(bld, np.where(inside, il, ol))))
        weight += float(point_weights.sum())
    weight += sum(ref_objects[i].length for i in unpaired_ref) + sum(test_objects[i].length for i in unpaired_test)
    counts.update(unpaired_reference=len(unpaired_ref), unpaired_test=len(unpaired_test))
    return score / weight, weight, counts, Status.OK


# ---------------------------------------------------------------- planar polygons (RT Structure Sets)


def polygon_objects(region, max_segment_mm: float = POLYGON_SEGMENT_MM) -> list:
    """The objects of one side's :class:`~segmetrics.inputs.polygons.EvenOddRegion` on one plane
    (in-plane mm): one per connected part, with its outer and hole contours subdivided to at most
    ``max_segment_mm``."""
    return [_Object([mesh.closed_contour(ring, max_segment_mm) for ring in part.rings], part.centroid)
            for part in region.parts]


def polygon_slice(reference_region, test_region, il: float = 1.0, ol: float = 1.0, align: str = "none") -> tuple:
    """``(msi, weight, counts, status)`` of one plane of two sides' filled contours
    (:func:`~segmetrics.inputs.polygons.even_odd_region`, in-plane mm), as :func:`slice_table` scores the slice of two masks,
    with exact areas instead of pixel counts (:func:`~segmetrics.inputs.polygons.intersection_area`):
    objects paired by the same rule (IoU and centroid distance), BLD between the subdivided
    polygons, even-odd inside test against the reference polygons."""
    ref_parts, test_parts = reference_region.parts, test_region.parts
    overlap = np.array([[intersection_area(r.rings, t.rings) for t in test_parts] for r in ref_parts]).reshape(
        len(ref_parts), len(test_parts))
    sizes_ref, sizes_test = (np.array([part.area for part in parts]) for parts in (ref_parts, test_parts))
    return _score_objects(polygon_objects(reference_region), polygon_objects(test_region), overlap, sizes_ref,
                          sizes_test, il, ol, align)


def contour_planes(pair: StructurePair) -> tuple:
    """:func:`segmetrics.inputs.polygons.rings_by_plane` of a pair's polygons (``pair.contours``), found once
    per pair and shared by the groups (``pair.cache["contour_planes"]``)."""
    if "contour_planes" not in pair.cache:
        pair.cache["contour_planes"] = rings_by_plane(*pair.contours)
    return pair.cache["contour_planes"]


def contour_regions(pair: StructurePair) -> list:
    """Per plane of :func:`contour_planes`, in its order, ``(reference, test)`` :func:`~segmetrics.inputs.polygons.even_odd_region`
    (found once per pair, ``pair.cache["contour_regions"]``)."""
    if "contour_regions" not in pair.cache:
        pair.cache["contour_regions"] = [tuple(even_odd_region(rings) for rings in sides)
                                         for sides in contour_planes(pair)[1].values()]
    return pair.cache["contour_regions"]


def plane_slices(pair: StructurePair, planes, normal) -> tuple:
    """``(stored axis, stored slice indices)``: the array axis of the user's stored grid (the one
    the pair's polygons were rasterised on) normal to the contour planes, and the slice along it
    that holds each plane (``planes``: positions in mm along the unit vector ``normal``, patient
    LPS), as :func:`segmetrics.inputs.readers.rtstruct.rasterise` assigns them (nearest slice); ``None`` for a plane
    beyond the stored grid (e.g. an ``--image`` series shorter than the contours), which the
    rasteriser leaves out too."""
    image, orientation = pair.image, pair.orientation or Reorientation.identity(pair.reference.shape)
    direction = np.asarray(image.direction, dtype=float).reshape(3, 3)
    along_normal = direction.T @ normal
    itk_axis = int(np.argmax(np.abs(along_normal)))
    axis = 2 - itk_axis  # canonical array axis (array order is ITK's reversed)
    along = ((np.outer(planes, normal) - np.asarray(image.origin)) @ direction)[:, itk_axis] / image.spacing[axis]
    stored_axis = orientation.stored_axis(axis)
    stored = [orientation.stored_index(axis, nearest_slice(k, along_normal[itk_axis] > 0)) for k in along]
    return stored_axis, [k if 0 <= k < orientation.shape[stored_axis] else None for k in stored]


def compared_planes(pair: StructurePair) -> tuple:
    """``(stored axis, planes)``: the contour planes of a pair's polygons that both groups compare
    (msi and contours), as ``(stored slice, position mm, (reference region, test region))``
    (:func:`plane_slices`, :func:`contour_regions`): those where either side fills an area (a
    plane whose contours fill nothing, e.g. a contour given twice, is empty as when rasterised)
    and that lie on the stored grid (a plane beyond it is left out, as when rasterised)."""
    axes, planes = contour_planes(pair)
    axis, slices = plane_slices(pair, list(planes), axes[2])
    return axis, [(index, position, regions) for index, position, regions in zip(slices, planes, contour_regions(pair))
                  if index is not None and not all(region.is_empty for region in regions)]


def polygon_slice_table(pair: StructurePair, params: Parameters) -> tuple:
    """``(stored axis, rows)``: the per-slice MSI of a pair's polygons (``pair.contours``), one
    :class:`SliceMSI` per plane of :func:`compared_planes` (:func:`polygon_slice`); ``slice`` is
    the stored grid's slice holding the plane and ``position_mm`` the plane's position along its
    normal (patient mm)."""
    axis, planes = compared_planes(pair)
    rows = []
    for index, position, (reference, test) in planes:
        checkpoint()
        value, weight, counts, status = polygon_slice(reference, test, params.msi_il, params.msi_ol, params.msi_align)
        rows.append(SliceMSI(index, position, value, weight, status=status, **counts))
    return axis, sorted(rows, key=lambda r: r.slice)


# ---------------------------------------------------------------- FDA MISS-tool convention


def _perimeter_pixels(mask2d):
    """4-connected perimeter pixels (row, col) in the MISS-tool order.

    Pixels outside the image count as foreground (like MATLAB's ``imerode``), so border pixels
    are not perimeter unless they touch background inside the image. Order: start at the first
    pixel in column-major order, then repeatedly the nearest unvisited pixel (lowest column-major
    rank on ties). This walk is sequential by nature: a loop over boundary pixels, with an O(1)
    8-neighbour look-up and a vectorised search only when the walk reaches a dead end.
    """
    perimeter = mask2d & ~ndimage.binary_erosion(mask2d, border_value=1)
    cols, rows = np.nonzero(perimeter.T)  # column-major order
    pixels = np.stack([rows, cols], axis=1)
    rank = np.full((mask2d.shape[0] + 2, mask2d.shape[1] + 2), -1)
    rank[rows + 1, cols + 1] = np.arange(len(pixels))
    steps = [np.array(s) for s in ((-1, 0), (1, 0), (0, -1), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))]
    visited = np.zeros(len(pixels), dtype=bool)
    order = np.empty(len(pixels), dtype=int)
    current = 0
    for position in range(len(pixels)):
        order[position] = current
        visited[current] = True
        if position == len(pixels) - 1:
            break
        candidates = [rank[tuple(pixels[current] + 1 + s)] for s in steps]
        edge = [c for c in candidates[:4] if c >= 0 and not visited[c]]
        corner = [c for c in candidates[4:] if c >= 0 and not visited[c]]
        if edge or corner:
            current = min(edge or corner)
        else:
            left = np.flatnonzero(~visited)
            squared = np.sum((pixels[left] - pixels[current]) ** 2, axis=1)
            current = left[squared == squared.min()].min()
    return pixels[order]


def _nearest_first(points, queries):
    """Nearest point (lowest index on ties) and squared distance for each query; integer coordinates."""
    tree = cKDTree(points)
    k = min(8, len(points))
    result = np.empty(len(queries), dtype=int)
    todo = np.arange(len(queries))
    while len(todo):
        _, idx = tree.query(queries[todo], k=k)
        idx = idx.reshape(len(todo), k)
        squared = np.sum((points[idx] - queries[todo, None]) ** 2, axis=2)
        best = squared.min(axis=1, keepdims=True)
        result[todo] = np.where(squared == best, idx, len(points)).min(axis=1)
        complete = (squared[:, -1] > best[:, 0]) | (k == len(points))
        todo, k = todo[~complete], min(2 * k, len(points))
    return result, np.sum((points[result] - queries) ** 2, axis=1)


def _round_half_away(values):
    return np.sign(values) * np.floor(np.abs(values) + 0.5)


def _objects_and_holes(mask2d, connectivity):
    """Objects plus holes of a 2-D mask: objects ``connectivity``-connected (1: 4-neighbours, 2:
    8-neighbours), holes the background regions not reaching the border, connected the other way.
    With ``connectivity=1``, the closed contours :func:`skimage.measure.find_contours` finds at
    level 0.5 on the mask padded with background (one per object, one per hole)."""
    objects = ndimage.label(mask2d, structure=ndimage.generate_binary_structure(2, connectivity))[1]
    background = ndimage.label(np.pad(~mask2d, 1, constant_values=True),
                               structure=ndimage.generate_binary_structure(2, 3 - connectivity))[1]
    return objects + background - 1


def fda_msi(reference2d, test2d, il: float = 1.0, ol: float = 1.0) -> float:
    """MSI as computed by the US FDA MISS-tool (``MSI.m``), in pixel units.

    Boundary = 4-connected perimeter pixels; centres of mass = rounded mean boundary position;
    each test point's partner is chosen after shifting the test boundary onto the reference
    centre of mass (its nearest reference point, or a farther reference point whose nearest shifted
    test point it is; first on ties); the distance is then taken from the unshifted test pixel;
    ``il`` applies when that pixel lies in the reference mask. Returns NaN when either mask has
    more than one object or a hole (the tool refuses those).

    Parameters
    ----------
    reference2d, test2d : ndarray of bool, shape (row, col)
    il, ol : float
        Severity levels inside / outside the reference.
    """
    reference2d, test2d = np.asarray(reference2d, bool), np.asarray(test2d, bool)
    if _objects_and_holes(reference2d, 2) != 1 or _objects_and_holes(test2d, 2) != 1:
        return math.nan
    ref, test = _perimeter_pixels(reference2d), _perimeter_pixels(test2d)
    shifted = test + (_round_half_away(ref.mean(0)) - _round_half_away(test.mean(0))).astype(int)
    forward, forward_sq = _nearest_first(ref, shifted)
    backward, backward_sq = _nearest_first(shifted, ref)
    # per test point j: farthest reference point whose nearest shifted test point is j (first on ties)
    order = np.lexsort((np.arange(len(ref)), -backward_sq, backward))
    first = order[np.r_[True, backward[order][1:] != backward[order][:-1]]]
    partner = forward.copy()
    farther = backward_sq[first] > forward_sq[backward[first]]
    partner[backward[first][farther]] = first[farther]
    distance = np.linalg.norm(ref[partner] - test, axis=1)
    inside = reference2d[test[:, 0], test[:, 1]]
    return float(np.mean(weight_function(distance, np.where(inside, il, ol))))


def _slice_fda(ref2d, test2d, il, ol):
    counts = dict(
        reference_contours=_objects_and_holes(ref2d, 1),
        test_contours=_objects_and_holes(test2d, 1),
        reference_objects=ndimage.label(ref2d)[1],
        test_objects=ndimage.label(test2d)[1],
        unpaired_reference=0,
        unpaired_test=0,
    )
    if not ref2d.any() or not test2d.any():
        present = ref2d if ref2d.any() else test2d
        status = Status.TEST_EMPTY if ref2d.any() else Status.REFERENCE_EMPTY
        pixels = int(np.sum(present & ~ndimage.binary_erosion(present, border_value=1)))
        return 0.0, float(pixels), counts, status
    value = fda_msi(ref2d, test2d, il, ol)
    weight = float(np.sum(test2d & ~ndimage.binary_erosion(test2d, border_value=1)))
    return value, weight, counts, (Status.MULTIPLE_OBJECTS if math.isnan(value) else Status.OK)


# ---------------------------------------------------------------- slice-wise driver


def pair_slice_axis(pair: StructurePair, params: Parameters) -> int:
    """The axis of a 3-D pair's (canonical) masks cut into slices: ``params.msi_axis``, an axis of
    the user's stored array, mapped through ``pair.orientation``; else the through-plane axis."""
    axis = slice_axis(pair.spacing, params, pair.image.direction if pair.image is not None else None)
    if params.msi_axis is None:
        return axis
    orientation = pair.orientation or Reorientation.identity(pair.reference.shape)
    return orientation.canonical_axis(axis)


def slice_axis(spacing, params: Parameters, direction=None) -> int:
    """The array axis cut into MSI slices: ``params.msi_axis``, or when ``None`` the through-plane
    axis (:func:`segmetrics.spatial.geometry.through_plane_axis`, axial on isotropic data given a ``direction``)."""
    return through_plane_axis(spacing, direction) if params.msi_axis is None else params.msi_axis % len(spacing)


def slice_table(reference, test, spacing, params: Parameters | None = None, direction=None) -> list:
    """Per-slice MSI of two masks (2-D: one row; 3-D: one row per slice holding either mask).

    Parameters
    ----------
    reference, test : ndarray of bool, shape (z, y, x) or (row, col)
    spacing : tuple of float
        Voxel size in mm in **array-axis order**.
    params : Parameters
        ``msi_il``, ``msi_ol``, ``msi_axis`` (array axis cut into slices; default ``None`` = the
        through-plane axis, i.e. the one with the largest spacing, on ties the one closest to the
        superior-inferior axis given ``direction``, else axis 0),
        ``msi_convention`` (``"default"`` or ``"fda"``), ``msi_units`` (``"mm"`` or ``"pixel"``;
        ``fda`` is always in pixels), ``msi_align`` (``"none"`` or ``"com"``, pairing only).
    direction : tuple of float, optional
        The image's direction cosines (ITK order, row-major), used only to choose the default axis.

    Returns
    -------
    list of SliceMSI
        Slices empty in both masks are skipped. Each slice is measured on its masks' bounding
        box with one pixel of background around, also where they touch the image border, so the
        values do not depend on the field of view (with ``fda``, border pixels of the image are
        boundary pixels).
    """
    params = params or Parameters()
    reference, test = np.asarray(reference, bool), np.asarray(test, bool)
    spacing = np.asarray(spacing, dtype=float)
    if reference.ndim == 2:
        reference, test, spacing, axis = reference[None], test[None], np.r_[1.0, spacing], 0
    else:
        axis = slice_axis(spacing, params, direction)
    reference, test = np.moveaxis(reference, axis, 0), np.moveaxis(test, axis, 0)
    in_plane = np.delete(spacing, axis)
    scale = np.ones(2) if params.msi_units == "pixel" else in_plane
    union = reference | test
    rows = []
    for k in np.flatnonzero(union.any(axis=(1, 2))):
        checkpoint()
        box = ndimage.find_objects(union[k].astype(np.uint8))[0]
        # a background margin of one pixel, also at the image border, so that the field of view
        # (padding) does not matter: the fda perimeter counts pixels beyond the crop as inside
        ref2d, test2d = _padded(reference[k][box]), _padded(test[k][box])
        if params.msi_convention == "fda":
            value, weight, counts, status = _slice_fda(ref2d, test2d, params.msi_il, params.msi_ol)
        elif params.msi_convention == "default":
            value, weight, counts, status = _slice_default(ref2d, test2d, scale, params.msi_il, params.msi_ol, params.msi_align)
        else:
            raise ValueError(f"msi_convention must be 'default' or 'fda', got {params.msi_convention!r}")
        rows.append(SliceMSI(int(k), float(k * spacing[axis]), value, weight, status=status, **counts))
    return rows


def _padded(mask2d):
    """``np.pad(mask2d, 1)`` (background margin of one pixel), without np.pad's per-call overhead."""
    padded = np.zeros((mask2d.shape[0] + 2, mask2d.shape[1] + 2), dtype=mask2d.dtype)
    padded[1:-1, 1:-1] = mask2d
    return padded


def combine_slices(rows) -> float:
    """Weighted mean of the slice MSIs (weights = ``SliceMSI.weight``), NaN slices left out."""
    usable = [r for r in rows if not math.isnan(r.msi)]
    total = sum(r.weight for r in usable)
    return sum(r.msi * r.weight for r in usable) / total if total > 0 else math.nan


# ---------------------------------------------------------------- 3-D surface MSI


def surface_msi(test_surface, reference_surface, il: float = 1.0, ol: float = 1.0, reference_to_test=None,
                signed_test_to_reference=None):
    """Per-vertex signed BLD and MSI weight on a test surface, and the area-weighted MSI.

    FMinD is the distance from a test vertex to the reference surface and its sign says
    inside/outside; BMaxD(p) is the largest distance to the test surface among reference
    vertices whose nearest test vertex is p. Both distances are
    :func:`segmetrics.spatial.mesh.distances_to_surface` (exact point-to-triangle, as the distance group).

    Parameters
    ----------
    test_surface, reference_surface : segmetrics.spatial.mesh.Surface or vtkPolyData
        Closed, outward-oriented triangle surfaces in one frame (mm), e.g. the pair's
        :func:`segmetrics.spatial.mesh.cached_surface`.
    il, ol : float
        Severity levels inside / outside the reference.
    reference_to_test : ndarray (M,), optional
        The distances (mm) from the reference vertices to the test surface when already known
        (e.g. :func:`segmetrics.spatial.mesh.cached_distances`); default: computed here.
    signed_test_to_reference : ndarray (N,), optional
        The signed distances (mm) from the test vertices to the reference surface when already known
        (:func:`segmetrics.spatial.mesh.cached_signed_distances`); default: computed here.

    Returns
    -------
    signed_bld : ndarray (N,)
        BLD per test vertex in the mesh unit (mm), negative inside the reference.
    weights : ndarray (N,)
        WF(|BLD|, il or ol) per test vertex.
    msi : float
        Mean of ``weights`` weighted by the vertices' areas.
    """
    test, reference = (s if isinstance(s, mesh.Surface) else mesh.Surface.from_polydata(s) for s in (test_surface, reference_surface))
    signed = (mesh.distances_to_surface(test.points, reference, signed=True) if signed_test_to_reference is None
              else signed_test_to_reference)
    back = mesh.distances_to_surface(reference.points, test) if reference_to_test is None else reference_to_test
    checkpoint()
    bld = bidirectional_local_distance(test.points, reference.points, np.abs(signed), back, test.tree)
    inside = signed < 0
    weights = weight_function(bld, np.where(inside, il, ol))
    return np.where(inside, -bld, bld), weights, float(np.average(weights, weights=test.sizes))


def _add_point_array(polydata, name, values):
    array = numpy_to_vtk(np.ascontiguousarray(values, dtype=float), deep=True)
    array.SetName(name)
    polydata.GetPointData().AddArray(array)


def _msi_3d(pair: StructurePair, params: Parameters) -> float:
    """``msi_3d`` on the pair's shared surfaces; adds the per-vertex arrays to ``extras["test_surface"]``."""
    test = mesh.cached_surface(pair, "test")
    if params.msi_units == "pixel":  # same masks at unit spacing: vertices correspond one to one
        surfaces, known = mesh.pair_surfaces(pair.reference, pair.test, (1, 1, 1))[::-1], (None, None)
        name = "SignedDistance_px"
    else:  # the pair's shared surfaces and the distances both ways (also the distance group's)
        surfaces = [test, mesh.cached_surface(pair, "reference")]
        test_to_reference = mesh.cached_signed_distances(pair, "test")  # first: both ways at once when neither is known
        known = mesh.cached_distances(pair, "reference"), test_to_reference
        name = "SignedDistance_mm"
    signed, weights, _ = surface_msi(*surfaces, params.msi_il, params.msi_ol, *known)
    polydata = mesh.cached_test_surface(pair)
    _add_point_array(polydata, name, signed)
    _add_point_array(polydata, "MSI", weights)
    return float(np.average(weights, weights=test.sizes))


# ---------------------------------------------------------------- metric group


def on_polygons(pair: StructurePair, params: Parameters) -> bool:
    """Whether the slice-wise MSI of a pair is measured on its planar polygons: both inputs are RT
    Structure Sets (``pair.contours``) and the default convention in mm (``fda`` and pixel units
    are defined on pixels: they use the rasterised masks)."""
    return pair.contours is not None and params.msi_convention == "default" and params.msi_units == "mm"


def compute(pair: StructurePair, params: Parameters) -> list:
    """The ``msi`` and ``msi_3d`` values of a structure pair (see module docstring for extras).

    Empty masks: both empty → NaN (``both_empty``); one empty → 0 (``test_empty`` /
    ``reference_empty``). ``msi_3d`` of a 2-D pair is NaN (``not_applicable``). When the masks
    are a reoriented view of the user's array (``pair.orientation``), ``params.msi_axis``, the
    reported ``axis``, ``worst_slices`` and the per-slice rows refer to the user's (stored) array.

    Two RT Structure Sets (:func:`on_polygons`): ``msi`` is measured on the planar polygons
    themselves, plane by plane (:func:`polygon_slice_table`; ``params["geometry"] = "polygons"``,
    ``axis`` the stored axis normal to the planes, ``msi_axis`` not used; emptiness from the
    polygons); ``msi_3d`` stays on the surfaces of the rasterised masks.
    """
    orientation = pair.orientation or Reorientation.identity(pair.reference.shape)
    direction = pair.image.direction if pair.image is not None else None
    axis = None  # array axis of the masks cut into slices
    if pair.reference.ndim == 3:
        axis = pair_slice_axis(pair, params)
        params = replace(params, msi_axis=axis)
    used = dict(il=params.msi_il, ol=params.msi_ol, axis=None if axis is None else orientation.stored_axis(axis),
                convention=params.msi_convention, units="pixel" if params.msi_convention == "fda" else params.msi_units,
                align=params.msi_align)
    status = surface_status = pair.emptiness
    if on_polygons(pair, params):
        regions = contour_regions(pair)  # a side whose contours fill nothing is empty, as rasterised
        status = emptiness_status(any(not r.is_empty for r, _t in regions), any(not t.is_empty for _r, t in regions))
        used["geometry"] = "polygons"
    if status == Status.BOTH_EMPTY:
        return [undefined(MSI, status, used), undefined(MSI_3D, status, used)]
    if "geometry" in used:
        used["axis"], rows = polygon_slice_table(pair, params)
    else:
        rows = slice_table(pair.reference, pair.test, pair.spacing, params, direction)
    # lowest MSI first, ties to the lower slice of the canonical array (alike for every storage)
    worst = [r.slice for r in sorted((r for r in rows if not math.isnan(r.msi)), key=lambda r: r.msi)[:WORST_SLICES]]
    if "geometry" not in used and axis is not None:
        worst = [orientation.stored_index(axis, k) for k in worst]
        rows = _stored_slices(rows, orientation, axis, pair.spacing[axis])
    pair.extras["msi_slices"] = rows
    if status != Status.OK:
        msi = MetricValue(MSI.name, 0.0, MSI.unit, status, used)
    else:
        value = combine_slices(rows)
        msi = MetricValue(MSI.name, value, MSI.unit, Status.OK if not math.isnan(value) else Status.MULTIPLE_OBJECTS,
                          dict(used, worst_slices=worst))
    surface_params = {**{k: v for k, v in used.items() if k != "geometry"}, "convention": "default",
                      "units": params.msi_units}
    if pair.reference.ndim == 2:
        msi_3d = undefined(MSI_3D, Status.NOT_APPLICABLE, surface_params)
    elif surface_status != Status.OK:
        msi_3d = MetricValue(MSI_3D.name, 0.0 if surface_status != Status.BOTH_EMPTY else math.nan, MSI_3D.unit,
                             surface_status, surface_params)
    else:
        msi_3d = MetricValue(MSI_3D.name, _msi_3d(pair, params), MSI_3D.unit, Status.OK, surface_params)
    return [msi, msi_3d]


def _stored_slices(rows, orientation: Reorientation, axis: int, spacing_mm: float) -> list:
    """Per-slice rows along canonical array ``axis`` renumbered as slices of the stored array
    (``slice`` and ``position_mm``), in increasing stored slice order."""
    if orientation.is_identity:
        return rows
    moved = []
    for row in rows:
        index, position = orientation.stored_slice(axis, row.slice, spacing_mm)
        moved.append(replace(row, slice=index, position_mm=position))
    return sorted(moved, key=lambda r: r.slice)


register_group(MetricGroup("msi", (MSI, MSI_3D), compute, "Medical Similarity Index (slice-wise contours and 3-D surface)"))
