"""Contour-level metrics per slice: added path length, in-plane Hausdorff and mean distance.

When both inputs are RT Structure Sets, their closed planar polygons (patient mm) are measured
themselves, without rasterising. For masks the contours are those of slice-wise MSI: marching
squares boundaries (:func:`segmetrics.spatial.mesh.contours_2d`) of each slice along the MSI slice axis
(:func:`segmetrics.metrics.msi.pair_slice_axis`: ``Parameters.msi_axis`` or the through-plane axis). Polygons
are grouped by plane (:func:`segmetrics.metrics.msi.compared_planes`, shared with the polygon MSI; planes
closer than :data:`segmetrics.inputs.polygons.PLANE_TOLERANCE_MM` are one); each side's contour on a plane is
the boundary of its even-odd region (:func:`segmetrics.inputs.polygons.even_odd_region`, as rasterised: a
contour given twice is none, a keyhole's channel and an out-and-back spur are not drawn), measured
in the plane with shapely:

- **added path length** ``apl_mm`` (Vaassen et al., Phys Imaging Radiat Oncol 13, 2020): the
  length of the reference contour farther than ``Parameters.apl_tolerance_mm`` from the test
  contour, i.e. what a person must draw to correct the test. Per plane: reference boundary minus
  the test boundary widened by the tolerance (shapely ``buffer``, round ends drawn with 16
  segments per quarter circle). A plane without test contour adds its whole reference length; a
  plane without reference contour adds 0. ``apl_fraction`` = ``apl_mm`` / reference length.
- ``contour_hd_mm`` / ``contour_mean_distance_mm``: in-plane Hausdorff and mean symmetric
  distance between the two boundaries, over the planes where both have contours (largest / mean
  of both directions pooled, weighted by length). Both boundaries are sampled every
  :data:`SAMPLE_STEP_MM` (masks: a tenth of the smallest in-plane pixel if larger, half of it if
  smaller) and distances taken between samples, so these are exact to within one step. Planes contoured on one side
  only are in the per-plane table, not here.

The per-plane rows go to ``extras["contour_slices"]`` (the stored array axis they cut to
``extras["contour_axis"]``): ``slice`` (the user's stored array's slice
index, as in the per-slice MSI rows; for polygons the grid slice the plane was rasterised on),
``position_mm`` (masks: slice × spacing; polygons: position along the plane normal, patient mm),
``dice`` (the slice's Dice: pixel counts, or exact areas of the even-odd filled polygons),
contour lengths, ``apl_mm``, ``hd_mm`` and ``mean_distance_mm``; :mod:`segmetrics.outputs.slices` joins
them with the per-slice MSI rows.
Rasterised, the same polygons give the same values within one pixel (tested): the mask boundary
runs half-way between pixel centres, within a pixel of the polygon.
"""
from __future__ import annotations

import math

import numpy as np

from ..spatial import _kernels
from ..spatial.mesh import contours_2d
from .msi import MAX_SEGMENT_PIECES, compared_planes, pair_slice_axis
from ..spatial.orientation import Reorientation
from ..registry import (MetricGroup, MetricSpec, MetricValue, Parameters, Status, StructurePair, emptiness_status,
                       register_group, undefined)

#: Distance between the boundary samples of the contour distances of polygons (mm); mask
#: boundaries are sampled every tenth of a pixel or this often, whichever is less often, but at
#: least every half pixel (pixels of 1e-3 mm), and with at most
#: :data:`segmetrics.metrics.msi.MAX_SEGMENT_PIECES` samples along the longer side of a pixel (pixels far
#: longer than wide: a 1e-4 x 1e6 mm pixel asked for 1e11 samples per slice).
SAMPLE_STEP_MM = 0.1

METRICS = (
    MetricSpec("apl_mm", "mm", "lower", "added path length: reference contour farther than "
               "Parameters.apl_tolerance_mm from the test contour, summed over planes"),
    MetricSpec("apl_fraction", "1", "lower", "added path length as a fraction of the reference contour length"),
    MetricSpec("contour_hd_mm", "mm", "lower", "largest in-plane distance between the two contours "
               "(planes contoured on both sides)"),
    MetricSpec("contour_mean_distance_mm", "mm", "lower", "mean in-plane distance between the two contours, "
               "both directions pooled (planes contoured on both sides)"),
)


def region_rings(region) -> list:
    """The closed rings (``(N, 2)`` mm, closed implicitly) bounding a shapely region: the outer
    and hole boundaries of each of its polygons."""
    import shapely

    return [np.asarray(ring.coords)[:-1] for part in shapely.get_parts(region)
            if isinstance(part, shapely.Polygon) and not part.is_empty
            for ring in (part.exterior, *part.interiors)]


def boundary(rings):
    """A shapely ``MultiLineString`` of closed ``(N, 2)`` rings (mm), or None without rings."""
    import shapely

    return shapely.MultiLineString([np.vstack([ring, ring[:1]]) for ring in rings]) if rings else None


def polygon_dice(reference, test) -> float:
    """Dice of two sides' filled contours on one plane (:func:`segmetrics.inputs.polygons.even_odd_region`, exact
    areas, mm²); NaN when both are empty."""
    total = reference.area + test.area
    return 2 * reference.intersection(test).area / total if total > 0 else math.nan


def added_path_length(reference_boundary, test_boundary, tolerance_mm: float) -> float:
    """Length (mm) of ``reference_boundary`` farther than ``tolerance_mm`` from ``test_boundary``
    (all of it when the test is None; 0 when the reference is None)."""
    if reference_boundary is None:
        return 0.0
    if test_boundary is None:
        return float(reference_boundary.length)
    return float(reference_boundary.difference(test_boundary.buffer(tolerance_mm)).length)


def boundary_samples(boundary, step_mm: float = SAMPLE_STEP_MM) -> tuple:
    """``(points, weights)``: points every ``step_mm`` (at most) along a boundary's rings,
    in-plane mm, and the boundary length (mm) each point stands for."""
    points, weights = [], []
    for line in boundary.geoms:
        ring = np.asarray(line.coords)
        along = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(ring, axis=0), axis=1))])
        count = max(int(math.ceil(along[-1] / step_mm)), 1)
        positions = (np.arange(count) + 0.5) * along[-1] / count
        points.append(np.column_stack([np.interp(positions, along, ring[:, axis]) for axis in (0, 1)]))
        weights.append(np.full(count, along[-1] / count))
    return np.concatenate(points), np.concatenate(weights)


def boundary_distances(first, second, step_mm: float = SAMPLE_STEP_MM) -> tuple:
    """``(distances, weights)`` of both directions pooled: distance (mm) from each sample of one
    boundary to the nearest sample of the other (off by at most ``step_mm`` / 2 from the distance
    to the boundary itself), and the boundary length (mm) each sample stands for. The nearest
    samples are found by :func:`segmetrics.spatial._kernels.nearest_between` (exact, as a KD-tree finds them)."""
    (first_points, first_weights), (second_points, second_weights) = (boundary_samples(b, step_mm)
                                                                      for b in (first, second))
    forward, back = _kernels.nearest_between(first_points, second_points)[:2]
    return np.concatenate([forward, back]), np.concatenate([first_weights, second_weights])


def mask_slices(reference, test, spacing, axis: int):
    """Per slice of two masks along array ``axis`` holding either: ``(slice index, reference rings,
    test rings, Dice)``, rings ``(N, 2)`` in in-plane (row, column) mm (marching squares,
    :func:`segmetrics.spatial.mesh.contours_2d`). A 2-D pair is one slice."""
    reference, test, spacing = np.asarray(reference, bool), np.asarray(test, bool), np.asarray(spacing, float)
    if reference.ndim == 2:
        reference, test, spacing, axis = reference[None], test[None], np.r_[1.0, spacing], 0
    reference, test, in_plane = np.moveaxis(reference, axis, 0), np.moveaxis(test, axis, 0), np.delete(spacing, axis)
    sizes = [side.sum(axis=(1, 2)) for side in (reference, test)]
    shared = (reference & test).sum(axis=(1, 2))
    for k in np.flatnonzero(sizes[0] + sizes[1]):
        rings = [[c.points for c in contours_2d(side[k], in_plane)] for side in (reference, test)]
        yield int(k), rings[0], rings[1], 2 * shared[k] / (sizes[0][k] + sizes[1][k])


def _planes(pair: StructurePair, params: Parameters):
    """``(step, axis, planes)``: the boundary sampling step (mm), the stored array axis the planes
    cut (None for a 2-D pair) and, per plane on the stored grid holding either side, ``(stored slice, position mm,
    reference rings, test rings, Dice)``: the polygons of two RT Structure Sets, else the slice
    contours of the masks."""
    if pair.contours is not None:
        axis, planes = compared_planes(pair)
        return SAMPLE_STEP_MM, axis, [(index, position, *map(region_rings, regions), polygon_dice(*regions))
                                      for index, position, regions in planes]
    volume = pair.reference.ndim == 3
    axis = pair_slice_axis(pair, params) if volume else 0
    in_plane = np.delete(pair.spacing, axis) if volume else pair.spacing
    orientation = pair.orientation or Reorientation.identity(pair.reference.shape)
    planes = []
    for k, reference, test, dice in mask_slices(pair.reference, pair.test, pair.spacing, axis):
        index, position = orientation.stored_slice(axis, k, pair.spacing[axis]) if volume else (0, 0.0)
        planes.append((index, position, reference, test, dice))
    stored_axis = orientation.stored_axis(axis) if volume else None
    # a tenth of a pixel, at least SAMPLE_STEP_MM but never more than half a pixel (pixels of 1e-3 mm:
    # a few samples per contour), and bounded samples per segment
    step = max(min(in_plane) / 10, min(SAMPLE_STEP_MM, min(in_plane) / 2), max(in_plane) / MAX_SEGMENT_PIECES)
    return step, stored_axis, sorted(planes, key=lambda plane: plane[0])


def compute(pair: StructurePair, params: Parameters) -> list:
    """The contour metrics of one pair: on its polygons when both inputs are RT Structure Sets,
    else on the slice contours of its masks."""
    step, axis, planes = _planes(pair, params)
    reference = [plane for plane in planes if plane[2]]
    test = [plane for plane in planes if plane[3]]
    status = emptiness_status(bool(reference), bool(test))
    tolerance = {"tolerance_mm": float(params.apl_tolerance_mm)}
    if status == Status.BOTH_EMPTY:
        return [undefined(spec, status, tolerance if spec.name.startswith("apl") else {}) for spec in METRICS]
    rows, distances, weights = [], [], []
    for index, position, reference_rings, test_rings, dice in planes:
        reference_boundary, test_boundary = boundary(reference_rings), boundary(test_rings)
        row = {"slice": index, "position_mm": position, "dice": dice,
               "reference_length_mm": reference_boundary.length if reference_boundary is not None else 0.0,
               "test_length_mm": test_boundary.length if test_boundary is not None else 0.0,
               "apl_mm": added_path_length(reference_boundary, test_boundary, params.apl_tolerance_mm),
               "hd_mm": math.nan, "mean_distance_mm": math.nan}
        if reference_boundary is not None and test_boundary is not None:
            plane_distances, plane_weights = boundary_distances(reference_boundary, test_boundary, step)
            row["hd_mm"] = float(plane_distances.max())
            row["mean_distance_mm"] = float(np.average(plane_distances, weights=plane_weights))
            distances.append(plane_distances)
            weights.append(plane_weights)
        rows.append(row)
    pair.extras["contour_slices"] = rows
    pair.extras["contour_axis"] = axis
    apl = sum(row["apl_mm"] for row in rows)
    reference_length = sum(row["reference_length_mm"] for row in rows)
    if distances:
        hd = float(max(d.max() for d in distances))
        mean = float(np.average(np.concatenate(distances), weights=np.concatenate(weights)))
    else:  # one side empty, or no plane contoured on both sides
        hd = mean = math.inf
    values = {"apl_mm": (apl, tolerance),
              "apl_fraction": (apl / reference_length if reference_length else math.nan, tolerance),
              "contour_hd_mm": (hd, {}), "contour_mean_distance_mm": (mean, {})}
    return [MetricValue(spec.name, values[spec.name][0], spec.unit, status, values[spec.name][1]) for spec in METRICS]


register_group(MetricGroup("contours", METRICS, compute,
                           "per-slice contours (RT Structure Set polygons or mask slice boundaries): added path "
                           "length (mm, fraction), in-plane contour HD and mean distance (mm)"))
