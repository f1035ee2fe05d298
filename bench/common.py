"""Helpers shared by the benchmarks: timing, peak memory, DeepMind's distance set, files and the CLI.

Every benchmark times the public entry points (``segmetrics.compare`` on arrays and on files, the
``segmetrics`` command) with its peer measured in the same run. Arrays are in ``(z, y, x)`` order
and spacings in mm in that order.
"""
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

#: The distance set of the issue: HD, HD95, ASSD and NSD (tolerance in mm).
DISTANCE_SET = ["hd", "hd95", "assd", "nsd"]
NSD_TOLERANCE_MM = 2.0
DEFAULT_DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"


def best_time(function, repeats: int = 3):
    """``(best wall time in s, last result)`` of ``repeats`` calls of ``function()``."""
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return min(times), result


def deepmind_distance_set(reference, test, spacing, tolerance_mm: float = NSD_TOLERANCE_MM) -> dict:
    """HD, HD95, ASSD and NSD of two boolean masks with DeepMind's ``surface_distance``."""
    import surface_distance

    sd = surface_distance.compute_surface_distances(np.asarray(reference, bool), np.asarray(test, bool), spacing)
    distances = np.concatenate([sd["distances_gt_to_pred"], sd["distances_pred_to_gt"]])
    areas = np.concatenate([sd["surfel_areas_gt"], sd["surfel_areas_pred"]])
    return {
        "hd": surface_distance.compute_robust_hausdorff(sd, 100),
        "hd95": surface_distance.compute_robust_hausdorff(sd, 95),
        "assd": float(np.sum(distances * areas) / np.sum(areas)) if areas.sum() else float("nan"),
        "nsd": surface_distance.compute_surface_dice_at_tolerance(sd, tolerance_mm),
    }


def memory_mb() -> dict:
    """``{"VmRSS": resident, "VmHWM": peak resident}`` memory of this process in MB (Linux)."""
    with open("/proc/self/status") as status:
        return {line.split(":")[0]: int(line.split()[1]) / 1024 for line in status if line.startswith(("VmRSS:", "VmHWM:"))}


def _peak_child(function, queue, release):
    if release is not None:
        release()
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # reset the peak-RSS mark to the current RSS
    before = memory_mb()["VmRSS"]
    function()
    queue.put(memory_mb()["VmHWM"] - before)


def peak_added_mb(function, release=None) -> float:
    """Peak resident memory (MB) that one call of ``function()`` adds, measured in a forked child (Linux).

    ``release``, when given, runs in the child first: a tiny call that frees what earlier calls in
    the parent left allocated but would free on the next call (e.g. the blurred field VTK holds
    after meshing), so that the child neither counts it nor reuses its pages."""
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_peak_child, args=(function, queue, release))
    child.start()
    peak = queue.get()
    child.join()
    return peak


def write_image(array, spacing, path: Path) -> Path:
    """Write an array ``(z, y, x)`` with its spacing (mm, same order) as a compressed NIfTI/NRRD file."""
    import SimpleITK as sitk

    image = sitk.GetImageFromArray(np.asarray(array, np.uint8) if np.asarray(array).dtype == bool else array)
    image.SetSpacing(tuple(float(s) for s in spacing[::-1]))
    sitk.WriteImage(image, str(path), True)
    return path


def cli_seconds(*arguments, repeats: int = 1) -> float:
    """Best wall time (s) of ``segmetrics ARGUMENTS`` in a new process (start-up included); the
    package is the one this interpreter imports."""
    command = [sys.executable, "-m", "segmetrics.cli", *map(str, arguments)]
    seconds, done = best_time(lambda: subprocess.run(command, capture_output=True, text=True, env=os.environ), repeats)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip()}")
    return seconds


def values(result, structure=None) -> dict:
    """``{short name: value}`` of the distance set in a :class:`segmetrics.ComparisonResult`."""
    found = result.structures[0] if structure is None else result[structure]
    return {"hd": found.value("hd_mm"), "hd95": found.value("hd95_mm"), "assd": found.value("assd_mm"), "nsd": found.value("nsd")}
