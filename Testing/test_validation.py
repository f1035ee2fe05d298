"""The input- and parameter-validation layer: every untrustworthy input or option is refused with one
line, through the Python API, the CLI (exit 2), batch (a failed case with its reason) and frames."""
import gzip
import json
import math
import os
import re
import struct

import numpy as np
import pytest
import SimpleITK as sitk
from PIL import Image

import segmetrics
from segmetrics.evaluation.batch import Case, run_batch
from segmetrics.cli import main
from segmetrics.evaluation.compare import NothingToCompareError
from segmetrics.spatial.geometry import LabelImage, distinct_values
from segmetrics.inputs.io import InputPolicy, ReadError, apply_name_map, load_label_image, read_name_map
from segmetrics.registry import ParameterError, Parameters


def ball(shape=(12, 14, 16), centre=(6, 7, 8), radius=4.0) -> np.ndarray:
    grid = np.indices(shape)
    return (sum((g - c) ** 2 for g, c in zip(grid, centre)) <= radius ** 2).astype(np.uint8)


def write(array, path, spacing=(1.0, 1.0, 1.0), **kwargs):
    image = sitk.GetImageFromArray(array)
    image.SetSpacing(spacing)
    sitk.WriteImage(image, str(path), **kwargs)
    return path


def run_cli(capsys, *argv):
    """Exit code and the standard-error lines of one CLI call."""
    code = main([str(a) for a in argv])
    return code, [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def assert_one_line_error(capsys, pattern, *argv):
    code, lines = run_cli(capsys, *argv)
    assert code == 2
    assert len(lines) == 1 and re.search(pattern, lines[0]), lines


# ----------------------------------------------------------------------- 2: truncated files
def test_truncated_nii_gz_is_refused_not_zero_filled(tmp_path, capsys):
    rng = np.random.default_rng(1)
    array = (rng.random((20, 30, 40)) > 0.5).astype(np.uint8)  # incompressible: a cut loses voxels
    whole = write(array, tmp_path / "whole.nii.gz")
    cut = tmp_path / "cut.nii.gz"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size * 6 // 10])
    assert sitk.GetArrayFromImage(sitk.ReadImage(str(cut))).sum() < array.sum()  # ITK alone zero-fills it
    with pytest.raises(ReadError, match="cut short"):
        load_label_image(cut)
    assert_one_line_error(capsys, "cut short", "compare", whole, cut)
    summary = run_batch([Case("cut", str(whole), str(cut)), Case("whole", str(whole), str(whole))],
                        tmp_path / "out", metrics="dice", progress=False)
    assert list(summary.failed) == ["cut"] and "cut short" in summary.failed["cut"]


def test_damaged_nii_gz_is_refused(tmp_path, flip_middle_byte):
    rng = np.random.default_rng(4)
    whole = write((rng.random((20, 30, 40)) > 0.5).astype(np.uint8), tmp_path / "a.nii.gz")
    flip_middle_byte(whole, tmp_path / "damaged.nii.gz")
    with pytest.raises(ReadError, match="cut short or damaged"):
        load_label_image(tmp_path / "damaged.nii.gz")


def test_gzipped_nifti_is_decompressed_once(tmp_path, monkeypatch):
    """The stream's CRC is checked on the voxels ITK decompressed, not by reading the file a second time."""
    from segmetrics.inputs.readers import files

    array = (np.random.default_rng(5).random((20, 30, 40)) > 0.5).astype(np.uint8)
    path = write(array, tmp_path / "a.nii.gz")
    monkeypatch.setattr(files, "data_length", lambda path: pytest.fail(f"{path} decompressed twice"))
    assert np.array_equal(load_label_image(path).array, array)


def test_cut_nii_gz_with_a_trailer_of_the_right_length_is_refused(tmp_path):
    """A stream cut short but ending in a trailer that declares the right length: the CRC of the
    zero-filled voxels does not match, so the stream is read to its end and refused."""
    array = (np.random.default_rng(6).random((20, 30, 40)) > 0.5).astype(np.uint8)
    raw = write(array, tmp_path / "whole.nii.gz").read_bytes()
    forged = raw[: len(raw) * 6 // 10] + raw[-8:]  # the intact file's own CRC and length
    (tmp_path / "forged.nii.gz").write_bytes(forged)
    with pytest.raises(ReadError, match="cut short or damaged"):
        load_label_image(tmp_path / "forged.nii.gz")


def test_voxel_check_accepts_an_intact_stream_read_differently(tmp_path, monkeypatch):
    """Voxels that differ from the file's bytes (e.g. converted by the reader) send the check to the
    stream itself, which is intact here: no refusal; the voxels as stored need no second read."""
    from segmetrics.inputs.readers import files, nifti

    array = ball()
    path = write(array, tmp_path / "a.nii.gz")
    check = nifti.check(path, defer_data_check=True)
    assert isinstance(check, files.VoxelCheck) and check.path == path
    reads = []
    read_stream = files.inflated_length
    monkeypatch.setattr(files, "inflated_length",
                        lambda path, offset: (reads.append(path), read_stream(path, offset))[1])
    check.verify(array)
    assert reads == []
    check.verify(array.astype(np.float32))
    assert reads == [path]
    assert nifti.check(path) is None and len(reads) == 2  # by default the stream is read here


@pytest.mark.parametrize("damaged", [False, True])
def test_big_endian_nii_gz_is_read_and_checked_on_its_stream(tmp_path, damaged, flip_middle_byte):
    """ITK swaps a big-endian file's voxels, so they do not give the stream's CRC: an intact file
    still reads to its values, a damaged one is refused."""
    nib = pytest.importorskip("nibabel")
    z, y, x = np.indices((20, 30, 40)) // 10
    array = (256 + 100 * z + 10 * y + x).astype(np.int16)  # (z, y, x): blocks of labels whose two bytes vary
    header = nib.Nifti1Header(endianness=">")
    header.set_data_dtype(">i2")
    nib.save(nib.Nifti1Image(array.transpose(2, 1, 0), np.eye(4), header), tmp_path / "big.nii.gz")
    assert nib.load(tmp_path / "big.nii.gz").header.endianness == ">"
    if damaged:
        flip_middle_byte(tmp_path / "big.nii.gz")
        with pytest.raises(ReadError, match="cut short or damaged"):
            load_label_image(tmp_path / "big.nii.gz")
    else:
        assert np.array_equal(load_label_image(tmp_path / "big.nii.gz").array, array)


def test_nifti_shorter_than_its_header_declares_is_refused(tmp_path):
    array = ball()
    whole = write(array, tmp_path / "whole.nii")
    short = whole.read_bytes()[:-100]
    (tmp_path / "short.nii").write_bytes(short)
    (tmp_path / "short.nii.gz").write_bytes(gzip.compress(short))  # a sound gzip stream of a cut file
    for name in ("short.nii", "short.nii.gz"):
        with pytest.raises(ReadError, match=f"holds {len(short)} bytes .* declares {len(short) + 100}"):
            load_label_image(tmp_path / name)
    assert np.array_equal(load_label_image(whole).array, array)


@pytest.mark.parametrize("name, compressed", [("a.mha", False), ("a.mha", True), ("a.mhd", False), ("a.mhd", True),
                                              ("a.nrrd", False), ("a.nrrd", True)])
def test_truncated_metaimage_and_nrrd_are_refused_in_one_line(tmp_path, capsys, name, compressed):
    rng = np.random.default_rng(2)
    whole = write((rng.random((20, 30, 40)) > 0.5).astype(np.uint8), tmp_path / name, useCompression=compressed)
    data = max(tmp_path.iterdir(), key=lambda p: p.stat().st_size)  # the .mha/.nrrd itself or the .raw/.zraw
    data.write_bytes(data.read_bytes()[: data.stat().st_size * 6 // 10])
    code, lines = run_cli(capsys, "compare", whole, whole)
    assert code == 2 and len(lines) == 1
    if name.startswith("a.mh"):  # ITK itself says only "No such file or directory"
        assert "cut short" in lines[0]


# ------------------------------------------------------------------------ 3: invalid spacing
def nifti_with_pixdim(tmp_path, value, compressed):
    """A NIfTI file whose pixdim[1] (x voxel size) is set to ``value`` in the header bytes."""
    raw = bytearray(write(ball(), tmp_path / "good.nii").read_bytes())
    struct.pack_into("<f", raw, 80, value)  # pixdim[1] of the NIfTI-1 header
    path = tmp_path / ("bad.nii.gz" if compressed else "bad.nii")
    path.write_bytes(gzip.compress(bytes(raw)) if compressed else bytes(raw))
    return path


@pytest.mark.parametrize("value", [0.0, math.nan, math.inf, -1.0, 1e30])
@pytest.mark.parametrize("compressed", [False, True])
def test_nifti_invalid_pixdim_is_refused_not_read_as_1mm(tmp_path, value, compressed, capsys):
    path = nifti_with_pixdim(tmp_path, value, compressed)
    with pytest.raises(ReadError, match=r"pixdim\[1..3\] .* is invalid"):
        load_label_image(path)
    assert_one_line_error(capsys, "pixdim", "compare", path, path)


def nrrd_with(tmp_path, field_line):
    """A NRRD label map whose geometry line is replaced by ``field_line``."""
    text = write(ball(), tmp_path / "good.nrrd", spacing=(0.5, 0.8, 2.5)).read_bytes()
    if field_line.startswith("spacings"):
        text = re.sub(rb"space: [^\n]*\n|space origin: [^\n]*\n", b"", text)
    path = tmp_path / "bad.nrrd"
    path.write_bytes(re.sub(rb"space directions: [^\n]*", field_line.encode(), text))
    return path


@pytest.mark.parametrize("line", ["spacings: nan 0.8 2.5", "spacings: 1e300 0.8 2.5",
                                  "space directions: (1e300,0,0) (0,0.8,0) (0,0,2.5)"])
def test_nrrd_invalid_spacing_is_refused(tmp_path, line):
    with pytest.raises(ReadError, match="NRRD .* is invalid"):
        load_label_image(nrrd_with(tmp_path, line))


def test_nrrd_sheared_direction_is_refused(tmp_path):
    with pytest.raises(ReadError, match="not orthonormal"):
        load_label_image(nrrd_with(tmp_path, "space directions: (0.5,0.5,0) (0,0.8,0) (0,0,2.5)"))
    assert load_label_image(nrrd_with(tmp_path, "spacings: 0.5 0.8 2.5")).spacing == pytest.approx((2.5, 0.8, 0.5))


@pytest.mark.parametrize("value", ["0", "nan", "inf", "1e300"])
def test_metaimage_invalid_spacing_is_refused(tmp_path, value):
    text = write(ball(), tmp_path / "good.mha").read_bytes()
    path = tmp_path / "bad.mha"
    path.write_bytes(re.sub(rb"ElementSpacing = [^\n]*", f"ElementSpacing = {value} 1 1".encode(), text))
    with pytest.raises(ReadError, match="ElementSpacing .* is invalid"):
        load_label_image(path)


@pytest.mark.parametrize("spacing", [(0.0, 1.0, 1.0), (math.nan, 1.0, 1.0), (1e300, 1.0, 1.0)])
def test_in_memory_invalid_spacing_is_refused(spacing):
    with pytest.raises(ValueError, match="spacing .* is invalid"):
        segmetrics.compare(ball(), ball(), spacing=spacing, metrics="dice")
    with pytest.raises(ValueError, match="spacing .* is invalid"):
        LabelImage(ball(), spacing)


def test_in_memory_sheared_direction_and_nan_origin_are_refused():
    with pytest.raises(ValueError, match="not orthonormal"):
        LabelImage(ball(), (1, 1, 1), direction=(1, 0, 0, 0.5, 1, 0, 0, 0, 1))
    with pytest.raises(ValueError, match="origin"):
        LabelImage(ball(), (1, 1, 1), origin=(0, math.nan, 0))
    rotated = LabelImage(ball(), (1, 1, 1), direction=(0, -1, 0, 1, 0, 0, 0, 0, 1))  # a rotation is fine
    assert rotated.labels() == [1]


# ---------------------------------------------------------------------------------- 4: JPEG
def jpeg_mask(tmp_path, name="mask.jpg"):
    mask = np.zeros((64, 64), np.uint8)
    mask[16:48, 20:44] = 255
    Image.fromarray(mask).save(tmp_path / name, format="JPEG", quality=75)
    return tmp_path / name, mask > 0


@pytest.mark.needs("rich")
def test_jpeg_mask_is_refused_unless_allowed_with_a_threshold(tmp_path, capsys):
    path, truth = jpeg_mask(tmp_path)
    assert len(np.unique(np.asarray(Image.open(path)))) > 2  # the compression made grey levels
    with pytest.raises(ReadError, match="lossy"):
        load_label_image(path)
    with pytest.raises(ReadError, match="threshold"):
        load_label_image(path, input_policy=InputPolicy(allow_lossy=True))
    binary = load_label_image(path, threshold=128, input_policy=InputPolicy(allow_lossy=True))
    assert binary.labels() == [1]
    assert segmetrics.metrics.overlap.dice(binary.array > 0, truth) > 0.99
    assert_one_line_error(capsys, "lossy", "compare", path, path)
    assert_one_line_error(capsys, "--allow-lossy needs --threshold", "compare", path, path, "--allow-lossy")
    code, _ = run_cli(capsys, "compare", path, path, "--allow-lossy", "--threshold", "128", "--metrics", "dice")
    assert code == 0


def test_jpeg_is_recognised_by_content_not_by_name(tmp_path):
    path, _ = jpeg_mask(tmp_path, "disguised.png")
    with pytest.raises(ReadError, match="JPEG is a lossy format"):
        load_label_image(path)


def test_frames_check_every_frame(tmp_path):
    frame = np.zeros((8, 8), np.int16)
    frame[2:5, 2:5] = 1
    for folder in ("pred", "gt"):
        (tmp_path / folder).mkdir()
        np.save(tmp_path / folder / "f1.npy", frame)
    np.save(tmp_path / "gt" / "f2.npy", frame - 1000)  # an intensity frame: negative values
    np.save(tmp_path / "pred" / "f2.npy", frame)
    with pytest.raises(ReadError, match="f2.npy: holds negative values"):
        segmetrics.evaluate_folders(tmp_path / "pred", tmp_path / "gt")
    with pytest.raises(ValueError, match="threshold"):
        segmetrics.evaluate_folders(tmp_path / "pred", tmp_path / "gt", threshold=math.nan)


@pytest.mark.needs("rich")
def test_grey_picture_or_soft_map_needs_a_threshold(tmp_path, data_dir, capsys):
    ramp = np.tile(np.arange(256, dtype=np.uint8), (8, 1))  # a grey picture: 255 non-zero levels
    Image.fromarray(ramp).save(tmp_path / "ramp.png")
    with pytest.raises(ReadError, match="255 grey levels"):
        load_label_image(tmp_path / "ramp.png")
    assert load_label_image(tmp_path / "ramp.png", threshold=128).array.sum() == 8 * 128
    soft = data_dir / "msi_fda_miss_tool/ComparingSamples/Seg/p0724_n2_s1_pred.png"  # a soft map saved as PNG
    assert_one_line_error(capsys, "grey levels", "compare", soft, soft)
    code, _ = run_cli(capsys, "compare", soft, soft, "--threshold", "128", "--metrics", "dice")
    assert code == 0


# ---------------------------------------------------------------------- 5: duplicate names
def test_duplicate_names_in_a_name_map_are_refused(tmp_path, capsys):
    names = tmp_path / "names.json"
    names.write_text(json.dumps({"1": "lung", "2": "lung", "3": "heart"}))
    with pytest.raises(ReadError, match="'lung' \\(labels 1, 2\\)"):
        read_name_map(names)
    labels = write(np.arange(4, dtype=np.uint8).repeat(8).reshape(2, 4, 4), tmp_path / "labels.nrrd")
    assert_one_line_error(capsys, "'lung'", "compare", labels, labels, "--names", names)


@pytest.mark.parametrize("text", ['{"1": "lung", "1": "heart"}', '{"1": "lung", "1.0": "heart"}'])
def test_a_label_named_twice_is_refused(tmp_path, text):
    (tmp_path / "names.json").write_text(text)  # JSON keeps only the last of repeated keys
    with pytest.raises(ReadError, match="label\\(s\\) 1 named more than once"):
        read_name_map(tmp_path / "names.json")


@pytest.mark.needs("rich")
def test_a_name_equal_to_an_unnamed_label_value_is_refused(tmp_path, capsys):
    names = tmp_path / "names.json"
    names.write_text('{"2": "1"}')  # label 2 named "1" while label 1 keeps its value as name
    labels = write(np.arange(3, dtype=np.uint8).repeat(8).reshape(2, 3, 4), tmp_path / "labels.nrrd")
    with pytest.raises(ReadError, match="'1' \\(label 2\\) equal the value of an unnamed label"):
        apply_name_map(load_label_image(labels), read_name_map(names))
    assert_one_line_error(capsys, "unnamed label", "compare", labels, labels, "--names", names)


def test_duplicate_segment_names_in_seg_nrrd_are_refused(tmp_path, slicerio, slicerio_sample):
    segmentation = slicerio.read_segmentation(slicerio_sample)
    segmentation["segments"][1]["name"] = segmentation["segments"][0]["name"]  # "ribs" twice
    slicerio.write_segmentation(str(tmp_path / "dup.seg.nrrd"), segmentation)
    with pytest.raises(ReadError, match="'ribs' \\(labels 1, 2\\)"):
        load_label_image(tmp_path / "dup.seg.nrrd")


def test_duplicate_names_of_in_memory_images_are_refused():
    image = LabelImage(np.arange(3).repeat(4).reshape(3, 4), (1, 1), names={1: "lung", 2: "lung"})
    with pytest.raises(ReadError, match="reference: structure names must be unique"):
        segmetrics.compare(image, image)


# --------------------------------------------------------------------------- 6: parameters
@pytest.mark.parametrize("field, value", [
    ("hd_percentile", "95"), ("hd_percentile", 0), ("hd_percentile", 101), ("hd_percentile", math.nan),
    ("hd_percentile", True), ("nsd_tolerance_mm", -1), ("nsd_tolerance_mm", math.nan), ("nsd_tolerance_mm", 0),
    ("msi_il", math.nan), ("msi_ol", 0), ("msi_ol", math.inf), ("msi_axis", 5), ("msi_axis", -1),
    ("msi_axis", 1.0), ("roughness_window_mm", 0), ("roughness_window_mm", -2.0), ("surface_mode", "fast"),
    ("hd_percentile_variant", "max"), ("msi_convention", None), ("msi_units", "cm"), ("msi_align", ""),
    ("roughness_convention", "rough"),
])
def test_invalid_parameters_are_refused_at_construction(field, value):
    with pytest.raises(ParameterError, match=field):
        Parameters(**{field: value})


def test_valid_parameters_are_kept_as_numbers():
    params = Parameters(hd_percentile=np.int64(90), nsd_tolerance_mm=np.float32(1.5), msi_axis=np.int64(1),
                        roughness_window_mm=3)
    assert (params.hd_percentile, params.nsd_tolerance_mm, params.msi_axis, params.roughness_window_mm) == (90, 1.5, 1, 3)
    assert json.dumps(params.__dict__)  # plain Python numbers: JSON-able for batch's run.json


def test_msi_axis_must_exist_in_the_image():
    with pytest.raises(ParameterError, match="msi_axis 2 does not exist in a 2-D image"):
        segmetrics.compare(ball()[6], ball()[6], spacing=(1, 1), metrics="msi", params=Parameters(msi_axis=2))


@pytest.mark.parametrize("flags, pattern", [
    (["--nsd-tolerance", "-1"], "nsd_tolerance_mm"), (["--nsd-tolerance", "nan"], "nsd_tolerance_mm"),
    (["--msi-axis", "5"], "msi_axis"), (["--msi-il", "nan"], "msi_il"), (["--roughness-window", "0"], "roughness"),
    (["--roughness-window", "-1"], "roughness"), (["--threshold", "nan"], "threshold"),
])
def test_invalid_cli_parameters_exit_2_with_one_line(tmp_path, capsys, flags, pattern):
    path = write(ball(), tmp_path / "a.nrrd")
    assert_one_line_error(capsys, pattern, "compare", path, path, *flags)


def test_params_json_with_text_number_is_refused_before_any_case(tmp_path, capsys):
    path = write(ball(), tmp_path / "a.nrrd")
    params = tmp_path / "params.json"
    params.write_text('{"hd_percentile": "95"}')
    assert_one_line_error(capsys, "hd_percentile must be a number", "compare", path, path, "--params", params)
    manifest = tmp_path / "cases.csv"
    manifest.write_text(f"case_id,reference,test\nc1,{path},{path}\n")
    assert_one_line_error(capsys, "hd_percentile", "batch", "--manifest", manifest, "-o", tmp_path / "out",
                          "--params", params, "--no-progress")
    assert not (tmp_path / "out" / "cases.jsonl").exists()


def test_batch_refuses_a_nan_threshold_before_any_case(tmp_path):
    path = str(write(ball(), tmp_path / "a.nrrd"))
    with pytest.raises(ValueError, match="threshold must be a finite number"):
        run_batch([Case("c1", path, path)], tmp_path / "out", threshold=math.nan, progress=False)
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------ 8: nothing to compare
@pytest.mark.needs("rich")
def test_two_empty_masks_are_nothing_to_compare(tmp_path, capsys):
    empty = write(np.zeros((4, 5, 6), np.uint8), tmp_path / "empty.nrrd")
    with pytest.raises(NothingToCompareError, match="nothing to compare"):
        segmetrics.compare(empty, empty)
    assert_one_line_error(capsys, "nothing to compare", "compare", empty, empty)
    named = segmetrics.compare(empty, empty, labels=[1], metrics="dice")  # asked for: reported as both_empty
    assert named["1"].status == "both_empty"
    summary = run_batch([Case("empty", str(empty), str(empty))], tmp_path / "out", metrics="dice", progress=False)
    assert "nothing to compare" in summary.failed["empty"]


def test_seg_nrrd_without_segments_is_nothing_to_compare(tmp_path, slicerio, slicerio_sample):
    segmentation = slicerio.read_segmentation(slicerio_sample)
    segmentation["segments"] = []
    segmentation["voxels"] = np.zeros_like(np.asarray(segmentation["voxels"]))
    slicerio.write_segmentation(str(tmp_path / "none.seg.nrrd"), segmentation)
    with pytest.raises(NothingToCompareError):
        segmetrics.compare(tmp_path / "none.seg.nrrd", tmp_path / "none.seg.nrrd")


def test_empty_frames_are_nothing_to_compare(tmp_path):
    for folder in ("pred", "gt"):
        (tmp_path / folder).mkdir()
        np.save(tmp_path / folder / "f1.npy", np.zeros((6, 6), np.uint8))
    with pytest.raises(NothingToCompareError, match="no class to score"):
        segmetrics.evaluate_folders(tmp_path / "pred", tmp_path / "gt")
    with pytest.raises(NothingToCompareError):
        segmetrics.evaluate_frames([np.zeros((4, 4), int)], [np.zeros((4, 4), int)])


@pytest.mark.parametrize("iou", [math.nan, 0, 1.5, "0.5"])
def test_invalid_detection_iou_is_refused(tmp_path, iou):
    for folder in ("pred", "gt"):
        (tmp_path / folder).mkdir()
        np.save(tmp_path / folder / "f1.npy", np.ones((6, 6), np.uint8))
    with pytest.raises(ParameterError, match="detection_iou"):
        segmetrics.evaluate_folders(tmp_path / "pred", tmp_path / "gt", instances=True, detection_iou=iou)


# ------------------------------------------------------------------- 9: intensity as labels
def test_ct_given_as_label_map_is_refused(data_dir, capsys):
    seg = data_dir / "totalsegmentator/example_seg.nii.gz"
    ct = data_dir / "totalsegmentator/example_ct_sm.nii.gz"
    with pytest.raises(ReadError, match="intensity image"):
        segmetrics.compare(seg, ct)
    assert_one_line_error(capsys, "intensity image", "compare", seg, ct)


@pytest.mark.parametrize("name", ["sct_testing_data/t2/t2.nii.gz", "pyradiomics/breast1_image.nrrd",
                                  "dcmqi/ct-3slice/01.dcm"])
def test_real_intensity_images_are_refused_as_label_maps(data_dir, name):
    with pytest.raises(ReadError, match="intensity image"):
        load_label_image(data_dir / name)


def test_many_distinct_values_are_refused_unless_allowed():
    array = np.arange(1000, dtype=np.uint16).reshape(10, 10, 10)  # exactly 999 non-zero values
    with pytest.raises(ReadError, match="999 distinct non-zero values"):
        load_label_image(array, spacing=(1, 1, 1))
    allowed = load_label_image(array, spacing=(1, 1, 1), input_policy=InputPolicy(allow_many_labels=True))
    assert allowed.labels() == list(range(1, 1000))
    blocks = np.arange(400, dtype=np.uint16).repeat(8).reshape(10, 20, 16)  # 399 piecewise-constant labels
    assert len(load_label_image(blocks, spacing=(1, 1, 1)).labels()) == 399  # a big label map is fine


def test_noisy_image_with_fewer_values_is_refused_as_intensity(data_dir):
    rng = np.random.default_rng(3)
    smooth = np.linspace(20, 180, 16)[:, None, None] * np.ones((16, 16, 16))
    mr_like = np.clip(smooth + rng.normal(0, 10, smooth.shape), 0, 255).astype(np.uint8)  # ~200 grey values
    with pytest.raises(ReadError, match="vary from voxel to voxel"):
        load_label_image(mr_like, spacing=(1, 1, 1))
    totalseg = load_label_image(data_dir / "totalsegmentator/example_seg.nii.gz")  # a real map of many labels
    assert len(totalseg.labels()) > 40


def test_negative_values_are_refused_as_intensity():
    array = np.zeros((3, 4, 5), np.int16)
    array[0, 0, 0] = -1000
    with pytest.raises(ReadError, match="negative values \\(down to -1000\\)"):
        load_label_image(array, spacing=(1, 1, 1))


@pytest.mark.parametrize("array", [
    np.array([[0, 3, 3], [70000, 2, 0]], np.int64),
    np.array([[-5, 3], [2**40, -5]], np.int64),
    np.array([[True, False]]),
    np.array([[0, 2**63 + 5], [2**63 + 1, 0]], np.uint64),
    np.random.default_rng(0).integers(-300, 300, (7, 9, 11)).astype(np.int16),
    np.zeros((0, 3), np.uint8),
])
def test_distinct_values_match_numpy_unique(array):
    assert distinct_values(array).tolist() == np.unique(array).tolist()


def test_labels_follow_a_new_array():
    image = LabelImage(np.array([[0, 1], [2, 2]]), (1, 1))
    assert image.labels() == [1, 2]
    image.array = np.array([[0, 5], [0, 0]])
    assert image.labels() == [5]
    assert image.with_array(np.array([[7, 0], [0, 0]])).labels() == [7]


# --------------------------------------------------------------------------------- 10: DICOM
def write_dicom_object(path, sop_class, modality):
    """A minimal DICOM file of one SOP class (no pixel data)."""
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.uid import ExplicitVRLittleEndian, generate_uid

    dataset = Dataset()
    dataset.file_meta = FileMetaDataset()
    dataset.file_meta.TransferSyntaxUID = ExplicitVRLittleEndian
    dataset.file_meta.MediaStorageSOPClassUID = sop_class
    dataset.SOPClassUID, dataset.SOPInstanceUID, dataset.Modality = sop_class, generate_uid(), modality
    dataset.save_as(path, enforce_file_format=True)
    return path


def test_dicom_objects_that_are_not_images_are_refused(tmp_path, capsys):
    from pydicom.uid import BasicTextSRStorage

    path = write_dicom_object(tmp_path / "report.dcm", BasicTextSRStorage, "SR")
    with pytest.raises(ReadError, match="DICOM Basic Text SR Storage"):
        load_label_image(path)
    assert_one_line_error(capsys, "Basic Text SR Storage", "compare", path, path)


def test_dicom_rt_dose_is_refused_and_ct_image_passes_the_dicom_check(tmp_path, data_dir):
    from pydicom.uid import RTDoseStorage

    write_dicom_object(tmp_path / "dose", RTDoseStorage, "RTDOSE")  # no .dcm suffix: recognised by content
    with pytest.raises(ReadError, match="DICOM RT Dose Storage \\(RTDOSE\\)"):
        load_label_image(tmp_path / "dose")
    with pytest.raises(ReadError, match="intensity image"):  # an image, refused only as a label map
        load_label_image(data_dir / "dcmqi/ct-3slice/01.dcm")


def test_dicom_header_is_parsed_once_per_file(tmp_path, monkeypatch):
    """The validation layer and the reader's dispatch share one parse of a DICOM file's header; a
    changed file is parsed again."""
    import pydicom
    from pydicom.uid import BasicTextSRStorage, RTDoseStorage

    parses = []
    read = pydicom.dcmread
    monkeypatch.setattr(pydicom, "dcmread", lambda *args, **kwargs: (parses.append(args[0]), read(*args, **kwargs))[1])
    path = write_dicom_object(tmp_path / "object.dcm", RTDoseStorage, "RTDOSE")
    for _ in range(2):
        with pytest.raises(ReadError, match="RT Dose Storage"):
            load_label_image(path)
    assert len(parses) == 1
    write_dicom_object(path, BasicTextSRStorage, "SR")  # another version of the file
    with pytest.raises(ReadError, match="Basic Text SR Storage"):
        load_label_image(path)
    assert len(parses) == 2


# ------------------------------------------------------------------ 15: external data files
def detached(tmp_path, suffix, data_field):
    """A header-only image in ``tmp_path/case`` whose data file line is replaced by ``data_field``."""
    array = ball()
    folder = tmp_path / "case"
    folder.mkdir(exist_ok=True)
    header = write(array, folder / f"a.{suffix}")
    (tmp_path / "elsewhere").mkdir(exist_ok=True)
    data = next(p for p in folder.iterdir() if p != header)
    (tmp_path / "elsewhere" / data.name).write_bytes(data.read_bytes())
    key = "ElementDataFile = " if suffix == "mhd" else "data file: "
    text = re.sub(f"{key}[^\n]*", data_field.replace("NAME", data.name), header.read_text())
    header.write_text(text)
    return header, array


@pytest.mark.parametrize("suffix, field", [
    ("mhd", "ElementDataFile = ../elsewhere/NAME"), ("nhdr", "data file: ../elsewhere/NAME"),
    ("nhdr", "data file: LIST 3\n../elsewhere/NAME"),
])
def test_data_file_outside_the_header_folder_is_refused(tmp_path, capsys, suffix, field):
    header, array = detached(tmp_path, suffix, field)
    with pytest.raises(ReadError, match="outside the header's folder"):
        load_label_image(header)
    assert_one_line_error(capsys, "outside the header's folder", "compare", header, header)
    allowed = load_label_image(header, input_policy=InputPolicy(allow_external_data=True))
    assert np.array_equal(allowed.array, array)


def test_absolute_data_file_path_is_refused(tmp_path):
    header, _ = detached(tmp_path, "mhd", f"ElementDataFile = {tmp_path}/elsewhere/NAME")
    with pytest.raises(ReadError, match="outside the header's folder"):
        load_label_image(header)


def test_data_file_in_a_subfolder_is_accepted(tmp_path):
    header, array = detached(tmp_path, "mhd", "ElementDataFile = sub/NAME")
    (tmp_path / "case" / "sub").mkdir()
    data = next(p for p in (tmp_path / "elsewhere").iterdir())
    (tmp_path / "case" / "sub" / data.name).write_bytes(data.read_bytes())
    assert np.array_equal(load_label_image(header).array, array)


# --------------------------------------------------------------------------- batch settings
def test_input_policy_is_stored_in_batch_settings(tmp_path):
    path = str(write(np.arange(8, dtype=np.uint8).reshape(2, 2, 2), tmp_path / "a.nrrd"))
    run_batch([Case("c1", path, path)], tmp_path / "out", metrics="dice", progress=False,
              input_policy=InputPolicy(allow_many_labels=True))
    settings = json.loads((tmp_path / "out" / "run.json").read_text())
    assert settings["input_policy"] == {"allow_lossy": False, "allow_many_labels": True, "allow_external_data": False,
                                        "assume_unit_spacing": False, "allow_crop": False}


def test_nifti_pair_header_and_data_are_checked(tmp_path):
    array = ball()
    header = write(array, tmp_path / "pair.hdr")
    data = tmp_path / "pair.img"
    assert np.array_equal(load_label_image(header).array, array)
    raw = bytearray(header.read_bytes())
    struct.pack_into("<f", raw, 84, 0.0)  # pixdim[2]
    (tmp_path / "bad.hdr").write_bytes(bytes(raw))
    (tmp_path / "bad.img").write_bytes(data.read_bytes())
    with pytest.raises(ReadError, match=r"bad.hdr: NIfTI pixdim\[1..3\] \(1, 0, 1\)"):
        load_label_image(tmp_path / "bad.img")
    data.write_bytes(data.read_bytes()[:-10])
    with pytest.raises(ReadError, match="pair.img: holds .* bytes of NIfTI data"):
        load_label_image(header)


def test_instance_maps_may_hold_many_instances(tmp_path):
    classes = np.ones((25, 25), np.uint8)
    instance_ids = np.arange(1, 626, dtype=np.int32).reshape(25, 25)  # 625 one-pixel instances
    for folder in ("pred", "gt", "pred_inst", "gt_inst"):
        (tmp_path / folder).mkdir()
        np.save(tmp_path / folder / "f1.npy", instance_ids if folder.endswith("inst") else classes)
    result = segmetrics.evaluate_folders(tmp_path / "pred", tmp_path / "gt", instances=True,
                                         instance_dirs=(tmp_path / "pred_inst", tmp_path / "gt_inst"))
    assert (result.detection.true_positives, result.detection.false_positives) == (625, 0)  # identical maps


@pytest.mark.parametrize("first, then", [("image", "seg"), ("seg", "image")])
def test_a_dicom_file_rewritten_within_one_clock_tick_is_read_as_what_it_now_is(tmp_path, data_dir, first, then):
    """The parsed DICOM header is cached per file version: a file rewritten with the same size and
    modification time (two writes within the file system's time granularity, made explicit with
    os.utime) must be read as what it is now. The SEG read as its stale 'Enhanced MR image' class
    became one structure '255' on a 7 x 1 mm grid (issue 11, defect 10) with exit 0."""
    import shutil

    path = tmp_path / "object.dcm"
    shutil.copy(data_dir / "dcmqi/partial_overlaps.dcm", path)
    seg = path.read_bytes()
    # a SOP Class UID of the same padded length: Enhanced MR Image Storage
    versions = {"seg": seg, "image": seg.replace(b"1.2.840.10008.5.1.4.1.1.66.4", b"1.2.840.10008.5.1.4.1.1.4.1\0")}
    path.write_bytes(versions[first])
    load_label_image(path)  # parsed and cached as `first`
    status = path.stat()
    path.write_bytes(versions[then])
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns))
    assert path.stat().st_size == status.st_size and path.stat().st_mtime_ns == status.st_mtime_ns
    image = load_label_image(path)
    if then == "seg":  # the SEG's own grid and segments (highdicom): 3 frames of 0.81 mm pixels
        assert image.array.shape[0] == 3 and image.spacing[1] == pytest.approx(0.810547)
        assert set(image.names.values()) == {"GREEN", "ORANGE", "PURPLE", "LIGHT_BLUE", "DARK_BLUE"}
    else:  # read by ITK as an image: 7 frames of 1 mm, no segment names
        assert image.array.shape[0] == 7 and not image.names
