"""Dataset-scale evaluation: many reference/test pairs, written incrementally, resumable, parallel.

A *case* is one reference/test pair of label maps. :func:`run_batch` evaluates every case with
:func:`segmetrics.compare` (in this process, in worker processes, or on a Dask cluster) and
appends one record per case × structure × metric to ``results.csv`` and ``results.jsonl`` in the
output folder as soon as the case finishes. ``cases.jsonl`` logs one line per finished attempt
(``ok`` or ``failed`` with the error message); re-running the same command skips the cases logged
``ok`` and retries the others. When the run ends the result files are rewritten in case order, so
every execution mode gives byte-identical files (plus ``results.parquet`` when pyarrow is present).

Spacings and distances follow the package convention: mm, array-axis order ``(z, y, x)``.
"""
from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from .output import RECORD_FIELDS, csv_row, json_value, record_row
from .registry import Parameters

#: Columns of ``results.csv`` (the compare record fields, prefixed with the case id).
BATCH_FIELDS = ("case_id",) + RECORD_FIELDS
#: Suffixes stripped from file names to form case ids when two folders are matched.
IMAGE_SUFFIXES = (".seg.nrrd", ".nii.gz", ".nii", ".nrrd", ".nhdr", ".mha", ".mhd", ".png", ".tif", ".tiff")


@dataclass(frozen=True)
class Case:
    """One reference/test pair; ``names`` is an optional JSON file mapping label values to names."""

    case_id: str
    reference: str
    test: str
    names: str | None = None


@dataclass
class CaseOutcome:
    """What evaluating one case produced: its records, or the error that stopped it.

    ``diagonal_mm`` is the length of the reference image's diagonal (mm), used by the
    ``diagonal`` empty-mask penalty at aggregation.
    """

    case_id: str
    status: str  # "ok" or "failed"
    records: list = field(default_factory=list)
    error: str = ""
    diagonal_mm: float = math.nan
    seconds: float = 0.0


@dataclass
class BatchSummary:
    """The result of :func:`run_batch`; ``failed`` maps case ids to error messages."""

    output: Path
    cases: list
    computed: list
    skipped: list
    failed: dict
    unmatched: dict = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        """0 when every case succeeded, 1 otherwise (the CLI's exit status)."""
        return 1 if self.failed else 0


# ---------------------------------------------------------------------------------------- inputs
def read_manifest(path) -> list:
    """Read a manifest CSV with columns ``case_id, reference, test`` and optional ``names``.

    Relative paths are taken relative to the manifest's folder. ``names`` (also accepted as
    ``labels`` or ``label_map``) is a JSON file mapping label values to structure names.
    """
    path = Path(path)
    base = path.parent
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    if not rows or not {"case_id", "reference", "test"} <= set(rows[0]):
        raise ValueError(f"{path}: a manifest needs the columns case_id, reference, test (optional: names)")
    cases = []
    for row in rows:
        names = row.get("names") or row.get("labels") or row.get("label_map") or None
        cases.append(Case(row["case_id"], str(base / row["reference"]), str(base / row["test"]),
                          str(base / names) if names else None))
    duplicates = {c.case_id for c in cases if sum(d.case_id == c.case_id for d in cases) > 1}
    if duplicates:
        raise ValueError(f"{path}: duplicate case ids {sorted(duplicates)}")
    return cases


def case_id_from_filename(name: str) -> str:
    """File name without its image suffix (``a.nii.gz`` → ``a``)."""
    lower = name.lower()
    suffix = next((s for s in IMAGE_SUFFIXES if lower.endswith(s)), Path(name).suffix)
    return name[: len(name) - len(suffix)] if suffix else name


def match_folders(reference_dir, test_dir, names=None):
    """Pair the files of two folders by case id (file name without image suffix).

    Returns ``(cases, unmatched)`` where ``unmatched`` is ``{"reference": [...], "test": [...]}``
    listing files that have no partner in the other folder.
    """
    def index(folder):
        files = sorted(p for p in Path(folder).iterdir() if p.is_file() and not p.name.startswith("."))
        return {case_id_from_filename(p.name): p for p in files}

    refs, tests = index(reference_dir), index(test_dir)
    cases = [Case(cid, str(refs[cid]), str(tests[cid]), names) for cid in sorted(refs.keys() & tests.keys())]
    unmatched = {"reference": sorted(refs[c].name for c in refs.keys() - tests.keys()),
                 "test": sorted(tests[c].name for c in tests.keys() - refs.keys())}
    return cases, unmatched


# ------------------------------------------------------------------------------------ one case
def load_case(case: Case, threshold: float | None = None, input_policy=None):
    """Read a case's reference and test label images (names from ``case.names`` if given).

    ``threshold`` binarises both (``value >= threshold``), e.g. 0.5 for probability maps;
    ``input_policy`` (:class:`segmetrics.io.InputPolicy`) overrides the input checks.
    """
    from .io import apply_name_map, load_label_image, read_name_map

    reference = load_label_image(case.reference, threshold=threshold, input_policy=input_policy)
    test = load_label_image(case.test, threshold=threshold, input_policy=input_policy)
    if case.names:  # as `segmetrics compare --names`: each image names the labels it holds
        names = read_name_map(case.names)
        for image in (reference, test):
            apply_name_map(image, names)
    return reference, test


def evaluate_case(case: Case, metrics=None, params: Parameters | None = None, resample_to=None,
                  labels=None, threshold: float | None = None, input_policy=None) -> CaseOutcome:
    """Compare one case; any exception (unreadable file, grid mismatch, MemoryError) is caught.

    Runs in worker processes too, so it only takes and returns picklable objects. Records carry
    ``case_id`` plus the fields of :meth:`ComparisonResult.records`.
    """
    from .compare import compare

    start = time.perf_counter()
    try:
        reference, test = load_case(case, threshold, input_policy)
        result = compare(reference, test, labels=labels, metrics=metrics, params=params,
                         resample_to=resample_to, input_policy=input_policy)
    except Exception as error:  # MemoryError included: a failed case is data, not a crash of the run
        message = f"{type(error).__name__}: {str(error).strip() or 'no message'}"
        return CaseOutcome(case.case_id, "failed", error=message, seconds=time.perf_counter() - start)
    diagonal = float(np.linalg.norm(np.asarray(reference.array.shape) * np.asarray(reference.spacing)))
    records = [{"case_id": case.case_id, **r} for r in result.records()]
    return CaseOutcome(case.case_id, "ok", records, diagonal_mm=diagonal, seconds=time.perf_counter() - start)


# --------------------------------------------------------------------------------- executors
def _limit_threads(workers: int) -> None:
    """Worker initializer: N workers share the cores instead of each starting one ITK/VTK/kernel thread per core."""
    import SimpleITK as sitk
    import vtk

    from . import _kernels

    threads = max(1, (os.cpu_count() or 1) // max(workers, 1))
    sitk.ProcessObject.SetGlobalDefaultNumberOfThreads(threads)
    vtk.vtkSMPTools.Initialize(threads)
    _kernels.set_thread_count(threads)


def _compile_before_workers() -> None:
    """Compile the kernels in this process before local workers start, so that they only read
    numba's disk cache (:func:`segmetrics.mesh.compile_kernels`)."""
    from . import mesh

    mesh.compile_kernels()


def _outcomes(cases, job: dict, workers: int, scheduler: str | None):
    """Yield a :class:`CaseOutcome` per case as each finishes (order depends on the mode)."""
    if scheduler:
        yield from _dask_outcomes(cases, job, workers, scheduler)
    elif workers <= 1:
        for case in cases:
            yield evaluate_case(case, **job)
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        _compile_before_workers()
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                 initializer=_limit_threads, initargs=(workers,)) as pool:
            futures = {pool.submit(evaluate_case, case, **job): case for case in cases}
            for future in as_completed(futures):
                yield _result_or_failure(future, futures[future])


def _result_or_failure(future, case: Case) -> CaseOutcome:
    """The future's outcome, or a failed outcome when its worker died (e.g. killed for memory)."""
    try:
        return future.result()
    except Exception as error:
        return CaseOutcome(case.case_id, "failed", error=f"worker lost: {type(error).__name__}: {error}")


def _dask_outcomes(cases, job: dict, workers: int, scheduler: str):
    """Run the cases on a Dask cluster: ``"local"`` starts one, otherwise connect to an address."""
    try:
        from dask.distributed import Client, LocalCluster, as_completed
    except ImportError as error:
        raise ImportError("--scheduler needs dask.distributed: pip install 'segmetrics[distributed]'") from error
    if scheduler == "local":
        _compile_before_workers()
        cluster = LocalCluster(n_workers=max(workers, 1), threads_per_worker=1, processes=True,
                               dashboard_address=None)
        client = Client(cluster)
        client.run(_limit_threads, workers)
    else:
        cluster, client = None, Client(scheduler)
    try:
        futures = {client.submit(evaluate_case, case, pure=False, **job): case for case in cases}
        for future in as_completed(futures):
            yield _result_or_failure(future, futures[future])
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


# ------------------------------------------------------------------------------------ outputs
def _json_line(payload: dict) -> str:
    return json.dumps(payload, default=str) + "\n"


def value_from_json(value) -> float:
    """Inverse of :func:`segmetrics.output.json_value`: ``None`` → NaN, ``"inf"`` → inf."""
    return math.nan if value is None else float(value)


def _read_jsonl(path: Path) -> list:
    """Objects of a JSON-lines file; a last line cut short by a killed run is ignored."""
    if not path.is_file():
        return []
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    try:
        tail = [json.loads(lines[-1])] if lines else []
    except json.JSONDecodeError:
        tail = []
    return [json.loads(line) for line in lines[:-1]] + tail


def read_results(output) -> list:
    """All records of a batch output folder (``results.jsonl``), values back as floats."""
    return [{**r, "value": value_from_json(r["value"])} for r in _read_jsonl(Path(output) / "results.jsonl")]


def read_case_log(output) -> dict:
    """The last logged attempt of each case: ``{case_id: {"status", "error", "diagonal_mm", ...}}``."""
    return {entry["case_id"]: entry for entry in _read_jsonl(Path(output) / "cases.jsonl")}


class _ResultWriter:
    """Append-only writer of the three output files; every case is flushed as a unit."""

    def __init__(self, output: Path):
        new_csv = not (output / "results.csv").is_file()
        self.csv = open(output / "results.csv", "a", newline="")
        self.table = csv.DictWriter(self.csv, fieldnames=list(BATCH_FIELDS), lineterminator="\n")
        if new_csv:
            self.table.writeheader()
        self.jsonl = open(output / "results.jsonl", "a")
        self.log = open(output / "cases.jsonl", "a")

    def add(self, outcome: CaseOutcome) -> None:
        # Records first, then the log line: a case counts as done only once its log line exists.
        for record in outcome.records:
            self.table.writerow(csv_row(record))
            self.jsonl.write(_json_line({**record, "value": json_value(record["value"])}))
        for handle in (self.csv, self.jsonl):
            handle.flush()
            os.fsync(handle.fileno())
        entry = {k: v for k, v in asdict(outcome).items() if k != "records"}
        entry["diagonal_mm"] = json_value(entry["diagonal_mm"])
        entry["n_records"] = len(outcome.records)
        self.log.write(_json_line(entry))
        self.log.flush()

    def close(self) -> None:
        for handle in (self.csv, self.jsonl, self.log):
            handle.close()


def _rewrite_results(output: Path, records: list) -> None:
    """Write ``results.csv`` / ``results.jsonl`` (and Parquet when possible) from ``records``."""
    with open(output / "results.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(BATCH_FIELDS), lineterminator="\n")
        writer.writeheader()
        writer.writerows(csv_row(r) for r in records)
    _write_jsonl(output / "results.jsonl", ({**r, "value": json_value(r["value"])} for r in records))


def _write_jsonl(path: Path, objects) -> None:
    with open(path, "w") as handle:
        handle.writelines(_json_line(o) for o in objects)


def _write_parquet(output: Path, records: list) -> bool:
    """``results.parquet`` with the CSV columns (value as float, NaN/inf kept); False without pyarrow."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return False
    columns = {name: [record_row(r)[name] for r in records] for name in BATCH_FIELDS}
    columns["value"] = [float(r["value"]) for r in records]
    columns["reference_label"] = [str(v) for v in columns["reference_label"]]
    columns["test_label"] = [str(v) for v in columns["test_label"]]
    pq.write_table(pa.table(columns), output / "results.parquet")
    return True


def _settings(job: dict) -> dict:
    """The job as plain JSON-able settings (stored in ``run.json``)."""
    metrics, labels = job["metrics"], job["labels"]
    return {**job, "params": asdict(job["params"]), "input_policy": asdict(job["input_policy"]),
            "metrics": metrics if isinstance(metrics, (str, type(None))) else sorted(metrics),
            "labels": None if labels is None else [str(x) for x in labels]}


def _check_settings(output: Path, settings: dict) -> None:
    """Refuse to resume a run made with other settings (mixed results would be meaningless)."""
    path = output / "run.json"
    if path.is_file():
        previous = json.loads(path.read_text())
        if previous != json.loads(json.dumps(settings)):
            raise ValueError(f"{output} holds a batch run with other settings ({path}); "
                             "use another output folder or delete that one")
    else:
        path.write_text(json.dumps(settings, indent=2, sort_keys=True))


# --------------------------------------------------------------------------------------- run
def run_batch(cases, output, *, metrics=None, params: Parameters | None = None, resample_to=None,
              labels=None, threshold: float | None = None, workers: int = 1, scheduler: str | None = None, progress: bool = True,
              unmatched: dict | None = None, input_policy=None) -> BatchSummary:
    """Evaluate every case and write the results into the folder ``output``.

    Parameters
    ----------
    cases : list of Case
        From :func:`read_manifest` or :func:`match_folders`; case ids must be unique.
    output : path
        Folder for ``results.csv``, ``results.jsonl``, ``cases.jsonl``, ``run.json``; created if
        needed. A folder with earlier results of the same settings is resumed.
    metrics, params, resample_to, labels
        As for :func:`segmetrics.compare` (``resample_to="reference"`` resamples test images
        onto the reference grid; without it a grid mismatch fails the case).
    threshold : float, optional
        Binarise every input at ``value >= threshold`` (probability maps).
    workers : int
        Worker processes (1 = this process); with ``scheduler="local"`` the Dask worker count.
    scheduler : str, optional
        ``"local"`` for a local Dask cluster or the address of a running Dask scheduler
        (e.g. ``tcp://host:8786``); its workers must see the same file paths.
    progress : bool
        Show a progress bar (cases done, rate, time left) on standard error.
    input_policy : segmetrics.io.InputPolicy, optional
        Overrides of the input checks (stored in ``run.json``); invalid options (``threshold``,
        ``params``) are refused before any case runs.
    """
    from .io import InputPolicy
    from .validation import check_threshold

    check_threshold(threshold)
    job = {"metrics": metrics, "params": params or Parameters(), "resample_to": resample_to, "labels": labels,
           "threshold": threshold, "input_policy": input_policy or InputPolicy()}
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    _check_settings(output, _settings(job))

    _write_jsonl(output / "cases.jsonl", _read_jsonl(output / "cases.jsonl"))  # drop a line cut by a kill
    log = read_case_log(output)
    finished = {cid for cid, entry in log.items() if entry["status"] == "ok"}
    order = {case.case_id: i for i, case in enumerate(cases)}
    # Records of a case interrupted between its records and its log line are dropped and redone.
    kept = [r for r in read_results(output) if r["case_id"] in finished]
    _rewrite_results(output, kept)
    todo = [case for case in cases if case.case_id not in finished]
    skipped = [case.case_id for case in cases if case.case_id in finished]

    writer = _ResultWriter(output)
    computed, failed = [], {}
    try:
        with _progress_bar(len(cases), len(skipped), enabled=progress) as advance:
            for outcome in _outcomes(todo, job, workers, scheduler):
                writer.add(outcome)
                computed.append(outcome.case_id)
                if outcome.status != "ok":
                    failed[outcome.case_id] = outcome.error
                advance(outcome)
    finally:
        writer.close()
    records = sorted(read_results(output), key=lambda r: order.get(r["case_id"], len(order)))
    _rewrite_results(output, records)
    _write_parquet(output, records)
    log = read_case_log(output)
    failed = {cid: log[cid]["error"] for cid in order if cid in log and log[cid]["status"] != "ok"}
    return BatchSummary(output, [c.case_id for c in cases], computed, skipped, failed, unmatched or {})


@contextlib.contextmanager
def _progress_bar(total: int, already: int, enabled: bool):
    """Yield ``advance(outcome)``; shows a rich bar with cases done/total, failures, rate and time left."""
    if not enabled:
        yield lambda outcome: None
        return
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)

    bar = Progress(TextColumn("[bold]batch"), BarColumn(), MofNCompleteColumn(), TextColumn("cases"),
                   TextColumn("{task.fields[rate]}"), TextColumn("failed {task.fields[failed]}"),
                   TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(), console=Console(stderr=True))
    task = bar.add_task("batch", total=total, completed=already, rate="", failed=0)
    started, counts = time.perf_counter(), {"done": 0, "failed": 0}

    def advance(outcome):
        counts["done"] += 1
        counts["failed"] += outcome.status != "ok"
        per_minute = 60 * counts["done"] / max(time.perf_counter() - started, 1e-9)
        bar.update(task, advance=1, rate=f"{per_minute:.1f}/min", failed=counts["failed"])

    with bar:
        yield advance
