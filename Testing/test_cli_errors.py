"""Command-line errors: one line on standard error, exit 2, no traceback, checked before any work.

Exit 1 stays reserved for "a batch case failed"; Ctrl-C gives 130; a programming error is not
disguised as a user error.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk

import segmetrics
from segmetrics.cli import main


def _write(path, array):
    sitk.WriteImage(sitk.GetImageFromArray(array), str(path))
    return path


@pytest.fixture
def files(tmp_path):
    """Two small masks, as files, a manifest of one case and two folders; an existing file and folder."""
    reference = np.zeros((8, 8, 8), np.uint8)
    reference[2:6, 2:6, 2:6] = 1
    test = np.roll(reference, 1, axis=2)
    paths = {
        "ref": _write(tmp_path / "ref.nrrd", reference),
        "test": _write(tmp_path / "test.nrrd", test),
        "empty": _write(tmp_path / "empty.nrrd", np.zeros_like(reference)),
        "manifest": tmp_path / "manifest.csv",
        "file": tmp_path / "a_file.txt",
        "folder": tmp_path / "a_folder",
        "out": tmp_path / "results",
    }
    paths["manifest"].write_text("case_id,reference,test\nc1,ref.nrrd,test.nrrd\n")
    for side, array in (("refs", reference), ("tests", test)):
        paths[side] = tmp_path / side
        paths[side].mkdir()
        _write(paths[side] / "c1.nrrd", array)
    paths["file"].write_text("not a folder")
    paths["folder"].mkdir()
    return paths


def _run(capsys, argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _assert_one_line_error(code, err, command, *needles):
    assert "Traceback" not in err
    lines = err.splitlines()
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith(f"segmetrics {command}: error: ")
    for needle in needles:
        assert needle in lines[0]


# Defect 7: each OS-level mistake of the issue, plus the other output options.
OS_ERRORS = {
    "compare -o a folder": (lambda f: ["compare", f["ref"], f["test"], "-o", f["folder"]], ["--output", "folder"]),
    "compare -o file/x": (lambda f: ["compare", f["ref"], f["test"], "-o", f["file"] / "x"], ["--output", "is a file"]),
    "compare --slices file/x": (lambda f: ["compare", f["ref"], f["test"], "--slices", f["file"] / "x.csv"],
                                ["--slices"]),
    "compare --slices and -o one file": (lambda f: ["compare", f["ref"], f["test"], "--slices", f["folder"] / "x.csv",
                                                   "-o", f["folder"] / "." / "x.csv"], ["--output", "--slices"]),
    "compare --slices without its groups": (lambda f: ["compare", f["ref"], f["test"], "--metrics", "dice,hd95",
                                                       "--slices", f["folder"] / "x.csv"], ["--slices", "msi"]),
    "compare -o in a missing folder": (lambda f: ["compare", f["ref"], f["test"], "-o", f["folder"] / "no" / "x.csv"],
                                       ["--output", "does not exist"]),
    "compare --names a folder": (lambda f: ["compare", f["ref"], f["test"], "--names", f["folder"]], ["a_folder"]),
    "batch --names a folder": (lambda f: ["batch", "--reference-dir", f["refs"], "--test-dir", f["tests"], "--names",
                                          f["folder"], "-o", f["out"]], ["a_folder"]),
    "batch --manifest a folder": (lambda f: ["batch", "--manifest", f["folder"], "-o", f["out"]], ["a_folder"]),
    "batch -o an existing file": (lambda f: ["batch", "--manifest", f["manifest"], "-o", f["file"]],
                                  ["--output", "not a folder"]),
    "batch --report file/x": (lambda f: ["batch", "--manifest", f["manifest"], "-o", f["out"], "--report",
                                         f["file"] / "x"], ["--report", "a_file.txt is a file"]),
    "frames -o a folder": (lambda f: ["frames", f["folder"], f["folder"], "-o", f["folder"]], ["--output"]),
    "demo -o an existing file": (lambda f: ["demo", "-o", f["file"]], ["--output", "not a folder"]),
}


@pytest.mark.parametrize("case", OS_ERRORS)
def test_os_errors_are_one_line_and_exit_2_before_any_work(case, files, capsys):
    argv, needles = OS_ERRORS[case]
    code, out, err = _run(capsys, argv(files))
    _assert_one_line_error(code, err, argv(files)[0], *needles)
    assert not files["out"].exists()  # batch refused before creating its results folder, let alone a case


def test_output_checked_before_inputs_are_read(files, capsys):
    code, _, err = _run(capsys, ["compare", "missing_ref.nrrd", "missing_test.nrrd", "-o", files["folder"]])
    _assert_one_line_error(code, err, "compare", "--output")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (a device that is always full)")
@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
@pytest.mark.needs("rich")
def test_full_disk_at_write_time_is_one_line(fmt, files, capsys):
    code, out, err = _run(capsys, ["compare", files["ref"], files["test"], "--metrics", "dice", "--format", fmt,
                                   "-o", "/dev/full"])
    _assert_one_line_error(code, err, "compare", "/dev/full", "No space left on device")


def test_manifest_row_with_a_missing_field_is_one_line(files, capsys):
    files["manifest"].write_text("case_id,reference,test\nc1,ref.nrrd\n")
    code, _, err = _run(capsys, ["batch", "--manifest", files["manifest"], "-o", files["out"], "--no-progress"])
    _assert_one_line_error(code, err, "batch", "manifest.csv")
    assert not (files["out"] / "results.csv").exists()


def _entry_command():
    """The installed ``segmetrics`` script (or ``python -m segmetrics.cli``), importing this checkout."""
    script = shutil.which("segmetrics")
    return [script] if script else [sys.executable, "-m", "segmetrics.cli"]


@pytest.mark.parametrize("argv", [
    lambda f: ["compare", f["ref"], f["test"], "-o", f["folder"]],
    lambda f: ["batch", "--manifest", f["folder"], "-o", f["out"]],
    lambda f: ["compare", f["empty"], f["empty"]],
])
def test_real_entry_point_prints_no_traceback(argv, files):
    package_root = str(Path(segmetrics.__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
    run = subprocess.run(_entry_command() + [str(a) for a in argv(files)], capture_output=True, text=True, env=env,
                         timeout=300)
    _assert_one_line_error(run.returncode, run.stderr, argv(files)[0])


# Defect 8: nothing to compare is said, never an empty table / [] with exit 0.
@pytest.mark.needs("rich")
def test_two_empty_masks_without_labels_say_nothing_to_compare(files, capsys):
    for fmt in ("table", "csv", "json"):
        code, out, err = _run(capsys, ["compare", files["empty"], files["empty"], "--format", fmt])
        _assert_one_line_error(code, err, "compare", "nothing to compare")
        assert out == ""


def test_seg_nrrd_pair_without_segments_says_nothing_to_compare(tmp_path, capsys):
    slicerio = pytest.importorskip("slicerio")
    sample = os.path.join(os.path.dirname(slicerio.__file__), "data", "Segmentation.seg.nrrd")
    segmentation = slicerio.read_segmentation(sample)
    segmentation["segments"] = []
    segmentation["voxels"] = np.zeros(segmentation["voxels"].shape[:3], np.uint8)
    empty = tmp_path / "none.seg.nrrd"
    slicerio.write_segmentation(str(empty), segmentation)
    code, out, err = _run(capsys, ["compare", empty, empty, "--format", "json"])
    _assert_one_line_error(code, err, "compare", "nothing to compare")
    assert out == ""


# Defect 6 (CLI side): invalid options refused in one line before any input is read or case runs.
INVALID_OPTIONS = [
    (["compare", "missing.nrrd", "missing.nrrd", "--threshold", "nan"], "--threshold"),
    (["compare", "missing.nrrd", "missing.nrrd", "--labels", ""], "--labels"),
    (["compare", "missing.nrrd", "missing.nrrd", "--labels", "1,,2"], "--labels"),
    (["batch", "--manifest", "missing.csv", "-o", "{out}", "--labels", " "], "--labels"),
    (["compare", "missing.nrrd", "missing.nrrd", "--nsd-tolerance", "inf"], "--nsd-tolerance"),
    (["compare", "missing.nrrd", "missing.nrrd", "--msi-il", "nan"], "--msi-il"),
    (["frames", "missing", "missing", "--detection-iou", "0"], "--detection-iou"),
    (["frames", "missing", "missing", "--detection-iou", "1.5"], "--detection-iou"),
    (["frames", "missing", "missing", "--connectivity", "0"], "--connectivity"),
    (["frames", "missing", "missing", "--connectivity", "4"], "--connectivity"),
    (["frames", "missing", "missing", "--threshold=-inf"], "--threshold"),
    (["frames", "missing", "missing", "--size-edges", "3,10"], "--size-edges: only used by the instance metrics"),
    (["frames", "missing", "missing", "--detection-iou", "0.3"], "--detection-iou: only used by the instance"),
    (["frames", "missing", "missing", "--connectivity", "1", "--detection-iou", "0.5"],
     "--connectivity, --detection-iou: only used by the instance metrics; add --instances, or leave them out"),
    (["demo", "--cases", "0", "-o", "{out}"], "--cases"),
    (["demo", "--workers", "-1", "-o", "{out}"], "--workers"),
    (["batch", "--manifest", "{manifest}", "-o", "{out}", "--workers", "-2"], "--workers"),
    (["batch", "--manifest", "{manifest}", "-o", "{out}", "--penalty", "-1"], "--penalty"),
    (["batch", "--manifest", "{manifest}", "-o", "{out}", "--penalty", "nan"], "--penalty"),
    (["batch", "--manifest", "{manifest}", "-o", "{out}", "--penalty", "inf"], "--penalty"),
    (["batch", "--manifest", "{manifest}", "-o", "{out}", "--penalty", "diagonl"], "--penalty"),
    (["batch", "--manifest", "{manifest}", "-o", "{out}", "--threshold", "nan"], "--threshold"),
    (["batch", "--manifest", "{manifest}", "-o", "{out}", "--hd-percentile", "nan"], "--hd-percentile"),
    (["batch", "--manifest", "{manifest}", "-o", "{out}", "--metrics", "dcie"], "unknown metric"),
    (["compare", "missing.nrrd", "missing.nrrd", "--metrics", ","], "--metrics"),
    (["batch", "--manifest", "{manifest}", "-o", "{out}", "--params", "{folder}"], "--params"),
]


@pytest.mark.parametrize("argv, flag", INVALID_OPTIONS)
def test_invalid_options_are_refused_before_any_work(argv, flag, files, capsys):
    code, _, err = _run(capsys, [a.format(**files) for a in argv])
    _assert_one_line_error(code, err, argv[0], flag)
    assert not files["out"].exists()


def test_valid_penalty_values_are_accepted(files, capsys):
    for penalty in ("none", "0", "12.5"):
        code, out, _ = _run(capsys, ["batch", "--manifest", files["manifest"], "-o", files["out"] / penalty,
                                     "--metrics", "dice", "--penalty", penalty, "--no-progress"])
        assert code == 0 and "1 evaluated now" in out


def test_a_failed_case_still_exits_1(files, capsys):
    files["manifest"].write_text("case_id,reference,test\nc1,ref.nrrd,test.nrrd\nc2,ref.nrrd,gone.nrrd\n")
    code, out, err = _run(capsys, ["batch", "--manifest", files["manifest"], "-o", files["out"], "--metrics", "dice",
                                   "--no-progress"])
    assert code == 1 and "1 failed" in out and "failed c2" in err


def test_interrupt_exits_130_and_programming_errors_are_not_disguised(files, capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("segmetrics.inputs.io.load_label_image", interrupted)
    code, _, err = _run(capsys, ["compare", files["ref"], files["test"]])
    assert code == 130 and err == "segmetrics compare: interrupted\n"

    def buggy(*args, **kwargs):
        raise TypeError("a bug")

    monkeypatch.setattr("segmetrics.inputs.io.load_label_image", buggy)
    with pytest.raises(TypeError, match="a bug"):
        main(["compare", str(files["ref"]), str(files["test"])])


def test_frames_without_any_class_say_nothing_to_compare(tmp_path, capsys):
    from PIL import Image

    for folder in ("pred", "gt"):
        (tmp_path / folder).mkdir()
        Image.fromarray(np.zeros((5, 5), np.uint8)).save(tmp_path / folder / "a.png")
    code, out, err = _run(capsys, ["frames", tmp_path / "gt", tmp_path / "pred", "--format", "csv"])
    _assert_one_line_error(code, err, "frames", "nothing to compare")
    assert out == ""


def test_traceback_on_request(files, capsys, monkeypatch):
    monkeypatch.setenv("SEGMETRICS_TRACEBACK", "1")
    with pytest.raises(IsADirectoryError):
        main(["compare", str(files["ref"]), str(files["test"]), "--names", str(files["folder"])])


@pytest.mark.needs("rich")
def test_params_given_inline_take_effect_and_are_checked(files, capsys):
    # NSD at 0.5 mm of a box shifted by one voxel is below 1; at 2 mm every surface point is within tolerance
    argv = ["compare", files["ref"], files["test"], "--metrics", "nsd", "--format", "csv"]
    code, out, _ = _run(capsys, argv + ["--params", '{"nsd_tolerance_mm": 2}'])
    assert code == 0 and float(out.splitlines()[1].split(",")[4]) == pytest.approx(1.0)
    code, out, _ = _run(capsys, argv + ["--params", ' {"nsd_tolerance_mm": 0.5}'])
    assert code == 0 and float(out.splitlines()[1].split(",")[4]) < 0.9
    code, _, err = _run(capsys, argv + ["--params", '{"hd_percentile": "95"}'])
    _assert_one_line_error(code, err, "compare", "hd_percentile")


@pytest.mark.parametrize("case", [
    lambda f: (["compare", f["ref"], f["test"], "--metrics", "dice", "-o", f["ref"]], "ref"),
    lambda f: (["compare", f["ref"], f["test"], "--metrics", "msi", "--slices", f["link"]], "test"),
    lambda f: (["compare", f["ref"], f["test"], "--metrics", "dice", "-o", f["names"], "--names", f["names"]], "names"),
    lambda f: (["compare", f["ref"], f["test"], "--metrics", "dice", "--resample-to", f["grid"], "-o", f["grid"]],
               "grid"),
    lambda f: (["frames", "--reference", f["refs"], "--test", f["tests"], "-o", f["tests"] / "c1.nrrd"], "frame"),
])
def test_an_output_file_never_overwrites_an_input(files, capsys, case):
    """-o or --slices naming an input (also through a symbolic link or a file of an input folder)
    is refused before any work, and the input keeps its bytes (it was overwritten by the results)."""
    files["link"] = files["file"].parent / "link.nrrd"
    files["link"].symlink_to(files["test"])
    files["names"] = files["file"].parent / "names.json"
    files["names"].write_text('{"1": "cube"}')
    files["frame"] = files["tests"] / "c1.nrrd"
    files["grid"] = _write(files["file"].parent / "grid.nrrd", np.zeros((8, 8, 8), np.uint8))
    argv, kept = case(files)
    before = files[kept].read_bytes()
    code, _out, err = _run(capsys, argv)
    _assert_one_line_error(code, err, argv[0], "input")
    assert "overwrite" in err
    assert files[kept].read_bytes() == before


@pytest.mark.parametrize("option", ["-o", "--report"])
def test_a_batch_output_folder_is_never_an_input_folder(files, capsys, option):
    """batch -o / --report naming the reference or test folder (here through a relative spelling)
    is refused before any work: its results would be listed among the cases of the next run."""
    for folder in ("refs", "tests"):
        argv = ["batch", "--reference-dir", files["refs"], "--test-dir", files["tests"], "-o", files["out"]]
        argv += ["--report", files[folder] / ".." / folder] if option == "--report" else []
        if option == "-o":
            argv[-1] = files[folder] / ".." / folder
        code, _out, err = _run(capsys, argv)
        _assert_one_line_error(code, err, "batch", "input")
        assert sorted(p.name for p in files[folder].iterdir()) == ["c1.nrrd"]


@pytest.mark.needs("rich")
def test_an_output_file_beside_the_inputs_is_written(files, capsys, monkeypatch):
    """Control of the refusal above: an output in the inputs' folder that is no input is written,
    and so is one named like the word of ``--resample-to reference`` (the keyword, not a file)."""
    monkeypatch.chdir(files["file"].parent)
    for output, extra in (("results.csv", []), ("reference", ["--resample-to", "reference"])):
        Path(output).write_text("an earlier result")
        code, _out, err = _run(capsys, ["compare", files["ref"], files["test"], "--metrics", "dice", "--format", "csv",
                                        "-o", output, *extra])
        assert code == 0, err
        assert Path(output).read_text().splitlines()[0].startswith("structure,"), output
