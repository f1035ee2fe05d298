"""Benchmark: surface-distance set (HD, HD95, ASSD, NSD@2 mm) against DeepMind's surface-distance.

A 300×512×512 volume at spacing (2.5, 0.8, 0.8) mm (array order z, y, x) holding a reference and
a test object: offset spheres of two organ sizes (with their analytic truth) and a body-sized
ellipsoid pair. Per method it prints the best wall time (of 5 runs; 1 for the body), the speed-up
over DeepMind's library measured in the same run, the peak resident memory the call adds
(measured in a forked child, Linux) relative to the two input masks, and, for the spheres, the
error against the continuous truth.

Run: ``python bench/bench_distance.py`` (about two minutes on two cores).
"""
import multiprocessing
import time

import numpy as np
import surface_distance

from segmetrics import distance as D

SHAPE = (300, 512, 512)
SPACING = (2.5, 0.8, 0.8)
TOLERANCE_MM = 2.0


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


def _status_mb(key):
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) / 1024 for line in status if line.startswith(key + ":"))


def _peak_child(function, reference, test, queue):
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # reset the peak-RSS mark to the current RSS
    before = _status_mb("VmRSS")
    function(reference, test)
    queue.put(_status_mb("VmHWM") - before)


def peak_added_mb(function, reference, test):
    """Peak resident memory (MB) that one call adds, measured in a forked child process."""
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_peak_child, args=(function, reference, test, queue))
    child.start()
    peak = queue.get()
    child.join()
    return peak


def best_time(function, reference, test, repeats):
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = function(reference, test)
        times.append(time.perf_counter() - start)
    return min(times), result


def cases():
    centre = np.array([SHAPE[0] * SPACING[0] / 2 + 0.3, 205.1, 203.7])
    offset = np.array([3.0, 2.0, -1.5])
    for radius in (40.0, 70.0):
        truth = sphere_truth(centre, radius, centre + offset, radius - 3.0)
        yield f"spheres r={radius:.0f}/{radius - 3:.0f} mm", ellipsoid(centre, [radius] * 3), ellipsoid(centre + offset, [radius - 3] * 3), truth, 5
    body = ellipsoid(centre, (330.0, 180.0, 150.0)), ellipsoid(centre + [2.0, 1.0, -1.0], (328.0, 178.0, 151.0))
    yield "body ellipsoid 660x360x300 mm", *body, None, 1


def main():
    ours("deepmind")(np.ones((2, 2, 2), bool), np.ones((2, 2, 2), bool))  # build the cached area table once
    methods = {"DeepMind surface-distance": deepmind_library, "segmetrics exact": ours("exact"), "segmetrics deepmind": ours("deepmind")}
    print(f"volume {SHAPE} (z, y, x) at {SPACING} mm; HD, HD95, ASSD and NSD@{TOLERANCE_MM:g}mm per call")
    header = f"{'case':<31} {'method':<26} {'time s':>7} {'speed-up':>8} {'peak/inputs':>11} {'HD95 err':>9} {'ASSD err':>9} {'NSD err':>8}"
    print(header)
    print("-" * len(header))
    for name, reference, test, truth, repeats in cases():
        inputs_mb = (reference.nbytes + test.nbytes) / 2**20
        baseline = None
        for method, function in methods.items():
            seconds, result = best_time(function, reference, test, repeats)
            baseline = baseline or seconds
            peak = peak_added_mb(function, reference, test) / inputs_mb
            errors = "".join(f" {result[k] - truth[k]:>+9.3f}" for k in ("hd95", "assd")) + f" {result['nsd'] - truth['nsd']:>+8.4f}" if truth else ""
            print(f"{name:<31} {method:<26} {seconds:>7.3f} {baseline / seconds:>7.1f}x {peak:>11.2f}{errors}")
        if truth:
            print(f"{'':<31} truth: HD95 {truth['hd95']:.3f} mm, ASSD {truth['assd']:.3f} mm, NSD {truth['nsd']:.4f}")


if __name__ == "__main__":
    main()
