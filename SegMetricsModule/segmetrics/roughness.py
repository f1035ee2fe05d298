"""Roughness Index (RI), Roughness Ratio (RR) and Average Roughness Distance (ARD).

After Rathour et al., arXiv 2103.12350. Two conventions:

``"paper"``
    Reproduces the authors' public code (index units, no spacing, axis-aligned tiles); this is
    what their published table was computed with. It depends on the image size and padding.
``"default"``
    Physical: in mm from the spacing, on the surface mesh (3-D) or contours (2-D) of each mask,
    independent of the field of view and of translation.

Arrays are in NumPy/SimpleITK array order (``(z, y, x)`` for 3-D, ``(row, col)`` for 2-D) and
every ``spacing`` is in mm in that same array-axis order.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

# ---------------------------------------------------------------------------------------------
# Paper convention (index units)
# ---------------------------------------------------------------------------------------------


def paper_surface(mask: np.ndarray) -> np.ndarray:
    """Surface map of the authors' code on the corner grid, in index units.

    Cell ``o`` of the corner grid (one larger than ``mask`` along every axis) covers the pixels
    or voxels ``o - 1`` and ``o`` along each axis (outside = background); it is surface when some
    but not all of them are inside. In 2-D the authors' map is padded by one more empty pixel on
    every side (shape ``mask.shape + 3``); in 3-D its shape is ``mask.shape + 1``.

    Parameters
    ----------
    mask : ndarray of bool
        2-D ``(row, col)`` or 3-D ``(z, y, x)`` mask.
    """
    mask = np.asarray(mask, dtype=bool)
    padded = np.pad(mask, 1).astype(np.uint8)
    grid_shape = tuple(n + 1 for n in mask.shape)
    count = sum(
        padded[tuple(slice(o, o + n) for o, n in zip(offset, grid_shape))]
        for offset in itertools.product((0, 1), repeat=mask.ndim)
    )
    surface = (count > 0) & (count < 2**mask.ndim)
    return np.pad(surface, 1) if mask.ndim == 2 else surface


def _integer_centre(points: np.ndarray) -> np.ndarray:
    """Mean of index coordinates ``(n, ndim)``, truncated to integers as the authors' code does."""
    return np.trunc(points.mean(axis=0))


def _radial_distance_grid(shape, centre) -> np.ndarray:
    """ζ: distance (index units) of every grid index to ``centre``."""
    axes = np.ogrid[tuple(slice(0, n) for n in shape)]
    return np.sqrt(sum((a - c) ** 2 for a, c in zip(axes, centre)))


def _tiles(array: np.ndarray, w: int) -> np.ndarray:
    """View ``array`` (zero-padded to a multiple of ``w``) as ``(tiles..., w**ndim)`` blocks."""
    counts = [math.ceil(n / w) for n in array.shape]
    padded = np.pad(array, [(0, c * w - n) for c, n in zip(counts, array.shape)])
    blocks = padded.reshape([x for c in counts for x in (c, w)])
    ndim = array.ndim
    order = list(range(0, 2 * ndim, 2)) + list(range(1, 2 * ndim, 2))
    return blocks.transpose(order).reshape(counts + [w**ndim])


def paper_roughness_index(surface: np.ndarray, window: int) -> float:
    """RI of a surface map exactly as the authors' code computes it (index units).

    Tiles of side ``window`` with stride ``window`` start at index 0 and cover the grid. For a
    tile holding surface points, ``D0`` is the mean ζ over those points; when the tile lies
    strictly inside the grid (``start + window < size`` on every axis) it adds the mean of
    ``|ζ - D0|`` over **all** its cells (not only surface cells); other tiles add 0. The sum is
    divided by the number of tiles, empty ones included. ζ is measured from the integer
    (truncated) mean index of the surface points.

    Parameters
    ----------
    surface : ndarray of bool
        Surface map from :func:`paper_surface` (array-axis order).
    window : int
        Tile side in grid cells.
    """
    surface = np.asarray(surface, dtype=bool)
    if not surface.any():
        return math.nan
    zeta = _radial_distance_grid(surface.shape, _integer_centre(np.argwhere(surface)))
    on_surface = _tiles(surface, window)
    n_points = on_surface.sum(axis=-1)
    zeta_tiles = _tiles(zeta, window)
    d0 = np.where(on_surface, zeta_tiles, 0.0).sum(axis=-1) / np.maximum(n_points, 1)
    starts = np.ix_(*[np.arange(0, n, window) for n in surface.shape])
    inside = np.logical_and.reduce(
        [start + window < n for start, n in zip(np.broadcast_arrays(*starts), surface.shape)]
    )
    r = np.abs(zeta_tiles - d0[..., None]).mean(axis=-1)
    return float(np.sum(r, where=(n_points > 0) & inside) / n_points.size)


def paper_ard(reference: np.ndarray, test: np.ndarray) -> float:
    """ARD of the authors' code (index units): mean over all image elements of ``|DM_T - DM_R|``.

    ``DM_X`` is the distance of each element to the truncated mean index of the filled mask ``X``
    inside ``X`` and 0 outside. Depends on the image size (the mean runs over the whole image).
    """
    maps = []
    for mask in (reference, test):
        mask = np.asarray(mask, dtype=bool)
        centre = _integer_centre(np.argwhere(mask))
        maps.append(np.where(mask, _radial_distance_grid(mask.shape, centre), 0.0))
    return float(np.abs(maps[1] - maps[0]).mean())


def paper_window(shape) -> int:
    """The authors' default tile side: 7 % of the first image side, truncated (7 for 100 px)."""
    return max(int(shape[0] * 0.07), 1)
