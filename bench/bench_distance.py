"""Benchmark: the distance set (HD, HD95, ASSD, NSD@2 mm) through ``segmetrics.compare`` against DeepMind.

A 300×512×512 volume at spacing (2.5, 0.8, 0.8) mm (array order z, y, x) holding a reference and
a test object: offset spheres of kidney size (r = 40/37 mm) and liver size (r = 70/67 mm), with
their analytic truth, and a body-sized ellipsoid pair. Per case and method it prints the best wall
time (of 9 rounds for the spheres, each calling every method once, so that the load of a shared
machine weighs on all methods alike), the speed-up over DeepMind's ``surface_distance`` measured
in the same run, the peak resident memory the call adds (forked child, Linux, after a tiny call
that frees what the timed calls left held) relative to the two input masks, and, for the
spheres, the error against the continuous truth. Methods:

- ``segmetrics.compare`` on the two boolean arrays (``labels=[1]``), default ``exact`` mode and
  ``surface_mode="deepmind"``; the peer is ``compute_surface_distances`` on the same arrays;
- ``segmetrics.compare`` on two ``.nii.gz`` files; the peer reads them with SimpleITK first;
- the CLI end to end (``segmetrics compare``, a new process, start-up included), kidney case only.

Run: ``python bench/bench_distance.py`` (several minutes on two cores; other load on the machine
shows as noise: compare runs of one session only). ``--bundled`` instead times the distance group
(``compare``, exact and deepmind modes) with the numba kernels and without them (the bundled-packages
path of 3D Slicer, ``SEGMETRICS_ACCELERATOR=off``) in the same rounds, on the sphere pairs and on
the TotalSegmentator pair of the shared data (when present), and prints the ratio and the largest
relative difference of the values. ``--quick`` uses a 120×256×256 grid;
``--stages`` also prints, per sphere pair, the time of each step ``compare`` takes (reading the masks,
the surfaces and their search structures, the exact search both ways, the sorts) and the CPU time
of the exact search per query vertex on one thread.
"""
import argparse
import os
import tempfile
from pathlib import Path

import numpy as np
import SimpleITK as sitk

import segmetrics
from common import (DEFAULT_DATA, DISTANCE_SET, NSD_TOLERANCE_MM, best_time, cli_seconds, deepmind_distance_set, peak_added_mb,
                    values, write_image)
from segmetrics.spatial import accelerator

SHAPE = (300, 512, 512)
SPACING = (2.5, 0.8, 0.8)
TOLERANCE_MM = NSD_TOLERANCE_MM


def ellipsoid(centre_mm, semi_axes_mm):
    """Voxels whose centre lies in the ellipsoid, built slice by slice to keep memory low."""
    rows, cols = np.ogrid[: SHAPE[1], : SHAPE[2]]
    in_plane = ((rows * SPACING[1] - centre_mm[1]) / semi_axes_mm[1]) ** 2 + ((cols * SPACING[2] - centre_mm[2]) / semi_axes_mm[2]) ** 2
    mask = np.zeros(SHAPE, bool)
    for z in range(SHAPE[0]):
        mask[z] = in_plane + ((z * SPACING[0] - centre_mm[0]) / semi_axes_mm[0]) ** 2 <= 1
    return mask


def sphere_truth(c1, r1, c2, r2, n=2_000_000):
    """HD95 (max of directed), ASSD (pooled) and NSD of two continuous spheres, by area sampling."""
    i = np.arange(n) + 0.5
    polar, azimuth = np.arccos(1 - 2 * i / n), np.pi * (1 + 5**0.5) * i
    unit = np.stack([np.cos(polar), np.sin(polar) * np.cos(azimuth), np.sin(polar) * np.sin(azimuth)], 1)
    d12 = np.abs(np.linalg.norm(c1 + r1 * unit - c2, axis=1) - r2)
    d21 = np.abs(np.linalg.norm(c2 + r2 * unit - c1, axis=1) - r1)
    w1, w2 = r1**2, r2**2
    return {
        "hd95": max(np.quantile(d12, 0.95), np.quantile(d21, 0.95)),
        "assd": (w1 * d12.mean() + w2 * d21.mean()) / (w1 + w2),
        "nsd": (w1 * np.mean(d12 <= TOLERANCE_MM) + w2 * np.mean(d21 <= TOLERANCE_MM)) / (w1 + w2),
    }


def cases():
    centre = np.array([SHAPE[0] * SPACING[0] / 2 + 0.3, SHAPE[1] * SPACING[1] / 2 + 0.3, SHAPE[2] * SPACING[2] / 2 - 1.1])
    offset = np.array([3.0, 2.0, -1.5])
    for radius in (40.0, 70.0):
        truth = sphere_truth(centre, radius, centre + offset, radius - 3.0)
        yield f"{'kidney' if radius < 50 else 'liver'} r={radius:.0f}/{radius - 3:.0f}", ellipsoid(centre, [radius] * 3), ellipsoid(centre + offset, [radius - 3] * 3), truth, 9
    body = ellipsoid(centre, (330.0, 180.0, 150.0)), ellipsoid(centre + [2.0, 1.0, -1.0], (328.0, 178.0, 151.0))
    yield "body ellipsoid", *body, None, 1


def ours(mode="exact"):
    params = segmetrics.Parameters(surface_mode=mode, nsd_tolerance_mm=TOLERANCE_MM)
    return lambda reference, test: values(segmetrics.compare(reference, test, spacing=SPACING, metrics=DISTANCE_SET,
                                                             labels=[1], params=params))


def stage_split(reference, test, rounds: int) -> str:
    """Where ``compare``'s time goes for the exact distance set of a pair: the best wall time (ms,
    of ``rounds``, steps interleaved) of each step it takes, run on their own, and the CPU time
    of the exact search per query vertex on one thread (ns)."""
    from segmetrics.spatial import _threads, geometry, mesh
    from segmetrics.metrics import distance
    from segmetrics.inputs import io

    box = geometry.union_box([geometry.bounding_box(m) for m in (reference, test)])
    crops = reference[box], test[box]
    surfaces = mesh.pair_surfaces(*crops, SPACING, searchable=True)
    queries = sum(len(s.points) for s in surfaces)
    steps = {
        "compare": lambda: ours("exact")(reference, test),
        "read both masks": lambda: io.load_pair(reference, test, SPACING),
        "surfaces and searches": lambda: mesh.pair_surfaces(*crops, SPACING, searchable=True),
        "search both ways": lambda: mesh.distances_both_ways(*surfaces),
        "search and sorts": lambda: distance.exact_surface_distances(*surfaces),
    }
    best = {}
    for _ in range(rounds):
        for step, run in steps.items():
            best[step] = min(best_time(run, 1)[0], best.get(step, np.inf))
    threads = len(os.sched_getaffinity(0))
    _threads.set_thread_count(1)
    one_thread = min(best_time(lambda: mesh.distances_both_ways(*surfaces), 1)[0] for _ in range(rounds))
    _threads.set_thread_count(threads)
    split = ", ".join(f"{step} {seconds * 1e3:.1f}" for step, seconds in best.items())
    return f"stages, best ms: {split}; exact search on one thread {one_thread / queries * 1e9:.0f} ns per query ({queries} queries)"


def with_accelerator(setting: str, function):
    """``function`` to run with ``SEGMETRICS_ACCELERATOR`` set to ``setting`` (``auto`` or ``off``), restored after."""
    def run():
        before = os.environ.get(accelerator.ENVIRONMENT_VARIABLE)
        os.environ[accelerator.ENVIRONMENT_VARIABLE] = setting
        try:
            return function()
        finally:
            if before is None:
                del os.environ[accelerator.ENVIRONMENT_VARIABLE]
            else:
                os.environ[accelerator.ENVIRONMENT_VARIABLE] = before
    return run


def compare_paths(name: str, reference, test, spacing, repeats: int) -> None:
    """Print, per surface mode, the best wall time of ``compare``'s distance group with the numba
    kernels and without (in rounds, both paths once per round), their ratio, and the largest
    relative difference of the values (inf and NaN must be equal)."""
    for mode in ("exact", "deepmind"):
        params = segmetrics.Parameters(surface_mode=mode, nsd_tolerance_mm=TOLERANCE_MM)
        call = lambda: segmetrics.compare(reference, test, spacing=spacing, metrics="distance", params=params)  # noqa: E731
        runs = {"numba": with_accelerator("auto", call), "bundled": with_accelerator("off", call)}
        best, found = {}, {}
        for _ in range(repeats):
            for path, run in runs.items():
                seconds, result = best_time(run, 1)
                best[path] = min(seconds, best.get(path, seconds))
                found[path] = np.array([record["value"] for record in result.records()], dtype=float)
        numba, bundled = found["numba"], found["bundled"]
        finite = np.isfinite(numba)
        if not np.array_equal(numba[~finite], bundled[~finite], equal_nan=True):
            raise AssertionError(f"{name}, {mode}: the paths differ in inf or NaN values")
        difference = np.max(np.abs(bundled[finite] - numba[finite]) / np.maximum(np.abs(numba[finite]), 1e-300), initial=0.0)
        print(f"{name:<22} {mode:<9} {best['numba']:>9.3f} {best['bundled']:>10.3f} {best['bundled'] / best['numba']:>6.2f}x {difference:>13.1e}")


def bundled_comparison(wanted: list, data: Path) -> None:
    """:func:`compare_paths` on the sphere cases in ``wanted`` and the TotalSegmentator pair (40 labels)."""
    tiny = lambda: ours("exact")(np.ones((2, 2, 2), bool), np.ones((2, 2, 2), bool))  # noqa: E731
    for setting in ("auto", "off"):
        with_accelerator(setting, tiny)()  # compile / load kernels, build cached tables
    header = f"{'case':<22} {'mode':<9} {'numba s':>9} {'bundled s':>10} {'ratio':>7} {'largest diff':>13}"
    print(f"distance group through compare, numba kernels vs bundled packages (SEGMETRICS_ACCELERATOR=off)\n{header}")
    print("-" * len(header))
    for name, reference, test, _, repeats in cases():
        if name.split()[0] in wanted:
            compare_paths(name, reference, test, SPACING, max(repeats, 3))
    folder = data / "totalsegmentator"
    if folder.is_dir():
        images = [sitk.ReadImage(str(folder / f)) for f in ("example_seg.nii.gz", "example_seg_fast.nii.gz")]
        reference, test = (sitk.GetArrayFromImage(image) for image in images)
        compare_paths("TotalSegmentator pair", reference, test, images[0].GetSpacing()[::-1], 5)
    else:
        print(f"(no TotalSegmentator pair: {folder} not found)")


def read_then_deepmind(reference_file, test_file):
    reference, test = (sitk.GetArrayFromImage(sitk.ReadImage(str(f))) for f in (reference_file, test_file))
    return deepmind_distance_set(reference, test, SPACING)


def main():
    global SHAPE
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a 120×256×256 grid (development runs)")
    parser.add_argument("--cases", default="kidney,liver,body", help="comma-separated subset of kidney,liver,body")
    parser.add_argument("--stages", action="store_true", help="also print where compare's time goes for the spheres")
    parser.add_argument("--bundled", action="store_true", help="time the numba and the bundled-packages paths instead")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="shared data folder (--bundled: TotalSegmentator pair)")
    args = parser.parse_args()
    if args.quick:
        SHAPE = (120, 256, 256)
    wanted = args.cases.split(",")
    if args.bundled:
        bundled_comparison(wanted, args.data)
        return
    tiny = lambda: ours("exact")(np.ones((2, 2, 2), bool), np.ones((2, 2, 2), bool))  # noqa: E731
    tiny()  # compile / load kernels, build cached tables
    methods = {
        "DeepMind surface-distance": lambda r, t: deepmind_distance_set(r, t, SPACING),
        "compare, arrays, exact": ours("exact"),
        "compare, arrays, deepmind": ours("deepmind"),
    }
    print(f"volume {SHAPE} (z, y, x) at {SPACING} mm; HD, HD95, ASSD and NSD@{TOLERANCE_MM:g}mm per call")
    header = f"{'case':<14} {'method':<30} {'time s':>7} {'speed-up':>8} {'peak/inputs':>11} {'HD95 err':>9} {'ASSD err':>9} {'NSD err':>8}"
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory() as tmp:
        for name, reference, test, truth, repeats in cases():
            if name.split()[0] not in wanted:
                continue
            inputs_mb = (reference.nbytes + test.nbytes) / 2**20
            files = [write_image(m, SPACING, Path(tmp) / f"{side}.nii.gz") for side, m in (("reference", reference), ("test", test))]
            runs = {method: (lambda f=function: f(reference, test)) for method, function in methods.items()}
            runs["DeepMind after reading files"] = lambda: read_then_deepmind(*files)
            runs["compare, files, exact"] = lambda: ours("exact")(*files)
            best, results = {}, {}
            for _ in range(repeats):  # in rounds, every method once per round: a change of load on the machine hits all alike
                for method, run in runs.items():
                    seconds, results[method] = best_time(run, 1)
                    best[method] = min(seconds, best.get(method, seconds))
            baseline = {}
            for method, run in runs.items():
                seconds, result = best[method], results[method]
                peer = "DeepMind after reading files" if "files" in method else "DeepMind surface-distance"
                baseline.setdefault(peer, seconds)
                peak = peak_added_mb(run, release=tiny) / inputs_mb
                errors = "".join(f" {result[k] - truth[k]:>+9.3f}" for k in ("hd95", "assd")) + f" {result['nsd'] - truth['nsd']:>+8.4f}" if truth else ""
                print(f"{name:<14} {method:<30} {seconds:>7.3f} {baseline[peer] / seconds:>7.1f}x {peak:>11.2f}{errors}")
            if name.startswith("kidney"):
                seconds = cli_seconds("compare", *files, "--labels", "1", "--metrics", ",".join(DISTANCE_SET), "--format", "csv")
                print(f"{name:<14} {'CLI end to end (new process)':<30} {seconds:>7.3f} {baseline['DeepMind after reading files'] / seconds:>7.1f}x")
            if truth:
                print(f"{'':<14} truth: HD95 {truth['hd95']:.3f} mm, ASSD {truth['assd']:.3f} mm, NSD {truth['nsd']:.4f}")
            if truth and args.stages:
                print(f"{'':<14} {stage_split(reference, test, repeats)}")


if __name__ == "__main__":
    main()
