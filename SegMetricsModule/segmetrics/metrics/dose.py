"""Dose-volume metrics: what a contour difference does to the dose-volume histogram (DVH) of the
planned dose (an RT Dose, :mod:`segmetrics.inputs.readers.rtdose`).

Sampling
    The dose is interpolated **trilinearly at the centres of the structure's voxels** (the masks
    the other metrics see: a label map's voxels, or an RT Structure Set rasterised on the image
    or contour grid, 1 mm pixels by default), each voxel weighing its volume. The structure is
    thus sampled at its own resolution, usually finer than the dose grid (2-3 mm), as planning
    systems supersample structures; resampling the structure onto the dose grid instead would
    add the partial-volume error of a coarse voxel at every boundary. Points between the dose
    grid's outermost voxel centres are inside it; the share of a structure outside is reported
    (status ``outside_dose_grid``, a warning note) and its dose values describe the inside part.

Definitions (per structure, reference and test; ``difference`` = test − reference)
    - ``D_v`` (the dose covering a volume ``v``): the highest dose that at least ``v`` of the
      structure receives; with voxels of volume ``w`` sorted hottest first, the dose of voxel
      ``ceil(v / w)``. ``Dx%`` takes ``v = x %`` of the structure's volume inside the dose grid.
    - Dmax = D0.03cc (:data:`NEAR_MAX_VOLUME_CC`, the near-maximum of a volume a dose
      calculation resolves; NaN when the structure is smaller); Dmin = the lowest voxel dose;
      Dmean = the volume-weighted mean dose.
    - ``V<level>Gy``: the volume receiving at least ``level`` Gy, in cc and in % of the volume
      inside the dose grid, for the levels of :attr:`Parameters.dose_levels_gy`.
    - volume: the structure's volume in cc (all its voxels, also those outside the dose grid).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..inputs.readers.rtdose import INSIDE_TOLERANCE_VOXELS
from ..registry import MetricGroup, MetricSpec, MetricValue, Parameters, Status, StructurePair, register_group
from ..spatial.geometry import bounding_box

#: The volume (cc) of the near-maximum dose Dmax.
NEAR_MAX_VOLUME_CC = 0.03
#: The ``Dx%`` metrics: doses covering these percentages of the structure's volume.
COVERED_PERCENTS = (2, 50, 95, 98)
SIDES = ("reference", "test", "difference")
#: Points of a DVH curve: its dose step is the smallest of 1, 2, 5 × 10^k Gy giving at most this many.
DVH_POINTS = 500
#: ``DoseSummationType`` values of a whole plan's dose (or of plans summed); the others are a part of one.
WHOLE_PLAN_SUMMATIONS = ("PLAN", "MULTI_PLAN", "PLAN_OVERVIEW")
#: Structure voxels sampled per batch (bounded temporary memory).
_BATCH_VOXELS = 1 << 20
#: Largest off-diagonal term (dose voxels per structure voxel) of an axis-aligned index map.
_ALIGNED_TOLERANCE = 1e-9


#: ``(statistic, unit suffix, description)`` of the per-side statistics, in output order; a metric is
#: named ``dose_<statistic>_<side>_<unit suffix>``.
STATISTICS = (("dmean", "gy", "mean dose"),
              ("dmax", "gy", f"near-maximum dose D{NEAR_MAX_VOLUME_CC:g}cc"),
              ("dmin", "gy", "minimum dose"),
              *((f"d{p}", "gy", f"dose covering {p}% of the volume") for p in COVERED_PERCENTS),
              ("volume", "cc", "volume"))
UNITS = {"gy": "Gy", "cc": "cc", "percent": "%"}


def level_name(level_gy: float) -> str:
    """The statistic of a dose level: ``v20gy`` for 20 Gy, ``v20.5gy`` for 20.5 Gy."""
    return f"v{level_gy:g}gy"


def level_statistics(levels_gy) -> tuple:
    """The :data:`STATISTICS`-like entries of the V metrics (cc and %) of the dose levels."""
    return tuple((level_name(level), suffix, f"{what} receiving at least {level:g} Gy") for level in levels_gy
                 for suffix, what in (("cc", "volume"), ("percent", "share of the volume")))


def metric_table(statistics) -> tuple:
    """``(MetricSpec, (statistic, unit suffix), side)`` of each metric of the ``statistics`` entries."""
    return tuple((MetricSpec(f"dose_{name}_{side}_{suffix}", UNITS[suffix], "none",
                             f"{what}, test − reference" if side == "difference" else f"{what} of the {side}"),
                  (name, suffix), side)
                 for name, suffix, what in statistics for side in SIDES)


METRICS = tuple(spec for spec, _, _ in metric_table(STATISTICS))


def level_metrics(params: Parameters) -> tuple:
    """The specs of the ``V<level>Gy`` metrics (cc and %) of ``params.dose_levels_gy``."""
    return tuple(spec for spec, _, _ in metric_table(level_statistics(params.dose_levels_gy)))


@dataclass(frozen=True)
class StructureDose:
    """The doses (Gy, in the dose grid's precision) at the voxel centres of one structure inside
    the dose grid, each voxel of ``voxel_cc``; ``outside`` voxels of the structure lie outside the
    dose grid. Dose levels are compared in the doses' precision: a level equal to a dose of the
    grid (20.3 Gy, stored as the 32-bit float nearest to it) counts the voxels receiving it."""

    doses: np.ndarray
    voxel_cc: float
    outside: int

    @property
    def volume_cc(self) -> float:
        """The whole structure's volume (cc), inside and outside the dose grid."""
        return (len(self.doses) + self.outside) * self.voxel_cc

    @property
    def outside_share(self) -> float:
        """Share (0..1) of the structure's volume outside the dose grid."""
        total = len(self.doses) + self.outside
        return self.outside / total if total else 0.0

    def statistics(self, levels_gy) -> dict:
        """``{(statistic, unit suffix): value}`` of :data:`STATISTICS` and of the levels' V metrics
        (see the module doc); the doses of a structure with no voxel inside the dose grid are NaN,
        its V NaN cc too when it has voxels (outside the grid: their doses are unknown, not 0 Gy)."""
        n = len(self.doses)
        values = {(name, suffix): math.nan for name, suffix, _ in STATISTICS}
        values["volume", "cc"] = self.volume_cc
        for level in levels_gy:
            received = int(np.count_nonzero(self.doses >= self.doses.dtype.type(level)))
            values[level_name(level), "cc"] = math.nan if self.unknown else received * self.voxel_cc
            values[level_name(level), "percent"] = 100.0 * received / n if n else math.nan
        if n == 0:
            return values
        # hottest-first ranks (1 = hottest) of the covered volumes; a tiny tolerance keeps 2 % of 100 voxels at 2
        ranks = {f"d{p}": max(1, math.ceil(p * n / 100 - 1e-9)) for p in COVERED_PERCENTS}
        ranks["dmax"] = math.ceil(NEAR_MAX_VOLUME_CC / self.voxel_cc - 1e-9)  # beyond n: smaller than 0.03 cc, NaN
        ranks = {name: rank for name, rank in ranks.items() if rank <= n}
        ordered = np.partition(self.doses, sorted({n - rank for rank in ranks.values()} | {0}))
        values.update({(name, "gy"): float(ordered[n - rank]) for name, rank in ranks.items()})
        values["dmin", "gy"] = float(ordered[0])
        values["dmean", "gy"] = float(self.doses.mean(dtype=np.float64))
        return values

    @property
    def unknown(self) -> bool:
        """Whether the structure has voxels, but none inside the dose grid."""
        return len(self.doses) == 0 and self.outside > 0

    def dvh(self, dose_gy: np.ndarray) -> np.ndarray:
        """The cumulative DVH (cc) at the increasing doses ``dose_gy`` (from 0): the volume
        receiving at least each dose (the comparison of the V metrics); NaN when :attr:`unknown`."""
        if self.unknown:
            return np.full(len(dose_gy), math.nan)
        # the highest dose each voxel reaches, in the doses' precision
        bins = np.searchsorted(dose_gy.astype(self.doses.dtype), self.doses, side="right") - 1
        counts = np.bincount(bins, minlength=len(dose_gy))
        return np.cumsum(counts[::-1])[::-1] * self.voxel_cc


@dataclass(frozen=True)
class DoseVolumeHistogram:
    """Cumulative DVHs of a structure pair (``extras["dvh"]``): ``dose_gy`` (the dose axis, Gy),
    ``reference_cc`` and ``test_cc`` (volume receiving at least each dose, cc), the volumes
    inside the dose grid the percentages refer to (``reference_volume_cc``, ``test_volume_cc``),
    and the shares (%) of each side outside the dose grid, which the curves leave out."""

    dose_gy: np.ndarray
    reference_cc: np.ndarray
    test_cc: np.ndarray
    reference_volume_cc: float
    test_volume_cc: float
    reference_outside_percent: float = 0.0
    test_outside_percent: float = 0.0

    def rows(self) -> list:
        """One dict per dose: ``dose_gy``, then per side the volume in cc and % (NaN % for an
        empty side) and the share (%) outside the dose grid."""
        def percent(volume, whole):
            return volume / whole * 100.0 if whole else np.full(len(volume), math.nan)

        doses = len(self.dose_gy)
        columns = {"dose_gy": self.dose_gy, "reference_cc": self.reference_cc,
                   "reference_percent": percent(self.reference_cc, self.reference_volume_cc),
                   "reference_outside_percent": np.full(doses, self.reference_outside_percent),
                   "test_cc": self.test_cc, "test_percent": percent(self.test_cc, self.test_volume_cc),
                   "test_outside_percent": np.full(doses, self.test_outside_percent)}
        return [dict(zip(columns, map(float, values))) for values in zip(*columns.values())]


def dvh_step_gy(max_dose_gy: float) -> float:
    """The dose step of the DVH curves: the smallest 1, 2 or 5 × 10^k Gy giving at most
    :data:`DVH_POINTS` points up to ``max_dose_gy``."""
    if not max_dose_gy > 0:
        return 1.0
    scale = 10.0 ** math.floor(math.log10(max_dose_gy / DVH_POINTS))
    return next(step * scale for step in (1, 2, 5, 10) if max_dose_gy / (step * scale) <= DVH_POINTS)


def structure_dose(mask: np.ndarray, image, dose) -> StructureDose:
    """The dose at the voxel centres of ``mask`` (on ``image``'s grid, a
    :class:`~segmetrics.spatial.geometry.LabelImage`) from the :class:`~segmetrics.inputs.readers.rtdose.DoseGrid`
    ``dose``: trilinear, axis by axis when the grids' axes are parallel, else by
    ``scipy.ndimage.map_coordinates`` on each voxel."""
    matrix, offset = dose.index_map(image)
    voxel_cc = float(np.prod(image.spacing)) / 1000.0
    aligned = np.abs(matrix - np.diag(np.diag(matrix))).max() <= _ALIGNED_TOLERANCE
    sample = _aligned_batch if aligned else _oblique_batch
    batch = max(1, _BATCH_VOXELS // max(1, mask[0].size))
    parts, outside = [], 0
    for start in range(0, mask.shape[0], batch):
        doses, missed = sample(mask[start:start + batch], start, matrix, offset, dose)
        parts.append(doses)
        outside += missed
    doses = np.concatenate(parts) if parts else np.zeros(0)
    return StructureDose(doses.astype(dose.dose.dtype, copy=False), voxel_cc, outside)


def _oblique_batch(mask, start, matrix, offset, dose) -> tuple:
    """Doses at the voxels of ``mask`` (slices ``start`` on) and how many lie outside the grid."""
    indices = np.argwhere(mask)
    indices[:, 0] += start
    doses, inside = dose.sample(indices @ matrix.T + offset)
    return doses, len(indices) - int(np.count_nonzero(inside))


def _aligned_batch(mask, start, matrix, offset, dose) -> tuple:
    """:func:`_oblique_batch` for grids with parallel axes: the dose interpolated linearly along
    each axis in turn onto the mask's box, then the mask's voxels taken from it."""
    box = bounding_box(mask)
    if box is None:
        return np.zeros(0), 0
    inside = np.ones((1, 1, 1), dtype=bool)
    steps, used = [], []
    for axis in range(3):
        indices = np.arange(box[axis].start, box[axis].stop) + (start if axis == 0 else 0)
        coordinates = indices * matrix[axis, axis] + offset[axis]
        size = dose.dose.shape[axis]
        shape = [-1 if a == axis else 1 for a in range(3)]
        inside = inside & ((coordinates >= -INSIDE_TOLERANCE_VOXELS)
                           & (coordinates <= size - 1 + INSIDE_TOLERANCE_VOXELS)).reshape(shape)
        coordinates = np.clip(coordinates, 0, size - 1)
        lower = np.minimum(np.floor(coordinates).astype(np.int64), max(size - 2, 0))
        upper = np.minimum(lower + 1, size - 1)
        used.append(slice(int(lower.min()), int(upper.max()) + 1))  # the dose planes this axis needs
        steps.append((lower - used[-1].start, upper - used[-1].start, (coordinates - lower).reshape(shape)))
    values = dose.dose[tuple(used)]
    for axis in (2, 1, 0):
        lower, upper, weight = steps[axis]
        below, above = np.take(values, lower, axis=axis), np.take(values, upper, axis=axis)
        values = below + (above - below) * weight
    voxels = mask[box]
    return values[voxels & inside], int(np.count_nonzero(voxels & ~inside))


def compute(pair: StructurePair, params: Parameters) -> list:
    """The dose metrics of one pair (``pair.dose``, a :class:`~segmetrics.inputs.readers.rtdose.DoseGrid`):
    none without a dose, ``not_applicable`` for 2-D images. Puts the DVH curves in ``extras["dvh"]``
    and the shares outside the dose grid (when any) in ``extras["dose_outside_share"]``."""
    if pair.dose is None:  # the planned dose is an input of its own, not part of every comparison
        return []
    table = metric_table(STATISTICS + level_statistics(params.dose_levels_gy))
    if pair.reference.ndim != 3:
        return [MetricValue(spec.name, math.nan, spec.unit, Status.NOT_APPLICABLE) for spec, _, _ in table]
    doses = {side: structure_dose(getattr(pair, side), pair.image, pair.dose) for side in SIDES[:2]}
    outside = {side: doses[side].outside_share for side in doses if doses[side].outside}
    if outside:
        pair.extras["dose_outside_share"] = outside
    statistics = {side: doses[side].statistics(params.dose_levels_gy) for side in doses}
    statistics["difference"] = {key: statistics["test"][key] - statistics["reference"][key]
                                for key in statistics["reference"]}
    step = dvh_step_gy(pair.dose.max_gy)
    points = int(math.ceil(max(d.doses.max(initial=0.0) for d in doses.values()) / step)) + 2
    dose_axis = np.round(np.arange(points) * step, 9)  # 0.1 Gy steps as 0.3, not 0.30000000000000004
    pair.extras["dvh"] = DoseVolumeHistogram(dose_axis, *(doses[side].dvh(dose_axis) for side in SIDES[:2]),
                                             *(len(doses[side].doses) * doses[side].voxel_cc for side in SIDES[:2]),
                                             *(100.0 * doses[side].outside_share for side in SIDES[:2]))
    emptiness = pair.emptiness
    values = []
    for spec, key, side in table:
        status = emptiness
        involved = SIDES[:2] if side == "difference" else (side,)
        if status == Status.OK and key != ("volume", "cc") and any(s in outside for s in involved):
            status = Status.OUTSIDE_DOSE_GRID
        values.append(MetricValue(spec.name, statistics[side][key], spec.unit, status))
    return values


def sampling_notes(dose, structure_spacing) -> list:
    """The note saying what the dose ``dose`` (a DoseGrid) is and how the dose metrics sample it
    on structures whose voxels are ``structure_spacing`` (mm, array order), and a warning when it
    is not a whole plan's dose (a ``DoseSummationType`` outside :data:`WHOLE_PLAN_SUMMATIONS`)."""
    def mm(spacing):
        return " x ".join(f"{s:.4g}" for s in spacing)

    kind = {"PHYSICAL": "physical dose, ", "EFFECTIVE": "EFFECTIVE dose weighted by a relative biological "
            "effectiveness, Gy(RBE), "}.get(dose.dose_type, f"DoseType {dose.dose_type}, " if dose.dose_type else "")
    kind += f"DoseSummationType {dose.summation}; " if dose.summation else ""
    notes = [f"dose {dose.source} ({kind}{mm(dose.spacing)} mm voxels, z, y, x; maximum {dose.max_gy:.4g} Gy) "
             f"interpolated trilinearly at the centres of the structures' voxels ({mm(structure_spacing)} mm: their "
             "masks on the comparison grid, RT Structure Sets rasterised on it)"]
    if dose.summation is not None and dose.summation not in WHOLE_PLAN_SUMMATIONS:
        notes.append(f"warning: the dose {dose.source} is DoseSummationType {dose.summation}, a part of a plan (one "
                     "fraction, beam, session or control point), not the whole plan: its doses and dose levels are "
                     "those of that part")
    return notes


def outside_notes(results, dose) -> list:
    """Warnings naming, per structure, the share of each side outside the dose grid."""
    notes = []
    for result in results:
        shares = result.extras.get("dose_outside_share", {})
        if shares:
            parts = ", ".join(f"{share:.1%} of the {side}" for side, share in shares.items())
            notes.append(f"warning: {result.structure}: {parts} lies outside the dose grid of {dose.source}; its dose "
                         f"values describe the part inside (status {Status.OUTSIDE_DOSE_GRID})")
    return notes


register_group(MetricGroup("dose", METRICS, compute,
                           "dose-volume metrics on an RT Dose (--dose): Dmean, Dmax (D0.03cc), Dmin, D2/50/95/98%, "
                           "V at --dose-levels (cc, %), volume (cc); reference, test and test − reference",
                           level_metrics=level_metrics))
