"""Readers keep geometry and names; geometry mismatches are explained; resampling is on purpose."""
import json

import numpy as np
import pytest
import SimpleITK as sitk

import segmetrics
from segmetrics.spatial.geometry import GeometryMismatchError, LabelImage, check_same_geometry
from segmetrics.inputs.io import ReadError, load_label_image, read_name_map


def test_nifti_roundtrip_reverses_spacing_into_array_order(tmp_path):
    array = np.zeros((5, 6, 7), np.uint8)
    array[1:3, 2:4, 3:6] = 4
    image = sitk.GetImageFromArray(array)
    image.SetSpacing((0.5, 0.8, 2.5))  # x, y, z
    image.SetOrigin((10.0, -4.0, 7.0))
    sitk.WriteImage(image, str(tmp_path / "a.nii.gz"))
    loaded = load_label_image(tmp_path / "a.nii.gz")
    assert loaded.spacing == pytest.approx((2.5, 0.8, 0.5))
    assert loaded.origin == pytest.approx((10.0, -4.0, 7.0))
    assert loaded.labels() == [4]
    # physical position of array index (z=1, y=2, x=3)
    assert loaded.index_to_physical((1, 2, 3)) == pytest.approx((10 + 3 * 0.5, -4 + 2 * 0.8, 7 + 2.5))


def test_seg_nrrd_keeps_names_and_matches_slicerio_masks(slicerio, slicerio_sample):
    image = load_label_image(slicerio_sample)
    segmentation = slicerio.read_segmentation(slicerio_sample)
    assert sorted(image.names.values()) == sorted(s["name"] for s in segmentation["segments"])
    for segment in segmentation["segments"]:
        label = next(k for k, v in image.names.items() if v == segment["name"])
        expected = slicerio.segment_mask(segmentation, segment["id"])  # (i, j, k) order
        assert np.array_equal(image.mask(label), np.transpose(expected, (2, 1, 0)) > 0)
    spacing_ijk = np.linalg.norm(np.asarray(segmentation["ijkToLPS"])[:3, :3], axis=0)
    assert image.spacing == pytest.approx(tuple(spacing_ijk[::-1]))


def test_float_and_int64_label_files(data_dir):
    labelled = load_label_image(data_dir / "sct_testing_data/t2/t2_seg-manual_labeled.nii.gz")  # float64
    assert labelled.array.dtype == np.int64 and labelled.labels() == [2, 3, 4, 5]
    int64 = load_label_image(data_dir / "sct_testing_data/t2s/t2s_seg-deepseg.nii.gz")
    assert int64.labels() == [1]
    assert int64.spacing == pytest.approx((7.5, 0.5, 0.5))


def test_probability_map_needs_a_threshold(data_dir):
    path = data_dir / "metricsreloaded_brain_lesions/Ref/CorrectLesion_0002_01_Ref.nii.gz"
    with pytest.raises(ReadError, match="threshold"):
        load_label_image(path)
    binary = load_label_image(path, threshold=0.5)
    raw = sitk.GetArrayFromImage(sitk.ReadImage(str(path)))
    assert int(binary.array.sum()) == int(np.count_nonzero(raw >= 0.5))


def test_png_masks_read_as_2d(data_dir):
    image = load_label_image(data_dir / "msi_fda_miss_tool/truth_mask.png")
    assert image.array.shape == (360, 360) and image.spacing == (1.0, 1.0)
    assert set(np.unique(image.array)) == {0, 255}


def test_unreadable_and_missing_files(tmp_path):
    with pytest.raises(ReadError, match="no such file"):
        load_label_image(tmp_path / "missing.nii.gz")
    broken = tmp_path / "broken.nrrd"
    broken.write_bytes(b"NRRD0004\ngarbage")
    with pytest.raises(ReadError, match="cannot be read"):
        load_label_image(broken)
    names = tmp_path / "names.json"
    names.write_text(json.dumps({"1": "liver", "2.0": "spleen"}))
    assert read_name_map(names) == {1: "liver", 2: "spleen"}


def test_numpy_input_requires_spacing():
    with pytest.raises(ValueError, match="spacing"):
        segmetrics.compare(np.ones((3, 3)), np.ones((3, 3)))


def test_geometry_mismatch_names_each_difference(data_dir):
    manual = load_label_image(data_dir / "platipy_cardiac_2019/04D1.COR.nii.gz")
    auto = load_label_image(data_dir / "platipy_cardiac_2019/Auto_COR.nii.gz")
    with pytest.raises(GeometryMismatchError) as error:
        check_same_geometry(auto, manual)
    message = str(error.value)
    assert "size differs" in message and "origin differs" in message and "spacing" not in message.split("Resample")[0].replace("spacing=", "")


def test_resample_to_reference_recovers_the_crop(data_dir):
    auto = data_dir / "platipy_cardiac_2019/Auto_COR.nii.gz"
    manual = data_dir / "platipy_cardiac_2019/04D1.COR.nii.gz"
    result = segmetrics.compare(auto, manual, metrics="dice", resample_to="reference")
    assert result.notes and "resampled" in result.notes[0]
    # The manual grid is an integer-voxel crop of the auto grid: resampling must be a pure shift.
    manual_image = load_label_image(manual)
    shifted = np.zeros(load_label_image(auto).array.shape, np.int64)
    shifted[10:110, 149:353, 130:396] = manual_image.array
    expected = segmetrics.metrics.overlap.dice(load_label_image(auto).array > 0, shifted > 0)
    assert result.structures[0].value("dice") == pytest.approx(expected, abs=1e-12)
    assert expected > 0.99


def test_label_image_rejects_bad_spacing():
    with pytest.raises(ValueError, match="spacing"):
        LabelImage(np.zeros((3, 3, 3)), (1.0, 1.0))
    with pytest.raises(ValueError, match="positive"):
        LabelImage(np.zeros((3, 3)), (1.0, 0.0))


def test_colour_pictures_are_refused_but_grey_rgba_is_read(tmp_path, data_dir):
    from PIL import Image

    photo = data_dir / "fetreg2021_sample/input/Video001_frame00500.png"
    with pytest.raises(ReadError, match="colour picture"):
        load_label_image(photo)
    grey_rgba = load_label_image(data_dir / "msi_fda_miss_tool/seg_mask.png")  # RGBA with equal channels
    expected = np.asarray(Image.open(data_dir / "msi_fda_miss_tool/seg_mask.png").convert("RGB"))[..., 0]
    assert np.array_equal(grey_rgba.array, expected)


def test_unreadable_file_message_names_the_reason(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("not an image")
    with pytest.raises(ReadError) as error:
        load_label_image(text)
    assert "Exception thrown" not in str(error.value) and "ImageIO" in str(error.value)


def test_multi_layer_seg_nrrd_keeps_overlapping_segments(slicerio, slicerio_sample):
    path = slicerio_sample.with_name("SegmentationOverlapping.seg.nrrd")
    image = load_label_image(path)
    segmentation = slicerio.read_segmentation(path)
    assert image.array.shape == (34, 128, 128)
    for segment in segmentation["segments"]:
        label = next(k for k, v in image.names.items() if v == segment["name"])
        expected = slicerio.segment_mask(segmentation, segment["id"])  # (i, j, k) order
        assert np.array_equal(image.mask(label), np.transpose(expected, (2, 1, 0)) > 0), segment["name"]
    assert image.segment_masks, "the overlapping sphere must be kept apart from the segments it overlaps"
    single = load_label_image(slicerio_sample)
    result = segmetrics.compare(single, image, metrics="dice")  # same grid, matched by segment name
    assert result["ribs"].value("dice") == 1.0
    assert result["overlapping sphere"].status == "reference_empty"


@pytest.mark.parametrize("threads", [1, 2])
def test_load_pair_reports_the_reference_first_when_both_inputs_are_bad(tmp_path, threads):
    """The two inputs are read in the package's threads (one in a batch worker): the reference's
    error surfaces when both are bad, else the bad one's, as when they were read one after the other."""
    from segmetrics.spatial import _threads
    from segmetrics.inputs.io import load_pair

    good = tmp_path / "good.nii.gz"
    sitk.WriteImage(sitk.GetImageFromArray(np.ones((2, 3, 4), np.uint8)), str(good))
    (tmp_path / "broken.nii.gz").write_bytes(b"not an image")
    before = _threads._THREADS
    _threads.set_thread_count(threads)
    try:
        with pytest.raises(ReadError, match="missing-reference"):
            load_pair(tmp_path / "missing-reference.nii.gz", tmp_path / "broken.nii.gz")
        with pytest.raises(ReadError, match="broken"):
            load_pair(good, tmp_path / "broken.nii.gz")
        with pytest.raises(ReadError, match="missing-test"):
            load_pair(good, tmp_path / "missing-test.nii.gz")
        reference, test = load_pair(good, good)
        assert reference.labels() == test.labels() == [1]
    finally:
        _threads.set_thread_count(before)
