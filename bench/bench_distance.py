"""Benchmark: surface-distance set (HD, HD95, ASSD, NSD@2 mm) against DeepMind's surface-distance.

Two offset spheres in a 300×512×512 volume at spacing (2.5, 0.8, 0.8) mm (array order z, y, x),
for two organ sizes. Prints, per method, the best-of-3 wall time, the ratio to DeepMind's time
measured in the same run, the peak traced memory (tracemalloc: NumPy and Python allocations)
relative to the two input masks, and the error against the analytic truth of the two spheres.

Run: ``python bench/bench_distance.py`` (about a minute on two cores).
"""
import time
import tracemalloc

import numpy as np
import surface_distance

from segmetrics import distance as D

SHAPE = (300, 512, 512)
SPACING = (2.5, 0.8, 0.8)
OFFSET = np.array([3.0, 2.0, -1.5])  # mm, array order
TOLERANCE_MM = 2.0
REPEATS = 3


def ball(centre_mm, radius_mm):
    grids = np.ogrid[tuple(slice(0, n) for n in SHAPE)]
    return sum((g * s - c) ** 2 for g, s, c in zip(grids, SPACING, centre_mm)) <= radius_mm**2


def truth(c1, r1, c2, r2, n=2_000_000):
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


def deepmind_library(reference, test):
    sd = surface_distance.compute_surface_distances(reference, test, SPACING)
    distances = np.concatenate([sd["distances_gt_to_pred"], sd["distances_pred_to_gt"]])
    areas = np.concatenate([sd["surfel_areas_gt"], sd["surfel_areas_pred"]])
    return {
        "hd": surface_distance.compute_robust_hausdorff(sd, 100),
        "hd95": surface_distance.compute_robust_hausdorff(sd, 95),
        "assd": float(np.sum(distances * areas) / np.sum(areas)),
        "nsd": surface_distance.compute_surface_dice_at_tolerance(sd, TOLERANCE_MM),
    }


def ours(mode):
    def run(reference, test):
        sd = D.surface_distances(reference, test, SPACING, mode)
        return {"hd": D.hausdorff(sd), "hd95": D.percentile_distance(sd, 95), "assd": D.assd(sd), "nsd": D.nsd(sd, TOLERANCE_MM)}

    return run


def measure(function, reference, test):
    """(best wall time in s, peak traced bytes, result) over REPEATS runs."""
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        result = function(reference, test)
        times.append(time.perf_counter() - start)
    tracemalloc.start()
    function(reference, test)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return min(times), peak, result


def main():
    ours("deepmind")(np.ones((2, 2, 2), bool), np.ones((2, 2, 2), bool))  # build the cached area table once
    methods = {"deepmind surface-distance": deepmind_library, "segmetrics exact": ours("exact"), "segmetrics deepmind": ours("deepmind")}
    centre = np.array([SHAPE[0] * SPACING[0] / 2 + 0.3, 205.1, 203.7])
    print(f"volume {SHAPE} (z, y, x) at {SPACING} mm; test sphere offset {OFFSET.tolist()} mm, 3 mm smaller")
    header = f"{'radius':>7} {'method':<26} {'time s':>7} {'vs DM':>6} {'peak/inputs':>11} {'HD95 err':>9} {'ASSD err':>9} {'NSD err':>8}"
    print(header)
    print("-" * len(header))
    for radius in (40.0, 70.0):
        reference, test = ball(centre, radius), ball(centre + OFFSET, radius - 3.0)
        inputs = reference.nbytes + test.nbytes
        expected = truth(centre, radius, centre + OFFSET, radius - 3.0)
        baseline = None
        for name, function in methods.items():
            seconds, peak, result = measure(function, reference, test)
            baseline = baseline or seconds
            errors = {k: result[k] - expected[k] for k in expected}
            print(
                f"{radius:>5.0f}mm {name:<26} {seconds:>7.3f} {baseline / seconds:>5.1f}x {peak / inputs:>11.3f} "
                f"{errors['hd95']:>+9.3f} {errors['assd']:>+9.3f} {errors['nsd']:>+8.4f}"
            )
        print(f"{'':>7} truth: HD95 {expected['hd95']:.3f} mm, ASSD {expected['assd']:.3f} mm, NSD@{TOLERANCE_MM:g}mm {expected['nsd']:.4f}")


if __name__ == "__main__":
    main()
