"""Multi-organ throughput on a real TotalSegmentator pair, per metric group, through ``segmetrics.compare``.

``example_seg.nii.gz`` (full 1.5 mm model) vs ``example_seg_fast.nii.gz`` (3 mm fast model), both
122 × 101 × 30 voxels at 3 mm with about 40 labels (see ../shared/data/MANIFEST.md). Per group it
prints the milliseconds per label of ``compare`` on the two files (reading included) and on the
arrays; the peer is DeepMind ``surface_distance`` in its usual per-label loop (``array == label``,
then the distance set), timed in the same run. The CLI is timed end to end (new process) too.

Usage: python bench/bench_multiorgan.py [--data ../shared/data] [--repeats 3]
"""
import argparse
import tempfile
from pathlib import Path

import numpy as np
import SimpleITK as sitk

import segmetrics
from common import DEFAULT_DATA, DISTANCE_SET, best_time, cli_seconds, deepmind_distance_set

GROUPS = ["overlap", "distance", "msi", "roughness"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--repeats", type=int, default=3)
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
    print(f"{'group':<26} {'files ms/label':>14} {'arrays ms/label':>15} {'vs DeepMind':>11}")
    print(f"{'DeepMind distance set':<26} {'':>14} {per_label(peer_seconds, len(common)):>15.1f} {1.0:>10.2f}x")
    total = 0.0
    for name, metrics in [("distance set (HD..NSD)", DISTANCE_SET)] + [(g, g) for g in GROUPS] + [("all four groups", GROUPS)]:
        on_files, result = best_time(lambda: segmetrics.compare(*files, metrics=metrics), args.repeats)
        on_arrays, _ = best_time(lambda: segmetrics.compare(reference, test, spacing=spacing, metrics=metrics), args.repeats)
        n = len(result.structures)
        ratio = f"{peer_seconds / len(common) / (on_arrays / n):>10.2f}x" if metrics is DISTANCE_SET else ""
        print(f"{name:<26} {per_label(on_files, n):>14.1f} {per_label(on_arrays, n):>15.1f} {ratio:>11}"
              f"   ({on_arrays:.2f} s for {n} structures)")
        if name in GROUPS:
            total += on_arrays
    print(f"sum of the four groups, arrays: {total:.2f} s")
    with tempfile.TemporaryDirectory() as tmp:
        seconds = cli_seconds("compare", *files, "--format", "csv", "-o", Path(tmp) / "out.csv")
    print(f"CLI end to end (segmetrics compare, all groups, new process): {seconds:.2f} s")
    print("ratio: ours(distance set) / DeepMind per-label loop, printed above as 'vs DeepMind' (> 1 = faster)")


if __name__ == "__main__":
    main()
