"""Dataset-scale evaluation: many reference/test pairs, written incrementally, resumable, parallel.

A *case* is one reference/test pair of label maps. :func:`run_batch` evaluates every case with
:func:`segmetrics.compare` in child processes (or on a Dask cluster) and appends one record per
case × structure × metric to ``results.csv`` and ``results.jsonl`` in the output folder as soon as
the case finishes. ``cases.jsonl`` logs one line per finished attempt (``ok`` or ``failed`` with
the error message, its record count, the SHA-256 of its input files and a fingerprint of its
inputs and settings); ``run.json`` holds the settings and the provenance (manifest or folders).

Durability: a case that kills its process (segmentation fault, out-of-memory kill) is logged
``failed`` with the signal and the run goes on (:mod:`segmetrics.evaluation.workers`). Re-running the same
command skips the cases logged ``ok`` whose records are all present and whose input files (path,
size, times, inode: :func:`_fingerprint`), settings and structure-name synonyms are
unchanged; every other case is (re)done. Result files are
only ever replaced whole (temporary file, fsync, ``os.replace``), so a kill at any moment loses at
most the cases still running. When the run ends the result files are rewritten in case order, so
every execution mode gives byte-identical files (plus ``results.parquet`` when pyarrow is present).
Those rewrites copy the records case by case (:class:`_Folder`): the memory of the submitting
process grows with the number of cases (a few hundred bytes each), not with their records.
Finished cases in the folder that are not among the run's cases are left out of the results and
kept in ``other_cases.jsonl`` for a later run that lists them again.

Spacings and distances follow the package convention: mm, array-axis order ``(z, y, x)``.
"""
from __future__ import annotations

import contextlib
import csv
import functools
import hashlib
import json
import math
import os
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..outputs.tables import RECORD_FIELDS, csv_row, json_record, json_value, record_row
from ..registry import Parameters, as_parameters
from .workers import WorkerDied, run_isolated

#: Columns of ``results.csv`` (the compare record fields, prefixed with the case id).
BATCH_FIELDS = ("case_id",) + RECORD_FIELDS
#: Suffixes of the files a folder run reads as cases, stripped from file names to form case ids.
IMAGE_SUFFIXES = (".seg.nrrd", ".nii.gz", ".nii", ".nrrd", ".nhdr", ".mha", ".mhd", ".dcm", ".dicom", ".png", ".jpg",
                  ".jpeg", ".bmp", ".tif", ".tiff")
#: Records of finished cases that are not among the current run's cases (kept for a later run).
OTHER_CASES = "other_cases.jsonl"
#: The case log: one line per finished attempt (status, error, input digests, fingerprint).
CASE_LOG = "cases.jsonl"
#: Records per row group of ``results.parquet``: the conversion holds one group at a time.
PARQUET_GROUP_ROWS = 16_384
#: Suffix of the temporary files that replace result files atomically.
TEMPORARY_SUFFIX = ".segmetrics-tmp"


class BatchError(ValueError):
    """A manifest or output folder a batch cannot use; the message is one line naming the file."""


@dataclass(frozen=True)
class Case:
    """One reference/test pair; ``names`` is an optional JSON file mapping label values to names,
    ``dose`` an optional RT Dose file for the dose metrics, ``image`` the image series (DICOM folder
    or image file) RT Structure Sets are rasterised on (``--image``). A case with a ``not_run`` reason
    is logged ``not run`` with it, not evaluated (a DICOM segmentation that could not be paired:
    :mod:`segmetrics.evaluation.dicom_batch`); its missing side is ``""``."""

    case_id: str
    reference: str
    test: str
    names: str | None = None
    dose: str | None = None
    image: str | None = None
    not_run: str | None = None

    def files(self) -> dict:
        """The case's input files by role: ``reference``, ``test`` and, when given, ``names`` and ``dose``."""
        roles = {"reference": self.reference, "test": self.test, "names": self.names, "dose": self.dose}
        return {role: path for role, path in roles.items() if path}


@dataclass
class CaseOutcome:
    """What evaluating one case produced: its records, or the error that stopped it.

    ``diagonal_mm`` is the length of the reference image's diagonal (mm), used by the
    ``diagonal`` empty-mask penalty at aggregation; ``voxel_mm`` its smallest voxel size (mm), which
    bounds the precision distances are displayed with; ``notes`` are the comparison's notes
    (resampling, foreground discarded by it), kept in ``cases.jsonl`` and shown in the report;
    ``inputs`` maps ``reference``, ``test`` (and ``names``) to the
    :func:`~segmetrics.evaluation.provenance.file_info` (path, size, SHA-256) of the bytes read
    (see :func:`evaluate_case`), kept in ``cases.jsonl``.
    """

    case_id: str
    status: str  # "ok", "failed" or "not run" (error: the reason)
    records: list = field(default_factory=list)
    error: str = ""
    diagonal_mm: float = math.nan
    voxel_mm: float = math.nan
    seconds: float = 0.0
    notes: list = field(default_factory=list)
    inputs: dict = field(default_factory=dict)


@dataclass
class BatchSummary:
    """The result of :func:`run_batch`; ``failed`` maps case ids to error messages, ``not_run`` to
    the reason a case was not evaluated (:attr:`Case.not_run`).

    ``not_in_manifest`` lists the case ids found in the output folder that are not among the
    run's cases: they are left out of the results (their records wait in ``other_cases.jsonl``).
    """

    output: Path
    cases: list
    computed: list
    skipped: list
    failed: dict
    unmatched: dict = field(default_factory=dict)
    not_in_manifest: list = field(default_factory=list)
    not_run: dict = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        """0 when no case failed, 1 otherwise (the CLI's exit status); cases not run (``not_run``:
        ``{case_id: reason}``, unpaired DICOM segmentations) do not count as failed."""
        return 1 if self.failed else 0


# ---------------------------------------------------------------------------------------- inputs
def read_manifest(path) -> list:
    """Read a manifest CSV with columns ``case_id, reference, test`` and optional ``names`` and ``dose``.

    Relative paths are taken relative to the manifest's folder. ``names`` (also accepted as
    ``labels`` or ``label_map``) is a JSON file mapping label values to structure names; ``dose``
    an RT Dose file (the case's planned dose, for the dose metrics; may be empty). A UTF-8
    byte-order mark (Excel's "CSV UTF-8") and spaces around the cells are accepted. Raises :class:`BatchError` (one line naming
    the file and row) for a folder, undecodable text, missing columns, empty fields or duplicate ids.
    """
    path = Path(path)
    if path.is_dir():
        raise BatchError(f"manifest {path} is a folder; give the CSV file (columns case_id, reference, test)")
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle, skipinitialspace=True)  # "a, r.nii.gz, t.nii.gz" as typed by hand
            rows = [(reader.line_num, row) for row in reader]  # line in the file, as a spreadsheet numbers rows
            columns = reader.fieldnames or []
    except UnicodeDecodeError as error:
        raise BatchError(f"manifest {path} is not UTF-8 text ({error.reason} at byte {error.start}); "
                         "save it as CSV UTF-8") from error
    except csv.Error as error:
        raise BatchError(f"manifest {path}: not a readable CSV file ({error})") from error
    missing = [c for c in ("case_id", "reference", "test") if c not in columns]
    if missing:
        raise BatchError(f"manifest {path}: needs the columns case_id, reference, test (optional: names); "
                         f"missing {', '.join(missing)}, found {', '.join(map(str, columns)) or 'no header'}")
    if not rows:
        raise BatchError(f"manifest {path}: no cases below the header")
    cases = []
    for line, row in rows:
        empty = [c for c in ("case_id", "reference", "test") if not (row.get(c) or "").strip()]
        if empty:
            raise BatchError(f"manifest {path} line {line}: empty {', '.join(empty)} "
                             "(each row needs case_id, reference and test)")
        names = (row.get("names") or row.get("labels") or row.get("label_map") or "").strip() or None
        dose = (row.get("dose") or "").strip() or None
        case_id, reference, test = (row[column].strip() for column in ("case_id", "reference", "test"))
        cases.append(Case(case_id, str(path.parent / reference), str(path.parent / test),
                          str(path.parent / names) if names else None, dose=str(path.parent / dose) if dose else None))
    duplicates = _duplicate_ids(cases)
    if duplicates:
        raise BatchError(f"manifest {path}: duplicate case ids {duplicates}")
    return cases


def _duplicate_ids(cases) -> list:
    """Case ids that occur more than once, sorted."""
    return sorted(case_id for case_id, count in Counter(c.case_id for c in cases).items() if count > 1)


def case_id_from_filename(name: str) -> str:
    """File name without its image suffix (``a.nii.gz`` → ``a``)."""
    lower = name.lower()
    suffix = next((s for s in IMAGE_SUFFIXES if lower.endswith(s)), Path(name).suffix)
    return name[: len(name) - len(suffix)] if suffix else name


def is_image_file(path: Path) -> bool:
    """Whether a folder run reads ``path`` as a case: a name ending in one of :data:`IMAGE_SUFFIXES`,
    or a DICOM file by its content (DICOM files often have no suffix). Other files (``index.csv``,
    notes, JSON) are not images."""
    from ..inputs.readers.dicom_header import looks_like_dicom

    if path.name.lower().endswith(IMAGE_SUFFIXES):
        return True
    try:
        return looks_like_dicom(path)
    except OSError:  # unreadable: not taken as a case
        return False


def match_folders(reference_dir, test_dir, names=None):
    """Pair the image files of two folders by case id (file name without image suffix).

    Returns ``(cases, unmatched, skipped)``: ``unmatched`` is ``{"reference": [...], "test": [...]}``
    listing image files without a partner in the other folder, ``skipped`` the same for the files
    that are not images (:func:`is_image_file`: ``index.csv``, notes) and the subfolders (named with
    a trailing ``/``), which are never run as cases. Hidden files are ignored. Raises
    :class:`BatchError` when the two folders are one (every case would compare a file with itself)
    or when a folder holds two image files of one case id (``a.nii.gz`` and ``a.nrrd``).

    Folders holding DICOM RT Structure Sets or SEGs (at any depth) are paired by their headers instead
    (:func:`segmetrics.evaluation.dicom_batch.pair_dicom_folders`: patient and frame of reference,
    the referenced image series as grid); ``unmatched`` is then empty, the segmentations that could
    not be paired being cases with a ``not_run`` reason.
    """
    from ..inputs.dicom_folders import holds_dicom_segmentations

    folders = {"reference": Path(reference_dir), "test": Path(test_dir)}
    for side, folder in folders.items():
        if not folder.is_dir():
            raise BatchError(f"the {side} folder {folder} is not a folder")
    if os.path.samefile(folders["reference"], folders["test"]):
        raise BatchError(f"the reference and test folders are the same folder ({folders['reference']}): every case "
                         "would compare a file with itself; give the test segmentations' folder")
    if any(holds_dicom_segmentations(folder) for folder in folders.values()):
        from .dicom_batch import pair_dicom_folders

        cases, skipped = pair_dicom_folders(folders["reference"], folders["test"], names)
        return cases, {"reference": [], "test": []}, skipped
    images, skipped = {}, {}
    for side, folder in folders.items():
        entries = sorted(p for p in folder.iterdir() if not p.name.startswith("."))
        readable = {p: p.is_file() and is_image_file(p) for p in entries}
        by_case = {}
        for path in (p for p in entries if readable[p]):
            by_case.setdefault(case_id_from_filename(path.name), []).append(path.name)
        repeated = {case_id: files for case_id, files in by_case.items() if len(files) > 1}
        if repeated:
            raise BatchError(f"the {side} folder {folder} holds several files of one case ("
                             + "; ".join(f"{case_id}: {', '.join(files)}" for case_id, files in repeated.items())
                             + "): keep one file per case, or list the pairs in a manifest (--manifest)")
        images[side] = {case_id: folder / files[0] for case_id, files in by_case.items()}
        skipped[side] = [p.name + ("/" if p.is_dir() else "") for p in entries if not readable[p]]
    refs, tests = images["reference"], images["test"]
    cases = [Case(cid, str(refs[cid]), str(tests[cid]), names) for cid in sorted(refs.keys() & tests.keys())]
    unmatched = {"reference": sorted(refs[c].name for c in refs.keys() - tests.keys()),
                 "test": sorted(tests[c].name for c in tests.keys() - refs.keys())}
    return cases, unmatched, skipped


# ------------------------------------------------------------------------------------ one case
def load_case(case: Case, threshold: float | None = None, input_policy=None):
    """``(reference, test, notes)``: a case's label images, named from ``case.names`` if given
    (``notes`` says which side the map named, and the labels it names that neither side holds).

    ``threshold`` binarises both (``value >= threshold``), e.g. 0.5 for probability maps;
    ``input_policy`` (:class:`segmetrics.inputs.io.InputPolicy`) overrides the input checks.
    """
    from ..inputs.io import load_pair, name_unnamed, read_name_map

    # RT structure sets: rasterised on the case's image series, else the other input's grid, else a contour grid;
    # contours that grid crops are refused by compare, for the selected structures only
    reference, test = load_pair(case.reference, case.test, threshold=threshold, input_policy=input_policy,
                                image=case.image, check_crops=False)
    if case.names:  # as `segmetrics compare --names`: the side(s) without names of their own
        return name_unnamed(reference, test, read_name_map(case.names), str(case.names))
    return reference, test, []


def evaluate_case(case: Case, metrics=None, params: Parameters | None = None, resample_to=None,
                  labels=None, threshold: float | None = None, input_policy=None,
                  synonyms: dict | None = None) -> CaseOutcome:
    """Compare one case; any exception (unreadable file, grid mismatch, MemoryError) is caught.

    ``synonyms`` (``{normalised synonym: canonical name}``,
    :func:`segmetrics.inputs.structure_names.read_synonyms`) pair structures as in :func:`segmetrics.compare`.

    Runs in worker processes too, so it only takes and returns picklable objects. Records carry
    ``case_id`` plus the fields of :meth:`ComparisonResult.records`. The outcome's ``inputs`` hold
    the SHA-256 of each input file, taken in the reading call itself: each file is hashed just
    before the readers open it (they then read the same bytes, from the system's file cache), and
    the case fails when a file's version (size, times, inode) changed before the reading ended, so
    the digests are those of the bytes evaluated. A header-only image (``.mhd``, ``.nhdr``) is
    hashed by its header file.
    """
    from ..inputs.readers.rtdose import load_dose
    from .compare import compare
    from .provenance import file_info

    start = time.perf_counter()
    files = case.files()
    inputs = {}
    try:
        versions = {side: _file_version(path) for side, path in files.items()}
        inputs = {side: file_info(path) for side, path in files.items()}
        # the dose is checked against the case's files, then given to compare read
        dose, dose_notes = load_dose(case.dose, {"reference": case.reference, "test": case.test}) if case.dose \
            else (None, [])
        reference, test, name_notes = load_case(case, threshold, input_policy)
        changed = [path for side, path in files.items() if _file_version(path) != versions[side]]
        if changed:
            raise BatchError(f"{', '.join(changed)} changed while the case was read; its digest would not be that of "
                             "the bytes evaluated, run the case again")
        result = compare(reference, test, labels=labels, metrics=metrics, params=params,
                         resample_to=resample_to, input_policy=input_policy, dose=dose, synonyms=synonyms)
    except Exception as error:  # MemoryError included: a failed case is data, not a crash of the run
        message = f"{type(error).__name__}: {str(error).strip() or 'no message'}"
        return CaseOutcome(case.case_id, "failed", error=message, seconds=time.perf_counter() - start, inputs=inputs)
    diagonal = float(np.linalg.norm(np.asarray(reference.array.shape) * np.asarray(reference.spacing)))
    records = [{"case_id": case.case_id, **r} for r in result.records()]
    return CaseOutcome(case.case_id, "ok", records, diagonal_mm=diagonal, voxel_mm=float(min(reference.spacing)),
                       seconds=time.perf_counter() - start, notes=dose_notes + name_notes + list(result.notes), inputs=inputs)


def _file_version(path) -> tuple | None:
    """:func:`segmetrics.inputs.validation.file_version` of ``path``; None when it cannot be read."""
    from ..inputs.validation import file_version

    try:
        return file_version(os.stat(path))
    except OSError:  # missing: the reader reports it
        return None


# --------------------------------------------------------------------------------- executors
def _limit_threads(workers: int) -> None:
    """Worker initializer: N workers share the cores instead of each starting one ITK/VTK/kernel thread per core."""
    import SimpleITK as sitk
    import vtk

    from ..spatial import _threads

    threads = max(1, (os.cpu_count() or 1) // max(workers, 1))
    sitk.ProcessObject.SetGlobalDefaultNumberOfThreads(threads)
    vtk.vtkSMPTools.Initialize(threads)
    _threads.set_thread_count(threads)


def _compile_before_workers() -> None:
    """Compile the kernels in this process when numba's disk cache lacks one
    (:func:`segmetrics.spatial.mesh.kernel_cache_missing`), before workers start, so that they only
    read the cache; nothing to do on the accelerator-free path
    (:func:`segmetrics.spatial.accelerator.use_numba`)."""
    from ..spatial import accelerator

    if accelerator.use_numba():
        from ..spatial import mesh

        if mesh.kernel_cache_missing():
            mesh.compile_kernels()


def _compile_on_cluster(client) -> None:
    """Compile (or load) the kernels on one worker of each machine of a Dask cluster before any case
    runs: first on one machine alone (machines that share the installation then find its cache
    written), then on one worker of every other machine at once. The other workers of a machine
    only read the cache their machine's first worker wrote. Workers that join later compile or load
    the kernels at their first case."""
    import socket

    first_on_host = {}
    for address, host in client.run(socket.gethostname).items():
        first_on_host.setdefault(host, address)
    if not first_on_host:
        return
    first, *others = first_on_host.values()
    client.run(_compile_before_workers, workers=[first])
    if others:
        client.run(_compile_before_workers, workers=others)


def _outcomes(cases, job: dict, workers: int, scheduler: str | None, evaluate):
    """Yield a :class:`CaseOutcome` per case as each finishes (order depends on the mode)."""
    if scheduler:
        yield from _dask_outcomes(cases, job, workers, scheduler, evaluate)
    elif workers == 0:
        for case in cases:
            yield evaluate(case, **job)
    else:
        if workers > 1:  # one child alone may write numba's cache; several must find it written
            _compile_before_workers()
        for case, outcome in run_isolated(functools.partial(evaluate, **job), cases, workers,
                                          initializer=_limit_threads, initargs=(workers,)):
            yield outcome if isinstance(outcome, CaseOutcome) else _failure(case, outcome)


def _failure(case: Case, error: BaseException) -> CaseOutcome:
    """The failed outcome of a case whose evaluation raised ``error`` or whose worker died."""
    if isinstance(error, WorkerDied):
        return CaseOutcome(case.case_id, "failed", error=f"worker {error} while evaluating this case")
    return CaseOutcome(case.case_id, "failed", error=f"{type(error).__name__}: {error}")


def _dask_outcomes(cases, job: dict, workers: int, scheduler: str, evaluate):
    """Run the cases on a Dask cluster: ``"local"`` starts one, otherwise connect to an address.

    A case whose worker dies is retried once on another worker (``allowed-failures`` 1 on a local
    cluster; a remote scheduler keeps its own setting), then logged failed (``KilledWorker``).
    Workers compile no kernels (:func:`_compile_before_workers`, :func:`_compile_on_cluster`), and
    each case's result is released on the cluster once yielded, so memory does not grow with the
    number of cases.
    """
    try:
        import dask
        from dask.distributed import Client, LocalCluster, as_completed
    except ImportError as error:
        raise ImportError("--scheduler needs dask.distributed: pip install 'segmetrics[distributed]'") from error
    if scheduler == "local":
        _compile_before_workers()
        with dask.config.set({"distributed.scheduler.allowed-failures": 1}):
            cluster = LocalCluster(n_workers=max(workers, 1), threads_per_worker=1, processes=True,
                                   dashboard_address=None)
        client = Client(cluster)
        client.run(_limit_threads, workers)
    else:
        cluster, client = None, Client(scheduler)
    try:
        if cluster is None:
            _compile_on_cluster(client)
        futures = {client.submit(evaluate, case, pure=False, **job): case for case in cases}
        for future in as_completed(futures):
            case = futures.pop(future)  # released once written: neither side keeps finished cases
            try:
                outcome = future.result()
            except Exception as error:  # KilledWorker when its workers died
                outcome = _failure(case, error)
            future.release()
            yield outcome
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


# ------------------------------------------------------------------------------------ outputs
def _json_line(payload: dict) -> str:
    return json.dumps(payload, default=str) + "\n"


def value_from_json(value) -> float:
    """Inverse of :func:`segmetrics.outputs.tables.json_value`: ``None`` → NaN, ``"inf"`` → inf."""
    return math.nan if value is None else float(value)


def _jsonl_lines(path: Path):
    """Yield ``(start, end, object)`` for each line of a JSON-lines file, ``start``/``end`` its byte
    offsets, reading one line at a time; a last line cut short by a killed run is ignored, a broken
    line before it raises :class:`json.JSONDecodeError`."""
    if not path.is_file():
        return
    with open(path, "rb") as handle:
        start, broken = 0, None
        for line in handle:
            end = start + len(line)
            if line.strip():
                if broken is not None:
                    raise broken
                try:
                    item = json.loads(line)
                except json.JSONDecodeError as error:
                    broken = error
                else:
                    yield start, end, item
            start = end


def _read_jsonl(path: Path) -> list:
    """Objects of a JSON-lines file (see :func:`_jsonl_lines`)."""
    return [item for _start, _end, item in _jsonl_lines(path)]


def _record(stored: dict) -> dict:
    """A record as stored in JSON lines, its value back as a float."""
    return {**stored, "value": value_from_json(stored["value"])}


def iter_results(output):
    """Yield the records of a batch output folder (``results.jsonl``) one at a time, values back as
    floats: :func:`segmetrics.evaluation.aggregate.aggregate` then keeps 12 bytes of each."""
    for _start, _end, stored in _jsonl_lines(Path(output) / "results.jsonl"):
        yield _record(stored)


def read_results(output) -> list:
    """All records of a batch output folder (``results.jsonl``), values back as floats."""
    return list(iter_results(output))


def read_case_log(output) -> dict:
    """The last logged attempt of each case: ``{case_id: {"status", "error", "diagonal_mm", ...}}``."""
    return {entry["case_id"]: entry for entry in _read_jsonl(Path(output) / CASE_LOG)}


@contextlib.contextmanager
def _replacing(*paths: Path, binary: bool = False):
    """Yield a handle per path to a temporary file beside it; when the block ends without error, each
    is flushed to disk, then renamed over its path in the given order. A kill at any moment leaves
    each file old or new; files written from the old ones can be read until the block ends."""
    temporaries = [path.with_name(f".{path.name}.{os.getpid()}{TEMPORARY_SUFFIX}") for path in paths]
    mode = {"mode": "wb"} if binary else {"mode": "w", "newline": ""}
    try:
        with contextlib.ExitStack() as stack:
            handles = [stack.enter_context(open(temporary, **mode)) for temporary in temporaries]
            yield handles
            for handle in handles:
                handle.flush()
                os.fsync(handle.fileno())
        for temporary, path in zip(temporaries, paths):
            os.replace(temporary, path)
            _sync_folder(path.parent)
    finally:
        for temporary in temporaries:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)


def _sync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable (Windows cannot open a folder for this)."""
    if os.name == "posix":
        descriptor = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def _write_atomic(path: Path, write, binary: bool = False) -> None:
    """Replace the file ``path`` whole: ``write(handle)`` fills a temporary file beside it (:func:`_replacing`)."""
    with _replacing(path, binary=binary) as (handle,):
        write(handle)


def _csv_table(handle) -> csv.DictWriter:
    """The ``results.csv`` writer on ``handle`` (cells made safe by :func:`csv_row`)."""
    return csv.DictWriter(handle, fieldnames=list(BATCH_FIELDS), lineterminator="\n")


def _write_results(records, csv_handle, jsonl_handle) -> None:
    """Write ``records`` (an iterable, consumed one at a time) as ``results.csv`` (with its header) and
    ``results.jsonl``."""
    table = _csv_table(csv_handle)
    table.writeheader()
    for record in records:
        table.writerow(csv_row(record))
        jsonl_handle.write(_json_line(json_record(record)))


def _write_parquet(output: Path) -> bool:
    """``results.parquet`` from ``results.jsonl``, with the CSV columns (value as float, NaN/inf kept),
    read and written :data:`PARQUET_GROUP_ROWS` records at a time; False without pyarrow."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return False
    schema = pa.schema([(name, pa.float64() if name == "value" else pa.string()) for name in BATCH_FIELDS])

    def write(handle):
        with pq.ParquetWriter(handle, schema) as writer:
            columns = {name: [] for name in BATCH_FIELDS}
            for index, record in enumerate(iter_results(output), start=1):
                row = record_row(record)
                row["reference_label"], row["test_label"] = str(row["reference_label"]), str(row["test_label"])
                for name, column in columns.items():
                    column.append(row[name])
                if index % PARQUET_GROUP_ROWS == 0:
                    writer.write_table(pa.Table.from_pydict(columns, schema))
                    columns = {name: [] for name in BATCH_FIELDS}
            if columns["case_id"]:
                writer.write_table(pa.Table.from_pydict(columns, schema))

    _write_atomic(output / "results.parquet", write, binary=True)
    return True


class _ResultWriter:
    """Appends each finished case to the three output files: its records, then its log line."""

    def __init__(self, output: Path):
        self.csv = open(output / "results.csv", "a", newline="")
        self.table = _csv_table(self.csv)
        self.jsonl = open(output / "results.jsonl", "a")
        self.log = open(output / CASE_LOG, "a")

    def add(self, outcome: CaseOutcome, fingerprint: str) -> None:
        """Write the case's records, then its log line (a case counts as done only once that exists)."""
        for record in outcome.records:
            self.table.writerow(csv_row(record))
            self.jsonl.write(_json_line(json_record(record)))
        self._sync(self.csv, self.jsonl)
        entry = {k: v for k, v in asdict(outcome).items() if k != "records"}
        entry["diagonal_mm"], entry["voxel_mm"] = json_value(entry["diagonal_mm"]), json_value(entry["voxel_mm"])
        entry["n_records"] = len(outcome.records)
        entry["fingerprint"] = fingerprint
        self.log.write(_json_line(entry))
        self._sync(self.log)

    @staticmethod
    def _sync(*handles) -> None:
        for handle in handles:
            handle.flush()
            os.fsync(handle.fileno())

    def close(self) -> None:
        for handle in (self.csv, self.jsonl, self.log):
            handle.close()


def _settings(job: dict) -> dict:
    """The job as plain JSON-able settings (stored in ``run.json``, a resumed run must have the same), without
    its ``synonyms``: those are stored beside them and may change (:func:`_fingerprint`, :func:`_check_settings`)."""
    metrics, labels = job["metrics"], job["labels"]
    settings = {key: value for key, value in job.items() if key != "synonyms"}
    return json.loads(json.dumps({**settings, "params": asdict(job["params"]),
                                  "input_policy": asdict(job["input_policy"]),
                                  "metrics": metrics if isinstance(metrics, (str, type(None))) else sorted(metrics),
                                  "labels": None if labels is None else [str(x) for x in labels]}))


def _check_settings(output: Path, settings: dict, inputs: dict, not_run: dict, synonyms: dict | None) -> None:
    """Refuse to resume a run made with other settings (mixed results would be meaningless), then
    write ``run.json``: the settings, the structure-name ``synonyms`` (when given) and the
    ``provenance`` of this run (version, start time, command, ``inputs``, the cases ``not_run`` with
    their reasons). Synonyms and provenance are not compared and are replaced by each run that
    resumes the folder: other synonyms change every case's fingerprint, so every case is redone."""
    import shlex
    import sys

    from .provenance import provenance

    path = output / "run.json"
    if path.is_file():
        stored = json.loads(path.read_text())
        stored.pop("provenance", None)
        stored.pop("synonyms", None)
        if stored != settings:
            raise BatchError(f"{output} holds a batch run with other settings ({path}); "
                             "use another output folder or delete that one")
    case_digests = f"{(output / CASE_LOG).resolve()} (field inputs of each case)"
    described = provenance(inputs, command=shlex.join(sys.argv), case_digests=case_digests)
    document = {**settings, **({"synonyms": synonyms} if synonyms else {}),
                "provenance": {**described, **({"not_run": not_run} if not_run else {})}}
    _write_atomic(path, lambda handle: handle.write(json.dumps(document, indent=2, sort_keys=True, default=str)))


def _describe_sources(inputs: dict | None, n_cases: int) -> dict:
    """The ``inputs`` of a run's provenance: each source file with its size and SHA-256, a folder by
    its absolute path; without a source of the cases (only a synonyms file, or nothing), also the
    number of cases given in Python."""
    from .provenance import describe_input

    described = {name: {"path": str(Path(path).resolve())} if Path(path).is_dir() else describe_input(path)
                 for name, path in (inputs or {}).items() if path is not None}
    if not described.keys() - {"synonyms"}:
        described["cases"] = f"{n_cases} cases given to run_batch"
    return described


def _fingerprint(case: Case, settings: dict, synonyms: dict | None = None) -> str:
    """Hash of the run settings, the structure-name synonyms (when given) and each input file's
    absolute path and version (:func:`segmetrics.inputs.validation.file_version`: size, times, inode, device).

    A resumed case whose fingerprint changed is redone. For a header-only image (``.mhd``,
    ``.nhdr``) only the header file is checked, for a DICOM series folder (``image``) the folder.
    """
    files = []
    optional = [path for path in (case.dose, case.image) if path]  # absent: the fingerprint a case had before them
    for path in (case.reference, case.test, case.names, *optional):
        absolute = os.path.abspath(path) if path else None
        version = _file_version(absolute) if absolute else None  # None when missing: redone, fails reading
        files.append([absolute, *(version or ())])
    hashed = [settings, files] + ([synonyms] if synonyms else [])  # without: the fingerprint a case had before them
    return hashlib.sha256(json.dumps(hashed, sort_keys=True).encode()).hexdigest()[:20]


def _output_folder(output) -> Path:
    """The batch output folder, created if missing; :class:`BatchError` for a file or an impossible path."""
    output = Path(output)
    if output.exists() and not output.is_dir():
        raise BatchError(f"batch output {output} is a file; give a folder (created if missing) for the results")
    try:
        output.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise BatchError(f"cannot create the batch output folder {output}: {error.strerror or error}") from error
    for stale in output.glob(f".*{TEMPORARY_SUFFIX}"):  # left by a run killed while rewriting a file
        stale.unlink()
    return output


@dataclass
class _Stored:
    """Where one case's records are: a JSON-lines file, the byte ranges of its lines, their number."""

    path: Path
    spans: list
    count: int = 0


class _Folder:
    """What an output folder holds, read in one pass without keeping any record: the status,
    record count, fingerprint and error of each case's last logged attempt, and where each case's
    records are (:class:`_Stored`). Memory grows with the cases, not with their records."""

    def __init__(self, output: Path):
        self.log = {entry["case_id"]: {key: entry.get(key) for key in ("status", "error", "n_records", "fingerprint")}
                    for _start, _end, entry in _jsonl_lines(output / CASE_LOG)}
        self.stored = {}
        # A case found in both files (a kill between their rewrites) is taken once, from results.jsonl.
        for name in ("results.jsonl", OTHER_CASES):
            found = {}
            for start, end, record in _jsonl_lines(output / name):
                stored = found.setdefault(record["case_id"], _Stored(output / name, []))
                if stored.spans and stored.spans[-1][1] == start:
                    stored.spans[-1][1] = end
                else:
                    stored.spans.append([start, end])
                stored.count += 1
            for case_id, stored in found.items():
                self.stored.setdefault(case_id, stored)

    def complete(self, case_id: str, fingerprint: str | None = None) -> bool:
        """Logged ``ok`` with all its records present (and, if given, the same fingerprint)."""
        entry = self.log.get(case_id)
        return (entry is not None and entry["status"] == "ok"
                and case_id in self.stored and self.stored[case_id].count == entry["n_records"]
                and (fingerprint is None or entry["fingerprint"] == fingerprint))

    def complete_cases(self, fingerprints: dict) -> list:
        """The complete cases among ``fingerprints`` (``{case_id: fingerprint}``), in its order."""
        return [case_id for case_id, fingerprint in fingerprints.items() if self.complete(case_id, fingerprint)]

    def records(self, case_ids):
        """Yield the records of ``case_ids``, case after case, read from the files one case at a time."""
        with contextlib.ExitStack() as stack:
            handles = {}
            for case_id in case_ids:
                stored = self.stored[case_id]
                if stored.path not in handles:
                    handles[stored.path] = stack.enter_context(open(stored.path, "rb"))
                handle = handles[stored.path]
                for start, end in stored.spans:
                    handle.seek(start)
                    for line in handle.read(end - start).splitlines():
                        yield _record(json.loads(line))


def _clean_case_log(output: Path) -> None:
    """Rewrite ``cases.jsonl`` without a last line cut short by a kill, one line at a time."""
    with _replacing(output / CASE_LOG) as (handle,):
        for _start, _end, entry in _jsonl_lines(output / CASE_LOG):
            handle.write(_json_line(entry))


def _resume(output: Path, fingerprints: dict) -> tuple:
    """Prepare ``output`` for a run over ``fingerprints`` (``{case_id: fingerprint}``, in case order).

    Rewrites the files so that they hold only the complete cases: ``results.*`` those of this run,
    ``other_cases.jsonl`` those logged in the folder but not among this run's cases. Records are
    copied case by case. Returns ``(case ids already done, case ids in the folder that are not
    among this run's)``.
    """
    _clean_case_log(output)
    folder = _Folder(output)
    others = [case_id for case_id in folder.log if case_id not in fingerprints]
    kept = [case_id for case_id in others if folder.complete(case_id)]
    done = folder.complete_cases(fingerprints)
    results = [output / "results.csv", output / "results.jsonl"]
    if kept:  # replaced before results.* drop them, so that a kill in between loses nothing
        with _replacing(output / OTHER_CASES, *results) as (other_handle, csv_handle, jsonl_handle):
            other_handle.writelines(_json_line(json_record(r)) for r in folder.records(kept))
            _write_results(folder.records(done), csv_handle, jsonl_handle)
    else:
        with _replacing(*results) as (csv_handle, jsonl_handle):
            _write_results(folder.records(done), csv_handle, jsonl_handle)
        with contextlib.suppress(FileNotFoundError):
            (output / OTHER_CASES).unlink()
    return done, others


# --------------------------------------------------------------------------------------- run
def run_batch(cases, output, *, metrics=None, params: Parameters | None = None, resample_to=None,
              labels=None, threshold: float | None = None, workers: int = 1, scheduler: str | None = None,
              progress: bool = True, unmatched: dict | None = None, input_policy=None, evaluate=None,
              inputs: dict | None = None, synonyms=None) -> BatchSummary:
    """Evaluate every case and write the results into the folder ``output``.

    Parameters
    ----------
    cases : list of Case
        From :func:`read_manifest` or :func:`match_folders`; case ids must be unique.
    output : path
        Folder for ``results.csv``, ``results.jsonl``, ``cases.jsonl``, ``run.json``; created if
        needed. A folder with earlier results of the same settings is resumed: cases logged ``ok``
        with all their records and unchanged input files are kept, the others are (re)done; cases
        of the folder that are not in ``cases`` are left out of the results
        (``BatchSummary.not_in_manifest``).
    metrics, params, resample_to, labels
        As for :func:`segmetrics.compare` (``resample_to="reference"`` resamples test images
        onto the reference grid; without it a grid mismatch fails the case).
    threshold : float, optional
        Binarise every input at ``value >= threshold`` (probability maps).
    workers : int
        Child processes evaluating cases (default 1). A case that kills its process (segmentation
        fault, out-of-memory kill) is logged failed with the signal and the child is replaced.
        0 evaluates in this process, without that protection (for debuggers and profilers).
        With ``scheduler="local"`` the Dask worker count. A script calling this with ``workers``
        ≥ 1 needs the usual ``if __name__ == "__main__":`` guard (children are spawned).
    scheduler : str, optional
        ``"local"`` for a local Dask cluster or the address of a running Dask scheduler
        (e.g. ``tcp://host:8786``); its workers must see the same file paths.
    progress : bool
        Show a progress bar (cases done, rate, time left) on standard error.
    unmatched : dict, optional
        Files without a partner from :func:`match_folders`, passed through to the summary.
    input_policy : segmetrics.inputs.io.InputPolicy, optional
        Overrides of the input checks (stored in ``run.json``); invalid options (``threshold``,
        ``params``, ``metrics``, ``labels``, ``resample_to``: see
        :func:`segmetrics.inputs.validation.check_evaluation_options`) are refused before any case runs.
    evaluate : callable, optional
        ``evaluate(case, **job) -> CaseOutcome`` in place of :func:`evaluate_case`, with ``job``
        the keyword arguments ``metrics, params, resample_to, labels, threshold, input_policy, synonyms``; it
        must be a module-level function (child processes import it by name).
    inputs : dict, optional
        Where the cases came from, for the provenance in ``run.json``: name -> path (a manifest, the
        two folders, a name map); files are described with their SHA-256
        (:func:`segmetrics.evaluation.provenance.describe_input`), folders by path. Default: the
        number of cases given. Each case's own input digests are in ``cases.jsonl``.
    synonyms : dict or path, optional
        Structure-name synonyms that pair reference and test structures before the built-in rules,
        as for :func:`segmetrics.compare`: a JSON file ``{"Lung_L": ["Lt Lung", ...]}`` (read before
        any case runs, described in ``run.json``'s ``inputs`` with its SHA-256), the dict of its
        content, or :func:`segmetrics.inputs.structure_names.synonym_map`'s. Stored in ``run.json`` and
        in each case's fingerprint: a resumed run with other synonyms redoes every case.

    Raises :class:`BatchError` when ``output`` is a file or holds a run with other settings, and
    :class:`~segmetrics.inputs.validation.ReadError` for synonyms that are not a synonyms file or its content.
    """
    from ..inputs.io import InputPolicy
    from ..inputs.structure_names import synonym_map
    from ..inputs.validation import check_evaluation_options

    check_evaluation_options(metrics=metrics, labels=labels, threshold=threshold, resample_to=resample_to,
                             input_policy=input_policy)
    if synonyms is not None and not isinstance(synonyms, dict):
        inputs = {**(inputs or {}), "synonyms": synonyms}
    synonyms = synonym_map(synonyms)
    if workers < 0:
        raise BatchError(f"workers must be 0 (this process) or more, got {workers}")
    job = {"metrics": metrics, "params": as_parameters(params), "resample_to": resample_to, "labels": labels,
           "threshold": threshold, "input_policy": input_policy or InputPolicy(), "synonyms": synonyms or None}
    settings = _settings(job)
    fingerprints = {case.case_id: _fingerprint(case, settings, job["synonyms"]) for case in cases}
    if len(fingerprints) != len(cases):
        raise BatchError(f"duplicate case ids {_duplicate_ids(cases)}")
    output = _output_folder(output)
    not_run = {case.case_id: case.not_run for case in cases if case.not_run}
    _check_settings(output, settings, _describe_sources(inputs, len(cases)), not_run, job["synonyms"])
    skipped, not_in_manifest = _resume(output, fingerprints)
    done = set(skipped)
    todo = [case for case in cases if case.case_id not in done and not case.not_run]

    writer = _ResultWriter(output)
    computed = []
    try:
        for case in cases:
            if case.not_run:
                writer.add(CaseOutcome(case.case_id, "not run", error=case.not_run), fingerprints[case.case_id])
        with _progress_bar(len(skipped) + len(todo), len(skipped), enabled=progress) as advance:
            for outcome in _outcomes(todo, job, workers, scheduler, evaluate or evaluate_case):
                writer.add(outcome, fingerprints[outcome.case_id])
                computed.append(outcome.case_id)
                advance(outcome)
    finally:
        writer.close()
    folder = _Folder(output)
    with _replacing(output / "results.csv", output / "results.jsonl") as (csv_handle, jsonl_handle):
        _write_results(folder.records(folder.complete_cases(fingerprints)), csv_handle, jsonl_handle)
    _write_parquet(output)
    failed = {cid: folder.log[cid]["error"] for cid in fingerprints
              if cid in folder.log and folder.log[cid]["status"] not in ("ok", "not run")}
    return BatchSummary(output, list(fingerprints), computed, skipped, failed, unmatched or {}, not_in_manifest,
                        not_run)


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
