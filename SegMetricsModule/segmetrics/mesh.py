"""Surface meshes (3-D) and closed contours (2-D) of binary masks, in millimetres.

Coordinate conventions
----------------------
Masks are NumPy arrays in array order ``(z, y, x)`` (3-D) or ``(row, col)`` (2-D) and every
``spacing`` is in mm **in the same array-axis order**.

* :func:`surface_mesh` returns points in **index-scaled ITK order** ``(x, y, z)`` =
  ``(col * sx, row * sy, slice * sz)`` in mm, i.e. the array axes reversed, with no origin and no
  direction applied. Distances between two meshes of one grid are therefore physical distances.
  :func:`to_physical` applies the image origin and direction (ITK LPS mm) for display.
* :func:`contours_2d` returns points in **array order** ``(row * sy, col * sx)`` in mm.

Shared cache keys (see :func:`cached_test_surface`)
---------------------------------------------------
``pair.extras["test_surface"]``
    ``vtkPolyData`` of the test mask (index-scaled mm). Metric groups add point-data arrays to it
    (``SignedDistance_mm`` and ``MSI`` from the MSI group, ``Roughness_mm`` from roughness).
``pair.cache["reference_surface"]``
    ``vtkPolyData`` of the reference mask, same convention.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import vtk
from skimage import measure
from vtk.util.numpy_support import numpy_to_vtk, numpy_to_vtkIdTypeArray, vtk_to_numpy

#: Default number of windowed-sinc smoothing iterations of :func:`surface_mesh`.
DEFAULT_SMOOTHING_ITERATIONS = 20
#: Default windowed-sinc pass band (lower = smoother); 20 iterations at 0.01 is Slicer's default
#: closed-surface smoothing (factor 0.5): sphere area within 1 % from a radius of 10 voxels.
DEFAULT_PASS_BAND = 0.01


def surface_mesh(
    mask,
    spacing,
    smoothing_iterations: int = DEFAULT_SMOOTHING_ITERATIONS,
    pass_band: float = DEFAULT_PASS_BAND,
) -> vtk.vtkPolyData:
    """Closed triangle surface of a 3-D boolean mask.

    The mask is padded by one voxel so that structures touching the image border are closed.
    The surface is the discrete flying-edges iso-surface (vertices half-way between inside and
    outside voxel centres), optionally smoothed by a windowed-sinc filter (volume-preserving,
    vertices stay within about half a voxel), with triangles oriented outward and point normals.

    Parameters
    ----------
    mask : ndarray of bool, shape (z, y, x)
        The structure, in array order.
    spacing : tuple of 3 float
        Voxel size in mm in **array-axis order** ``(sz, sy, sx)``.
    smoothing_iterations : int
        Windowed-sinc iterations; 0 disables smoothing (staircase surface).
    pass_band : float
        Windowed-sinc pass band in (0, 2); smaller smooths more.

    Returns
    -------
    vtkPolyData
        Triangles with points in mm in index-scaled ITK order ``(x, y, z)`` =
        ``(col*sx, row*sy, slice*sz)`` (no origin/direction) and outward ``Normals``.
        Empty (no points) when the mask is empty.
    """
    mask = np.asarray(mask, dtype=bool)
    if mask.ndim != 3:
        raise ValueError(f"surface_mesh needs a 3-D mask, got shape {mask.shape}")
    if not mask.any():
        return vtk.vtkPolyData()
    padded = np.pad(mask, 1).astype(np.uint8)
    spacing_xyz = [float(s) for s in spacing[::-1]]
    image = vtk.vtkImageData()
    image.SetDimensions(padded.shape[::-1])
    image.SetSpacing(spacing_xyz)
    image.SetOrigin([-s for s in spacing_xyz])  # undo the one-voxel pad
    image.GetPointData().SetScalars(numpy_to_vtk(padded.ravel(), deep=True))

    surface = vtk.vtkDiscreteFlyingEdges3D()
    surface.SetInputData(image)
    surface.SetValue(0, 1)
    surface.ComputeNormalsOff()
    surface.ComputeGradientsOff()
    surface.ComputeScalarsOff()
    output = surface.GetOutputPort()
    if smoothing_iterations > 0:
        smoother = vtk.vtkWindowedSincPolyDataFilter()
        smoother.SetInputConnection(output)
        smoother.SetNumberOfIterations(int(smoothing_iterations))
        smoother.SetPassBand(float(pass_band))
        smoother.NormalizeCoordinatesOn()
        smoother.BoundarySmoothingOff()
        smoother.FeatureEdgeSmoothingOff()
        smoother.NonManifoldSmoothingOn()
        output = smoother.GetOutputPort()
    normals = vtk.vtkPolyDataNormals()
    normals.SetInputConnection(output)
    normals.SplittingOff()
    normals.ConsistencyOff()  # flying edges already orients every triangle the same way
    normals.ComputePointNormalsOn()
    normals.ComputeCellNormalsOff()
    normals.Update()
    mesh = normals.GetOutput()
    if signed_volume(mesh) < 0:
        reverse = vtk.vtkReverseSense()
        reverse.SetInputData(mesh)
        reverse.ReverseCellsOn()
        reverse.ReverseNormalsOn()
        reverse.Update()
        mesh = reverse.GetOutput()
    return mesh


def points(polydata: vtk.vtkPolyData) -> np.ndarray:
    """Points of a polydata as an ``(N, 3)`` float array (a copy), in the polydata's frame."""
    if polydata.GetNumberOfPoints() == 0:
        return np.zeros((0, 3))
    return vtk_to_numpy(polydata.GetPoints().GetData()).astype(float)


def triangles(polydata: vtk.vtkPolyData) -> np.ndarray:
    """Triangle vertex indices as an ``(M, 3)`` int array (polydata of triangles only)."""
    polys = polydata.GetPolys()
    if polys is None or polys.GetNumberOfCells() == 0:
        return np.zeros((0, 3), dtype=np.int64)
    connectivity = vtk_to_numpy(polys.GetConnectivityArray())
    offsets = vtk_to_numpy(polys.GetOffsetsArray())
    if np.any(np.diff(offsets) != 3):
        raise ValueError("polydata has polygons that are not triangles")
    return connectivity.reshape(-1, 3).astype(np.int64)


def mesh_from_numpy(vertices, faces) -> vtk.vtkPolyData:
    """Build a triangle polydata from ``(N, 3)`` points and ``(M, 3)`` vertex indices."""
    vertices = np.ascontiguousarray(vertices, dtype=float)
    faces = np.ascontiguousarray(faces, dtype=np.int64)
    vtk_points = vtk.vtkPoints()
    vtk_points.SetData(numpy_to_vtk(vertices, deep=True))
    cells = vtk.vtkCellArray()
    offsets = np.arange(0, 3 * len(faces) + 1, 3, dtype=np.int64)
    cells.SetData(numpy_to_vtkIdTypeArray(offsets, deep=True), numpy_to_vtkIdTypeArray(faces.ravel(), deep=True))
    mesh = vtk.vtkPolyData()
    mesh.SetPoints(vtk_points)
    mesh.SetPolys(cells)
    return mesh


def triangle_areas(polydata: vtk.vtkPolyData) -> np.ndarray:
    """Area of each triangle (mm² when the points are in mm)."""
    xyz, tri = points(polydata), triangles(polydata)
    edges1 = xyz[tri[:, 1]] - xyz[tri[:, 0]]
    edges2 = xyz[tri[:, 2]] - xyz[tri[:, 0]]
    return 0.5 * np.linalg.norm(np.cross(edges1, edges2), axis=1)


def point_areas(polydata: vtk.vtkPolyData) -> np.ndarray:
    """Area attributed to each vertex: one third of the area of every adjacent triangle (mm²).

    The values sum to the total surface area; use them as weights for area-weighted means.
    """
    tri = triangles(polydata)
    per_corner = np.repeat(triangle_areas(polydata) / 3.0, 3)
    return np.bincount(tri.ravel(), weights=per_corner, minlength=polydata.GetNumberOfPoints())


def signed_volume(polydata: vtk.vtkPolyData) -> float:
    """Enclosed volume (mm³) by the divergence theorem; negative when triangles face inward."""
    xyz, tri = points(polydata), triangles(polydata)
    if len(tri) == 0:
        return 0.0
    a, b, c = xyz[tri[:, 0]], xyz[tri[:, 1]], xyz[tri[:, 2]]
    return float(np.einsum("ij,ij->", a, np.cross(b, c)) / 6.0)


def to_physical(polydata: vtk.vtkPolyData, label_image) -> vtk.vtkPolyData:
    """Copy of an index-scaled mesh placed in physical space (ITK LPS mm) for display.

    ``p_physical = origin + direction @ p`` where ``p`` is the index-scaled ``(x, y, z)`` point
    produced by :func:`surface_mesh`, and ``origin``/``direction`` come from ``label_image``
    (a :class:`~segmetrics.geometry.LabelImage`). Point data (e.g. ``MSI``) are kept; normals
    are rotated.
    """
    direction = np.asarray(label_image.direction, dtype=float).reshape(3, 3)
    matrix = np.eye(4)
    matrix[:3, :3] = direction
    matrix[:3, 3] = label_image.origin
    transform = vtk.vtkTransform()
    transform.SetMatrix(matrix.ravel().tolist())
    moved = vtk.vtkTransformPolyDataFilter()
    moved.SetInputData(polydata)
    moved.SetTransform(transform)
    moved.Update()
    return moved.GetOutput()


def cached_test_surface(pair) -> vtk.vtkPolyData:
    """The test mask's surface of a :class:`~segmetrics.registry.StructurePair`, built once.

    Stored in ``pair.extras["test_surface"]`` (index-scaled mm, default smoothing) so that every
    metric group adds its point-data arrays to the same polydata.
    """
    if "test_surface" not in pair.extras:
        pair.extras["test_surface"] = surface_mesh(pair.test, pair.spacing)
    return pair.extras["test_surface"]


def cached_reference_surface(pair) -> vtk.vtkPolyData:
    """The reference mask's surface, built once and kept in ``pair.cache["reference_surface"]``."""
    if "reference_surface" not in pair.cache:
        pair.cache["reference_surface"] = surface_mesh(pair.reference, pair.spacing)
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
        return 0.5 * (self.lengths + np.roll(self.lengths, 1))


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
    scale = np.asarray(spacing2d, dtype=float)
    result = []
    for raw in measure.find_contours(np.pad(mask2d, 1).astype(np.uint8), 0.5):
        xy = (raw[:-1] - 1.0) * scale  # drop the repeated closing point, undo the pad
        if max_segment_mm is not None:
            xy = _subdivide(xy, max_segment_mm)
        lengths = np.linalg.norm(np.roll(xy, -1, axis=0) - xy, axis=1)
        result.append(Contour(xy, lengths))
    return result


def _subdivide(closed: np.ndarray, max_length: float) -> np.ndarray:
    """Insert evenly spaced points so no segment of a closed polyline exceeds ``max_length``."""
    following = np.roll(closed, -1, axis=0)
    pieces = np.maximum(1, np.ceil(np.linalg.norm(following - closed, axis=1) / max_length).astype(int))
    start = np.repeat(np.arange(len(closed)), pieces)
    fraction = np.arange(pieces.sum()) - np.repeat(np.cumsum(pieces) - pieces, pieces)
    fraction = fraction / np.repeat(pieces, pieces)
    return closed[start] + fraction[:, None] * (following[start] - closed[start])
