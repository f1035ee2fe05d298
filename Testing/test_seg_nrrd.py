"""3D Slicer segmentations (.seg.nrrd) read by segmetrics.inputs.readers.seg_nrrd, without slicerio.

Every file here is written by hand (header text and raw or gzip voxels) from known masks and a
known geometry, so the masks, names and voxel positions are checked against that construction.
slicerio (a test extra) and 3D Slicer's own storage node (slicer-core) read or write the same
files as independent references; they are skipped where not installed.
"""
import gzip
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from segmetrics.inputs import readers
from segmetrics.inputs.readers import files
from segmetrics.inputs.io import ReadError, load_label_image
from segmetrics.spatial.geometry import LabelImage, resample_nearest

SHAPE = (6, 20, 24)  # (z, y, x)
SPACING_XYZ = (0.8, 0.9, 2.5)
ORIGIN = (-12.5, 30.0, 7.25)
LPS_FROM_RAS = np.diag([-1.0, -1.0, 1.0])


def box(z, y, x):
    """A boolean mask of SHAPE holding one box of voxels."""
    mask = np.zeros(SHAPE, bool)
    mask[z, y, x] = True
    return mask


LIVER = box(slice(1, 5), slice(3, 15), slice(4, 18))
TUMOUR = box(slice(2, 4), slice(5, 10), slice(6, 10))  # inside the liver
VESSEL = box(slice(0, 6), slice(8, 12), slice(2, 22))  # crosses the liver: overlaps both


def extent(mask) -> str:
    """A mask's bounding box as 3D Slicer writes it: ``i0 i1 j0 j1 k0 k1`` (empty: ``0 -1 0 -1 0 -1``)."""
    indices = np.argwhere(mask)
    if not len(indices):
        return "0 -1 0 -1 0 -1"
    low, high = indices.min(axis=0)[::-1], indices.max(axis=0)[::-1]
    return " ".join(f"{a} {b}" for a, b in zip(low, high))


def segment(name, label_value, layer, mask=None, **other):
    """The ``Segment<i>_<key>`` properties of one segment (its extent from ``mask`` when given)."""
    properties = {"ID": f"Segment_{name}", "Name": name, "LabelValue": label_value, "Layer": layer}
    if mask is not None:
        properties["Extent"] = extent(mask)
    properties.update({"Color": "0.5 0.25 1", "Tags": "Segmentation.Status:inprogress|", **other})
    return {key: value for key, value in properties.items() if value is not None}


def write_seg_nrrd(path, layers, segments, directions=np.eye(3), space="left-posterior-superior",
                   encoding="raw", dtype=np.uint8):
    """A .seg.nrrd of ``layers`` ((layer, z, y, x) for a 4-D file, (z, y, x) for a 3-D one; ``dtype``
    uint8 or float32) whose voxel (i, j, k) sits at ORIGIN + i a + j b + k c in ``space``, with a, b, c
    the columns of ``directions`` scaled by SPACING_XYZ; ``segments``: each segment's properties."""
    layers = np.asarray(layers, dtype)
    layered = layers.ndim == 4
    vectors = [f"({','.join(repr(float(v)) for v in np.asarray(directions)[:, axis] * SPACING_XYZ[axis])})"
               for axis in range(3)]
    sizes = [layers.shape[0], *layers.shape[:0:-1]] if layered else list(layers.shape[::-1])
    lines = ["NRRD0004", "# written by hand", "type: " + {np.uint8: "unsigned char", np.float32: "float"}[dtype],
             f"dimension: {len(sizes)}", f"space: {space}", "sizes: " + " ".join(map(str, sizes)),
             "space directions: " + ("none " if layered else "") + " ".join(vectors),
             "kinds: " + ("list " if layered else "") + "domain domain domain", "endian: little",
             f"encoding: {encoding}", f"space origin: ({','.join(map(repr, ORIGIN))})"]
    for index, properties in enumerate(segments):
        lines += [f"Segment{index}_{key}:={value}" for key, value in properties.items()]
    lines += ["Segmentation_MasterRepresentation:=Binary labelmap", "Segmentation_ReferenceImageExtentOffset:=0 0 0"]
    data = np.moveaxis(layers, 0, -1) if layered else layers  # the layer varies fastest
    data = data.astype(layers.dtype.newbyteorder("<")).tobytes()
    Path(path).write_bytes(("\n".join(lines) + "\n\n").encode() + (gzip.compress(data) if encoding == "gzip" else data))
    return Path(path)


def single_layer(tmp_path, name="a.seg.nrrd", **options):
    """liver (label 1) and tumour (label 2) in one layer; the tumour's voxels are not liver's."""
    layer = LIVER.astype(np.uint8)
    layer[TUMOUR] = 2
    segments = [segment("liver", 1, 0, LIVER & ~TUMOUR), segment("tumour", 2, 0, TUMOUR)]
    return write_seg_nrrd(tmp_path / name, layer, segments, **options)


def two_layers(tmp_path, name="b.seg.nrrd", **options):
    """liver and tumour (labels 1, 2) in layer 0, the vessel that overlaps both (label 1) in layer 1."""
    first = LIVER.astype(np.uint8)
    first[TUMOUR] = 2
    segments = [segment("liver", 1, 0, LIVER & ~TUMOUR), segment("tumour", 2, 0, TUMOUR),
                segment("vessel", 1, 1, VESSEL)]
    return write_seg_nrrd(tmp_path / name, [first, VESSEL], segments, **options)


def expected_positions(directions, space):
    """LPS positions (mm) of every voxel of SHAPE, (z, y, x, 3), from the construction."""
    k, j, i = np.indices(SHAPE)
    vectors = np.asarray(directions, float) * SPACING_XYZ  # columns: the i, j, k axes
    positions = np.asarray(ORIGIN) + np.stack([i, j, k], axis=-1) @ vectors.T
    return positions @ LPS_FROM_RAS.T if space == "right-anterior-superior" else positions


def all_indices():
    return np.stack(np.indices(SHAPE), axis=-1)


OBLIQUE = np.array([[np.cos(0.3), -np.sin(0.3), 0], [np.sin(0.3), np.cos(0.3), 0], [0, 0, 1]]) @ \
    np.array([[1, 0, 0], [0, np.cos(0.2), -np.sin(0.2)], [0, np.sin(0.2), np.cos(0.2)]])


# ------------------------------------------------------------------------------- read as built
def test_a_single_layer_file_keeps_label_values_names_and_voxels(tmp_path):
    image = load_label_image(single_layer(tmp_path))
    assert image.names == {1: "liver", 2: "tumour"}
    assert np.array_equal(image.mask(1), LIVER & ~TUMOUR) and np.array_equal(image.mask(2), TUMOUR)
    assert image.segment_masks == {}
    assert image.spacing == pytest.approx(SPACING_XYZ[::-1], rel=1e-12)


def test_a_layered_file_keeps_overlapping_segments_apart(tmp_path):
    """Segments of a 4-D file are numbered 1..N in file order; the vessel overlaps earlier segments."""
    image = load_label_image(two_layers(tmp_path))
    assert image.names == {1: "liver", 2: "tumour", 3: "vessel"}
    for label, mask in ((1, LIVER & ~TUMOUR), (2, TUMOUR), (3, VESSEL)):
        assert np.array_equal(image.mask(label), mask), label
    assert list(image.segment_masks) == [3]


@pytest.mark.parametrize("space", ["left-posterior-superior", "right-anterior-superior"])
@pytest.mark.parametrize("directions", [np.eye(3), OBLIQUE, -np.eye(3)[:, [1, 0, 2]]],
                         ids=["axial", "oblique", "permuted"])
def test_every_voxel_sits_where_the_header_puts_it_in_lps(tmp_path, space, directions):
    """Space directions and origin, LPS or RAS: each voxel's LPS position as built, to 1e-9 mm."""
    image = load_label_image(two_layers(tmp_path, directions=directions, space=space))
    positions = image.index_to_physical(all_indices())
    assert np.abs(positions - expected_positions(directions, space)).max() < 1e-9


def test_gzip_and_raw_files_read_alike(tmp_path, monkeypatch):
    """The gzip stream's CRC-32 vouches for the layered voxels as ITK read them: no second decompression."""
    raw = load_label_image(two_layers(tmp_path, name="raw.seg.nrrd"))
    with monkeypatch.context() as patch:
        patch.setattr(files, "inflated_length", lambda *args: pytest.fail("decompressed by the check"))
        packed = load_label_image(two_layers(tmp_path, name="gzip.seg.nrrd", encoding="gzip"))
    assert np.array_equal(raw.array, packed.array) and raw.names == packed.names
    assert np.array_equal(raw.mask(3), packed.mask(3))


def test_a_file_is_read_without_slicerio(tmp_path, monkeypatch):
    """3D Slicer's Python has no slicerio: the file is read all the same (it was refused)."""
    monkeypatch.setitem(sys.modules, "slicerio", None)  # import fails
    image = load_label_image(two_layers(tmp_path))
    assert image.names == {1: "liver", 2: "tumour", 3: "vessel"}


def test_a_segment_with_an_empty_extent_is_a_structure_without_voxels(tmp_path):
    """3D Slicer writes an empty segment's extent as ``0 -1 0 -1 0 -1``."""
    layer = LIVER.astype(np.uint8)
    path = write_seg_nrrd(tmp_path / "a.seg.nrrd", layer, [segment("liver", 1, 0, LIVER),
                                                           segment("nothing", 2, 0, np.zeros(SHAPE, bool))])
    image = load_label_image(path)
    assert image.names == {1: "liver", 2: "nothing"} and image.labels() == [1]


def test_names_are_utf8_with_nrrd_escapes_undone_as_itk_reads_them(tmp_path):
    """Segment names in UTF-8 (as 3D Slicer writes them) and NRRD's escaped backslash: the same names
    as ITK's own NRRD reader (teem) gives in its metadata."""
    sitk = pytest.importorskip("SimpleITK")
    layer = LIVER.astype(np.uint8)
    layer[TUMOUR] = 2
    names = ["Ösophagus links", "GTV\\\\PTV"]  # the second written as GTV\\PTV: one backslash
    path = write_seg_nrrd(tmp_path / "a.seg.nrrd", layer, [segment(names[0], 1, 0), segment(names[1], 2, 0)])
    reader = sitk.ImageFileReader()
    reader.SetFileName(str(path))
    reader.ReadImageInformation()
    expected = [reader.GetMetaData(f"Segment{index}_Name") for index in range(2)]
    assert expected == ["Ösophagus links", "GTV\\PTV"]
    assert list(load_label_image(path).names.values()) == expected


def test_a_header_longer_than_64_kib_keeps_every_segment(tmp_path):
    """120 segments with 3D Slicer's long terminology tags: about 80 KiB of header (the NRRD reader
    read only its first 64 KiB)."""
    labels = np.broadcast_to(np.arange(1, 121).reshape(SHAPE[:2] + (1,)), SHAPE)  # one structure per row of voxels
    tags = "Segmentation.Status:inprogress|TerminologyEntry:" + "Segmentation category and type ~" * 18 + "|"
    segments = [segment(f"structure {value}", value, 0, labels == value, Tags=tags) for value in range(1, 121)]
    path = write_seg_nrrd(tmp_path / "a.seg.nrrd", labels.astype(np.uint8), segments)
    assert path.read_bytes().index(b"\n\n") > 65536
    image = load_label_image(path)
    assert len(image.names) == 120 and np.array_equal(image.array, labels)


def test_a_label_map_named_seg_nrrd_without_segments_is_an_image(tmp_path):
    """No segment in the header: read as any NRRD label map, as 3D Slicer reads it (labels unnamed)."""
    layer = LIVER.astype(np.uint8)
    path = write_seg_nrrd(tmp_path / "a.seg.nrrd", layer, [])
    assert readers.reader_for(path) is readers.nrrd
    image = load_label_image(path)
    assert image.names == {} and np.array_equal(image.array, layer)


def test_segments_decide_not_the_name(tmp_path):
    path = two_layers(tmp_path, name="plain.nrrd")
    assert readers.reader_for(path) is readers.seg_nrrd
    assert load_label_image(path).names == {1: "liver", 2: "tumour", 3: "vessel"}


# ---------------------------------------------------------------------------------- refused
def edited(tmp_path, edit, builder=two_layers):
    """A valid file whose header text goes through ``edit``."""
    path = builder(tmp_path)
    text = path.read_bytes()
    end = text.index(b"\n\n")
    path.write_bytes(edit(text[:end].decode("utf-8")).encode("utf-8") + text[end:])
    return path


def replace(old, new):
    return lambda header: re.sub(old, new, header)


REFUSALS = [
    (replace(r"Segment2_Layer:=1", "Segment2_Layer:=2"), r"segment 'vessel' is in layer 2, but the file has 2 layer"),
    (replace(r"Segment1_LabelValue:=2", "Segment1_LabelValue:=1"),
     r"segments 'liver' and 'tumour' share label value 1 in layer 0, so their voxels cannot be told apart"),
    (replace(r"Segment1_LabelValue:=2", "Segment1_LabelValue:=0"),
     r"segment 'tumour' has label value 0, which is the background"),
    (replace(r"Segment1_LabelValue:=2\n", ""), r"segment 'tumour' has no LabelValue \(Segment1_LabelValue\).*4\.11"),
    (replace(r"Segment2_Layer:=1\n", ""), r"segment 'vessel' has no Layer"),
    (replace(r"Segment1_LabelValue:=2", "Segment1_LabelValue:=two"),
     r"Segment1_LabelValue \('two'\) must be 1 whole number"),
    (replace(r"Segment1_Name:=tumour", "Segment1_Name:=liver"), r"'liver' \(labels 1, 2\) share a name"),
    (replace(r"Segment2_Extent:=[-0-9 ]*", "Segment2_Extent:=2 21 8 11 0 6"),
     r"segment 'vessel' has extent 2 21 8 11 0 6 \(i, j, k\) outside the grid of 6 x 20 x 24 voxels \(z, y, x\)"),
    (replace(r"Segment2_Extent:=[-0-9 ]*", "Segment2_Extent:=2 21 8 11 0 4"),
     r"segment 'vessel' has 80 voxel\(s\) outside its extent 2 21 8 11 0 4, which 3D Slicer would drop"),
    (replace(r"Segment2_Extent:=[-0-9 ]*", "Segment2_Extent:=2 21 8 11"),
     r"Segment2_Extent \('2 21 8 11'\) must be 6 whole"),
    (replace(r"Segment1_ID:=\S*\n", ""),
     r"describes 3 segments, but not Segment1_ID: 3D Slicer would read only the first 1"),
    (replace(r"Segment2_", "Segment3_"), r"describes 3 segments, but not Segment2_ID"),
    (replace(r"kinds: list domain domain domain", "kinds: domain domain domain domain"),
     r"a 4-D segmentation must hold its layers on its first axis"),
    (replace(r"kinds: list domain domain domain", "kinds: domain domain domain list"), r"its layers on its first axis"),
    (replace(r"space: left-posterior-superior", "space: scanner-xyz"),
     r"a segmentation in space 'scanner-xyz' is not read"),
    (replace(r"Segment2_.*\n", ""), r"layer 1 holds voxels of value\(s\) 1 that no segment declares"),
]


@pytest.mark.parametrize("edit, message", REFUSALS)
def test_what_cannot_be_read_as_built_is_refused_in_one_line(tmp_path, edit, message):
    with pytest.raises(ReadError, match=message) as error:
        load_label_image(edited(tmp_path, edit))
    assert "\n" not in str(error.value) and str(tmp_path) in str(error.value)


def test_voxel_values_between_label_values_are_refused(tmp_path):
    """A float file holding 1.5 where segments declare 1 and 2: neither segment's voxels."""
    layer = LIVER.astype(np.float32)
    layer[TUMOUR] = 1.5
    path = write_seg_nrrd(tmp_path / "a.seg.nrrd", layer, [segment("liver", 1, 0), segment("tumour", 2, 0)],
                          dtype=np.float32)
    with pytest.raises(ReadError, match=r"layer 0 holds voxels of value\(s\) 1.5 that no segment declares"):
        load_label_image(path)


def test_a_segmentation_of_another_dimension_is_refused(tmp_path):
    path = tmp_path / "a.seg.nrrd"
    path.write_bytes(b"NRRD0004\ntype: unsigned char\ndimension: 2\nsizes: 4 3\nspacings: 1 1\nencoding: raw\n"
                     b"Segment0_ID:=s\nSegment0_LabelValue:=1\nSegment0_Layer:=0\n\n" + bytes(12))
    with pytest.raises(ReadError, match="a segmentation is 3-D .* or 4-D .*, not of 2 dimension"):
        load_label_image(path)


# ------------------------------------------------------------------------- independent readers
@pytest.mark.parametrize("build, options", [
    (single_layer, {}), (two_layers, {}), (two_layers, {"encoding": "gzip"}),
    (two_layers, {"space": "right-anterior-superior", "directions": OBLIQUE}),
])
def test_hand_built_files_read_as_slicerio_reads_them(tmp_path, slicerio, build, options):
    """Same segment masks, names and voxel positions as slicerio."""
    path = build(tmp_path, **options)
    check_against_slicerio(slicerio, path)


def test_slicerio_samples_read_as_slicerio_reads_them(slicerio, slicerio_sample):
    """The two files 3D Slicer wrote that slicerio ships (one layer, 7 segments; two layers, 8)."""
    for path in (slicerio_sample, slicerio_sample.with_name("SegmentationOverlapping.seg.nrrd")):
        check_against_slicerio(slicerio, path)


def check_against_slicerio(slicerio, path):
    image = load_label_image(path)
    segmentation = slicerio.read_segmentation(str(path))
    assert list(image.names.values()) == [s["name"] for s in segmentation["segments"]]
    for label, described in zip(image.names, segmentation["segments"]):
        expected = slicerio.segment_mask(segmentation, described["id"])  # (i, j, k) order
        assert np.array_equal(image.mask(label), np.transpose(expected, (2, 1, 0))), described["name"]
    ijk_to_lps = np.asarray(segmentation["ijkToLPS"], float)
    indices = np.stack(np.indices(image.array.shape), axis=-1).reshape(-1, 3)
    expected = indices[:, ::-1] @ ijk_to_lps[:3, :3].T + ijk_to_lps[:3, 3]
    assert np.abs(image.index_to_physical(indices) - expected).max() < 1e-9


def test_a_file_written_by_3d_slicer_reads_back_as_its_masks(tmp_path):
    """3D Slicer's storage node writes two overlapping structures (two layers, cropped to the
    segments' extent with a reference extent offset); read back, every voxel is where it was."""
    pytest.importorskip("slicer", reason="slicer-core (MRML Python wrapping) is not installed")
    from segmetrics import mrml
    import slicer

    grid = LabelImage(np.zeros((10, 30, 32), np.uint8), (2.5, 0.9, 0.8), (4.0, -6.0, 9.5), OBLIQUE.ravel())
    first = grid.array.copy()
    first[2:7, 5:20, 6:25] = 1
    first[3:5, 8:12, 9:14] = 2
    second = np.zeros_like(first)
    second[4:9, 10:26, 3:12] = 1  # overlaps both
    scene = mrml.create_headless_scene().scene
    node = mrml.add_segmentation_from_label_image(scene, grid.with_array(first), "written")
    other = mrml.add_segmentation_from_label_image(scene, grid.with_array(second), "other").GetSegmentation()
    segmentation = node.GetSegmentation()
    segmentation.CopySegmentFromSegmentation(other, other.GetNthSegmentID(0))  # in a layer of its own
    for index, name in enumerate(("outer", "inner", "across")):
        segmentation.GetNthSegment(index).SetName(name)
    path = tmp_path / "written.seg.nrrd"
    writer = slicer.vtkMRMLSegmentationStorageNode()
    writer.SetFileName(str(path))
    writer.SetCropToMinimumExtent(True)
    assert writer.WriteData(node)
    header = path.read_bytes().split(b"\n\n")[0]
    assert b"kinds: list domain domain domain" in header and b"ReferenceImageExtentOffset:=3 5 2" in header

    image = load_label_image(path)
    assert list(image.names.values()) == ["outer", "inner", "across"]
    for label, mask in zip(image.names, (first == 1, first == 2, second == 1)):
        alone = LabelImage(image.mask(label).astype(np.uint8), image.spacing, image.origin, image.direction)
        assert np.array_equal(resample_nearest(alone, grid).array == 1, mask), image.names[label]
