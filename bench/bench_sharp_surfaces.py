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

Run: ``python bench/bench_sharp_surfaces.py`` (about a minute on two cores); ``--candidates`` adds
the candidate surfaces (about 15 s each; ``--candidates "name;name"`` some of them), ``--centroids``
samples every exact-mode surface at its triangle centroids instead of its vertices,
``--interpolated-percentile`` takes the exact-mode HD95 between the sampled distances' area
midpoints, ``--scale k`` multiplies every size but the thin ones by k (variants of the same
families), ``--cases box,slot`` runs some families only, ``--verbose`` prints every case's values;
``--search-times "name;name"`` only times the distance searches of today's surface and candidates
(kidney and liver sphere pairs at (2.5, 0.8, 0.8) mm, about a minute).
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


# --- candidate surfaces (not in the package): patched in for ``--candidates`` ----------------------

def _candidate(make_surface):
    """A ``segmetrics.spatial.mesh.smooth_surface`` replacement whose 3-D surfaces come from
    ``make_surface(padded mask, spacing) -> (vertices (x, y, z) mm from the padded box's first voxel
    centre, triangles)``, or ``(..., weights)`` with the area (mm²) each vertex samples (0: a vertex
    of the surface but no query point, see :func:`with_surface`); 2-D masks keep the package's surface."""
    from segmetrics.spatial import mesh
    from segmetrics.spatial.geometry import bounding_box

    package = mesh.smooth_surface

    def smooth_surface(mask, spacing, sigma_voxels=1.0, origin=None, box=None):
        mask, spacing = np.asarray(mask), np.asarray(spacing, float)
        if mask.ndim != 3:
            return package(mask, spacing, sigma_voxels, origin, box)
        box = bounding_box(mask) if box is None else box
        if box is None:
            return None
        pad = 2
        origin = np.zeros(3, int) if origin is None else np.asarray(origin)
        corner = (np.array([s.start - pad for s in box]) - origin) * spacing
        vertices, cells, *weights = make_surface(np.pad(np.asarray(mask[box], bool), pad), spacing)
        vertices = vertices + corner[::-1]
        sizes = mesh._triangle_areas(vertices, cells)
        cells, sizes = cells[sizes > 0], sizes[sizes > 0]
        vertex_sizes = np.bincount(cells.ravel(), np.repeat(sizes / 3, 3), len(vertices))
        used = vertex_sizes > 0
        if weights:
            vertex_sizes = weights[0]
        vertices, vertex_sizes, cells = vertices[used], vertex_sizes[used], (np.cumsum(used) - 1)[cells]
        return mesh.Surface(vertices, vertex_sizes, cells, origin[::-1] * spacing[::-1])
    return smooth_surface


def _surface_nets(padded, spacing, iterations=0, box_voxels=0.0):
    """VTK's surface nets of a mask, with its constrained smoothing (each vertex within a box of
    ``box_voxels`` voxels around its dual-cell centre) when ``iterations`` > 0."""
    from vtkmodules.util.numpy_support import numpy_to_vtk, vtk_to_numpy
    from vtkmodules.vtkCommonDataModel import vtkImageData
    from vtkmodules.vtkFiltersCore import vtkSurfaceNets3D

    image = vtkImageData()
    image.SetDimensions(padded.shape[::-1])
    image.SetSpacing(spacing[::-1].tolist())
    image.GetPointData().SetScalars(numpy_to_vtk(padded.view(np.uint8).ravel(), deep=True))
    nets = vtkSurfaceNets3D()
    nets.SetInputData(image)
    nets.SetLabel(0, 1)
    nets.SetBackgroundLabel(0)
    nets.SetOutputMeshTypeToTriangles()
    nets.SetSmoothing(iterations > 0)
    nets.SetNumberOfIterations(iterations)
    nets.SetRelaxationFactor(0.5)
    nets.AutomaticSmoothingConstraintsOff()
    nets.SetConstraintStrategyToConstraintBox()
    nets.SetConstraintBox(*(box_voxels * spacing[::-1]))  # full box size in mm, (x, y, z)
    nets.Update()
    output = nets.GetOutput()
    return (vtk_to_numpy(output.GetPoints().GetData()).astype(float),
            vtk_to_numpy(output.GetPolys().GetConnectivityArray()).reshape(-1, 3).astype(np.int64))


def _box_like(padded, index, width, partial_axes=1, convex=True, concave=True):
    """Whether the mask in the ``width``³ window starting ``width // 2`` voxels before each voxel
    ``index`` (k, 3) is, locally, an intersection of axis-aligned slabs (``convex``) or its
    complement (``concave``) (a flat face, edge or corner of a box-like part, or a tube, plate or
    speck along the axes) that does not fill the window along at least ``partial_axes`` axes
    (2: edges, corners, tubes, specks)."""
    windows = np.lib.stride_tricks.sliding_window_view(np.pad(padded, width // 2), (width,) * 3)
    blocks, found = windows[tuple(index.T)], np.zeros(len(index), bool)
    for block in [blocks] * convex + [~blocks] * concave:
        spans = [block.any(axis=(2, 3)), block.any(axis=(1, 3)), block.any(axis=(1, 2))]
        separable = np.all(spans[0][:, :, None, None] & spans[1][:, None, :, None] & spans[2][:, None, None, :] == block, axis=(1, 2, 3))
        found |= separable & (sum((~span).any(axis=1) for span in spans) >= partial_axes)
    return found


def _feature_nets(padded, spacing, iterations=40, box_voxels=0.9, width=4):
    """Surface nets smoothed by constrained Laplacian steps, the vertices of box-like windows
    (:func:`_box_like`) kept at their dual-cell centres (sharp axis-aligned edges and corners)."""
    import scipy.sparse

    start, cells = _surface_nets(padded, spacing)
    steps = spacing[::-1]
    lower = np.floor(start / steps).astype(int)[:, ::-1]  # array index of the voxel below each dual-cell centre
    fixed = _box_like(padded, lower + 1, width)  # even width: the window is centred on the dual cell
    limit = np.where(fixed, 0.0, box_voxels / 2)[:, None] * steps
    edges = np.concatenate([cells[:, [0, 1]], cells[:, [1, 2]], cells[:, [2, 0]]])
    edges = np.concatenate([edges, edges[:, ::-1]])
    neighbours = scipy.sparse.csr_matrix((np.ones(len(edges)), edges.T), shape=(len(start),) * 2)
    neighbours.data[:] = 1.0
    neighbours = scipy.sparse.diags(1.0 / np.asarray(neighbours.sum(axis=1)).ravel()) @ neighbours
    points = start.copy()
    for _ in range(iterations):
        points = np.clip(points + 0.5 * (neighbours @ points - points), start - limit, start + limit)
    return points, cells


def _corner_bit(corner):
    """Bit of a dual cell's corner ``(z, y, x)`` (0 or 1 each) in its configuration."""
    return int(corner[0]) * 4 + int(corner[1]) * 2 + int(corner[2])


def _cube_edges():
    """The 12 edges of a dual cell as (lower corner bit, upper corner bit), edge ``4 a + 2 u + v``
    along array axis ``a`` at coordinates ``(u, v)`` on the other two axes (increasing order)."""
    edges = []
    for axis in range(3):
        first, second = [k for k in range(3) if k != axis]
        for u in (0, 1):
            for v in (0, 1):
                low = np.zeros(3, int)
                low[first], low[second] = u, v
                high = low.copy()
                high[axis] = 1
                edges.append((_corner_bit(low), _corner_bit(high)))
    return edges


CORNERS = np.array([[b >> 2 & 1, b >> 1 & 1, b & 1] for b in range(8)])
EDGES = _cube_edges()


def _loops(key):
    """``(loop of each of a dual cell's 12 edges, -1 where the surface does not cross; number of
    loops)`` for ``key = 64 * configuration + switches``: the configuration has bit ``4 z + 2 y +
    x`` set for each inside corner, switch bit ``2 axis + side`` marks a face whose diagonal is
    resolved the other way (see :func:`_manifold_nets`). Crossing edges on one face of the cell
    join when they are the face's only two; on a face with its inside corners on a diagonal they
    join around each inside corner (voxels touching along an edge stay apart), on a switched face
    around each outside corner. Each loop is a closed ring around the cell: a vertex of its own."""
    config, switches = divmod(int(key), 64)
    inside = [(config >> b) & 1 for b in range(8)]
    crossing = [e for e, (low, high) in enumerate(EDGES) if inside[low] != inside[high]]
    parent = {e: e for e in crossing}

    def root(e):
        while parent[e] != e:
            e = parent[e]
        return e

    for axis in range(3):
        for side in (0, 1):
            on_face = [e for e in crossing if CORNERS[EDGES[e][0], axis] == side and CORNERS[EDGES[e][1], axis] == side]
            if len(on_face) == 2:
                parent[root(on_face[0])] = root(on_face[1])
            elif len(on_face) == 4:
                around_inside = not switches >> (2 * axis + side) & 1
                for b in range(8):
                    if inside[b] == around_inside and CORNERS[b, axis] == side:
                        pair = [e for e in on_face if b in EDGES[e]]
                        parent[root(pair[0])] = root(pair[1])
    loops, labels = np.full(12, -1, np.int64), {}
    for e in crossing:
        loops[e] = labels.setdefault(root(e), len(labels))
    return loops, len(labels)


def _joined_off_face():
    """``(256, 6)`` bool: per configuration and face ``2 axis + side``, whether the face's two
    inside corners, on a diagonal, are joined by cube edges through inside corners off the face."""
    table = np.zeros((256, 6), bool)
    for config in range(256):
        inside = [(config >> b) & 1 for b in range(8)]
        for axis in range(3):
            for side in (0, 1):
                on = [b for b in range(8) if CORNERS[b, axis] == side and inside[b]]
                if len(on) != 2 or np.abs(CORNERS[on[0]] - CORNERS[on[1]]).sum() != 2:
                    continue
                reached, todo = {on[0]}, [on[0]]
                while todo:
                    b = todo.pop()
                    for low, high in EDGES:
                        for here, there in ((low, high), (high, low)):
                            if here == b and inside[there] and there not in reached and (CORNERS[there, axis] != side or there == on[1]):
                                reached.add(there)
                                todo.append(there)
                table[config, 2 * axis + side] = on[1] in reached
    return table


JOINED_OFF_FACE = _joined_off_face()


def _manifold_nets(padded):
    """Surface nets of a padded boolean mask (array order) with one vertex per loop of each dual
    cell (:func:`_loops`), so edge- and corner-only contacts give a manifold surface:
    ``(vertex positions in voxels (array order), the dual cell's centre of each vertex,
    whether its cell has one loop, outward quads in (x, y, z) winding, (the midpoint of each
    quad's voxel edge (voxels, array order), its axis))``. A cell with one
    loop puts its vertex at its centre, one with several at the mean of each loop's crossing
    edges' midpoints."""
    m = padded.astype(np.uint8)
    shape = np.array(m.shape) - 1
    config = np.zeros(shape, np.int64)
    for b in range(8):
        dz, dy, dx = b >> 2 & 1, b >> 1 & 1, b & 1
        config |= m[dz:dz + shape[0], dy:dy + shape[1], dx:dx + shape[2]].astype(np.int64) << b
    # a diagonal face whose inside corners are joined off the face in both cells around it is
    # resolved the other way: otherwise one loop on each side crosses it twice (an edge of four quads)
    joined = np.pad(JOINED_OFF_FACE[config], ((1, 1), (1, 1), (1, 1), (0, 0)))
    switches = np.zeros(shape, np.int64)
    for axis in range(3):
        for side in (0, 1):
            neighbour = tuple(slice(1 + (2 * side - 1) * (k == axis), n + 1 + (2 * side - 1) * (k == axis)) for k, n in enumerate(shape))
            both = joined[1:-1, 1:-1, 1:-1, 2 * axis + side] & joined[neighbour + (2 * axis + 1 - side,)]
            switches |= both.astype(np.int64) << (2 * axis + side)
    keys = (64 * config + switches).ravel()
    unique, config = np.unique(keys, return_inverse=True)
    table = [_loops(key) for key in unique]
    loops, counts = np.array([t[0] for t in table]), np.array([t[1] for t in table])[config]
    config = config.ravel()
    first = np.cumsum(counts) - counts
    cell_of_vertex = np.repeat(np.arange(len(config)), counts)
    quads, midpoints, owners = [], [], []
    for axis in range(3):
        one, two = [k for k in range(3) if k != axis]
        step = np.eye(3, dtype=int)[axis]
        low = np.argwhere(m[tuple(slice(0, n - s) for n, s in zip(m.shape, step))] != m[tuple(slice(s, None) for s in step)])
        ring = []
        for d1, d2 in ((0, 0), (-1, 0), (-1, -1), (0, -1)):  # counter-clockwise in the (one, two) plane
            cell = low.copy()
            cell[:, one] += d1
            cell[:, two] += d2
            flat = np.ravel_multi_index(cell.T, shape)
            ring.append(first[flat] + loops[config[flat], 4 * axis - 2 * d1 - d2])
        ring = np.stack(ring, axis=1)
        # counter-clockwise faces +axis for axes 0 and 2, -axis for 1; outward is +axis when `low` is inside
        flip = (m[tuple(low.T)] == 1) != (axis != 1)
        ring[flip] = ring[flip, ::-1]
        quads.append(ring)
        midpoints.append(np.repeat(low + 0.5 * step, 4, axis=0))
        owners.append(ring.ravel())
    quads_by_axis, quads = quads, np.concatenate(quads)
    owners, midpoints = np.concatenate(owners), np.concatenate(midpoints)
    centres = np.stack(np.unravel_index(cell_of_vertex, shape), axis=1) + 0.5
    hits = np.bincount(owners, minlength=len(centres))
    means = np.stack([np.bincount(owners, midpoints[:, k], len(centres)) for k in range(3)], axis=1) / hits[:, None]
    single = counts[cell_of_vertex] == 1
    start = np.where(single[:, None], centres, means)
    return start, centres, single, quads, (midpoints[::4], np.repeat(np.arange(3), [len(q) for q in quads_by_axis]))


def _triangulate(quads, points, quad_centres=False, centres_only=False):
    """Two triangles per quad, split along its shorter diagonal, winding reversed for (x, y, z)
    points; with ``quad_centres``, four around a new vertex at the quad's mean instead:
    ``(points, triangles)``; ``centres_only`` adds the weights of :func:`_candidate`: each quad's
    area at its centre, 0 at the other vertices (the distances are sampled at the quad centres)."""
    if quad_centres:
        centre = len(points) + np.arange(len(quads))
        fan = np.concatenate([np.stack([quads[:, k], quads[:, (k + 1) % 4], centre], 1) for k in range(4)])
        points = np.concatenate([points, points[quads].mean(axis=1)])
        if not centres_only:
            return points, fan[:, ::-1]
        from segmetrics.spatial import mesh

        weights = np.zeros(len(points))
        weights[centre] = mesh._triangle_areas(points, fan).reshape(4, -1).sum(axis=0)
        return points, fan[:, ::-1], weights
    a, b, c, d = quads.T
    short = np.linalg.norm(points[a] - points[c], axis=1) <= np.linalg.norm(points[b] - points[d], axis=1)
    first = np.where(short[:, None], np.stack([a, b, c], 1), np.stack([a, b, d], 1))
    second = np.where(short[:, None], np.stack([a, c, d], 1), np.stack([b, c, d], 1))
    return points, np.concatenate([first, second])[:, ::-1]


def _dual_polygons(quads, points, fan, quad_points, sampled_fans=None):
    """The dual of a closed quad mesh (outward quads of net vertices ``points``, (x, y, z) mm):
    a vertex per quad at ``quad_points`` (as many as the voxel-edge crossings: today's vertex
    count) and, per net vertex, the polygon of the quads' vertices around it, split into triangles
    from the corner whose diagonals are shortest in all, or, where ``fan`` (a sharp edge or
    corner), into a fan around the net vertex itself, which is kept; where two fanned net vertices
    share a quad edge, the two fan triangles across it are split along that edge instead (so box
    edges stay straight): ``(points, outward triangles)``; ``sampled_fans`` (net vertices) adds
    the weights of :func:`_candidate`: each triangle's area shared by its corners that are quad
    vertices or fanned net vertices in ``sampled_fans`` (the distances are sampled there only)."""
    corners = quads.ravel()  # slot 4 q + k: net vertex k of quad q, the tail of the quad's edge k -> k + 1
    heads = np.roll(quads, -1, axis=1).ravel()
    keys, twin_keys = corners * len(points) + heads, heads * len(points) + corners
    order = np.argsort(keys)
    twin = order[np.searchsorted(keys, twin_keys, sorter=order)]
    assert np.array_equal(keys[twin], twin_keys), "the quads must form a closed, consistently wound surface"
    following = twin // 4 * 4 + (twin % 4 + 1) % 4  # the same net vertex in the next quad around it
    sizes = np.bincount(corners, minlength=len(points))
    ring = np.zeros((len(points), sizes.max()), np.int64)
    ring[corners, 0] = np.arange(len(corners))  # any slot of each net vertex starts its ring
    for k in range(1, ring.shape[1]):
        ring[:, k] = following[ring[:, k - 1]]
    kept, split = np.flatnonzero(fan), np.flatnonzero(~fan & (sizes > 0))
    # polygons split from the corner whose diagonals are shortest in all (a square: its shorter diagonal)
    count, span = sizes[split][:, None], np.arange(ring.shape[1])
    corner = quad_points[ring[split] // 4]
    diagonals = np.zeros((len(split), ring.shape[1]))
    for j in range(2, ring.shape[1] - 1):
        far = np.take_along_axis(corner, ((span + j) % count)[:, :, None], 1)
        diagonals += np.where(j <= count - 2, np.linalg.norm(far - corner, axis=2), 0.0)
    first = np.argmin(np.where(span < count, diagonals, np.inf), axis=1)
    ring[split] = np.take_along_axis(ring[split], (span + first[:, None]) % count, 1)
    index = np.full(len(points), -1)
    index[kept] = len(quads) + np.arange(len(kept))  # fanned net vertices follow the quad vertices
    triangles = []
    for k in range(ring.shape[1]):
        v = kept[sizes[kept] > k]
        here, there = ring[v, k], ring[v, (k + 1) % sizes[v]]  # consecutive slots around v, sharing the edge v -> w
        w = heads[here]
        flat = np.stack([here // 4, there // 4, index[v]], 1)  # fan triangle (quad vertex, next quad vertex, v)
        along = np.stack([index[v], here // 4, index[np.maximum(w, 0)]], 1)  # its half of the diamond split along v - w
        triangles.append(np.where(fan[w][:, None], along, flat))
        if k + 2 < ring.shape[1]:
            inner = split[sizes[split] > k + 2]  # from the chosen first corner: ring corners 0, k + 1, k + 2
            triangles.append(np.stack([ring[inner, 0], ring[inner, k + 1], ring[inner, k + 2]], 1) // 4)
    triangles = np.concatenate(triangles)
    vertices = np.concatenate([quad_points, points[kept]])
    corner = vertices[triangles]
    if np.einsum("ij,ij->", corner[:, 0], np.cross(corner[:, 1], corner[:, 2])) < 0:  # enclosed volume < 0: inward
        triangles = triangles[:, ::-1]
    if sampled_fans is None:
        return vertices, triangles
    from segmetrics.spatial import mesh

    sampled = np.concatenate([np.ones(len(quad_points), bool), sampled_fans[kept]])[triangles]
    share = mesh._triangle_areas(vertices, triangles) / sampled.sum(axis=1)
    return vertices, triangles, np.bincount(triangles[sampled], np.repeat(share, sampled.sum(axis=1)), len(vertices))


def _projected_nets(padded, spacing, width=4, reach=0.45, manifold=False, partial_axes=2, quad_centres=False, centres_only=False,
                    dual=False, sampled_fans=None):
    """Surface nets whose vertices move from their dual-cell centres onto the 0.5 level of the
    package's clamped Gaussian field (trilinear inside the cell, Newton steps, at most ``reach``
    voxels from the centre on each axis), except where the window is an edge, corner, tube or
    speck of a box-like part (:func:`_box_like` with two partial axes): those stay sharp.
    ``manifold``: the nets of :func:`_manifold_nets` instead of VTK's, their vertices in cells
    of several loops kept where they start; ``partial_axes=1`` keeps flat box-like faces at the
    cell centres too; ``quad_centres`` splits each quad into four triangles around its mean,
    ``centres_only`` samples the distances there only (:func:`_triangulate`); ``dual`` gives the
    dual polygons instead (:func:`_dual_polygons`), fanned at box-like edges and corners, with a
    vertex per quad on its voxel edge (between the inside and outside voxel centres, at most
    ``reach`` voxels from the midpoint, as on today's surface): the projection of the mean of its
    net vertices onto that edge (``dual="crossings"``: where today's field crosses 0.5 on it, or
    its midpoint where the quad's net vertices are fixed; ``"crossings, any fixed"``: where one of
    them is); ``sampled_fans``: the distances are sampled at the quad vertices and at the fan
    vertices of box-like edges and corners that are ``"concave"`` (the outside is box-like) or
    ``"none"`` of them."""
    from scipy import ndimage
    from segmetrics.spatial import mesh

    field = mesh._surface_field(padded, mesh.SMOOTHING_SIGMA_VOXELS).astype(float)
    if manifold:
        start, centre, single, quads, crossings = _manifold_nets(padded)
    else:
        start, cells = _surface_nets(padded, spacing)
        centre = start = (start / spacing[::-1])[:, ::-1]  # voxel units, array order
        single = np.ones(len(start), bool)
    value = lambda at: ndimage.map_coordinates(field, at.T, order=1)  # noqa: E731  trilinear
    moved, step = start.copy(), 1e-3
    for _ in range(8):
        gradient = np.stack([(value(moved + step * e) - value(moved - step * e)) / (2 * step) for e in np.eye(3)], 1)
        moved -= (value(moved) - 0.5)[:, None] * gradient / np.maximum(np.sum(gradient**2, axis=1, keepdims=True), 1e-12)
        moved = np.clip(moved, centre - reach, centre + reach)
    sharp = _box_like(padded, np.floor(centre).astype(int) + 1, width, partial_axes) | ~single
    moved[sharp] = start[sharp]
    points = moved[:, ::-1] * spacing[::-1]
    if dual:
        midpoint, axis = crossings
        step = np.eye(3)[axis]
        if dual in ("crossings", "crossings, any fixed"):
            # each quad's vertex where the field crosses 0.5 on its voxel edge (today's vertex, linear
            # between the two voxel centres), or at the edge's midpoint where its net vertices are fixed
            low, high = value(midpoint - step / 2), value(midpoint + step / 2)
            fixed = np.all(sharp[quads], axis=1) if dual == "crossings" else np.any(sharp[quads], axis=1)
            along = np.where(fixed, 0.0, (low - 0.5) / (low - high) - 0.5)[:, None]
        else:  # each quad's vertex: its net vertices' mean, moved onto its voxel edge
            along = np.take_along_axis(moved[quads].mean(axis=1) - midpoint, axis[:, None], 1)
        on_edge = midpoint + step * np.clip(along, -reach, reach)
        cells = np.floor(centre).astype(int) + 1
        sampled = None if sampled_fans is None else (
            _box_like(padded, cells, width, 2, convex=False) if sampled_fans == "concave" else np.zeros(len(points), bool))
        return _dual_polygons(quads, points, _box_like(padded, cells, width, 2) & single, on_edge[:, ::-1] * spacing[::-1], sampled)
    return _triangulate(quads, points, quad_centres, centres_only) if manifold else (points, cells)


def _adaptive_blur(padded, spacing, width=5, weight_sigma=0.7):
    """The package's clamped Gaussian field, replaced near box-like voxels (:func:`_box_like`,
    centred windows) by the mask itself (weights blurred by ``weight_sigma`` voxels), meshed at 0.5."""
    from segmetrics.spatial import _kernels, mesh

    field = mesh._surface_field(padded, mesh.SMOOTHING_SIGMA_VOXELS)
    near = np.argwhere((field > 1e-3) & (field < 1 - 1e-3))
    flags = np.zeros(padded.shape, bool)
    flags[tuple(near.T)] = _box_like(padded, near, width)
    weight = _kernels.gaussian_blur(flags, weight_sigma, np.float32)
    return mesh._flying_edges((weight * padded + (1 - weight) * field).astype(np.float32), spacing)


CANDIDATES = {
    "surface nets, unsmoothed": lambda p, s: _surface_nets(p, s),
    "surface nets, 16 it, box 0.5": lambda p, s: _surface_nets(p, s, 16, 0.5),
    "surface nets, 40 it, box 0.9": lambda p, s: _surface_nets(p, s, 40, 0.9),
    "nets, box-like vertices fixed": _feature_nets,
    "blur, mask where box-like": _adaptive_blur,
    "nets on the blur, sharp edges": _projected_nets,
    "manifold nets, quad centres": lambda p, s: _projected_nets(p, s, manifold=True, quad_centres=True),
    "manifold nets, quad centres, flat fixed": lambda p, s: _projected_nets(p, s, manifold=True, partial_axes=1, quad_centres=True),
    "dual of manifold nets, fans at box edges": lambda p, s: _projected_nets(p, s, manifold=True, dual=True),
    "dual of manifold nets, fans at box edges, flat fixed": lambda p, s: _projected_nets(
        p, s, manifold=True, partial_axes=1, dual=True),
    "dual on the blur's crossings, fans at box edges, flat fixed": lambda p, s: _projected_nets(
        p, s, manifold=True, partial_axes=1, dual="crossings"),
    "dual on the blur's crossings, fans at box edges, flat fixed, sampled at crossings": lambda p, s: _projected_nets(
        p, s, manifold=True, partial_axes=1, dual="crossings", sampled_fans="none"),
    "dual on the blur's crossings, fans at box edges, flat fixed, sampled at crossings and concave fans": lambda p, s: _projected_nets(
        p, s, manifold=True, partial_axes=1, dual="crossings", sampled_fans="concave"),
    "dual on the blur's crossings, midpoints next to fixed net vertices": lambda p, s: _projected_nets(
        p, s, manifold=True, partial_axes=1, dual="crossings, any fixed"),
    "manifold nets, sampled at quad centres": lambda p, s: _projected_nets(
        p, s, manifold=True, quad_centres=True, centres_only=True),
    "manifold nets, sampled at quad centres, flat fixed": lambda p, s: _projected_nets(
        p, s, manifold=True, partial_axes=1, quad_centres=True, centres_only=True),
}


def centroid_sampling():
    """Replace ``segmetrics.metrics.distance.exact_surface_distances`` by one that samples each surface at
    its triangles' centroids (weights: the triangle areas) instead of its vertices (a third of the
    areas around them); the vertices stay as samples of weight 0, so HD still sees them."""
    from segmetrics.metrics import distance
    from segmetrics.spatial import mesh

    def exact_surface_distances(reference, test, distances=None):  # the pair's vertex distances do not serve the centroids
        mesh.prepare_searches(reference, test)
        directed = []
        for source, target in ((reference, test), (test, reference)):
            if source is None:
                directed.append((np.zeros(0), np.zeros(0)))
                continue
            samples = np.concatenate([source.points[source.cells].mean(axis=1), source.points])
            weights = np.concatenate([mesh._triangle_areas(source.points, source.cells), np.zeros(len(source.points))])
            found = np.full(len(weights), np.inf) if target is None else mesh.distances_to_surface(samples, target)
            directed.append((found, weights))
        return distance._sorted_by_distance(directed, "exact")
    distance.exact_surface_distances = exact_surface_distances


def interpolated_percentiles():
    """Replace the ``exact``-mode percentile (the smallest sampled distance whose cumulative area
    fraction reaches q) by the q-quantile of the piecewise-linear distribution through each
    distance at the middle of its area (samples at one distance, to 1e-4 mm, pooled; sorted
    distances ``d``, pooled weights ``w``: ``d`` at ``(cumsum(w) - w / 2) / sum(w)``, linear in
    between, clamped at both ends); ``deepmind`` mode keeps the package's (DeepMind's) definition."""
    from segmetrics.metrics import distance

    package = distance.percentile_distance

    def interpolated(d, w, q):
        d, w = d[w > 0], w[w > 0]  # sorted by distance
        if not d.size:
            return math.nan
        d, group = np.unique(np.round(d, 4), return_inverse=True)  # samples at one distance (to 1e-4 mm) are one mass
        w = np.bincount(group.ravel(), w)
        return np.interp(q / 100, (np.cumsum(w) - w / 2) / w.sum(), d)

    def percentile_distance(sd, q=95.0, variant="max_of_directed"):
        if sd.mode != "exact" or variant != "max_of_directed":
            return package(sd, q, variant)
        return distance._combine([interpolated(sd.distances_ref_to_test, sd.areas_ref, q),
                                  interpolated(sd.distances_test_to_ref, sd.areas_test, q)], np.max)
    distance.percentile_distance = percentile_distance


def with_surface(make_surface, run):
    """``run`` with ``segmetrics.spatial.mesh.smooth_surface`` replaced by a candidate while it runs, and
    the pair's directed distances queried from the vertices of positive size only (the others get
    distance 0 with their size 0: no effect on any metric)."""
    from segmetrics.spatial import mesh

    def cached_distances(pair, source):
        key = ("distances", source)
        if key not in pair.cache:
            surface = mesh.cached_surface(pair, source)
            target = mesh.cached_surface(pair, "test" if source == "reference" else "reference")
            sampled, found = surface.sizes > 0, np.zeros(len(surface.sizes))
            found[sampled] = mesh.distances_to_surface(surface.points[sampled], target)
            pair.cache[key] = found
        return pair.cache[key]

    def cached_distances_both_ways(pair):
        return cached_distances(pair, "reference"), cached_distances(pair, "test")

    def patched(*arguments):
        package = mesh.smooth_surface, mesh.cached_distances, mesh.cached_distances_both_ways
        mesh.smooth_surface, mesh.cached_distances, mesh.cached_distances_both_ways = (
            _candidate(make_surface), cached_distances, cached_distances_both_ways)
        try:
            return run(*arguments)
        finally:
            mesh.smooth_surface, mesh.cached_distances, mesh.cached_distances_both_ways = package
    return patched


def meshmetrics(reference, test, spacing):
    """The metrics with MeshMetrics (numpy masks, spacing in array order)."""
    from MeshMetrics import DistanceMetrics

    metric = DistanceMetrics()
    metric.set_input(ref=reference, pred=test, spacing=spacing)
    result = {"hd": metric.hd(100), "hd95": metric.hd(95), "assd": metric.assd(), "masd": metric.masd()}
    result.update({f"nsd{t:g}": metric.nsd(t) for t in TOLERANCES_MM})
    return result


def methods(candidates=None):
    """``{name: run(reference, test, spacing) -> metrics}``; MeshMetrics when importable (not on
    PyPI: github.com/gasperpodobnik/MeshMetrics, 0.2.1 measured, needs SimpleITKUtilities)."""
    found = {"segmetrics exact": ours("exact"), "segmetrics deepmind": ours("deepmind"), "DeepMind surface-distance": deepmind}
    if importlib.util.find_spec("MeshMetrics") is not None:
        found["MeshMetrics"] = meshmetrics
    if candidates:
        wanted = list(CANDIDATES) if candidates == "all" else candidates.split(";")
        found.update({name: with_surface(CANDIDATES[name], ours("exact")) for name in wanted})
    return found


def search_times(candidates, rounds=25):
    """Print the CPU time (best and median of ``rounds``, interleaved) of the two directed distance
    searches of ``exact`` mode (``distances_to_surface`` from the query points, the vertices of
    positive size, with the search grids built) on the kidney and liver sphere pairs of
    ``bench/bench_distance.py`` at (2.5, 0.8, 0.8) mm, for today's surface and each candidate
    surface, with their vertex and query counts."""
    from segmetrics.spatial import mesh

    spacing, offset = np.array([2.5, 0.8, 0.8]), np.array([3.0, 2.0, -1.5])
    makers = {"today": mesh.smooth_surface} | {name: _candidate(CANDIDATES[name]) for name in candidates}
    for radius in (40.0, 70.0):
        shape = np.ceil((2 * radius + 12) / spacing).astype(int)
        centre = shape * spacing / 2 + [0.3, 0.3, -1.1] - offset / 2
        grid = np.stack(np.meshgrid(*[spacing[k] * np.arange(shape[k]) for k in range(3)], indexing="ij"), -1).reshape(-1, 3)
        pair = [Sphere(c, r).inside(grid).reshape(shape) for c, r in ((centre, radius), (centre + offset, radius - 3))]
        built = {name: [make(m, spacing, 1.0, (0, 0, 0)) for m in pair] for name, make in makers.items()}
        seconds = {name: [] for name in built}
        for _ in range(rounds):
            for name, surfaces in built.items():
                fresh = [mesh.Surface(s.points, s.sizes, s.cells, s.origin) for s in surfaces]  # no cached grids
                start = time.process_time()
                mesh.prepare_searches(*fresh)
                for source, target in (fresh, fresh[::-1]):
                    mesh.distances_to_surface(source.points[source.sizes > 0], target)
                seconds[name].append(time.process_time() - start)
        for name, surfaces in built.items():
            ms, reference = np.array(seconds[name]) * 1e3, surfaces[0]
            print(f"r = {radius:.0f}/{radius - 3:.0f} mm, {name}: {len(reference.points)} vertices, {len(reference.cells)} triangles, "
                  f"{int(np.sum(reference.sizes > 0))} query points (reference); two searches {ms.min():.1f} ms CPU best, "
                  f"{np.median(ms):.1f} median ({ms.min() / min(seconds['today']) / 1e3:.2f}x today's best)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", help="comma-separated families (default all)")
    parser.add_argument("--verbose", action="store_true", help="print every case's values")
    parser.add_argument("--candidates", nargs="?", const="all",
                        help="also the candidate surfaces (patched in): all, or names separated by ;")
    parser.add_argument("--centroids", action="store_true",
                        help="every exact-mode method samples distances at triangle centroids, not vertices")
    parser.add_argument("--interpolated-percentile", action="store_true",
                        help="exact-mode HD95 interpolated between the samples' area midpoints")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="sizes of every shape but its thin parts times this (variants of the same families)")
    parser.add_argument("--offsets", type=int, default=8, help="grid origins (random sub-voxel shifts) per case")
    parser.add_argument("--search-times", metavar="NAMES",
                        help="only time the distance searches of today's surface and these candidates (names separated by ;)")
    args = parser.parse_args()
    if args.search_times:
        return search_times(args.search_times.split(";"))
    wanted = None if args.cases is None else set(args.cases.split(","))
    if args.centroids:
        centroid_sampling()
    if args.interpolated_percentile:
        interpolated_percentiles()
    runs = methods(args.candidates)
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
