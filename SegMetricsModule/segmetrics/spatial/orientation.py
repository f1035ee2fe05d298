"""One canonical storage orientation, so that metrics do not depend on how an image is stored.

The same physical masks can be stored with any array axis reversed or the axes in any order (with
the matching direction matrix): a viewer shows them identically, but meshing (marching-cubes
triangulations, rounding of blurs) and slice-wise metrics see different arrays. :func:`canonical`
chooses, from the direction matrix alone, the reversal and order of the array axes that bring the
direction closest to the identity; every storage of one physical grid gives the same choice, so
the metrics of :func:`segmetrics.evaluation.compare.compare` see the same array and agree to rounding.

Arrays are in NumPy/SimpleITK order ``(z, y, x)`` (2-D ``(row, col)``); ``direction`` is ITK's
row-major matrix whose column ``j`` is the physical direction of ITK index axis ``j``, i.e. of
array axis ``ndim - 1 - j``. Outputs that refer to the user's array (slice indices, axes, surface
points) are mapped back with the :class:`Reorientation` methods.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .geometry import LabelImage

#: Direction cosines are compared after rounding to this many decimals when choosing the
#: canonical orientation, so that files storing the same matrix with rounding choose alike.
DIRECTION_DECIMALS = 6
#: Voxels per axis of the blocks in which :meth:`Reorientation.mask` copies a mask whose last
#: (contiguous) axis moves: about 6 times faster than one copy of a 512 × 512 × 200 mask with z
#: and x swapped.
COPY_BLOCK = 32
#: Keys of a structure pair's ``extras`` holding surface polydata in index-scaled mm (:mod:`segmetrics.spatial.mesh`).
SURFACE_EXTRAS = ("test_surface", "reference_surface")


@dataclass(frozen=True)
class Reorientation:
    """How a stored array becomes its canonical array: the stored array is cropped to ``box``,
    then canonical array axis ``a`` is stored axis ``axes[a]``, reversed when ``flipped[a]``.

    Attributes
    ----------
    axes : tuple of int
        Stored array axis of each canonical array axis (a permutation).
    flipped : tuple of bool
        Per canonical array axis, whether it runs opposite to the stored axis.
    shape : tuple of int
        The stored array's shape.
    box : tuple of slice, optional
        The stored array's region (array order) that the canonical array holds; ``None`` = all of
        it. Set with :meth:`within` (e.g. one structure pair's bounding box).
    """

    axes: tuple
    flipped: tuple
    shape: tuple
    box: tuple = None

    @classmethod
    def identity(cls, shape) -> "Reorientation":
        """The reorientation that keeps an array of ``shape`` as it is."""
        return cls(tuple(range(len(shape))), (False,) * len(shape), tuple(shape))

    def within(self, box) -> "Reorientation":
        """The same reorientation of the stored array's region ``box`` (tuple of slices, stored
        array order, steps of 1, within the array)."""
        return Reorientation(self.axes, self.flipped, self.shape, tuple(slice(b.start, b.stop) for b in box))

    @property
    def is_identity(self) -> bool:
        return self.axes == tuple(range(len(self.axes))) and not any(self.flipped) and self._starts() == (0,) * len(self.axes) \
            and self._extents() == tuple(self.shape)

    def array(self, stored: np.ndarray) -> np.ndarray:
        """The canonical view of a stored array (no copy)."""
        return self._turn(stored[self.box] if self.box is not None else stored)

    def mask(self, stored: np.ndarray, label=None) -> np.ndarray:
        """The canonical boolean mask of a stored mask, or of the voxels of a stored label map
        equal to ``label``: only ``box`` is read. A stored boolean mask whose axes keep their
        order and direction is not copied: its ``box`` comes back as a read-only view (strided:
        C-ordered only when the box spans every axis but the first). Otherwise a C-ordered array; when the rows of the
        array change axis the copy goes by blocks that fit in the cache."""
        region = stored[self.box] if self.box is not None else stored
        if label is None and region.dtype == bool and self.axes == tuple(range(len(self.axes))) and not any(self.flipped):
            view = region.view()
            view.flags.writeable = False  # the caller's array: metrics read it, never write
            return view
        region = region == label if label is not None else region.astype(bool, copy=False)
        source = self._turn(region)
        if self.axes[-1] == len(self.axes) - 1:  # rows stay rows: a plain copy reads them in order
            return np.ascontiguousarray(source)
        canonical = np.empty(source.shape, dtype=bool)
        for start in itertools.product(*(range(0, n, COPY_BLOCK) for n in canonical.shape)):
            block = tuple(slice(s, s + COPY_BLOCK) for s in start)  # blocks that fit in the cache
            canonical[block] = source[block]
        return canonical

    def image(self, image: LabelImage) -> LabelImage:
        """The canonical image: same physical voxels, array and ``segment_masks`` as views."""
        if self.is_identity:
            return image
        direction = np.asarray(image.direction, dtype=float).reshape(image.ndim, image.ndim)
        return LabelImage(
            self.array(image.array),
            [image.spacing[stored] for stored in self.axes],
            image.index_to_physical(self.stored_point(np.zeros(image.ndim))),  # of the canonical first voxel
            (direction[:, self._itk_axes()] * self._itk_signs()).ravel(),
            dict(image.names),
            {label: self.array(np.asarray(mask)) for label, mask in image.segment_masks.items()},
        )

    def canonical_axis(self, stored_axis: int) -> int:
        """Canonical array axis of a stored array axis."""
        return self.axes.index(stored_axis)

    def stored_axis(self, canonical_axis: int) -> int:
        """Stored array axis of a canonical array axis."""
        return self.axes[canonical_axis]

    def stored_index(self, canonical_axis: int, index: int) -> int:
        """Stored index along ``stored_axis(canonical_axis)`` of index ``index`` along a canonical axis."""
        source = self.axes[canonical_axis]
        size = self._extents()[source]
        return self._starts()[source] + (size - 1 - index if self.flipped[canonical_axis] else index)

    def stored_slice(self, canonical_axis: int, index: int, spacing_mm: float) -> tuple:
        """``(stored index, position in mm)`` of slice ``index`` along a canonical axis: its index
        along ``stored_axis(canonical_axis)`` and that index times the slice spacing (mm), the
        index-scaled position the per-slice rows report."""
        stored = self.stored_index(canonical_axis, index)
        return stored, float(stored * spacing_mm)

    def stored_point(self, canonical_point, spacing=None) -> np.ndarray:
        """Stored array-order coordinates of canonical ones, shape ``(..., ndim)``: voxel indices
        (floats allowed), or index-scaled mm when the canonical image's ``spacing`` (mm, array
        order) is given."""
        spacing = np.ones(len(self.axes)) if spacing is None else np.asarray(spacing, dtype=float)
        stored = self.stored_vector(canonical_point)
        starts, extents = self._starts(), self._extents()
        for axis, (source, flipped) in enumerate(zip(self.axes, self.flipped)):
            shift = starts[source] + (extents[source] - 1 if flipped else 0)
            if shift:
                stored[..., source] += shift * spacing[axis]
        return stored

    def stored_vector(self, canonical_vector) -> np.ndarray:
        """Stored array-order components of canonical vectors (e.g. normals), shape ``(..., ndim)``."""
        canonical_vector = np.asarray(canonical_vector, dtype=float)
        stored = np.empty_like(canonical_vector)
        for axis, (source, flipped) in enumerate(zip(self.axes, self.flipped)):
            stored[..., source] = -canonical_vector[..., axis] if flipped else canonical_vector[..., axis]
        return stored

    def polydata_to_stored(self, polydata, canonical_spacing):
        """A 3-D surface polydata in the canonical image's index-scaled frame (mm, ITK ``(x, y, z)``
        order, see :mod:`segmetrics.spatial.mesh`) moved into the stored image's index-scaled frame, so
        that :func:`segmetrics.spatial.mesh.to_physical` with the stored image places it. Point order and
        point data are kept; ``Normals`` are mapped; triangles are re-wound when the mapping
        mirrors, so that they stay outward. A new polydata, or ``polydata`` itself when nothing moves."""
        from vtkmodules.util.numpy_support import numpy_to_vtk, vtk_to_numpy
        from vtkmodules.vtkCommonDataModel import vtkPolyData
        from vtkmodules.vtkFiltersCore import vtkReverseSense

        if self.is_identity or polydata.GetNumberOfPoints() == 0:
            return polydata
        moved = vtkPolyData()
        moved.DeepCopy(polydata)
        points = vtk_to_numpy(moved.GetPoints().GetData()).astype(float)
        stored = self.stored_point(points[:, ::-1], canonical_spacing)
        moved.GetPoints().SetData(numpy_to_vtk(np.ascontiguousarray(stored[:, ::-1]), deep=True))
        normals = moved.GetPointData().GetNormals()
        if normals is not None:
            turned = self.stored_vector(vtk_to_numpy(normals)[:, ::-1])
            array = numpy_to_vtk(np.ascontiguousarray(turned[:, ::-1]), deep=True)
            array.SetName(normals.GetName())
            moved.GetPointData().SetNormals(array)
        if self._mirrors():
            rewound = vtkReverseSense()
            rewound.SetInputData(moved)
            rewound.ReverseCellsOn()
            rewound.ReverseNormalsOff()
            rewound.Update()
            moved = rewound.GetOutput()
        return moved

    def surfaces_to_stored(self, extras: dict, canonical_spacing) -> dict:
        """``extras`` of a structure pair with its surface polydata (:data:`SURFACE_EXTRAS`)
        moved into the stored image's frame (:meth:`polydata_to_stored`)."""
        return {key: self.polydata_to_stored(value, canonical_spacing) if key in SURFACE_EXTRAS else value
                for key, value in extras.items()}

    def _turn(self, region: np.ndarray) -> np.ndarray:
        """The canonical view of a stored region: axes ordered, then reversed."""
        view = np.transpose(region, self.axes)
        return np.flip(view, [a for a, f in enumerate(self.flipped) if f]) if any(self.flipped) else view

    def _starts(self) -> tuple:
        """First stored index of ``box`` per stored axis."""
        return tuple(b.start for b in self.box) if self.box is not None else (0,) * len(self.shape)

    def _extents(self) -> tuple:
        """Size of ``box`` per stored axis."""
        return tuple(b.stop - b.start for b in self.box) if self.box is not None else tuple(self.shape)

    def _itk_axes(self) -> list:
        """Stored ITK index axis of each canonical ITK index axis."""
        ndim = len(self.axes)
        return [ndim - 1 - self.axes[ndim - 1 - j] for j in range(ndim)]

    def _itk_signs(self) -> np.ndarray:
        return np.where(self.flipped[::-1], -1.0, 1.0)

    def _mirrors(self) -> bool:
        """Whether stored and canonical index frames have opposite handedness."""
        permutation = np.eye(len(self.axes))[list(self.axes)]
        return bool(np.linalg.det(permutation) * np.prod(np.where(self.flipped, -1, 1)) < 0)


def canonical(image: LabelImage) -> Reorientation:
    """The :class:`Reorientation` of ``image`` to canonical storage, from its direction alone.

    Among every order and reversal of the array axes (48 in 3-D), the one whose direction matrix
    has the largest trace, i.e. the smallest rotation from the identity (each array axis as
    close as possible to the physical axis of its position, pointing the same way); ties
    (e.g. axes at 45°) go to the largest matrix in row-major lexicographic order. The set of
    candidate matrices is the same for every storage of one physical grid, so the choice is too.
    """
    axes, flipped = _canonical_axes(tuple(image.direction), image.ndim)
    return Reorientation(axes, flipped, image.array.shape)


@lru_cache(maxsize=64)
def _canonical_axes(direction: tuple, ndim: int) -> tuple:
    """``(axes, flipped)`` of :func:`canonical` for a direction (ITK order, row-major), found once
    per direction (48 candidates in 3-D)."""
    direction = np.asarray(direction, dtype=float).reshape(ndim, ndim)

    def closeness(candidate):  # ITK axes and signs -> (trace, row-major entries), rounded
        itk_axes, signs = candidate
        matrix = np.round(direction[:, itk_axes] * signs, DIRECTION_DECIMALS)
        return (round(float(np.trace(matrix)), DIRECTION_DECIMALS), *matrix.ravel())

    candidates = itertools.product(itertools.permutations(range(ndim)), itertools.product((1.0, -1.0), repeat=ndim))
    itk_axes, signs = max(candidates, key=closeness)
    axes = tuple(ndim - 1 - itk_axes[ndim - 1 - a] for a in range(ndim))
    flipped = tuple(signs[ndim - 1 - a] < 0 for a in range(ndim))
    return axes, flipped
