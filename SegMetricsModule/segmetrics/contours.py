"""Contour-level metrics per slice: added path length, in-plane Hausdorff and mean distance.

When both inputs are RT Structure Sets, their closed planar polygons (patient mm) are measured
themselves, without rasterising. For masks the contours are those of slice-wise MSI: marching
squares boundaries (:func:`segmetrics.mesh.contours_2d`) of each slice along the MSI slice axis
(:func:`segmetrics.msi.pair_slice_axis`: ``Parameters.msi_axis`` or the through-plane axis). Contours
are grouped by plane (planes closer than :data:`segmetrics.dicom.PLANE_TOLERANCE_MM` are one) and
measured in the plane with shapely:

- **added path length** ``apl_mm`` (Vaassen et al., Phys Imaging Radiat Oncol 13, 2020): the
  length of the reference contour farther than ``Parameters.apl_tolerance_mm`` from the test
  contour, i.e. what a person must draw to correct the test. Per plane: reference boundary minus
  the test boundary widened by the tolerance (shapely ``buffer``, round ends drawn with 16
  segments per quarter circle). A plane without test contour adds its whole reference length; a
  plane without reference contour adds 0. ``apl_fraction`` = ``apl_mm`` / reference length.
- ``contour_hd_mm`` / ``contour_mean_distance_mm``: in-plane Hausdorff and mean symmetric
  distance between the two boundaries, over the planes where both have contours (largest / mean
  of both directions pooled, weighted by length). Both boundaries are sampled every
  :data:`SAMPLE_STEP_MM` (masks: a tenth of the smallest in-plane pixel, if larger) and distances
  taken between samples, so these are exact to within one step. Planes contoured on one side
  only are in the per-plane table, not here.

The per-plane rows go to ``extras["contour_slices"]`` (``plane_mm``: position along the plane
normal in patient mm for polygons; for masks ``slice``, the slice index of the user's stored
array as in the per-slice MSI rows, and ``plane_mm`` = slice × spacing).
Rasterised, the same polygons give the same values within one pixel (tested): the mask boundary
runs half-way between pixel centres, within a pixel of the polygon.
"""
from __future__ import annotations

import math

import numpy as np

from .dicom import distinct_planes, plane_axes
from .mesh import contours_2d
from .msi import pair_slice_axis
from .orientation import Reorientation
from .registry import (MetricGroup, MetricSpec, MetricValue, Parameters, Status, StructurePair, emptiness_status,
                       register_group, undefined)

#: Distance between the boundary samples of the contour distances of polygons (mm); mask
#: boundaries are sampled every tenth of a pixel, at least this often.
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


def boundaries_by_plane(reference, test) -> dict:
    """``{plane position (mm along the normal): (reference boundary, test boundary)}``; each
    boundary is a shapely ``MultiLineString`` of closed rings in in-plane mm, or None."""
    import shapely

    polygons = list(reference) + list(test)
    axes = plane_axes(polygons)
    offsets = np.array([float(np.mean(p @ axes[2])) for p in polygons])
    planes = distinct_planes(offsets)
    rings: dict = {}
    for index, polygon in enumerate(polygons):
        plane = float(planes[np.argmin(np.abs(planes - offsets[index]))])
        flat = polygon @ axes[:2].T
        rings.setdefault(plane, ([], []))[index >= len(reference)].append(np.vstack([flat, flat[:1]]))
    return {plane: tuple(shapely.MultiLineString(side) if side else None for side in sides)
            for plane, sides in sorted(rings.items())}


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


def boundary_distances(source, target, step_mm: float = SAMPLE_STEP_MM) -> tuple:
    """``(distances, weights)``: distance (mm) from the samples of ``source`` to the nearest sample
    of ``target`` (off by at most ``step_mm`` / 2 from the distance to the boundary itself), and
    the boundary length (mm) each sample stands for."""
    from scipy.spatial import cKDTree

    points, weights = boundary_samples(source, step_mm)
    distances, _ = cKDTree(boundary_samples(target, step_mm)[0]).query(points)
    return distances, weights


def mask_contours(mask, spacing, axis: int) -> list:
    """``(N, 3)`` polygons (mm) of a mask's slice boundaries along array ``axis``: in-plane
    (row, column) mm then the slice position (mm from the first slice). A 2-D mask is one slice."""
    mask, spacing = np.asarray(mask, bool), np.asarray(spacing, float)
    if mask.ndim == 2:
        mask, spacing, axis = mask[None], np.r_[1.0, spacing], 0
    slices, in_plane = np.moveaxis(mask, axis, 0), np.delete(spacing, axis)
    return [np.column_stack([contour.points, np.full(len(contour.points), k * spacing[axis])])
            for k in np.flatnonzero(slices.any(axis=(1, 2))) for contour in contours_2d(slices[k], in_plane)]


def _stored_slices(rows: list, pair: StructurePair, axis: int) -> list:
    """Per-plane rows of a pair's masks numbered as slices of the user's stored array (``slice``,
    and ``plane_mm`` = slice × spacing, as the per-slice MSI rows), in increasing slice order."""
    spacing = pair.spacing[axis] if pair.reference.ndim == 3 else 1.0
    orientation = pair.orientation or Reorientation.identity(pair.reference.shape)
    for row in rows:
        canonical_index = int(round(row["plane_mm"] / spacing))
        row["slice"] = orientation.stored_index(axis, canonical_index) if pair.reference.ndim == 3 else 0
        row["plane_mm"] = row["slice"] * spacing
    return sorted(rows, key=lambda row: row["slice"])


def compute(pair: StructurePair, params: Parameters) -> list:
    """The contour metrics of one pair: on its polygons when both inputs are RT Structure Sets,
    else on the slice contours of its masks."""
    step = SAMPLE_STEP_MM
    if pair.contours is not None:
        reference, test = pair.contours
    else:
        volume = pair.reference.ndim == 3
        axis = pair_slice_axis(pair, params) if volume else 0
        in_plane = np.delete(pair.spacing, axis) if volume else pair.spacing
        step = max(SAMPLE_STEP_MM, min(in_plane) / 10)
        reference, test = (mask_contours(mask, pair.spacing, axis) for mask in (pair.reference, pair.test))
    status = emptiness_status(bool(reference), bool(test))
    tolerance = {"tolerance_mm": float(params.apl_tolerance_mm)}
    if status == Status.BOTH_EMPTY:
        return [undefined(spec, status, tolerance if spec.name.startswith("apl") else {}) for spec in METRICS]
    rows, distances, weights = [], [], []
    for plane, (reference_boundary, test_boundary) in boundaries_by_plane(reference, test).items():
        row = {"plane_mm": plane,
               "reference_length_mm": reference_boundary.length if reference_boundary is not None else 0.0,
               "test_length_mm": test_boundary.length if test_boundary is not None else 0.0,
               "apl_mm": added_path_length(reference_boundary, test_boundary, params.apl_tolerance_mm),
               "hd_mm": math.nan, "mean_distance_mm": math.nan}
        if reference_boundary is not None and test_boundary is not None:
            both = [boundary_distances(reference_boundary, test_boundary, step),
                    boundary_distances(test_boundary, reference_boundary, step)]
            plane_distances = np.concatenate([d for d, _ in both])
            plane_weights = np.concatenate([w for _, w in both])
            row["hd_mm"] = float(plane_distances.max())
            row["mean_distance_mm"] = float(np.average(plane_distances, weights=plane_weights))
            distances.append(plane_distances)
            weights.append(plane_weights)
        rows.append(row)
    if pair.contours is None:
        rows = _stored_slices(rows, pair, axis)
    pair.extras["contour_slices"] = rows
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
