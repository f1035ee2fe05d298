"""Time the exact contour metrics (:mod:`segmetrics.metrics.contours`) on RT-sized contour sets.

Synthetic sets (in-plane mm, one ring per plane, vertices about 1 mm apart as planning systems
store them; the test is the reference reshaped by a smooth wobble, shifted, with another vertex
count):

- a BODY outline of 100 planes (an ellipse of 350 x 250 mm, ~950 vertices per plane);
- a head-and-neck-sized set of 40 structures, 3 to 60 planes each, 8 to 60 mm across.

Printed per set: the wall and CPU time (the machine's other load shows in the wall time) of the
group's own work on the plane rings (:func:`segmetrics.metrics.contours.measure`: boundaries, both
directions' exact distance profiles, APL, HD, HD95, HDp, median and mean), planes, vertices and the
values of the largest structure. With the shared data, also ``segmetrics.compare(metrics="contours")`` on the
real breast structure set (``dicompyler_core/rtss.dcm``) against a copy scaled by 2 % about each
contour's centroid (reading, grid and plane grouping included).

Run: ``python bench/bench_contours.py [shared data folder]``.
"""
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import segmetrics
from common import DEFAULT_DATA, best_time
from segmetrics.metrics.contours import Plane, boundary_segments, measure
from segmetrics.registry import Parameters

RNG = np.random.default_rng(0)


def outline(semi_axes, spacing_mm, wobble_mm=0.0, shift=(0.0, 0.0), phase=0.0):
    """A closed ellipse ring (mm) with vertices about ``spacing_mm`` apart and a smooth radial wobble."""
    perimeter = math.pi * (3 * sum(semi_axes) - math.sqrt((3 * semi_axes[0] + semi_axes[1]) * (semi_axes[0] + 3 * semi_axes[1])))
    turns = np.linspace(0, 2 * np.pi, max(int(perimeter / spacing_mm), 8), endpoint=False)
    radius = 1 + wobble_mm / max(semi_axes) * np.sin(5 * turns + phase)
    return np.column_stack([semi_axes[0] * radius * np.cos(turns) + shift[0], semi_axes[1] * radius * np.sin(turns) + shift[1]])


def structure(semi_axes, planes):
    """(reference rings, test rings) per plane of one structure tapering towards its ends."""
    pairs = []
    for k in range(planes):
        taper = math.sqrt(max(1 - ((k + 0.5) / planes * 2 - 1) ** 2, 0.05))
        size = (semi_axes[0] * taper, semi_axes[1] * taper)
        pairs.append((outline(size, 1.0), outline(size, 1.1, wobble_mm=1.5, shift=(0.8, -0.5), phase=k / 7)))
    return pairs


def contour_metrics(planes):
    """The group's work on one structure's plane rings (:func:`segmetrics.metrics.contours.measure`):
    ``{metric: value}``."""
    planes = [Plane(k, float(k), float(k), boundary_segments([reference]), boundary_segments([test]), math.nan)
              for k, (reference, test) in enumerate(planes)]
    return {value.metric: value.value for value in measure(planes, Parameters())[1]}


def report(label, structures):
    vertices = sum(len(r) + len(t) for planes in structures for r, t in planes)
    planes = sum(len(s) for s in structures)
    cpu = time.process_time()
    elapsed, values = best_time(lambda: [contour_metrics(s) for s in structures], repeats=2)
    cpu = (time.process_time() - cpu) / 2
    largest = max(range(len(structures)), key=lambda i: len(structures[i]))
    shown = ", ".join(f"{k} {values[largest][k]:.4f}" for k in ("apl_mm", "contour_hd_mm", "contour_hd95_mm",
                                                                  "contour_median_mm", "contour_mean_distance_mm"))
    print(f"{label:<34s} {len(structures):3d} structures {planes:4d} planes {vertices:7d} vertices  "
          f"{elapsed:6.2f} s wall {cpu:6.2f} s CPU")
    print(f"{'':<34s} largest: {shown}")


def real_structure_set(data: Path):
    """``compare(metrics="contours")`` of the real breast structure set and a copy scaled by 2 %."""
    import pydicom

    source = data / "dicompyler_core" / "rtss.dcm"
    if not source.is_file():
        print(f"(no {source}: real structure set skipped)")
        return
    dataset = pydicom.dcmread(source)
    for roi in dataset.ROIContourSequence:
        for contour in getattr(roi, "ContourSequence", []):
            points = np.asarray(contour.ContourData, float).reshape(-1, 3)
            centre = points.mean(axis=0)
            contour.ContourData = [f"{v:.6f}" for v in (centre + 1.02 * (points - centre)).ravel()]
    with tempfile.TemporaryDirectory() as folder:
        scaled = Path(folder) / "scaled.dcm"
        dataset.save_as(scaled)
        start, cpu = time.perf_counter(), time.process_time()
        result = segmetrics.compare(source, scaled, metrics="contours")
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    body = max(result.structures, key=lambda s: len(s.extras.get("contour_slices", [])))
    print(f"{'real rtss.dcm vs scaled 2 % (compare)':<34s} {len(result.structures):3d} structures"
          f"{'':>27s}{elapsed:6.2f} s wall {cpu:6.2f} s CPU")
    print(f"{'':<34s} {body.structure}: contour_hd_mm {body.value('contour_hd_mm'):.4f}, "
          f"contour_hd95_mm {body.value('contour_hd95_mm'):.4f}, apl_mm {body.value('apl_mm'):.2f}")


def main():
    report("BODY, 100 planes", [structure((175.0, 125.0), 100)])
    sizes = RNG.uniform(4.0, 30.0, size=(40, 2))
    report("head and neck, 40 structures", [structure(tuple(s), int(RNG.integers(3, 61))) for s in sizes])
    real_structure_set(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_DATA)


if __name__ == "__main__":
    main()
