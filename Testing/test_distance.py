"""Surface-distance metrics against analytic geometry and DeepMind's surface-distance library."""
import math

import numpy as np
import pytest
import SimpleITK as sitk
from hypothesis import given, settings
from hypothesis import strategies as st

from segmetrics.metrics import distance as D
from segmetrics.spatial import _bundled_surface, accelerator, mesh
from segmetrics.registry import Parameters, Status, StructurePair



def deepmind_library():
    """DeepMind's ``surface_distance`` package, the reference library (skips without it)."""
    return pytest.importorskip("surface_distance")

ANISO = (2.5, 0.8, 0.8)


def ball(shape, spacing, centre_mm, radius_mm):
    """Voxels (array order) whose centre lies within ``radius_mm`` of ``centre_mm`` (array order, mm)."""
    grids = np.ogrid[tuple(slice(0, n) for n in shape)]
    return sum((g * s - c) ** 2 for g, s, c in zip(grids, spacing, centre_mm)) <= radius_mm**2


def sphere_truth(c1, r1, c2, r2, ndim=3, n=400_000):
    """Continuous directed distances between two spheres (circles), sampled uniformly by area."""
    i = np.arange(n) + 0.5
    if ndim == 3:
        polar, azimuth = np.arccos(1 - 2 * i / n), np.pi * (1 + 5**0.5) * i
        unit = np.stack([np.cos(polar), np.sin(polar) * np.cos(azimuth), np.sin(polar) * np.sin(azimuth)], 1)
    else:
        unit = np.stack([np.cos(2 * np.pi * i / n), np.sin(2 * np.pi * i / n)], 1)
    c1, c2 = np.asarray(c1, float), np.asarray(c2, float)
    d12 = np.abs(np.linalg.norm(c1 + r1 * unit - c2, axis=1) - r2)
    d21 = np.abs(np.linalg.norm(c2 + r2 * unit - c1, axis=1) - r1)
    w1, w2 = r1 ** (ndim - 1), r2 ** (ndim - 1)  # uniform samples: weight = surface measure per sample
    return {
        "hd": max(d12.max(), d21.max()),
        "hd95": max(np.quantile(d12, 0.95), np.quantile(d21, 0.95)),
        "assd": (w1 * d12.sum() + w2 * d21.sum()) / (n * (w1 + w2)),
        "masd": (d12.mean() + d21.mean()) / 2,
        "nsd2": (w1 * np.mean(d12 <= 2) + w2 * np.mean(d21 <= 2)) / (w1 + w2),
    }


def summary(sd):
    return {
        "hd": D.hausdorff(sd),
        "hd95": D.percentile_distance(sd, 95),
        "assd": D.assd(sd),
        "masd": D.masd(sd),
        "nsd2": D.nsd(sd, 2.0),
    }


def library(reference, test, spacing):
    """The four DeepMind numbers plus the directed means from the reference library."""
    surface_distance = deepmind_library()
    sd = surface_distance.compute_surface_distances(reference.astype(bool), test.astype(bool), tuple(spacing))
    means = surface_distance.compute_average_surface_distance(sd)
    return {
        "hd": surface_distance.compute_robust_hausdorff(sd, 100),
        "hd95": surface_distance.compute_robust_hausdorff(sd, 95),
        "hd50": surface_distance.compute_robust_hausdorff(sd, 50),
        "mean_rt": means[0],
        "mean_tr": means[1],
        "nsd1": surface_distance.compute_surface_dice_at_tolerance(sd, 1.0),
        "nsd2": surface_distance.compute_surface_dice_at_tolerance(sd, 2.0),
    }


def ours_like_library(reference, test, spacing):
    sd = D.surface_distances(reference, test, spacing, mode="deepmind")
    mean_rt, mean_tr = D.directed_means(sd)
    return {
        "hd": D.hausdorff(sd),
        "hd95": D.percentile_distance(sd, 95),
        "hd50": D.percentile_distance(sd, 50),
        "mean_rt": mean_rt,
        "mean_tr": mean_tr,
        "nsd1": D.nsd(sd, 1.0),
        "nsd2": D.nsd(sd, 2.0),
    }


def assert_matches_library(reference, test, spacing):
    expected, got = library(reference, test, spacing), ours_like_library(reference, test, spacing)
    for key in expected:
        assert got[key] == pytest.approx(expected[key], abs=1e-6), key


# --- analytic spheres ------------------------------------------------------------------------


@pytest.mark.parametrize("spacing", [(1.0, 1.0, 1.0), ANISO])
def test_concentric_spheres_hd_assd_nsd_step(spacing):
    shape = tuple(int(math.ceil(64 / s)) for s in spacing)
    centre = (31.7, 32.2, 31.9)
    sd = D.surface_distances(ball(shape, spacing, centre, 20), ball(shape, spacing, centre, 25), spacing)
    tolerance = 0.5 * max(spacing)  # binary masks only locate a surface to within half a voxel
    assert D.hausdorff(sd) == pytest.approx(5.0, abs=tolerance)
    assert D.assd(sd) == pytest.approx(5.0, abs=0.1)
    assert D.percentile_distance(sd, 95) == pytest.approx(5.0, abs=0.3)
    assert D.nsd(sd, 4.0) < 0.01 and D.nsd(sd, 6.0) == 1.0


@pytest.mark.parametrize("difference_mm", [0.25, 0.5, 1.0])
def test_sub_voxel_radius_differences(difference_mm):
    """Near-identical masks (most voxels shared): ASSD is the radius difference, not grid-quantised."""
    spacing, shape, centre = (1.0, 1.0, 1.0), (60, 60, 60), (29.3, 30.1, 29.7)
    ref, test = ball(shape, spacing, centre, 20), ball(shape, spacing, centre, 20 + difference_mm)
    ours = D.assd(D.surface_distances(ref, test, spacing))
    assert ours == pytest.approx(difference_mm, abs=0.02)
    lib = library(ref, test, spacing)
    assert abs(ours - difference_mm) < abs((lib["mean_rt"] + lib["mean_tr"]) / 2 - difference_mm)


@pytest.fixture(scope="module")
def offset_spheres():
    spacing = ANISO
    shape = (40, 128, 128)
    c1, c2 = np.array([49.3, 51.1, 50.7]), np.array([52.3, 53.1, 49.2])
    ref, test = ball(shape, spacing, c1, 30), ball(shape, spacing, c2, 27)
    return ref, test, spacing, sphere_truth(c1, 30, c2, 27)


def test_offset_spheres_anisotropic_close_to_truth_and_better_than_deepmind(offset_spheres):
    ref, test, spacing, truth = offset_spheres
    ours = summary(D.surface_distances(ref, test, spacing))
    lib = library(ref, test, spacing)
    sd = deepmind_library().compute_surface_distances(ref, test, spacing)
    areas = np.concatenate([sd["surfel_areas_gt"], sd["surfel_areas_pred"]])
    lib["assd"] = np.sum(np.concatenate([sd["distances_gt_to_pred"], sd["distances_pred_to_gt"]]) * areas) / areas.sum()
    assert ours["hd95"] == pytest.approx(truth["hd95"], abs=0.15)
    assert ours["assd"] == pytest.approx(truth["assd"], abs=0.08)
    assert ours["masd"] == pytest.approx(truth["masd"], abs=0.08)
    assert ours["nsd2"] == pytest.approx(truth["nsd2"], abs=0.01)
    assert ours["hd"] == pytest.approx(truth["hd"], abs=0.5 * max(spacing))
    for key in ("hd95", "assd", "nsd2"):
        assert abs(ours[key] - truth[key]) < abs(lib[key] - truth[key]), key


def test_directed_means_of_offset_spheres(offset_spheres):
    ref, test, spacing, _ = offset_spheres
    c1, c2 = np.array([49.3, 51.1, 50.7]), np.array([52.3, 53.1, 49.2])
    i = np.arange(200_000) + 0.5
    polar, azimuth = np.arccos(1 - 2 * i / i.size), np.pi * (1 + 5**0.5) * i
    unit = np.stack([np.cos(polar), np.sin(polar) * np.cos(azimuth), np.sin(polar) * np.sin(azimuth)], 1)
    expected_rt = np.abs(np.linalg.norm(c1 + 30 * unit - c2, axis=1) - 27).mean()
    expected_tr = np.abs(np.linalg.norm(c2 + 27 * unit - c1, axis=1) - 30).mean()
    rt, tr = D.directed_means(D.surface_distances(ref, test, spacing))
    assert rt == pytest.approx(expected_rt, abs=0.08)
    assert tr == pytest.approx(expected_tr, abs=0.08)


def test_error_shrinks_with_resolution():
    c1, c2 = np.array([24.3, 25.1, 24.6]), np.array([26.1, 23.9, 25.4])
    truth = sphere_truth(c1, 15, c2, 12)
    errors = []
    for h in (2.0, 1.0, 0.5):
        shape = (int(50 / h),) * 3
        sd = D.surface_distances(ball(shape, (h,) * 3, c1, 15), ball(shape, (h,) * 3, c2, 12), (h,) * 3)
        errors.append({k: abs(v - truth[k]) for k, v in summary(sd).items()})
    for key in ("hd", "hd95"):
        assert errors[0][key] > errors[1][key] > errors[2][key], key
    assert errors[2]["hd"] < 0.1 and errors[2]["hd95"] < 0.03
    assert max(e["assd"] for e in errors) < 0.02 and max(e["nsd2"] for e in errors) < 0.01


def test_point_triangle_distance_against_dense_sampling():
    rng = np.random.default_rng(0)
    a, b, c = rng.normal(size=(3, 300, 3))
    p = 2 * rng.normal(size=(300, 3))
    u, v = np.meshgrid(np.linspace(0, 1, 401), np.linspace(0, 1, 401))
    inside = u + v <= 1
    u, v = u[inside], v[inside]
    dense = [np.min(np.linalg.norm(p[i] - (a[i] + u[:, None] * (b[i] - a[i]) + v[:, None] * (c[i] - a[i])), axis=1)) for i in range(300)]
    got = np.linalg.norm(_bundled_surface._triangle(p.T, a.T, b.T, c.T)[0], axis=0)  # the compiled one: test_bundled_surface
    assert np.all(got <= np.array(dense) + 1e-12)  # the sampled points lie on the triangle
    np.testing.assert_allclose(got, dense, atol=5e-3)


def test_mesh_distances_against_vtk_point_to_surface():
    vtk = pytest.importorskip("vtk")
    from vtk.util.numpy_support import vtk_to_numpy

    spacing = np.array(ANISO)
    a = np.pad(ball((20, 56, 56), ANISO, (24.3, 22.1, 21.7), 16), 2)
    b = np.pad(ball((20, 56, 56), ANISO, (26.1, 23.4, 22.9), 13), 2)
    source, target = mesh.smooth_surface(a, spacing), mesh.smooth_surface(b, spacing)
    got = mesh.distances_to_surface(source.points, target)
    exact = vtk.vtkDistancePolyDataFilter()
    exact.SetInputData(0, mesh.mesh_from_numpy(source.points, source.cells))
    exact.SetInputData(1, mesh.mesh_from_numpy(target.points, target.cells))
    exact.SignedDistanceOff()
    exact.Update()
    expected = np.abs(vtk_to_numpy(exact.GetOutput().GetPointData().GetArray("Distance")))
    assert np.all(got >= expected - 1e-9)
    assert np.mean(got - expected > 1e-6) < 0.1
    assert np.max(got - expected) < max(ANISO)


# --- 2-D, slabs, single voxels, borders ------------------------------------------------------


def test_discs_2d_concentric_and_offset():
    spacing = (0.7, 0.5)
    shape = (120, 160)
    centre = (41.3, 39.6)
    sd = D.surface_distances(ball(shape, spacing, centre, 25), ball(shape, spacing, centre, 29), spacing)
    assert D.hausdorff(sd) == pytest.approx(4.0, abs=0.35)
    assert D.assd(sd) == pytest.approx(4.0, abs=0.05)
    assert D.nsd(sd, 3.5) < 0.02 and D.nsd(sd, 4.5) == 1.0
    c2 = (43.1, 40.9)
    truth = sphere_truth(centre, 25, c2, 22, ndim=2)
    got = summary(D.surface_distances(ball(shape, spacing, centre, 25), ball(shape, spacing, c2, 22), spacing))
    assert got["assd"] == pytest.approx(truth["assd"], abs=0.05)
    assert got["hd95"] == pytest.approx(truth["hd95"], abs=0.15)


def test_one_slice_volume_matches_its_2d_in_plane_distances():
    spacing2d = (0.8, 0.8)
    a2, b2 = ball((60, 60), spacing2d, (24.1, 23.7), 15), ball((60, 60), spacing2d, (25.3, 24.5), 12)
    sd2 = D.surface_distances(a2, b2, spacing2d)
    sd3 = D.surface_distances(a2[None], b2[None], (2.5,) + spacing2d)
    assert np.isfinite(D.hausdorff(sd3))
    assert D.hausdorff(sd3) == pytest.approx(D.hausdorff(sd2), abs=0.2)
    # the slab is closed by a top and a bottom face: about twice the disc's area
    assert sd3.areas_ref.sum() == pytest.approx(2 * np.pi * 15**2, rel=0.03)
    assert_matches_library(a2[None], b2[None], (2.5,) + spacing2d)


def test_single_voxels():
    spacing = (2.0, 1.0, 0.5)
    a = np.zeros((5, 6, 7), bool)
    b = np.zeros_like(a)
    a[2, 3, 1] = True
    b[2, 3, 5] = True  # 4 columns apart = 2 mm
    sd = D.surface_distances(a, a, spacing)
    assert D.hausdorff(sd) == pytest.approx(0.0, abs=1e-9)
    sd = D.surface_distances(a, b, spacing)
    assert D.hausdorff(sd) == pytest.approx(2.0, abs=0.5 * 0.5 + 1e-9)
    assert D.nsd(sd, 1.0) == 0.0 and D.nsd(sd, 2.5) == 1.0
    assert_matches_library(a, b, spacing)


@pytest.mark.parametrize("mode", D.SURFACE_MODES)
def test_border_touching_masks_equal_padded_masks(mode):
    rng = np.random.default_rng(3)
    ref = rng.random((6, 9, 8)) < 0.6
    test = rng.random((6, 9, 8)) < 0.6
    spacing = (1.5, 0.7, 0.9)
    padded = [np.pad(m, 3) for m in (ref, test)]
    at_border = summary(D.surface_distances(ref, test, spacing, mode))
    inside = summary(D.surface_distances(*padded, spacing, mode))
    for key in at_border:
        assert at_border[key] == pytest.approx(inside[key], abs=1e-9), key


# --- identities and properties ---------------------------------------------------------------


@pytest.mark.parametrize("mode", D.SURFACE_MODES)
@pytest.mark.parametrize("ndim", [2, 3])
def test_identical_masks_give_zero(mode, ndim):
    shape, spacing = ((20, 22), (0.6, 1.1)) if ndim == 2 else ((12, 20, 22), ANISO)
    mask = ball(shape, spacing, [n * s / 2 for n, s in zip(shape, spacing)], 6)
    sd = D.surface_distances(mask, mask, spacing, mode)
    assert D.hausdorff(sd) == pytest.approx(0.0, abs=1e-9)
    assert D.assd(sd) == pytest.approx(0.0, abs=1e-9)
    assert D.nsd(sd, 1e-6) == pytest.approx(1.0)


blob = st.tuples(st.integers(0, 2**32 - 1), st.floats(0.3, 0.7))


@settings(max_examples=15, deadline=None)
@given(blob, blob, st.tuples(st.integers(0, 5), st.integers(0, 5), st.integers(0, 5)), st.sampled_from(D.SURFACE_MODES))
def test_symmetry_and_translation_invariance(a, b, shift, mode):
    spacing = (1.7, 0.6, 0.9)
    ref = np.random.default_rng(a[0]).random((6, 7, 8)) < a[1]
    test = np.random.default_rng(b[0]).random((6, 7, 8)) < b[1]
    sd = D.surface_distances(ref, test, spacing, mode)
    swapped = D.surface_distances(test, ref, spacing, mode)
    np.testing.assert_allclose(swapped.distances_ref_to_test, sd.distances_test_to_ref, atol=1e-9)
    np.testing.assert_allclose(swapped.areas_test, sd.areas_ref, atol=1e-9)
    for name, value in summary(sd).items():
        assert summary(swapped)[name] == pytest.approx(value, abs=1e-9, nan_ok=True)
    placed = [np.zeros((12, 13, 14), bool) for _ in range(2)]
    window = tuple(slice(s, s + n) for s, n in zip(shift, ref.shape))
    placed[0][window], placed[1][window] = ref, test
    moved = D.surface_distances(*placed, spacing, mode)
    for name, value in summary(sd).items():
        assert summary(moved)[name] == pytest.approx(value, abs=1e-9, nan_ok=True)


def test_percentile_variants_on_hand_made_distances():
    sd = D.SurfaceDistances(
        distances_ref_to_test=np.array([0.0, 1.0, 2.0, 10.0]),
        areas_ref=np.array([1.0, 1.0, 1.0, 1.0]),
        distances_test_to_ref=np.array([0.0, 3.0]),
        areas_test=np.array([3.0, 1.0]),
    )
    # ref: 50 % of the area within 1 mm; test: 75 % within 0 mm, 100 % within 3 mm
    assert D.percentile_distance(sd, 50, "max_of_directed") == 1.0
    assert D.percentile_distance(sd, 50, "mean_of_directed") == 0.5
    # pooled, sorted: 0 (area 1), 0 (3), 1, 2, 3, 10 out of 8: 50 % reached at 0 mm
    assert D.percentile_distance(sd, 50, "pooled") == 0.0
    assert D.percentile_distance(sd, 80, "pooled") == 3.0  # 6/8 within 2 mm, 7/8 within 3 mm
    assert D.hausdorff(sd) == 10.0
    assert D.assd(sd) == pytest.approx((13 + 3) / 8)
    assert D.masd(sd) == pytest.approx((13 / 4 + 3 / 4) / 2)
    assert D.nsd(sd, 1.0) == pytest.approx(5 / 8)
    with pytest.raises(ValueError):
        D.percentile_distance(sd, 95, "median")


# --- empty masks through the registered group -----------------------------------------------


def group_values(ref, test, params=None):
    pair = StructurePair("s", ref, test, (1.0, 1.0, 1.0))
    return {v.metric: v for v in D.compute(pair, params or Parameters())}, pair


def test_empty_masks_statuses_and_values():
    full = np.zeros((6, 6, 6), bool)
    full[2:4, 2:4, 2:4] = True
    empty = np.zeros_like(full)

    values, _ = group_values(empty, empty)
    assert {v.status for v in values.values()} == {Status.BOTH_EMPTY}
    assert all(math.isnan(v.value) for v in values.values())

    values, _ = group_values(full, empty)
    assert {v.status for v in values.values()} == {Status.TEST_EMPTY}
    for name in ("hd_mm", "hd95_mm", "hdp_mm", "assd_mm", "masd_mm", "mean_distance_reference_to_test_mm"):
        assert values[name].value == math.inf, name
    assert math.isnan(values["mean_distance_test_to_reference_mm"].value)
    assert values["nsd"].value == 0.0

    values, _ = group_values(empty, full)
    assert {v.status for v in values.values()} == {Status.REFERENCE_EMPTY}
    assert values["hd_mm"].value == math.inf and values["nsd"].value == 0.0
    assert values["mean_distance_test_to_reference_mm"].value == math.inf
    assert math.isnan(values["mean_distance_reference_to_test_mm"].value)


def test_group_params_and_cache():
    ref = ball((20, 20, 20), (1, 1, 1), (9.5, 9.5, 9.5), 6)
    test = ball((20, 20, 20), (1, 1, 1), (10.5, 9.5, 9.5), 6)
    params = Parameters(hd_percentile=90, hd_percentile_variant="pooled", nsd_tolerance_mm=1.5, surface_mode="deepmind")
    values, pair = group_values(ref, test, params)
    assert values["hdp_mm"].params == {"mode": "deepmind", "percentile": 90.0, "variant": "pooled"}
    assert values["hd95_mm"].params["percentile"] == 95.0
    assert values["nsd"].params == {"mode": "deepmind", "tolerance_mm": 1.5}
    sd = pair.cache[("surface_distances", "deepmind")]
    assert values["hdp_mm"].value == D.percentile_distance(sd, 90, "pooled")
    surface_distance = deepmind_library()
    lib = surface_distance.compute_surface_distances(ref, test, (1.0, 1.0, 1.0))
    assert values["nsd"].value == pytest.approx(surface_distance.compute_surface_dice_at_tolerance(lib, 1.5), abs=1e-9)
    assert values["hd95_mm"].value == pytest.approx(surface_distance.compute_robust_hausdorff(lib, 95), abs=1e-9)


# --- deepmind mode against the reference library ---------------------------------------------


@pytest.mark.parametrize("seed", range(12))
def test_deepmind_mode_matches_library_on_random_masks(seed):
    rng = np.random.default_rng(seed)
    ndim = 2 if seed % 3 == 0 else 3
    shape = tuple(rng.integers(4, 16, ndim))
    spacing = tuple(rng.uniform(0.3, 3.0, ndim))
    ref = rng.random(shape) < rng.uniform(0.1, 0.6)
    test = rng.random(shape) < rng.uniform(0.1, 0.6)
    ref.flat[0] = test.flat[-1] = True  # both non-empty, and touching the border
    assert_matches_library(ref, test, spacing)


def read_mask(path):
    image = sitk.ReadImage(str(path))
    return sitk.GetArrayFromImage(image) > 0, tuple(reversed(image.GetSpacing()))


@pytest.mark.parametrize(
    "reference, test",
    [
        ("history_2016_commit7f79c3e/t2/t2_seg_manual.nii.gz", "t2/t2_seg-deepseg_sc-2d.nii.gz"),
        ("t2s/t2s_seg.nii.gz", "t2s/t2s_seg-deepseg.nii.gz"),
    ],
)
def test_deepmind_mode_matches_library_on_real_masks(data_dir, reference, test):
    ref, spacing = read_mask(data_dir / "sct_testing_data" / reference)
    tst, _ = read_mask(data_dir / "sct_testing_data" / test)
    assert_matches_library(ref, tst, spacing)
    exact = summary(D.surface_distances(ref, tst, spacing))
    assert all(np.isfinite(v) for v in exact.values())


def test_compare_totalsegmentator_labels_match_library(data_dir):
    """End to end through compare(): per-label deepmind values equal the library's; label 13 is missing in the test."""
    from segmetrics import compare

    folder = data_dir / "totalsegmentator"
    result = compare(
        folder / "example_seg.nii.gz",
        folder / "example_seg_fast.nii.gz",
        labels=[5, 13, 33],
        metrics="distance",
        params=Parameters(surface_mode="deepmind"),
    )
    _, spacing = read_mask(folder / "example_seg.nii.gz")
    labels_ref = sitk.GetArrayFromImage(sitk.ReadImage(str(folder / "example_seg.nii.gz")))
    labels_test = sitk.GetArrayFromImage(sitk.ReadImage(str(folder / "example_seg_fast.nii.gz")))
    for label in (5, 33):  # liver, and a 70-voxel structure
        expected = library(labels_ref == label, labels_test == label, spacing)
        record = result[str(label)]
        assert record.value("hd_mm") == pytest.approx(expected["hd"], abs=1e-6)
        assert record.value("hd95_mm") == pytest.approx(expected["hd95"], abs=1e-6)
        assert record.value("nsd") == pytest.approx(expected["nsd2"], abs=1e-6)
        assert record.get("hd_mm").status == Status.OK
    missing = result["13"]
    assert missing.get("hd_mm").status == Status.TEST_EMPTY and missing.value("hd_mm") == math.inf


@settings(max_examples=40, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**16), size=st.sampled_from([0, 1, 2, 7, 300, 5000]), ties=st.booleans())
def test_distances_sort_as_a_stable_argsort(seed, size, ties):
    """The radix sort of the directed distances (not negative, inf allowed) orders them as NumPy's
    stable sort: ascending, equal distances in their input order."""
    rng = np.random.default_rng(seed)
    distances = rng.exponential(3.0, size) * 10.0 ** rng.integers(-6, 6, size)
    if ties and size:
        distances = rng.choice(distances[: max(1, size // 10)], size)
        distances[rng.random(size) < 0.1] = np.inf
        distances[rng.random(size) < 0.1] = 0.0
    assert np.array_equal(accelerator.kernels(_bundled_surface).ascending_order(distances), np.argsort(distances, kind="stable"))


def test_sorting_other_values_stays_a_permutation():
    """Negative values and NaN have no distance order, but the sort still returns every index once."""
    values = np.array([1.0, -2.0, np.nan, 0.0, -0.0, np.inf, -np.inf, 3.5])
    assert sorted(accelerator.kernels(_bundled_surface).ascending_order(values)) == list(range(len(values)))
