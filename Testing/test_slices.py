"""Per-slice table (MSI, added path length, Dice, HD of each slice) and MSI on planar polygons.

Second observers are perturbed polygons written as RT Structure Sets, so that every expected value
follows from the perturbation (concentric circles: one distance everywhere; dropped planes: the
edge rules), and polygon values are checked against their rasterised counterparts.
"""
import csv
import math

import numpy as np
import pytest

from segmetrics import LabelImage, compare
from segmetrics.inputs.io import load_pair
from segmetrics.metrics.msi import weight_function
from segmetrics.registry import Parameters
from segmetrics.outputs.slices import MSI_DETAIL_COLUMNS, SLICE_COLUMNS, slice_rows
from test_dicom import circle, rectangle, write_rtstruct

PLANES = (0.0, 3.0, 6.0)
#: Largest slope of the MSI weight WF(d, l) over d, per mm at level l = 1: (1/10) e^(-1/2).
WF_SLOPE = 0.1 * math.exp(-0.5)


def polygon_area(polygon) -> float:
    x, y = polygon[:, 0], polygon[:, 1]
    return 0.5 * abs(float(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1))))


def plain(image):
    """The rasterised label map without its polygons: compared as masks."""
    return LabelImage(image.array, image.spacing, image.origin, image.direction, image.names)


def test_polygon_msi_of_concentric_circles_and_dropped_planes(tmp_path):
    """A test circle of radius R around a reference of radius r: every test point is R - r outside
    the reference and is the nearest partner of the reference points on its ray, so BLD = R - r
    and MSI = WF(R - r, ol) on each plane; a plane the test leaves out scores 0 with the reference
    length as its weight."""
    r, big, ol = 15.0, 16.5, 3.0
    write_rtstruct(tmp_path / "reference.dcm", {"disk": [circle(r, z) for z in PLANES]})
    write_rtstruct(tmp_path / "test.dcm", {"disk": [circle(big, z) for z in PLANES[:2]]})
    result = compare(tmp_path / "reference.dcm", tmp_path / "test.dcm", metrics="msi,contours",
                     params=Parameters(msi_ol=ol))["disk"]
    expected = weight_function(big - r, ol)
    rows = slice_rows(result)
    assert [row["msi"] for row in rows] == pytest.approx([expected, expected, 0.0], abs=1e-4)
    assert [row["status"] for row in rows] == ["ok", "ok", "test_empty"]
    test_length, reference_length = 2 * math.pi * big, 2 * math.pi * r
    overall = 2 * test_length * expected / (2 * test_length + reference_length)
    assert result.value("msi") == pytest.approx(overall, rel=1e-3)
    assert result.get("msi").params["geometry"] == "polygons" and "geometry" not in result.get("msi_3d").params
    # the other columns of the same rows: exact polygon areas for Dice, the radial gap for HD
    dice = 2 * polygon_area(circle(r, 0)) / (polygon_area(circle(r, 0)) + polygon_area(circle(big, 0)))
    assert [row["dice"] for row in rows] == pytest.approx([dice, dice, 0.0], rel=1e-9)
    assert [row["hd_mm"] for row in rows[:2]] == pytest.approx([big - r] * 2, abs=0.05) and math.isnan(rows[2]["hd_mm"])
    assert [row["position_mm"] for row in rows] == pytest.approx(list(PLANES))


def test_polygon_rows_sit_on_the_slices_the_polygons_were_rasterised_on(tmp_path):
    write_rtstruct(tmp_path / "reference.dcm", {"box": [rectangle(0, 0, 20, 20, z) for z in (6.0, 9.0, 12.0)],
                                                "disk": [circle(8.0, 12.0, centre=(40, 0))]})
    write_rtstruct(tmp_path / "test.dcm", {"box": [rectangle(1, 0, 20, 20, z) for z in (3.0, 6.0, 9.0)],
                                           "disk": [circle(8.0, 12.0, centre=(40, 0))]})
    result = compare(tmp_path / "reference.dcm", tmp_path / "test.dcm", metrics="msi,contours")
    reference, test = load_pair(tmp_path / "reference.dcm", tmp_path / "test.dcm")
    union = reference.mask(1) | test.mask(1)
    occupied = [int(k) for k in np.flatnonzero(union.any(axis=(1, 2)))]
    rows = slice_rows(result["box"])
    assert [row["slice"] for row in rows] == occupied == [0, 1, 2, 3]
    assert [row["status"] for row in rows] == ["reference_empty", "ok", "ok", "test_empty"]
    assert [row["slice"] for row in slice_rows(result["disk"])] == [3]


@pytest.mark.parametrize("shape, resolution", [("shift", 1.0), ("scale", 1.0), ("strip", 0.5)])
def test_polygon_and_rasterised_msi_agree_within_the_stated_tolerance(tmp_path, shape, resolution):
    """docs/METRICS.md: |MSI(polygons) - MSI(rasterised)| <= 0.061 max(il, ol) x pixel (mm): the
    rasterised boundary is within a pixel of the polygon, and WF changes by at most WF_SLOPE x l
    per mm."""
    reference = [circle(15.0, z) for z in PLANES] if shape != "strip" else [rectangle(0, 0, 30, 30, z) for z in PLANES]
    test = {"shift": [circle(15.0, z, centre=(2.2, 1.3)) for z in PLANES],
            "scale": [circle(16.5, z) for z in PLANES],
            "strip": [rectangle(0, 0, 25, 30, z) for z in PLANES]}[shape]
    write_rtstruct(tmp_path / "reference.dcm", {"s": reference})
    write_rtstruct(tmp_path / "test.dcm", {"s": test})
    params = Parameters(msi_il=3, msi_ol=3)
    polygons = compare(tmp_path / "reference.dcm", tmp_path / "test.dcm", metrics="msi", params=params,
                       contour_resolution_mm=resolution)["s"]
    rasters = load_pair(tmp_path / "reference.dcm", tmp_path / "test.dcm", contour_resolution_mm=resolution)
    masks = compare(*map(plain, rasters), metrics="msi", params=params)["s"]
    assert "geometry" not in masks.get("msi").params
    assert polygons.value("msi") < 0.95  # far from the trivial 1
    assert abs(polygons.value("msi") - masks.value("msi")) <= WF_SLOPE * 3 * resolution


@pytest.mark.needs("rich")
def test_slices_csv_on_two_structure_sets(tmp_path):
    from segmetrics.cli import main

    write_rtstruct(tmp_path / "reference.dcm", {"a": [circle(10.0, z) for z in PLANES], "b": [circle(5.0, 0.0)]})
    write_rtstruct(tmp_path / "test.dcm", {"a": [circle(10.0, z, centre=(0.5, 0)) for z in PLANES], "b": []})
    out = tmp_path / "slices.csv"
    assert main(["compare", str(tmp_path / "reference.dcm"), str(tmp_path / "test.dcm"), "--metrics", "msi,contours",
                 "--slices", str(out), "--format", "csv", "-o", str(tmp_path / "r.csv")]) == 0
    with out.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == ["structure", *SLICE_COLUMNS, *MSI_DETAIL_COLUMNS]
    assert [(r["structure"], r["status"]) for r in rows] == [("a", "ok")] * 3 + [("b", "test_empty")]
    for row in rows[:3]:
        assert float(row["apl_mm"]) == 0.0  # a 0.5 mm shift is within the 1 mm tolerance
        assert float(row["hd_mm"]) == pytest.approx(0.5, abs=0.05)
        assert 0.9 < float(row["dice"]) < 1 and 0.99 < float(row["msi"]) < 1
    assert float(rows[3]["apl_mm"]) == pytest.approx(2 * math.pi * 5.0, rel=1e-3)
    assert float(rows[3]["dice"]) == 0.0 and float(rows[3]["msi"]) == 0.0


def test_mask_slice_rows_against_brute_force():
    rng = np.random.default_rng(3)
    reference = np.zeros((5, 24, 24), bool)
    reference[1:4, 4:18, 5:19] = True
    test = np.roll(reference, 2, axis=2) & (rng.random(reference.shape) > 0.05)
    test[4, 8:12, 8:12] = True  # a slice the reference does not hold
    spacing = (2.0, 0.5, 0.5)
    result = compare(reference, test, spacing=spacing, metrics="msi,contours")["1"]
    rows = slice_rows(result)
    assert [row["slice"] for row in rows] == [1, 2, 3, 4]
    for row in rows:
        k = row["slice"]
        dice = 2 * np.count_nonzero(reference[k] & test[k]) / (np.count_nonzero(reference[k]) + np.count_nonzero(test[k]))
        assert row["dice"] == pytest.approx(dice, rel=1e-12)
        assert row["position_mm"] == k * spacing[0]
        assert math.isfinite(row["msi"]) and math.isfinite(row["apl_mm"])
    assert rows[-1]["status"] == "reference_empty" and rows[-1]["apl_mm"] == 0.0 and math.isnan(rows[-1]["hd_mm"])


def test_slice_positions_are_the_inputs_without_float_noise(tmp_path):
    """Mask rows: index x spacing rounded to 1e-6 mm (3 x 1.4 is 4.199999999999999 in floats);
    polygon rows: the planes' z as written in the file (the mean of 97 equal z values was not)."""
    reference = np.zeros((5, 12, 12), bool)
    reference[:, 3:9, 3:9] = True
    rows = slice_rows(compare(reference, reference, spacing=(1.4, 0.5, 0.5), metrics="msi,contours")["1"])
    assert [row["position_mm"] for row in rows] == [0.0, 1.4, 2.8, 4.2, 5.6]
    planes = (-122.44, -119.44, -116.44)
    write_rtstruct(tmp_path / "reference.dcm", {"a": [circle(10.0, z, (153.3, -201.7), 97) for z in planes]})
    write_rtstruct(tmp_path / "test.dcm", {"a": [circle(9.0, z, (154.1, -201.7), 101) for z in planes]})
    result = compare(tmp_path / "reference.dcm", tmp_path / "test.dcm", metrics="msi,contours")["a"]
    assert [row["position_mm"] for row in slice_rows(result)] == list(planes)
    assert [row.position_mm for row in result.extras["msi_slices"]] == list(planes)  # exact before the table


def test_slice_columns_of_one_group_only_are_nan():
    reference = np.zeros((3, 12, 12), bool)
    reference[:, 3:9, 3:9] = True
    rows = slice_rows(compare(reference, reference, spacing=(1, 1, 1), metrics="contours")["1"])
    assert len(rows) == 3 and all(math.isnan(row["msi"]) and row["dice"] == 1.0 and row["status"] == "ok"
                                  for row in rows)


def test_slicer_slice_table_shows_the_same_columns():
    pytest.importorskip("slicer", reason="slicer-core (MRML Python wrapping) is not installed")
    from segmetrics import mrml

    z, y, x = np.mgrid[:8, :20, :20]
    reference = ((y - 10) ** 2 + (x - 10) ** 2 <= 36) & (z > 0) & (z < 7)
    test = np.roll(reference, 1, axis=2)
    test[3] = False  # a slice the test misses
    scene = mrml.create_headless_scene().scene
    nodes = [mrml.add_segmentation_from_label_image(scene, LabelImage(a.astype(np.uint8), (2, 1, 1), names={1: "disk"}), n)
             for a, n in ((reference, "reference"), (test, "test"))]
    outputs = mrml.run(*nodes, metrics=["msi", "contours"])
    table = outputs.slice_tables["disk"]
    columns = [table.GetColumnName(i) for i in range(table.GetNumberOfColumns())]
    assert columns == [*SLICE_COLUMNS, *MSI_DETAIL_COLUMNS]
    rows = slice_rows(outputs.result["disk"])
    for column in ("slice", "msi", "apl_mm", "dice", "hd_mm"):
        values = [table.GetTable().GetColumnByName(column).GetValue(r) for r in range(table.GetNumberOfRows())]
        assert values == pytest.approx([row[column] for row in rows], nan_ok=True)
    dice = [table.GetTable().GetColumnByName("dice").GetValue(r) for r in range(table.GetNumberOfRows())]
    expected = [2 * np.count_nonzero(reference[k] & test[k]) / (np.count_nonzero(reference[k]) + np.count_nonzero(test[k]))
                for k in range(1, 7)]
    assert dice == pytest.approx(expected)
    assert table.GetColumnUnitLabel("apl_mm") == "mm"


def test_polygon_rows_on_a_flipped_image_grid_use_its_stored_slices(tmp_path):
    """An --image grid stored with z and y reversed: the rows' slices are those of the stored
    rasterised masks (the canonical view the metrics see is flipped back)."""
    import SimpleITK as sitk

    grid = sitk.GetImageFromArray(np.zeros((8, 40, 40), np.uint8))
    grid.SetSpacing((1.0, 1.0, 3.0))
    grid.SetDirection((1, 0, 0, 0, -1, 0, 0, 0, -1))
    grid.SetOrigin((-20.0, 20.0, 21.0))  # z planes 21, 18, ..., 0 mm from slice 0 to 7
    sitk.WriteImage(grid, str(tmp_path / "grid.nrrd"))
    write_rtstruct(tmp_path / "reference.dcm", {"disk": [circle(8.0, z) for z in (3.0, 6.0, 9.0)]})
    write_rtstruct(tmp_path / "test.dcm", {"disk": [circle(8.0, z, centre=(1, 0)) for z in (6.0, 9.0, 12.0)]})
    result = compare(tmp_path / "reference.dcm", tmp_path / "test.dcm", metrics="msi,contours",
                     image=tmp_path / "grid.nrrd")["disk"]
    reference, test = load_pair(tmp_path / "reference.dcm", tmp_path / "test.dcm", image=tmp_path / "grid.nrrd")
    assert [int(k) for k in np.flatnonzero(reference.mask(1).any(axis=(1, 2)))] == [4, 5, 6]
    rows = slice_rows(result)
    assert [row["slice"] for row in rows] == [3, 4, 5, 6]  # planes 12, 9, 6, 3 mm
    assert [row["position_mm"] for row in rows] == pytest.approx([12.0, 9.0, 6.0, 3.0])
    assert [row["status"] for row in rows] == ["reference_empty", "ok", "ok", "test_empty"]
    assert result.get("msi").params["axis"] == 0


@pytest.mark.parametrize("msi", [{"msi_units": "pixel"}, {"msi_convention": "fda"}])
def test_mask_msi_of_two_structure_sets_joins_the_polygon_rows_slice_by_slice(tmp_path, msi):
    """MSI in pixels or the fda convention runs on the rasterised masks (rows at slice x spacing),
    the contour rows on the polygons (plane positions, here 5 to 11 mm): one row per slice, not two."""
    write_rtstruct(tmp_path / "reference.dcm", {"a": [rectangle(0, 0, 10, 10, z) for z in (5.0, 7.0, 9.0)]})
    write_rtstruct(tmp_path / "test.dcm", {"a": [rectangle(1, 0, 11, 10, z) for z in (7.0, 9.0, 11.0)]})
    result = compare(tmp_path / "reference.dcm", tmp_path / "test.dcm", metrics="msi,contours", params=msi)["a"]
    rows = slice_rows(result)
    assert [(row["slice"], row["position_mm"]) for row in rows] == [(0, 5.0), (1, 7.0), (2, 9.0), (3, 11.0)]
    assert [row["status"] for row in rows] == ["test_empty", "ok", "ok", "reference_empty"]
    assert [row["dice"] for row in rows] == pytest.approx([0.0, 2 * 90 / 200, 2 * 90 / 200, 0.0])  # 1 mm shift
    assert all(math.isfinite(row["msi"]) for row in rows)


def test_msi_rows_along_another_axis_than_the_contour_planes_are_never_joined_with_them(tmp_path):
    """--msi-axis 1 with the fda MSI on two structure sets: MSI rows are y slices, contour rows z
    planes; a y slice and a z plane with the same index (or index and position) are not one slice."""
    write_rtstruct(tmp_path / "reference.dcm", {"a": [rectangle(0, 0, 10, 10, z) for z in (0.0, 1.0, 2.0)]})
    write_rtstruct(tmp_path / "test.dcm", {"a": [rectangle(1, 0, 11, 10, z) for z in (0.0, 1.0, 2.0)]})
    result = compare(tmp_path / "reference.dcm", tmp_path / "test.dcm", metrics="msi,contours",
                     params={"msi_convention": "fda", "msi_axis": 1})["a"]
    rows = slice_rows(result)
    assert not any(math.isfinite(row["msi"]) and math.isfinite(row["dice"]) for row in rows)
    assert sorted(row["position_mm"] for row in rows if math.isfinite(row["dice"])) == [0.0, 1.0, 2.0]
    assert [row["dice"] for row in rows if math.isfinite(row["dice"])] == pytest.approx([0.9] * 3)
    assert len([row for row in rows if math.isfinite(row["msi"])]) == len(result.extras["msi_slices"])


def test_planes_beyond_the_image_grid_are_left_out_as_when_rasterised(tmp_path):
    """An --image series of 3 slices (z = 3, 6, 9 mm) and contours on z = 0 ... 12 mm: the planes
    at 0 and 12 mm lie on no slice, so the polygon rows (and the structure's values) hold the
    three planes on the grid only, as the rasterised masks do; concentric circles give one MSI
    value on each of them."""
    import SimpleITK as sitk

    grid = sitk.GetImageFromArray(np.zeros((3, 60, 60), np.uint8))
    grid.SetSpacing((1.0, 1.0, 3.0))
    grid.SetOrigin((-30.0, -30.0, 3.0))
    sitk.WriteImage(grid, str(tmp_path / "grid.nrrd"))
    planes = (0.0, 3.0, 6.0, 9.0, 12.0)
    write_rtstruct(tmp_path / "reference.dcm", {"disk": [circle(15.0, z) for z in planes]})
    write_rtstruct(tmp_path / "test.dcm", {"disk": [circle(16.5, z) for z in planes[:-1]]})
    result = compare(tmp_path / "reference.dcm", tmp_path / "test.dcm", metrics="msi,contours",
                     image=tmp_path / "grid.nrrd")["disk"]
    rows = slice_rows(result)
    assert [row["slice"] for row in rows] == [0, 1, 2]
    assert [row["position_mm"] for row in rows] == pytest.approx([3.0, 6.0, 9.0])
    expected = weight_function(1.5, Parameters().msi_ol)
    assert [row["msi"] for row in rows] == pytest.approx([expected] * 3, abs=1e-4)
    assert result.value("msi") == pytest.approx(expected, abs=1e-4)  # the plane at 12 mm (test empty) is not in it
    ring = np.asarray(circle(15.0, 0.0))[:, :2]
    length = float(np.linalg.norm(ring - np.roll(ring, 1, axis=0), axis=1).sum())
    # 1.5 mm apart, beyond the 1 mm default tolerance: the whole reference length of the three planes only
    assert result.value("apl_mm") == pytest.approx(3 * length, rel=1e-6)


def _random_polygon(rng, z):
    """A star-shaped polygon of 3-11 vertices, 3-12 mm from a centre near the origin, on plane z."""
    count = int(rng.integers(3, 12))
    angles, radii, centre = np.sort(rng.uniform(0, 2 * np.pi, count)), rng.uniform(3, 12, count), rng.uniform(-5, 5, 2)
    return np.column_stack([centre[0] + radii * np.cos(angles), centre[1] + radii * np.sin(angles), np.full(count, z)])


def _pixel_box(rng, z):
    """A rectangle whose edges run through pixel centres of the 0.7 mm test grid (corner -17 mm)."""
    (x0, y0), (x1, y1) = -17.0 + 0.7 * rng.integers(10, 24, 2), -17.0 + 0.7 * rng.integers(25, 40, 2)
    return rectangle(x0, y0, x1, y1, z)


@pytest.mark.parametrize("seed, first_slice_mm, polygon", [(0, -2.0, _random_polygon), (1, -2.0, _random_polygon),
                                                           (2, -1.0, _random_polygon), (3, -1.0, _random_polygon),
                                                           (4, -2.0, _pixel_box), (5, -2.0, _pixel_box)])
def test_polygon_values_and_rows_do_not_depend_on_how_the_image_grid_is_stored(tmp_path, seed, first_slice_mm, polygon):
    """Random polygons rasterised on one --image grid stored five ways (flipped, slices transposed
    into the y or x array axis, padded): the rasterised masks are the same voxels (resampled back),
    every value and each contour plane's row are the same, and a row's slice is the stored slice
    the plane was rasterised on. A grid whose slices were not its first array axis was refused
    ('not parallel to the image slices (oblique image ...)'); with the first slice at -1 mm every
    contour plane (even mm) lies halfway between two slices, and rounding half to even put it on
    the other physical slice when the grid was stored flipped (Dice 0.46 -> 0.41); boxes with
    edges through pixel centres lost or gained the centres on an edge by the storage (the
    half-open rule of the fill went by index directions)."""
    import SimpleITK as sitk

    rng = np.random.default_rng(seed)
    planes = [2.0 * k for k in range(int(rng.integers(1, 4)), int(rng.integers(5, 9)))]
    write_rtstruct(tmp_path / "reference.dcm", {"a": [polygon(rng, z) for z in planes]})
    write_rtstruct(tmp_path / "test.dcm", {"a": [polygon(rng, z) for z in planes if rng.random() < 0.8]})
    base = sitk.GetImageFromArray(np.zeros((12, 50, 50), np.uint8))
    base.SetSpacing((0.7, 0.7, 2.0))
    base.SetOrigin((-17.0, -17.0, first_slice_mm))
    storages = {"as is": base, "z flipped": sitk.Flip(base, [False, False, True]),
                "z along x": sitk.PermuteAxes(base, [2, 0, 1]),
                "z along y, flipped": sitk.Flip(sitk.PermuteAxes(base, [0, 2, 1]), [True, True, False]),
                "z along x, padded": sitk.ConstantPad(sitk.PermuteAxes(base, [2, 1, 0]), [1, 2, 0], [0, 1, 3], 0)}
    found = {}
    for name, grid in storages.items():
        path = tmp_path / f"grid{len(found)}.nrrd"
        sitk.WriteImage(grid, str(path))
        reference, _test = load_pair(tmp_path / "reference.dcm", tmp_path / "test.dcm", image=path)
        stored = sitk.GetImageFromArray(reference.array)
        stored.CopyInformation(grid)
        back = sitk.GetArrayFromImage(sitk.Resample(stored, base, sitk.Transform(), sitk.sitkNearestNeighbor, 0))
        result = compare(tmp_path / "reference.dcm", tmp_path / "test.dcm", metrics="msi,contours,overlap",
                         image=path)["a"]
        rows = slice_rows(result)
        axis = result.get("msi").params["axis"]
        filled = np.flatnonzero(reference.array.any(axis=tuple(a for a in range(3) if a != axis)))
        assert {row["slice"] for row in rows if row["reference_length_mm"] > 0} == set(filled.tolist())
        found[name] = (back, {v.metric: v.value for v in result.values},
                       {row["position_mm"]: {k: v for k, v in row.items() if k != "slice"} for row in rows})
    masks, values, by_plane = found.pop("as is")
    assert masks.any() and sorted(by_plane) == pytest.approx(sorted(planes))
    for name, (other_masks, other_values, other_rows) in found.items():
        np.testing.assert_array_equal(other_masks, masks, err_msg=name)
        assert other_values == pytest.approx(values, rel=1e-9, nan_ok=True), name
        assert other_rows.keys() == by_plane.keys(), name
        for position, row in by_plane.items():
            _assert_same_row(other_rows[position], row, (name, position))


def _assert_same_row(other: dict, row: dict, context) -> None:
    """Two per-slice rows hold the same fields, their numbers equal to 1e-9 (relative; NaN equal
    to NaN) and their other fields (names, statuses) equal."""
    assert other.keys() == row.keys(), context
    numbers = [k for k, v in row.items() if isinstance(v, float | int) and not isinstance(v, bool)]
    assert [other[k] for k in numbers] == pytest.approx([row[k] for k in numbers], rel=1e-9, abs=1e-12, nan_ok=True), context
    assert {k: other[k] for k in row if k not in numbers} == {k: row[k] for k in row if k not in numbers}, context


@pytest.mark.parametrize("seed", range(4))
def test_mask_rows_and_lesion_bins_do_not_depend_on_how_the_masks_are_stored(seed):
    """Random masks stored permuted, flipped, padded and moved (SimpleITK keeps every voxel's
    physical place): each row's ``slice`` is a slice of the stored array along the reported MSI
    axis, and the row of each physical slice (found with SimpleITK's index -> point) holds the same
    values; the lesion counts per size bin are the same too."""
    import SimpleITK as sitk

    rng = np.random.default_rng(seed)
    shape = tuple(int(n) for n in rng.integers(4, 11, 3))
    images = []
    for _side in range(2):
        mask = np.zeros(shape, np.uint8)
        for _box in range(3):
            low = rng.integers(0, np.array(shape) - 1)
            mask[tuple(slice(a, a + int(n)) for a, n in zip(low, rng.integers(1, 6, 3)))] = 1
        mask[tuple(rng.integers(0, n, 4) for n in shape)] = 1
        image = sitk.GetImageFromArray(mask)
        image.SetSpacing((0.7, 1.0, 2.5))
        images.append(image)
    order, flips = [int(a) for a in rng.permutation(3)], [bool(f) for f in rng.integers(0, 2, 3)]
    shift = rng.uniform(-50, 50, 3)
    stored = []
    for image in images:
        moved = sitk.ConstantPad(sitk.Flip(sitk.PermuteAxes(image, order), flips), [1, 0, 2], [0, 2, 1], 0)
        moved.SetOrigin(tuple(np.add(moved.GetOrigin(), shift)))
        stored.append(moved)
    msi_axis = int(rng.integers(0, 3))  # array axis of the original storage, then of the moved one
    params = {"msi_convention": "fda"} if seed % 2 else {}
    found = []
    for pair, axis, offset in ((images, msi_axis, np.zeros(3)), (stored, 2 - order.index(2 - msi_axis), shift)):
        result = compare(*pair, metrics="msi,contours,lesions", params={**params, "msi_axis": axis})["1"]
        assert result.get("msi").params["axis"] == axis
        rows = {}
        for row in slice_rows(result):
            index = [0, 0, 0]
            index[2 - axis] = row["slice"]  # ITK index of the stored slice
            position = np.subtract(pair[0].TransformIndexToPhysicalPoint(index), offset)[2 - msi_axis]
            rows[round(float(position), 6)] = {k: v for k, v in row.items() if k not in ("slice", "position_mm")}
        bins = {v.metric: v.value for v in result.values if v.metric.startswith("lesion_")}
        found.append((rows, bins))
    (rows, bins), (moved_rows, moved_bins) = found
    assert rows and moved_rows.keys() == rows.keys()
    for position, row in rows.items():
        _assert_same_row(moved_rows[position], row, position)
    assert moved_bins == pytest.approx(bins, nan_ok=True) and "lesion_tp_small" in bins


def test_sagittal_contours_on_an_axially_stored_grid(tmp_path):
    """Contours drawn on sagittal planes (x = 0, 2, 4, 6 mm) placed on an --image grid stored in
    axial slices were refused ('not parallel to the image slices'); now they are filled along the
    grid's x axis: the values equal those on the structure sets' own contour grid (same 1 mm pixel
    centres), and the rows are numbered by the stored x slices (x = -2 + 2k mm)."""
    import SimpleITK as sitk

    def sagittal(radius, x, centre=(0.0, 0.0)):
        angles = np.linspace(0, 2 * np.pi, 200, endpoint=False)
        return np.column_stack([np.full(200, x), centre[0] + radius * np.cos(angles), centre[1] + radius * np.sin(angles)])

    write_rtstruct(tmp_path / "reference.dcm", {"a": [sagittal(8.0, x) for x in (0.0, 2.0, 4.0)]})
    write_rtstruct(tmp_path / "test.dcm", {"a": [sagittal(9.0, x, (1.0, 0.0)) for x in (2.0, 4.0, 6.0)]})
    grid = sitk.GetImageFromArray(np.zeros((30, 30, 10), np.uint8))
    grid.SetSpacing((2.0, 1.0, 1.0))
    grid.SetOrigin((-2.0, -15.0, -15.0))
    sitk.WriteImage(grid, str(tmp_path / "grid.nrrd"))
    own, placed = (compare(tmp_path / "reference.dcm", tmp_path / "test.dcm", metrics="msi,contours,overlap",
                           image=image)["a"] for image in (None, tmp_path / "grid.nrrd"))
    assert {v.metric: v.value for v in placed.values} == pytest.approx({v.metric: v.value for v in own.values},
                                                                       rel=1e-9)
    rows = slice_rows(placed)
    assert placed.get("msi").params["axis"] == 2
    assert [(row["slice"], row["position_mm"]) for row in rows] == [(1, 0.0), (2, 2.0), (3, 4.0), (4, 6.0)]
    assert [row["status"] for row in rows] == ["test_empty", "ok", "ok", "reference_empty"]
