"""Batch runs that survive kills and crashing cases: atomic rewrites, crash isolation, honest resume.

Small synthetic cases (balls in 14³ volumes) keep every run quick; values are checked against
:func:`segmetrics.compare` run in this process and against the analytic voxel count where cheap.
"""
import csv
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import SimpleITK as sitk

from batch_hooks import evaluate_or_die
from segmetrics import compare
from segmetrics.evaluation.batch import BatchError, Case, read_case_log, read_manifest, read_results, run_batch
from segmetrics.cli import main

METRICS = "overlap"
SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "SegMetricsModule")


def _ball(path, centre, radius, shape=(14, 14, 14)):
    grid = np.indices(shape)
    mask = (sum((g - c) ** 2 for g, c in zip(grid, centre)) <= radius ** 2).astype(np.uint8)
    image = sitk.GetImageFromArray(mask)
    image.SetSpacing((0.8, 0.9, 1.0))
    sitk.WriteImage(image, str(path), True)
    return path


def _cases(folder, n, prefixes=()):
    """``n`` cases (reference ball vs a shifted ball); ``prefixes`` replace the ids of the first cases."""
    folder.mkdir(exist_ok=True)
    reference = _ball(folder / "reference.nii.gz", (7, 7, 7), 4)
    cases = []
    for index in range(n):
        test = _ball(folder / f"test{index}.nii.gz", (7, 7, 7 + index % 4), 3 + index % 3)
        case_id = prefixes[index] if index < len(prefixes) else f"case{index:02d}"
        cases.append(Case(case_id, str(reference), str(test)))
    return cases


def _write_manifest(path, cases, encoding="utf-8"):
    with open(path, "w", newline="", encoding=encoding) as handle:
        writer = csv.writer(handle)
        writer.writerow(["case_id", "reference", "test"])
        writer.writerows([c.case_id, c.reference, c.test] for c in cases)
    return path


def _expected_records(case):
    return [{"case_id": case.case_id, **r} for r in compare(case.reference, case.test, metrics=METRICS).records()]


def _same_records(got, expected):
    assert [(g["case_id"], g["structure"], g["metric"], g["status"]) for g in got] == \
           [(e["case_id"], e["structure"], e["metric"], e["status"]) for e in expected]
    assert all(g["value"] == e["value"] or (np.isnan(g["value"]) and np.isnan(e["value"])) for g, e in zip(got, expected))


# ------------------------------------------------------------------------------------- kill test
#: ``segmetrics batch`` in a subprocess; with a file name as first argument, the process SIGKILLs
#: itself right before that file's N-th atomic replacement (its new text fully written beside it).
BATCH = textwrap.dedent("""
    import os, signal, sys
    target, count = sys.argv[1], int(sys.argv[2])
    real_replace, seen = os.replace, []
    def replace_or_die(source, destination):
        if os.path.basename(destination) == target:
            seen.append(destination)
            if len(seen) == count:
                os.kill(os.getpid(), signal.SIGKILL)
        return real_replace(source, destination)
    os.replace = replace_or_die
    from segmetrics.cli import main
    sys.exit(main(sys.argv[3:]))
""")


def _batch_process(manifest, output, die_before=("-", 0)):
    argv = [sys.executable, "-c", BATCH, die_before[0], str(die_before[1]), "batch", "--manifest", str(manifest),
            "-o", str(output), "--metrics", METRICS, "--no-progress"]
    return subprocess.Popen(argv, env={**os.environ, "PYTHONPATH": SRC}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def _files(output):
    names = ("results.csv", "results.jsonl")
    return {name: (output / name).read_text() for name in names}


def _logged_lines(output):
    path = output / "cases.jsonl"
    return path.read_text().count("\n") if path.is_file() else 0


def test_kills_at_any_moment_lose_nothing(tmp_path):
    cases = _cases(tmp_path / "data", 16)
    manifest = _write_manifest(tmp_path / "manifest.csv", cases)
    run_batch(read_manifest(manifest), tmp_path / "whole", metrics=METRICS, progress=False, workers=0)  # never interrupted
    whole = _files(tmp_path / "whole")
    _same_records(read_results(tmp_path / "whole"), [r for case in cases for r in _expected_records(case)])

    # SIGKILL at random moments while cases finish (1-4 more cases logged, then 0-10 ms; a case takes
    # ~5 ms); each start resumes the folder.
    rng = random.Random(11)
    output = tmp_path / "killed"
    for _ in range(3):
        logged, process = _logged_lines(output), _batch_process(manifest, output)
        target = logged + rng.randint(1, 4)
        while _logged_lines(output) < target and process.poll() is None:
            time.sleep(0.002)
        time.sleep(rng.uniform(0, 0.01))
        process.send_signal(signal.SIGKILL)
        assert process.wait() in (-signal.SIGKILL, 0)  # 0: it ended first (a machine far busier than usual)
    # SIGKILL inside the final rewrite of each result file: its new text is fully written beside it,
    # not yet renamed over it (the first replacement of a result file is at the start, the second at the end).
    for target in ("results.csv", "results.jsonl"):
        assert _batch_process(manifest, output, (target, 2)).wait() == -signal.SIGKILL
        assert [p.name for p in output.iterdir() if p.name.startswith(f".{target}.")]  # the cut rewrite is left behind
    done = _batch_process(manifest, output)
    assert done.wait() == 0, done.stderr.read()
    assert _files(output) == whole  # byte for byte: nothing lost, nothing duplicated, in case order
    log = read_case_log(output)
    assert sorted(log) == [c.case_id for c in cases] and {e["status"] for e in log.values()} == {"ok"}
    assert not [p.name for p in output.iterdir() if p.name.startswith(".")]  # temporary files cleaned up
    pq = pytest.importorskip("pyarrow.parquet")
    assert pq.read_table(output / "results.parquet").equals(pq.read_table(tmp_path / "whole" / "results.parquet"))


# --------------------------------------------------------------------------------- crash isolation
@pytest.mark.parametrize("workers", [1, 2])
def test_a_case_that_kills_its_process_fails_alone(tmp_path, workers):
    cases = _cases(tmp_path / "data", 5, prefixes=("segfault_first", "case01", "oom_killed"))
    summary = run_batch(cases, tmp_path / "out", metrics=METRICS, workers=workers, progress=False,
                        evaluate=evaluate_or_die)
    assert summary.failed == {"segfault_first": "worker killed by SIGSEGV while evaluating this case",
                              "oom_killed": "worker killed by SIGKILL while evaluating this case"}
    assert summary.exit_code == 1 and sorted(summary.computed) == sorted(c.case_id for c in cases)
    survivors = [c for c in cases if c.case_id.startswith("case")]
    _same_records(read_results(tmp_path / "out"), [r for case in survivors for r in _expected_records(case)])
    log = read_case_log(tmp_path / "out")
    assert [log[c.case_id]["status"] for c in cases] == ["failed", "ok", "failed", "ok", "ok"]

    # A rerun retries only the crashed cases (here with the plain evaluation, as after a kernel fix).
    again = run_batch(cases, tmp_path / "out", metrics=METRICS, workers=0, progress=False)
    assert sorted(again.computed) == sorted(summary.failed) and again.failed == {}
    _same_records(read_results(tmp_path / "out"), [r for case in cases for r in _expected_records(case)])


def test_a_case_that_kills_its_dask_worker_fails_alone(tmp_path):
    pytest.importorskip("distributed")
    cases = _cases(tmp_path / "data", 3, prefixes=("case00", "segfault"))
    summary = run_batch(cases, tmp_path / "out", metrics=METRICS, workers=2, scheduler="local", progress=False,
                        evaluate=evaluate_or_die)
    assert list(summary.failed) == ["segfault"] and "KilledWorker" in summary.failed["segfault"]
    _same_records(read_results(tmp_path / "out"), [r for case in (cases[0], cases[2]) for r in _expected_records(case)])


# ------------------------------------------------------------------------------------- resume
def test_resume_redoes_cases_whose_inputs_or_records_changed(tmp_path):
    cases = _cases(tmp_path / "data", 4)
    run_batch(cases, tmp_path / "out", metrics=METRICS, workers=0, progress=False)

    # The same ids pointing to other files (a new manifest), and a file rewritten in place.
    moved = Case("case00", cases[0].reference, cases[3].test)
    _ball(tmp_path / "data" / "test1.nii.gz", (7, 7, 7), 2)  # other size and time than before
    os.utime(tmp_path / "data" / "test1.nii.gz", ns=(1, 1))
    # Records of case02 lost from results.jsonl while the log says ok (a file edited or damaged by hand).
    lines = (tmp_path / "out" / "results.jsonl").read_text().splitlines(keepends=True)
    (tmp_path / "out" / "results.jsonl").write_text("".join(line for line in lines if '"case02"' not in line))

    now = [moved, *cases[1:]]
    summary = run_batch(now, tmp_path / "out", metrics=METRICS, workers=0, progress=False)
    assert summary.computed == ["case00", "case01", "case02"] and summary.skipped == ["case03"]
    _same_records(read_results(tmp_path / "out"), [r for case in now for r in _expected_records(case)])
    dice = {r["case_id"]: r["value"] for r in read_results(tmp_path / "out") if r["metric"] == "dice"}
    assert dice["case01"] == pytest.approx(2 * 33 / (257 + 33))  # radius-2 ball (33 voxels) inside the radius-4 one (257)


@pytest.mark.needs("pandas")
def test_cases_not_in_the_manifest_are_left_out_and_kept(tmp_path, capsys):
    cases = _cases(tmp_path / "data", 5)
    full = _write_manifest(tmp_path / "full.csv", cases)
    small = _write_manifest(tmp_path / "small.csv", cases[1:3])
    argv = ["batch", "-o", str(tmp_path / "out"), "--metrics", METRICS, "--no-progress", "--workers", "0"]
    assert main(["batch", "--manifest", str(full), *argv[1:]]) == 0
    whole = _files(tmp_path / "out")

    assert main(["batch", "--manifest", str(small), *argv[1:], "--report", str(tmp_path / "report")]) == 0
    err = capsys.readouterr().err
    assert "3 cases in" in err and "case00, case03, case04" in err
    assert {r["case_id"] for r in read_results(tmp_path / "out")} == {"case01", "case02"}
    with open(tmp_path / "out" / "results.csv") as handle:
        assert {row["case_id"] for row in csv.DictReader(handle)} == {"case01", "case02"}
    with open(tmp_path / "report" / "aggregate.csv") as handle:
        assert "case00" not in handle.read()

    # The full manifest again: the set-aside cases come back without being recomputed.
    summary = run_batch(read_manifest(full), tmp_path / "out", metrics=METRICS, workers=0, progress=False)
    assert summary.computed == [] and summary.not_in_manifest == []
    assert _files(tmp_path / "out") == whole


# ------------------------------------------------------------------------------------ manifests
def test_excel_manifest_with_byte_order_mark(tmp_path):
    cases = _cases(tmp_path / "data", 2)
    manifest = _write_manifest(tmp_path / "excel.csv", cases, encoding="utf-8-sig")
    assert manifest.read_bytes().startswith(b"\xef\xbb\xbf")
    assert read_manifest(manifest) == cases


def test_manifest_cells_with_spaces_around_them(tmp_path):
    """'a, r.nii.gz, t.nii.gz ' (a manifest typed by hand) gave the case ids 'a' and 'a ' and paths
    beginning with a space, which no file has."""
    manifest = tmp_path / "manifest.csv"
    manifest.write_text("case_id, reference, test\na, r.nii.gz, t.nii.gz \n")
    assert read_manifest(manifest) == [Case("a", str(tmp_path / "r.nii.gz"), str(tmp_path / "t.nii.gz"))]


@pytest.mark.parametrize("rows, message", [
    ("case_id,reference,test\na,r.nii.gz,t.nii.gz\n\nb,r.nii.gz\n", "line 4: empty test"),
    ("case_id,reference,test\n,r.nii.gz,t.nii.gz\n", "line 2: empty case_id"),
    ("id,reference,test\na,r.nii.gz,t.nii.gz\n", "missing case_id"),
    ("case_id,reference,test\n", "no cases"),
    (b"case_id,reference,test\na,r\xe9.nii.gz,t.nii.gz\n", "not UTF-8"),
])
def test_bad_manifests_give_one_line_errors(tmp_path, capsys, rows, message):
    manifest = tmp_path / "manifest.csv"
    manifest.write_bytes(rows if isinstance(rows, bytes) else rows.encode())
    with pytest.raises(BatchError, match=message):
        read_manifest(manifest)
    assert main(["batch", "--manifest", str(manifest), "-o", str(tmp_path / "out"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_folder_as_manifest_and_file_as_output_are_refused(tmp_path):
    with pytest.raises(BatchError, match="is a folder"):
        read_manifest(tmp_path)
    (tmp_path / "results.txt").write_text("keep me")
    with pytest.raises(BatchError, match="is a file"):
        run_batch(_cases(tmp_path / "data", 1), tmp_path / "results.txt", workers=0, progress=False)
    assert (tmp_path / "results.txt").read_text() == "keep me"
    case = _cases(tmp_path / "data", 1)[0]
    with pytest.raises(BatchError, match=r"duplicate case ids \['case00'\]"):
        run_batch([case, Case("case00", case.test, case.reference)], tmp_path / "out", workers=0, progress=False)
    assert not (tmp_path / "out").exists()  # refused before anything is written


def test_workers_that_cannot_start_stop_the_run_with_one_error():
    """A function the children cannot import (defined in ``python -c``) would fail every case alike."""
    code = textwrap.dedent("""
        from segmetrics.evaluation.workers import run_isolated
        def square(x):
            return x * x
        try:
            list(run_isolated(square, range(3), 2))
        except ChildProcessError as error:
            print(error)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": SRC})
    assert done.stdout.strip() == "a worker process could not start (exited with status 1); its error is printed above"
    assert "Can't get attribute 'square'" in done.stderr


def test_resume_redoes_a_case_whose_input_was_rewritten_with_the_same_size_and_time(tmp_path):
    """A test file replaced by another mask of the same byte size whose modification time is set
    back (a copy keeping times, or two writes within one clock tick): the fingerprint (path, size,
    mtime) was unchanged, so the resumed run kept the old Dice as 'already done'."""
    data = tmp_path / "data"
    data.mkdir()
    reference = np.zeros((10, 10, 10), np.uint8)
    reference[2:8, 2:8, 2:8] = 1
    sitk.WriteImage(sitk.GetImageFromArray(reference), str(data / "reference.nrrd"))  # raw: size set by the shape
    test = reference.copy()
    test[2:8, 2:8, 2] = 0
    sitk.WriteImage(sitk.GetImageFromArray(test), str(data / "test.nrrd"))
    cases = [Case("c1", str(data / "reference.nrrd"), str(data / "test.nrrd"))]
    run_batch(cases, tmp_path / "out", metrics="dice", workers=0, progress=False)
    before = os.stat(data / "test.nrrd")
    sitk.WriteImage(sitk.GetImageFromArray(reference), str(data / "test.nrrd"))  # now identical to the reference
    os.utime(data / "test.nrrd", ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(data / "test.nrrd").st_size == before.st_size
    summary = run_batch(cases, tmp_path / "out", metrics="dice", workers=0, progress=False)
    assert summary.computed == ["c1"] and summary.skipped == []
    (dice,) = [r["value"] for r in read_results(tmp_path / "out") if r["metric"] == "dice"]
    assert dice == 1.0


def test_provenance_names_the_manifest_and_every_case_input_digest(tmp_path):
    import hashlib
    import json

    for package in ("rich", "pandas", "jinja2", "matplotlib"):  # the terminal summary and the report
        pytest.importorskip(package)
    cases = _cases(tmp_path / "data", 2)
    manifest = _write_manifest(tmp_path / "manifest.csv", cases)
    argv = ["batch", "--manifest", str(manifest), "-o", str(tmp_path / "out"), "--metrics", "dice", "--no-progress",
            "--report", str(tmp_path / "report")]
    assert main(argv) == 0

    def sha256(path):
        return hashlib.sha256(open(path, "rb").read()).hexdigest()

    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["provenance"]["inputs"]["manifest"]["sha256"] == sha256(manifest)
    assert run["provenance"]["case_digests"].startswith(str((tmp_path / "out" / "cases.jsonl").resolve()))
    log = read_case_log(tmp_path / "out")
    for case in cases:
        inputs = log[case.case_id]["inputs"]
        assert inputs["reference"]["sha256"] == sha256(case.reference)
        assert inputs["test"]["sha256"] == sha256(case.test)
        assert inputs["test"]["size_bytes"] == os.path.getsize(case.test)
        assert log[case.case_id]["voxel_mm"] == pytest.approx(0.8)  # the smallest spacing bounds the display
    report = (tmp_path / "report" / "report.md").read_text().split("## Settings and provenance")[1]
    assert f"SHA-256 {sha256(manifest)}" in report and "cases.jsonl" in report


def test_a_file_rewritten_while_its_case_is_read_fails_the_case(tmp_path, monkeypatch):
    import segmetrics.evaluation.batch as batch

    (case,) = _cases(tmp_path / "data", 1)
    real = batch.load_case

    def load_then_rewrite(*arguments):
        images = real(*arguments)
        _ball(case.test, (6, 7, 7), 3)  # another version of the test while the case was being read
        return images

    monkeypatch.setattr(batch, "load_case", load_then_rewrite)
    summary = run_batch([case], tmp_path / "out", metrics=METRICS, workers=0, progress=False)
    assert "changed while the case was read" in summary.failed[case.case_id]
