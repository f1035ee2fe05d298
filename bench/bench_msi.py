"""Time MSI on an organ-sized 512×512×300 pair at spacing (2.5, 0.8, 0.8) mm (z, y, x).

No library computes MSI, so the peer timed in the same run is DeepMind ``surface_distance``
(surface distances of the same pair, the usual cost of a boundary metric). ``msi_3d`` is timed
on the pair's shared surfaces (:func:`segmetrics.mesh.cached_surface`, also used by the
distance and roughness groups), built once.

Run: ``python bench/bench_msi.py``
"""
import time

import numpy as np
import surface_distance

from segmetrics import mesh, msi
from segmetrics.registry import Parameters, StructurePair

SHAPE = (300, 512, 512)
SPACING = (2.5, 0.8, 0.8)


def organ(semi_axes_mm, centre_mm, wobble_mm=0.0):
    """An ellipsoid (liver-sized) with an optional smooth bump pattern on its outline."""
    z, y, x = (np.arange(n, dtype=np.float32) * s - c for n, s, c in zip(SHAPE, SPACING, centre_mm))
    z, y, x = z[:, None, None], y[None, :, None], x[None, None, :]
    radius = np.sqrt((z / semi_axes_mm[0]) ** 2 + (y / semi_axes_mm[1]) ** 2 + (x / semi_axes_mm[2]) ** 2)
    bumps = wobble_mm * np.sin(y / 9.0) * np.cos(x / 13.0) / max(semi_axes_mm)
    return radius <= 1.0 + bumps


def timed(label, function):
    start = time.perf_counter()
    result = function()
    elapsed = time.perf_counter() - start
    print(f"{label:<48s} {elapsed:8.2f} s")
    return result, elapsed


def main():
    reference = organ((120.0, 90.0, 110.0), (375.0, 200.0, 210.0))
    test = organ((117.0, 93.0, 112.0), (378.0, 203.0, 207.0), wobble_mm=4.0)
    print(f"grid {SHAPE} (z, y, x) at {SPACING} mm; reference {reference.sum()} voxels, test {test.sum()} voxels")
    _, peer = timed("DeepMind surface_distance (peer)", lambda: surface_distance.compute_surface_distances(reference, test, SPACING))
    pair = StructurePair("organ", reference, test, SPACING)
    params = Parameters(msi_il=1.0, msi_ol=2.0)
    rows, slicewise = timed("msi slice-wise (default convention)", lambda: msi.slice_table(reference, test, SPACING, params))
    surfaces, meshing = timed("shared surfaces (reference + test)", lambda: (mesh.cached_surface(pair, "reference"), mesh.cached_surface(pair, "test")))
    (_, _, value_3d), surface_time = timed("msi_3d on the surfaces", lambda: msi.surface_msi(surfaces[1], surfaces[0], params.msi_il, params.msi_ol))
    print(f"msi = {msi.combine_slices(rows):.4f} over {len(rows)} slices; msi_3d = {value_3d:.4f}; "
          f"{len(surfaces[1].points)} test vertices, {len(surfaces[0].points)} reference vertices")
    print(f"ratio to peer: slice-wise {slicewise / peer:.2f}x, meshes + msi_3d {(meshing + surface_time) / peer:.2f}x, "
          f"whole group {(slicewise + meshing + surface_time) / peer:.2f}x")


if __name__ == "__main__":
    main()
