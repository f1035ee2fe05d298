"""One validation layer for every entry point: an option or input refused by one of compare (Python),
``segmetrics compare``, ``run_batch``, ``segmetrics batch`` and the Slicer logic is refused by all, in one
line and before any input is read or any case runs."""
import math
import re

import numpy as np
import pytest
import SimpleITK as sitk

import segmetrics
from segmetrics.evaluation.batch import Case, run_batch
from segmetrics.cli import main
from segmetrics.inputs.io import ReadError, load_label_image

REFERENCE = np.zeros((8, 10, 12), np.uint8)
REFERENCE[2:6, 2:8, 3:9] = 1
TEST = np.zeros_like(REFERENCE)
TEST[2:6, 3:8, 3:10] = 1


def numpy_dice(a, b):
    return 2 * np.count_nonzero(a & b) / (np.count_nonzero(a) + np.count_nonzero(b))


@pytest.fixture
def files(tmp_path):
    paths = []
    for name, array in (("ref.nii.gz", REFERENCE), ("test.nii.gz", TEST)):
        sitk.WriteImage(sitk.GetImageFromArray(array), str(tmp_path / name))
        paths.append(tmp_path / name)
    (tmp_path / "manifest.csv").write_text(f"case_id,reference,test\nc1,{paths[0]},{paths[1]}\n")
    return tmp_path, *paths


# (keyword arguments of compare / run_batch, the same as CLI flags or None when the CLI cannot express it, message)
BAD_OPTIONS = [
    ({"labels": [1.5]}, ["--labels", "1.5"], r"1\.5'? is not a label value"),
    ({"labels": [math.nan]}, ["--labels", "nan"], r"nan'? is not a label value"),
    ({"labels": "12"}, None, "labels must be a list"),  # read digit by digit: labels 1 and 2
    ({"labels": [True]}, None, "is not a label value"),
    ({"metrics": []}, ["--metrics="], "no metric selected"),
    ({"metrics": ""}, ["--metrics", ","], "no metric selected"),
    ({"metrics": 5}, None, "metrics must be metric or group names"),  # TypeError from deep inside
    ({"labels": 5}, None, "labels must be a list"),
    ({"resample_to": "refrence"}, None, "resample_to refrence: no such image folder or file"),
    ({"input_policy": "allow"}, None, "input_policy must be"),
]


@pytest.mark.parametrize("options, flags, message", BAD_OPTIONS)
def test_bad_options_are_refused_by_the_python_api_before_reading(files, options, flags, message, monkeypatch):
    folder, reference, test = files
    monkeypatch.setattr(segmetrics.inputs.io, "read_label_image", lambda *a, **k: pytest.fail("inputs read before the check"))
    with pytest.raises(ValueError, match=message):
        segmetrics.compare(reference, test, **options)


@pytest.mark.parametrize("options, flags, message", BAD_OPTIONS)
def test_bad_options_are_refused_by_run_batch_before_any_case(files, options, flags, message):
    folder, reference, test = files
    with pytest.raises(ValueError, match=message):
        run_batch([Case("c1", str(reference), str(test))], folder / "out", workers=0, **options)
    assert not (folder / "out").exists()


@pytest.mark.parametrize("options, flags, message", [case for case in BAD_OPTIONS if case[1]])
@pytest.mark.parametrize("command", ["compare", "batch"])
def test_bad_options_are_refused_by_the_cli_in_one_line(files, options, flags, message, command, capsys):
    pytest.importorskip("rich", reason="the command line's progress bar needs rich (not in Slicer)")
    folder, reference, test = files
    argv = (["compare", reference, test] if command == "compare" else
            ["batch", "--manifest", folder / "manifest.csv", "-o", folder / "out"])
    assert main([str(a) for a in argv + flags]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and re.search(message, lines[0]), lines
    assert not (folder / "out").exists()


@pytest.mark.parametrize("flag, value, option, message", [
    ("--image", "/nonexistent/series", {"image": "/nonexistent/series"}, "image /nonexistent/series: no such"),
    ("--contour-resolution", "0", {"contour_resolution_mm": 0.0}, "contour resolution must be"),
])
def test_grid_options_are_checked_even_without_a_structure_set(files, flag, value, option, message, capsys):
    """``image`` and the contour resolution are used only for RT Structure Sets; a wrong one is still refused."""
    folder, reference, test = files
    assert main(["compare", str(reference), str(test), flag, value]) == 2
    assert message in capsys.readouterr().err
    with pytest.raises(ReadError, match=message):
        segmetrics.compare(reference, test, **option)


@pytest.mark.parametrize("spacing", [("1", "1", "1"), "125", 1.0, (None, 1, 1), (True, 1, 1), (1j, 1, 1)])
def test_array_spacing_must_be_numbers(spacing):
    """Text was converted ("125" as 1, 2, 5 mm), booleans read as 1 mm, a single number crashed."""
    with pytest.raises(ReadError, match="reference: spacing must be voxel sizes in mm"):
        segmetrics.compare(REFERENCE, TEST, spacing=spacing, metrics="overlap")


def test_array_spacing_of_numpy_numbers_is_accepted():
    result = segmetrics.compare(REFERENCE, TEST, spacing=np.array([2.0, 1.0, 1.0], np.float32), metrics="dice")
    assert result.structures[0].value("dice") == pytest.approx(numpy_dice(REFERENCE > 0, TEST > 0))


# ----------------------------------------------------------------------- thresholds
@pytest.mark.parametrize("threshold", [0, -1, 0.0])
def test_a_threshold_that_makes_every_voxel_foreground_is_refused(files, threshold, capsys):
    """value >= threshold: at or below the background value the whole image became foreground (Dice 1)."""
    probability = REFERENCE * 0.9
    with pytest.raises(ReadError, match="every voxel, background included, would be foreground"):
        segmetrics.compare(probability, TEST * 0.8, spacing=(1, 1, 1), threshold=threshold, metrics="dice")
    folder, reference, test = files
    assert main(["compare", str(reference), str(test), f"--threshold={threshold}"]) == 2
    assert "background included" in capsys.readouterr().err


def test_a_threshold_between_the_values_of_logits_is_accepted():
    """Logits are negative in the background: threshold 0 separates them (p >= 0.5)."""
    logits_reference = np.where(REFERENCE > 0, 3.0, -4.0)
    logits_test = np.where(TEST > 0, 2.0, -1.5)
    result = segmetrics.compare(logits_reference, logits_test, spacing=(1, 1, 1), threshold=0.0, metrics="dice")
    assert result.structures[0].value("dice") == pytest.approx(numpy_dice(REFERENCE > 0, TEST > 0))


def test_a_constant_image_above_the_threshold_is_all_foreground():
    """A mask that fills its grid is no threshold mistake (a single value)."""
    image = load_label_image(np.ones((3, 4, 5)), spacing=(1, 1, 1), threshold=0.5)
    assert image.array.all()


# ----------------------------------------------------------------------- Slicer logic
def test_slicer_logic_refuses_no_metric_before_exporting_and_accepts_a_params_dict():
    pytest.importorskip("slicer", reason="slicer-core (MRML Python wrapping) is not installed")
    from segmetrics import mrml

    scene = mrml.create_headless_scene().scene
    nodes = []
    for name, array in (("reference", REFERENCE), ("test", TEST)):
        image = segmetrics.LabelImage(array, (1.0, 1.0, 1.0), names={1: "box"})
        nodes.append(mrml.add_segmentation_from_label_image(scene, image, name))
    before = scene.GetNumberOfNodes()
    with pytest.raises(ValueError, match="no metric selected"):
        mrml.run(*nodes, metrics=[])
    assert scene.GetNumberOfNodes() == before
    with pytest.raises(ValueError, match="nsd_tolerance_mm"):
        mrml.run(*nodes, metrics=["overlap"], params={"nsd_tolerance_mm": -1})
    outputs = mrml.run(*nodes, metrics=["overlap", "distance"], params={"nsd_tolerance_mm": 1.0})
    assert outputs.result.structures[0].value("dice") == pytest.approx(numpy_dice(REFERENCE > 0, TEST > 0))
    assert outputs.result.structures[0].get("nsd").params.get("tolerance_mm", 1.0) == 1.0


# ----------------------------------------------------------------------- frames
FRAME_PREDICTION = TEST[3]
FRAME_TRUTH = REFERENCE[3]


@pytest.mark.parametrize("prediction, message", [
    (FRAME_PREDICTION * 0.5, "prediction frame 0: holds non-integer values"),
    (np.where(FRAME_PREDICTION > 0, np.nan, 0), "prediction frame 0: holds non-integer values"),
    (FRAME_PREDICTION.astype(int) * -1, "prediction frame 0: holds negative values"),
    (np.arange(FRAME_PREDICTION.size).reshape(FRAME_PREDICTION.shape) * 7,
     "prediction frame 0: holds 119 values that vary"),
])
def test_in_memory_frames_pass_the_label_map_checks_of_files(prediction, message):
    """evaluate_frames scored a probability map, NaN or a CT slice as classes (challenge IoU 0, status ok)."""
    with pytest.raises(ReadError, match=message):
        segmetrics.evaluate_frames([prediction], [FRAME_TRUTH])


def test_in_memory_frames_of_labels_are_scored():
    result = segmetrics.evaluate_frames([FRAME_PREDICTION.astype(bool)], [FRAME_TRUTH.astype(float)])
    intersection = np.count_nonzero(FRAME_PREDICTION & FRAME_TRUTH)
    union = np.count_nonzero(FRAME_PREDICTION | FRAME_TRUTH)
    assert result.iou[0, 0] == pytest.approx(intersection / union)


@pytest.mark.parametrize("classes, message", [([1.5], "1.5 is not a class id"), ([math.nan], "nan is not a class id"),
                                              ("1", "classes must be class ids"), ([True], "True is not a class id")])
def test_frame_classes_must_be_whole_label_values(tmp_path, classes, message):
    """Such a class can never occur: it was scored as empty (both_empty) without a word."""
    with pytest.raises(ValueError, match=message):
        segmetrics.evaluate_frames([FRAME_PREDICTION], [FRAME_TRUTH], classes=classes)
    from segmetrics.evaluation.frames import evaluate_folders
    with pytest.raises(ValueError, match=message):
        evaluate_folders(tmp_path / "missing", tmp_path / "missing", classes=classes)


def test_evaluate_folders_refuses_a_wrong_input_policy_like_compare_and_batch(tmp_path):
    """It failed with an AttributeError from inside the readers (a dict has no allow_many_labels)."""
    from segmetrics.evaluation.frames import evaluate_folders

    for folder, frame in (("prediction", FRAME_PREDICTION), ("truth", FRAME_TRUTH)):
        (tmp_path / folder).mkdir()
        np.save(tmp_path / folder / "f0.npy", frame)
    with pytest.raises(ValueError, match="input_policy must be segmetrics.inputs.io.InputPolicy, got {'allow_lossy': True}"):
        evaluate_folders(tmp_path / "prediction", tmp_path / "truth", input_policy={"allow_lossy": True})


@pytest.mark.parametrize("damage", ["without end chunk", "damaged chunk"])
def test_a_damaged_png_frame_is_refused(tmp_path, damage):
    """PIL read the pixels of a PNG cut before its end chunk as if it were whole."""
    from PIL import Image

    path = tmp_path / "mask.png"
    Image.fromarray(FRAME_TRUTH * 255).save(path)
    raw = bytearray(path.read_bytes())
    if damage == "without end chunk":
        raw = raw[:-12]  # the IEND chunk: 4 bytes length, 4 bytes type, 4 bytes CRC
    else:
        raw[raw.index(b"IDAT") + 2] ^= 0x01  # the chunk's CRC no longer matches
    path.write_bytes(bytes(raw))
    with pytest.raises(ReadError, match="the PNG file is damaged or cut short"):
        load_label_image(path)


@pytest.mark.parametrize("option, text, reason", [
    ("--names", '{"1": "liver", "2": "liver"}', "'liver' (labels 1, 2) share a name"),
    ("--synonyms", "not json", "expected a JSON object of names and their synonyms"),
])
def test_cli_compare_refuses_a_bad_names_or_synonyms_file_before_reading_the_images(files, option, text, reason, capsys,
                                                                                   monkeypatch):
    folder, reference, test = files
    (folder / "extra.json").write_text(text)
    monkeypatch.setattr(segmetrics.inputs.io, "read_label_image", lambda *a, **k: pytest.fail("images read before the check"))
    assert main(["compare", str(reference), str(test), option, str(folder / "extra.json")]) == 2
    assert "extra.json: " in (error := capsys.readouterr().err) and reason in error, error


def test_a_probability_map_with_nan_is_refused_even_with_a_threshold():
    """NaN >= 0.5 is False: NaN voxels became background without a word."""
    probability = np.where(REFERENCE > 0, 0.9, 0.1)
    probability[3, 4, 5] = np.nan
    with pytest.raises(ReadError, match="reference: holds NaN or infinite values \\(1 voxels\\)"):
        segmetrics.compare(probability, TEST * 0.8, spacing=(1, 1, 1), threshold=0.5, metrics="dice")


@pytest.mark.parametrize("name, text", [("scores.json", '{"f0": {"1": NaN}}'),
                                        ("scores.csv", "frame,instance,score\nf0,1,inf\n")])
def test_instance_scores_must_be_finite(tmp_path, name, text):
    """A NaN score ranked its instance arbitrarily in the AP (sorting NaN is undefined)."""
    from segmetrics.evaluation.frames import read_scores

    (tmp_path / name).write_text(text)
    with pytest.raises(ValueError, match=f"{name}: the score of instance 1 of frame f0 is (nan|inf), not a finite"):
        read_scores(tmp_path / name)


def test_a_score_map_with_nan_is_refused(tmp_path):
    from segmetrics.evaluation.frames import evaluate_folders

    for folder, array in (("prediction", FRAME_PREDICTION), ("truth", FRAME_TRUTH)):
        (tmp_path / folder).mkdir()
        np.save(tmp_path / folder / "f0.npy", array)
    (tmp_path / "scores").mkdir()
    np.save(tmp_path / "scores" / "f0.npy", np.where(FRAME_PREDICTION > 0, np.nan, 0.0))
    with pytest.raises(ReadError, match="f0.npy: a score map must hold finite numbers"):
        evaluate_folders(tmp_path / "prediction", tmp_path / "truth", instances=True, scores=tmp_path / "scores")


def test_slicer_logic_refuses_unknown_segment_ids_and_an_empty_selection():
    """An unknown ID raised KeyError('nope'); no pair at all gave an empty table without a word."""
    pytest.importorskip("slicer", reason="slicer-core (MRML Python wrapping) is not installed")
    from segmetrics import mrml

    scene = mrml.create_headless_scene().scene
    nodes = [mrml.add_segmentation_from_label_image(scene, segmetrics.LabelImage(array, (1.0, 1.0, 1.0),
                                                                                  names={1: "box"}), name)
             for name, array in (("reference", REFERENCE), ("test", TEST))]
    with pytest.raises(ValueError, match="test segment ID\\(s\\) 'nope' not in 'test'; its segments: '"):
        mrml.segment_pairs(*nodes, [mrml.segment_pairs(*nodes)[0].reference_id], ["nope"])
    with pytest.raises(segmetrics.NothingToCompareError, match="no segment pair"):
        mrml.run(*nodes, pairs=mrml.segment_pairs(*nodes, [], []), metrics=["overlap"])


@pytest.mark.parametrize("damage", ["cut", "pickled"])
def test_a_damaged_npy_frame_is_one_line_naming_it(tmp_path, damage):
    from segmetrics.evaluation.frames import read_frame

    np.save(tmp_path / "f0.npy", FRAME_TRUTH)
    raw = (tmp_path / "f0.npy").read_bytes()
    if damage == "cut":
        (tmp_path / "f0.npy").write_bytes(raw[:-40])
    else:
        np.save(tmp_path / "f0.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ReadError, match="f0.npy: cannot be read as a NumPy array"):
        read_frame(tmp_path / "f0.npy")
