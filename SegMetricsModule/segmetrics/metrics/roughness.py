"""Roughness Index (RI), Roughness Ratio (RR) and Average Roughness Distance (ARD).

After Rathour et al., arXiv 2103.12350. Two conventions:

``"paper"``
    Reproduces the authors' public code (index units, no spacing, axis-aligned tiles); this is
    what their published table was computed with. It depends on the image size and padding.
``"default"``
    Physical: in mm from the spacing, on the surface mesh (3-D) or contours (2-D) of each mask,
    independent of the field of view and of translation.

Arrays are in NumPy/SimpleITK array order (``(z, y, x)`` for 3-D, ``(row, col)`` for 2-D) and
every ``spacing`` is in mm in that same array-axis order.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
from vtkmodules.util.numpy_support import numpy_to_vtk

from ..spatial import _bundled_roughness, accelerator, mesh
from ..spatial._threads import in_threads
from ..registry import MetricGroup, MetricSpec, MetricValue, Parameters, Status, StructurePair, register_group

# ---------------------------------------------------------------------------------------------
# Paper convention (index units)
# ---------------------------------------------------------------------------------------------


def paper_surface(mask: np.ndarray) -> np.ndarray:
    """Surface map of the authors' code on the corner grid, in index units.

    Cell ``o`` of the corner grid (one larger than ``mask`` along every axis) covers the pixels
    or voxels ``o - 1`` and ``o`` along each axis (outside = background); it is surface when some
    but not all of them are inside. In 2-D the authors' map is padded by one more empty pixel on
    every side (shape ``mask.shape + 3``); in 3-D its shape is ``mask.shape + 1``.

    Parameters
    ----------
    mask : ndarray of bool
        2-D ``(row, col)`` or 3-D ``(z, y, x)`` mask.
    """
    mask = np.asarray(mask, dtype=bool)
    padded = np.pad(mask, 1).astype(np.uint8)
    grid_shape = tuple(n + 1 for n in mask.shape)
    count = sum(
        padded[tuple(slice(o, o + n) for o, n in zip(offset, grid_shape))]
        for offset in itertools.product((0, 1), repeat=mask.ndim)
    )
    surface = (count > 0) & (count < 2**mask.ndim)
    return np.pad(surface, 1) if mask.ndim == 2 else surface


def _integer_centre(points: np.ndarray) -> np.ndarray:
    """Mean of index coordinates ``(n, ndim)``, truncated to integers as the authors' code does."""
    return np.trunc(points.mean(axis=0))


def _radial_distance_grid(shape, centre) -> np.ndarray:
    """ζ: distance (index units) of every grid index to ``centre``."""
    axes = np.ogrid[tuple(slice(0, n) for n in shape)]
    return np.sqrt(sum((a - c) ** 2 for a, c in zip(axes, centre)))


def _tiles(array: np.ndarray, w: int) -> np.ndarray:
    """View ``array`` (zero-padded to a multiple of ``w``) as ``(tiles..., w**ndim)`` blocks."""
    counts = [math.ceil(n / w) for n in array.shape]
    padded = np.pad(array, [(0, c * w - n) for c, n in zip(counts, array.shape)])
    blocks = padded.reshape([x for c in counts for x in (c, w)])
    ndim = array.ndim
    order = list(range(0, 2 * ndim, 2)) + list(range(1, 2 * ndim, 2))
    return blocks.transpose(order).reshape(counts + [w**ndim])


def paper_roughness_index(surface: np.ndarray, window: int) -> float:
    """RI of a surface map exactly as the authors' code computes it (index units).

    Tiles of side ``window`` with stride ``window`` start at index 0 and cover the grid. For a
    tile holding surface points, ``D0`` is the mean ζ over those points; when the tile lies
    strictly inside the grid (``start + window < size`` on every axis) it adds the mean of
    ``|ζ - D0|`` over **all** its cells (not only surface cells); other tiles add 0. The sum is
    divided by the number of tiles, empty ones included. ζ is measured from the integer
    (truncated) mean index of the surface points.

    Parameters
    ----------
    surface : ndarray of bool
        Surface map from :func:`paper_surface` (array-axis order).
    window : int
        Tile side in grid cells.
    """
    surface = np.asarray(surface, dtype=bool)
    if not surface.any():
        return math.nan
    zeta = _radial_distance_grid(surface.shape, _integer_centre(np.argwhere(surface)))
    on_surface = _tiles(surface, window)
    n_points = on_surface.sum(axis=-1)
    zeta_tiles = _tiles(zeta, window)
    d0 = np.where(on_surface, zeta_tiles, 0.0).sum(axis=-1) / np.maximum(n_points, 1)
    starts = np.ix_(*[np.arange(0, n, window) for n in surface.shape])
    inside = np.logical_and.reduce(
        [start + window < n for start, n in zip(np.broadcast_arrays(*starts), surface.shape)]
    )
    r = np.abs(zeta_tiles - d0[..., None]).mean(axis=-1)
    return float(np.sum(r, where=(n_points > 0) & inside) / n_points.size)


def paper_ard(reference: np.ndarray, test: np.ndarray) -> float:
    """ARD of the authors' code (index units): mean over all image elements of ``|DM_T - DM_R|``.

    ``DM_X`` is the distance of each element to the truncated mean index of the filled mask ``X``
    inside ``X`` and 0 outside. Depends on the image size (the mean runs over the whole image).
    """
    maps = []
    for mask in (reference, test):
        mask = np.asarray(mask, dtype=bool)
        centre = _integer_centre(np.argwhere(mask))
        maps.append(np.where(mask, _radial_distance_grid(mask.shape, centre), 0.0))
    return float(np.abs(maps[1] - maps[0]).mean())


#: Smallest default tile side of the paper convention (voxels): a tile of side 1 holds one cell,
#: so RI would be 0; 3 is the smallest window of the authors' published RI curve.
PAPER_MIN_WINDOW = 3


def paper_window(shape) -> int:
    """Default tile side (voxels) of the paper convention for an image of ``shape``.

    The authors used 7 % of the side of square/cubic images (7 for 100 px). Generalised to any
    shape as 7 % of the **largest** side, truncated, at least :data:`PAPER_MIN_WINDOW`, and at
    most the smallest side, so that on every axis the first tile lies strictly inside the grid
    (tiles touching the far border add 0). On cubic images of 43 px or more this is the
    authors' value; on clinical volumes it no longer collapses to 1 voxel because of a short z
    axis. An image fewer than 3 voxels thick along some axis gets that thickness (1: RI = 0).
    """
    return min(max(int(max(shape) * 0.07), PAPER_MIN_WINDOW), min(shape))


# ---------------------------------------------------------------------------------------------
# Default convention (mm, on the surface)
# ---------------------------------------------------------------------------------------------

#: Default window radius (mm) of the default convention.
DEFAULT_WINDOW_MM = 3.0
#: Barycentric tolerance of the ray/simplex test (a ray through a shared edge or vertex hits).
_HIT_TOLERANCE = 1e-9
#: Width of a finest direction bucket of :func:`radial_gaps`, in median cap radii (chords).
DIRECTION_BUCKET_REACHES = 2.0


def surface_centre(points: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Area- (3-D) or length- (2-D) weighted centre of gravity of surface points (mm)."""
    return np.average(points, axis=0, weights=weights)


def local_roughness(surface: mesh.Surface, radius: float) -> np.ndarray:
    """Per-vertex roughness: mean ``|ζ - mean ζ|`` over the window centred on each vertex (mm).

    ζ is the distance of a vertex to the weighted centre of gravity of the surface. The window of
    vertex ``j`` holds every vertex within ``radius`` (mm, Euclidean) of it, itself included;
    both means over the window are weighted by the vertices' areas (lengths in 2-D). This is the
    paper's per-window term ``(1/N) Σ |ζ_i - mean ζ|`` with one window per vertex. The windows
    are scanned in the buckets of the surface's vertex grid (:attr:`segmetrics.spatial.mesh.Surface.vertex_grid`,
    ``window_deviations`` of :func:`_roughness_kernels`, :func:`_on_points`).

    Parameters
    ----------
    surface : segmetrics.spatial.mesh.Surface
        Vertices (mm) with their areas (mm²) or lengths (mm, 2-D) as weights.
    radius : float
        Window radius in mm.

    Returns
    -------
    ndarray, shape (n,)
        Roughness of each vertex in mm.
    """
    points, weights = surface.points, surface.sizes
    zeta = np.linalg.norm(points - surface_centre(points, weights), axis=1)
    centres = np.pad(np.asarray(points, dtype=float), ((0, 0), (0, 3 - points.shape[1])))
    shared = (zeta, np.asarray(weights, dtype=float), float(radius), *surface.vertex_grid)
    return _on_points(_roughness_kernels(), "window_deviations", (centres,), shared)


def radial_gaps(points, centre, other_vertices, other_cells) -> np.ndarray:
    """Radial distance (mm) from each point to the other surface, along the ray from ``centre``.

    For point ``p`` at distance ζ from ``centre``, the ray from ``centre`` through ``p`` is cast
    against the other surface; the gap is ``min |ζ - t|`` over its hits at distances ``t``, or ζ
    when the ray misses (the other object has no extent in that direction).

    A ray can only hit a cell if, as seen from ``centre``, its unit direction lies within the
    cell's angular radius (the largest chord between the cell's mean direction and its corners'
    directions, 2 for cells wider than a chord of 1, where the cap may no longer contain the cell)
    of the cell's mean direction. The cells are filed by these caps in buckets of directions, on
    levels of bucket sizes a factor 2 apart so that wide cells (close to the centre) do not widen
    the search for all the others (``direction_grid``); each ray tests the cells of its buckets
    (``radial_gaps``, :func:`_on_points`; Möller–Trumbore with the cells prepared by ``ray_cells``),
    the kernels of :func:`_roughness_kernels`.

    Parameters
    ----------
    points : ndarray, shape (k, ndim)
        Points in mm (any axis order shared by all arguments, e.g. a :class:`segmetrics.spatial.mesh.Surface` frame).
    centre : ndarray, shape (ndim,)
        Origin of the rays (mm).
    other_vertices, other_cells : ndarray
        The other surface: vertices (n, ndim) in mm and segments or triangles (m, ndim) as vertex indices.

    Returns
    -------
    ndarray, shape (k,)
        Gap of each point in mm.
    """
    offsets = points - centre
    zeta = np.linalg.norm(offsets, axis=1)
    missing = 3 - points.shape[1]  # 2-D: rays and segments in the plane z = 0
    directions = np.pad(offsets / np.maximum(zeta, 1e-300)[:, None], ((0, 0), (0, missing)))
    vertices = np.pad(np.asarray(other_vertices, dtype=float), ((0, 0), (0, missing)))
    origin = np.pad(np.asarray(centre, dtype=float), (0, missing))
    kernels = _roughness_kernels()
    cells = kernels.ray_cells(vertices, np.asarray(other_cells, dtype=np.int64), origin)
    finest = _direction_buckets(cells[1])
    shared = (*cells, _HIT_TOLERANCE, finest, *kernels.direction_grid(cells[0], cells[1], finest))
    return _on_points(kernels, "radial_gaps", (directions, zeta), shared)


def _roughness_kernels():
    """The roughness kernels: compiled (:mod:`segmetrics.spatial._kernels`) when numba runs, else
    their numpy/scipy twins (:mod:`segmetrics.spatial._bundled_roughness`), with the same values."""
    return accelerator.kernels(_bundled_roughness)


def _on_points(kernels, name: str, per_point: tuple, shared: tuple) -> np.ndarray:
    """The output of kernel ``name`` of ``kernels`` (a 1-tuple) on the points: the compiled kernel
    on the package's threads (it releases the GIL), the numpy twin in the calling thread (its
    blocks of pairs are small and hold the GIL most of the time: threads would contend for it and
    each would redo the per-call set-up)."""
    kernel = getattr(kernels, name)
    if kernels is _bundled_roughness:
        return kernel(*per_point, *shared)[0]
    return in_threads(kernel, per_point, shared)[0]


def _direction_buckets(reach: np.ndarray) -> int:
    """Buckets per axis of the finest level of :func:`radial_gaps`' direction buckets (over the
    cube ``[-1, 1]**3``): buckets :data:`DIRECTION_BUCKET_REACHES` median cap radii wide, as a
    power of 2 of at most :data:`segmetrics.spatial._bundled_roughness.MAX_DIRECTION_BUCKETS`."""
    if len(reach) == 0:
        return 1
    wanted = 2.0 / (DIRECTION_BUCKET_REACHES * float(np.median(reach)))
    return int(2 ** np.clip(np.floor(np.log2(max(wanted, 1.0))), 0, np.log2(_bundled_roughness.MAX_DIRECTION_BUCKETS)))


def roughness_index(surface: mesh.Surface, radius: float) -> tuple:
    """RI (mm): area-weighted mean of :func:`local_roughness` over the surface's vertices.

    Parameters
    ----------
    surface : segmetrics.spatial.mesh.Surface
        3-D surface or 2-D contours, in mm.
    radius : float
        Window radius in mm.

    Returns
    -------
    ri : float
        Roughness Index in mm.
    per_vertex : ndarray, shape (n,)
        :func:`local_roughness` of every vertex (mm).
    """
    per_point = local_roughness(surface, radius)
    return float(np.average(per_point, weights=surface.sizes)), per_point


def average_roughness_distance(reference: mesh.Surface, test: mesh.Surface) -> float:
    """ARD (mm): weighted mean radial gap between the surfaces, seen from the reference's centre.

    Every point of each surface is compared with the other surface along the ray from the
    reference's weighted centre of gravity (:func:`radial_gaps`); the mean runs over the points of
    both surfaces, weighted by area (length in 2-D). Identical surfaces give 0. Both surfaces
    must share a frame (as the surfaces of one pair do).
    """
    centre = surface_centre(reference.points, reference.sizes)
    gaps = [
        radial_gaps(a.points, centre, b.points, b.cells) for a, b in ((reference, test), (test, reference))
    ]
    return float(np.average(np.concatenate(gaps), weights=np.concatenate([reference.sizes, test.sizes])))


# ---------------------------------------------------------------------------------------------
# Metric group
# ---------------------------------------------------------------------------------------------

ROUGHNESS_METRICS = (
    MetricSpec("ri_reference_mm", "mm", "none", "Roughness Index of the reference surface"),
    MetricSpec("ri_test_mm", "mm", "none", "Roughness Index of the test surface"),
    MetricSpec("rr", "1", "lower", "Roughness Ratio |RI_test - RI_reference| / RI_reference"),
    MetricSpec("ard_mm", "mm", "lower", "Average Roughness Distance (mean radial gap between the surfaces)"),
)

#: RI_reference at or below this (voxels: times the smallest voxel size in mm in the default
#: convention) counts as 0: 3-D surface points come from a float32 iso-surface (about 1e-7
#: relative), so the RI of an exactly symmetric surface, e.g. a single voxel's, is of order 1e-8 voxel.
SMOOTH_TOLERANCE = 1e-6
#: Point-data array added to the test and reference surface polydata (default convention, 3-D).
ROUGHNESS_ARRAY = "Roughness_mm"


def _default_values(pair: StructurePair, window_mm: float | None):
    """RI of each side, ARD, unit and parameters in the default (mm) convention.

    The surfaces are the pair's shared ones (:func:`segmetrics.spatial.mesh.cached_surface`); in 3-D the
    per-vertex ``Roughness_mm`` goes on the polydata views of the existing surfaces,
    ``pair.extras["test_surface"]`` and ``pair.extras["reference_surface"]`` (also
    ``pair.cache["reference_surface"]``).
    """
    radius = DEFAULT_WINDOW_MM if window_mm is None else float(window_mm)
    surfaces = [mesh.cached_surface(pair, "reference"), mesh.cached_surface(pair, "test")]
    views = [None, None]  # polydata views of existing 3-D surfaces
    if pair.reference.ndim == 3 and surfaces[0] is not None:
        views[0] = pair.extras["reference_surface"] = mesh.cached_reference_surface(pair)
    if pair.reference.ndim == 3 and surfaces[1] is not None:
        views[1] = mesh.cached_test_surface(pair)
    ri = []
    for surface, view in zip(surfaces, views):
        if surface is None:
            ri.append(math.nan)
            continue
        value, per_point = roughness_index(surface, radius)
        ri.append(value)
        if view is not None:
            array = numpy_to_vtk(per_point, deep=True)
            array.SetName(ROUGHNESS_ARRAY)
            view.GetPointData().AddArray(array)
    ard = average_roughness_distance(*surfaces) if None not in surfaces else math.nan
    return ri, ard, "mm", {"convention": "default", "window_mm": radius}


def _paper_values(pair: StructurePair, window: float | None):
    """RI of each side, ARD, unit and parameters in the paper convention (index units)."""
    w = paper_window(pair.reference.shape) if window is None else int(window)
    ri = [paper_roughness_index(paper_surface(m), w) if m.any() else math.nan for m in (pair.reference, pair.test)]
    ard = paper_ard(pair.reference, pair.test) if pair.reference.any() and pair.test.any() else math.nan
    return ri, ard, "voxel", {"convention": "paper", "window_voxels": w}


def compute(pair: StructurePair, params: Parameters) -> list:
    """RI of reference and test, RR and ARD of one structure pair.

    ``params.roughness_convention`` is ``"default"`` (mm; ``params.roughness_window_mm`` is the
    window radius in mm, default :data:`DEFAULT_WINDOW_MM`) or ``"paper"`` (index units;
    the window is the tile side in voxels, default :func:`paper_window`). Values that
    cannot be computed are NaN with the pair's emptiness status; RR is NaN with status
    ``reference_smooth`` when RI_reference is 0 (up to :data:`SMOOTH_TOLERANCE` voxel).
    """
    if params.roughness_convention == "default":
        ri, ard, unit, used = _default_values(pair, params.roughness_window_mm)
    elif params.roughness_convention == "paper":
        ri, ard, unit, used = _paper_values(pair, params.roughness_window_mm)
    else:
        raise ValueError(f"roughness_convention must be 'default' or 'paper', got {params.roughness_convention!r}")
    pair_status = pair.emptiness
    ri_reference, ri_test = ri
    voxel = min(pair.spacing) if unit == "mm" else 1.0  # the tolerance is in voxels: RI of 1e-5 mm voxels is ~1e-6 mm
    smooth = pair_status == Status.OK and ri_reference <= SMOOTH_TOLERANCE * voxel
    rr_status = Status.REFERENCE_SMOOTH if smooth else pair_status
    rr = abs(ri_test - ri_reference) / ri_reference if rr_status == Status.OK else math.nan
    statuses = (
        Status.OK if pair.reference.any() else pair_status,
        Status.OK if pair.test.any() else pair_status,
        rr_status,
        pair_status,
    )
    units = (unit, unit, "1", unit)
    return [
        MetricValue(spec.name, float(value), spec_unit, status, dict(used))
        for spec, value, spec_unit, status in zip(ROUGHNESS_METRICS, (ri_reference, ri_test, rr, ard), units, statuses)
    ]


register_group(
    MetricGroup(
        "roughness",
        ROUGHNESS_METRICS,
        compute,
        "Roughness Index, Roughness Ratio and Average Roughness Distance (Rathour et al. 2021)",
        whole_image=lambda params: params.roughness_convention == "paper",  # depends on the image size
    )
)
