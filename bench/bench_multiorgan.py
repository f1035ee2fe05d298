"""Multi-organ throughput on a real TotalSegmentator pair, per metric group, through ``segmetrics.compare``.

``example_seg.nii.gz`` (full 1.5 mm model) vs ``example_seg_fast.nii.gz`` (3 mm fast model), both
122 × 101 × 30 voxels at 3 mm with about 40 labels (see ../shared/data/MANIFEST.md). Per group it
prints the milliseconds per label of ``compare`` on the two files (reading included) and on the
arrays; the peer is DeepMind ``surface_distance`` in its usual per-label loop (``array == label``,
then the distance set), timed in the same run. The CLI is timed end to end (new process) too.

``--stages`` then prints where one ``compare`` of the files with every default group spends its
time: each stage of :data:`STAGES` and each group's ``compute`` is wrapped in a timer for that
call (best of ``--repeats`` per stage). Stages nest (a group's time includes the surfaces it
builds first; the surfaces of a pair are built once and shared), and a stage run in two threads
at once counts both, so the sum exceeds the wall time.

Usage: python bench/bench_multiorgan.py [--data ../shared/data] [--repeats 3] [--stages]
"""
import argparse
import contextlib
import functools
import importlib
import os
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import SimpleITK as sitk

import segmetrics
from common import DEFAULT_DATA, DISTANCE_SET, best_time, cli_seconds, deepmind_distance_set
from segmetrics.registry import all_groups

GROUPS = ["overlap", "distance", "msi", "roughness"]
#: Stages timed by ``--stages``: label -> (function name, modules that call it by that name).
STAGES = {
    "read both files, checks, labels and boxes": ("load_pair", ["segmetrics.inputs.io"]),
    "pair the structures": ("_structure_pairs", ["segmetrics.evaluation.compare"]),
    "cut out each structure's masks": ("_mask", ["segmetrics.evaluation.compare"]),
    "3-D surfaces (blur, flying edges)": ("smooth_surface", ["segmetrics.spatial.mesh"]),
    "exact search both ways": ("distances_both_ways", ["segmetrics.spatial.mesh"]),
    "distances to one surface": ("distances_to_surface", ["segmetrics.spatial.mesh"]),
    "msi: slice table": ("slice_table", ["segmetrics.metrics.msi"]),
    "msi: objects and contours of a slice": ("_objects", ["segmetrics.metrics.msi"]),
    "msi: msi_3d on the surfaces": ("_msi_3d", ["segmetrics.metrics.msi"]),
    "msi: signs of the test-to-reference distances": ("signed_distances", ["segmetrics.spatial.mesh"]),
    "contours: planes (slice boundaries)": ("_planes", ["segmetrics.metrics.contours"]),
    "contours: distance profiles": ("distance_profile", ["segmetrics.metrics.contours"]),
    "contours: largest, percentiles, mean": ("_distance_values", ["segmetrics.metrics.contours"]),
    "roughness: local roughness (RI)": ("roughness_index", ["segmetrics.metrics.roughness"]),
    "roughness: ARD rays": ("average_roughness_distance", ["segmetrics.metrics.roughness"]),
}


@contextlib.contextmanager
def stage_timers():
    """Within the block, every stage of :data:`STAGES` and every group's ``compute`` adds its wall time
    (s) and call count to the yielded ``{label: [seconds, calls]}``; the originals are put back after."""
    totals, lock, originals = defaultdict(lambda: [0.0, 0]), threading.Lock(), []

    def timed(label, function):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                with lock:
                    totals[label][0] += time.perf_counter() - start
                    totals[label][1] += 1
        return wrapper

    targets = [(importlib.import_module(module), name, label) for label, (name, modules) in STAGES.items()
               for module in modules]
    targets += [(group, "compute", f"group {name}") for name, group in all_groups().items()]
    try:
        for owner, name, label in targets:
            originals.append((owner, name, getattr(owner, name)))
            setattr(owner, name, timed(label, getattr(owner, name)))
        yield totals
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)


def print_stages(files, n_labels: int, repeats: int) -> None:
    """Best-of-``repeats`` time per stage of one ``compare`` of ``files`` with the default groups."""
    best, walls = {}, []
    for _ in range(repeats):
        with stage_timers() as totals:
            start = time.perf_counter()
            segmetrics.compare(*files)
            walls.append(time.perf_counter() - start)
        for label, (seconds, calls) in totals.items():
            if label not in best or seconds < best[label][0]:
                best[label] = (seconds, calls)
    wall = min(walls)
    print(f"\nwhere compare(files), default groups, spends its {wall:.2f} s ({1000 * wall / n_labels:.1f} ms/label), "
          f"best of {repeats}, load average {os.getloadavg()[0]:.1f}; stages nest, threads add up:")
    for label, (seconds, calls) in sorted(best.items(), key=lambda item: -item[1][0]):
        print(f"  {label:<42} {1000 * seconds:8.1f} ms {1000 * seconds / n_labels:7.1f} ms/label "
              f"{100 * seconds / wall:5.0f} %  ({calls} calls)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--stages", action="store_true", help="also print where compare's time goes")
    args = parser.parse_args()
    folder = args.data.resolve() / "totalsegmentator"
    files = folder / "example_seg.nii.gz", folder / "example_seg_fast.nii.gz"
    images = [sitk.ReadImage(str(f)) for f in files]
    reference, test = (sitk.GetArrayFromImage(i) for i in images)
    spacing = images[0].GetSpacing()[::-1]
    labels = sorted((set(np.unique(reference)) | set(np.unique(test))) - {0})
    common = [int(x) for x in sorted(set(np.unique(reference)) & set(np.unique(test)) - {0})]
    print(f"{files[0].name} vs {files[1].name}: {reference.shape} (z, y, x) at {spacing} mm, "
          f"{len(labels)} labels ({len(common)} in both)")
    segmetrics.compare(reference, test, spacing=spacing, metrics="all", labels=common[:1])  # warm up

    def peer():
        return [deepmind_distance_set(reference == label, test == label, spacing) for label in common]

    peer_seconds, _ = best_time(peer, args.repeats)
    per_label = lambda seconds, n: 1000 * seconds / n  # noqa: E731
    print(f"best of {args.repeats}, load average {os.getloadavg()[0]:.1f}")
    print(f"{'group':<28} {'files ms/label':>14} {'arrays ms/label':>15} {'vs DeepMind':>11}")
    print(f"{'DeepMind distance set':<28} {'':>14} {per_label(peer_seconds, len(common)):>15.1f} {1.0:>10.2f}x")
    total = 0.0
    for name, metrics in [("distance set (HD..NSD)", DISTANCE_SET)] + [(g, g) for g in GROUPS + ["contours"]] + [
            ("all four groups", GROUPS), ("default groups (+ contours)", None)]:
        on_files, result = best_time(lambda: segmetrics.compare(*files, metrics=metrics), args.repeats)
        on_arrays, _ = best_time(lambda: segmetrics.compare(reference, test, spacing=spacing, metrics=metrics), args.repeats)
        n = len(result.structures)
        ratio = f"{peer_seconds / len(common) / (on_arrays / n):>10.2f}x"
        print(f"{name:<28} {per_label(on_files, n):>14.1f} {per_label(on_arrays, n):>15.1f} {ratio:>11}"
              f"   ({on_arrays:.2f} s for {n} structures)")
        if name in GROUPS:
            total += on_arrays
    print(f"sum of the four groups, arrays: {total:.2f} s; load average now {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        seconds = cli_seconds("compare", *files, "--format", "csv", "-o", Path(tmp) / "out.csv")
    print(f"CLI end to end (segmetrics compare, all groups, new process): {seconds:.2f} s")
    print("vs DeepMind: DeepMind's per-label loop time / ours, per label (> 1: ours is faster)")
    if args.stages:
        print_stages(files, len(labels), args.repeats)


if __name__ == "__main__":
    main()
