"""Sub-voxel surfaces of binary masks and exact point-to-surface distances, in millimetres.

This module is the one place that builds a structure's surface for measuring: the distance
group (``exact`` mode), the 3-D MSI and the roughness group all use :func:`smooth_surface`
through the pair cache (:func:`cached_surface`), so they measure on the same elements, and all
point-to-surface distances come from :func:`distances_to_surface`.

The surface
-----------
The mask is blurred by a Gaussian of :data:`SMOOTHING_SIGMA_VOXELS` voxels on every axis; the
blurred values are clamped so that every inside voxel centre stays at or above
0.5 + :data:`CLAMP_MARGIN` and every outside centre at or below 0.5 - :data:`CLAMP_MARGIN` (no
structure, however small, disappears, and the surface never crosses a voxel centre); the 0.5
level is extracted at the voxel spacing (VTK flying edges in 3-D, marching squares in 2-D).
Each vertex carries a third of the area of its triangles (half the length of its segments).
It converges to the continuous boundary as the voxels shrink.

Structures thinner than the blur would shrink onto their voxel centres, so inside centres whose
blurred value is below 0.5 count their thin axes: for a structure thin in ``d`` axes (sheet 1,
tube 2, speck 3; in 2-D line 1, speck 2; 0 for bulk) the blur at a centre falls as ``sigma**-d``, so
``d = log(b(sigma) / b(3 sigma)) / log 3`` (:data:`THIN_SCALE`). Such a centre's outside face
neighbours are raised (to at most 0.5 - margin) so that the surface passes
``reach = 0.5 * clip(d - 1, 0, 1)`` voxels from the centre along each axis: half a voxel for
tubes, specks and small blobs (a single voxel becomes the octahedron through its face centres,
a 2×2×2 block its marching-cubes surface), nothing for sheets, which stay thin slabs like
their 2-D contours (a one-slice volume keeps about twice its in-plane area).

Coordinate conventions
----------------------
Masks are NumPy arrays in array order ``(z, y, x)`` (3-D) or ``(row, col)`` (2-D) and every
``spacing`` is in mm **in the same array-axis order**.

* 3-D surfaces (:class:`Surface` and their polydata view) have points in **index-scaled ITK
  order** ``(x, y, z)`` = ``(col * sx, row * sy, slice * sz)`` in mm, i.e. the array axes
  reversed, with no origin and no direction applied. Distances between two surfaces of one grid
  are therefore physical distances. :func:`to_physical` applies the image origin and direction
  (ITK LPS mm) for display.
* 2-D surfaces (closed contours of :func:`smooth_surface`) and :func:`contours_2d` have points
  in **array order** ``(row * sy, col * sx)`` in mm.

Shared cache keys (see :func:`cached_surface`)
----------------------------------------------
``pair.cache[("surface", "reference")]``, ``pair.cache[("surface", "test")]``
    :class:`Surface` of each mask (``None`` for an empty mask), built once per pair.
``pair.cache[("closest", "reference")]``, ``pair.cache[("closest", "test")]``
    :class:`ClosestPoints` from each side's vertices to the other surface (:func:`cached_distances`).
``pair.extras["test_surface"]``
    ``vtkPolyData`` view of the test surface (3-D). Metric groups add point-data arrays to it
    (``SignedDistance_mm`` and ``MSI`` from the MSI group, ``Roughness_mm`` from roughness).
``pair.cache["reference_surface"]``
    ``vtkPolyData`` view of the reference surface, same convention.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from vtkmodules.vtkCommonCore import vtkPoints
from vtkmodules.vtkCommonDataModel import vtkCellArray, vtkImageData, vtkPolyData
from vtkmodules.vtkCommonTransforms import vtkTransform
from vtkmodules.vtkFiltersCore import vtkFlyingEdges3D, vtkReverseSense
from vtkmodules.vtkFiltersGeneral import vtkTransformPolyDataFilter
from scipy.spatial import cKDTree
from vtkmodules.util.numpy_support import numpy_to_vtk, numpy_to_vtkIdTypeArray, vtk_to_numpy

from . import _bundled_planar, _bundled_surface, accelerator
from ._bundled_surface import FACE, FEATURE_CORNERS, MAX_BUCKETS_PER_AXIS, MAX_COORDINATE_MM, VERTICES_PER_BUCKET
from ._threads import in_threads, in_threads_together, thread_pool
from .checkpoints import checkpoint
from .geometry import bounding_box, union_box

#: Gaussian blur (in voxels, every axis) of :func:`smooth_surface`.
SMOOTHING_SIGMA_VOXELS = 1.0
#: Inside voxel centres are clamped to at least 0.5 + this, outside centres to at most 0.5 - this.
CLAMP_MARGIN = 0.05
#: Sigma of the wide blur that counts a structure's thin axes, as a multiple of the surface blur's.
THIN_SCALE = 3.0
#: Most voxels in the pair's joint box for :func:`pair_surfaces` to mesh both masks at once (each
#: holds a float32 field of its box while meshed: 64 MiB at this size).
PARALLEL_BOX_VOXELS = 1 << 24
#: Most buckets per point of :func:`point_grid` (beyond a few thousand in all).
MAX_BUCKETS_PER_POINT = 8
#: Voxels per axis of the blocks that :func:`_gaussian_at` blurs one at a time.
BLUR_BLOCK = 32


class _built_once:
    """A :func:`functools.cached_property` without the lock that Python < 3.12 shares between
    all instances of a class, so that two surfaces' search structures build at once in two
    threads (:func:`prepare_searches`). Two threads asking one surface may both build it."""

    def __init__(self, method):
        self.method, self.__doc__ = method, method.__doc__

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        value = instance.__dict__[self.name] = self.method(instance)  # found there from now on
        return value


@dataclass(eq=False)
class Surface:
    """A closed surface as vertices with their area weights and the cells joining them.

    Attributes
    ----------
    points : ndarray, shape (n, ndim)
        Vertices in mm: 3-D in index-scaled ITK order ``(x, y, z)``, 2-D in array order
        ``(row, col)`` (see the module docstring).
    sizes : ndarray, shape (n,)
        Area (mm², 3-D) or length (mm, 2-D) attributed to each vertex: a third of its triangles'
        area or half of its segments' length; they sum to the surface area (contour length).
    cells : ndarray of int64, shape (m, ndim)
        Outward-oriented triangles (3-D) or segments (2-D) as vertex indices; every vertex
        belongs to at least one cell of non-zero size.
    origin : ndarray, shape (ndim,)
        Where the points' frame starts, in index-scaled mm (same axis order as the points):
        ``points + origin`` are index-scaled coordinates. Surfaces of one pair share a frame
        anchored at their joint bounding box, so that their distances do not change by a single
        rounding when both masks move.
    """

    points: np.ndarray
    sizes: np.ndarray
    cells: np.ndarray
    origin: np.ndarray = None

    def __post_init__(self):
        if self.origin is None:
            self.origin = np.zeros(self.points.shape[1])

    @classmethod
    def from_polydata(cls, polydata: vtkPolyData) -> "Surface":
        """Surface of a closed, outward-oriented triangle polydata (points kept in its frame)."""
        return cls(points(polydata), point_areas(polydata), triangles(polydata))

    @_built_once
    def tree(self) -> cKDTree:
        """KD-tree of the vertices (:func:`kd_tree`)."""
        return kd_tree(self.points)

    @_built_once
    def vertex_grid(self) -> tuple:
        """:func:`point_grid` of the vertices."""
        return point_grid(self.points, self.sizes)

    @_built_once
    def cells_by_vertex(self) -> tuple:
        """``(cells, first, count)``: the cells around vertex ``v`` are ``cells[first[v]:first[v] + count[v]]``."""
        return _surface_kernels().cells_by_vertex(self.cells, len(self.points))

    @cached_property
    def face_normals(self) -> np.ndarray:
        """Outward unit normals of the triangles, shape (m, 3)."""
        corners = self.points[self.cells]
        normals = np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])
        return normals / np.linalg.norm(normals, axis=1, keepdims=True)

    @cached_property
    def vertex_normals(self) -> np.ndarray:
        """Angle-weighted outward unit normals of the vertices, shape (n, 3) (the polydata's ``Normals``)."""
        corners = self.points[self.cells]  # (m, 3 corners, 3 components)
        to_next, to_previous = np.roll(corners, -1, axis=1) - corners, np.roll(corners, 1, axis=1) - corners
        angles = np.arctan2(np.linalg.norm(np.cross(to_next, to_previous), axis=2), _dot(to_next, to_previous))
        normals = np.stack(
            [np.bincount(self.cells.ravel(), (angles * self.face_normals[:, None, k]).ravel(), len(self.points)) for k in range(3)],
            axis=1,
        )
        return normals / np.linalg.norm(normals, axis=1, keepdims=True)

    @cached_property
    def edge_twins(self) -> np.ndarray:
        """Per triangle edge (ab, bc, ca), the other triangle sharing it (itself when there is none), shape (m, 3)."""
        n = len(self.points)
        start, end = self.cells.ravel(), np.roll(self.cells, -1, axis=1).ravel()
        keys, twin_keys = start * n + end, end * n + start
        order = np.argsort(keys)
        found = order[np.minimum(np.searchsorted(keys, twin_keys, sorter=order), len(keys) - 1)]
        return np.where(keys[found] == twin_keys, found // 3, np.arange(len(keys)) // 3).reshape(-1, 3)


def kd_tree(points) -> cKDTree:
    """KD-tree for nearest-neighbour queries of surface points: unbalanced (builds several times
    faster, queries as fast) with leaves of 64 points (queries from a surface a few mm away about
    20 % faster than scipy's default 16)."""
    return cKDTree(points, leafsize=64, balanced_tree=False, compact_nodes=False)


def smooth_surface(mask, spacing, sigma_voxels: float = SMOOTHING_SIGMA_VOXELS, origin=None, box=None) -> Surface | None:
    """The sub-voxel surface of a 2-D or 3-D mask (see the module docstring).

    Parameters
    ----------
    mask : ndarray
        ``(z, y, x)`` or ``(row, col)`` mask; non-zero is foreground. Structures touching the
        image border are closed (the crop is padded).
    spacing : sequence of float
        Voxel size in mm in **array-axis order**.
    sigma_voxels : float
        Gaussian blur in voxels; 0 gives the unblurred marching-cubes (squares) surface, with
        vertices half-way between inside and outside voxel centres.
    origin : sequence of int, optional
        Voxel index (array order) at which the points' frame starts (:attr:`Surface.origin`);
        default: voxel 0, i.e. index-scaled coordinates.
    box : tuple of slice, optional
        The mask's :func:`bounding_box` when already known (saves reading the mask).

    Returns
    -------
    Surface or None
        Points in mm (3-D: ``(x, y, z)``; 2-D: ``(row, col)``); ``None`` for an empty mask.
    """
    mask = np.asarray(mask)
    spacing = np.asarray(spacing, dtype=float)
    if mask.ndim not in (2, 3) or spacing.shape != (mask.ndim,) or np.any(spacing <= 0):
        raise ValueError(f"need a 2-D or 3-D mask with one positive spacing per axis, got shape {mask.shape} and spacing {spacing.tolist()}")
    box = bounding_box(mask) if box is None else box
    if box is None:
        return None
    pad = 2  # the clamped field is below 0.5 one voxel outside the mask: the surface closes inside
    padded = np.pad(np.asarray(mask[box], dtype=bool), pad)
    field = _surface_field(padded, sigma_voxels)
    origin = np.zeros(mask.ndim, dtype=int) if origin is None else np.asarray(origin)
    corner = (np.array([s.start - pad for s in box]) - origin) * spacing  # mm, array order
    if mask.ndim == 3:
        vertices, cells = _flying_edges(field, spacing)
        vertices += corner[::-1]
        spacing, origin = spacing[::-1], origin[::-1]  # in the points' axis order
        sizes = _triangle_areas(vertices, cells)
    else:
        vertices, cells = _marching_squares(field)
        vertices = vertices * spacing + corner
        sizes = np.linalg.norm(vertices[cells[:, 1]] - vertices[cells[:, 0]], axis=1)
    if not np.all(sizes > 0):  # cells of size 0 (rounding) go, and so do vertices left without a cell
        cells, sizes = cells[sizes > 0], sizes[sizes > 0]
    vertex_sizes = _surface_kernels().corner_shares(cells, sizes, len(vertices))
    used = vertex_sizes > 0
    if not used.all():
        vertices, vertex_sizes, cells = vertices[used], vertex_sizes[used], (np.cumsum(used) - 1)[cells]
    return Surface(vertices, vertex_sizes, cells, origin * spacing)


def _surface_field(padded: np.ndarray, sigma_voxels: float) -> np.ndarray:
    """The field whose 0.5 level is :func:`smooth_surface`'s surface, for a padded boolean mask
    (array order, one value per voxel centre; see the module docstring)."""
    dtype = np.float32 if padded.ndim == 3 else float  # 3-D: low memory; 2-D: symmetric shapes exact
    kernels = _surface_kernels()
    field = kernels.gaussian_blur(padded, sigma_voxels, dtype)
    # inside centres that the blur alone leaves outside the surface
    lost, blurred = kernels.clamp_field(field.ravel(), padded.ravel(), CLAMP_MARGIN)
    lost = np.unravel_index(lost, padded.shape)
    # thin in more than one axis (reach > 0) only where the wide blur is below a third of the blur;
    # its central window bounds it from below and clears most centres of bulk structures at once
    wide = THIN_SCALE * sigma_voxels
    maybe_thin = _central_gaussian_sum(padded, lost, wide) < blurred / THIN_SCALE * (1 + 1e-5)
    lost = tuple(index[maybe_thin] for index in lost)
    thin_axes = np.log(blurred[maybe_thin] / _gaussian_at(padded, lost, wide, dtype)) / np.log(THIN_SCALE)
    reach = 0.5 * np.clip(thin_axes - 1.0, 0.0, 1.0)  # voxels from the centre to the surface
    lifted = reach > 0
    centres = np.stack(lost, axis=1)[lifted]
    # between a centre at 0.5 + margin and a neighbour at this value the field is 0.5 `reach` voxels out;
    # it is at most 0.5 - margin, so inside centres (at least 0.5 + margin) keep their value
    lift = (0.5 + CLAMP_MARGIN - CLAMP_MARGIN / reach[lifted]).astype(dtype)
    for step in np.concatenate([np.eye(padded.ndim, dtype=int), -np.eye(padded.ndim, dtype=int)]):
        np.maximum.at(field, tuple((centres + step).T), lift)  # the centre's face neighbours
    return field


def _central_gaussian_sum(padded: np.ndarray, index: tuple, sigma_voxels: float, radius: int = 3) -> np.ndarray:
    """Lower bound of :func:`_gaussian_at` (same kernel) at the voxels ``index``: the kernel's
    weights summed over the mask's voxels within ``radius`` voxels on every axis only."""
    if len(index[0]) == 0:
        return np.zeros(0)
    kernel = _bundled_surface.gaussian_weights(sigma_voxels)
    halo = len(kernel) // 2
    central = kernel[halo - radius: halo + radius + 1]
    weights = central
    for _ in range(padded.ndim - 1):
        weights = np.multiply.outer(weights, central)
    windows = np.lib.stride_tricks.sliding_window_view(np.pad(padded, radius), weights.shape)
    index = np.stack(index, axis=1)
    sums = np.empty(len(index))
    for start in range(0, len(index), BLUR_BLOCK**3):  # blocks of at most 32768 windows
        block = index[start:start + BLUR_BLOCK**3]
        sums[start:start + len(block)] = np.tensordot(windows[tuple(block.T)], weights, axes=padded.ndim)
    return sums


def _gaussian_at(padded: np.ndarray, index: tuple, sigma_voxels: float, dtype) -> np.ndarray:
    """Gaussian blur (``sigma_voxels`` on every axis, zero outside) of a mask at the voxels
    ``index`` (tuple of index arrays, array order). It is computed on a box around each block of
    :data:`BLUR_BLOCK` voxels per axis holding some of them, so that time and memory follow the
    voxels asked for (a few on a large smooth structure), not the mask."""
    index = np.stack(index, axis=1)
    values = np.empty(len(index), dtype=dtype)
    if len(index) == 0:
        return values
    halo = len(_bundled_surface.gaussian_weights(sigma_voxels)) // 2  # the kernel's radius
    block = np.unique(index // BLUR_BLOCK, axis=0, return_inverse=True)[1].ravel()
    order = np.argsort(block, kind="stable")
    for members in np.split(order, np.cumsum(np.bincount(block))[:-1]):
        points = index[members]
        low = np.maximum(points.min(axis=0) - halo, 0)
        box = tuple(slice(start, stop) for start, stop in zip(low, points.max(axis=0) + halo + 1))
        blurred = _surface_kernels().gaussian_blur(padded[box], sigma_voxels, dtype)
        values[members] = blurred[tuple((points - low).T)]
    return values


def joint_bounding_box(*masks):
    """Smallest box (tuple of slices) holding the foreground of every mask, ``None`` if all are empty."""
    return union_box(list(map(bounding_box, masks)))


def pair_surfaces(reference, test, spacing, sigma_voxels: float = SMOOTHING_SIGMA_VOXELS, searchable: bool = False) -> tuple:
    """:func:`smooth_surface` of two masks of one grid in a shared frame, starting at their joint
    bounding box (so that distances between them do not change by a rounding when both masks
    move); ``(reference surface, test surface)``, ``None`` for an empty mask. The two masks are
    read in two threads (the scans and the blur release the GIL), and meshed in two threads too
    when their joint box is small (at most :data:`PARALLEL_BOX_VOXELS`), so that the second field
    held at once costs little memory. ``searchable``: then also build each surface's search
    structures (:func:`prepare_searches`) in its thread, while the other one may still be meshed
    (a large surface's are built later, so as not to be held while the other field is)."""
    masks, pool = [np.asarray(reference), np.asarray(test)], thread_pool()
    boxes = list(pool.map(bounding_box, masks))
    joint = union_box(boxes)
    if joint is None:
        return None, None
    origin = [s.start for s in joint]

    def build(mask, box, with_searches):
        surface = smooth_surface(mask, spacing, sigma_voxels, origin, box) if box is not None else None
        if with_searches and surface is not None:
            _build_searches(surface)
        return surface

    if np.prod([s.stop - s.start for s in joint]) <= PARALLEL_BOX_VOXELS:
        return tuple(pool.map(build, masks, boxes, [searchable] * 2))
    return tuple(map(build, masks, boxes, [False] * 2))


#: Per marching-squares case (bit 1 upper left, 2 upper right, 4 lower left, 8 lower right corner
#: inside), its segments as (from, to) edges of the square: 0 top, 1 bottom, 2 left, 3 right. They
#: run with the inside on their right (rows down, columns right); the two saddles (6, 9) keep
#: their inside corners apart (the foreground is 4-connected).
_SQUARE_SEGMENTS = {1: [(0, 2)], 2: [(3, 0)], 3: [(3, 2)], 4: [(2, 1)], 5: [(0, 1)], 6: [(3, 0), (2, 1)], 7: [(3, 1)],
                    8: [(1, 3)], 9: [(0, 2), (1, 3)], 10: [(1, 0)], 11: [(1, 2)], 12: [(2, 3)], 13: [(0, 3)], 14: [(2, 0)]}


def _marching_squares(field: np.ndarray) -> tuple:
    """The 0.5 level of a 2-D field that is nowhere exactly 0.5 (array order, one value per pixel
    centre): ``(vertices, segments)``, vertices in pixel units ``(row, col)`` where the level
    crosses a grid edge (linear interpolation from its first end: the points of scikit-image's
    ``find_contours``), segments as pairs of vertex indices (:data:`_SQUARE_SEGMENTS`)."""
    inside = field > 0.5
    across = inside[:, :-1] != inside[:, 1:]  # edges (r, c)-(r, c + 1)
    down = inside[:-1, :] != inside[1:, :]  # edges (r, c)-(r + 1, c)
    r, c = np.nonzero(across)
    start, end = field[r, c], field[r, c + 1]
    across_points = np.stack([r, c + (0.5 - start) / (end - start)], axis=1)
    r, c = np.nonzero(down)
    start, end = field[r, c], field[r + 1, c]
    down_points = np.stack([r + (0.5 - start) / (end - start), c], axis=1)
    across_index = np.full(across.shape, -1, dtype=np.int64)
    across_index[across] = np.arange(len(across_points))
    down_index = np.full(down.shape, -1, dtype=np.int64)
    down_index[down] = len(across_points) + np.arange(len(down_points))
    case = inside[:-1, :-1] + 2 * inside[:-1, 1:] + 4 * inside[1:, :-1] + 8 * inside[1:, 1:]
    edges = np.stack([across_index[:-1], across_index[1:], down_index[:, :-1], down_index[:, 1:]])  # top, bottom, left, right
    segments = [np.stack([edges[start][case == code], edges[end][case == code]], axis=1)
                for code, pairs in _SQUARE_SEGMENTS.items() for start, end in pairs]
    return np.concatenate([across_points, down_points]).astype(float), np.concatenate(segments)


def _flying_edges(field: np.ndarray, spacing: np.ndarray):
    """Vertices (mm, ``(x, y, z)`` from the field's corner) and outward triangles of the 0.5 level of a 3-D field."""
    image = vtkImageData()
    image.SetDimensions(field.shape[::-1])
    image.SetSpacing(spacing[::-1].tolist())
    image.GetPointData().SetScalars(numpy_to_vtk(field.ravel(), deep=False))  # field outlives the filter
    surface = vtkFlyingEdges3D()  # triangles come out outward-oriented for a field high inside
    surface.SetInputData(image)
    surface.SetValue(0, 0.5)
    surface.ComputeNormalsOff()
    surface.ComputeGradientsOff()
    surface.ComputeScalarsOff()
    surface.Update()
    image.GetPointData().SetScalars(None)  # VTK's pipeline outlives this call: let the field go now
    output = surface.GetOutput()
    if output.GetNumberOfPoints() == 0:
        return np.zeros((0, 3)), np.zeros((0, 3), dtype=np.int64)
    vertices = vtk_to_numpy(output.GetPoints().GetData()).astype(float)
    return vertices, vtk_to_numpy(output.GetPolys().GetConnectivityArray()).reshape(-1, 3).astype(np.int64)


def to_polydata(surface: Surface | None) -> vtkPolyData:
    """``vtkPolyData`` view of a 3-D surface: its points in index-scaled mm ``(x, y, z)``
    (``points + origin``), its triangles and angle-weighted outward point ``Normals``; an empty
    polydata for ``None``."""
    if surface is None:
        return vtkPolyData()
    polydata = mesh_from_numpy(surface.points + surface.origin, surface.cells)
    normals = numpy_to_vtk(surface.vertex_normals, deep=True)
    normals.SetName("Normals")
    polydata.GetPointData().SetNormals(normals)
    return polydata


def _surface_kernels():
    """The module running the surface kernels: the compiled :mod:`segmetrics.spatial._kernels` when numba
    runs, else :mod:`segmetrics.spatial._bundled_surface` (same functions and values, numpy and scipy
    only; see :func:`segmetrics.spatial.accelerator.kernels`)."""
    return accelerator.kernels(_bundled_surface)


def _planar_kernels():
    """The module running the 2-D contour kernels: the compiled :mod:`segmetrics.spatial._kernels` when
    numba runs, else their twins on numpy and scipy, :mod:`segmetrics.spatial._bundled_planar`."""
    return accelerator.kernels(_bundled_planar)


def compile_kernels() -> None:
    """Compile, or load from numba's disk cache, every kernel of :mod:`segmetrics.spatial._kernels`, on a
    tiny 3-D and 2-D mask; nothing without numba (:func:`segmetrics.spatial.accelerator.use_numba`).
    Batch runs call it before starting worker processes, which then only read the cache: numba's
    cache is not safe to write from several processes at once."""
    if not accelerator.use_numba():
        return
    from . import _kernels

    for shape in ((5, 6, 6), (6, 6)):
        mask = np.zeros(shape, bool)
        mask[(slice(1, -1),) * len(shape)] = True
        surface = smooth_surface(mask, (1.0,) * len(shape))
        _kernels.ascending_order(distances_to_surface(surface.points + 0.3, surface))  # as the distance group sorts them
        points = _three_components(surface.points)  # the walk alone runs for points beyond the grid search
        _kernels.closest_points(points + 0.3, np.zeros(len(points), dtype=np.int64), points, surface.cells,
                                *surface.cells_by_vertex, FEATURE_CORNERS[surface.cells.shape[1]])
    _kernels.compile_roughness_kernels()
    _kernels.compile_contour_kernels()


def kernel_cache_missing() -> bool:
    """Whether numba's disk cache (``__pycache__``, the user's cache folder or ``NUMBA_CACHE_DIR``)
    lacks a kernel of :mod:`segmetrics.spatial._kernels` or holds it for an older source, i.e. whether
    using them would compile (first use after install or after an update). Kernels inlined into
    others have no cache of their own and are not counted. False when numba does not run them."""
    if not accelerator.use_numba():
        return False
    from numba.core.registry import CPUDispatcher

    from . import _kernels

    kernels = [k for k in vars(_kernels).values() if isinstance(k, CPUDispatcher) and k.targetoptions.get("inline") != "always"]
    return any(not k._cache._cache_file._load_index() for k in kernels)  # {} when absent or stale


def surface_mesh(mask, spacing, sigma_voxels: float = SMOOTHING_SIGMA_VOXELS) -> vtkPolyData:
    """Closed, outward-oriented triangle surface of a 3-D mask as ``vtkPolyData``.

    Parameters
    ----------
    mask : ndarray of bool, shape (z, y, x)
        The structure, in array order.
    spacing : tuple of 3 float
        Voxel size in mm in **array-axis order** ``(sz, sy, sx)``.
    sigma_voxels : float
        Gaussian blur in voxels (:func:`smooth_surface`); 0 gives the marching-cubes staircase.

    Returns
    -------
    vtkPolyData
        :func:`to_polydata` of :func:`smooth_surface`: points in mm in index-scaled ITK order
        ``(x, y, z)`` = ``(col*sx, row*sy, slice*sz)`` (no origin/direction) and outward
        ``Normals``. Empty (no points) when the mask is empty.
    """
    if np.ndim(mask) != 3:
        raise ValueError(f"surface_mesh needs a 3-D mask, got shape {np.shape(mask)}")
    return to_polydata(smooth_surface(mask, spacing, sigma_voxels))


def point_grid(points: np.ndarray, sizes: np.ndarray) -> tuple:
    """Buckets of surface points for :func:`nearest_points`: ``(bucket size in mm, ...)`` of
    :func:`segmetrics.spatial._bundled_surface.vertex_grid`, sized to hold about
    :data:`~segmetrics.spatial._bundled_surface.VERTICES_PER_BUCKET` points on a flat patch of a surface whose
    points carry ``sizes`` (mm² each; mm for 2-D contours), and larger when the points are so
    spread out (a few specks far apart, points on a line or a plane) that there would be more
    than about :data:`MAX_BUCKETS_PER_POINT` buckets per point. Any points work: none (one
    empty bucket), a single one, all on a line or a plane, sizes of 0. ValueError for points
    that are not finite or beyond :data:`segmetrics.spatial._bundled_surface.MAX_COORDINATE_MM` (1e150 mm)."""
    surface_dimensions = points.shape[1] - 1  # sizes are areas (3-D) or lengths (2-D)
    points = _three_components(points)
    _require_within_reach(points, "point_grid: the points")
    mean_size = max(float(np.mean(sizes)), 0.0) if len(sizes) else 0.0
    bucket_mm = np.sqrt(VERTICES_PER_BUCKET) * mean_size ** (1.0 / surface_dimensions)
    if not bucket_mm < np.inf:
        bucket_mm = 0.0
    # at most `budget` buckets along the longest axis (and half the kernel's most), over the two
    # longest and over all three
    budget = MAX_BUCKETS_PER_POINT * len(points) + 4096
    extent = np.sort([np.ptp(axis) for axis in points.T] if len(points) else np.zeros(3))[::-1]  # mm, longest first
    # (axis by axis: NumPy's reductions over the short axis of (n, 3) rows are many times slower)
    bucket_mm = max(bucket_mm, extent[0] / min(budget, MAX_BUCKETS_PER_AXIS // 2),
                    *((math.prod(extent[:axes].tolist()) / budget) ** (1.0 / axes) for axes in (2, 3)))
    if bucket_mm == 0:  # one point, or all at one place, with sizes of 0
        bucket_mm = 1.0
    elif bucket_mm == np.inf:  # extents near 1e150 mm overflow the products: one bucket along the longest axis
        bucket_mm = float(extent[0])
    return (bucket_mm, *_surface_kernels().vertex_grid(points, bucket_mm))


def nearest_points(queries: np.ndarray, points: np.ndarray, grid: tuple) -> tuple:
    """``(distances in mm, indices)`` of the point of ``points`` nearest to each query (rows in
    the same frame, 2-D or 3-D): the bucket search of :func:`point_grid`'s ``grid`` in threads,
    and a KD-tree of the points for queries beyond its rings. Without points every distance is
    inf and every index -1. ValueError for queries that are not finite or beyond 1e150 mm, and
    for a grid of another number of points."""
    queries = np.asarray(queries, dtype=float)
    _require_within_reach(queries, "nearest_points: the query points")
    if len(grid[4]) != len(points):  # its vertex order: indices into the points it was built for
        raise ValueError(f"nearest_points: the grid holds {len(grid[4])} points, not these {len(points)}")
    if len(points) == 0:
        return np.full(len(queries), np.inf), np.full(len(queries), -1, dtype=np.int64)
    nearest, squared = in_threads(_surface_kernels().nearest_vertices, (_three_components(queries),), grid)
    far = np.flatnonzero(nearest < 0)
    if len(far):
        squared[far], nearest[far] = kd_tree(points).query(queries[far], workers=-1)
        squared[far] **= 2
    return np.sqrt(squared), nearest


def prepare_searches(*surfaces: Surface | None) -> None:
    """Build what :func:`distances_to_surface` searches on each surface (its nearest-vertex grid
    and cells per vertex), one surface per thread; ``None`` entries are skipped."""
    list(thread_pool().map(_build_searches, [s for s in surfaces if s is not None]))


def _build_searches(surface: Surface) -> None:
    """Build a surface's nearest-vertex grid and cells per vertex (kept on the surface)."""
    surface.vertex_grid, surface.cells_by_vertex  # noqa: B018 (built once, on first access)


def distances_to_surface(points, surface: Surface, signed: bool = False) -> np.ndarray:
    """Distance (mm) from each point to a surface: triangles in 3-D, segments in 2-D.

    Each point starts at its nearest surface vertex (:attr:`Surface.vertex_grid`; the KD-tree
    for points farther than a few buckets) and takes the exact closest point
    of the cells around it (point-to-triangle, point-to-segment). While that closest point lies
    on the rim of the searched cells (a vertex or edge touching none of the searched vertices),
    the search moves on to the cells around the rim feature's vertices. The walk ends at a local
    minimum of the distance over the surface: almost always the closest point; for about 1 % of
    points a few mm away it is a shallow local minimum of the faceted surface, or a closer part
    of the surface is not reached from the nearest vertex, and the distance is overestimated
    (by up to about 0.1–0.2 mm on the surfaces of :func:`smooth_surface`; see docs/METRICS.md).

    Parameters
    ----------
    points : ndarray, shape (k, ndim)
        Query points in mm, in the surface's frame.
    surface : Surface
        Closed surface (3-D triangles or 2-D segments).
    signed : bool
        3-D only: negative inside the surface (:func:`signed_distances`).

    Returns
    -------
    ndarray, shape (k,)
        Distances in mm (signed when asked); 0 for a point on a vertex; inf for every point when
        the surface has no points. ValueError for points that are not finite or beyond 1e150 mm.
    """
    closest = _closest_points([(points, surface)])[0]
    return signed_distances(closest, surface) if signed else closest.distances


def distances_both_ways(first: Surface, second: Surface) -> tuple:
    """Unsigned :func:`distances_to_surface` (mm) from the vertices of each surface to the other,
    ``(first → second, second → first)``; the chunks of both searches share the threads at once."""
    return tuple(closest.distances for closest in _closest_points([(first.points, second), (second.points, first)]))


@dataclass
class ClosestPoints:
    """Where :func:`distances_to_surface` found the closest surface point of each query point.

    Attributes
    ----------
    distances : ndarray, shape (k,)
        Unsigned distances (mm); inf for every point when the surface has no points.
    offsets : ndarray, shape (k, 3)
        Query point minus its closest point (mm, the surface's frame); None without surface points.
    cells : ndarray of int64, shape (k,)
        The cell holding the closest point (-1 for a point on a vertex of no cell).
    features : ndarray of int8, shape (k,)
        Which part of that cell holds it (:data:`segmetrics.spatial._bundled_surface.FACE` and the codes below it).
    """

    distances: np.ndarray
    offsets: np.ndarray = None
    cells: np.ndarray = None
    features: np.ndarray = None


def signed_distances(closest: ClosestPoints, surface: Surface) -> np.ndarray:
    """The distances of ``closest`` (:func:`distances_to_surface` on a 3-D ``surface``), negative
    inside the surface. The side is the sign of ``(p - q) · N`` with ``q`` the closest point and ``N``
    the pseudo-normal of the feature holding it: the face normal, the sum of the two face normals
    of an edge, or the angle-weighted normal of a vertex (Bærentzen and Aanæs, IEEE TVCG 11(3), 2005)."""
    if surface.cells.shape[1] != 3:
        raise ValueError("signed distances need a 3-D (triangle) surface")
    distances = closest.distances.copy()
    if closest.offsets is None:  # no surface points: inf everywhere, no side
        return distances
    walked = distances > 0  # a point on a vertex is on the surface: no side
    if np.any(closest.cells[walked] < 0):
        raise ValueError("signed distances need every vertex of the surface on a triangle")
    checkpoint()
    normals = _feature_normals(closest.cells[walked], closest.features[walked], surface)
    distances[walked] *= np.where(np.sum(closest.offsets[walked] * normals, axis=1) < 0, -1.0, 1.0)
    return distances


def _closest_points(requests: list) -> list:
    """:class:`ClosestPoints` of each ``(points, surface)`` request (:func:`distances_to_surface`);
    the chunks of all their searches share the threads at once."""
    found, searches = [None] * len(requests), []
    for index, (points, surface) in enumerate(requests):
        checkpoint()
        points = np.asarray(points, dtype=float)
        if len(surface.points) == 0:
            found[index] = ClosestPoints(np.full(len(points), np.inf))
            continue
        _require_within_reach(points, "distances_to_surface: the points")
        star = (_three_components(surface.points), surface.cells, *surface.cells_by_vertex,
                FEATURE_CORNERS[surface.cells.shape[1]])
        searches.append((index, _three_components(points), star, surface))
    walks = in_threads_together([(_surface_kernels().closest_points_near, (queries,), (*surface.vertex_grid, *star))
                                 for _, queries, star, surface in searches])
    for index, queries, star, surface in searches:
        checkpoint()
        found[index] = _walked(queries, star, surface, *walks.pop(0))
    return found


def _walked(queries, star, surface: Surface, offset, cell, feature, nearest) -> ClosestPoints:
    """The :class:`ClosestPoints` of what ``closest_points_near`` (:func:`_surface_kernels`) found."""
    far = np.flatnonzero(nearest < 0)  # no vertex within the grid search's reach: the KD-tree's nearest, then the walk
    if len(far):
        nearest = _bundled_surface.nearest_vertices(queries[far], *surface.vertex_grid)[0]  # ties as the grid's
        offset[far], cell[far], feature[far] = _surface_kernels().closest_points(queries[far], nearest, *star)
    squared = offset * offset
    distances = np.sqrt(squared[:, 0] + squared[:, 1] + squared[:, 2])  # np.sum(..., axis=1), many times faster
    return ClosestPoints(distances, offset, cell, feature)


#: The two sides of a structure pair, each with the other.
_OTHER_SIDE = {"reference": "test", "test": "reference"}


def cached_distances(pair, source: str) -> np.ndarray:
    """Unsigned :func:`distances_to_surface` (mm) from the vertices of a structure pair's
    ``source`` surface (``"reference"`` or ``"test"``, :func:`cached_surface`) to the other one,
    computed once per pair and kept (with their closest points, for :func:`cached_signed_distances`)
    in ``pair.cache[("closest", source)]``, so that the groups measuring on both surfaces
    (distance, 3-D MSI) share them. Both surfaces must exist."""
    return _cached_closest(pair, source).distances


def cached_signed_distances(pair, source: str) -> np.ndarray:
    """:func:`cached_distances` of ``source``, negative inside the other surface (:func:`signed_distances`):
    signs of the search already made, none made again; when no side is known yet, both are found at
    once (:func:`cached_distances_both_ways`)."""
    cached_distances_both_ways(pair)
    return signed_distances(_cached_closest(pair, source), cached_surface(pair, _OTHER_SIDE[source]))


def _cached_closest(pair, source: str) -> ClosestPoints:
    """The :class:`ClosestPoints` behind :func:`cached_distances`."""
    if source not in _OTHER_SIDE:
        raise ValueError(f"cached_distances: the source must be 'reference' or 'test', got {source!r}")
    key = ("closest", source)
    if key not in pair.cache:
        pair.cache[key] = _closest_points([(cached_surface(pair, source).points, cached_surface(pair, _OTHER_SIDE[source]))])[0]
    return pair.cache[key]


def cached_distances_both_ways(pair) -> tuple:
    """:func:`cached_distances` of both sides, ``(reference → test, test → reference)`` in mm; when
    neither is known yet both are computed together (the chunks of both searches share the threads)."""
    if all(("closest", side) not in pair.cache for side in _OTHER_SIDE):
        found = _closest_points([(cached_surface(pair, side).points, cached_surface(pair, other))
                                 for side, other in _OTHER_SIDE.items()])
        pair.cache.update({("closest", side): closest for side, closest in zip(_OTHER_SIDE, found)})
    return tuple(cached_distances(pair, side) for side in _OTHER_SIDE)


def _require_within_reach(points: np.ndarray, what: str) -> None:
    """ValueError (starting with ``what``) unless every coordinate (mm) is finite and within
    :data:`segmetrics.spatial._bundled_surface.MAX_COORDINATE_MM`, where the searches' squared distances stay finite."""
    if not np.all(np.abs(points) <= MAX_COORDINATE_MM):  # also NaN
        raise ValueError(f"{what} must be finite and within {MAX_COORDINATE_MM:g} mm")


def _three_components(points: np.ndarray) -> np.ndarray:
    """Contiguous float rows of 3 components (2-D points get a zero third one; 3-D float rows
    that are already contiguous are returned as they are)."""
    if points.shape[1] == 3:
        return np.ascontiguousarray(points, dtype=float)
    return np.pad(np.asarray(points, dtype=float), ((0, 0), (0, 1)))


def _dot(u, v):
    """Dot products along the last axis."""
    return np.einsum("...i,...i->...", u, v)


def _feature_normals(cells, feature, surface: Surface):
    """Pseudo-normal (see :func:`distances_to_surface`) of the closest feature (code of
    :data:`segmetrics.spatial._bundled_surface.FACE`) of each triangle, shape (k, 3)."""
    normals = surface.face_normals[cells]
    corner = feature < 3
    normals[corner] = surface.vertex_normals[surface.cells[cells[corner], feature[corner]]]
    edge = (feature >= 3) & (feature < FACE)
    side = np.array([0, 2, 1])[feature[edge] - 3]  # ab, ac (= ca), bc in the order of Surface.edge_twins
    normals[edge] += surface.face_normals[surface.edge_twins[cells[edge], side]]
    return normals


def points(polydata: vtkPolyData) -> np.ndarray:
    """Points of a polydata as an ``(N, 3)`` float array (a copy), in the polydata's frame."""
    if polydata.GetNumberOfPoints() == 0:
        return np.zeros((0, 3))
    return vtk_to_numpy(polydata.GetPoints().GetData()).astype(float)


def triangles(polydata: vtkPolyData) -> np.ndarray:
    """Triangle vertex indices as an ``(M, 3)`` int array (polydata of triangles only)."""
    polys = polydata.GetPolys()
    if polys is None or polys.GetNumberOfCells() == 0:
        return np.zeros((0, 3), dtype=np.int64)
    connectivity = vtk_to_numpy(polys.GetConnectivityArray())
    offsets = vtk_to_numpy(polys.GetOffsetsArray())
    if np.any(np.diff(offsets) != 3):
        raise ValueError("polydata has polygons that are not triangles")
    return connectivity.reshape(-1, 3).astype(np.int64)


def mesh_from_numpy(vertices, faces) -> vtkPolyData:
    """Build a triangle polydata from ``(N, 3)`` points and ``(M, 3)`` vertex indices."""
    vertices = np.ascontiguousarray(vertices, dtype=float)
    faces = np.ascontiguousarray(faces, dtype=np.int64)
    vtk_points = vtkPoints()
    vtk_points.SetData(numpy_to_vtk(vertices, deep=True))
    cells = vtkCellArray()
    offsets = np.arange(0, 3 * len(faces) + 1, 3, dtype=np.int64)
    cells.SetData(numpy_to_vtkIdTypeArray(offsets, deep=True), numpy_to_vtkIdTypeArray(faces.ravel(), deep=True))
    mesh = vtkPolyData()
    mesh.SetPoints(vtk_points)
    mesh.SetPolys(cells)
    return mesh


def triangle_areas(polydata: vtkPolyData) -> np.ndarray:
    """Area of each triangle (mm² when the points are in mm)."""
    return _triangle_areas(points(polydata), triangles(polydata))


def _triangle_areas(vertices: np.ndarray, cells: np.ndarray) -> np.ndarray:
    """Areas of triangles ``cells`` (m, 3) of ``vertices`` (n, 3)."""
    return _surface_kernels().triangle_areas(np.ascontiguousarray(vertices, dtype=float), np.ascontiguousarray(cells, dtype=np.int64))


def point_areas(polydata: vtkPolyData) -> np.ndarray:
    """Area attributed to each vertex: one third of the area of every adjacent triangle (mm²).

    The values sum to the total surface area; use them as weights for area-weighted means.
    """
    tri = triangles(polydata)
    per_corner = np.repeat(triangle_areas(polydata) / 3.0, 3)
    return np.bincount(tri.ravel(), weights=per_corner, minlength=polydata.GetNumberOfPoints())


def signed_volume(polydata: vtkPolyData) -> float:
    """Enclosed volume (mm³) by the divergence theorem; negative when triangles face inward."""
    xyz, tri = points(polydata), triangles(polydata)
    if len(tri) == 0:
        return 0.0
    a, b, c = xyz[tri[:, 0]], xyz[tri[:, 1]], xyz[tri[:, 2]]
    return float(np.einsum("ij,ij->", a, np.cross(b, c)) / 6.0)


def to_physical(polydata: vtkPolyData, label_image) -> vtkPolyData:
    """Copy of an index-scaled mesh placed in physical space (ITK LPS mm) for display.

    ``p_physical = origin + direction @ p`` where ``p`` is the index-scaled ``(x, y, z)`` point
    of a 3-D :class:`Surface` or :func:`surface_mesh`, and ``origin``/``direction`` come from ``label_image``
    (a :class:`~segmetrics.spatial.geometry.LabelImage`). Point data (e.g. ``MSI``) are kept; normals
    are rotated. A mirroring direction (negative determinant) would turn the triangles' winding
    inwards while the ``Normals`` stay outward (renderers then light the surface from inside, i.e.
    black), so the triangles are then re-wound: winding and normals both stay outward.
    """
    direction = np.asarray(label_image.direction, dtype=float).reshape(3, 3)
    matrix = np.eye(4)
    matrix[:3, :3] = direction
    matrix[:3, 3] = label_image.origin
    transform = vtkTransform()
    transform.SetMatrix(matrix.ravel().tolist())
    moved = vtkTransformPolyDataFilter()
    moved.SetInputData(polydata)
    moved.SetTransform(transform)
    moved.Update()
    if np.linalg.det(direction) >= 0:
        return moved.GetOutput()
    rewound = vtkReverseSense()
    rewound.SetInputData(moved.GetOutput())
    rewound.ReverseCellsOn()
    rewound.ReverseNormalsOff()  # the transform already mapped the normals correctly
    rewound.Update()
    return rewound.GetOutput()


def cached_surface(pair, which: str) -> Surface | None:
    """:func:`smooth_surface` of a :class:`~segmetrics.registry.StructurePair`'s ``"reference"``
    or ``"test"`` mask, built once and kept in ``pair.cache[("surface", which)]`` (``None`` for
    an empty mask). Both surfaces are built together (:func:`pair_surfaces`), with their search
    structures, and share a frame starting at the pair's joint bounding box (:attr:`Surface.origin`)."""
    key = ("surface", which)
    if key not in pair.cache:
        pair.cache[("surface", "reference")], pair.cache[("surface", "test")] = pair_surfaces(
            pair.reference, pair.test, pair.spacing, searchable=True)
    return pair.cache[key]


def cached_test_surface(pair) -> vtkPolyData:
    """Polydata view of the pair's test surface (:func:`cached_surface`), built once.

    Stored in ``pair.extras["test_surface"]`` (index-scaled mm) so that every metric group adds
    its point-data arrays to the same polydata.
    """
    if "test_surface" not in pair.extras:
        pair.extras["test_surface"] = to_polydata(cached_surface(pair, "test"))
    return pair.extras["test_surface"]


def cached_reference_surface(pair) -> vtkPolyData:
    """Polydata view of the reference surface, built once and kept in ``pair.cache["reference_surface"]``."""
    if "reference_surface" not in pair.cache:
        pair.cache["reference_surface"] = to_polydata(cached_surface(pair, "reference"))
    return pair.cache["reference_surface"]


@dataclass
class Contour:
    """A closed 2-D contour in mm, array order ``(row*sy, col*sx)``.

    ``points[i]`` is joined to ``points[i + 1]`` and the last point to the first;
    ``lengths[i]`` is the length (mm) of the segment starting at ``points[i]``.
    """

    points: np.ndarray
    lengths: np.ndarray

    @property
    def length(self) -> float:
        """Perimeter in mm."""
        return float(self.lengths.sum())

    @property
    def point_weights(self) -> np.ndarray:
        """Length attributed to each point: half of each of its two segments (mm)."""
        return 0.5 * (self.lengths + np.concatenate([self.lengths[-1:], self.lengths[:-1]]))  # np.roll(lengths, 1)


def contours_2d(mask2d, spacing2d, max_segment_mm: float | None = None) -> list:
    """Closed sub-pixel boundaries of a 2-D boolean mask (marching squares at level 0.5).

    The mask is padded by one pixel so every boundary closes; holes give their own contours.
    Foreground is 4-connected (pixels touching only diagonally are separate objects).

    Parameters
    ----------
    mask2d : ndarray of bool, shape (row, col)
    spacing2d : tuple of 2 float
        Pixel size in mm in **array-axis order** ``(row spacing, column spacing)``.
    max_segment_mm : float, optional
        When given, segments are subdivided so that none is longer than this (mm).

    Returns
    -------
    list of Contour
        Points in mm, array order ``(row*sy, col*sx)``; empty list for an empty mask.
    """
    mask2d = np.asarray(mask2d, dtype=bool)
    if not mask2d.any():
        return []
    # the boundaries scikit-image's find_contours gives, from one pass (same points and order);
    # origin (1, 1) of label 1 undoes the pad
    points, lengths, first, _ = _planar_kernels().label_contours(
        np.pad(mask2d, 1).astype(np.int32), np.ones((2, 2), np.int64), np.asarray(spacing2d, dtype=float), max_segment_mm or -1.0)
    return [Contour(points[start:stop], lengths[start:stop]) for start, stop in zip(first[:-1], first[1:])]


def contour_segments_2d(mask2d, spacing2d, corner=(0, 0)) -> np.ndarray:
    """The segments of :func:`contours_2d`'s boundaries (not subdivided), ``(N, 2, 2)`` (start, end)
    in mm, array order, in the boundaries' order, each boundary's last point joined to its first.

    ``mask2d`` is a crop of a larger slice whose first pixel is pixel ``corner`` (row, col) of the
    slice: the points are those of :func:`contours_2d` of the whole slice, the same numbers. Two
    segments never run along one another (each lies in its own cell of 2 × 2 pixels)."""
    mask2d = np.asarray(mask2d, dtype=bool)
    if not mask2d.any():
        return np.empty((0, 2, 2))
    padded = np.zeros((mask2d.shape[0] + 2, mask2d.shape[1] + 2), np.int32)
    padded[1:-1, 1:-1] = mask2d
    origin = np.ones((2, 2), np.int64) - np.asarray(corner, dtype=np.int64)  # (pixels) undoes the pad and the crop
    points, _lengths, first, _labels = _planar_kernels().label_contours(padded, origin, np.asarray(spacing2d, dtype=float), -1.0)
    following = np.arange(1, len(points) + 1)
    following[first[1:] - 1] = first[:-1]
    return np.stack([points, points[following]], axis=1)


def closed_contour(points, max_segment_mm: float | None = None) -> Contour:
    """A :class:`Contour` of a closed polyline ``(N, 2)`` (mm; the last point joins the first),
    its segments subdivided to at most ``max_segment_mm`` when given."""
    xy = np.asarray(points, dtype=float)
    if max_segment_mm is not None:
        xy = _subdivide(xy, max_segment_mm)
    return Contour(xy, np.linalg.norm(_following(xy) - xy, axis=1))


def _following(closed: np.ndarray) -> np.ndarray:
    """Each point's successor along a closed polyline (``np.roll(closed, -1, axis=0)``, faster)."""
    return np.concatenate([closed[1:], closed[:1]])


def _subdivide(closed: np.ndarray, max_length: float) -> np.ndarray:
    """Insert evenly spaced points so no segment of a closed polyline exceeds ``max_length``."""
    following = _following(closed)
    pieces = np.maximum(1, np.ceil(np.linalg.norm(following - closed, axis=1) / max_length).astype(int))
    start = np.repeat(np.arange(len(closed)), pieces)
    fraction = np.arange(pieces.sum()) - np.repeat(np.cumsum(pieces) - pieces, pieces)
    fraction = fraction / np.repeat(pieces, pieces)
    return closed[start] + fraction[:, None] * (following[start] - closed[start])


if kernel_cache_missing():  # first use: compile every kernel now, once, and say why it takes a while
    print("segmetrics: compiling kernels, once (10-30 s; later runs load them from numba's cache)", file=sys.stderr, flush=True)
    compile_kernels()
