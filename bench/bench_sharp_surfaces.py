"""Benchmark: surface distances on smooth and on sharp/thin analytic shapes against the continuous truth.

Each case is a pair of continuous shapes (reference, test) rasterised by voxel-centre inclusion on
a grid of 1 mm or (2.5, 0.8, 0.8) mm voxels (array order z, y, x) whose origin is shifted by a
fraction of a voxel. The truth comes from the continuous shapes: each surface is sampled densely
with area weights and every sample's distance to the other surface is exact (analytic for spheres,
ellipsoids by root finding, point-to-rectangle for polyhedra built from rectangles) or, for the
spiked sphere only, the distance to a 0.04 mm sample of the other surface (error below 0.03 mm).

Families (every one at both spacings):

- smooth: sphere vs a smaller shifted sphere, ellipsoid vs a shifted ellipsoid;
- box: axis-aligned box vs a larger shifted box;
- rotated box: the same pair rotated about an oblique axis;
- concentric boxes: a box vs a box 1.5 mm smaller on every side;
- spike: a sphere with a thin (1.6 mm) spike vs the sphere alone (slightly larger);
- thin plate: a plate two voxels thick vs the same plate moved by one voxel (along its normal) and tilted;
- notch: a box vs the same box with a groove across its top (concave, 3 voxels wide);
- slot: a box vs the same box with a through-slot (U shape).

Per family and method it prints the mean relative error over HD, HD95, ASSD and MASD (MRE), the
mean absolute NSD error (NSD at 1 mm and at 2 mm) and the MRE ratio to DeepMind's
``surface_distance`` (computed on the same masks and spacing). Methods: ``segmetrics.compare``
in its default ``exact`` mode and in ``deepmind`` mode, and DeepMind's package; MeshMetrics when
importable.

Every case is rasterised on ``--offsets`` grids (default 8) whose origins differ by random
sub-voxel shifts (seeded per case), and the errors are averaged over them.

Run: ``python bench/bench_sharp_surfaces.py`` (about a minute on two cores); ``--scale k``
multiplies every size but the thin ones by k (variants of the same families), ``--cases box,slot``
runs some families only, ``--verbose`` prints every case's values. The surfaces measured in place
of today's and not adopted are described in docs/METRICS.md (*Surfaces tried in place of today's*).
"""
import argparse
import importlib.util
import math
import time

import numpy as np
from scipy.spatial import cKDTree
from scipy.spatial.transform import Rotation

import segmetrics

SPACINGS = {"iso": (1.0, 1.0, 1.0), "aniso": (2.5, 0.8, 0.8)}
TOLERANCES_MM = (1.0, 2.0)
METRICS = ("hd", "hd95", "assd", "masd")
SAMPLE_MM = 0.08  # spacing of the truth's surface samples


# --- continuous shapes: points are (z, y, x) in mm ------------------------------------------------

class Sphere:
    def __init__(self, centre, radius):
        self.centre, self.radius = np.asarray(centre, float), float(radius)

    def inside(self, p):
        return np.linalg.norm(p - self.centre, axis=1) <= self.radius

    def distance(self, p):
        return np.abs(np.linalg.norm(p - self.centre, axis=1) - self.radius)

    def samples(self, step=SAMPLE_MM):
        return Ellipsoid(self.centre, [self.radius] * 3).samples(step)


class Ellipsoid:
    def __init__(self, centre, semi_axes):
        self.centre, self.axes = np.asarray(centre, float), np.asarray(semi_axes, float)

    def inside(self, p):
        return np.sum(((p - self.centre) / self.axes) ** 2, axis=1) <= 1

    def distance(self, p):
        """Exact: the closest point is a² p / (t + a²) with t the root of Σ (a p / (t + a²))² = 1."""
        q, a2 = np.abs(p - self.centre) + 1e-12, self.axes**2
        f = lambda t: np.sum((self.axes * q / (t[:, None] + a2)) ** 2, axis=1) - 1  # noqa: E731  decreasing in t
        low = np.full(len(q), -a2.min() + 1e-12)
        high = np.full(len(q), np.linalg.norm(q, axis=1) * self.axes.max() + 1.0)
        for _ in range(80):
            middle = 0.5 * (low + high)
            above = f(middle) > 0
            low, high = np.where(above, middle, low), np.where(above, high, middle)
        t = 0.5 * (low + high)
        return np.linalg.norm(q - a2 * q / (t[:, None] + a2), axis=1)

    def samples(self, step=SAMPLE_MM):
        """Area-weighted samples about ``step`` mm apart: a Fibonacci sphere mapped onto the
        ellipsoid, weights by the area Jacobian."""
        area = 4 * np.pi * np.mean(self.axes) ** 2
        n = int(area / step**2)
        i = np.arange(n) + 0.5
        polar, azimuth = np.arccos(1 - 2 * i / n), np.pi * (1 + 5**0.5) * i
        unit = np.stack([np.cos(polar), np.sin(polar) * np.cos(azimuth), np.sin(polar) * np.sin(azimuth)], 1)
        weights = np.prod(self.axes) * np.linalg.norm(unit / self.axes, axis=1)
        return self.centre + unit * self.axes, weights * (4 * np.pi / n)


class Rectilinear:
    """A union of cells of a rectilinear lattice (edges ``edges[k]`` along local axis k, cells
    ``filled[i, j, k]``), rotated by ``rotation`` about its local origin and moved to ``centre``.
    Its surface is the set of lattice faces between a filled and an empty cell: exact rectangles."""

    def __init__(self, edges, filled, centre, rotation=None):
        self.edges, self.filled = [np.asarray(e, float) for e in edges], np.asarray(filled, bool)
        self.centre = np.asarray(centre, float)
        self.rotation = np.eye(3) if rotation is None else rotation
        padded = np.pad(self.filled, 1)
        rectangles = []  # (corner, side u, side v) in local mm
        for axis in range(3):
            boundary = np.diff(padded.astype(int), axis=axis) != 0
            others = [k for k in range(3) if k != axis]
            for index in zip(*np.nonzero(boundary)):  # face `index[axis]`; padded cell index[k] on the other axes
                corner, u, v = np.zeros(3), np.zeros(3), np.zeros(3)
                corner[axis] = self.edges[axis][index[axis]]
                for k, side in zip(others, (u, v)):
                    corner[k], side[k] = self.edges[k][index[k] - 1], self.edges[k][index[k]] - self.edges[k][index[k] - 1]
                rectangles.append((corner, u, v))
        self.rectangles = rectangles

    def _local(self, p):
        return (p - self.centre) @ self.rotation

    def inside(self, p):
        local = self._local(p)
        cell = [np.searchsorted(e, local[:, k]) - 1 for k, e in enumerate(self.edges)]
        valid = np.all([(c >= 0) & (c < len(e) - 1) for c, e in zip(cell, self.edges)], axis=0)
        result = np.zeros(len(p), bool)
        result[valid] = self.filled[tuple(c[valid] for c in cell)]
        return result

    def distance(self, p):
        local, best = self._local(p), np.full(len(p), np.inf)
        for corner, u, v in self.rectangles:
            offset = local - corner
            s = np.clip(offset @ u / (u @ u), 0, 1)
            t = np.clip(offset @ v / (v @ v), 0, 1)
            best = np.minimum(best, np.linalg.norm(offset - s[:, None] * u - t[:, None] * v, axis=1))
        return best

    def samples(self):
        points, weights = [], []
        for corner, u, v in self.rectangles:
            nu, nv = (max(1, int(np.ceil(np.linalg.norm(side) / SAMPLE_MM))) for side in (u, v))
            s, t = np.meshgrid((np.arange(nu) + 0.5) / nu, (np.arange(nv) + 0.5) / nv, indexing="ij")
            points.append(corner + s.reshape(-1, 1) * u + t.reshape(-1, 1) * v)
            weights.append(np.full(nu * nv, np.linalg.norm(u) * np.linalg.norm(v) / (nu * nv)))
        return np.concatenate(points) @ self.rotation.T + self.centre, np.concatenate(weights)


def box(centre, size, rotation=None):
    """A box of ``size`` (mm, local axes) centred at ``centre``."""
    size = np.asarray(size, float)
    return Rectilinear([[-s / 2, s / 2] for s in size], [[[True]]], centre, rotation)


class SpikedSphere:
    """A sphere with a thin cylindrical spike along a unit direction (distances to a dense sample)."""

    def __init__(self, centre, radius, direction, spike_radius, spike_length):
        self.sphere = Sphere(centre, radius)
        self.direction = np.asarray(direction, float) / np.linalg.norm(direction)
        self.spike_radius, self.spike_length = spike_radius, spike_length  # length from the centre
        self._tree = cKDTree(self.samples(SAMPLE_MM / 2)[0])

    def _in_spike(self, p):
        along = (p - self.sphere.centre) @ self.direction
        across = np.linalg.norm(p - self.sphere.centre - along[:, None] * self.direction, axis=1)
        return (along >= 0) & (along <= self.spike_length) & (across <= self.spike_radius)

    def inside(self, p):
        return self.sphere.inside(p) | self._in_spike(p)

    def distance(self, p):
        return self._tree.query(p, workers=-1)[0]

    def samples(self, step=SAMPLE_MM):
        points, weights = self.sphere.samples(step)
        keep = ~self._in_spike(points)
        points, weights = [points[keep]], [weights[keep]]
        u = np.cross(self.direction, [1.0, 0, 0] if abs(self.direction[0]) < 0.9 else [0, 1.0, 0])
        u /= np.linalg.norm(u)
        v = np.cross(self.direction, u)
        n_around = int(2 * np.pi * self.spike_radius / step) + 1
        n_along = int(self.spike_length / step) + 1
        angle, along = np.meshgrid(2 * np.pi * (np.arange(n_around) + 0.5) / n_around,
                                   self.spike_length * (np.arange(n_along) + 0.5) / n_along, indexing="ij")
        side = self.sphere.centre + along.reshape(-1, 1) * self.direction + self.spike_radius * (
            np.cos(angle).reshape(-1, 1) * u + np.sin(angle).reshape(-1, 1) * v)
        outside = ~self.sphere.inside(side)
        points.append(side[outside])
        weights.append(np.full(outside.sum(), 2 * np.pi * self.spike_radius * self.spike_length / side.shape[0]))
        n_cap = int(np.pi * self.spike_radius**2 / step**2) + 1
        i = np.arange(n_cap) + 0.5
        radius, angle = self.spike_radius * np.sqrt(i / n_cap), np.pi * (1 + 5**0.5) * i
        points.append(self.sphere.centre + self.spike_length * self.direction
                      + radius[:, None] * (np.cos(angle)[:, None] * u + np.sin(angle)[:, None] * v))
        weights.append(np.full(n_cap, np.pi * self.spike_radius**2 / n_cap))
        return np.concatenate(points), np.concatenate(weights)


# --- cases ----------------------------------------------------------------------------------------

def oblique_rotation():
    return Rotation.from_rotvec(np.array([0.3, 0.5, 0.8]) / np.linalg.norm([0.3, 0.5, 0.8]) * 0.6).as_matrix()


def cases(spacing, scale=1.0):
    """``(family, name, reference shape, test shape)`` for one spacing (mm, z, y, x); ``scale``
    multiplies every size except the thin ones (plate thickness, spike radius, groove and slot
    widths: whole voxels), for variants of the same families (the shifts between the shapes stay)."""
    sz, k = spacing[0], scale
    c = np.array([20.3, 20.1, 19.8])
    yield "smooth", "spheres", Sphere(c, 12.0 * k), Sphere(c + [1.3, -0.8, 0.6], 10.5 * k)
    yield ("smooth", "ellipsoids", Ellipsoid(c, np.multiply([13.0, 9.0, 11.0], k)),
           Ellipsoid(c + [0.9, 0.7, -1.1], np.multiply([11.5, 9.8, 10.2], k)))
    yield "box", "boxes", box(c, np.multiply([18, 16, 20], k)), box(c + [0.7, -0.9, 1.2], np.multiply([20.5, 17.2, 21.5], k))
    rotation = oblique_rotation()
    yield ("rotated box", "rotated boxes", box(c, np.multiply([18, 14, 20], k), rotation),
           box(c + [0.7, -0.9, 1.2], np.multiply([20.5, 15.2, 21.5], k), rotation))
    yield "concentric boxes", "box in box", box(c, np.multiply([22, 20, 24], k)), box(c, np.multiply([22, 20, 24], k) - 3)
    yield ("spike", "spiked sphere", SpikedSphere(c, 9.0 * k, [0.5, 0.4, 0.77], 0.8, 17.0 * k),
           SpikedSphere(c + [0.4, 0.3, -0.5], 9.6 * k, [0.5, 0.4, 0.77], 0.8, 5.0 * k))
    thickness = 2 * sz  # two voxels along z
    tilt = Rotation.from_rotvec([0.0, 0.03, 0.0]).as_matrix()
    yield ("thin plate", "plates", box(c, [thickness, 26 * k, 26 * k]),
           box(c + [sz, 0.5, -0.4], [thickness, 24 * k, 27 * k], tilt))
    width = 3 * max(spacing[1:])
    notch = Rectilinear([[-10 * k, 5 * k, 10 * k], [-9 * k, 9 * k], [-11 * k, -width / 2, width / 2, 11 * k]],
                        [[[True] * 3], [[True, False, True]]], c)
    yield "notch", "groove", box(c, np.multiply([20, 18, 22], k)), notch
    slot = Rectilinear([[-10 * k, 10 * k], [-9 * k, -width / 2, width / 2, 9 * k], [-11 * k, -3 * k, 11 * k]],
                       [[[True, True], [False, True], [True, True]]], c)
    yield "slot", "through-slot", box(c, np.multiply([20, 18, 22], k)), slot


def rasterise(shapes, samples, spacing, offset):
    """Voxel-centre masks (z, y, x) of the shapes on one grid covering their surface samples, origin shifted by ``offset`` mm."""
    low = np.min([p.min(axis=0) for p in samples], axis=0) - 3 * np.asarray(spacing) + offset
    high = np.max([p.max(axis=0) for p in samples], axis=0) + 3 * np.asarray(spacing)
    shape = np.ceil((high - low) / spacing).astype(int)
    grid = np.stack(np.meshgrid(*[low[k] + spacing[k] * np.arange(shape[k]) for k in range(3)], indexing="ij"), -1).reshape(-1, 3)
    return [s.inside(grid).reshape(shape) for s in shapes]


def reduce(directed, tolerances):
    """HD, HD95 (max of directed), ASSD, MASD and NSD at each tolerance of ``[(distances, weights)] * 2``."""
    def percentile(d, w, q):
        order = np.argsort(d)
        cumulative = np.cumsum(w[order]) / w.sum()
        return d[order][min(np.searchsorted(cumulative, q / 100), len(d) - 1)]

    d = np.concatenate([x for x, _ in directed])
    w = np.concatenate([x for _, x in directed])
    result = {
        "hd": max(x.max() for x, _ in directed),
        "hd95": max(percentile(x, y, 95) for x, y in directed),
        "assd": np.sum(d * w) / w.sum(),
        "masd": np.mean([np.sum(x * y) / y.sum() for x, y in directed]),
    }
    for tolerance in tolerances:
        result[f"nsd{tolerance:g}"] = np.sum(w[d <= tolerance]) / w.sum()
    return result


def truth(reference, test):
    """The metrics of the continuous pair, and the two surfaces' sample points."""
    (pr, wr), (pt, wt) = reference.samples(), test.samples()
    return reduce([(test.distance(pr), wr), (reference.distance(pt), wt)], TOLERANCES_MM), (pr, pt)


def ours(mode):
    def run(reference, test, spacing):
        result = {}
        for tolerance in TOLERANCES_MM:
            params = segmetrics.Parameters(surface_mode=mode, nsd_tolerance_mm=tolerance)
            found = segmetrics.compare(reference, test, spacing=spacing, metrics=["hd", "hd95", "assd", "masd", "nsd"],
                                       labels=[1], params=params).structures[0]
            result.update({k: found.value(f"{k}_mm") for k in METRICS})
            result[f"nsd{tolerance:g}"] = found.value("nsd")
        return result
    return run


def deepmind(reference, test, spacing):
    import surface_distance

    sd = surface_distance.compute_surface_distances(reference, test, spacing)
    directed = [(sd["distances_gt_to_pred"], sd["surfel_areas_gt"]), (sd["distances_pred_to_gt"], sd["surfel_areas_pred"])]
    result = reduce([(d, w) for d, w in directed], TOLERANCES_MM)
    result["hd95"] = surface_distance.compute_robust_hausdorff(sd, 95)
    for tolerance in TOLERANCES_MM:  # cross-check of the shared reduction against the package
        assert math.isclose(result[f"nsd{tolerance:g}"], surface_distance.compute_surface_dice_at_tolerance(sd, tolerance), abs_tol=1e-9)
    return result


def meshmetrics(reference, test, spacing):
    """The metrics with MeshMetrics (numpy masks, spacing in array order)."""
    from MeshMetrics import DistanceMetrics

    metric = DistanceMetrics()
    metric.set_input(ref=reference, pred=test, spacing=spacing)
    result = {"hd": metric.hd(100), "hd95": metric.hd(95), "assd": metric.assd(), "masd": metric.masd()}
    result.update({f"nsd{t:g}": metric.nsd(t) for t in TOLERANCES_MM})
    return result


def methods():
    """``{name: run(reference, test, spacing) -> metrics}``; MeshMetrics when importable (not on
    PyPI: github.com/gasperpodobnik/MeshMetrics, 0.2.1 measured, needs SimpleITKUtilities)."""
    found = {"segmetrics exact": ours("exact"), "segmetrics deepmind": ours("deepmind"), "DeepMind surface-distance": deepmind}
    if importlib.util.find_spec("MeshMetrics") is not None:
        found["MeshMetrics"] = meshmetrics
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", help="comma-separated families (default all)")
    parser.add_argument("--verbose", action="store_true", help="print every case's values")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="sizes of every shape but its thin parts times this (variants of the same families)")
    parser.add_argument("--offsets", type=int, default=8, help="grid origins (random sub-voxel shifts) per case")
    args = parser.parse_args()
    wanted = None if args.cases is None else set(args.cases.split(","))
    runs = methods()
    ours("exact")(np.ones((2, 2, 2), bool), np.ones((2, 2, 2), bool), (1, 1, 1))  # compile / load kernels
    errors = {}  # (family, method) -> list of (relative errors, NSD errors)
    seconds = dict.fromkeys(runs, 0.0)
    for spacing_index, (spacing_name, spacing) in enumerate(SPACINGS.items()):
        for case_index, (family, name, reference, test) in enumerate(cases(spacing, args.scale)):
            if wanted and family not in wanted:
                continue
            true, samples = truth(reference, test)
            shifts = np.random.default_rng([16, spacing_index, case_index]).uniform(0, 1, (args.offsets, 3)) * spacing
            if args.verbose:
                print(f"{name} {spacing_name}: truth " + " ".join(f"{k} {v:.3f}" for k, v in true.items()))
            for shift, method, run in ((shift, m, r) for shift in shifts for m, r in runs.items()):
                if method == next(iter(runs)):  # a new grid
                    masks = rasterise([reference, test], samples, spacing, shift)
                start = time.perf_counter()
                got = run(*masks, spacing)
                seconds[method] += time.perf_counter() - start
                relative = [abs(got[k] - true[k]) / true[k] for k in METRICS]
                nsd = [abs(got[f"nsd{t:g}"] - true[f"nsd{t:g}"]) for t in TOLERANCES_MM]
                errors.setdefault((family, method), []).append((relative, nsd))
                errors.setdefault(("all sharp/thin" if family != "smooth" else "all smooth", method), []).append((relative, nsd))
                if args.verbose:
                    print(f"  {method:<26} " + " ".join(f"{k} {got[k]:.3f}" for k in true))
    families = list(dict.fromkeys(f for f, _ in errors))
    header = f"{'family':<18} {'method':<26} {'MRE':>6} {'/DM':>5} {'NSD err':>8}   HD    HD95  ASSD  MASD (rel. err)"
    print(f"spacings {SPACINGS} mm (z, y, x); NSD at {TOLERANCES_MM} mm; MRE over {', '.join(METRICS)}")
    print(header)
    print("-" * len(header))
    for family in families:
        baseline = np.mean([r for r, _ in errors[(family, "DeepMind surface-distance")]])
        for method in runs:
            relative = np.array([r for r, _ in errors[(family, method)]])
            nsd = np.mean([n for _, n in errors[(family, method)]])
            print(f"{family:<18} {method:<26} {relative.mean():>6.3f} {relative.mean() / baseline:>5.2f} {nsd:>8.3f}  "
                  + " ".join(f"{v:>5.3f}" for v in relative.mean(axis=0)))
    print("seconds per method: " + ", ".join(f"{m} {s:.1f}" for m, s in seconds.items()))


if __name__ == "__main__":
    main()
