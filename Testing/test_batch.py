"""Dataset runs: equality with compare(), resume after a kill, failed cases, processes and Dask.

Kills, crashing cases and resume checks: test_batch_durability.py."""
import csv
import importlib
import json
import math
import subprocess
import sys
import textwrap
from itertools import combinations

import numpy as np
import pytest
import SimpleITK as sitk

from segmetrics import Parameters, compare
from segmetrics.evaluation.batch import BatchError, Case, match_folders, read_case_log, read_manifest, read_results, run_batch
from segmetrics.cli import main
from segmetrics.inputs.io import load_label_image

METRICS = "overlap"  # cheap, so the real-data runs stay quick; equality does not depend on the group


def _lidc_cases(data_dir, nodules, raters=(1, 2)):
    folder = data_dir / "lidc_idri_pylidc_multirater"
    return [Case(f"{n}_r{a}r{b}", str(folder / f"{n}_rater{a}.nii.gz"), str(folder / f"{n}_rater{b}.nii.gz"))
            for n in nodules for a, b in combinations(raters, 2)]


def _totalseg_cases(data_dir):
    folder = data_dir / "totalsegmentator"
    files = {"seg": "example_seg.nii.gz", "fast": "example_seg_fast.nii.gz", "bs": "example_seg_fast_body_seg.nii.gz"}
    return [Case(f"{a}_vs_{b}", str(folder / files[a]), str(folder / files[b]))
            for a, b in (("seg", "fast"), ("seg", "bs"), ("fast", "bs"))]


def _same(a, b):
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def _key(record):
    return record["case_id"], record["structure"], record["metric"]


NODULES = ("LIDC-IDRI-0003_scan14_nod3", "LIDC-IDRI-0004_scan15_nod1")


@pytest.mark.parametrize("dataset, metrics", [("totalsegmentator", "overlap,distance"), ("lidc", "all")])
def test_batch_equals_compare_on_real_pairs(data_dir, tmp_path, dataset, metrics):
    if dataset == "totalsegmentator":
        cases = _totalseg_cases(data_dir)
    else:
        cases = _lidc_cases(data_dir, NODULES, raters=(1, 2, 3, 4))
    summary = run_batch(cases, tmp_path / "out", metrics=metrics, progress=False)
    assert summary.failed == {} and summary.exit_code == 0
    records = read_results(tmp_path / "out")
    for case in cases:
        expected = compare(case.reference, case.test, metrics=metrics).records()
        got = [r for r in records if r["case_id"] == case.case_id]
        assert len(got) == len(expected) > 0
        for g, e in zip(got, expected):
            assert (g["structure"], g["metric"], g["unit"], g["status"]) == (e["structure"], e["metric"], e["unit"], e["status"])
            assert _same(g["value"], e["value"])
        assert {r["metric"] for r in got} >= {"dice", "hd95_mm"}

    # Independent truth from the data manifest: mean per-label Dice of seg vs seg_fast is 0.902 ...
    if dataset == "totalsegmentator":
        dice = [r["value"] for r in records if r["case_id"] == "seg_vs_fast" and r["metric"] == "dice"]
        assert np.mean(dice) == pytest.approx(0.902, abs=0.0015)
    else:  # ... and LIDC index.csv gives the mean over the 6 rater pairs of each nodule.
        with open(data_dir / "lidc_idri_pylidc_multirater" / "index.csv") as handle:
            index = {row["case"]: float(row["mean_pairwise_dice"]) for row in csv.DictReader(handle)}
        for nodule in NODULES:
            pair_dice = [r["value"] for r in records if r["case_id"].startswith(nodule) and r["metric"] == "dice"]
            assert len(pair_dice) == 6
            assert np.mean(pair_dice) == pytest.approx(index[nodule], abs=0.0015)

    # The CSV holds the same records as the JSON lines, in case order.
    with open(tmp_path / "out" / "results.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["case_id"], r["structure"], r["metric"]) for r in rows] == [_key(r) for r in records]
    assert [r["case_id"] for r in rows] == sorted((r["case_id"] for r in rows), key=[c.case_id for c in cases].index)


KILLER = textwrap.dedent("""
    import os, sys
    import segmetrics.evaluation.batch as batch
    real = batch.evaluate_case
    done = []
    def evaluate_then_die(case, **job):
        if len(done) == int(sys.argv[2]):
            os._exit(9)  # like kill -9: no cleanup, no finally blocks
        done.append(case.case_id)
        return real(case, **job)
    batch.evaluate_case = evaluate_then_die
    cases = batch.read_manifest(sys.argv[1])
    batch.run_batch(cases, sys.argv[3], metrics="overlap", progress=False, workers=0)  # in-process: the hook applies
""")


def _write_manifest(path, cases):
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["case_id", "reference", "test"])
        writer.writerows([c.case_id, c.reference, c.test] for c in cases)


def test_killed_run_resumes_without_recomputing(data_dir, tmp_path, monkeypatch):
    cases = _lidc_cases(data_dir, NODULES, raters=(1, 2, 3))  # 6 cases
    _write_manifest(tmp_path / "manifest.csv", cases)
    out = tmp_path / "out"
    killed = subprocess.run([sys.executable, "-c", KILLER, str(tmp_path / "manifest.csv"), "3", str(out)])
    assert killed.returncode == 9
    assert [cid for cid, e in read_case_log(out).items() if e["status"] == "ok"] == [c.case_id for c in cases[:3]]

    # A crash between writing a case's records and logging it leaves orphan records: simulate one.
    orphan = compare(cases[3].reference, cases[3].test, metrics=METRICS).records()[0]
    with open(out / "results.jsonl", "a") as handle:
        handle.write(json.dumps({"case_id": cases[3].case_id, **orphan}) + "\n")
        handle.write(json.dumps({"case_id": cases[3].case_id, **orphan})[:25])  # a line cut short by the kill
    with open(out / "cases.jsonl", "a") as handle:
        handle.write('{"case_id": "')  # the kill can also cut the log line

    import segmetrics.evaluation.batch as batch

    evaluated = []
    real = batch.evaluate_case
    monkeypatch.setattr(batch, "evaluate_case", lambda case, **job: evaluated.append(case.case_id) or real(case, **job))
    summary = run_batch(read_manifest(tmp_path / "manifest.csv"), out, metrics=METRICS, progress=False, workers=0)
    assert evaluated == [c.case_id for c in cases[3:]]
    assert summary.skipped == [c.case_id for c in cases[:3]]
    log = read_case_log(out)  # parses every line: the cut line was dropped, not glued to the next
    assert sorted(log) == sorted(c.case_id for c in cases) and {e["status"] for e in log.values()} == {"ok"}
    records = read_results(out)
    keys = [_key(r) for r in records]
    assert len(keys) == len(set(keys))  # the orphan was dropped, nothing duplicated
    for case in cases:
        expected = compare(case.reference, case.test, metrics=METRICS).records()
        got = [r for r in records if r["case_id"] == case.case_id]
        assert [(g["metric"], g["status"]) for g in got] == [(e["metric"], e["status"]) for e in expected]
        assert all(_same(g["value"], e["value"]) for g, e in zip(got, expected))


def test_corrupt_and_mismatched_cases_fail_while_others_complete(data_dir, tmp_path):
    good = _lidc_cases(data_dir, NODULES)
    corrupt = tmp_path / "corrupt.nii.gz"
    corrupt.write_bytes(b"\x1f\x8b not really a gzip file")
    folder = data_dir / "lidc_idri_pylidc_multirater"
    cases = good + [Case("corrupt", str(corrupt), good[0].test),
                    Case("mismatch", str(folder / f"{NODULES[0]}_rater1.nii.gz"), str(folder / f"{NODULES[1]}_rater1.nii.gz"))]
    _write_manifest(tmp_path / "manifest.csv", cases)
    argv = ["batch", "--manifest", str(tmp_path / "manifest.csv"), "-o", str(tmp_path / "out"), "--metrics", METRICS,
            "--no-progress"]
    assert main(argv) == 1
    log = read_case_log(tmp_path / "out")
    assert log["corrupt"]["status"] == "failed" and log["corrupt"]["error"].startswith("ReadError")
    assert log["mismatch"]["status"] == "failed" and log["mismatch"]["error"].startswith("GeometryMismatchError")
    assert all(log[c.case_id]["status"] == "ok" for c in good)
    assert {r["case_id"] for r in read_results(tmp_path / "out")} == {c.case_id for c in good}

    # Re-running retries only the failed cases (they fail again), the good ones are skipped.
    summary = run_batch(read_manifest(tmp_path / "manifest.csv"), tmp_path / "out", metrics=METRICS, progress=False)
    assert summary.computed == ["corrupt", "mismatch"] and sorted(summary.failed) == ["corrupt", "mismatch"]


def test_processes_and_dask_equal_single_process(data_dir, tmp_path):
    pytest.importorskip("distributed")
    cases = _lidc_cases(data_dir, NODULES, raters=(1, 2, 3))[:4]
    run_batch(cases, tmp_path / "serial", metrics=METRICS, progress=False)  # one child process
    run_batch(cases, tmp_path / "inprocess", metrics=METRICS, workers=0, progress=False)
    run_batch(cases, tmp_path / "workers", metrics=METRICS, workers=2, progress=False)
    run_batch(cases, tmp_path / "dask", metrics=METRICS, workers=2, scheduler="local", progress=False)
    serial = (tmp_path / "serial" / "results.csv").read_text()
    assert serial.count("\n") > len(cases)
    assert (tmp_path / "inprocess" / "results.csv").read_text() == serial
    assert (tmp_path / "workers" / "results.csv").read_text() == serial
    assert (tmp_path / "dask" / "results.csv").read_text() == serial


def test_dask_cluster_by_address_releases_each_finished_case(data_dir, tmp_path):
    """A cluster given by address gives the in-process results, and its worker does not keep the
    results of finished cases (they used to stay held until the whole batch ended)."""
    distributed = pytest.importorskip("distributed")
    from batch_hooks import evaluate_noting_held_results

    cases = _lidc_cases(data_dir, NODULES, raters=(1, 2, 3))
    run_batch(cases, tmp_path / "inprocess", metrics=METRICS, workers=0, progress=False)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        run_batch(cases, tmp_path / "dask", metrics=METRICS, scheduler=cluster.scheduler_address, progress=False,
                  evaluate=evaluate_noting_held_results)
    assert (tmp_path / "dask" / "results.csv").read_text() == (tmp_path / "inprocess" / "results.csv").read_text()
    held = [int(entry["notes"][-1].split()[1]) for entry in read_case_log(tmp_path / "dask").values()]
    assert len(held) == len(cases) == 6 and max(held) <= 2, held


def test_kernels_are_compiled_once_per_machine_of_a_cluster():
    """One worker of one machine first, then one worker of each other machine, none twice."""
    import socket

    from segmetrics.evaluation import batch

    class Cluster:
        hosts = {"tcp://a:1": "a", "tcp://a:2": "a", "tcp://b:1": "b", "tcp://c:1": "c", "tcp://c:2": "c"}
        compiled_on = []

        def run(self, function, workers=None):
            if workers is None:
                assert function is socket.gethostname
                return dict(self.hosts)
            assert function is batch._compile_before_workers
            self.compiled_on.append(workers)

    cluster = Cluster()
    batch._compile_on_cluster(cluster)
    assert cluster.compiled_on == [["tcp://a:1"], ["tcp://b:1", "tcp://c:1"]]


def test_accelerator_free_path_compiles_no_kernels_before_workers(monkeypatch):
    """With SEGMETRICS_ACCELERATOR=off (or without numba) the workers run no compiled kernel, so the
    batch neither compiles nor checks numba's cache before starting them."""
    import types

    import segmetrics.spatial
    from segmetrics.evaluation import batch

    def fail():
        raise AssertionError("kernels compiled on the accelerator-free path")

    untouchable = types.SimpleNamespace(compile_kernels=fail, kernel_cache_missing=fail)  # no numba needed
    monkeypatch.setitem(sys.modules, "segmetrics.spatial.mesh", untouchable)
    monkeypatch.setattr(segmetrics.spatial, "mesh", untouchable, raising=False)
    monkeypatch.setenv("SEGMETRICS_ACCELERATOR", "off")
    batch._compile_before_workers()


def test_folder_matching_reports_unmatched(tmp_path):
    (tmp_path / "ref").mkdir()
    (tmp_path / "test").mkdir()
    for name in ("a.nii.gz", "b.nii.gz", "c.seg.nrrd"):
        (tmp_path / "ref" / name).write_bytes(b"")
    for name in ("a.nii.gz", "c.seg.nrrd", "d.nrrd"):
        (tmp_path / "test" / name).write_bytes(b"")
    cases, unmatched, skipped = match_folders(tmp_path / "ref", tmp_path / "test")
    assert [c.case_id for c in cases] == ["a", "c"]
    assert cases[1].test.endswith("c.seg.nrrd")
    assert unmatched == {"reference": ["b.nii.gz"], "test": ["d.nrrd"]}
    assert skipped == {"reference": [], "test": []}


def test_folder_matching_skips_files_that_are_not_images(tmp_path):
    for side in ("ref", "test"):
        (tmp_path / side).mkdir()
        for name in ("a.nii.gz", "index.csv", "notes.txt", "README"):
            (tmp_path / side / name).write_bytes(b"")
        (tmp_path / side / "IM0001").write_bytes(bytes(128) + b"DICM")  # DICOM without a suffix: an image
    cases, unmatched, skipped = match_folders(tmp_path / "ref", tmp_path / "test")
    assert [c.case_id for c in cases] == ["IM0001", "a"]
    assert unmatched == {"reference": [], "test": []}
    assert skipped == {"reference": ["README", "index.csv", "notes.txt"], "test": ["README", "index.csv", "notes.txt"]}


def test_folder_matching_refuses_two_files_of_one_case(tmp_path):
    """a.nii.gz and a.nrrd in one folder are one case id: neither may silently replace the other."""
    for side in ("ref", "test"):
        (tmp_path / side).mkdir()
        (tmp_path / side / "a.nii.gz").write_bytes(b"")
    (tmp_path / "ref" / "a.nrrd").write_bytes(b"")
    with pytest.raises(BatchError, match=r"reference folder .* several files of one case \(a: a.nii.gz, a.nrrd\)"):
        match_folders(tmp_path / "ref", tmp_path / "test")


def test_folder_matching_lists_subfolders_as_skipped(tmp_path, capsys):
    for side in ("ref", "test"):
        (tmp_path / side / "nested").mkdir(parents=True)
        (tmp_path / side / "nested" / "b.nii.gz").write_bytes(b"")
        (tmp_path / side / "a.nii.gz").write_bytes(b"")
    cases, unmatched, skipped = match_folders(tmp_path / "ref", tmp_path / "test")
    assert [c.case_id for c in cases] == ["a"]
    assert skipped == {"reference": ["nested/"], "test": ["nested/"]}


def test_cli_lists_and_skips_non_images_and_refuses_one_folder_as_both(data_dir, tmp_path, capsys):
    folder = data_dir / "lidc_idri_pylidc_multirater"
    for side, rater in (("ref", 1), ("test", 2)):
        (tmp_path / side).mkdir()
        (tmp_path / side / f"{NODULES[0]}.nii.gz").symlink_to(folder / f"{NODULES[0]}_rater{rater}.nii.gz")
    (tmp_path / "ref" / "index.csv").write_text("case,mean_pairwise_dice\n")
    (tmp_path / "test" / "index.csv").write_text("case,mean_pairwise_dice\n")
    argv = ["batch", "--reference-dir", str(tmp_path / "ref"), "--test-dir", str(tmp_path / "test"),
            "-o", str(tmp_path / "out"), "--metrics", "dice", "--no-progress"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "skipped 1 reference file(s) that are not images: index.csv" in captured.err
    assert "1 cases: 1 evaluated now, 0 already done, 0 failed" in captured.out
    assert set(read_case_log(tmp_path / "out")) == {NODULES[0]}

    same = ["batch", "--reference-dir", str(tmp_path / "ref"), "--test-dir", str(tmp_path / "ref" / "."),
            "-o", str(tmp_path / "same"), "--metrics", "dice", "--no-progress"]
    assert main(same) == 2
    assert "the reference and test folders are the same folder" in capsys.readouterr().err
    assert not (tmp_path / "same").exists()


def test_cli_counts_a_reference_without_test_file_as_a_case_not_run(tmp_path, capsys):
    """A reference without a prediction was only listed as unmatched: the run and its summary said
    '1 cases', as if the dataset held one case."""
    box = np.zeros((6, 8, 8), np.uint8)
    box[1:5, 2:6, 2:6] = 1
    for side, case_ids in (("ref", ("a", "b")), ("test", ("a",))):
        (tmp_path / side).mkdir()
        for case_id in case_ids:
            sitk.WriteImage(sitk.GetImageFromArray(box), str(tmp_path / side / f"{case_id}.nii.gz"))
    argv = ["batch", "--reference-dir", str(tmp_path / "ref"), "--test-dir", str(tmp_path / "test"),
            "-o", str(tmp_path / "out"), "--metrics", "dice", "--no-progress"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "unmatched reference files (1): b.nii.gz" in captured.err
    assert "2 cases: 1 evaluated now, 0 already done, 0 failed, 1 not run" in captured.out
    log = read_case_log(tmp_path / "out")
    assert log["a"]["status"] == "ok"
    assert log["b"]["status"] == "not run" and "no test file" in log["b"]["error"]


def test_cli_warns_of_manifest_cases_that_compare_a_file_with_itself(tmp_path, capsys):
    """A manifest row naming one file as reference and test (./a vs a) scored Dice 1 without a word."""
    box = np.zeros((6, 8, 8), np.uint8)
    box[1:5, 2:6, 2:6] = 1
    sitk.WriteImage(sitk.GetImageFromArray(box), str(tmp_path / "a.nii.gz"))
    sitk.WriteImage(sitk.GetImageFromArray(box), str(tmp_path / "b.nii.gz"))
    (tmp_path / "cases.csv").write_text("case_id,reference,test\nself,a.nii.gz,./a.nii.gz\npair,a.nii.gz,b.nii.gz\n")
    argv = ["batch", "--manifest", str(tmp_path / "cases.csv"), "-o", str(tmp_path / "out"), "--metrics", "dice",
            "--no-progress"]
    assert main(argv) == 0
    assert "warning: 1 case(s) compare a file with itself (reference and test are one file): self" in \
        capsys.readouterr().err


def test_a_cases_name_map_notes_are_kept_in_its_log(tmp_path):
    """The notes of a case's name map (which side it named, labels no image holds) were dropped."""
    box = np.zeros((6, 8, 8), np.uint8)
    box[1:5, 2:6, 2:6] = 1
    for side in ("ref", "test"):
        sitk.WriteImage(sitk.GetImageFromArray(box), str(tmp_path / f"{side}.nii.gz"))
    (tmp_path / "names.json").write_text('{"1": "Liver", "4": "Spleen"}')
    case = Case("a", str(tmp_path / "ref.nii.gz"), str(tmp_path / "test.nii.gz"), str(tmp_path / "names.json"))
    run_batch([case], tmp_path / "out", metrics="dice", workers=0, progress=False)
    (record,) = read_results(tmp_path / "out")
    assert record["structure"] == "Liver"
    notes = read_case_log(tmp_path / "out")["a"]["notes"]
    assert f"{tmp_path / 'names.json'}: names given to the labels of the reference and test" in notes
    assert any("4 ('Spleen')" in note for note in notes)


def test_resuming_with_other_settings_is_refused(tmp_path, data_dir):
    cases = _lidc_cases(data_dir, NODULES[:1])
    run_batch(cases, tmp_path / "out", metrics=METRICS, progress=False)
    with pytest.raises(ValueError, match="other settings"):
        run_batch(cases, tmp_path / "out", metrics="dice", progress=False)


def test_memory_error_is_a_failed_case(data_dir, tmp_path, monkeypatch):
    module = importlib.import_module("segmetrics.evaluation.compare")  # the package attribute is the function
    cases = _lidc_cases(data_dir, NODULES)
    real = module.compare

    def compare_or_run_out(reference, test, **options):
        if reference.array.size == 8 * 25 * 31:  # the first nodule's crop (8 × 25 × 31 voxels)
            raise MemoryError("simulated")
        return real(reference, test, **options)

    monkeypatch.setattr(module, "compare", compare_or_run_out)
    summary = run_batch(cases, tmp_path / "out", metrics=METRICS, progress=False, workers=0)  # the patch is in-process
    assert summary.failed == {cases[0].case_id: "MemoryError: simulated"}
    assert {r["case_id"] for r in read_results(tmp_path / "out")} == {cases[1].case_id}


@pytest.mark.needs("pandas")
def test_cli_folders_params_report_and_parquet(data_dir, tmp_path, capsys):
    folder = data_dir / "lidc_idri_pylidc_multirater"
    for side, rater in (("ref", 1), ("test", 3)):
        (tmp_path / side).mkdir()
        for nodule in NODULES:
            (tmp_path / side / f"{nodule}.nii.gz").symlink_to(folder / f"{nodule}_rater{rater}.nii.gz")
    (tmp_path / "ref" / "lonely.nii.gz").symlink_to(folder / f"{NODULES[0]}_rater2.nii.gz")
    (tmp_path / "params.json").write_text(json.dumps({"hd_percentile": 90}))
    argv = ["batch", "--reference-dir", str(tmp_path / "ref"), "--test-dir", str(tmp_path / "test"),
            "-o", str(tmp_path / "out"), "--metrics", "dice,hdp_mm", "--params", str(tmp_path / "params.json"),
            "--report", str(tmp_path / "report"), "--no-progress"]
    assert main(argv) == 0
    assert "unmatched reference files (1): lonely.nii.gz" in capsys.readouterr().err
    records = read_results(tmp_path / "out")
    for nodule in NODULES:
        expected = compare(folder / f"{nodule}_rater1.nii.gz", folder / f"{nodule}_rater3.nii.gz",
                           metrics="dice,hdp_mm", params=Parameters(hd_percentile=90))
        got = {r["metric"]: r["value"] for r in records if r["case_id"] == nodule}
        assert got == {r["metric"]: r["value"] for r in expected.records()}
    assert {r["params"]["percentile"] for r in records if r["metric"] == "hdp_mm"} == {90.0}
    assert (tmp_path / "report" / "report.html").is_file() and (tmp_path / "report" / "aggregate.csv").is_file()
    pq = pytest.importorskip("pyarrow.parquet")
    table = pq.read_table(tmp_path / "out" / "results.parquet").to_pylist()
    assert [(r["case_id"], r["metric"], r["value"]) for r in table] == [(r["case_id"], r["metric"], r["value"]) for r in records]


def test_threshold_for_probability_maps(data_dir, tmp_path):
    folder = data_dir / "metricsreloaded_brain_lesions"
    case = Case("0001", str(folder / "Ref" / "CorrectLesion_0001_01_Ref.nii.gz"),
                str(folder / "Pred" / "CorrectLesion_0001_01_Pred.nii.gz"))
    without = run_batch([case], tmp_path / "plain", metrics="dice", progress=False)
    assert "non-integer" in without.failed["0001"]  # a probability map is not silently cast to labels
    run_batch([case], tmp_path / "thresholded", metrics="dice", threshold=0.5, progress=False)
    (record,) = read_results(tmp_path / "thresholded")
    reference = load_label_image(case.reference, threshold=0.5).array.astype(bool)
    test = load_label_image(case.test, threshold=0.5).array.astype(bool)
    expected = 2 * np.count_nonzero(reference & test) / (np.count_nonzero(reference) + np.count_nonzero(test))
    assert record["value"] == pytest.approx(expected) and 0.71 <= record["value"] <= 0.92  # MANIFEST range


def test_metric_order_does_not_depend_on_import_order():
    """Worker processes import the metric modules in another order than the caller; records must list alike."""
    from segmetrics.registry import all_groups

    code = "import segmetrics.metrics.lesions, segmetrics.metrics.roughness, segmetrics.metrics.msi, segmetrics.metrics.distance\n" \
           "from segmetrics.registry import all_groups\nprint(','.join(all_groups()))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip().split(",") == list(all_groups()) == ["overlap", "distance", "msi", "roughness", "contours",
                                                                   "lesions", "dose"]
