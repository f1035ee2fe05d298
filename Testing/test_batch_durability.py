"""Batch runs that survive kills and crashing cases: atomic rewrites, crash isolation, honest resume.

Small synthetic cases (balls in 14³ volumes) keep every run quick; values are checked against
:func:`segmetrics.compare` run in this process and against the analytic voxel count where cheap.
"""
import csv
import json
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
from segmetrics.batch import BatchError, Case, read_case_log, read_manifest, read_results, run_batch
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
    run_batch(read_manifest(manifest), tmp_path / "whole", metrics=METRICS, progress=False)  # never interrupted
    whole = _files(tmp_path / "whole")
    _same_records(read_results(tmp_path / "whole"), [r for case in cases for r in _expected_records(case)])

    # SIGKILL at random moments while cases finish (1-4 more cases logged, then 0-10 ms; a case takes
    # ~5 ms); each start resumes the folder.
    rng = random.Random(11)
    output = tmp_path / "killed"
    for _ in range(2):
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
