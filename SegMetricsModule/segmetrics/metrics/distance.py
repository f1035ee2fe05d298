"""Surface-distance metrics: Hausdorff distance and its percentiles, ASSD, MASD, directed means, NSD.

All of them are reductions of one intermediate, :class:`SurfaceDistances`: for every element of
the reference surface its size (area in mm², length in mm for 2-D) and its distance (mm) to the
test surface, and the same from test to reference. :func:`surface_distances` builds it once per
structure pair; the group keeps it in ``pair.cache[("surface_distances", mode)]`` so that other
groups and reports can reuse it.

Masks are NumPy arrays in array order ``(z, y, x)`` (3-D) or ``(row, col)`` (2-D); every
``spacing`` is in mm **in the same array-axis order**.

Surface modes
-------------
``"exact"`` (default)
    The structure's sub-voxel surface of :mod:`segmetrics.spatial.mesh` (a clamped Gaussian blur of one
    voxel, meshed at its 0.5 level; the same surface the MSI and roughness groups use): it
    converges to the continuous boundary as the voxels shrink, and specks and thin tubes keep a
    surface half a voxel out from their voxel centres (one-voxel sheets stay thin slabs). The
    surface elements are the mesh vertices with their area (length) weights; a vertex's
    distance to the other surface is :func:`segmetrics.spatial.mesh.distances_to_surface` (exact
    point-to-triangle, point-to-segment in 2-D, around the other mesh's nearest vertex).
``"deepmind"``
    Reproduces DeepMind's ``surface-distance`` package: surface elements sit on the grid of voxel
    corners, where the 2×2(×2) neighbourhood is mixed, weighted by the marching-cubes (squares)
    area (length) of that neighbourhood, and distances are between those grid points.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from vtkmodules.util.numpy_support import numpy_to_vtk, vtk_to_numpy
from vtkmodules.vtkCommonDataModel import vtkImageData
from vtkmodules.vtkFiltersCore import vtkFlyingEdges2D, vtkFlyingEdges3D

from ..spatial import _bundled_surface, accelerator, mesh
from ..spatial._threads import thread_pool
from ..registry import MetricGroup, MetricSpec, MetricValue, Parameters, StructurePair, register_group

SURFACE_MODES = ("exact", "deepmind")
PERCENTILE_VARIANTS = ("max_of_directed", "pooled", "mean_of_directed")


@dataclass(frozen=True)
class SurfaceDistances:
    """Directed surface distances of a reference/test pair, both ways, with element sizes.

    Each direction is sorted by distance. ``distances_*`` are in mm; ``areas_*`` are
    element areas in mm² (element lengths in mm for 2-D masks). A missing surface has no
    elements, and the other surface's distances to it are ``inf``.
    """

    distances_ref_to_test: np.ndarray
    areas_ref: np.ndarray
    distances_test_to_ref: np.ndarray
    areas_test: np.ndarray
    mode: str = "exact"


def surface_distances(reference, test, spacing, mode: str = "exact") -> SurfaceDistances:
    """Area-weighted directed distances between the surfaces of two masks.

    Parameters
    ----------
    reference, test : ndarray
        2-D ``(row, col)`` or 3-D ``(z, y, x)`` masks of one shape; non-zero is foreground.
    spacing : sequence of float
        Voxel size in mm **in array-axis order**.
    mode : {"exact", "deepmind"}
        How surfaces are taken (see the module docstring).

    Returns
    -------
    SurfaceDistances
        Distances in mm with element areas in mm² (lengths in mm in 2-D).
    """
    reference, test = np.asarray(reference), np.asarray(test)
    spacing = np.asarray(spacing, dtype=float)
    if mode not in SURFACE_MODES:
        raise ValueError(f"surface mode must be one of {SURFACE_MODES}, got {mode!r}")
    if reference.shape != test.shape:
        raise ValueError(f"reference {reference.shape} and test {test.shape} differ in shape")
    if reference.ndim not in (2, 3) or spacing.shape != (reference.ndim,) or np.any(spacing <= 0):
        raise ValueError(
            f"need 2-D or 3-D masks with one positive spacing per axis, got shape {reference.shape} "
            f"and spacing {spacing.tolist()}"
        )
    if mode == "exact":
        return exact_surface_distances(*mesh.pair_surfaces(reference, test, spacing))
    box = mesh.joint_bounding_box(reference, test)
    if box is None:
        empty = np.zeros(0)
        return SurfaceDistances(empty, empty, empty, empty, mode)
    ref, tst = (_corner_surfels(np.pad(np.asarray(m[box], dtype=bool), 1), spacing) for m in (reference, test))
    return _sorted_by_distance([_directed(ref, tst), _directed(tst, ref)], mode)


def exact_surface_distances(reference: mesh.Surface | None, test: mesh.Surface | None, distances=None) -> SurfaceDistances:
    """``exact``-mode :class:`SurfaceDistances` between two surfaces of :mod:`segmetrics.spatial.mesh` (``None`` = empty mask).

    ``distances(source)``, when given, returns the distances (mm) from the vertices of ``source``
    (one of the two surfaces) to the other (e.g. :func:`segmetrics.spatial.mesh.cached_distances` of a
    pair); default :func:`segmetrics.spatial.mesh.distances_both_ways` (both searches at once).
    """
    if reference is None or test is None:
        directed = [(np.zeros(0), np.zeros(0)) if source is None else (np.full(len(source.sizes), np.inf), source.sizes)
                    for source in (reference, test)]
        return _sorted_by_distance(directed, "exact")
    mesh.prepare_searches(reference, test)
    if distances is None:
        forward, backward = mesh.distances_both_ways(reference, test)
    else:
        forward, backward = distances(reference), distances(test)
    return _sorted_by_distance([(forward, reference.sizes), (backward, test.sizes)], "exact")


def _sorted_by_distance(directed: list, mode: str) -> SurfaceDistances:
    """:class:`SurfaceDistances` of the ``(distances, sizes)`` reference→test and test→reference,
    each sorted by distance, equal distances in their input order (the two sorts run in parallel)."""
    orders = thread_pool().map(accelerator.kernels(_bundled_surface).ascending_order, [np.asarray(distances, dtype=float) for distances, _ in directed])
    return SurfaceDistances(*(values[order] for (distances, sizes), order in zip(directed, orders) for values in (distances, sizes)), mode)


def cached_surface_distances(pair: StructurePair, mode: str) -> SurfaceDistances:
    """:func:`surface_distances` of a structure pair, kept in ``pair.cache[("surface_distances", mode)]``.

    ``exact`` mode measures on the pair's shared surfaces (:func:`segmetrics.spatial.mesh.cached_surface`)
    with their shared directed distances (:func:`segmetrics.spatial.mesh.cached_distances`).
    """
    key = ("surface_distances", mode)
    if key not in pair.cache:
        if mode == "exact":  # on the pair's shared surfaces, with the directed distances other groups share
            reference, test = mesh.cached_surface(pair, "reference"), mesh.cached_surface(pair, "test")
            if reference is not None and test is not None:
                mesh.cached_distances_both_ways(pair)  # both searches at once, kept for the other groups
            pair.cache[key] = exact_surface_distances(reference, test, lambda source: mesh.cached_distances(
                pair, "reference" if source is reference else "test"))
        else:
            pair.cache[key] = surface_distances(pair.reference, pair.test, pair.spacing, mode)
    return pair.cache[key]


def _directed(source, target):
    """(distances, sizes) from the surfels ``(points, sizes)`` of ``source`` to the nearest of
    ``target`` (``inf`` when ``target`` has none)."""
    if len(target[0]) == 0:
        return np.full(len(source[1]), np.inf), source[1]
    return mesh.nearest_points(source[0], target[0], mesh.point_grid(*target))[0], source[1]


# --- "deepmind": corner-grid surfels with marching-cubes areas --------------------------------


def _corner_surfels(padded: np.ndarray, spacing: np.ndarray):
    """Surfels ``(points in mm, sizes)`` at the voxel-corner grid points whose 2×2(×2) neighbourhood is mixed."""
    corners = 2 ** padded.ndim
    codes = np.zeros(tuple(s - 1 for s in padded.shape), dtype=np.uint8)
    for index, corner in enumerate(itertools.product((0, 1), repeat=padded.ndim)):
        window = tuple(slice(c, c + s - 1) for c, s in zip(corner, padded.shape))
        codes |= padded[window].view(np.uint8) << (corners - 1 - index)
    border = (codes != 0) & (codes != 2**corners - 1)
    points = np.stack(np.nonzero(border), axis=1) * spacing
    return points, _surfel_size_table(tuple(spacing))[codes[border]]


@lru_cache(maxsize=None)
def _unit_surfel_vectors(ndim: int) -> np.ndarray:
    """Per neighbourhood code, the area vectors of its marching-cubes triangles (3-D) or the
    vectors of its marching-squares segments (2-D) at unit spacing, in array axis order, zero-padded.

    Bit ``2**(corners-1-i)`` of a code is the ``i``-th corner of the neighbourhood in C order.
    Codes with more than half the corners inside use the triangulation of their complement, as
    DeepMind's table does (it matters for the ambiguous cases). The triangles are VTK's flying
    edges of the 0.5 level (the same sizes as scikit-image's Lorensen marching cubes, which
    DeepMind's table follows).
    """
    corners = 2**ndim
    per_code = [np.zeros((1, ndim))]
    for code in range(1, 2**corners):
        bits = np.array([(code >> (corners - 1 - i)) & 1 for i in range(corners)], dtype=float)
        if bits.sum() > corners // 2:
            bits = 1.0 - bits
        per_code.append(_level_cell_vectors(bits.reshape((2,) * ndim)) if bits.any() else np.zeros((1, ndim)))
    width = max(len(v) for v in per_code)
    table = np.zeros((len(per_code), width, ndim))
    for code, vectors in enumerate(per_code):
        table[code, : len(vectors)] = vectors
    return table


def _level_cell_vectors(cube: np.ndarray) -> np.ndarray:
    """Area vectors of the triangles (3-D) or vectors of the segments (2-D) of the 0.5 level of a
    2×2(×2) array of 0 and 1 at unit spacing (VTK flying edges), in array axis order."""
    image = vtkImageData()
    image.SetDimensions(*cube.shape[::-1], *(1,) * (3 - cube.ndim))
    image.GetPointData().SetScalars(numpy_to_vtk(cube.ravel(), deep=True))
    level = vtkFlyingEdges3D() if cube.ndim == 3 else vtkFlyingEdges2D()
    level.SetInputData(image)
    level.SetValue(0, 0.5)
    level.Update()
    output = level.GetOutput()
    points = vtk_to_numpy(output.GetPoints().GetData()).astype(float)[:, cube.ndim - 1::-1]  # (x, y, z) to array order
    if cube.ndim == 3:
        triangles = points[vtk_to_numpy(output.GetPolys().GetConnectivityArray()).reshape(-1, 3)]
        return 0.5 * np.cross(triangles[:, 1] - triangles[:, 0], triangles[:, 2] - triangles[:, 0])
    lines = output.GetLines()
    chain, offsets = vtk_to_numpy(lines.GetConnectivityArray()), vtk_to_numpy(lines.GetOffsetsArray())
    return np.concatenate([np.diff(points[chain[start:stop]], axis=0) for start, stop in zip(offsets[:-1], offsets[1:])])


@lru_cache(maxsize=64)
def _surfel_size_table(spacing: tuple) -> np.ndarray:
    """Surfel area (mm², 3-D) or contour length (mm, 2-D) per neighbourhood code at ``spacing``."""
    spacing = np.asarray(spacing)
    if len(spacing) == 3:  # an area vector scales by the product of the other two spacings
        scale = np.prod(spacing) / spacing
    else:
        scale = spacing
    return np.linalg.norm(_unit_surfel_vectors(len(spacing)) * scale, axis=-1).sum(axis=1)


# --- reductions ---------------------------------------------------------------------------------


def _weighted_percentile(distances: np.ndarray, sizes: np.ndarray, q: float) -> float:
    """Smallest distance whose cumulative size fraction reaches ``q`` % (NaN without elements)."""
    if distances.size == 0:
        return math.nan
    cumulative = np.cumsum(sizes) / np.sum(sizes)
    return float(distances[min(np.searchsorted(cumulative, q / 100.0), distances.size - 1)])


def _combine(values, reducer) -> float:
    """Reduce the defined (non-NaN) directed values; NaN when neither direction is defined."""
    defined = [v for v in values if not math.isnan(v)]
    return float(reducer(defined)) if defined else math.nan


def hausdorff(sd: SurfaceDistances) -> float:
    """Hausdorff distance (mm): the largest distance in either direction."""
    pooled = np.concatenate([sd.distances_ref_to_test, sd.distances_test_to_ref])
    return float(pooled.max()) if pooled.size else math.nan


def percentile_distance(sd: SurfaceDistances, q: float = 95.0, variant: str = "max_of_directed") -> float:
    """Area-weighted ``q``-th percentile Hausdorff distance (mm).

    A directed percentile is the smallest distance such that elements holding at least ``q`` %
    of the surface area (length) are that close. ``variant``: ``"max_of_directed"`` (the larger
    of the two directed percentiles, as DeepMind), ``"mean_of_directed"`` (their mean), or
    ``"pooled"`` (the percentile of both directions' elements together, as MedPy/MONAI's pooled).
    """
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be in [0, 100], got {q}")
    if variant == "pooled":
        distances = np.concatenate([sd.distances_ref_to_test, sd.distances_test_to_ref])
        sizes = np.concatenate([sd.areas_ref, sd.areas_test])
        order = np.lexsort((sizes, distances))
        return _weighted_percentile(distances[order], sizes[order], q)
    if variant not in PERCENTILE_VARIANTS:
        raise ValueError(f"percentile variant must be one of {PERCENTILE_VARIANTS}, got {variant!r}")
    directed = (
        _weighted_percentile(sd.distances_ref_to_test, sd.areas_ref, q),
        _weighted_percentile(sd.distances_test_to_ref, sd.areas_test, q),
    )
    return _combine(directed, np.max if variant == "max_of_directed" else np.mean)


def directed_means(sd: SurfaceDistances) -> tuple:
    """Area-weighted mean distance (mm) reference→test and test→reference (NaN for a missing surface)."""
    return tuple(
        float(np.sum(d * a) / np.sum(a)) if a.size else math.nan
        for d, a in ((sd.distances_ref_to_test, sd.areas_ref), (sd.distances_test_to_ref, sd.areas_test))
    )


def assd(sd: SurfaceDistances) -> float:
    """Average symmetric surface distance (mm): area-weighted mean over both surfaces' elements pooled."""
    total = np.sum(sd.areas_ref) + np.sum(sd.areas_test)
    if total == 0:
        return math.nan
    return float((np.sum(sd.distances_ref_to_test * sd.areas_ref) + np.sum(sd.distances_test_to_ref * sd.areas_test)) / total)


def masd(sd: SurfaceDistances) -> float:
    """Mean average surface distance (mm): the mean of the two directed mean distances."""
    return _combine(directed_means(sd), np.mean)


def nsd(sd: SurfaceDistances, tolerance_mm: float) -> float:
    """Normalised surface distance (surface Dice) at ``tolerance_mm``: the fraction of both
    surfaces' area (length) lying within the tolerance of the other surface, in [0, 1]."""
    total = np.sum(sd.areas_ref) + np.sum(sd.areas_test)
    if total == 0:
        return math.nan
    close = np.sum(sd.areas_ref[sd.distances_ref_to_test <= tolerance_mm])
    close += np.sum(sd.areas_test[sd.distances_test_to_ref <= tolerance_mm])
    return float(close / total)


# --- registered group ---------------------------------------------------------------------------

METRICS = (
    MetricSpec("hd_mm", "mm", "lower", "Hausdorff distance: largest distance from either surface to the other"),
    MetricSpec("hd95_mm", "mm", "lower", "95th-percentile Hausdorff distance (area-weighted; variant in params)"),
    MetricSpec("hdp_mm", "mm", "lower", "percentile Hausdorff distance at Parameters.hd_percentile (in params)"),
    MetricSpec("assd_mm", "mm", "lower", "average symmetric surface distance, both surfaces pooled"),
    MetricSpec("masd_mm", "mm", "lower", "mean of the two directed mean surface distances"),
    MetricSpec("mean_distance_reference_to_test_mm", "mm", "lower", "mean distance from the reference surface to the test"),
    MetricSpec("mean_distance_test_to_reference_mm", "mm", "lower", "mean distance from the test surface to the reference"),
    MetricSpec("nsd", "1", "higher", "normalised surface distance (surface Dice) at Parameters.nsd_tolerance_mm"),
)


def compute(pair: StructurePair, params: Parameters) -> list:
    """All surface-distance metrics of one pair (status from which masks are empty)."""
    sd = cached_surface_distances(pair, params.surface_mode)
    variant = params.hd_percentile_variant
    to_test, to_reference = directed_means(sd)
    values = {
        "hd_mm": (hausdorff(sd), {}),
        "hd95_mm": (percentile_distance(sd, 95.0, variant), {"percentile": 95.0, "variant": variant}),
        "hdp_mm": (
            percentile_distance(sd, params.hd_percentile, variant),
            {"percentile": float(params.hd_percentile), "variant": variant},
        ),
        "assd_mm": (assd(sd), {}),
        "masd_mm": (masd(sd), {}),
        "mean_distance_reference_to_test_mm": (to_test, {}),
        "mean_distance_test_to_reference_mm": (to_reference, {}),
        "nsd": (nsd(sd, params.nsd_tolerance_mm), {"tolerance_mm": float(params.nsd_tolerance_mm)}),
    }
    status = pair.emptiness
    return [
        MetricValue(spec.name, values[spec.name][0], spec.unit, status, {"mode": params.surface_mode, **values[spec.name][1]})
        for spec in METRICS
    ]


register_group(
    MetricGroup(
        "distance",
        METRICS,
        compute,
        "surface distances in mm (HD, percentile HD, ASSD, MASD, directed means) and NSD",
    )
)
