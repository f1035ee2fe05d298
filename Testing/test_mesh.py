"""Surface meshes and 2-D contours against analytic geometry."""
import multiprocessing

import numpy as np
import pytest
import vtk
from scipy import ndimage
from scipy.spatial import cKDTree
from vtk.util.numpy_support import numpy_to_vtk, vtk_to_numpy

from segmetrics.spatial import _bundled_surface, accelerator, mesh
from segmetrics.spatial.geometry import LabelImage


def ball(radius_mm, spacing, margin=3):
    """Boolean ball of radius ``radius_mm`` centred in its grid; returns (mask, centre index)."""
    shape = [int(np.ceil(2 * radius_mm / s)) + 2 * margin for s in spacing]
    centre = [(n - 1) / 2 for n in shape]
    grid = np.ogrid[tuple(slice(0, n) for n in shape)]
    squared = sum(((g - c) * s) ** 2 for g, c, s in zip(grid, centre, spacing))
    return squared <= radius_mm**2, np.array(centre)


def boundary_edge_count(polydata):
    edges = vtk.vtkFeatureEdges()
    edges.SetInputData(polydata)
    edges.BoundaryEdgesOn()
    edges.NonManifoldEdgesOff()
    edges.FeatureEdgesOff()
    edges.ManifoldEdgesOff()
    edges.Update()
    return edges.GetOutput().GetNumberOfLines()


def test_sphere_area_volume_and_axis_order():
    radius, spacing = 20.0, (1.2, 0.8, 0.8)  # (z, y, x) mm: anisotropic to catch axis swaps
    mask, centre = ball(radius, spacing)
    surface = mesh.surface_mesh(mask, spacing)
    area = mesh.point_areas(surface).sum()
    volume = mesh.signed_volume(surface)
    assert area == pytest.approx(4 * np.pi * radius**2, rel=0.01)
    assert volume == pytest.approx(4 / 3 * np.pi * radius**3, rel=0.01)
    xyz = mesh.points(surface)
    expected_centre = (centre * spacing)[::-1]  # index-scaled (x, y, z)
    np.testing.assert_allclose(xyz.mean(axis=0), expected_centre, atol=0.05)
    np.testing.assert_allclose(np.linalg.norm(xyz - expected_centre, axis=1), radius, atol=0.6 * max(spacing))
    normals = vtk_to_numpy(surface.GetPointData().GetNormals())
    assert np.all(np.einsum("ij,ij->i", normals, xyz - expected_centre) > 0)  # outward
    assert boundary_edge_count(surface) == 0


def test_border_touching_mask_is_closed():
    mask = np.zeros((6, 7, 8), dtype=bool)
    mask[:, :4, 2:] = True  # touches four faces of the image
    surface = mesh.surface_mesh(mask, (1.0, 1.0, 1.0), sigma_voxels=0)
    assert boundary_edge_count(surface) == 0
    assert mesh.signed_volume(surface) > 0
    xyz = mesh.points(surface)
    # unsmoothed vertices lie half-way between inside and outside voxel centres
    np.testing.assert_allclose(xyz.min(axis=0), [1.5, -0.5, -0.5])
    np.testing.assert_allclose(xyz.max(axis=0), [7.5, 3.5, 5.5])


def test_empty_mask_gives_empty_mesh():
    surface = mesh.surface_mesh(np.zeros((4, 4, 4), bool), (1, 1, 1))
    assert surface.GetNumberOfPoints() == 0
    assert mesh.point_areas(surface).size == 0


def test_point_areas_of_a_unit_square():
    square = mesh.mesh_from_numpy([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]], [[0, 1, 2], [0, 2, 3]])
    np.testing.assert_allclose(mesh.point_areas(square), [1 / 3, 1 / 6, 1 / 3, 1 / 6])


def test_to_physical_matches_index_to_physical():
    mask, centre = ball(6.0, (2.0, 1.0, 0.5))
    direction = (0, 0, 1, -1, 0, 0, 0, 1, 0)  # a rotation: catches transposed matrices
    image = LabelImage(mask.astype(np.uint8), (2.0, 1.0, 0.5), origin=(10.0, -20.0, 5.0), direction=direction)
    physical = mesh.to_physical(mesh.surface_mesh(mask, image.spacing), image)
    np.testing.assert_allclose(mesh.points(physical).mean(axis=0), image.index_to_physical(centre), atol=0.05)


def test_disc_contour_area_and_centre():
    radius, spacing = 15.0, (0.5, 0.25)
    mask, centre = ball(radius, spacing)
    contours = mesh.contours_2d(mask, spacing)
    assert len(contours) == 1
    p = contours[0].points
    area = 0.5 * abs(np.sum(p[:, 0] * np.roll(p[:, 1], -1) - np.roll(p[:, 0], -1) * p[:, 1]))
    assert area == pytest.approx(np.pi * radius**2, rel=0.01)
    np.testing.assert_allclose(p.mean(axis=0), centre * spacing, atol=0.01)
    # marching squares on a binary mask: chamfered staircase, perimeter at most ~10 % long
    assert 2 * np.pi * radius <= contours[0].length <= 1.1 * 2 * np.pi * radius
    assert contours[0].point_weights.sum() == pytest.approx(contours[0].length)


def test_contours_with_hole_border_and_subdivision():
    mask = np.zeros((20, 20), dtype=bool)
    mask[0:12, 0:12] = True  # touches the border
    mask[4:8, 4:8] = False  # a hole
    contours = mesh.contours_2d(mask, (1.0, 1.0))
    assert len(contours) == 2
    assert sorted(c.length for c in contours) == pytest.approx([4 * 4 - 4 * (2 - np.sqrt(2)) / 2, 4 * 12 - 4 * (2 - np.sqrt(2)) / 2])
    fine = mesh.contours_2d(mask, (1.0, 1.0), max_segment_mm=0.1)
    assert max(c.lengths.max() for c in fine) <= 0.1 + 1e-12
    assert sorted(c.length for c in fine) == pytest.approx(sorted(c.length for c in contours))


def notched_ball(spacing):
    """A ball with a box cut out of one corner: convex and concave edges and corners."""
    mask, _ = ball(9.0, spacing)
    mask[: mask.shape[0] // 2, :, : mask.shape[2] // 3] = False
    return mask


def test_distances_to_surface_against_vtk_and_the_mask():
    spacing = (1.2, 0.8, 0.8)
    mask = notched_ball(spacing)
    surface = mesh.smooth_surface(mask, spacing)
    rng = np.random.default_rng(0)
    points = surface.points[rng.integers(len(surface.points), size=4000)] + rng.normal(scale=1.5, size=(4000, 3))
    got = mesh.distances_to_surface(points, surface, signed=True)
    assert np.array_equal(np.abs(got), mesh.distances_to_surface(points, surface))
    implicit = vtk.vtkImplicitPolyDataDistance()
    implicit.SetInput(mesh.to_polydata(surface))
    values = vtk.vtkDoubleArray()
    implicit.FunctionValue(numpy_to_vtk(points, deep=True), values)
    exact = np.abs(vtk_to_numpy(values))
    assert np.all(np.abs(got) >= exact - 1e-9)  # a distance to part of the surface
    assert np.mean(np.abs(got) - exact < 1e-9) > 0.98  # which almost always holds the closest point
    # a point farther than half a voxel diagonal from the surface is on its nearest voxel centre's side
    index = np.round(points[:, ::-1] / spacing).astype(int)
    far = (exact > 0.5 * np.linalg.norm(spacing)) & np.all((index >= 0) & (index < mask.shape), axis=1)
    inside = mask[tuple(index[far].T)]
    assert far.sum() > 500 and inside.any() and not inside.all()
    np.testing.assert_array_equal(got[far] < 0, inside)


def test_points_on_vertices_and_segments_in_2d():
    spacing = (0.7, 0.5)
    disc, centre = ball(6.0, spacing)
    surface = mesh.smooth_surface(disc, spacing)
    assert np.all(mesh.distances_to_surface(surface.points, surface) == 0)
    np.testing.assert_allclose(surface.sizes.sum(), 2 * np.pi * 6.0, rtol=0.01)
    # points on the line through the centre and a vertex, 1 mm outside: within 1 mm of the contour,
    # and at least the distance to the circle of the contour's largest radius
    radial = surface.points - centre * spacing
    radius = np.linalg.norm(radial, axis=1)
    got = mesh.distances_to_surface(surface.points + radial / radius[:, None], surface)
    assert np.all(got <= 1.0 + 1e-12) and np.all(got >= radius + 1.0 - radius.max() - 1e-12)


def marching_cubes_area(mask, spacing):
    """Area (mm²) of the marching-cubes surface of a binary mask (scikit-image), closed by padding."""
    measure = pytest.importorskip("skimage.measure")
    vertices, faces, _, _ = measure.marching_cubes(np.pad(mask, 1).astype(float), 0.5, spacing=spacing)
    return measure.mesh_surface_area(vertices, faces)


@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 2, 2), (1, 2, 3)])
def test_specks_get_their_marching_cubes_surface(shape):
    """Structures thin in every axis keep a half-voxel surface: an isolated voxel becomes the
    octahedron through its face centres, small blocks their marching-cubes surface."""
    spacing = (2.0, 1.0, 0.5)
    mask = np.zeros((7, 8, 9), dtype=bool)
    mask[2:2 + shape[0], 3:3 + shape[1], 3:3 + shape[2]] = True
    polydata = mesh.surface_mesh(mask, spacing)
    assert boundary_edge_count(polydata) == 0
    assert mesh.point_areas(polydata).sum() == pytest.approx(marching_cubes_area(mask, spacing), rel=1e-5)
    if shape == (1, 1, 1):
        a, b, c = np.array(spacing) / 2
        assert mesh.point_areas(polydata).sum() == pytest.approx(4 * np.sqrt((a * b) ** 2 + (b * c) ** 2 + (c * a) ** 2), rel=1e-5)
        assert mesh.signed_volume(polydata) == pytest.approx(4 / 3 * a * b * c, rel=1e-5)


def test_thin_tube_and_2d_speck_reach_about_half_a_voxel():
    spacing = (1.5, 1.0, 0.7)
    tube = np.zeros((5, 5, 40), dtype=bool)
    tube[2, 2, 5:35] = True  # one voxel thick along x
    surface = mesh.smooth_surface(tube, spacing)
    middle = np.abs(surface.points[:, 0] - 20 * spacing[2]) < 5 * spacing[2]  # away from the ends
    offsets = surface.points[middle][:, 1:] - np.array([2 * spacing[1], 2 * spacing[0]])  # (y, z) from the centre line
    # cross-section: the diamond through the half-voxel points of the two thin axes
    np.testing.assert_allclose(np.abs(offsets / (np.array(spacing[1::-1]) / 2)).sum(axis=1), 1.0, rtol=0.01)
    speck = np.zeros((5, 5), dtype=bool)
    speck[2, 2] = True
    contour = mesh.smooth_surface(speck, (1.5, 0.7))
    np.testing.assert_allclose(np.abs((contour.points - [3.0, 1.4]) / [0.75, 0.35]).sum(axis=1), 1.0, rtol=0.01)


def test_blockwise_gaussian_equals_the_full_blur():
    rng = np.random.default_rng(1)
    mask = rng.random((40, 75, 70)) < 0.1
    index = tuple(rng.integers(0, n, size=300) for n in mask.shape)
    full = ndimage.gaussian_filter(mask, 3.0, output=np.float32, mode="constant", truncate=3.0)
    np.testing.assert_allclose(mesh._gaussian_at(mask, index, 3.0, np.float32), full[index], rtol=1e-6)
    assert mesh._gaussian_at(mask, (np.zeros(0, int),) * 3, 3.0, np.float32).size == 0


def test_nearest_vertices_match_a_kd_tree():
    """The bucket search finds a nearest vertex (scipy's KD-tree as truth) near, far and outside
    the grid, in any query order, and gives up (-1) only beyond its rings (the bundled twin, a
    KD-tree itself, never does)."""
    rng = np.random.default_rng(3)
    unit = rng.normal(size=(5000, 3))
    vertices = 30.0 * unit / np.linalg.norm(unit, axis=1, keepdims=True) * [1.0, 0.6, 1.4]  # an ellipsoid's surface
    queries = np.concatenate([vertices[:2000] + rng.normal(scale=2.0, size=(2000, 3)), rng.uniform(-80, 80, size=(2000, 3))])
    rng.shuffle(queries)
    bucket_mm = 3.0
    kernels = accelerator.kernels(_bundled_surface)
    nearest, squared = kernels.nearest_vertices(queries, bucket_mm, *kernels.vertex_grid(vertices, bucket_mm))
    distances, _ = cKDTree(vertices).query(queries)
    found = nearest >= 0
    np.testing.assert_allclose(np.sqrt(squared[found]), distances[found], rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(vertices[nearest[found]] - queries[found], axis=1), distances[found], atol=1e-12)
    assert found.sum() > 2000 and np.all(distances[~found] > _bundled_surface.MAX_RINGS * bucket_mm)


def test_far_points_get_their_distance_through_the_fallback():
    """Points much farther than the bucket rings (a false-positive blob 150 mm away) still get
    their exact distance to the surface (VTK's point-to-surface distance as truth)."""
    spacing = (1.0, 0.9, 0.9)
    mask, centre = ball(8.0, spacing)
    surface = mesh.smooth_surface(mask, spacing)
    directions = np.random.default_rng(4).normal(size=(500, 3))
    points = centre[::-1] * spacing[::-1] + 150.0 * directions / np.linalg.norm(directions, axis=1, keepdims=True)
    implicit = vtk.vtkImplicitPolyDataDistance()
    implicit.SetInput(mesh.to_polydata(surface))
    values = vtk.vtkDoubleArray()
    implicit.FunctionValue(numpy_to_vtk(points, deep=True), values)
    np.testing.assert_allclose(mesh.distances_to_surface(points, surface), np.abs(vtk_to_numpy(values)), rtol=0, atol=1e-9)


@pytest.mark.parametrize("shape, sigma", [((9, 40, 33), 1.0), ((1, 12, 20), 1.0), ((20, 26, 24), 3.0), ((3, 2, 5), 1.0)])
def test_gaussian_blur_matches_scipy(shape, sigma):
    mask = np.random.default_rng(5).random(shape) > 0.6
    expected = ndimage.gaussian_filter(mask, sigma, output=np.float32, mode="constant", truncate=3.0)
    kernels = accelerator.kernels(_bundled_surface)
    np.testing.assert_allclose(kernels.gaussian_blur(mask, sigma, np.float32), expected, rtol=0, atol=1e-6)
    plane = mask[0]
    expected = ndimage.gaussian_filter(plane, sigma, output=float, mode="constant", truncate=3.0)
    np.testing.assert_allclose(kernels.gaussian_blur(plane, sigma, float), expected, rtol=0, atol=1e-14)


def _distances_in_child(queue, points, surface):
    queue.put(mesh.distances_to_surface(points, surface))


def test_distances_in_a_forked_process():
    """The kernels' thread pool is started in the parent; a forked child (as multiprocessing's
    default on Linux) still computes, with the same result."""
    mask, _ = ball(10.0, (1.0, 1.0, 1.0))
    surface = mesh.smooth_surface(mask, (1.0, 1.0, 1.0))
    points = surface.points[::3] + 1.5
    expected = mesh.distances_to_surface(points, surface)  # starts the pool here
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_distances_in_child, args=(queue, points, surface))
    child.start()
    got = queue.get(timeout=120)
    child.join(timeout=60)
    assert child.exitcode == 0
    np.testing.assert_array_equal(got, expected)


def test_far_apart_specks_keep_the_bucket_grid_small():
    """Two specks' vertices 1000 mm apart on every axis, each vertex carrying 0.01 mm²: the grid
    would be buckets of 0.35 mm (10^10 of them) without its cap; it stays small and still finds
    the nearest points (scipy's KD-tree as truth)."""
    rng = np.random.default_rng(6)
    points = np.concatenate([rng.normal(scale=0.2, size=(6, 3)), 1000.0 + rng.normal(scale=0.2, size=(6, 3))])
    grid = mesh.point_grid(points, np.full(len(points), 0.01))
    assert len(grid[3]) < 10_000  # the bucket offsets
    queries = rng.uniform(-50, 1050, size=(300, 3))
    distances, nearest = mesh.nearest_points(queries, points, grid)
    np.testing.assert_allclose(distances, cKDTree(points).query(queries)[0], rtol=0, atol=1e-9)
    np.testing.assert_allclose(np.linalg.norm(points[nearest] - queries, axis=1), distances, rtol=0, atol=1e-9)
