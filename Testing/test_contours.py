"""Contour-level metrics on RT Structure Set polygons: added path length, in-plane HD and mean.

Second observers are made by perturbing contours at polygon level (shift, scale about the
centre, dropped planes, a cut strip) so that the expected values follow from the perturbation.
"""
import math

import numpy as np
import pytest
from scipy.integrate import quad

from segmetrics import compare
# the contour distances are exact (within 1e-6 mm); the test files keep 6 decimals, which moves each
# point by up to sqrt(2) 5e-7 mm and a distance between two points by twice that from the values drawn
EXACT_MM = 1e-6 + 2 * math.hypot(5e-7, 5e-7)
from segmetrics.registry import Parameters
from test_dicom import circle, rectangle, write_rtstruct
from test_slices import polygon_area

PLANES = (0.0, 3.0, 6.0)


def perimeter(polygon) -> float:
    return float(np.sum(np.linalg.norm(np.roll(polygon, -1, axis=0) - polygon, axis=1)))


def compare_sets(tmp_path, reference: dict, test: dict, **kwargs):
    write_rtstruct(tmp_path / "reference.dcm", reference)
    write_rtstruct(tmp_path / "test.dcm", test)
    return compare(tmp_path / "reference.dcm", tmp_path / "test.dcm", **kwargs)


def test_apl_of_a_square_missing_a_strip_on_one_side(tmp_path):
    side, strip, tolerance = 40.0, 5.0, 1.0
    reference = [rectangle(0, 0, side, side, z) for z in PLANES]
    test = [rectangle(0, 0, side - strip, side, z) for z in PLANES]
    result = compare_sets(tmp_path, {"box": reference}, {"box": test}, metrics="contours",
                          params=Parameters(apl_tolerance_mm=tolerance))["box"]
    # per plane: the cut side, plus the ends of the two adjacent sides farther than the tolerance
    expected_per_plane = side + 2 * (strip - tolerance)
    assert result.value("apl_mm") == pytest.approx(len(PLANES) * expected_per_plane, rel=1e-6)
    assert result.value("apl_fraction") == pytest.approx(expected_per_plane / (4 * side), rel=1e-6)
    assert result.get("apl_mm").params == {"tolerance_mm": tolerance}
    assert result.value("contour_hd_mm") == pytest.approx(strip, abs=EXACT_MM)
    rows = result.extras["contour_slices"]
    assert [row["position_mm"] for row in rows] == pytest.approx(list(PLANES))
    assert all(row["apl_mm"] == pytest.approx(expected_per_plane) for row in rows)


def test_shifted_circle_gives_the_shift_as_hausdorff_and_the_analytic_mean(tmp_path):
    radius, shift = 20.0, 3.0
    reference = [circle(radius, z, vertices=2000) for z in PLANES]
    test = [circle(radius, z, centre=(shift, 0.0), vertices=2000) for z in PLANES]
    result = compare_sets(tmp_path, {"disk": reference}, {"disk": test}, metrics="contours")["disk"]
    assert result.value("contour_hd_mm") == pytest.approx(shift, abs=EXACT_MM)

    def distance(t):
        """From the point at angle t of one circle to the other circle."""
        return abs(math.sqrt(radius ** 2 + shift ** 2 - 2 * radius * shift * math.cos(t)) - radius)

    mean, _ = quad(distance, 0, 2 * math.pi)
    # the polygons lie within their sagitta r (1 - cos(pi / 2000)) of the circles: distances within twice it
    sagitta = radius * (1 - math.cos(math.pi / 2000))
    assert result.value("contour_mean_distance_mm") == pytest.approx(mean / (2 * math.pi), abs=2 * sagitta + EXACT_MM)
    # the reference arc farther than 1 mm from the shifted circle
    far = quad(lambda t: float(distance(t) > 1), 0, 2 * math.pi, limit=200, points=[1.2, 1.9, 4.4, 5.1])[0]
    assert result.value("apl_mm") == pytest.approx(len(PLANES) * far * radius, rel=0.01)


def test_scaled_circle_and_dropped_planes(tmp_path):
    radius, scale = 20.0, 1.1
    reference = [circle(radius, z) for z in PLANES]
    test = [circle(radius * scale, z) for z in PLANES[:1]]  # planes 3 and 6 not contoured by the test
    result = compare_sets(tmp_path, {"disk": reference}, {"disk": test}, metrics="contours")["disk"]
    # every reference point is r (s - 1) = 2 mm > 1 mm away: the whole reference length is added
    assert result.value("apl_mm") == pytest.approx(len(PLANES) * perimeter(reference[0]), rel=1e-6)
    assert result.value("apl_fraction") == pytest.approx(1.0)
    assert result.value("contour_hd_mm") == pytest.approx(radius * (scale - 1), abs=EXACT_MM)
    rows = result.extras["contour_slices"]
    assert [row["test_length_mm"] == 0 for row in rows] == [False, True, True]
    assert math.isnan(rows[1]["hd_mm"])


def test_extra_test_planes_add_nothing_and_empty_sides_have_statuses(tmp_path):
    square = [rectangle(0, 0, 10, 10, z) for z in PLANES]
    result = compare_sets(tmp_path, {"a": square[:1], "b": square, "c": []},
                          {"a": square, "b": [], "c": []}, metrics="contours")
    assert result["a"].value("apl_mm") == 0.0
    assert result["b"].value("apl_mm") == pytest.approx(3 * 40.0)
    assert result["b"].get("contour_hd_mm").status == "test_empty"
    assert result["b"].value("contour_hd_mm") == math.inf
    assert result["c"].get("apl_mm").status == "both_empty"


@pytest.mark.parametrize("shift", [(2.2, 1.3), (3.0, 1.0), (5.0, 1.0)])
def test_polygon_and_rasterised_results_agree_within_one_pixel(tmp_path, shift):
    """The boundary of a rasterised polygon moves by less than a pixel: distances agree within a
    pixel, and the raster APL lies between the polygon APLs at tolerances one pixel apart."""
    from segmetrics.spatial.geometry import LabelImage
    from segmetrics.inputs.io import load_pair

    resolution, tolerance = 0.5, 1.0
    write_rtstruct(tmp_path / "reference.dcm", {"disk": [circle(15.0, z) for z in PLANES]})
    write_rtstruct(tmp_path / "test.dcm", {"disk": [circle(15.0, z, centre=shift) for z in PLANES]})
    polygons = {t: compare(tmp_path / "reference.dcm", tmp_path / "test.dcm", metrics="contours,hd_mm",
                           contour_resolution_mm=resolution, params=Parameters(apl_tolerance_mm=t))["disk"]
                for t in (tolerance - resolution, tolerance, tolerance + resolution)}
    rasters = load_pair(tmp_path / "reference.dcm", tmp_path / "test.dcm", contour_resolution_mm=resolution)
    masks = compare(*(LabelImage(r.array, r.spacing, r.origin, r.direction, r.names) for r in rasters),
                    metrics="contours")["disk"]  # plain label maps: the masks' slice contours
    exact = polygons[tolerance]
    assert exact.value("contour_hd_mm") == pytest.approx(math.hypot(*shift), abs=EXACT_MM)
    assert abs(exact.value("hd_mm") - exact.value("contour_hd_mm")) <= resolution
    for metric in ("contour_hd_mm", "contour_mean_distance_mm"):
        assert abs(masks.value(metric) - exact.value(metric)) <= resolution
    low, high = polygons[tolerance + resolution].value("apl_mm"), polygons[tolerance - resolution].value("apl_mm")
    assert low <= masks.value("apl_mm") <= high


def test_mask_apl_of_a_square_missing_a_strip():
    side, strip = 20, 5
    reference = np.zeros((30, 30), np.uint8)
    reference[5:5 + side, 5:5 + side] = 1
    test = reference.copy()
    test[:, 5 + side - strip:] = 0
    result = compare(reference, test, spacing=(1.0, 1.0), metrics="contours")["1"]
    # marching squares cuts each corner by half a pixel diagonal: within one pixel of the polygon value
    assert result.value("apl_mm") == pytest.approx(side + 2 * (strip - 1.0), abs=1.0)
    assert result.value("contour_hd_mm") == pytest.approx(strip, abs=EXACT_MM)


def test_real_contours_with_dropped_planes_add_their_reference_length(tmp_path, data_dir):
    from segmetrics.inputs.readers.rtstruct import read_structure_set

    real = read_structure_set(data_dir / "dicompyler_core/rtss.dcm")
    heart = real.contours[next(n for n, name in real.names.items() if name == "Heart")]
    planes = sorted({round(float(p[0, 2]), 2) for p in heart})
    dropped = set(planes[::3])
    kept = [p for p in heart if round(float(p[0, 2]), 2) not in dropped]
    result = compare_sets(tmp_path, {"Heart": heart}, {"Heart": kept}, metrics="contours")["Heart"]
    expected = sum(perimeter(p) for p in heart if round(float(p[0, 2]), 2) in dropped)
    assert result.value("apl_mm") == pytest.approx(expected, rel=1e-6)
    assert result.value("contour_hd_mm") == pytest.approx(0.0, abs=1e-6)
    assert result.value("apl_fraction") == pytest.approx(expected / sum(perimeter(p) for p in heart), rel=1e-6)


def _real_heart(data_dir):
    from segmetrics.inputs.readers.rtstruct import read_structure_set

    real = read_structure_set(data_dir / "dicompyler_core/rtss.dcm")
    return real.contours[next(n for n, name in real.names.items() if name == "Heart")]


def _distances_to(boundary, points):
    """Brute force: each point's distance to a closed polygon boundary (shapely, point by point)."""
    shapely = pytest.importorskip("shapely")

    return shapely.distance(shapely.points(points), shapely.LinearRing(boundary))


def _dense(polygon, step=0.02):
    """Points every ``step`` mm along a closed 2-D polygon, and the length each stands for."""
    ring = np.vstack([polygon, polygon[:1]])
    along = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(ring, axis=0), axis=1))])
    count = int(np.ceil(along[-1] / step))
    positions = (np.arange(count) + 0.5) * along[-1] / count
    return np.column_stack([np.interp(positions, along, ring[:, i]) for i in (0, 1)]), along[-1] / count


def test_a_notch_cut_in_a_real_contour(tmp_path, data_dir):
    """The test misses a disc of radius 5 mm around one point of the largest real Heart contour:
    APL, HD and Dice of that plane against brute force on densely sampled boundaries and exact
    areas; the other planes are untouched."""
    shapely = pytest.importorskip("shapely")

    heart = _real_heart(data_dir)
    largest = max(range(len(heart)), key=lambda i: len(heart[i]))
    polygon, z = heart[largest][:, :2], float(heart[largest][0, 2])
    centre, radius, tolerance = polygon[np.argmax(polygon[:, 0])], 5.0, 1.0
    notched = shapely.Polygon(polygon).difference(shapely.Point(centre).buffer(radius, quad_segs=64))
    cut = np.asarray(notched.exterior.coords)[:-1]
    test = [np.column_stack([cut, np.full(len(cut), z)]) if i == largest else p for i, p in enumerate(heart)]
    result = compare_sets(tmp_path, {"Heart": heart}, {"Heart": test}, metrics="msi,contours",
                          params=Parameters(apl_tolerance_mm=tolerance))["Heart"]
    reference_points, weight = _dense(polygon)
    far = _distances_to(cut, reference_points) > tolerance
    assert result.value("apl_mm") == pytest.approx(far.sum() * weight, abs=0.05)
    assert 2 * (radius - tolerance) - 1 < result.value("apl_mm") < 2 * (radius - tolerance) + 1
    test_points, _ = _dense(cut)
    hd = max(_distances_to(cut, reference_points).max(), _distances_to(polygon, test_points).max())
    # samples at most 0.02 mm apart, and the distance changes by at most 1 mm per mm along a contour
    assert hd - EXACT_MM <= result.value("contour_hd_mm") <= hd + 0.01 + EXACT_MM
    rows = result.extras["contour_slices"]
    notch_row = min(rows, key=lambda row: abs(row["position_mm"] - z))
    area, cut_area = polygon_area(polygon), polygon_area(cut)
    assert notch_row["dice"] == pytest.approx(2 * cut_area / (area + cut_area), rel=1e-9)
    others = [row for row in rows if row is not notch_row]
    assert all(row["apl_mm"] == 0 and row["dice"] == pytest.approx(1.0) for row in others)
    msi_rows = result.extras["msi_slices"]
    assert sum(row.msi < 1 for row in msi_rows) == 1 and result.value("msi") < 1


def test_real_contours_shifted_within_the_tolerance_add_no_path(tmp_path, data_dir):
    """Every reference point's translate lies on the test contour: APL is 0 for a shift below the
    tolerance, and no in-plane distance exceeds the shift."""
    heart = _real_heart(data_dir)
    shift = np.array([0.6, -0.3, 0.0])
    result = compare_sets(tmp_path, {"Heart": heart}, {"Heart": [p + shift for p in heart]}, metrics="contours",
                          params=Parameters(apl_tolerance_mm=0.7))["Heart"]
    assert result.value("apl_mm") == 0.0
    assert 0.3 < result.value("contour_hd_mm") <= np.linalg.norm(shift) + EXACT_MM


def test_real_contours_scaled_about_their_centroid(tmp_path, data_dir):
    """Scaling by s about each contour's centroid c moves a point p by (s - 1)|p - c|: no APL at a
    tolerance above the largest move, none of the HD beyond it, areas times s²."""
    heart = _real_heart(data_dir)
    scale = 1.02
    centres = [p.mean(axis=0) for p in heart]
    scaled = [c + scale * (p - c) for p, c in zip(heart, centres)]
    largest_move = max((scale - 1) * np.linalg.norm(p - c, axis=1).max() for p, c in zip(heart, centres))
    result = compare_sets(tmp_path, {"Heart": heart}, {"Heart": scaled}, metrics="contours",
                          params=Parameters(apl_tolerance_mm=largest_move + 0.01))["Heart"]
    assert result.value("apl_mm") == 0.0
    assert result.value("contour_hd_mm") <= largest_move + EXACT_MM
    for row in result.extras["contour_slices"]:
        assert row["test_length_mm"] == pytest.approx(scale * row["reference_length_mm"], rel=1e-6)  # 6 decimals in the file
        assert row["dice"] <= 2 / (1 + scale ** 2) + 1e-9  # at most the smaller area over the mean area


@pytest.mark.parametrize("seed", range(3))
def test_contours_of_pixels_far_longer_than_wide_take_bounded_samples(seed):
    """In-plane pixels of 1e-4 x 1e6 mm (allowed spacings): boundaries were sampled every 0.1 mm,
    1e11 samples for a few pixels (the run never ended); now at most MAX_SEGMENT_PIECES per pixel
    side. Identical random masks still give distances and added path length 0, and the slice rows
    the reference length of each slice's boundary (brute force: the marching-squares contours)."""
    import SimpleITK as sitk

    from segmetrics.spatial.mesh import contours_2d

    rng = np.random.default_rng(seed)
    mask = (rng.random((3, 4, 3)) < 0.5).astype(np.uint8)
    mask[1, 1, 1] = 1
    images = []
    for _side in range(2):
        image = sitk.GetImageFromArray(mask)
        image.SetSpacing((1e6, 1.0, 1e-4))  # x, y, z: slices along y cut 1e-4 x 1e6 mm pixels
        images.append(image)
    (result,) = compare(*images, metrics="contours", params={"msi_axis": 1}).structures
    assert result.value("contour_hd_mm") == 0 and result.value("contour_mean_distance_mm") == 0
    assert result.value("apl_mm") == 0
    rows = result.extras["contour_slices"]
    expected = [sum(c.length for c in contours_2d(mask[:, k, :], (1e-4, 1e6))) for k in range(4) if mask[:, k, :].any()]
    assert [row["reference_length_mm"] for row in rows] == pytest.approx(expected, rel=1e-9)


def test_cuboids_with_planes_one_side_lacks_follow_the_closed_form_and_say_so(tmp_path):
    """A 10 mm square prism inside one 1 mm wider: inwards every point is 1 mm away, outwards the
    distance along each side of 12 mm is sqrt(1 + max(0, |x| - 5)²). The reference lacks plane 12,
    the test plane 9: the distances are over planes 0-6 and say that planes are missing."""
    side, margin, tolerance = 10.0, 1.0, 1.5
    reference = [rectangle(0, 0, side, side, z) for z in (0.0, 3.0, 6.0, 9.0)]
    test = [rectangle(-margin, -margin, side + margin, side + margin, z) for z in (0.0, 3.0, 6.0, 12.0)]
    result = compare_sets(tmp_path, {"box": reference, "same": reference}, {"box": test, "same": reference},
                          metrics="contours", params=Parameters(apl_tolerance_mm=tolerance))
    box = result["box"]
    outer = side + 2 * margin
    mean_out = (side * margin + margin ** 2 * (math.sqrt(2) + math.asinh(1))) / outer
    q95_out = math.hypot(margin, (0.95 * outer - side) / 2)
    expected = {"contour_hd_mm": margin * math.sqrt(2), "contour_hd95_mm": q95_out, "contour_median_mm": margin,
                "contour_mean_distance_mm": (margin + mean_out) / 2,
                "contour_hd_reference_to_test_mm": margin, "contour_hd_test_to_reference_mm": margin * math.sqrt(2),
                "contour_hd95_reference_to_test_mm": margin, "contour_hd95_test_to_reference_mm": q95_out,
                "contour_mean_reference_to_test_mm": margin, "contour_mean_test_to_reference_mm": mean_out}
    for metric, value in expected.items():
        assert box.value(metric) == pytest.approx(value, abs=1e-9), metric
        assert box.get(metric).status == "missing_planes"
        assert box.get(metric).params["reference_only_planes_mm"] == [9.0]
        assert box.get(metric).params["test_only_planes_mm"] == [12.0]
    assert box.get("contour_median_mm").params["test_to_reference_mm"] == pytest.approx(margin)
    # APL counts the missing plane: the whole reference square there
    assert box.value("apl_mm") == pytest.approx(4 * side) and box.get("apl_mm").status == "ok"
    assert "missing_planes" in box.status
    same = result["same"]
    assert same.status == "ok" and same.value("contour_hd_mm") == 0 and same.value("contour_hd95_mm") == 0
    rows = {row["position_mm"]: row for row in box.extras["contour_slices"]}
    assert rows[0.0]["hd_mm"] == pytest.approx(margin * math.sqrt(2))
    assert rows[0.0]["mean_distance_mm"] == pytest.approx((margin + mean_out) / 2)
    assert math.isnan(rows[9.0]["hd_mm"]) and rows[9.0]["apl_mm"] == pytest.approx(4 * side)


@pytest.mark.parametrize("seed", range(6))
def test_slice_boundaries_on_the_slices_box_are_the_boundary_segments_of_the_whole_slice(seed):
    """The mask path's segments (:func:`segmetrics.spatial.mesh.contour_segments_2d` on the box of the
    slice's pixels) are, number for number and in order, :func:`boundary_segments` of the slice's
    marching-squares rings (:func:`segmetrics.spatial.mesh.contours_2d` of the whole slice): no two
    edges of those rings run along one another, so nothing is left out. Random masks with holes,
    diagonal touches and pixels on the slice's border."""
    from segmetrics.metrics.contours import boundary_segments
    from segmetrics.spatial.mesh import contour_segments_2d, contours_2d

    rng = np.random.default_rng(seed)
    spacing = (0.7, 1.3)
    mask = np.zeros((14, 17), bool)
    mask[rng.integers(0, 3):rng.integers(10, 15), rng.integers(0, 3):rng.integers(12, 18)] = True
    mask &= rng.random(mask.shape) < 0.7
    rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
    box = mask[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1]
    expected = boundary_segments([c.points for c in contours_2d(mask, spacing)])
    assert len(expected) > 20
    np.testing.assert_array_equal(contour_segments_2d(box, spacing, (rows[0], cols[0])), expected)
    np.testing.assert_array_equal(contour_segments_2d(mask, spacing), expected)
    assert contour_segments_2d(np.zeros((3, 4), bool), spacing).shape == (0, 2, 2)
