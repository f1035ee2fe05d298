"""Even-odd regions of planar polygons in numpy (:mod:`segmetrics.inputs.polygons`) against shapely,
the independent reference: areas, intersection areas, connected parts, and the polygon MSI and
per-plane Dice built on them (synthetic shapes and the real RT structure set)."""
import json
import math
import subprocess
import sys

import numpy as np
import pytest

from segmetrics.inputs.polygons import even_odd_area, even_odd_region, intersection_area, rings_by_plane
from segmetrics.metrics.contours import polygon_dice
from segmetrics.metrics.msi import _Object, _score_objects, polygon_slice
from segmetrics.spatial import mesh



@pytest.fixture
def shapely():
    """The reference library: a test asking for it skips without it (Slicer's bundled packages)."""
    return pytest.importorskip("shapely")


def square(x, y, size):
    return np.array([[x, y], [x + size, y], [x + size, y + size], [x, y + size]], dtype=float)


def shapely_region(rings):
    """The even-odd region of ``rings`` by shapely: the faces of the noded ring edges that a ray
    from inside crosses an odd number of times (counted by brute force on each face's edges)."""
    import shapely

    rings = [np.asarray(ring, dtype=float) for ring in rings if len(ring) >= 3]
    if not rings:
        return shapely.Polygon()
    edges = shapely.union_all([shapely.LineString(np.vstack([ring, ring[:1]])) for ring in rings])
    faces = shapely.get_parts(shapely.polygonize(shapely.get_parts(edges)))
    faces = faces[shapely.area(faces) > 0]
    odd = [sum(_crossings(face, ring) for ring in rings) % 2 == 1 for face in faces]
    return shapely.union_all(faces[np.array(odd, dtype=bool)]) if any(odd) else shapely.Polygon()


def _crossings(face, ring) -> int:
    """How many edges of ``ring`` a ray from a point inside ``face`` crosses (shapely, edge by
    edge: an edge drawn twice counts twice; the ray's odd direction misses every vertex)."""
    import shapely

    start = shapely.get_coordinates(shapely.point_on_surface(face))[0]
    ray = shapely.LineString([start, start + 1e6 * np.array([math.cos(0.1234567), math.sin(0.1234567)])])
    edges = shapely.linestrings(np.stack([ring, np.roll(ring, -1, axis=0)], axis=1))
    return int(np.count_nonzero(shapely.intersects(ray, edges)))


def as_shapely(region):
    import shapely

    return shapely.union_all([shapely.Polygon(part.rings[0], part.rings[1:]) for part in region.parts]) \
        if region.parts else shapely.Polygon()


def canonical(ring, counterclockwise):
    """A shapely ring's points (closing point dropped) turned and started at the lowest vertex
    (first coordinate, then second), as :func:`even_odd_region` gives its rings: the MSI breaks
    ties between equally near points by their order."""
    import shapely

    if ring.is_ccw != counterclockwise:
        ring = shapely.LinearRing(np.asarray(ring.coords)[::-1])
    points = np.asarray(ring.coords)[:-1]
    return np.roll(points, -int(np.lexsort((points[:, 1], points[:, 0]))[0]), axis=0)


def shapely_objects(region):
    """The objects and part areas the polygon MSI scores, from shapely's parts of the region (in
    the order of :func:`even_odd_region`)."""
    import shapely

    parts = [g for g in shapely.get_parts(region) if isinstance(g, shapely.Polygon) and g.area > 0]
    parts.sort(key=lambda g: tuple(canonical(g.exterior, True)[0]))
    objects = []
    for g in parts:
        rings = [canonical(g.exterior, True)] + sorted((canonical(h, False) for h in g.interiors), key=lambda r: tuple(r[0]))
        objects.append(_Object([mesh.closed_contour(ring, 0.25) for ring in rings], np.asarray(g.centroid.coords[0])))
    return objects, parts


def shapely_polygon_slice(reference_rings, test_rings, il=1.0, ol=1.0):
    import shapely

    (ref_objects, ref_parts), (test_objects, test_parts) = (shapely_objects(shapely_region(rings))
                                                            for rings in (reference_rings, test_rings))
    overlap = np.array([[shapely.intersection(r, t).area for t in test_parts] for r in ref_parts]).reshape(
        len(ref_parts), len(test_parts))
    sizes = [np.array([g.area for g in parts]) for parts in (ref_parts, test_parts)]
    return _score_objects(ref_objects, test_objects, overlap, *sizes, il, ol, "none")


def assert_same_region(rings):
    import shapely

    region, reference = even_odd_region(rings), shapely_region(rings)
    assert region.area == pytest.approx(reference.area, rel=1e-9, abs=1e-9)
    assert even_odd_area(rings) == pytest.approx(reference.area, rel=1e-9, abs=1e-9)
    assert shapely.symmetric_difference(as_shapely(region), reference).area <= 1e-9 * max(1.0, reference.area)
    parts = [g for g in shapely.get_parts(reference) if g.area > 0]
    assert sorted(p.area for p in region.parts) == pytest.approx(sorted(g.area for g in parts), rel=1e-9)
    assert sorted(len(p.rings) for p in region.parts) == sorted(1 + len(g.interiors) for g in parts)
    return region


SHAPES = {
    "square": [square(0, 0, 10)],
    "hole": [square(0, 0, 10), square(3, 3, 3)],
    "nested_island": [square(0, 0, 10), square(2, 2, 6), square(4, 4, 2)],
    "two_components": [square(0, 0, 4), square(6, 0, 4)],
    "shared_edge": [square(0, 0, 4), square(4, 0, 4)],
    "shared_part_of_an_edge": [square(0, 0, 4), square(4, 1, 2)],
    "touching_corners": [square(0, 0, 4), square(4, 4, 4)],
    "hole_touching_the_outer_ring": [square(0, 0, 10), np.array([[0, 5], [3, 3], [3, 7]], float)],
    "vertex_on_an_edge": [square(0, 0, 10), np.array([[10, 5], [14, 3], [14, 7]], float)],
    "overlapping": [square(0, 0, 10), square(5, 5, 10)[::-1]],
    "given_twice": [square(0, 0, 10), square(0, 0, 10)],
    "figure_eight": [np.array([[0, 0], [10, 10], [10, 0], [0, 10]], float)],
    "keyhole": [np.array([[0, 0], [10, 0], [10, 10], [5, 10], [5, 7], [7, 7], [7, 3], [3, 3], [3, 7], [5, 7],
                          [5, 10], [0, 10]], float)],
    "out_and_back": [square(0, 0, 10), np.array([[0, 0], [10, 0], [10, 10], [10, 0]], float)],
    "repeated_points": [np.array([[0, 0], [0, 0], [10, 0], [10, 10], [10, 10], [0, 10]], float)],
}


@pytest.mark.parametrize("name", SHAPES)
def test_regions_and_parts_as_shapely(shapely, name):
    assert_same_region(SHAPES[name])


@pytest.mark.parametrize("first", SHAPES)
def test_intersection_areas_as_shapely(shapely, first):
    """Every pair of shapes, moved so that they share edges, vertices, or lie apart: the area both
    hold is shapely's, and exactly 0 where they only touch."""
    for second in SHAPES.values():
        for shift in ((0, 0), (10, 0), (10, 10), (3, 4), (20, 0)):
            moved = [ring + shift for ring in second]
            expected = shapely.intersection(shapely_region(SHAPES[first]), shapely_region(moved)).area
            value = intersection_area(SHAPES[first], moved)
            assert value == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_random_crossing_repeated_and_out_and_back_rings_as_shapely(shapely):
    rng = np.random.default_rng(5)
    for _ in range(60):
        rings = [rng.uniform(-2, 32, (int(rng.integers(3, 8)), 2)) for _ in range(int(rng.integers(1, 4)))]
        rings += [rings[0]] * int(rng.integers(0, 2)) + [np.vstack([rings[-1], rings[-1][-2:0:-1]])]
        assert_same_region(rings)


@pytest.mark.parametrize("name", SHAPES)
def test_polygon_msi_and_dice_as_with_shapely_regions(shapely, name):
    """Each shape against every other one slightly moved: the polygon MSI of a plane and its Dice."""
    for other in SHAPES.values():
        test = [ring * 1.05 + (0.7, -0.4) for ring in other]
        expected = shapely_polygon_slice(SHAPES[name], test, 2.0, 1.0)
        value = polygon_slice(even_odd_region(SHAPES[name]), even_odd_region(test), 2.0, 1.0)
        assert value[0] == pytest.approx(expected[0], rel=1e-9) and value[1] == pytest.approx(expected[1], rel=1e-9)
        assert value[2:] == expected[2:]
        reference_region, test_region = shapely_region(SHAPES[name]), shapely_region(test)
        total = reference_region.area + test_region.area
        dice = 2 * shapely.intersection(reference_region, test_region).area / total if total else math.nan
        assert polygon_dice(even_odd_region(SHAPES[name]), even_odd_region(test)) == pytest.approx(dice, rel=1e-9, nan_ok=True)


PAIRS = (("Tumor Bed", "Tumor Bed Block"), ("Heart", "Lt Lung"), ("Breast", "BODY"), ("Scar", "Tumor Bed"))


@pytest.mark.parametrize("reference_name, test_name", PAIRS)
def test_real_structure_set_planes_as_with_shapely_regions(shapely, data_dir, reference_name, test_name):
    """Two structures of the real breast RT structure set compared plane by plane (one as the
    reference, the other as the test): polygon MSI and Dice as with shapely, to 1e-9."""
    from segmetrics.inputs.readers.rtstruct import read_structure_set

    real = read_structure_set(data_dir / "dicompyler_core/rtss.dcm")
    by_name = {name: real.contours[number] for number, name in real.names.items()}
    _axes, planes = rings_by_plane(by_name[reference_name], by_name[test_name])
    assert planes
    for reference, test in planes.values():
        assert_same_region(reference)
        expected = shapely_polygon_slice(reference, test)
        value = polygon_slice(even_odd_region(reference), even_odd_region(test))
        assert value[0] == pytest.approx(expected[0], rel=1e-9) and value[1] == pytest.approx(expected[1], rel=1e-9)
        assert value[2:] == expected[2:]
        reference_region, test_region = shapely_region(reference), shapely_region(test)
        total = reference_region.area + test_region.area
        dice = 2 * shapely.intersection(reference_region, test_region).area / total
        assert polygon_dice(even_odd_region(reference), even_odd_region(test)) == pytest.approx(dice, rel=1e-9)


def test_closed_form_areas_parts_and_rings():
    """Without a reference library: the areas, parts and rings of shapes worked out by hand."""
    expected = {"hole": (91, [(91, 2)]), "nested_island": (68, [(4, 1), (64, 2)]), "shared_edge": (32, [(32, 1)]),
                "touching_corners": (32, [(16, 1), (16, 1)]), "hole_touching_the_outer_ring": (94, [(94, 2)]),
                "overlapping": (150, [(75, 1), (75, 1)]), "given_twice": (0, []), "figure_eight": (50, [(25, 1), (25, 1)]),
                "keyhole": (84, [(84, 2)]), "out_and_back": (100, [(100, 1)])}
    for name, (area, parts) in expected.items():
        region = even_odd_region(SHAPES[name])
        assert region.area == pytest.approx(area, abs=1e-12), name
        assert sorted((round(part.area, 9), len(part.rings)) for part in region.parts) == parts, name
    assert intersection_area([square(0, 0, 10)], [square(4, 7, 10)]) == pytest.approx(6 * 3, abs=1e-12)
    assert intersection_area(SHAPES["hole"], [square(0, 0, 4.5)]) == pytest.approx(4.5 ** 2 - 1.5 ** 2, abs=1e-12)
    assert intersection_area([square(0, 0, 10)], [square(10, 0, 10)]) == 0.0  # a shared edge only


def test_the_region_does_not_depend_on_how_its_rings_are_given():
    """Rings in another order, run the other way, from another vertex: the same parts, rings and
    points in the same order (the polygon MSI breaks ties between equally near points by order)."""
    rings = SHAPES["nested_island"] + [square(20, 0, 5), np.array([[30, 0], [34, 0], [32, 3]], float)]
    shuffled = [np.roll(ring[::-1], 2, axis=0) for ring in rings[::-1]]
    first, second = even_odd_region(rings), even_odd_region(shuffled)
    assert len(first.parts) == len(second.parts) == 4
    for one, other in zip(first.parts, second.parts):
        assert len(one.rings) == len(other.rings) and one.area == other.area
        assert all(np.array_equal(a, b) for a, b in zip(one.rings, other.rings))
        assert np.allclose(one.centroid, other.centroid, rtol=0, atol=1e-12)
    for part in first.parts:  # the region on the left: outer rings counterclockwise, holes clockwise
        areas = [0.5 * np.sum(r[:, 0] * np.roll(r[:, 1], -1) - np.roll(r[:, 0], -1) * r[:, 1]) for r in part.rings]
        assert areas[0] > 0 and all(a < 0 for a in areas[1:])


def test_real_planes_without_shapely_give_the_values_of_shapely_regions(shapely, data_dir):
    """The polygon MSI and Dice computed with shapely unimportable (as in 3D Slicer) equal those
    of the shapely regions, plane by plane, on the real structure set."""
    script = f"""
import json, sys
sys.modules["shapely"] = None
from segmetrics.inputs.polygons import even_odd_region, rings_by_plane
from segmetrics.inputs.readers.rtstruct import read_structure_set
from segmetrics.metrics.contours import polygon_dice
from segmetrics.metrics.msi import polygon_slice
real = read_structure_set({str(data_dir / "dicompyler_core/rtss.dcm")!r})
by_name = {{name: real.contours[number] for number, name in real.names.items()}}
planes = rings_by_plane(by_name["Tumor Bed"], by_name["Tumor Bed Block"])[1].values()
regions = [(even_odd_region(reference), even_odd_region(test)) for reference, test in planes]
print(json.dumps([[polygon_slice(*pair)[0], polygon_dice(*pair)] for pair in regions]))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    from segmetrics.inputs.readers.rtstruct import read_structure_set

    real = read_structure_set(data_dir / "dicompyler_core/rtss.dcm")
    by_name = {name: real.contours[number] for number, name in real.names.items()}
    planes = rings_by_plane(by_name["Tumor Bed"], by_name["Tumor Bed Block"])[1].values()
    expected = []
    for reference, test in planes:
        reference_region, test_region = shapely_region(reference), shapely_region(test)
        total = reference_region.area + test_region.area
        expected.append([shapely_polygon_slice(reference, test)[0],
                         2 * shapely.intersection(reference_region, test_region).area / total])
    assert np.allclose(json.loads(done.stdout), expected, rtol=1e-9, atol=0)


def test_polygon_msi_of_random_crossing_rings_as_with_shapely_regions(shapely):
    """Random rings on both sides (crossing each other and themselves, one given twice): the
    polygon MSI of the plane as with shapely's regions."""
    rng = np.random.default_rng(11)
    for _ in range(30):
        sides = [[rng.uniform(-2, 32, (int(rng.integers(3, 8)), 2)) for _ in range(int(rng.integers(1, 4)))]
                 for _ in range(2)]
        sides[0] += [sides[0][0]] * int(rng.integers(0, 2))
        expected = shapely_polygon_slice(*sides, 1.5, 1.0)
        value = polygon_slice(even_odd_region(sides[0]), even_odd_region(sides[1]), 1.5, 1.0)
        assert value[0] == pytest.approx(expected[0], rel=1e-9) and value[1] == pytest.approx(expected[1], rel=1e-9)
        assert value[2:] == expected[2:]
