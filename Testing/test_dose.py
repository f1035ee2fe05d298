"""RT Dose input and the dose metrics, against analytic dose fields with closed-form DVHs.

The RTDOSE files are written here with pydicom from analytic fields (a linear gradient, a radial
field); structures are boxes, spheres and cylinders whose dose-volume histograms follow in closed
form. dicompyler-core, when installed, computes the DVH of the same files (test-only reference).
"""
import math

import numpy as np
import pytest

from segmetrics.inputs.readers.rtdose import DoseGrid, check_dose_frame, read_rtdose
from segmetrics.inputs.validation import ReadError

FRAME = "1.2.826.0.1.3680043.8.498.1"
OTHER_FRAME = "1.2.826.0.1.3680043.8.498.2"


def write_rtdose(path, dose_gy, spacing, origin, orientation=(1, 0, 0, 0, 1, 0), *, frame=FRAME,
                 scaling=1e-4, offsets=None, **tags):
    """An RTDOSE file of ``dose_gy`` (frames, rows, columns) in Gy, stored as 32-bit integers times
    ``scaling``; ``spacing`` = (frame step, row spacing, column spacing) mm; ``origin`` = the
    ImagePositionPatient (mm); ``offsets`` the GridFrameOffsetVector (default relative, even);
    other keyword arguments set or (None) delete tags."""
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.uid import ExplicitVRLittleEndian, RTDoseStorage, generate_uid

    dose_gy = np.asarray(dose_gy, dtype=float)
    dataset = Dataset()
    dataset.file_meta = FileMetaDataset()
    dataset.file_meta.TransferSyntaxUID = ExplicitVRLittleEndian
    dataset.file_meta.MediaStorageSOPClassUID = RTDoseStorage
    dataset.SOPClassUID, dataset.SOPInstanceUID, dataset.Modality = RTDoseStorage, generate_uid(), "RTDOSE"
    dataset.FrameOfReferenceUID = frame
    dataset.ImagePositionPatient = [float(v) for v in origin]
    dataset.ImageOrientationPatient = [float(v) for v in orientation]
    dataset.PixelSpacing = [float(spacing[1]), float(spacing[2])]
    dataset.NumberOfFrames, dataset.Rows, dataset.Columns = dose_gy.shape
    dataset.GridFrameOffsetVector = list(np.arange(dose_gy.shape[0]) * float(spacing[0])) if offsets is None \
        else [float(v) for v in offsets]
    dataset.FrameIncrementPointer = 0x3004000C
    dataset.SamplesPerPixel, dataset.PhotometricInterpretation = 1, "MONOCHROME2"
    dataset.BitsAllocated, dataset.BitsStored, dataset.HighBit, dataset.PixelRepresentation = 32, 32, 31, 0
    dataset.DoseUnits, dataset.DoseType, dataset.DoseSummationType = "GY", "PHYSICAL", "PLAN"
    dataset.DoseGridScaling = f"{scaling:.10g}"
    dataset.PixelData = np.round(dose_gy / scaling).astype("<u4").tobytes()
    for keyword, value in tags.items():
        if value is None:
            delattr(dataset, keyword)
        else:
            setattr(dataset, keyword, value)
    dataset.save_as(path, enforce_file_format=True)
    return path


def needs_rtstruct_reader():
    """Skip where the RT Structure Set reader's packages are missing (Slicer's bundled Python)."""
    pytest.importorskip("shapely")
    pytest.importorskip("skimage")


def needs_compare():
    """Skip where ``segmetrics.compare`` cannot import every metric group (in Slicer's bundled
    Python the distance group's scikit-image is missing today); the dose group needs only numpy
    and scipy (:func:`test_axis_by_axis_interpolation_equals_scipy_on_a_random_field_with_flipped_axes`)."""
    from segmetrics.registry import all_groups

    try:
        all_groups()
    except ImportError as error:
        pytest.skip(f"compare imports every metric group: {error}")


def linear_field(shape, spacing, origin, gradient_gy_per_mm, offset_gy=0.0):
    """Dose ``offset + gradient . (x, y, z)`` at the voxel centres of an axial grid (array order z, y, x)."""
    z, y, x = np.meshgrid(*(origin[::-1][a] + np.arange(shape[a]) * spacing[a] for a in range(3)), indexing="ij")
    gx, gy, gz = gradient_gy_per_mm
    return offset_gy + gx * x + gy * y + gz * z


# ---------------------------------------------------------------------------------- reader
def test_the_reader_scales_and_places_the_dose_grid(tmp_path):
    spacing, origin = (3.0, 2.0, 2.5), (-20.0, -30.0, 40.0)
    dose = linear_field((5, 7, 9), spacing, origin, (0.1, 0.2, 0.3), offset_gy=20)
    grid = read_rtdose(write_rtdose(tmp_path / "d.dcm", dose, spacing, origin))
    assert grid.frame_of_reference == FRAME
    assert grid.spacing == spacing and grid.origin == origin
    np.testing.assert_allclose(grid.dose, dose, atol=1e-4)
    # the index map of an image on the same grid is the identity
    from segmetrics.spatial.geometry import LabelImage

    image = LabelImage(np.zeros((5, 7, 9), np.uint8), spacing, origin)
    matrix, offset = grid.index_map(image)
    np.testing.assert_allclose(matrix, np.eye(3), atol=1e-12)
    np.testing.assert_allclose(offset, 0, atol=1e-12)


def test_absolute_and_decreasing_frame_offsets_give_the_same_grid(tmp_path):
    spacing, origin = (2.0, 2.0, 2.0), (0.0, 0.0, 10.0)
    dose = linear_field((4, 3, 3), spacing, origin, (0, 0, 1.0))
    relative = read_rtdose(write_rtdose(tmp_path / "r.dcm", dose, spacing, origin))
    absolute = read_rtdose(write_rtdose(tmp_path / "a.dcm", dose, spacing, origin, offsets=[10, 12, 14, 16]))
    top = (0.0, 0.0, 16.0)  # the same planes stored from the top down
    decreasing = read_rtdose(write_rtdose(tmp_path / "d.dcm", dose[::-1], spacing, top, offsets=[0, -2, -4, -6]))
    for grid in (absolute, decreasing):
        assert grid.origin == relative.origin and grid.spacing == relative.spacing
        np.testing.assert_allclose(grid.dose, relative.dose)


@pytest.mark.parametrize("tags, message", [
    ({"DoseUnits": "RELATIVE"}, "DoseUnits is 'RELATIVE'"),
    ({"DoseType": "ERROR"}, "error map"),
    ({"DoseGridScaling": None}, "DoseGridScaling must be 1 finite"),
    ({"DoseGridScaling": "0"}, "DoseGridScaling 0 must be positive"),
    ({"FrameOfReferenceUID": None}, "no FrameOfReferenceUID"),
    ({"GridFrameOffsetVector": [0, 2, 5]}, "not evenly spaced"),
    ({"GridFrameOffsetVector": [0, 2]}, "GridFrameOffsetVector must be 3"),
    ({"GridFrameOffsetVector": [7, 9, 11]}, "neither 0 (relative) nor the z"),
    ({"ImageOrientationPatient": [1, 0, 0, 0, 2, 0]}, "not orthonormal"),
    ({"PixelSpacing": [0, 1]}, "voxel size must be positive"),
])
def test_a_dose_that_cannot_be_trusted_is_one_line(tmp_path, tags, message):
    path = write_rtdose(tmp_path / "d.dcm", np.ones((3, 2, 2)), (2, 1, 1), (0, 0, 0), **tags)
    with pytest.raises(ReadError) as error:
        read_rtdose(path)
    assert message in str(error.value) and str(path) in str(error.value) and "\n" not in str(error.value)


def test_negative_or_non_finite_doses_are_refused(tmp_path):
    path = write_rtdose(tmp_path / "d.dcm", np.ones((2, 2, 2)), (1, 1, 1), (0, 0, 0), PixelRepresentation=1)
    stored = np.full(8, 10000, "<i4")  # 1 Gy / 1e-4, signed pixels: one made negative
    negative = stored.copy()
    negative[-1] = -10000
    assert path.read_bytes().count(stored.tobytes()) == 1
    path.write_bytes(path.read_bytes().replace(stored.tobytes(), negative.tobytes()))
    with pytest.raises(ReadError, match=f"{path}: holds negative"):
        read_rtdose(path)
    with pytest.raises(ValueError, match="plan: holds negative or non-finite"):
        DoseGrid(np.full((2, 2, 2), np.nan), (1, 1, 1), (0, 0, 0), tuple(np.eye(3).ravel()), source="plan")


def test_not_a_dose_file_is_one_line(tmp_path):
    from test_dicom import rectangle, write_rtstruct

    path = tmp_path / "s.dcm"
    write_rtstruct(path, {"box": [rectangle(0, 0, 5, 5, 0)]})
    with pytest.raises(ReadError, match="not an RT Dose"):
        read_rtdose(path)
    with pytest.raises(ReadError, match="no such dose file"):
        read_rtdose(tmp_path / "missing.dcm")


def test_a_dose_from_another_frame_of_reference_is_refused(tmp_path):
    needs_rtstruct_reader()
    from test_dicom import rectangle, write_rtstruct
    import pydicom

    structures = tmp_path / "s.dcm"
    write_rtstruct(structures, {"box": [rectangle(0, 0, 5, 5, 0)]})
    dataset = pydicom.dcmread(structures)
    dataset.StructureSetROISequence[0].ReferencedFrameOfReferenceUID = FRAME
    dataset.save_as(structures)
    same = read_rtdose(write_rtdose(tmp_path / "same.dcm", np.ones((2, 2, 2)), (1, 1, 1), (0, 0, 0)))
    other = read_rtdose(write_rtdose(tmp_path / "other.dcm", np.ones((2, 2, 2)), (1, 1, 1), (0, 0, 0),
                                     frame=OTHER_FRAME))
    assert check_dose_frame(same, {"reference": structures}) == []
    with pytest.raises(ReadError, match="not the same patient coordinates"):
        check_dose_frame(other, {"reference": structures})
    import SimpleITK as sitk

    label_map = tmp_path / "mask.nii.gz"
    sitk.WriteImage(sitk.GetImageFromArray(np.ones((2, 2, 2), np.uint8)), str(label_map))
    notes = check_dose_frame(same, {"test": label_map, "reference": np.zeros((2, 2, 2))})
    assert len(notes) == 1 and "carries no frame of reference" in notes[0]  # in-memory inputs: left to the caller


# ------------------------------------------------------------------------- dose metrics
def _grid(shape, spacing, origin=(0.0, 0.0, 0.0)):
    from segmetrics.spatial.geometry import LabelImage

    return LabelImage(np.zeros(shape, np.uint8), spacing, origin)


def test_a_box_in_a_linear_gradient_has_its_closed_form_dvh(tmp_path):
    """Dose 1 Gy/mm along x over a 40 mm box: uniform on [x0, x1], every statistic in closed form."""
    needs_compare()
    import segmetrics

    spacing, origin = (2.0, 2.0, 2.0), (-50.0, -50.0, -50.0)
    dose = linear_field((51, 51, 51), spacing, origin, (1.0, 0.0, 0.0), offset_gy=60)  # 10..110 Gy
    path = write_rtdose(tmp_path / "d.dcm", dose, spacing, origin)
    # structures on a 0.5 mm grid: the box x in [-20, 20) mm -> voxel centres -19.75 .. 19.75
    image = _grid((20, 20, 80), (0.5, 0.5, 0.5), (-20 + 0.25, -5 + 0.25, -5 + 0.25))
    reference = np.zeros(image.array.shape, np.uint8)
    reference[:, :, :] = 1
    test = np.zeros_like(reference)
    test[:, :, 40:] = 1  # the hotter half, x in [0, 20)
    image_ref = image.with_array(reference)
    image_test = image.with_array(test)
    result = segmetrics.compare(image_ref, image_test, metrics="dose", dose=path,
                                params=segmetrics.Parameters(dose_levels_gy=(70, 200)))
    values = result.structures[0]
    n = 80  # voxels along x; dose of voxel k (hottest first) = 60 + 19.75 - 0.5 (k - 1)
    hottest_first = 60 + 19.75 - 0.5 * np.arange(n)
    assert values.value("dose_dmean_reference_gy") == pytest.approx(60.0, abs=1e-3)
    assert values.value("dose_dmin_reference_gy") == pytest.approx(40.25, abs=1e-3)
    voxel_cc = 0.125e-3
    slab = 20 * 20  # voxels sharing one x
    assert values.value("dose_dmax_reference_gy") == pytest.approx(hottest_first[math.ceil(0.03 / voxel_cc / slab) - 1],
                                                                     abs=1e-3)
    for p in (2, 50, 95, 98):
        k = math.ceil(p / 100 * n * slab - 1e-9)
        assert values.value(f"dose_d{p}_reference_gy") == pytest.approx(hottest_first[(k - 1) // slab], abs=1e-3)
    assert values.value("dose_volume_reference_cc") == pytest.approx(4.0)  # 40 x 10 x 10 mm
    assert values.value("dose_volume_test_cc") == pytest.approx(2.0)
    # V70Gy: x >= 10 mm, a quarter of the box
    assert values.value("dose_v70gy_reference_cc") == pytest.approx(1.0)
    assert values.value("dose_v70gy_reference_percent") == pytest.approx(25.0)
    assert values.value("dose_v70gy_test_percent") == pytest.approx(50.0)
    assert values.value("dose_v200gy_test_cc") == 0
    assert values.value("dose_dmean_test_gy") == pytest.approx(70.0, abs=1e-3)
    assert values.value("dose_dmean_difference_gy") == pytest.approx(10.0, abs=1e-3)
    assert values.value("dose_volume_difference_cc") == pytest.approx(-2.0)
    assert values.status == "ok"
    assert any("interpolated trilinearly" in note for note in result.notes)


def _box_case(tmp_path, frame=FRAME):
    """Reference and test RT Structure Sets (boxes 40 x 20 mm on planes z = -4 .. 4 mm, the test 10 mm
    shorter in x) in frame ``frame``, and a dose of 1 Gy/mm along x on a 2 mm grid."""
    import pydicom
    from test_dicom import rectangle, write_rtstruct

    planes = np.arange(-4.0, 4.1, 2.0)
    paths = {}
    for side, x1 in (("reference", 20.0), ("test", 10.0)):
        paths[side] = tmp_path / f"{side}.dcm"
        write_rtstruct(paths[side], {"PTV": [rectangle(-20, -10, x1, 10, z) for z in planes]})
        dataset = pydicom.dcmread(paths[side])
        dataset.StructureSetROISequence[0].ReferencedFrameOfReferenceUID = frame
        dataset.save_as(paths[side])
    spacing, origin = (2.0, 2.0, 2.0), (-40.0, -40.0, -20.0)
    dose = linear_field((21, 41, 41), spacing, origin, (1.0, 0.0, 0.0), offset_gy=50)
    paths["dose"] = write_rtdose(tmp_path / "dose.dcm", dose, spacing, origin)
    return paths


def test_cli_writes_dose_metrics_and_the_dvh_table(tmp_path, capsys):
    needs_compare()
    needs_rtstruct_reader()
    import csv
    import json

    from segmetrics.cli import main

    paths = _box_case(tmp_path)
    out, dvh = tmp_path / "out.json", tmp_path / "dvh.csv"
    code = main(["compare", str(paths["reference"]), str(paths["test"]), "--dose", str(paths["dose"]),
                 "--metrics", "dose", "--dose-levels", "40,60Gy", "--format", "json", "-o", str(out),
                 "--dvh", str(dvh)])
    assert code == 0, capsys.readouterr().err
    values = {r["metric"]: r["value"] for r in json.loads(out.read_text())["records"]}
    # 1 mm pixels whose centres lie in x in [-20, 20) (reference) and [-20, 10) (test): dose 50 + x
    assert values["dose_dmean_reference_gy"] == pytest.approx(49.5)
    assert values["dose_dmean_difference_gy"] == pytest.approx(-5.0)
    assert values["dose_v60gy_reference_percent"] == pytest.approx(25.0)  # x >= 10: 10 of 40 columns
    assert values["dose_v60gy_test_cc"] == 0
    rows = list(csv.DictReader(dvh.open()))
    assert list(rows[0]) == ["structure", "dose_gy", "reference_cc", "reference_percent", "reference_outside_percent",
                             "test_cc", "test_percent", "test_outside_percent"]
    by_dose = {float(row["dose_gy"]): row for row in rows}
    assert float(by_dose[0.0]["reference_percent"]) == pytest.approx(100.0)
    assert float(by_dose[60.0]["reference_cc"]) == pytest.approx(values["dose_v60gy_reference_cc"])


def test_cli_refuses_a_dose_of_another_frame_and_a_dvh_without_dose(tmp_path, capsys):
    needs_compare()
    needs_rtstruct_reader()
    from segmetrics.cli import main

    paths = _box_case(tmp_path, frame=OTHER_FRAME)
    code = main(["compare", str(paths["reference"]), str(paths["test"]), "--dose", str(paths["dose"])])
    error = capsys.readouterr().err
    assert code == 2 and "not the same patient coordinates" in error and error.count("\n") == 1
    code = main(["compare", str(paths["reference"]), str(paths["test"]), "--dvh", str(tmp_path / "d.csv")])
    assert code == 2 and "--dvh" in capsys.readouterr().err
    code = main(["compare", str(paths["reference"]), str(paths["test"]), "--dose-levels", "95%"])
    assert code == 2 and "not a dose in Gy" in capsys.readouterr().err


def _sphere_image(radius_mm, voxel_mm, half_width_mm):
    """A sphere of ``radius_mm`` centred on the patient origin, on a cubic grid of ``voxel_mm``
    voxels whose centres are symmetric about the origin; returns ``(LabelImage, centres r² in mm²)``."""
    n = int(round(2 * half_width_mm / voxel_mm))
    centres = (np.arange(n) - (n - 1) / 2) * voxel_mm
    z, y, x = np.meshgrid(centres, centres, centres, indexing="ij")
    r2 = x ** 2 + y ** 2 + z ** 2
    image = _grid((n, n, n), (voxel_mm,) * 3, (centres[0],) * 3).with_array((r2 <= radius_mm ** 2).astype(np.uint8))
    return image, r2


def _brute_force(doses, voxel_cc, levels=()):
    """The dose statistics of voxel doses, by sorting (the definitions of docs/METRICS.md)."""
    hottest = np.sort(doses)[::-1]
    n = len(hottest)
    values = {"dmean": doses.mean(), "dmin": hottest[-1], "dmax": hottest[math.ceil(0.03 / voxel_cc - 1e-9) - 1]}
    values |= {f"d{p}": hottest[max(1, math.ceil(p * n / 100 - 1e-9)) - 1] for p in (2, 50, 95, 98)}
    values |= {f"v{level:g}gy": 100.0 * np.count_nonzero(doses >= level) / n for level in levels}
    return values


def test_a_sphere_in_a_radial_field_on_a_coarser_dose_grid(tmp_path):
    """Dose 60 − 0.1 r² Gy on a 2 mm grid, a sphere of 15 mm on 0.5 mm voxels. Continuum: the share
    of the sphere within r is (r / R)³, so Dx% = 60 − 0.1 R² (x / 100)^(2/3), Dmean = 60 − 0.06 R².
    Trilinear interpolation of r² overestimates it by at most 3 h² / 4 (h = 2 mm): dose low by <= 0.3 Gy."""
    needs_compare()
    import segmetrics

    radius, h = 15.0, 2.0
    dose_origin = (-23.3,) * 3  # voxel centres off the structure's
    z, y, x = np.meshgrid(*[dose_origin[0] + np.arange(25) * h] * 3, indexing="ij")
    field = np.maximum(60 - 0.1 * (x ** 2 + y ** 2 + z ** 2), 0)  # 0 only in corners no interpolation reaches
    dose = DoseGrid(field, (h,) * 3, dose_origin, tuple(np.eye(3).ravel()))
    image, r2 = _sphere_image(radius, 0.5, 20.0)
    result = segmetrics.compare(image, image, metrics="dose", dose=dose,
                                params=segmetrics.Parameters(dose_levels_gy=(50,)))
    values = result.structures[0]
    inside = r2 <= radius ** 2
    exact = _brute_force(60 - 0.1 * r2[inside], 0.125e-3, levels=(50,))  # the field itself at the voxel centres
    bound = 0.1 * 3 * h ** 2 / 4
    for name in ("dmean", "dmin", "dmax", "d2", "d50", "d95", "d98"):
        measured = values.value(f"dose_{name}_reference_gy")
        assert exact[name] - bound - 1e-9 <= measured <= exact[name] + 1e-9, name
        assert values.value(f"dose_{name}_difference_gy") == 0
    continuum = {"dmean": 60 - 0.06 * radius ** 2, "dmin": 60 - 0.1 * radius ** 2,
                 **{f"d{p}": 60 - 0.1 * radius ** 2 * (p / 100) ** (2 / 3) for p in (2, 50, 95, 98)}}
    for name, value in continuum.items():  # + the voxelised sphere: boundary within half a voxel diagonal
        assert values.value(f"dose_{name}_reference_gy") == pytest.approx(value, abs=bound + 0.2), name
    # V50Gy: r² <= 100, (10 / 15)³ of the sphere
    assert values.value("dose_v50gy_reference_percent") == pytest.approx(100 * (10 / 15) ** 3, abs=1.5)
    assert values.value("dose_volume_reference_cc") == pytest.approx(4 / 3 * math.pi * radius ** 3 / 1000, rel=0.01)


def _rotation(degrees_z, degrees_x):
    a, b = np.radians(degrees_z), np.radians(degrees_x)
    about_z = np.array([[np.cos(a), -np.sin(a), 0], [np.sin(a), np.cos(a), 0], [0, 0, 1]])
    about_x = np.array([[1, 0, 0], [0, np.cos(b), -np.sin(b)], [0, np.sin(b), np.cos(b)]])
    return about_z @ about_x


def test_a_cylinder_in_a_linear_field_on_an_oblique_dose_grid(tmp_path):
    """An RTDOSE grid rotated 30° about z and 20° about x holding 40 + 1.5 z Gy (z in mm): trilinear
    interpolation of a linear field is exact, so every statistic equals the brute force on the
    field at the cylinder's voxel centres (radius 10 mm, z in [-10, 10) mm, axis along z)."""
    needs_compare()
    import segmetrics

    rotation = _rotation(30, 20)
    spacing = 2.5
    origin = -rotation @ np.full(3, 30.0)  # a 60 mm cube of 2.5 mm voxels around the origin
    ijk = np.stack(np.meshgrid(*[np.arange(25)] * 3, indexing="ij"), axis=-1)[..., ::-1]  # (k, j, i) -> (i, j, k)
    points = origin + (ijk * spacing) @ rotation.T  # patient x, y, z of each dose voxel, array (frame, row, column)
    dose_gy = 40 + 1.5 * points[..., 2]
    path = write_rtdose(tmp_path / "oblique.dcm", dose_gy, (spacing,) * 3, origin,
                        orientation=(*rotation[:, 0], *rotation[:, 1]))
    grid = read_rtdose(path)
    np.testing.assert_allclose(np.asarray(grid.direction).reshape(3, 3), rotation, atol=1e-9)
    voxel = 0.5
    centres = (np.arange(40) - 19.5) * voxel
    z, y, x = np.meshgrid(centres, centres, centres, indexing="ij")
    cylinder = (x ** 2 + y ** 2 <= 100.0)
    image = _grid(cylinder.shape, (voxel,) * 3, (centres[0],) * 3)
    test = cylinder & (z < 5)  # the test stops 5 mm short: misses the hottest quarter
    result = segmetrics.compare(image.with_array(cylinder.astype(np.uint8)), image.with_array(test.astype(np.uint8)),
                                metrics="dose", dose=path, params=segmetrics.Parameters(dose_levels_gy=(40,)))
    values = result.structures[0]
    voxel_cc = voxel ** 3 / 1000
    for side, mask in (("reference", cylinder), ("test", test)):
        exact = _brute_force(40 + 1.5 * z[mask], voxel_cc, levels=(40,))
        for name in ("dmean", "dmin", "dmax", "d2", "d50", "d95", "d98"):
            assert values.value(f"dose_{name}_{side}_gy") == pytest.approx(exact[name], abs=2e-4), (side, name)
        assert values.value(f"dose_v40gy_{side}_percent") == pytest.approx(exact["v40gy"])
    assert values.value("dose_v40gy_reference_percent") == pytest.approx(50.0)  # z >= 0: half the height
    assert values.value("dose_dmean_difference_gy") == pytest.approx(1.5 * (-2.5 - 0.0), abs=2e-4)


def test_a_structure_partly_outside_the_dose_grid_is_flagged_with_its_share():
    needs_compare()
    import segmetrics

    image = _grid((40, 10, 10), (1.0, 1.0, 1.0), (0.0, 0.0, -19.5))  # z from -19.5 to 19.5 mm
    mask = image.with_array(np.ones((40, 10, 10), np.uint8))
    # a dose grid from z = 0 up: the upper 20 slices (z = 0.5 .. 19.5) inside, dose 10 + z
    dose = DoseGrid(np.broadcast_to(10 + np.arange(21.0)[:, None, None], (21, 12, 12)).copy(), (1.0, 1.0, 1.0),
                    (-1.0, -1.0, 0.0), tuple(np.eye(3).ravel()))
    result = segmetrics.compare(mask, mask, metrics="dose", dose=dose)
    values = result.structures[0]
    assert values.get("dose_dmean_reference_gy").status == "outside_dose_grid"
    assert values.value("dose_dmean_reference_gy") == pytest.approx(20.0)  # z from 0.5 to 19.5
    assert values.get("dose_volume_reference_cc").status == "ok"
    assert values.value("dose_volume_reference_cc") == pytest.approx(4.0)  # the whole structure
    warning = [note for note in result.notes if "outside the dose grid" in note]
    assert len(warning) == 1 and "50.0% of the reference" in warning[0] and warning[0].startswith("warning:")
    # the DVH table says which share its curves leave out
    from segmetrics.outputs.dvh import dvh_rows

    rows = dvh_rows(result)
    assert {row["reference_outside_percent"] for row in rows} == {50.0} and rows[0]["reference_cc"] == pytest.approx(2.0)


def test_empty_sides_and_missing_dose():
    needs_compare()
    import segmetrics

    image = _grid((10, 10, 10), (1.0, 1.0, 1.0))
    reference = np.zeros((10, 10, 10), np.uint8)
    reference[2:8, 2:8, 2:8] = 1
    dose = DoseGrid(np.full((12, 12, 12), 7.0), (1.0, 1.0, 1.0), (-1.0, -1.0, -1.0), tuple(np.eye(3).ravel()))
    result = segmetrics.compare(image.with_array(reference), image.with_array(np.zeros_like(reference)),
                                labels=[1], metrics="dose", dose=dose, params={"dose_levels_gy": [5]})
    values = result.structures[0]
    assert values.value("dose_dmean_reference_gy") == 7.0 and values.value("dose_dmax_reference_gy") == 7.0
    assert math.isnan(values.value("dose_dmean_test_gy")) and math.isnan(values.value("dose_dmean_difference_gy"))
    assert values.value("dose_volume_test_cc") == 0 and values.value("dose_v5gy_test_cc") == 0
    assert math.isnan(values.value("dose_v5gy_test_percent"))
    assert {v.status for v in values.values} == {"test_empty"}
    # a structure smaller than 0.03 cc has no near-maximum
    tiny = np.zeros_like(reference)
    tiny[5, 5, 5] = 1
    small = segmetrics.compare(image.with_array(tiny), image.with_array(tiny), metrics="dose", dose=dose)
    assert math.isnan(small.structures[0].value("dose_dmax_reference_gy"))
    assert small.structures[0].value("dose_dmean_reference_gy") == 7.0
    # without a dose: nothing from the dose group; a note when asked for by name, refused when alone
    plain = segmetrics.compare(image.with_array(reference), image.with_array(reference))
    assert not any(m.startswith("dose_") for m in plain.metrics()) and not plain.notes
    named = segmetrics.compare(image.with_array(reference), image.with_array(reference), metrics="dice,dose")
    assert named.metrics() == ["dice"] and any("dose metrics skipped" in note for note in named.notes)
    with pytest.raises(ValueError, match="need the planned dose"):
        segmetrics.compare(image.with_array(reference), image.with_array(reference), metrics="dose_dmean_test_gy")


def test_batch_manifest_dose_column_and_report_dvh(tmp_path):
    needs_compare()
    needs_rtstruct_reader()
    pytest.importorskip("matplotlib")
    pytest.importorskip("jinja2")
    from segmetrics.evaluation.batch import read_case_log, read_manifest, read_results, run_batch
    from segmetrics.report import report_batch

    paths = _box_case(tmp_path)
    manifest = tmp_path / "manifest.csv"
    manifest.write_text("case_id,reference,test,dose\n"
                        f"withdose,{paths['reference'].name},{paths['test'].name},{paths['dose'].name}\n"
                        f"nodose,{paths['reference'].name},{paths['test'].name},\n")
    cases = read_manifest(manifest)
    assert cases[0].dose == str(paths["dose"]) and cases[1].dose is None
    job = {"metrics": "dice,msi,dose", "params": None, "resample_to": None, "threshold": None}
    summary = run_batch(cases, tmp_path / "out", progress=False, workers=0, **job)
    assert not summary.failed
    assert any("dose metrics skipped" in note for note in read_case_log(tmp_path / "out")["nodose"]["notes"])
    records = read_results(tmp_path / "out")
    dose_means = [r["value"] for r in records if r["metric"] == "dose_dmean_difference_gy"]
    assert dose_means == [pytest.approx(-5.0)]
    report_batch(tmp_path / "out", cases, tmp_path / "report", job=job)
    assert list((tmp_path / "report" / "figures").glob("worst*_dvh.png"))  # the detailed pair of the case with a dose


def test_axis_by_axis_interpolation_equals_scipy_on_a_random_field_with_flipped_axes():
    """The dose at a structure's voxels (parallel axes: axis by axis; oblique: map_coordinates) against
    scipy's trilinear ``map_coordinates`` at independently computed dose-grid coordinates, on a
    random field stored feet first (x and z axes reversed). numpy and scipy only (Slicer's Python)."""
    from scipy.ndimage import map_coordinates

    from segmetrics.metrics.dose import structure_dose

    rng = np.random.default_rng(7)
    direction = np.diag([-1.0, 1.0, -1.0])
    spacing, origin = (3.0, 2.0, 2.5), (30.0, -20.0, 25.0)
    dose = DoseGrid(rng.uniform(0, 70, (18, 22, 26)), spacing, origin, tuple(direction.ravel()))
    image = _grid((20, 25, 35), (1.3, 1.1, 0.9), (-5.0, -12.0, -8.0))  # origin x, y, z: inside the dose grid
    mask = rng.random(image.array.shape) < 0.3
    k, j, i = np.nonzero(mask)
    patient = np.column_stack([-5.0 + 0.9 * i, -12.0 + 1.1 * j, -8.0 + 1.3 * k])  # x, y, z of the voxel centres
    ijk = (patient - origin) @ direction / np.asarray(spacing)[::-1]  # dose indices (column, row, frame)
    expected = map_coordinates(dose.dose, ijk[:, ::-1].T, order=1)
    sampled = structure_dose(mask, image, dose)
    assert sampled.outside == 0
    np.testing.assert_allclose(sampled.doses, expected, atol=1e-9)  # both in (z, y, x) voxel order
    exact = _brute_force(expected, image.voxel_volume_mm3 / 1000)
    statistics = sampled.statistics(())
    for name in ("dmean", "dmin", "dmax", "d2", "d50", "d95", "d98"):
        assert statistics[name, "gy"] == pytest.approx(exact[name], abs=1e-9), name


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # dicompyler-core calls pydicom APIs pydicom 4 drops
def test_dvh_agrees_with_dicompyler_core_on_the_same_files(tmp_path, monkeypatch):
    """dicompyler-core's DVH (test-only reference) of an RT Structure Set cylinder (radius 15 mm,
    9 planes 2.5 mm apart) in a linear field on a 2.5 mm RTDOSE grid.

    Expected differences: dicompyler samples the dose at the dose grid's pixel centres inside each
    contour (2.5 mm in-plane; ours: 1 mm pixels of the contour grid with the dose interpolated
    trilinearly), bins doses in 1 cGy and reports bin edges (max, min) and centres (mean), and
    sets a plane's volume from its pixel count. Both differ from the exact volume (15.90 cc) by
    the pixel rasterisation of a circle (Gauss circle error: ~1 % for a 15 mm radius at 1 mm
    pixels, up to ~2 % at 2.5 mm), which also moves Dx% by the dose across that boundary shift.
    (dicompyler's ``interpolation_resolution`` is not used: its in-plane rescaling moves the
    pixel centres by (scale − 1) / 2 fine pixels and biased Dmean by 1 Gy in this field.)"""
    needs_compare()
    import pydicom
    import pydicom.dicomio

    pytest.importorskip("matplotlib")  # dicompyler's point-in-polygon test
    needs_rtstruct_reader()
    monkeypatch.setattr(pydicom.dicomio, "read_file", pydicom.dcmread, raising=False)  # dicompyler 0.5.6 on pydicom 3
    dvhcalc = pytest.importorskip("dicompylercore.dvhcalc")
    from test_dicom import circle, write_rtstruct

    import segmetrics

    structures = tmp_path / "cylinder.dcm"
    write_rtstruct(structures, {"cylinder": [circle(15, z, centre=(3.0, -2.0), vertices=360)
                                             for z in np.arange(-10, 10.01, 2.5)]})
    dataset = pydicom.dcmread(structures)
    dataset.StructureSetROISequence[0].ReferencedFrameOfReferenceUID = FRAME
    dataset.save_as(structures)
    spacing, origin = (2.5, 2.5, 2.5), (-40.0, -40.0, -20.0)
    dose = write_rtdose(tmp_path / "dose.dcm", linear_field((17, 33, 33), spacing, origin, (0.5, 0.3, 0.2), 40),
                        spacing, origin)
    ours = segmetrics.compare(str(structures), str(structures), metrics="dose", dose=str(dose)).structures[0]
    theirs = dvhcalc.get_dvh(str(structures), str(dose), 1)
    exact_mean = 40 + 0.5 * 3 + 0.3 * -2  # the mean of a linear field over a cylinder: at its centroid
    assert ours.value("dose_dmean_reference_gy") == pytest.approx(exact_mean, abs=0.02)
    assert ours.value("dose_dmean_reference_gy") == pytest.approx(theirs.mean, abs=0.1)
    assert ours.value("dose_volume_reference_cc") == pytest.approx(theirs.volume, rel=0.02)
    assert ours.value("dose_volume_reference_cc") == pytest.approx(math.pi * 15 ** 2 * 22.5 / 1000, rel=0.02)
    for percent in (2, 50, 95, 98):
        assert ours.value(f"dose_d{percent}_reference_gy") == pytest.approx(theirs.statistic(f"D{percent}").value,
                                                                            abs=0.3), percent
    assert ours.value("dose_dmax_reference_gy") == pytest.approx(theirs.statistic("D0.03cc").value, abs=0.5)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_real_breast_structure_set_heart_agrees_with_dicompyler_core(tmp_path, data_dir, monkeypatch):
    """The real breast RTSTRUCT (dicompyler-core's example) with an RTDOSE written here in its frame of
    reference (a lateral Gaussian falloff plus a gradient along z, 3 x 2.5 x 2.5 mm): our Heart DVH
    on its 1 mm contour grid against dicompyler-core's on the dose grid (test-only reference)."""
    import pydicom
    import pydicom.dicomio

    pytest.importorskip("matplotlib")
    needs_compare()
    needs_rtstruct_reader()
    monkeypatch.setattr(pydicom.dicomio, "read_file", pydicom.dcmread, raising=False)  # dicompyler 0.5.6 on pydicom 3
    dvhcalc = pytest.importorskip("dicompylercore.dvhcalc")
    import segmetrics
    from segmetrics.inputs.readers.rtstruct import read_structure_set

    structures = data_dir / "dicompyler_core" / "rtss.dcm"
    structure_set = read_structure_set(structures)
    heart = next(number for number, name in structure_set.names.items() if name == "Heart")
    points = np.concatenate(structure_set.contours[heart])
    low, high = points.min(axis=0) - 10, points.max(axis=0) + 10
    spacing = (3.0, 2.5, 2.5)
    shape = tuple(int(np.ceil((high[2 - a] - low[2 - a]) / spacing[a])) + 1 for a in range(3))
    z, y, x = np.meshgrid(*(low[2 - a] + np.arange(shape[a]) * spacing[a] for a in range(3)), indexing="ij")
    centre = (low + high) / 2
    field = 50 * np.exp(-((x - centre[0]) ** 2 + (y - centre[1]) ** 2) / (2 * 40 ** 2)) + 0.2 * (z - low[2])
    dose = write_rtdose(tmp_path / "dose.dcm", field, spacing, low, frame=next(iter(structure_set.frames_of_reference)))
    ours = segmetrics.compare(str(structures), str(structures), labels=["Heart"], metrics="dose",
                              dose=str(dose)).structures[0]
    theirs = dvhcalc.get_dvh(str(structures), str(dose), heart)
    assert ours.value("dose_volume_reference_cc") == pytest.approx(theirs.volume, rel=0.005)  # 439.7 vs 439.9 cc
    assert ours.value("dose_dmean_reference_gy") == pytest.approx(theirs.mean, abs=0.05)
    assert ours.value("dose_dmax_reference_gy") == pytest.approx(theirs.statistic("D0.03cc").value, abs=0.1)
    for percent in (2, 50, 95, 98):
        assert ours.value(f"dose_d{percent}_reference_gy") == pytest.approx(theirs.statistic(f"D{percent}").value,
                                                                            abs=0.1), percent
    assert ours.value("dose_dmean_difference_gy") == 0


@pytest.mark.parametrize("levels, message", [("20", "list of doses"), ((20, -5), "dose_levels_gy must be a finite"),
                                             ((math.nan,), "dose_levels_gy must be a finite"), ((True,), "a number")])
def test_bad_dose_levels_are_one_line(levels, message):
    from segmetrics.registry import ParameterError, Parameters

    with pytest.raises(ParameterError, match=message):
        Parameters(dose_levels_gy=levels)
    assert Parameters(dose_levels_gy=[30, 20.5, 30]).dose_levels_gy == (30.0, 20.5)  # repeats once, order kept


# ------------------------------------------------------- reader variants and grid edges
@pytest.mark.parametrize("signed", [False, True])
def test_16_bit_multi_frame_doses_read_as_32_bit_ones(tmp_path, signed):
    spacing, origin = (2.0, 2.0, 2.0), (0.0, 0.0, 0.0)
    dose = linear_field((5, 6, 7), spacing, origin, (0.1, 0.2, 0.3), offset_gy=10)  # 10 .. 15.4 Gy
    path = write_rtdose(tmp_path / "d16.dcm", dose, spacing, origin, scaling=1e-3, BitsAllocated=16, BitsStored=16,
                        HighBit=15, PixelRepresentation=int(signed),
                        PixelData=np.round(dose / 1e-3).astype("<i2" if signed else "<u2").tobytes())
    grid = read_rtdose(path)
    assert grid.dose.dtype == np.float32 and grid.dose.shape == (5, 6, 7)
    np.testing.assert_allclose(grid.dose, dose, atol=1e-5)


def test_absolute_frame_offsets_in_decreasing_order(tmp_path):
    spacing = (2.0, 2.0, 2.0)
    dose = linear_field((4, 3, 3), spacing, (0.0, 0.0, 10.0), (0, 0, 1.0))
    increasing = read_rtdose(write_rtdose(tmp_path / "i.dcm", dose, spacing, (0.0, 0.0, 10.0)))
    decreasing = read_rtdose(write_rtdose(tmp_path / "d.dcm", dose[::-1], spacing, (0.0, 0.0, 16.0),
                                          offsets=[16, 14, 12, 10]))
    assert decreasing.origin == increasing.origin and decreasing.spacing == increasing.spacing
    np.testing.assert_allclose(decreasing.dose, increasing.dose)
    # oblique frames stored top down (relative offsets decreasing along the normal): the same grid
    tilted = _rotation(0, 20)
    orientation = (*tilted[:, 0], *tilted[:, 1])
    up = read_rtdose(write_rtdose(tmp_path / "u.dcm", dose, spacing, (0.0, 0.0, 10.0), orientation=orientation))
    top = np.array([0.0, 0.0, 10.0]) + 6.0 * tilted[:, 2]  # the last frame's position, 3 steps along the normal
    down = read_rtdose(write_rtdose(tmp_path / "o.dcm", dose[::-1], spacing, top, orientation=orientation,
                                    offsets=[0, -2, -4, -6]))
    np.testing.assert_allclose(down.origin, up.origin, atol=1e-9)
    assert down.direction == up.direction and down.spacing == up.spacing
    np.testing.assert_allclose(down.dose, up.dose)
    # absolute offsets of frames that are not axial: DICOM allows only relative ones
    with pytest.raises(ReadError, match="absolute, axial frames only"):
        read_rtdose(write_rtdose(tmp_path / "t.dcm", dose, spacing, (0.0, 0.0, 10.0),
                                 orientation=(*tilted[:, 0], *tilted[:, 1]), offsets=[10, 12, 14, 16]))


@pytest.mark.parametrize("tags, stated, warned", [
    ({}, "physical dose, DoseSummationType PLAN", False),
    ({"DoseType": "EFFECTIVE"}, "Gy(RBE)", False),
    ({"DoseSummationType": "FRACTION"}, "DoseSummationType FRACTION", True),
    ({"DoseSummationType": "BEAM"}, "DoseSummationType BEAM", True),
    ({"DoseType": None, "DoseSummationType": None}, "dose", False),
])
def test_what_the_dose_is_reaches_the_notes(tmp_path, tags, stated, warned):
    """DoseType EFFECTIVE (RBE-weighted) is stated; a dose of one fraction or beam is not the plan's: warned."""
    needs_compare()
    import segmetrics

    path = write_rtdose(tmp_path / "d.dcm", np.full((4, 4, 4), 2.0), (1, 1, 1), (0, 0, 0), **tags)
    image = _grid((2, 2, 2), (1.0, 1.0, 1.0), (1.0, 1.0, 1.0)).with_array(np.ones((2, 2, 2), np.uint8))
    notes = segmetrics.compare(image, image, metrics="dose", dose=path).notes
    dose_note = next(note for note in notes if "interpolated trilinearly" in note)
    assert stated in dose_note
    warnings = [note for note in notes if note.startswith("warning:") and "not the whole plan" in note]
    assert len(warnings) == int(warned)


def test_a_structure_wholly_outside_the_dose_grid_has_no_dose_values():
    """Its voxels' doses are unknown: NaN doses, V and DVH (not the 0 cc of an unirradiated structure)."""
    needs_compare()
    import segmetrics

    dose = DoseGrid(np.full((5, 5, 5), 30.0), (1.0, 1.0, 1.0), (0.0, 0.0, 0.0), tuple(np.eye(3).ravel()))
    mask = np.zeros((6, 6, 6), np.uint8)
    mask[1:4, 1:4, 1:4] = 1
    image = _grid(mask.shape, (1.0, 1.0, 1.0), (50.0, 50.0, 50.0)).with_array(mask)
    result = segmetrics.compare(image, image, metrics="dose", dose=dose, params=segmetrics.Parameters(dose_levels_gy=(20,)))
    values = result.structures[0]
    for name in ("dose_dmean_reference_gy", "dose_v20gy_reference_cc", "dose_v20gy_reference_percent",
                 "dose_v20gy_difference_cc"):
        assert math.isnan(values.value(name)) and values.get(name).status == "outside_dose_grid", name
    assert values.value("dose_volume_reference_cc") == pytest.approx(0.027)
    assert all(math.isnan(row["reference_cc"]) for row in values.extras["dvh"].rows())
    assert any(note.startswith("warning:") and "100.0% of the reference" in note for note in result.notes)


def test_a_cylinder_in_a_cylindrical_field_on_a_coarse_oblique_grid_has_its_closed_form_dvh():
    """Dose 60 − 0.1 (x² + y²) Gy around the axis of a cylinder (radius R = 12 mm, z in [-10, 10) mm,
    0.5 mm voxels) on a 2 mm dose grid rotated 30° about z and 20° about x. Continuum: the share
    within r of the axis is (r / R)², so Dx% = 60 − 0.1 R² x / 100, Dmean = 60 − 0.05 R², and the
    cumulative DVH is V(d) / V = (60 − d) / (0.1 R²). The field is concave: its trilinear
    interpolation lies below it by at most h² / 8 × Σ|∂²D/∂u²| over the grid axes u = 0.2 Gy."""
    needs_compare()
    import segmetrics

    rotation, h, radius = _rotation(30, 20), 2.0, 12.0
    origin = -rotation @ np.full(3, 24.0)  # 25 voxels of 2 mm around the origin
    ijk = np.stack(np.meshgrid(*[np.arange(25)] * 3, indexing="ij"), axis=-1)[..., ::-1]
    points = origin + (ijk * h) @ rotation.T
    field = np.maximum(60 - 0.1 * (points[..., 0] ** 2 + points[..., 1] ** 2), 0)  # 0 only far off the cylinder
    dose = DoseGrid(field, (h,) * 3, tuple(origin), tuple(rotation.ravel()))
    voxel = 0.5
    across, along = (np.arange(52) - 25.5) * voxel, (np.arange(40) - 19.5) * voxel
    z, y, x = np.meshgrid(along, across, across, indexing="ij")
    r2 = x ** 2 + y ** 2
    cylinder = r2 <= radius ** 2
    image = _grid(cylinder.shape, (voxel,) * 3, (across[0], across[0], along[0])).with_array(cylinder.astype(np.uint8))
    result = segmetrics.compare(image, image, metrics="dose", dose=dose, params=segmetrics.Parameters(dose_levels_gy=(50,)))
    values = result.structures[0]
    bound = h ** 2 / 8 * 0.2 * 2
    exact = _brute_force(60 - 0.1 * r2[cylinder], voxel ** 3 / 1000, levels=(50,))
    for name in ("dmean", "dmin", "dmax", "d2", "d50", "d95", "d98"):
        measured = values.value(f"dose_{name}_reference_gy")
        assert exact[name] - bound - 1e-6 <= measured <= exact[name] + 1e-6, name
    continuum = {"dmean": 60 - 0.05 * radius ** 2, "dmin": 60 - 0.1 * radius ** 2,
                 **{f"d{p}": 60 - 0.1 * radius ** 2 * p / 100 for p in (2, 50, 95, 98)}}
    for name, value in continuum.items():  # + the voxelised circle: its boundary within half a pixel diagonal
        assert values.value(f"dose_{name}_reference_gy") == pytest.approx(value, abs=bound + 0.1 * 2 * radius * 0.36), name
    volume_cc = math.pi * radius ** 2 * 20 / 1000
    assert values.value("dose_volume_reference_cc") == pytest.approx(volume_cc, rel=0.01)
    assert values.value("dose_v50gy_reference_percent") == pytest.approx(100 * 100 / radius ** 2, abs=1.0)
    rows = values.extras["dvh"].rows()
    for row in rows:  # the curve: continuum within the dose bound and the circle's pixel share (1 %)
        d = row["dose_gy"]
        share = min(1.0, max(0.0, (60 - d) / (0.1 * radius ** 2)))
        low = min(1.0, max(0.0, (60 - d - bound) / (0.1 * radius ** 2)))  # interpolation lowers doses by <= bound
        assert low * 100 - 1.0 <= row["reference_percent"] <= share * 100 + 1.0, d


def test_a_dose_level_equal_to_the_stored_dose_counts_its_voxels(tmp_path):
    """A uniform 20.3 Gy RTDOSE (a 32-bit float just below 20.3): all of the structure receives 20.3 Gy."""
    needs_compare()
    import segmetrics

    path = write_rtdose(tmp_path / "d.dcm", np.full((4, 4, 4), 20.3), (1, 1, 1), (0, 0, 0))
    image = _grid((2, 2, 2), (1.0, 1.0, 1.0), (1.0, 1.0, 1.0)).with_array(np.ones((2, 2, 2), np.uint8))
    values = segmetrics.compare(image, image, metrics="dose", dose=path,
                                params=segmetrics.Parameters(dose_levels_gy=(20.3,))).structures[0]
    assert values.value("dose_v20.3gy_reference_percent") == 100.0
    assert values.value("dose_v20.3gy_reference_cc") == pytest.approx(0.008)
    at_level = next(row for row in values.extras["dvh"].rows() if row["dose_gy"] == 20.3)
    assert at_level["reference_percent"] == 100.0


def test_an_integer_dose_grid_is_interpolated_in_floating_point():
    """3 Gy per voxel along x on a grid rotated 30°: the oblique path interpolates, it does not truncate."""
    needs_compare()
    import segmetrics

    rotation = _rotation(30, 0)
    field = np.broadcast_to(np.arange(10)[None, None, :] * 3, (10, 10, 10)).copy()  # integers
    image = _grid((3, 3, 3), (1.0, 1.0, 1.0), (-1.0, -1.3, -1.0)).with_array(np.ones((3, 3, 3), np.uint8))
    means = [segmetrics.compare(image, image, metrics="dose", dose=DoseGrid(
        array, (1.0, 1.0, 1.0), tuple(-rotation @ np.full(3, 4.5)), tuple(rotation.ravel()))
    ).structures[0].value("dose_dmean_reference_gy") for array in (field, field.astype(float))]
    # the grid's centre (index 4.5 along its x) is the structure's centre; the field is linear: exact
    assert means == pytest.approx([13.5 + 3 * (rotation.T @ [0, -0.3, 0])[0]] * 2, abs=1e-5)


def test_a_dose_from_another_frame_than_a_dicom_seg_is_refused(data_dir):
    import pydicom

    seg = data_dir / "dcmqi" / "liver.dcm"
    frame = str(pydicom.dcmread(seg, stop_before_pixels=True).FrameOfReferenceUID)

    def grid(frame_of_reference):
        return DoseGrid(np.ones((2, 2, 2)), (1, 1, 1), (0, 0, 0), tuple(np.eye(3).ravel()), frame_of_reference, "plan")

    assert check_dose_frame(grid(frame), {"reference": seg}) == []
    with pytest.raises(ReadError) as error:
        check_dose_frame(grid(OTHER_FRAME), {"test": seg})
    assert f"the test {seg} is in {frame}: not the same patient coordinates" in str(error.value)
    assert "\n" not in str(error.value)
