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
    A sub-voxel surface that converges to the continuous boundary as the voxels shrink: the mask
    is blurred by a Gaussian of one voxel (per axis), the blurred values are clamped so that
    every inside voxel centre stays above 0.5 and every outside centre below it (so no structure,
    however small, disappears and the surface never crosses a voxel centre), and the 0.5
    iso-surface is extracted (VTK flying edges in 3-D, marching squares in 2-D) at the voxel
    spacing. The surface elements are the mesh vertices, each carrying a third of the area of its
    triangles (half the length of its segments); a vertex's distance to the other surface is the
    exact point-to-triangle (point-to-segment) distance to the triangles around the other mesh's
    nearest vertex.
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
from scipy import ndimage
from scipy.spatial import cKDTree
from skimage import measure
import vtk
from vtk.util.numpy_support import numpy_to_vtk, vtk_to_numpy

from .registry import MetricGroup, MetricSpec, MetricValue, Parameters, StructurePair, register_group

SURFACE_MODES = ("exact", "deepmind")
PERCENTILE_VARIANTS = ("max_of_directed", "pooled", "mean_of_directed")
#: Gaussian blur (in voxels, every axis) of the ``exact`` surface.
SMOOTHING_SIGMA_VOXELS = 1.0
#: Inside voxel centres are clamped to at least 0.5 + this, outside centres to at most 0.5 - this.
CLAMP_MARGIN = 0.05
#: Points handled at once in point-to-mesh distances (about 50 MB of temporaries per block).
POINTS_PER_BLOCK = 1 << 15


@dataclass(frozen=True)
class SurfaceDistances:
    """Directed surface distances of a reference/test pair, both ways, with element sizes.

    Each direction is sorted by distance (then size). ``distances_*`` are in mm; ``areas_*`` are
    element areas in mm² (element lengths in mm for 2-D masks). A missing surface has no
    elements, and the other surface's distances to it are ``inf``.
    """

    distances_ref_to_test: np.ndarray
    areas_ref: np.ndarray
    distances_test_to_ref: np.ndarray
    areas_test: np.ndarray
    mode: str = "exact"


@dataclass
class _Surface:
    """Surface elements: ``points`` (n, ndim) in mm with their ``sizes`` (n,) in mm² or mm.

    For a mesh, the points are its vertices, each carrying a third of the area of its triangles
    (half the length of its segments in 2-D), and ``faces`` (m, ndim) index the triangles
    (segments) between them; grid-point surfels have no faces.
    """

    points: np.ndarray
    sizes: np.ndarray
    faces: np.ndarray | None = None


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
    box = _joint_bounding_box(reference, test)
    if box is None:
        empty = np.zeros(0)
        return SurfaceDistances(empty, empty, empty, empty, mode)
    build = _corner_surfels if mode == "deepmind" else _smooth_surface
    pad = 1 if mode == "deepmind" else 2
    surfaces = []
    for mask in (reference, test):
        crop = np.pad(np.asarray(mask[box], dtype=bool), pad)
        surfaces.append(build(crop, spacing) if crop.any() else None)
    ref, tst = surfaces
    return SurfaceDistances(*_directed(ref, tst), *_directed(tst, ref), mode)


def cached_surface_distances(pair: StructurePair, mode: str) -> SurfaceDistances:
    """:func:`surface_distances` of a structure pair, kept in ``pair.cache[("surface_distances", mode)]``."""
    key = ("surface_distances", mode)
    if key not in pair.cache:
        pair.cache[key] = surface_distances(pair.reference, pair.test, pair.spacing, mode)
    return pair.cache[key]


def _bounding_box(mask: np.ndarray):
    """Tuple of slices around the non-zero voxels, or ``None``; reads the mask about once."""
    box = []
    for axis in range(mask.ndim):
        view = mask[tuple(box)]
        hits = np.flatnonzero(view.any(axis=tuple(a for a in range(mask.ndim) if a != axis)))
        if hits.size == 0:
            return None
        box.append(slice(int(hits[0]), int(hits[-1]) + 1))
    return tuple(box)


def _joint_bounding_box(reference: np.ndarray, test: np.ndarray):
    """Smallest box (tuple of slices) holding the foreground of both masks, ``None`` if both are empty."""
    boxes = [b for b in (_bounding_box(reference), _bounding_box(test)) if b is not None]
    if not boxes:
        return None
    return tuple(slice(min(b[i].start for b in boxes), max(b[i].stop for b in boxes)) for i in range(reference.ndim))


def _directed(source: _Surface | None, target: _Surface | None):
    """(distances, sizes) from the elements of ``source`` to ``target``, sorted by distance then size."""
    if source is None:
        return np.zeros(0), np.zeros(0)
    if target is None:
        distances = np.full(len(source.sizes), np.inf)
    elif target.faces is None:
        distances = _tree(target.points).query(source.points, workers=-1)[0]
    else:
        distances = _distances_to_mesh(source.points, target)
    order = np.lexsort((source.sizes, distances))
    return distances[order], source.sizes[order]


def _tree(points: np.ndarray) -> cKDTree:
    """KD-tree for nearest-neighbour queries (unbalanced: builds several times faster, queries as fast)."""
    return cKDTree(points, balanced_tree=False, compact_nodes=False)


# --- "exact": smoothed sub-voxel mesh, exact point-to-mesh distances ------------------------


def _smooth_surface(padded: np.ndarray, spacing: np.ndarray) -> _Surface:
    """Mesh (3-D) or contours (2-D) of the clamped, blurred mask's 0.5 level, in mm (array order)."""
    field = ndimage.gaussian_filter(padded, SMOOTHING_SIGMA_VOXELS, output=np.float32, mode="constant", truncate=3.0)
    np.maximum(field, 0.5 + CLAMP_MARGIN, out=field, where=padded)
    np.minimum(field, 0.5 - CLAMP_MARGIN, out=field, where=~padded)
    if padded.ndim == 3:
        vertices, faces = _iso_surface(field, spacing)
        corners = vertices[faces]
        sizes = 0.5 * np.linalg.norm(np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0]), axis=1)
    else:
        contours = [c[:-1] for c in measure.find_contours(field, 0.5)]  # closed: drop the repeated point
        first = np.cumsum([0] + [len(c) for c in contours[:-1]])
        faces = np.concatenate(
            [np.stack([i + np.arange(len(c)), i + (np.arange(len(c)) + 1) % len(c)], axis=1) for i, c in zip(first, contours)]
        )
        vertices = np.concatenate(contours) * spacing
        sizes = np.linalg.norm(vertices[faces[:, 1]] - vertices[faces[:, 0]], axis=1)
    faces, sizes = faces[sizes > 0], sizes[sizes > 0]
    vertex_sizes = np.bincount(faces.ravel(), np.repeat(sizes / faces.shape[1], faces.shape[1]), len(vertices))
    used = vertex_sizes > 0
    renumber = np.cumsum(used) - 1
    return _Surface(vertices[used], vertex_sizes[used], renumber[faces])


def _iso_surface(field: np.ndarray, spacing: np.ndarray):
    """Vertices (mm, array order) and triangles of the 0.5 iso-surface of a 3-D field (VTK flying edges)."""
    image = vtk.vtkImageData()
    image.SetDimensions(field.shape[::-1])
    image.SetSpacing(spacing[::-1].tolist())
    image.GetPointData().SetScalars(numpy_to_vtk(field.ravel(), deep=False))  # field outlives the filter
    surface = vtk.vtkFlyingEdges3D()
    surface.SetInputData(image)
    surface.SetValue(0, 0.5)
    surface.ComputeNormalsOff()
    surface.ComputeGradientsOff()
    surface.ComputeScalarsOff()
    surface.Update()
    mesh = surface.GetOutput()
    vertices = vtk_to_numpy(mesh.GetPoints().GetData()).astype(float)[:, ::-1]
    return vertices, vtk_to_numpy(mesh.GetPolys().GetConnectivityArray()).reshape(-1, 3).astype(np.int64)


def _distances_to_mesh(points: np.ndarray, mesh: _Surface) -> np.ndarray:
    """Distance (mm) from each point to the triangles (segments) around the mesh vertex nearest to it.

    The closest point of the whole mesh almost always lies on one of them; when it does not,
    the distance is overestimated by less than one edge length. Points go in blocks of
    :data:`POINTS_PER_BLOCK` to bound the temporary arrays.
    """
    vertex_distances, nearest = _tree(mesh.points).query(points, workers=-1)
    distances = np.zeros(len(points))
    todo = np.flatnonzero(vertex_distances > 0)  # a point on a vertex of the mesh is at distance 0
    points, nearest = points[todo], nearest[todo]
    per_vertex = mesh.faces.shape[1]
    faces_by_vertex = np.argsort(mesh.faces.ravel(), kind="stable") // per_vertex
    counts = np.bincount(mesh.faces.ravel(), minlength=len(mesh.points))  # every vertex has a face
    first_face = np.cumsum(counts) - counts
    for start in range(0, len(points), POINTS_PER_BLOCK):
        block = slice(start, start + POINTS_PER_BLOCK)
        pairs = counts[nearest[block]]
        pair_starts = np.cumsum(pairs) - pairs
        faces = faces_by_vertex[np.repeat(first_face[nearest[block]] - pair_starts, pairs) + np.arange(pairs.sum())]
        corners = mesh.points[mesh.faces[faces]]
        p = np.repeat(points[block], pairs, axis=0)
        if per_vertex == 2:
            pair_distances = _point_segment_distance(p, corners[:, 0], corners[:, 1])
        else:
            pair_distances = _point_triangle_distance(p, corners[:, 0], corners[:, 1], corners[:, 2])
        distances[todo[block]] = np.minimum.reduceat(pair_distances, pair_starts)
    return distances


def _dot(u, v):
    """Dot products along the last axis."""
    return np.einsum("...i,...i->...", u, v)


def _point_segment_distance(p, a, b):
    """Euclidean distance from points ``p`` to segments ``ab`` (broadcast over leading axes)."""
    ab, ap = b - a, p - a
    t = np.clip(_dot(ap, ab) / _dot(ab, ab), 0.0, 1.0)
    offset = ap - t[..., None] * ab
    return np.sqrt(_dot(offset, offset))


def _point_triangle_distance(p, a, b, c):
    """Euclidean distance from points ``p`` to non-degenerate triangles ``abc`` (3-D, broadcast).

    The closest point is found from the Voronoi region of ``p`` (a vertex, an edge or the face),
    following Ericson, *Real-Time Collision Detection* (2005), section 5.1.5.
    """
    ab, ac, ap = b - a, c - a, p - a
    d1, d2 = _dot(ab, ap), _dot(ac, ap)
    ab_ac = _dot(ab, ac)
    d3, d4 = d1 - _dot(ab, ab), d2 - ab_ac  # (p - b)·ab, (p - b)·ac
    d5, d6 = d1 - ab_ac, d2 - _dot(ac, ac)  # (p - c)·ab, (p - c)·ac
    va, vb, vc = d3 * d6 - d5 * d4, d5 * d2 - d1 * d6, d1 * d4 - d3 * d2
    with np.errstate(divide="ignore", invalid="ignore"):  # unused branches may divide by zero
        on_bc = (d4 - d3) / ((d4 - d3) + (d5 - d6))
        regions = [
            (d1 <= 0) & (d2 <= 0),  # vertex a
            (d3 >= 0) & (d4 <= d3),  # vertex b
            (d6 >= 0) & (d5 <= d6),  # vertex c
            (vc <= 0) & (d1 >= 0) & (d3 <= 0),  # edge ab
            (vb <= 0) & (d2 >= 0) & (d6 <= 0),  # edge ac
            (va <= 0) & (d4 >= d3) & (d5 >= d6),  # edge bc
        ]
        v = np.select(regions, [0.0, 1.0, 0.0, d1 / (d1 - d3), 0.0, 1.0 - on_bc], vb / (va + vb + vc))
        w = np.select(regions, [0.0, 0.0, 1.0, 0.0, d2 / (d2 - d6), on_bc], vc / (va + vb + vc))
    offset = ap - v[..., None] * ab - w[..., None] * ac
    return np.sqrt(_dot(offset, offset))


# --- "deepmind": corner-grid surfels with marching-cubes areas --------------------------------


def _corner_surfels(padded: np.ndarray, spacing: np.ndarray) -> _Surface:
    """Surfels at the voxel-corner grid points whose 2×2(×2) neighbourhood is mixed."""
    corners = 2 ** padded.ndim
    codes = np.zeros(tuple(s - 1 for s in padded.shape), dtype=np.uint8)
    for index, corner in enumerate(itertools.product((0, 1), repeat=padded.ndim)):
        window = tuple(slice(c, c + s - 1) for c, s in zip(corner, padded.shape))
        codes |= padded[window].view(np.uint8) << (corners - 1 - index)
    border = (codes != 0) & (codes != 2**corners - 1)
    points = np.stack(np.nonzero(border), axis=1) * spacing
    return _Surface(points, _surfel_size_table(tuple(spacing))[codes[border]])


@lru_cache(maxsize=None)
def _unit_surfel_vectors(ndim: int) -> np.ndarray:
    """Per neighbourhood code, the area vectors of its marching-cubes triangles (3-D) or the
    vectors of its marching-squares segments (2-D) at unit spacing, zero-padded.

    Bit ``2**(corners-1-i)`` of a code is the ``i``-th corner of the neighbourhood in C order.
    Codes with more than half the corners inside use the triangulation of their complement, as
    DeepMind's table does (it matters for the ambiguous cases).
    """
    corners = 2**ndim
    per_code = [np.zeros((1, ndim))]
    for code in range(1, 2**corners):
        bits = np.array([(code >> (corners - 1 - i)) & 1 for i in range(corners)], dtype=float)
        if bits.sum() > corners // 2:
            bits = 1.0 - bits
        cube = bits.reshape((2,) * ndim)
        if bits.sum() == 0:
            per_code.append(np.zeros((1, ndim)))
        elif ndim == 3:
            vertices, faces, _, _ = measure.marching_cubes(cube, 0.5, method="lorensen")
            tri = vertices[faces].astype(float)
            per_code.append(0.5 * np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]))
        else:
            per_code.append(np.concatenate([np.diff(c, axis=0) for c in measure.find_contours(cube, 0.5)]))
    width = max(len(v) for v in per_code)
    table = np.zeros((len(per_code), width, ndim))
    for code, vectors in enumerate(per_code):
        table[code, : len(vectors)] = vectors
    return table


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
