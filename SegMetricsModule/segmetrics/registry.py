"""One list of metrics shared by the Python API, the CLI, the Slicer module and the reports.

A *metric group* computes several related metrics from one expensive intermediate (e.g. the
surface distances of a structure pair feed HD, HD95, ASSD and NSD). Each group lives in its own
module and registers itself with :func:`register_group`; :func:`all_groups` imports the built-in
group modules on first use. Checking metric names (:func:`resolve_selection`) imports none of them:
the built-in names are listed in :data:`BUILTIN_METRIC_NAMES`, so that validating options in the
Slicer module or the CLI loads no metric stack.
"""
from __future__ import annotations

import dataclasses
import importlib
import math
import numbers
from dataclasses import dataclass, field
from collections.abc import Mapping, Sequence
from typing import Callable

import numpy as np


class Status:
    """Status strings carried by every metric value."""

    OK = "ok"
    REFERENCE_EMPTY = "reference_empty"
    TEST_EMPTY = "test_empty"
    BOTH_EMPTY = "both_empty"
    REFERENCE_SMOOTH = "reference_smooth"
    NOT_APPLICABLE = "not_applicable"
    MULTIPLE_OBJECTS = "multiple_objects"
    MISSING_PLANES = "missing_planes"  # contour distances: planes only one side contours were left out
    OUTSIDE_DOSE_GRID = "outside_dose_grid"


@dataclass
class MetricValue:
    """One computed value: ``value`` is NaN when undefined and ``inf`` for a missing structure's HD."""

    metric: str
    value: float
    unit: str
    status: str = Status.OK
    params: dict = field(default_factory=dict)


@dataclass(frozen=True)
class MetricSpec:
    """Static description of a metric: output name, unit, which direction is better."""

    name: str
    unit: str
    better: str  # "higher", "lower", or "none" for descriptive values (volumes, a surface's own roughness)
    description: str


class ParameterError(ValueError):
    """A metric parameter has the wrong type or lies out of its range (one line naming it)."""


#: Allowed values of the text fields of :class:`Parameters` (the first is the default).
PARAMETER_CHOICES = {
    "hd_percentile_variant": ("max_of_directed", "pooled", "mean_of_directed"),
    "surface_mode": ("exact", "deepmind"),
    "msi_convention": ("default", "fda"),
    "msi_units": ("mm", "pixel"),
    "msi_align": ("none", "com"),
    "roughness_convention": ("default", "paper"),
}


#: Named MSI penalty levels ``(msi_il, msi_ol)``: ``default`` is the MSI paper's and the FDA MISS-tool's
#: default (σ = 10 mm inside and outside); ``tight`` the levels of the MSI paper's clinical example
#: (prostate slice, il 1 and ol 10: σ 10 mm inside, 1 mm outside, over-contouring penalised harshly).
MSI_PRESETS = {"default": (1.0, 1.0), "tight": (1.0, 10.0)}


@dataclass
class Parameters:
    """Every tunable of every metric group, with the documented defaults.

    Distances are in mm; ``msi_axis`` is an array axis index (0 = first array axis = z of a
    SimpleITK-ordered 3-D array); ``None`` picks the through-plane axis (largest spacing, see
    :func:`segmetrics.spatial.geometry.through_plane_axis`).

    Values are checked at construction and a wrong one raises :class:`ParameterError` naming it:
    numbers must be real numbers (not text, not booleans) and finite; ``hd_percentile`` in
    (0, 100]; ``nsd_tolerance_mm``, ``msi_il``, ``msi_ol`` (the MSI penalty levels, Gaussian width
    10 / level), ``roughness_window_mm`` (a whole number of voxels with the paper
    convention) and ``apl_tolerance_mm`` (added path length tolerance,
    default 1 mm: about one CT pixel, the voxel-level agreement of Vaassen et al. 2020) > 0;
    ``lesion_iou`` (the IoU a lesion match needs) in (0, 1]; ``lesion_size_edges_mm`` two increasing
    diameters > 0 (lesion size bins, see :mod:`segmetrics.metrics.lesions`); ``dose_levels_gy`` doses (Gy) > 0
    whose V metrics the dose group adds (:mod:`segmetrics.metrics.dose`); ``msi_axis`` 0, 1 or 2; text fields one
    of :data:`PARAMETER_CHOICES`. :meth:`check_dimension` checks ``msi_axis`` against an image.
    """

    hd_percentile: float = 95.0
    hd_percentile_variant: str = "max_of_directed"  # or "pooled", "mean_of_directed"
    nsd_tolerance_mm: float = 2.0
    surface_mode: str = "exact"  # or "deepmind"
    msi_il: float = 1.0
    msi_ol: float = 1.0
    msi_axis: int | None = None
    msi_convention: str = "default"  # or "fda"
    msi_units: str = "mm"  # or "pixel"
    msi_align: str = "none"  # or "com"
    roughness_window_mm: float | None = None  # None = the convention's default
    roughness_convention: str = "default"  # or "paper"
    apl_tolerance_mm: float = 1.0
    lesion_iou: float = 0.5  # lesion-wise detection: IoU a component match needs
    lesion_size_edges_mm: tuple = (3.0, 10.0)  # equivalent diameters between small | medium | large lesions
    dose_levels_gy: tuple = ()  # V<level>Gy of the dose group

    def __post_init__(self):
        self.hd_percentile = positive_number("hd_percentile", self.hd_percentile, maximum=100.0)
        self.nsd_tolerance_mm = positive_number("nsd_tolerance_mm", self.nsd_tolerance_mm)
        self.msi_il = positive_number("msi_il", self.msi_il)
        self.msi_ol = positive_number("msi_ol", self.msi_ol)
        self.apl_tolerance_mm = positive_number("apl_tolerance_mm", self.apl_tolerance_mm)
        self.lesion_iou = positive_number("lesion_iou", self.lesion_iou, maximum=1.0)
        edges = self.lesion_size_edges_mm
        edges = edges.tolist() if isinstance(edges, np.ndarray) else edges  # a NumPy array is a sequence too
        if isinstance(edges, (str, bytes)) or not isinstance(edges, Sequence) or len(edges) != 2:
            raise ParameterError(f"lesion_size_edges_mm must be two diameters in mm (small | medium | large), "
                                 f"got {edges!r}")
        self.lesion_size_edges_mm = tuple(positive_number("lesion_size_edges_mm", edge) for edge in edges)
        if self.lesion_size_edges_mm[0] >= self.lesion_size_edges_mm[1]:
            raise ParameterError(f"lesion_size_edges_mm must increase (small < medium < large), got {edges!r}")
        levels = self.dose_levels_gy
        if isinstance(levels, (str, bytes)) or not isinstance(levels, (Sequence, np.ndarray)):
            raise ParameterError(f"dose_levels_gy must be a list of doses in Gy, got {levels!r}")
        self.dose_levels_gy = tuple(dict.fromkeys(positive_number("dose_levels_gy", level) for level in levels))
        if self.roughness_window_mm is not None:
            self.roughness_window_mm = positive_number("roughness_window_mm", self.roughness_window_mm)
            if self.roughness_convention == "paper" and not self.roughness_window_mm.is_integer():
                raise ParameterError(f"roughness_window_mm is a tile side in whole voxels with the paper convention, "
                                     f"got {self.roughness_window_mm!r}")
        if self.msi_axis is not None:
            if isinstance(self.msi_axis, bool) or not isinstance(self.msi_axis, numbers.Integral) \
                    or not 0 <= self.msi_axis <= 2:
                raise ParameterError(f"msi_axis must be an array axis 0, 1 or 2 (0 = z of (z, y, x)) or None, "
                                     f"got {self.msi_axis!r}")
            self.msi_axis = int(self.msi_axis)
        for name, allowed in PARAMETER_CHOICES.items():
            if getattr(self, name) not in allowed:
                raise ParameterError(f"{name} must be one of {', '.join(allowed)}; got {getattr(self, name)!r}")

    @classmethod
    def from_msi_preset(cls, preset: str, **fields) -> Parameters:
        """Parameters with the MSI levels ``msi_il``, ``msi_ol`` of ``preset`` (a key of
        :data:`MSI_PRESETS`, e.g. ``"tight"``) and any other ``fields``."""
        if preset not in MSI_PRESETS:
            raise ParameterError(f"MSI preset must be one of {', '.join(MSI_PRESETS)}; got {preset!r}")
        overlap = sorted({"msi_il", "msi_ol"} & set(fields))
        if overlap:
            raise ParameterError(f"the MSI preset {preset} sets msi_il and msi_ol; leave out {', '.join(overlap)}")
        il, ol = MSI_PRESETS[preset]
        return cls(msi_il=il, msi_ol=ol, **fields)

    def check_dimension(self, ndim: int) -> None:
        """Raise :class:`ParameterError` when a parameter does not exist for ``ndim``-D images."""
        if self.msi_axis is not None and self.msi_axis >= ndim:
            raise ParameterError(f"msi_axis {self.msi_axis} does not exist in a {ndim}-D image "
                                 f"(array axes 0..{ndim - 1})")


def as_parameters(params) -> Parameters:
    """``params`` as :class:`Parameters`: ``None`` gives the defaults, a mapping of field names is
    checked like the constructor; anything else (or an unknown key) raises :class:`ParameterError`."""
    if params is None:
        return Parameters()
    if isinstance(params, Parameters):
        return params
    if not isinstance(params, Mapping):
        raise ParameterError(f"params must be segmetrics.Parameters or a dict of its fields, got {params!r}")
    fields = {f.name for f in dataclasses.fields(Parameters)}
    unknown = sorted(map(str, set(params) - fields))
    if unknown:
        raise ParameterError(f"unknown parameter(s) {', '.join(unknown)}; known: {', '.join(sorted(fields))}")
    return Parameters(**params)


def parse_dose_levels(text: str) -> tuple:
    """Dose levels (Gy) written as text: comma-separated doses, any of them with its unit
    (``"20, 30Gy"``), as ``--dose-levels`` and the Slicer module take them; :class:`ParameterError`
    names an item that is not a dose."""
    levels = []
    for item in text.split(","):
        number = item.strip()[:-2] if item.strip().lower().endswith("gy") else item
        try:
            levels.append(float(number))
        except ValueError:
            raise ParameterError(f"{item.strip()!r} is not a dose in Gy (e.g. 20,30Gy)") from None
    return tuple(levels)


def positive_number(name: str, value, maximum: float = math.inf) -> float:
    """``value`` as a float when it is a finite real number in (0, ``maximum``]; otherwise
    :class:`ParameterError` naming the parameter ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ParameterError(f"{name} must be a number, got {value!r}")
    value = float(value)
    if not (math.isfinite(value) and 0 < value <= maximum):
        bound = f"in (0, {maximum:g}]" if math.isfinite(maximum) else "> 0"
        raise ParameterError(f"{name} must be a finite number {bound}, got {value!r}")
    return value


@dataclass
class StructurePair:
    """A reference/test pair of binary masks of one structure on one grid.

    ``reference`` and ``test`` are boolean arrays in array-axis order; ``spacing`` is in mm in the
    same order. ``image`` is the :class:`~segmetrics.spatial.geometry.LabelImage` the masks came from
    (for physical positions); ``orientation`` is the
    :class:`~segmetrics.spatial.orientation.Reorientation` from the user's stored array to these masks
    (``None``: stored as is), for outputs that refer to the stored array (slice indices, axes);
    ``cache`` lets groups share expensive intermediates; ``extras`` collects non-scalar outputs
    (per-slice tables, VTK polydata) by name. ``contours`` is ``(reference polygons, test
    polygons)`` when both inputs are RT Structure Sets: lists of ``(N, 3)`` closed planar polygons
    in patient mm (LPS), else None.
    """

    name: str
    reference: np.ndarray
    test: np.ndarray
    spacing: tuple
    image: object = None
    orientation: object = None
    cache: dict = field(default_factory=dict)
    extras: dict = field(default_factory=dict)
    contours: tuple | None = None
    dose: object = None

    @property
    def emptiness(self) -> str:
        """The status implied by which masks are empty (``ok`` when both have voxels)."""
        return emptiness_status(bool(self.reference.any()), bool(self.test.any()))


def emptiness_status(reference_present: bool, test_present: bool) -> str:
    """Status for a pair given whether each side has any foreground."""
    if reference_present and test_present:
        return Status.OK
    if reference_present:
        return Status.TEST_EMPTY
    if test_present:
        return Status.REFERENCE_EMPTY
    return Status.BOTH_EMPTY


@dataclass
class MetricGroup:
    """Metrics computed together. ``compute(pair, params)`` returns a list of :class:`MetricValue`.

    :func:`segmetrics.evaluation.compare.compare` gives ``compute`` the masks within the pair's bounding box
    (values must not depend on the background around a structure), unless
    ``whole_image(params)`` says the values depend on the image's extent. ``level_metrics(params)``
    gives the specs of metrics whose names follow the parameters (the dose group's V at the
    user's dose levels): computed whenever the group runs, not in :func:`metric_specs`.
    """

    name: str
    metrics: tuple
    compute: Callable
    description: str = ""
    whole_image: Callable = lambda params: False
    level_metrics: Callable = lambda params: ()

    def spec(self, metric_name: str) -> MetricSpec:
        return next(m for m in self.metrics if m.name == metric_name)


_GROUPS: dict = {}
_GROUP_MODULES = (
    "segmetrics.metrics.overlap",
    "segmetrics.metrics.distance",
    "segmetrics.metrics.msi",
    "segmetrics.metrics.roughness",
    "segmetrics.metrics.contours",
    "segmetrics.metrics.lesions",
    "segmetrics.metrics.dose",
)
#: Metric names of the built-in groups, listed here so that the CLI's help need not import the
#: groups' modules (vtk, numba, scikit-image); a test checks it against :func:`all_groups`.
BUILTIN_METRIC_NAMES = {
    "overlap": ("dice", "jaccard", "sensitivity", "precision", "volumetric_similarity", "volume_reference_ml",
                "volume_test_ml", "false_positive_volume_ml", "false_negative_volume_ml"),
    "distance": ("hd_mm", "hd95_mm", "hdp_mm", "assd_mm", "masd_mm", "mean_distance_reference_to_test_mm",
                 "mean_distance_test_to_reference_mm", "nsd"),
    "msi": ("msi", "msi_3d"),
    "roughness": ("ri_reference_mm", "ri_test_mm", "rr", "ard_mm"),
    "contours": ("apl_mm", "apl_fraction", "contour_hd_mm", "contour_hd95_mm", "contour_hdp_mm", "contour_median_mm",
                 "contour_mean_distance_mm", "contour_hd_reference_to_test_mm", "contour_hd_test_to_reference_mm",
                 "contour_hd95_reference_to_test_mm", "contour_hd95_test_to_reference_mm",
                 "contour_mean_reference_to_test_mm", "contour_mean_test_to_reference_mm"),
    "lesions": ("lesion_f1", "lesion_precision", "lesion_recall", "lesion_tp", "lesion_fp", "lesion_fn",
                *(f"lesion_{kind}_{size}" for size in ("small", "medium", "large")
                  for kind in ("recall", "tp", "fn", "fp"))),
    "dose": tuple(f"dose_{statistic}_{side}_{'cc' if statistic == 'volume' else 'gy'}"
                  for statistic in ("dmean", "dmax", "dmin", "d2", "d50", "d95", "d98", "volume")
                  for side in ("reference", "test", "difference")),
}
#: Groups left out of the default selection (computed when named, e.g. ``--metrics lesions``, or with
#: ``"all"``): lesion-wise detection counts components, which means nothing on organ atlases.
OPT_IN_GROUPS = ("lesions",)
#: Short names accepted on input besides the exact metric names; ``NAME`` also matches ``NAME_mm``.
ALIASES = {"ri": ("ri_reference_mm", "ri_test_mm")}


def register_group(group: MetricGroup) -> MetricGroup:
    """Add a group to the registry (module import time); names must be unique."""
    _GROUPS[group.name] = group
    return group


def all_groups() -> dict:
    """All registered groups by name: the built-in ones in the order of ``_GROUP_MODULES`` (not the
    order their modules happened to be imported in, so every process lists records alike), then
    the others in registration order."""
    for module in _GROUP_MODULES:
        importlib.import_module(module)
    rank = {module.rsplit(".", 1)[1]: index for index, module in enumerate(_GROUP_MODULES)}
    return dict(sorted(_GROUPS.items(), key=lambda item: rank.get(item[0], len(rank))))


def metric_specs() -> dict:
    """Every metric spec by name."""
    return {spec.name: spec for group in all_groups().values() for spec in group.metrics}


def metric_names() -> dict:
    """``{group name: metric names}`` of every group, in :func:`all_groups` order, without importing
    any group module: the built-in groups from :data:`BUILTIN_METRIC_NAMES`, then the groups
    registered since (a registered built-in group keeps its place)."""
    registered = {name: tuple(m.name for m in group.metrics) for name, group in _GROUPS.items()}
    return {**BUILTIN_METRIC_NAMES, **registered}


def resolve_selection(selection=None) -> dict:
    """Map a user's metric/group names to ``{group_name: set(metric names)}``.

    ``None`` selects the default groups (every group but :data:`OPT_IN_GROUPS`), ``"all"`` every
    group; a group name selects all its metrics. Raises ``ValueError`` naming unknown metrics.
    Imports no group module (:func:`metric_names`).
    """
    groups = metric_names()
    if selection is None:
        return {name: set(metrics) for name, metrics in groups.items() if name not in OPT_IN_GROUPS}
    if selection == "all" or selection == ["all"]:
        return {name: set(metrics) for name, metrics in groups.items()}
    if isinstance(selection, str):
        selection = [s.strip() for s in selection.split(",") if s.strip()]
    chosen: dict = {}
    unknown = []
    for item in selection:
        if item in groups:
            chosen.setdefault(item, set()).update(groups[item])
            continue
        names = ALIASES.get(item, (item, f"{item}_mm"))
        matched = [(group, metric) for group, metrics in groups.items() for metric in metrics if metric in names]
        if not matched:
            unknown.append(item)
        for group_name, metric_name in matched:
            chosen.setdefault(group_name, set()).add(metric_name)
    if unknown:
        known = ", ".join(list(groups) + sorted(metric for metrics in groups.values() for metric in metrics))
        raise ValueError(f"unknown metric(s) {', '.join(unknown)}; known: {known}")
    return chosen


def undefined(metric: MetricSpec, status: str, params: dict | None = None, value: float = math.nan) -> MetricValue:
    """A value that cannot be computed for this pair (NaN unless a value such as ``inf`` is given)."""
    return MetricValue(metric.name, value, metric.unit, status, dict(params or {}))
