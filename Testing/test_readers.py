"""The readers of segmetrics.inputs.readers: the dispatcher picks a file's reader from its content,
and the RT Structure Set's polygon geometry (even-odd fill, area, point test) is plain numpy, checked
against closed forms and brute force."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk
from PIL import Image

from segmetrics.inputs import readers
from segmetrics.inputs.io import ReadError, load_label_image
from segmetrics.inputs.polygons import even_odd_area, fill_even_odd, inside_even_odd
from segmetrics.inputs.readers import metaimage, nifti, nrrd, pictures

ARRAY = np.zeros((4, 5, 6), np.uint8)
ARRAY[1:3, 1:4, 2:5] = 1
ARRAY[2, 2, 2] = 2


# ---------------------------------------------------------------------------------- dispatcher
@pytest.mark.parametrize("written, renamed, reader", [
    ("a.nrrd", "a.nii", nrrd), ("a.nrrd", "a", nrrd), ("a.mha", "a.img", metaimage), ("a.mha", "a.nrrd", metaimage),
])
def test_the_reader_is_picked_from_the_content_not_the_name(tmp_path, written, renamed, reader):
    """A NRRD named .nii, a MetaImage named .img ...: read by their own readers, with their
    geometry (a name-based dispatch sent them to the wrong header checks, or to none)."""
    image = sitk.GetImageFromArray(ARRAY)
    image.SetSpacing((0.5, 0.7, 2.5))
    sitk.WriteImage(image, str(tmp_path / written))
    (tmp_path / written).rename(tmp_path / renamed)
    assert readers.reader_for(tmp_path / renamed) is reader
    read = load_label_image(tmp_path / renamed)
    assert np.array_equal(read.array, ARRAY) and read.spacing == pytest.approx((2.5, 0.7, 0.5))


def test_a_nifti_file_under_another_name_is_known_and_refused_in_one_line(tmp_path):
    """ITK reads NIfTI only under its own names: the file is recognised and the message says so."""
    sitk.WriteImage(sitk.GetImageFromArray(ARRAY), str(tmp_path / "a.nii.gz"))
    (tmp_path / "a.nii.gz").rename(tmp_path / "a.data")
    assert readers.reader_for(tmp_path / "a.data") is nifti
    with pytest.raises(ReadError, match=r"a.data: is a NIfTI file, but ITK reads NIfTI only under a .nii"):
        load_label_image(tmp_path / "a.data")


def test_a_picture_is_known_by_its_signature(tmp_path):
    Image.fromarray(ARRAY[1] * 100).save(tmp_path / "mask.png")
    (tmp_path / "mask.png").rename(tmp_path / "mask")
    assert readers.reader_for(tmp_path / "mask") is pictures
    assert np.array_equal(load_label_image(tmp_path / "mask").array, ARRAY[1] * 100)


def test_a_segmentation_saved_as_plain_nrrd_keeps_its_segment_names(tmp_path):
    """Slicer's segment fields in a NRRD header make it a segmentation whatever its name (read as a
    plain image it lost every name, and its structures became 1, 2, ...)."""
    slicerio = pytest.importorskip("slicerio")
    sample = Path(slicerio.__file__).parent / "data" / "Segmentation.seg.nrrd"
    (tmp_path / "segmentation.nrrd").write_bytes(sample.read_bytes())
    named = load_label_image(sample)
    renamed = load_label_image(tmp_path / "segmentation.nrrd")
    assert renamed.names == named.names and renamed.names
    assert np.array_equal(renamed.array, named.array)


# ---------------------------------------------------------------------------- polygon geometry
def brute_force_fill(rings, shape) -> np.ndarray:
    """Pixel centres (row, column) inside by the even-odd rule, one centre and one edge at a time:
    an edge counts when it spans the centre's row half-open (lower end in, upper end out) and
    crosses that row at or left of the centre (so a centre on an edge is inside on the edge of
    lower column and outside on the higher one)."""
    inside = np.zeros(shape, bool)
    for row in range(shape[0]):
        for column in range(shape[1]):
            crossings = 0
            for ring in rings:
                for (r0, c0), (r1, c1) in zip(ring, np.roll(ring, -1, axis=0)):
                    if min(r0, r1) <= row < max(r0, r1):
                        crossings += c0 + (row - r0) * (c1 - c0) / (r1 - r0) <= column
            inside[row, column] = crossings % 2 == 1
    return inside


def random_rings(rng, whole_numbers: bool):
    """1-3 random rings, some self-crossing, with a repeated ring or an out-and-back ring; with
    ``whole_numbers`` their vertices are pixel centres, so that centres fall on edges and vertices."""
    rings = [rng.uniform(-2, 14, (int(rng.integers(3, 8)), 2)) for _ in range(int(rng.integers(1, 4)))]
    rings += [rings[0]] * int(rng.integers(0, 2)) + [np.vstack([rings[-1], rings[-1][-2:0:-1]])]
    return [np.round(ring) for ring in rings] if whole_numbers else rings


@pytest.mark.parametrize("whole_numbers", [False, True])
def test_the_raster_fill_is_the_brute_force_even_odd_rule(whole_numbers):
    """The scanline fill of RT Structure Set contours against a centre-by-centre even-odd count,
    including centres exactly on edges and vertices (the half-open rule)."""
    rng = np.random.default_rng(11)
    for _ in range(40):
        rings = random_rings(rng, whole_numbers)
        assert np.array_equal(fill_even_odd(rings, (12, 12)), brute_force_fill(rings, (12, 12)))


def test_the_point_test_is_the_brute_force_even_odd_rule():
    """Random points (on no edge) against the brute-force count along the other axis' ray."""
    rng = np.random.default_rng(12)
    for _ in range(40):
        rings = random_rings(rng, whole_numbers=False)
        points = rng.uniform(-3, 15, (50, 2))
        expected = [bool(brute_force_fill([ring - point for ring in rings], (1, 1))[0, 0]) for point in points]
        assert inside_even_odd(points, rings).tolist() == expected


#: Inner radius of the pentagram of circumradius 1 (where its edges cross).
INNER = np.cos(2 * np.pi / 5) / np.cos(np.pi / 5)


def regular_star(points: int, step: int) -> np.ndarray:
    angles = np.pi / 2 + np.arange(points) * 2 * np.pi * step / points
    return np.column_stack([np.cos(angles), np.sin(angles)])


@pytest.mark.parametrize("rings, area", [
    ([np.array([[0, 0], [0, 2], [2, 2], [2, 0]])], 4.0),
    ([np.array([[0, 0], [0, 4], [4, 4], [4, 0]]), np.array([[1, 1], [1, 2], [2, 2], [2, 1]])], 15.0),  # a hole
    ([np.array([[0, 0], [0, 4], [4, 4], [4, 0]])] * 2, 0.0),  # given twice: cancels
    ([np.array([[0, 0], [2, 2], [2, 0], [0, 2]])], 2.0),  # a bow tie: two triangles of 1
    ([np.array([[0, 0], [3, 0], [3, 3], [3, 0]])], 0.0),  # out and back along its own edges
    ([np.array([[0, 0], [1, 1], [2, 2]])], 0.0),  # on a line
    # the pentagram's even-odd region: the star's decagon without its central pentagon (circumradius 1,
    # inner radius r): 5 r sin(pi/5) - 5/2 r² sin(2 pi/5)
    ([regular_star(5, 2)], 5 * INNER * np.sin(np.pi / 5) - 2.5 * INNER ** 2 * np.sin(2 * np.pi / 5)),
])
def test_even_odd_area_closed_forms(rings, area):
    assert even_odd_area(rings) == pytest.approx(area, abs=1e-12)


def test_even_odd_area_against_a_fine_raster():
    """Random self-crossing and repeated rings: the exact area against the brute-force count of a
    fine grid's centres (error below one cell per unit of boundary)."""
    rng = np.random.default_rng(13)
    scale = 40  # cells per unit
    for _ in range(10):
        rings = random_rings(rng, whole_numbers=False)
        cells = fill_even_odd([(ring + 3) * scale for ring in rings], (18 * scale, 18 * scale)).sum() / scale ** 2
        perimeter = sum(np.linalg.norm(np.diff(np.vstack([r, r[:1]]), axis=0), axis=1).sum() for r in rings)
        assert even_odd_area(rings) == pytest.approx(cells, abs=2 * perimeter / scale)


def test_a_structure_set_is_read_without_shapely_or_scikit_image(tmp_path):
    """3D Slicer ships neither: reading and rasterising an RT Structure Set must not need them."""
    from test_dicom import rectangle, write_rtstruct

    write_rtstruct(tmp_path / "rt.dcm", {"box": [rectangle(0.5, 0.5, 10.5, 10.5, z) for z in (0, 1, 2)]})
    script = ("import sys\nsys.modules['shapely'] = sys.modules['skimage'] = None\n"
              "from segmetrics.inputs.io import load_label_image\n"
              f"print(int(load_label_image({str(tmp_path / 'rt.dcm')!r}).mask(1).sum()))\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["300"]
