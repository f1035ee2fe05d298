"""Seconds per structure of the roughness group (default convention, RI + RR + ARD), on both paths.

Cases: ``liver`` = the dcmqi liver (512 × 512 × 3 at 1 × 0.81 × 0.81 mm) against itself, as in
``segmetrics compare liver_seg.nrrd liver_seg.nrrd --metrics roughness``; ``spine`` = label 100 of
the panoptica spine reference vs prediction (512 × 512 × 17 at 3.3 × 0.59 × 0.59 mm);
``ellipsoid`` = two organ-sized ellipsoids (semi-axes 100 × 80 × 120 mm and one 3 mm larger,
shifted by 4 mm) on a 300 × 512 × 512 grid at 2.5 × 0.8 × 0.8 mm (array order z, y, x).

Per case and path (``numba``: the compiled kernels; ``bundled``: ``SEGMETRICS_ACCELERATOR=off``, the
numpy/scipy twins that run on 3D Slicer's bundled packages) it prints the vertex counts and the
seconds spent building the two shared surfaces (``segmetrics.mesh``, shared with other groups),
computing both RIs (window means), the ARD (ray casting) and the whole group, the group's time
relative to the numba path of the same run, then the group through the public entry point
(``segmetrics.compare(..., metrics="roughness")`` on the arrays) and, as the peer measured in the
same run, DeepMind ``surface_distance``'s distance set of the same pair (no other implementation
of these metrics exists), with the ratio compare / peer. ``--baseline FILE`` also times the group
of another version of ``roughness.py``, e.g.
``git show <commit>:SegMetricsModule/segmetrics/metrics/roughness.py > old.py``.

Usage: python bench/bench_roughness.py [--data ../shared/data] [--cases liver,spine,ellipsoid]
       [--paths numba,bundled] [--baseline old.py] [--no-peer]
"""
import argparse
import importlib.util
import os
import time
from pathlib import Path

import numpy as np
import SimpleITK as sitk

import segmetrics
from common import best_time, deepmind_distance_set
from segmetrics.spatial import accelerator, mesh
from segmetrics.metrics import roughness
from segmetrics.registry import Parameters, StructurePair

DEFAULT_DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"


def read(path: Path, label=None):
    """Mask (``== label``, or ``> 0``) in array order (z, y, x) and spacing (mm) in the same order."""
    image = sitk.ReadImage(str(path))
    array = sitk.GetArrayFromImage(image)
    return (array > 0 if label is None else array == label), image.GetSpacing()[::-1]


def ellipsoid(shape, spacing, centre_mm, semi_axes_mm) -> np.ndarray:
    """Voxels whose centre (index * spacing, mm, array order) lies inside the ellipsoid; built in
    its bounding box only to keep memory low."""
    lows = [max(int((c - a) / s) - 1, 0) for c, a, s in zip(centre_mm, semi_axes_mm, spacing)]
    highs = [min(int((c + a) / s) + 2, n) for c, a, s, n in zip(centre_mm, semi_axes_mm, spacing, shape)]
    grid = np.ogrid[tuple(slice(lo, hi) for lo, hi in zip(lows, highs))]
    inside = sum(((x * s - c) / a) ** 2 for x, s, c, a in zip(grid, spacing, centre_mm, semi_axes_mm)) <= 1
    mask = np.zeros(shape, bool)
    mask[tuple(slice(lo, hi) for lo, hi in zip(lows, highs))] = inside
    return mask


def cases(data: Path, names):
    if "liver" in names:
        liver, spacing = read(data / "dcmqi" / "liver_seg.nrrd")
        yield "liver", liver, liver, spacing
    if "spine" in names:
        folder = data / "panoptica_spine" / "semantic"
        reference, spacing = read(folder / "ref.nii.gz", 100)
        yield "spine", reference, read(folder / "pred.nii.gz", 100)[0], spacing
    if "ellipsoid" in names:
        shape, spacing, centre = (300, 512, 512), (2.5, 0.8, 0.8), (375.0, 205.0, 205.0)
        reference = ellipsoid(shape, spacing, centre, (100.0, 80.0, 120.0))
        test = ellipsoid(shape, spacing, (centre[0] + 4.0, centre[1], centre[2]), (103.0, 83.0, 123.0))
        yield "ellipsoid", reference, test, spacing


def load_baseline(path: Path):
    """Another version of ``segmetrics/roughness.py`` as module ``segmetrics._baseline_roughness``
    (its import re-registers the ``roughness`` group; the bench calls its ``compute`` directly)."""
    spec = importlib.util.spec_from_file_location("segmetrics._baseline_roughness", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def time_path(name, reference, test, spacing, peer: bool, baseline) -> tuple:
    """Seconds of each stage of the roughness group on the path the environment selects:
    ``(vertices, surfaces, RI x2, ARD, group, compare, DeepMind or None, baseline group or None)``."""
    start = time.perf_counter()
    surfaces = mesh.pair_surfaces(reference, test, spacing)
    built = time.perf_counter()
    for surface in surfaces:
        roughness.roughness_index(surface, roughness.DEFAULT_WINDOW_MM)
    ri = time.perf_counter()
    roughness.average_roughness_distance(*surfaces)
    ard = time.perf_counter()
    roughness.compute(StructurePair(name, reference, test, spacing), Parameters())  # surfaces included
    group = time.perf_counter()
    vertices = "/".join(str(len(s.points)) for s in surfaces)
    on_arrays, _ = best_time(lambda: segmetrics.compare(reference, test, spacing=spacing, metrics="roughness", labels=[1]), 1)
    deepmind = best_time(lambda: deepmind_distance_set(reference, test, spacing), 1)[0] if peer else None
    baseline_group = None
    if baseline:
        start_baseline = time.perf_counter()
        baseline.compute(StructurePair(name, reference, test, spacing), Parameters())
        baseline_group = time.perf_counter() - start_baseline
    return vertices, built - start, ri - built, ard - ri, group - ard, on_arrays, deepmind, baseline_group


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="shared data folder")
    parser.add_argument("--cases", default="liver,spine,ellipsoid")
    parser.add_argument("--paths", default="numba,bundled" if accelerator.numba_installed() else "bundled",
                        help="numba (compiled kernels) and/or bundled (SEGMETRICS_ACCELERATOR=off)")
    parser.add_argument("--baseline", type=Path, help="another roughness.py whose group is timed too")
    parser.add_argument("--no-peer", action="store_true", help="skip DeepMind's distance set")
    args = parser.parse_args()
    baseline = load_baseline(args.baseline) if args.baseline else None
    settings = {"numba": "auto", "bundled": "off"}
    paths = args.paths.split(",")
    if "numba" in paths:
        mesh.compile_kernels()  # numba's compilation or disk cache, outside the timings
    header = (f"{'case':10s} {'path':8s} {'vertices':>15s} {'surfaces':>9s} {'RI x2':>7s} {'ARD':>7s} {'group':>7s} "
              f"{'/numba':>7s} {'compare':>8s} {'DeepMind':>9s} {'ratio':>6s}")
    print(header + (f" {'baseline group':>15s}" if baseline else "") + "  (seconds)")
    for name, reference, test, spacing in cases(args.data.resolve(), args.cases.split(",")):
        numba_group = None
        for path in paths:
            os.environ[accelerator.ENVIRONMENT_VARIABLE] = settings[path]
            vertices, built, ri, ard, group, on_arrays, peer, baseline_group = time_path(
                name, reference, test, spacing, not args.no_peer, baseline)
            numba_group = group if path == "numba" else numba_group
            relative = f"{group / numba_group:6.2f}x" if numba_group else f"{'-':>7s}"
            peer_columns = f"{peer:9.2f} {on_arrays / peer:5.2f}x" if peer else f"{'-':>9s} {'-':>6s}"
            row = (f"{name:10s} {path:8s} {vertices:>15s} {built:9.2f} {ri:7.2f} {ard:7.2f} {group:7.2f} {relative} "
                   f"{on_arrays:8.2f} {peer_columns}")
            print(row + (f" {baseline_group:15.2f}" if baseline else ""), flush=True)
    os.environ.pop(accelerator.ENVIRONMENT_VARIABLE, None)


if __name__ == "__main__":
    main()
