"""Time the MSI group through ``segmetrics.compare`` on an organ-sized 512×512×300 pair at (2.5, 0.8, 0.8) mm.

No library computes MSI, so the peer timed in the same run is DeepMind ``surface_distance``
(the distance set of the same pair, the usual cost of a boundary metric). Printed: ``compare``
with ``metrics="msi"`` (the group computes the slice-wise ``msi`` and the surface ``msi_3d``) on
the arrays and on ``.nii.gz`` files, and the slice-wise part alone
(:func:`segmetrics.metrics.msi.slice_table` on the pair's bounding box, as ``compare`` gives it), each as
wall and CPU seconds (the machine's other load shows in the wall time) and as a ratio to the peer.

With ``--bundled``, the slice-wise part and ``compare`` are also timed on the bundled-packages path
(``SEGMETRICS_ACCELERATOR=off``: numpy/scipy kernels instead of numba), in the same run, with the
ratio bundled / compiled and the largest relative difference of the values.

Run: ``python bench/bench_msi.py [--bundled]``; the TotalSegmentator per-label figures are in bench_multiorgan.py.
"""
import argparse
import os
import tempfile
import time
from pathlib import Path
from unittest import mock

import numpy as np

import segmetrics
from common import best_time, deepmind_distance_set, write_image
from segmetrics.metrics import msi
from segmetrics.spatial.geometry import bounding_box, union_box
from segmetrics.registry import Parameters

SHAPE = (300, 512, 512)
SPACING = (2.5, 0.8, 0.8)


def organ(semi_axes_mm, centre_mm, wobble_mm=0.0):
    """An ellipsoid (liver-sized) with an optional smooth bump pattern on its outline."""
    z, y, x = (np.arange(n, dtype=np.float32) * s - c for n, s, c in zip(SHAPE, SPACING, centre_mm))
    z, y, x = z[:, None, None], y[None, :, None], x[None, None, :]
    radius = np.sqrt((z / semi_axes_mm[0]) ** 2 + (y / semi_axes_mm[1]) ** 2 + (x / semi_axes_mm[2]) ** 2)
    bumps = wobble_mm * np.sin(y / 9.0) * np.cos(x / 13.0) / max(semi_axes_mm)
    return radius <= 1.0 + bumps


def timed(label, function, peer=None, repeats=2):
    """Best wall time of ``repeats`` runs and the CPU time of the last, printed with the ratio to ``peer``."""
    cpu = time.process_time()
    elapsed, result = best_time(function, repeats)
    cpu = (time.process_time() - cpu) / repeats
    ratio = f"{elapsed / peer:6.2f}x the peer's time" if peer else ""
    print(f"{label:<52s} {elapsed:7.2f} s wall {cpu:7.2f} s CPU  {ratio}")
    return result, elapsed


def with_accelerator(mode, function):
    """``function()`` with ``SEGMETRICS_ACCELERATOR=mode`` (``auto``: compiled kernels; ``off``: bundled packages)."""
    with mock.patch.dict(os.environ, {"SEGMETRICS_ACCELERATOR": mode}):
        return function()


def bundled_against_compiled(label, function, values):
    """Time ``function`` with the compiled kernels and on the bundled path; print the ratio and
    the largest relative difference of ``values(result)``."""
    compiled, compiled_time = timed(f"{label}, compiled kernels", lambda: with_accelerator("auto", function))
    bundled, bundled_time = timed(f"{label}, bundled packages", lambda: with_accelerator("off", function))
    expected, found = np.asarray(values(compiled), dtype=float), np.asarray(values(bundled), dtype=float)
    difference = np.nanmax(np.abs(found - expected) / np.maximum(np.abs(expected), 1e-300))
    print(f"{'':<52s} ratio bundled / compiled {bundled_time / compiled_time:5.2f}x, largest relative difference {difference:.1e}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundled", action="store_true", help="also time the bundled-packages path (accelerator off)")
    args = parser.parse_args()
    reference = organ((120.0, 90.0, 110.0), (375.0, 200.0, 210.0))
    test = organ((117.0, 93.0, 112.0), (378.0, 203.0, 207.0), wobble_mm=4.0)
    print(f"grid {SHAPE} (z, y, x) at {SPACING} mm; reference {reference.sum()} voxels, test {test.sum()} voxels")
    params = Parameters(msi_il=1.0, msi_ol=2.0)
    _, peer = timed("DeepMind surface_distance, distance set (peer)", lambda: deepmind_distance_set(reference, test, SPACING))
    result, _ = timed("compare(metrics='msi'), arrays", lambda: segmetrics.compare(reference, test, spacing=SPACING, metrics="msi", params=params), peer)
    with tempfile.TemporaryDirectory() as tmp:
        files = [write_image(m, SPACING, Path(tmp) / f"{n}.nii.gz") for n, m in (("reference", reference), ("test", test))]
        timed("compare(metrics='msi'), .nii.gz files", lambda: segmetrics.compare(*files, metrics="msi", params=params), peer)
    box = union_box([bounding_box(reference), bounding_box(test)])
    rows, _ = timed("slice-wise msi alone (slice_table on the pair's box)", lambda: msi.slice_table(reference[box], test[box], SPACING, params), peer)
    if args.bundled:
        bundled_against_compiled("slice-wise msi (slice_table)", lambda: msi.slice_table(reference[box], test[box], SPACING, params),
                                 lambda rows: [value for r in rows for value in (r.msi, r.weight)])
        bundled_against_compiled("compare(metrics='msi'), arrays",
                                 lambda: segmetrics.compare(reference, test, spacing=SPACING, metrics="msi", params=params),
                                 lambda result: [result.structures[0].value(m) for m in ("msi", "msi_3d")])
    (structure,) = result.structures
    print(f"msi = {structure.value('msi'):.4f} over {len(rows)} slices (slice_table: {msi.combine_slices(rows):.4f}); "
          f"msi_3d = {structure.value('msi_3d'):.4f}")


if __name__ == "__main__":
    main()
