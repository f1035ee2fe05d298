"""The public entry point: pair the structures of two label images and run the selected metrics."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .geometry import LabelImage, as_label_image, check_same_geometry, resample_nearest
from .registry import MetricValue, Parameters, Status, StructurePair, all_groups, resolve_selection


@dataclass
class StructureResult:
    """All metric values of one reference/test structure pair, plus non-scalar extras."""

    structure: str
    reference_label: object
    test_label: object
    values: list
    extras: dict = field(default_factory=dict)

    def value(self, metric: str) -> float:
        """The value of one metric by name (KeyError when it was not computed)."""
        for v in self.values:
            if v.metric == metric:
                return v.value
        raise KeyError(metric)

    def get(self, metric: str) -> MetricValue:
        return next(v for v in self.values if v.metric == metric)


@dataclass
class ComparisonResult:
    """Per-structure results; ``notes`` says how the inputs were prepared (e.g. resampling)."""

    structures: list
    notes: list = field(default_factory=list)

    def __getitem__(self, structure: str) -> StructureResult:
        for s in self.structures:
            if s.structure == structure:
                return s
        raise KeyError(structure)

    def records(self) -> list:
        """Flat list of dicts ``{structure, reference_label, test_label, metric, value, unit, status, params}``."""
        return [
            {
                "structure": s.structure,
                "reference_label": s.reference_label,
                "test_label": s.test_label,
                "metric": v.metric,
                "value": v.value,
                "unit": v.unit,
                "status": v.status,
                "params": v.params,
            }
            for s in self.structures
            for v in s.values
        ]

    def class_means(self) -> dict:
        """Mean of each metric over the structures where it is finite, with the counts used.

        Returns ``{metric: {"mean", "n_used", "n_total", "unit"}}``; structures whose value is NaN
        or inf are counted in ``n_total`` but not averaged (the report says how many).
        """
        by_metric: dict = {}
        for s in self.structures:
            for v in s.values:
                by_metric.setdefault(v.metric, (v.unit, []))[1].append(v.value)
        means = {}
        for metric, (unit, values) in by_metric.items():
            finite = [x for x in values if x is not None and math.isfinite(x)]
            means[metric] = {
                "mean": float(np.mean(finite)) if finite else math.nan,
                "n_used": len(finite),
                "n_total": len(values),
                "unit": unit,
            }
        return means


def _structure_pairs(reference: LabelImage, test: LabelImage, labels=None):
    """Yield ``(name, reference_label, test_label)`` for the structures to compare.

    Structures are matched by name when both images carry names, otherwise by label value.
    ``labels`` selects label values or names; default: every non-zero label in either image.
    """
    ref_names, test_names = reference.names or {}, test.names or {}
    if ref_names and test_names:
        test_by_name = {name: value for value, name in test_names.items()}
        pairs = [(name, value, test_by_name.get(name)) for value, name in ref_names.items()]
        pairs += [(name, None, value) for value, name in test_names.items() if name not in ref_names.values()]
    else:
        names = ref_names or test_names
        values = sorted(set(reference.labels()) | set(test.labels()) | set(names))
        pairs = [(names.get(v, str(v)), v, v) for v in values]
    if labels is not None:
        wanted = {str(x) for x in labels}
        pairs = [p for p in pairs if p[0] in wanted or str(p[1]) in wanted or str(p[2]) in wanted]
        missing = wanted - {p[0] for p in pairs} - {str(p[1]) for p in pairs} - {str(p[2]) for p in pairs}
        if missing:
            pairs += [(m, _as_number(m), _as_number(m)) for m in sorted(missing) if _as_number(m) is not None]
    return pairs


def _as_number(text):
    try:
        value = float(text)
    except ValueError:
        return None
    return int(value) if value.is_integer() else value


def _mask(image: LabelImage, label) -> np.ndarray:
    if label is None:
        return np.zeros(image.array.shape, dtype=bool)
    return image.mask(label)


def compare(
    reference,
    test,
    *,
    spacing=None,
    labels=None,
    metrics=None,
    params: Parameters | None = None,
    resample_to: str | None = None,
    progress=None,
) -> ComparisonResult:
    """Compare a test segmentation with a reference, structure by structure.

    Parameters
    ----------
    reference, test : path, LabelImage, SimpleITK.Image or ndarray
        Label maps or binary masks. NumPy arrays need ``spacing`` (mm, array-axis order).
    spacing : tuple of float, optional
        Voxel size in mm in **array-axis order** (``(z, y, x)`` for 3-D), for NumPy inputs only.
    labels : iterable, optional
        Label values or structure names to evaluate; default all non-zero labels of either image.
    metrics : str or list, optional
        Metric or group names (see :func:`segmetrics.registry.metric_specs`); default all.
    params : Parameters, optional
        Metric parameters (HD percentile, NSD tolerance in mm, MSI levels, ...).
    resample_to : {None, "reference"}
        ``"reference"`` resamples the test onto the reference grid (nearest neighbour);
        otherwise a grid mismatch raises :class:`~segmetrics.geometry.GeometryMismatchError`.
    progress : callable, optional
        Called as ``progress(done, total, structure_name)`` after each structure.
    """
    from .io import load_label_image

    params = params or Parameters()
    reference = load_label_image(reference, spacing)
    test = load_label_image(test, spacing)
    notes = []
    if resample_to == "reference":
        if reference.array.shape != test.array.shape or not np.allclose(reference.spacing, test.spacing):
            notes.append("test resampled onto the reference grid (nearest neighbour)")
        test = resample_nearest(test, reference)
    elif resample_to is not None:
        raise ValueError(f"resample_to must be None or 'reference', got {resample_to!r}")
    check_same_geometry(reference, test)

    selection = resolve_selection(metrics)
    groups = all_groups()
    pairs = _structure_pairs(reference, test, labels)
    results = []
    for index, (name, ref_label, test_label) in enumerate(pairs):
        pair = StructurePair(
            name=name,
            reference=_mask(reference, ref_label),
            test=_mask(test, test_label),
            spacing=reference.spacing,
            image=reference,
        )
        values = []
        for group_name, wanted in selection.items():
            computed = groups[group_name].compute(pair, params)
            values += [v for v in computed if v.metric in wanted]
        results.append(StructureResult(name, ref_label, test_label, values, pair.extras))
        if progress is not None:
            progress(index + 1, len(pairs), name)
    return ComparisonResult(results, notes)


__all__ = ["compare", "ComparisonResult", "StructureResult", "Parameters", "Status"]
