"""One canonical storage orientation, so that metrics do not depend on how an image is stored.

The same physical masks can be stored with any array axis reversed or the axes in any order (with
the matching direction matrix): a viewer shows them identically, but meshing (marching-cubes
triangulations, rounding of blurs) and slice-wise metrics see different arrays. :func:`canonical`
chooses, from the direction matrix alone, the reversal and order of the array axes that bring the
direction closest to the identity; every storage of one physical grid gives the same choice, so
the metrics of :func:`segmetrics.compare.compare` see the same array and agree to rounding.

Arrays are in NumPy/SimpleITK order ``(z, y, x)`` (2-D ``(row, col)``); ``direction`` is ITK's
row-major matrix whose column ``j`` is the physical direction of ITK index axis ``j``, i.e. of
array axis ``ndim - 1 - j``. Outputs that refer to the user's array (slice indices, axes, surface
points) are mapped back with the :class:`Reorientation` methods.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from .geometry import LabelImage, bounding_box

#: Direction cosines are compared after rounding to this many decimals when choosing the
#: canonical orientation, so that files storing the same matrix with rounding choose alike.
DIRECTION_DECIMALS = 6
#: Voxels per axis of the blocks in which :meth:`Reorientation.mask` copies a mask whose last
#: (contiguous) axis moves: about 6 times faster than one copy of a 512 × 512 × 200 mask with z
#: and x swapped.
COPY_BLOCK = 32
#: Keys of a structure pair's ``extras`` holding surface polydata in index-scaled mm (:mod:`segmetrics.mesh`).
SURFACE_EXTRAS = ("test_surface", "reference_surface")


@dataclass(frozen=True)
class Reorientation:
    """How a stored array becomes its canonical array: canonical array axis ``a`` is stored axis
    ``axes[a]``, reversed when ``flipped[a]``.

    Attributes
    ----------
    axes : tuple of int
        Stored array axis of each canonical array axis (a permutation).
    flipped : tuple of bool
        Per canonical array axis, whether it runs opposite to the stored axis.
    shape : tuple of int
        The stored array's shape.
    """

    axes: tuple
    flipped: tuple
    shape: tuple

    @classmethod
    def identity(cls, shape) -> "Reorientation":
        """The reorientation that keeps an array of ``shape`` as it is."""
        return cls(tuple(range(len(shape))), (False,) * len(shape), tuple(shape))

    @property
    def is_identity(self) -> bool:
        return self.axes == tuple(range(len(self.axes))) and not any(self.flipped)

    def array(self, stored: np.ndarray) -> np.ndarray:
        """The canonical view of a stored array (no copy)."""
        view = np.transpose(stored, self.axes)
        return np.flip(view, [a for a, f in enumerate(self.flipped) if f]) if any(self.flipped) else view

    def mask(self, stored: np.ndarray) -> np.ndarray:
        """The canonical mask of a stored mask as a C-ordered array (``stored`` itself for the
        identity). Only the mask's bounding box is copied, into zeros: the metrics then read
        contiguous memory, as for masks stored canonically."""
        if self.is_identity:
            return stored
        canonical = np.zeros([self.shape[axis] for axis in self.axes], dtype=stored.dtype)
        box = bounding_box(stored)
        if box is None:
            return canonical
        source, target = self.array(stored[box]), canonical[self._canonical_box(box)]
        if self.axes[-1] == len(self.axes) - 1:  # rows stay rows: a plain copy reads them in order
            target[...] = source
            return canonical
        for start in itertools.product(*(range(0, n, COPY_BLOCK) for n in target.shape)):
            block = tuple(slice(s, s + COPY_BLOCK) for s in start)  # blocks that fit in the cache
            target[block] = source[block]
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
        size = self.shape[self.axes[canonical_axis]]
        return size - 1 - index if self.flipped[canonical_axis] else index

    def stored_point(self, canonical_point, spacing=None) -> np.ndarray:
        """Stored array-order coordinates of canonical ones, shape ``(..., ndim)``: voxel indices
        (floats allowed), or index-scaled mm when the canonical image's ``spacing`` (mm, array
        order) is given."""
        spacing = np.ones(len(self.axes)) if spacing is None else np.asarray(spacing, dtype=float)
        stored = self.stored_vector(canonical_point)
        for axis, (source, flipped) in enumerate(zip(self.axes, self.flipped)):
            if flipped:
                stored[..., source] += (self.shape[source] - 1) * spacing[axis]
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
        order, see :mod:`segmetrics.mesh`) moved into the stored image's index-scaled frame, so
        that :func:`segmetrics.mesh.to_physical` with the stored image places it. Point order and
        point data are kept; ``Normals`` are mapped; triangles are re-wound when the mapping
        mirrors, so that they stay outward. A new polydata, or ``polydata`` itself when nothing moves."""
        import vtk
        from vtk.util.numpy_support import numpy_to_vtk, vtk_to_numpy

        if self.is_identity or polydata.GetNumberOfPoints() == 0:
            return polydata
        moved = vtk.vtkPolyData()
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
            rewound = vtk.vtkReverseSense()
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

    def _canonical_box(self, box: tuple) -> tuple:
        """The canonical slices of a box (tuple of slices, stored array order)."""
        slices = []
        for source, flipped in zip(self.axes, self.flipped):
            start, stop, size = box[source].start, box[source].stop, self.shape[source]
            slices.append(slice(size - stop, size - start) if flipped else slice(start, stop))
        return tuple(slices)

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
    ndim = image.ndim
    direction = np.asarray(image.direction, dtype=float).reshape(ndim, ndim)

    def closeness(candidate):  # ITK axes and signs -> (trace, row-major entries), rounded
        itk_axes, signs = candidate
        matrix = np.round(direction[:, itk_axes] * signs, DIRECTION_DECIMALS)
        return (round(float(np.trace(matrix)), DIRECTION_DECIMALS), *matrix.ravel())

    candidates = itertools.product(itertools.permutations(range(ndim)), itertools.product((1.0, -1.0), repeat=ndim))
    itk_axes, signs = max(candidates, key=closeness)
    axes = tuple(ndim - 1 - itk_axes[ndim - 1 - a] for a in range(ndim))
    flipped = tuple(signs[ndim - 1 - a] < 0 for a in range(ndim))
    return Reorientation(axes, flipped, image.array.shape)
