"""Damaged files are refused by the readers' shared checks (segmetrics.inputs.readers), whatever the format:
data cut short or longer than the header declares, damaged or incomplete compressed streams, garbage
after them, impossible NIfTI dimensions, NRRD axes without a voxel size, NRRD and MetaImage headers that state
no voxel size at all or not one per axis, and unparsable ASCII data.
Each file is built here from a known array, so that "refused" and "read intact" are both checked."""
import gzip
import re
import struct
import subprocess
import sys
import zlib

import numpy as np
import pytest
import SimpleITK as sitk

from segmetrics.inputs.readers import files
from segmetrics.inputs.io import ReadError, load_label_image

ARRAY = np.zeros((6, 20, 24), np.uint8)
ARRAY[1:5, 3:15, 4:18] = 1
ARRAY[2:4, 5:10, 6:10] = 2
SPACING_XYZ = (0.8, 0.9, 2.5)


def write_image(path, array=ARRAY, compressed=False):
    image = sitk.GetImageFromArray(array)
    image.SetSpacing(SPACING_XYZ)
    sitk.WriteImage(image, str(path), useCompression=compressed)
    return path


def nrrd_header(encoding, sizes=(24, 20, 6), data_file=None, directions="(0.8,0,0) (0,0.9,0) (0,0,2.5)"):
    """A NRRD header (bytes, ending in its blank line) for unsigned chars in ``sizes`` (x, y, z)."""
    lines = ["NRRD0004", "type: unsigned char", f"dimension: {len(sizes)}", "space: left-posterior-superior",
             "sizes: " + " ".join(map(str, sizes)), f"space directions: {directions}", f"encoding: {encoding}",
             "space origin: (0,0,0)"] + ([f"data file: {data_file}"] if data_file else [])
    return ("\n".join(lines) + "\n\n").encode()


# Each layout: (file to read, file holding the data stream, whether the stream is compressed), built by hand
# or by ITK, so that damage can be aimed at the data (not at a header that ITK would refuse anyway).
def layout(tmp_path, kind):
    if kind == "nrrd-gzip":
        path = tmp_path / "a.nrrd"
        path.write_bytes(nrrd_header("gzip") + gzip.compress(ARRAY.tobytes()))
        return path, path, len(nrrd_header("gzip"))
    if kind == "nhdr-raw.gz":
        path = tmp_path / "a.nhdr"
        path.write_bytes(nrrd_header("gzip", data_file="a.raw.gz"))
        (tmp_path / "a.raw.gz").write_bytes(gzip.compress(ARRAY.tobytes()))
        return path, tmp_path / "a.raw.gz", 0
    if kind in ("mha-compressed", "mhd-zraw"):
        path = write_image(tmp_path / ("a.mha" if kind == "mha-compressed" else "a.mhd"), compressed=True)
        data = path if kind == "mha-compressed" else tmp_path / "a.zraw"
        start = path.read_bytes().index(b"ElementDataFile = LOCAL\n") + 24 if data == path else 0
        return path, data, start
    if kind == "nii.gz":
        path = write_image(tmp_path / "a.nii.gz", compressed=True)
        return path, path, 0
    raise ValueError(kind)


COMPRESSED = ["nrrd-gzip", "nhdr-raw.gz", "mha-compressed", "mhd-zraw", "nii.gz"]


@pytest.mark.parametrize("kind", COMPRESSED)
def test_intact_compressed_files_are_read_exactly(tmp_path, kind):
    path, _, _ = layout(tmp_path, kind)
    assert np.array_equal(load_label_image(path).array, ARRAY)


@pytest.mark.parametrize("kind", COMPRESSED)
@pytest.mark.parametrize("where", [0.3, 0.5, 0.7, 0.9])
def test_a_damaged_byte_inside_a_compressed_stream_is_refused(tmp_path, kind, where):
    """ITK's MetaImage reader reads a damaged zlib stream as zeros ("Uncompress failed" on stderr), and
    teem a damaged detached gzip stream as whatever inflated; the stream's checksum catches both."""
    path, data, start = layout(tmp_path, kind)
    raw = bytearray(data.read_bytes())
    raw[start + 10 + int((len(raw) - start - 18) * where)] ^= 0xFF  # past a gzip header, before a trailer
    data.write_bytes(bytes(raw))
    with pytest.raises(ReadError, match="cut short or damaged|cannot be read"):
        load_label_image(path)


@pytest.mark.parametrize("kind", COMPRESSED)
@pytest.mark.parametrize("cut", [1, 4, 6, 9, 0.5])
def test_a_compressed_stream_cut_short_is_refused(tmp_path, kind, cut):
    """Cut by a few bytes the stream has all its data but not its checksum (teem read it as whole)."""
    path, data, start = layout(tmp_path, kind)
    raw = data.read_bytes()
    keep = len(raw) - cut if isinstance(cut, int) else start + int((len(raw) - start) * cut)
    data.write_bytes(raw[:keep])
    with pytest.raises(ReadError, match="cut short"):
        load_label_image(path)


@pytest.mark.parametrize("kind", COMPRESSED)
def test_garbage_after_a_compressed_stream_is_refused_but_zero_padding_is_read(tmp_path, kind):
    path, data, _ = layout(tmp_path, kind)
    raw = data.read_bytes()
    data.write_bytes(raw + bytes(64))
    assert np.array_equal(load_label_image(path).array, ARRAY)
    data.write_bytes(raw + b"trailing garbage")
    with pytest.raises(ReadError, match="after the end of its compressed data|cut short or damaged"):
        load_label_image(path)


def test_a_second_gzip_member_is_read_as_part_of_the_stream(tmp_path):
    path = tmp_path / "a.nrrd"
    half = ARRAY.nbytes // 2
    data = ARRAY.tobytes()
    path.write_bytes(nrrd_header("gzip") + gzip.compress(data[:half]) + gzip.compress(data[half:]))
    assert np.array_equal(load_label_image(path).array, ARRAY)


# ------------------------------------------------------------- data longer than the header declares
def fewer_slices_in_header(tmp_path, kind):
    """A file whose header declares 3 slices (z) while its data holds the 6 of ARRAY."""
    if kind in ("nii", "nii.gz"):
        raw = bytearray(write_image(tmp_path / "full.nii").read_bytes())
        struct.pack_into("<h", raw, 46, 3)  # dim[3]
        path = tmp_path / f"a.{kind}"
        path.write_bytes(gzip.compress(bytes(raw)) if kind == "nii.gz" else bytes(raw))
        return path
    if kind in ("nrrd", "nrrd-gzip"):
        path = write_image(tmp_path / "a.nrrd", compressed=kind == "nrrd-gzip")
    elif kind in ("nhdr", "nhdr-gzip"):
        path = write_image(tmp_path / "a.nhdr", compressed=kind == "nhdr-gzip")
    else:
        path = write_image(tmp_path / f"a.{kind.split('-')[0]}", compressed=kind.endswith("-compressed"))
    raw = path.read_bytes()
    edited = re.sub(rb"(sizes: 24 20|DimSize = 24 20) 6", rb"\1 3", raw, count=1)
    assert edited != raw
    path.write_bytes(edited)
    return path


@pytest.mark.parametrize("kind", ["nii", "nii.gz", "nrrd", "nrrd-gzip", "nhdr", "nhdr-gzip", "mha", "mha-compressed",
                                  "mhd", "mhd-compressed"])
def test_data_longer_than_the_header_declares_is_refused(tmp_path, kind):
    """ITK reads the first slices of such a file and drops the rest without a word."""
    with pytest.raises(ReadError, match=r"holds (1440|2880|3232) bytes .* declares (1440|1792|2880)"):
        load_label_image(fewer_slices_in_header(tmp_path, kind))


@pytest.mark.parametrize("suffix", [".nii", ".nrrd", ".mha"])
def test_bytes_appended_to_raw_data_are_refused(tmp_path, suffix):
    path = write_image(tmp_path / f"a{suffix}")
    path.write_bytes(path.read_bytes() + b"\0" * 16)
    with pytest.raises(ReadError, match="longer than its header says"):
        load_label_image(path)


def test_metaimage_header_size_skips_bytes_before_the_data(tmp_path):
    """``HeaderSize`` bytes before the raw data are not counted as data (so not as too long)."""
    (tmp_path / "a.raw").write_bytes(b"x" * 100 + ARRAY.tobytes())
    (tmp_path / "a.mhd").write_text("ObjectType = Image\nNDims = 3\nDimSize = 24 20 6\nElementSpacing = 0.8 0.9 2.5\n"
                                    "HeaderSize = 100\nElementType = MET_UCHAR\nElementDataFile = a.raw\n")
    assert np.array_equal(load_label_image(tmp_path / "a.mhd").array, ARRAY)


# ------------------------------------------------------------------------------ NIfTI dimensions
@pytest.mark.parametrize("offset, value, pattern", [
    (44, -20, r"NIfTI dim \[3, 24, -20, 6"),  # dim[2] negative: ITK read one row
    (44, 0, r"NIfTI dim \[3, 24, 0, 6"),  # dim[2] zero: ITK read one row
    (40, 9, r"NIfTI dim \[9,"),  # more than 7 dimensions
])
def test_nifti_impossible_dimensions_are_refused(tmp_path, offset, value, pattern):
    raw = bytearray(write_image(tmp_path / "good.nii").read_bytes())
    struct.pack_into("<h", raw, offset, value)
    (tmp_path / "bad.nii").write_bytes(bytes(raw))
    with pytest.raises(ReadError, match=pattern + ".* is invalid"):
        load_label_image(tmp_path / "bad.nii")


@pytest.mark.parametrize("value", [-10.0, 0.0, 100.0, float("nan")])
def test_nifti_vox_offset_inside_the_header_is_refused(tmp_path, value):
    """A single-file NIfTI's voxels start after its 348-byte header; ITK read a negative offset as other bytes."""
    raw = bytearray(write_image(tmp_path / "good.nii").read_bytes())
    struct.pack_into("<f", raw, 108, value)
    (tmp_path / "bad.nii").write_bytes(bytes(raw))
    with pytest.raises(ReadError, match="vox_offset .* lies inside the header"):
        load_label_image(tmp_path / "bad.nii")


# ------------------------------------------------------------------------------------- NRRD
def test_nrrd_spatial_axis_without_a_space_direction_is_refused(tmp_path):
    """``none`` in place of a spatial axis' direction: ITK read that axis as 1 mm."""
    path = tmp_path / "a.nrrd"
    path.write_bytes(nrrd_header("raw", directions="(0.8,0,0) (0,0.9,0) none") + ARRAY.tobytes())
    with pytest.raises(ReadError, match="no voxel size for 1 of its 3 axes"):
        load_label_image(path)
    # a layered .seg.nrrd's list axis has no direction either: test_io_geometry reads slicerio's sample


@pytest.mark.parametrize("data", [b"\0" * 3000, b"1 " * 1000 + b"x" * 2000, b"1 " * 100])
def test_ascii_nrrd_that_is_not_numbers_is_refused_without_crashing(tmp_path, data):
    """ITK (teem) crashes the process on a long unparsable token of ASCII data: checked in a child process."""
    path = tmp_path / "a.nrrd"
    path.write_bytes(nrrd_header("ascii", sizes=(3000, 1, 1), directions="(1,0,0) (0,1,0) (0,0,1)") + data)
    script = ("import sys\nfrom segmetrics.inputs.io import ReadError, load_label_image\ntry:\n"
              f"    load_label_image({str(path)!r})\nexcept ReadError as error:\n    print(error)\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-500:]
    assert re.search("is not a number|holds 100 numbers of ASCII image data where its header declares 3000",
                     result.stdout)


def test_ascii_nrrd_of_numbers_is_read(tmp_path):
    path = tmp_path / "a.nrrd"
    path.write_bytes(nrrd_header("ascii") + " ".join(map(str, ARRAY.ravel())).encode() + b"\n")
    assert np.array_equal(load_label_image(path).array, ARRAY)


def test_a_metaimage_stream_damaged_only_past_its_voxels_is_read_as_its_checksum_vouches(tmp_path):
    """zlib itself refuses this damaged stream (its end marker is hit), but every byte of the image
    comes out intact: the voxels ITK read give the Adler-32 the writer stored for the image, so they
    are the image (a damage inside the voxels is refused: test_a_damaged_byte_inside_...)."""
    path, data, start = layout(tmp_path, "mha-compressed")
    raw = bytearray(data.read_bytes())
    raw[-6] ^= 0xFF
    with pytest.raises(zlib.error):
        zlib.decompress(bytes(raw[start:]))
    data.write_bytes(bytes(raw))
    assert np.array_equal(load_label_image(path).array, ARRAY)


# ---------------------------------------------------------------------------------- .seg.nrrd
def seg_nrrd(tmp_path, segments, array=ARRAY):
    """A single-layer .seg.nrrd of ``array`` with ``segments``: [(name, label value, layer)]."""
    fields = []
    for index, (name, value, layer) in enumerate(segments):
        fields += [f"Segment{index}_ID:=Segment_{index}", f"Segment{index}_Name:={name}",
                   f"Segment{index}_LabelValue:={value}", f"Segment{index}_Layer:={layer}"]
    header = nrrd_header("raw").replace(b"space origin", ("\n".join(fields) + "\nspace origin").encode())
    path = tmp_path / "a.seg.nrrd"
    path.write_bytes(header + array.tobytes())
    return path


def test_a_consistent_seg_nrrd_is_read_with_its_names(tmp_path):
    image = load_label_image(seg_nrrd(tmp_path, [("liver", 1, 0), ("tumour", 2, 0)]))
    assert image.names == {1: "liver", 2: "tumour"}
    assert np.array_equal(image.array, ARRAY)


@pytest.mark.parametrize("segments, message", [
    ([("liver", 1, 0), ("tumour", 1, 0)], "'liver' and 'tumour' share label value 1 in layer 0"),  # liver was dropped
    ([("liver", 1, 0), ("tumour", 2, -1)], "segment 'tumour' is in layer -1, but the file has 1 layer"),
    ([("liver", 1, 0), ("tumour", 0, 0)], "segment 'tumour' has label value 0, which is the background"),
    ([("liver", 1, 0)], r"layer 0 holds voxels of value\(s\) 2 that no segment declares"),  # voxels left out
])
def test_seg_nrrd_segments_that_cannot_be_told_apart_are_refused(tmp_path, segments, message):
    with pytest.raises(ReadError, match=message):
        load_label_image(seg_nrrd(tmp_path, segments))


# ---------------------------------------------------------------------------------- DICOM
def edited_liver_seg(data_dir, tmp_path, edit):
    """dcmqi's liver DICOM SEG (3 frames of 512 x 512, one segment) with ``edit(dataset)`` applied."""
    import pydicom

    dataset = pydicom.dcmread(data_dir / "dcmqi" / "liver.dcm")
    edit(dataset)
    dataset.save_as(tmp_path / "seg.dcm")
    return tmp_path / "seg.dcm"


def _fewer_frames(dataset):
    dataset.NumberOfFrames = 2


def _fewer_rows(dataset):
    dataset.Rows = 256


def _undescribed_segment(dataset):
    dataset.PerFrameFunctionalGroupsSequence[0].SegmentIdentificationSequence[0].ReferencedSegmentNumber = 9


@pytest.mark.parametrize("edit, message", [
    (_fewer_frames, "declares 2 frame\\(s\\) but describes 3"),  # was read as its first 2 frames
    (_fewer_rows, "holds 98304 bytes of pixel data where its 3 frame\\(s\\) of 256 x 512 declare 49152"),  # half rows
    (_undescribed_segment, "frames of segment\\(s\\) 9 that the DICOM SEG does not describe"),  # frame left out
])
def test_a_dicom_seg_whose_frames_do_not_add_up_is_refused(data_dir, tmp_path, edit, message):
    with pytest.raises(ReadError, match=message):
        load_label_image(edited_liver_seg(data_dir, tmp_path, edit))
    assert load_label_image(edited_liver_seg(data_dir, tmp_path, lambda dataset: None)).array.shape == (3, 512, 512)


def test_a_contour_with_fewer_points_than_it_declares_is_refused(tmp_path):
    """A contour cut short (NumberOfContourPoints larger than ContourData holds) was filled as it was."""
    import pydicom
    from test_dicom import rectangle, write_rtstruct

    write_rtstruct(tmp_path / "rt.dcm", {"Heart": [rectangle(0, 0, 5, 5, 0.0)]})
    dataset = pydicom.dcmread(tmp_path / "rt.dcm")
    contour = dataset.ROIContourSequence[0].ContourSequence[0]
    contour.NumberOfContourPoints = int(contour.NumberOfContourPoints) + 3
    dataset.save_as(tmp_path / "rt.dcm")
    with pytest.raises(ReadError, match="ROI 1 has a contour .*NumberOfContourPoints is 7 but ContourData holds 4"):
        load_label_image(tmp_path / "rt.dcm")


def ct_series(data_dir, tmp_path, edit_middle=None, cut_middle=None):
    """dcmqi's 3-slice CT series copied to tmp_path, its middle slice edited or cut to ``cut_middle`` bytes."""
    import shutil

    import pydicom

    folder = tmp_path / "series"
    shutil.copytree(data_dir / "dcmqi" / "ct-3slice", folder)
    middle = sorted(folder.iterdir())[1]
    if edit_middle is not None:
        dataset = pydicom.dcmread(middle)
        edit_middle(dataset)
        dataset.save_as(middle)
    if cut_middle is not None:
        middle.write_bytes(middle.read_bytes()[:cut_middle])
    return folder


@pytest.mark.parametrize("cut", [-10, 20000])
def test_a_series_with_an_unreadable_slice_file_is_refused(data_dir, tmp_path, cut):
    """GDCM skipped the cut file: the grid had 2 slices 2 mm apart instead of 3 at 1 mm, without a word."""
    from segmetrics.inputs.readers import read_image_grid

    assert read_image_grid(ct_series(data_dir, tmp_path)).array.shape == (3, 512, 512)
    with pytest.raises(ReadError, match="02.dcm: a DICOM image of the series folder .* cannot be read"):
        read_image_grid(ct_series(data_dir, tmp_path / "cut", cut_middle=cut))


@pytest.mark.parametrize("field, value, message", [
    ("PixelSpacing", [0.5, 0.5], "differ in pixel spacing"),  # ITK took the first slice's for all
    ("ImageOrientationPatient", [0, 1, 0, 1, 0, 0], "differ in image orientation"),
])
def test_a_series_whose_slices_disagree_is_refused(data_dir, tmp_path, field, value, message):
    from segmetrics.inputs.readers import read_image_grid

    with pytest.raises(ReadError, match=message):
        read_image_grid(ct_series(data_dir, tmp_path, edit_middle=lambda dataset: setattr(dataset, field, value)))


@pytest.mark.parametrize("field, change", [
    ("PixelSpacing", lambda spacing: [float(spacing[0]) * (1 + 5e-5), float(spacing[1])]),
    ("ImageOrientationPatient", lambda cosines: [*map(float, cosines[:5]), float(cosines[5]) + 5e-5]),
])
def test_a_series_whose_slices_differ_only_by_rounding_is_read(data_dir, tmp_path, field, change):
    """Scanners print a slice's spacing and direction cosines with varying precision: values within
    the geometry tolerance (1e-4) are the same, as everywhere else in the package."""
    from segmetrics.inputs.readers import read_image_grid

    def edit(dataset):
        setattr(dataset, field, change(getattr(dataset, field)))

    assert read_image_grid(ct_series(data_dir, tmp_path, edit_middle=edit)).array.shape == (3, 512, 512)


def test_a_series_pixel_spacing_of_zero_is_refused_not_read_as_1mm(data_dir, tmp_path):
    import pydicom

    from segmetrics.inputs.readers import read_image_grid

    folder = ct_series(data_dir, tmp_path)
    for path in folder.iterdir():
        dataset = pydicom.dcmread(path)
        dataset.PixelSpacing = [0, 0.8]
        dataset.save_as(path)
    with pytest.raises(ReadError, match=r"DICOM PixelSpacing \(0, 0.8\) mm is invalid"):
        read_image_grid(folder)


def test_an_open_contour_of_a_closed_structure_is_reported_not_filled(tmp_path):
    """An OPEN_PLANAR contour among the closed ones of an ROI encloses no area: it was left out silently."""
    import pydicom
    from test_dicom import rectangle, write_rtstruct

    write_rtstruct(tmp_path / "rt.dcm", {"Heart": [rectangle(0, 0, 5, 5, 0.0), rectangle(0, 0, 9, 9, 1.0)]})
    dataset = pydicom.dcmread(tmp_path / "rt.dcm")
    dataset.ROIContourSequence[0].ContourSequence[1].ContourGeometricType = "OPEN_PLANAR"
    dataset.save_as(tmp_path / "rt.dcm")
    image = load_label_image(tmp_path / "rt.dcm")
    assert any("1 open contour(s) (OPEN_PLANAR or POINT) of 'Heart'" in note for note in image.notes), image.notes
    assert image.names == {1: "Heart"}


def test_a_folder_or_a_loop_of_links_given_as_a_file_says_what_it_is(tmp_path):
    """Both were reported as "no such file", which sends the user looking for a typo."""
    (tmp_path / "folder.nii.gz").mkdir()
    (tmp_path / "a.nii").symlink_to(tmp_path / "b.nii")
    (tmp_path / "b.nii").symlink_to(tmp_path / "a.nii")
    with pytest.raises(ReadError, match="folder.nii.gz: is a folder, not an image file"):
        load_label_image(tmp_path / "folder.nii.gz")
    with pytest.raises(ReadError, match="a.nii: is a symbolic link to nothing"):
        load_label_image(tmp_path / "a.nii")
    with pytest.raises(ReadError, match="missing.nii: no such file"):
        load_label_image(tmp_path / "missing.nii")


def test_a_fractional_dicom_seg_threshold_at_or_below_every_fraction_is_refused(data_dir, tmp_path):
    """Threshold 0 made the whole grid the segment (every fraction >= 0)."""
    import highdicom
    import pydicom
    from pydicom.sr.codedict import codes

    sources = sorted((pydicom.dcmread(path) for path in (data_dir / "dcmqi" / "ct-3slice").iterdir()),
                     key=lambda source: float(source.ImagePositionPatient[2]))
    for source in sources:
        source.SpecificCharacterSet, source.PatientName = "ISO_IR 100", "Test^CT"
    fractions = np.zeros((len(sources), sources[0].Rows, sources[0].Columns), np.float32)
    fractions[1, 100:110, 200:220] = 0.7
    description = highdicom.seg.SegmentDescription(
        segment_number=1, segment_label="soft", segmented_property_category=codes.SCT.Tissue,
        segmented_property_type=codes.SCT.Tissue, algorithm_type=highdicom.seg.SegmentAlgorithmTypeValues.MANUAL)
    highdicom.seg.Segmentation(
        source_images=sources, pixel_array=fractions, segmentation_type=highdicom.seg.SegmentationTypeValues.FRACTIONAL,
        segment_descriptions=[description], series_instance_uid=highdicom.UID(), series_number=2,
        sop_instance_uid=highdicom.UID(), instance_number=1, manufacturer="test", manufacturer_model_name="test",
        software_versions="0", device_serial_number="0", max_fractional_value=100).save_as(tmp_path / "fractional.dcm")
    assert load_label_image(tmp_path / "fractional.dcm", threshold=0.5).mask(1).sum() == 10 * 20
    with pytest.raises(ReadError, match="segment 'soft'\\): threshold 0 is at or below every value"):
        load_label_image(tmp_path / "fractional.dcm", threshold=0.0)


def test_a_nifti_sform_whose_voxel_sizes_disagree_with_pixdim_is_refused(tmp_path):
    """ITK read 0.8 mm from pixdim where the sform (nibabel's, MONAI's choice) says 1.6 mm."""
    nibabel = pytest.importorskip("nibabel")

    image = nibabel.Nifti1Image(ARRAY.transpose(), np.diag([0.8, 0.9, 2.5, 1.0]))
    image.to_filename(tmp_path / "good.nii")
    raw = bytearray((tmp_path / "good.nii").read_bytes())
    assert np.frombuffer(raw, "<f4", 1, 280)[0] == pytest.approx(0.8)  # srow_x[0]
    struct.pack_into("<f", raw, 280, 1.6)  # the x voxel size of the sform doubled
    (tmp_path / "bad.nii").write_bytes(bytes(raw))
    assert nibabel.load(tmp_path / "bad.nii").header.get_zooms()[:3] == pytest.approx((0.8, 0.9, 2.5))
    with pytest.raises(ReadError, match=r"sform gives voxel sizes \(1.6, 0.9, 2.5\) mm but pixdim \(0.8, 0.9, 2.5\)"):
        load_label_image(tmp_path / "bad.nii")
    assert load_label_image(tmp_path / "good.nii").spacing == pytest.approx((2.5, 0.9, 0.8))


@pytest.mark.parametrize("mode", ["RGBA", "LA"])
def test_a_mask_drawn_as_transparency_is_refused_not_read_as_empty(tmp_path, mode):
    """Black pixels with the mask in the alpha channel were read from their colour: an empty mask."""
    from PIL import Image

    mask = (ARRAY[3] > 0).astype(np.uint8) * 255
    channels = np.zeros(mask.shape + (len(mode),), np.uint8)
    channels[..., -1] = mask
    Image.fromarray(channels, mode).save(tmp_path / "overlay.png")
    with pytest.raises(ReadError, match="transparency \\(alpha channel\\) varies"):
        load_label_image(tmp_path / "overlay.png")
    channels[..., :-1], channels[..., -1] = mask[..., None], 255  # the same mask in grey, opaque: read
    Image.fromarray(channels, mode).save(tmp_path / "opaque.png")
    assert np.array_equal(load_label_image(tmp_path / "opaque.png").array, mask)
    channels[..., -1] = mask  # white mask on a transparent black background (an overlay export): read too
    Image.fromarray(channels, mode).save(tmp_path / "transparent_background.png")
    assert np.array_equal(load_label_image(tmp_path / "transparent_background.png").array, mask)


@pytest.mark.parametrize("key", ["1.5", "nan", "inf"])
def test_a_name_map_key_that_is_not_a_whole_label_value_is_refused(tmp_path, key):
    """"1.5" was truncated to label 1 and named silently."""
    from segmetrics.inputs.io import read_name_map

    (tmp_path / "names.json").write_text(f'{{"{key}": "liver", "2": "tumour"}}')
    with pytest.raises(ReadError, match="names.json: expected a JSON object of label values and names"):
        read_name_map(tmp_path / "names.json")
    (tmp_path / "names.json").write_text('{"1.0": "liver", "2": "tumour"}')
    assert read_name_map(tmp_path / "names.json") == {1: "liver", 2: "tumour"}


@pytest.mark.parametrize("suffix, old, new, field", [
    (".mha", b"ElementType", b"ElementNumberOfChannels = abc\nElementType", "ElementNumberOfChannels"),
    (".mha", b"ElementType", b"HeaderSize = x\nElementType", "HeaderSize"),
    (".mha", b"CompressedData = False", b"CompressedData = True\nCompressedDataSize = zz", "CompressedDataSize"),
    (".nrrd", b"sizes: 24 20 6", b"sizes: 24 -20 6", "sizes"),
])
def test_header_counts_that_are_not_whole_numbers_are_one_line(tmp_path, suffix, old, new, field):
    """A channel count or data size ITK could not parse gave a bare ValueError (int('abc')) from the checks."""
    raw = write_image(tmp_path / f"good{suffix}").read_bytes()
    assert old in raw
    (tmp_path / f"bad{suffix}").write_bytes(raw.replace(old, new))
    with pytest.raises(ReadError, match=f"bad{re.escape(suffix)}: (MetaImage|NRRD) {field} .* must be whole numbers"):
        load_label_image(tmp_path / f"bad{suffix}")


@pytest.mark.parametrize("name", ["a.nii", "a.nrrd", "a.mha", "a.png", "a.dcm", "a.seg.nrrd", "a.tif"])
def test_an_empty_file_says_it_is_empty(tmp_path, name):
    """Messages were e.g. "a DICOM object without SOP Class UID" or "(StopIteration)"."""
    (tmp_path / name).write_bytes(b"")
    with pytest.raises(ReadError, match=f"{re.escape(name)}: is empty \\(0 bytes\\)"):
        load_label_image(tmp_path / name)


# ------------------------------------------------------------------ headers without a voxel size
def header_without_spacing(tmp_path, suffix, spacing_line=""):
    """A file of ``ARRAY`` whose header states no voxel size (unless ``spacing_line`` adds one), built by
    hand: ``.nrrd``/``.seg.nrrd`` (attached data), ``.nhdr`` (detached), ``.mha`` (LOCAL) or ``.mhd``."""
    path = tmp_path / f"a{suffix}"
    sizes = " ".join(map(str, ARRAY.shape[::-1]))
    if suffix in (".mha", ".mhd"):
        data = "LOCAL" if suffix == ".mha" else "a.raw"
        header = (f"ObjectType = Image\nNDims = 3\nDimSize = {sizes}\n{spacing_line}ElementType = MET_UCHAR\n"
                  f"ElementDataFile = {data}\n").encode()
    else:
        segments = "".join(f"Segment{i}_ID:=s{i}\nSegment{i}_Name:=part{i}\nSegment{i}_LabelValue:={i + 1}\n"
                           f"Segment{i}_Layer:=0\n" for i in range(2)) if suffix == ".seg.nrrd" else ""
        detached = "data file: a.raw\n" if suffix == ".nhdr" else ""
        header = (f"NRRD0004\ntype: unsigned char\ndimension: 3\nsizes: {sizes}\n{spacing_line}encoding: raw\n"
                  f"{detached}{segments}\n").encode()
    if suffix in (".mhd", ".nhdr"):
        path.write_bytes(header)
        (tmp_path / "a.raw").write_bytes(ARRAY.tobytes())
    else:
        path.write_bytes(header + ARRAY.tobytes())
    return path


@pytest.mark.parametrize("suffix", [".nrrd", ".nhdr", ".seg.nrrd", ".mha", ".mhd"])
def test_a_header_without_any_voxel_size_is_refused_not_read_as_1mm(tmp_path, suffix):
    """ITK (and slicerio) read such a file as 1 mm voxels without a word; only an explicit
    assume_unit_spacing accepts it, and then the voxels are read intact at 1 mm."""
    from segmetrics.inputs.io import InputPolicy

    path = header_without_spacing(tmp_path, suffix)
    fields = "'ElementSpacing' or 'ElementSize'" if suffix.startswith(".mh") else "'space directions' or 'spacings'"
    with pytest.raises(ReadError, match=re.escape(f"{path}: states no voxel size (no {fields}): ITK would read 1 mm "
                                                  "voxels") + ".*--assume-unit-spacing"):
        load_label_image(path)
    image = load_label_image(path, input_policy=InputPolicy(assume_unit_spacing=True))
    assert np.array_equal(image.array, ARRAY) and tuple(image.spacing) == (1.0, 1.0, 1.0)


@pytest.mark.needs("rich")
def test_the_assume_unit_spacing_flag_reaches_compare_batch_and_frames(tmp_path, capsys):
    """Every command that reads label maps refuses the file in one line (exit 2; in batch: the case
    fails with the reason) and accepts it with --assume-unit-spacing (Dice 1 of a file with itself)."""
    import csv
    import json

    from segmetrics.cli import main

    path = header_without_spacing(tmp_path, ".nrrd")
    assert main(["compare", str(path), str(path), "--metrics", "dice"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(errors) == 1 and f"{path}: states no voxel size" in errors[0]
    assert main(["compare", str(path), str(path), "--metrics", "dice", "--format", "json",
                 "--assume-unit-spacing"]) == 0
    assert {record["value"] for record in json.loads(capsys.readouterr().out)["records"]} == {1.0}

    manifest = tmp_path / "cases.csv"
    manifest.write_text(f"case_id,reference,test\ncase1,{path},{path}\n")
    assert main(["batch", "--manifest", str(manifest), "-o", str(tmp_path / "refused"), "--metrics", "dice",
                 "--workers", "0", "--no-progress"]) == 1
    assert "states no voxel size" in capsys.readouterr().err
    assert main(["batch", "--manifest", str(manifest), "-o", str(tmp_path / "accepted"), "--metrics", "dice",
                 "--workers", "0", "--no-progress", "--assume-unit-spacing"]) == 0
    with open(tmp_path / "accepted" / "results.csv", newline="") as handle:
        assert {float(row["value"]) for row in csv.DictReader(handle)} == {1.0}

    for folder in ("reference", "test"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "a.nrrd").write_bytes(path.read_bytes())
    folders = [str(tmp_path / "reference"), str(tmp_path / "test")]
    assert main(["frames", *folders]) == 2
    assert "states no voxel size" in capsys.readouterr().err
    assert main(["frames", *folders, "--assume-unit-spacing"]) == 0


@pytest.mark.parametrize("spacing_line, message", [
    ("ElementSpacing = 0.8 0.9\n", r"MetaImage ElementSpacing \(0.8 0.9\) has 2 values but NDims is 3"),
    ("ElementSpacing = 0.8 0.9 2.5 4\n", r"has 4 values but NDims is 3"),
    ("ElementSize = 0.8\n", r"MetaImage ElementSize \(0.8\) has 1 values but NDims is 3"),
])
def test_a_metaimage_spacing_without_one_value_per_axis_is_refused(tmp_path, spacing_line, message):
    """Too few values: ITK said only "File cannot be read ... No such file or directory"; too many:
    ITK dropped the extra value silently."""
    path = header_without_spacing(tmp_path, ".mha", spacing_line)
    with pytest.raises(ReadError, match=message):
        load_label_image(path)
    path.write_bytes(path.read_bytes().replace(spacing_line.encode(), b"ElementSpacing = 0.8 0.9 2.5\n"))
    assert tuple(load_label_image(path).spacing) == pytest.approx(SPACING_XYZ[::-1])


def test_a_seg_nrrd_whose_voxel_size_is_in_spacings_is_read_with_it(tmp_path):
    """slicerio took a .seg.nrrd's geometry from 'space directions' only ('spacings: 0.8 0.9 2.5' was
    read as 1 mm voxels), so such a file was refused; the segmentation reader reads 'spacings' as ITK
    does. The content decides, not the name: the same segmentation named .nrrd reads alike."""
    path = header_without_spacing(tmp_path, ".seg.nrrd", "spacings: 0.8 0.9 2.5\n")
    plain = tmp_path / "plain.nrrd"
    plain.write_bytes(path.read_bytes())
    for image in (load_label_image(path), load_label_image(plain)):
        assert tuple(image.spacing) == pytest.approx(SPACING_XYZ[::-1])
        assert image.names == {1: "part0", 2: "part1"} and np.array_equal(image.array, ARRAY)


def test_a_grid_file_without_any_voxel_size_is_refused_unless_assumed(tmp_path):
    """``resample_to`` (CLI --resample-to) and ``image`` read a grid file with the caller's
    input_policy too (the grid reader used the default policy, so the override could not reach it)."""
    import segmetrics
    from segmetrics.inputs.io import InputPolicy

    image = sitk.GetImageFromArray(ARRAY)  # 1 mm voxels at the origin: the grid the header-less file gets
    sitk.WriteImage(image, str(tmp_path / "mask.nrrd"))
    grid = header_without_spacing(tmp_path, ".nrrd")
    mask = str(tmp_path / "mask.nrrd")
    with pytest.raises(ReadError, match=f"{re.escape(str(grid))}: states no voxel size"):
        segmetrics.compare(mask, mask, metrics="dice", resample_to=str(grid))
    result = segmetrics.compare(mask, mask, metrics="dice", resample_to=str(grid),
                                input_policy=InputPolicy(assume_unit_spacing=True))
    assert [s.value("dice") for s in result.structures] == [1.0, 1.0]  # labels 1 and 2 of ARRAY


@pytest.mark.parametrize("kind", ["nrrd-gzip", "nhdr-raw.gz", "mha-compressed", "mhd-zraw"])
def test_intact_compressed_nrrd_and_metaimage_are_decompressed_once_by_the_reader_not_by_the_check(
        tmp_path, kind, monkeypatch):
    """A gzip trailer declaring the data's length (NRRD) or a zlib stream exactly CompressedDataSize
    long (MetaImage): the stream's checksum (CRC-32, Adler-32) is checked on the voxels ITK
    decompressed (as for a gzipped NIfTI) instead of decompressing the file a second time."""
    path, _, _ = layout(tmp_path, kind)

    def no_decompression(*args):
        raise AssertionError("the stream was decompressed by the check")

    monkeypatch.setattr(files, "inflated_length", no_decompression)
    assert np.array_equal(load_label_image(path).array, ARRAY)


def gzip_seg_nrrd(tmp_path):
    """A gzip-encoded single-layer .seg.nrrd of ARRAY (segments 1 and 2), as 3D Slicer saves it."""
    header = nrrd_header("gzip").replace(b"space origin", b"Segment0_ID:=s0\nSegment0_Name:=outer\n"
                                         b"Segment0_LabelValue:=1\nSegment0_Layer:=0\nSegment1_ID:=s1\n"
                                         b"Segment1_Name:=inner\nSegment1_LabelValue:=2\nSegment1_Layer:=0\n"
                                         b"space origin")
    path = tmp_path / "a.seg.nrrd"
    path.write_bytes(header + gzip.compress(ARRAY.tobytes()))
    return path, len(header)


def test_an_intact_gzip_seg_nrrd_is_decompressed_once_and_a_damaged_one_refused(tmp_path, monkeypatch):
    path, start = gzip_seg_nrrd(tmp_path)
    with monkeypatch.context() as patch:
        patch.setattr(files, "inflated_length", lambda *args: pytest.fail("decompressed by the check"))
        image = load_label_image(path)
    assert np.array_equal(image.array, ARRAY) and image.names == {1: "outer", 2: "inner"}
    raw = bytearray(path.read_bytes())
    raw[start + 10 + (len(raw) - start - 18) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(ReadError, match="cut short or damaged"):
        load_label_image(path)


def test_a_nrrd_with_a_component_axis_is_refused_for_its_components_not_its_spacing(tmp_path):
    """The 'none' direction of an RGB-color axis is no missing voxel size (ITK reads 0.8 x 0.9 mm
    pixels): the file is refused for what it is, a colour image, not for a 1 mm spacing."""
    path = tmp_path / "rgb.nrrd"
    path.write_bytes(b"NRRD0004\ntype: unsigned char\ndimension: 3\nspace dimension: 2\nsizes: 3 24 20\n"
                     b"space directions: none (0.8,0) (0,0.9)\nkinds: RGB-color domain domain\nencoding: raw\n\n"
                     + bytes(3 * 24 * 20))
    with pytest.raises(ReadError, match="has 3 components per voxel, not a label map"):
        load_label_image(path)
    path.write_bytes(path.read_bytes().replace(b"RGB-color domain domain", b"domain domain domain"))
    with pytest.raises(ReadError, match=r"give no voxel size for 1 of its 3 axes, which would be read as 1 mm"):
        load_label_image(path)

