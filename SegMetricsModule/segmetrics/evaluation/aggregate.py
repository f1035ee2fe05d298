"""Dataset statistics of batch records: per class and overall, with bootstrap CIs and worst cases.

UKBOB-style: every metric is summarised per class (structure) and then over all classes and
subjects together. By default the statistics are over the defined (finite) values, and the misses
(``test_empty`` / ``reference_empty`` pairs) are counted beside every mean and listed. An empty-mask
penalty (a stated constant such as ``373.13`` mm, or the image diagonal) replaces a missed structure's
infinite distances only when asked for; it is applied here, at aggregation only, and the per-case
records keep ``inf`` and their status.

:func:`aggregate` reads the records once, one at a time (a list, or :func:`~segmetrics.evaluation.batch.iter_results`
streaming ``results.jsonl``), and keeps of each only what the exact statistics need: its value (8 bytes)
and its case (4 bytes), grouped by class and metric; medians, percentile bootstrap CIs and standard
deviations are then computed on these columns exactly as on the whole records.
"""
from __future__ import annotations

import bisect
import math
from array import array
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from ..registry import Status

#: Structure name of the rows that pool every class and subject.
OVERALL = "(all classes)"
#: Statuses whose non-finite distances the penalty replaces (exactly one side is empty).
PENALISED_STATUSES = (Status.TEST_EMPTY, Status.REFERENCE_EMPTY)


def _metric_info() -> dict:
    """``{metric: (unit, better)}`` from the registry."""
    from ..registry import metric_specs

    return {name: (spec.unit, spec.better) for name, spec in metric_specs().items()}


def describe_penalty(penalty) -> str:
    """One sentence naming the empty-mask penalty policy, for reports."""
    if penalty in (None, "none"):
        return ("No empty-mask penalty (default): the statistics are over the defined values; the distances of "
                "missed structures (test_empty) and of structures only in the test (reference_empty) are "
                "infinite, left out, and counted beside every mean ('misses').")
    what = "the diagonal of that case's reference image (mm)" if penalty == "diagonal" else f"{float(penalty):g} mm"
    return ("Empty-mask penalty: a distance metric (mm, lower is better) that is infinite or undefined because "
            f"exactly one mask is empty (status {' / '.join(PENALISED_STATUSES)}) counts as {what}. "
            "Both-empty pairs stay undefined and are left out.")


def apply_penalty(records, penalty="none", diagonals=None, info=None) -> list:
    """Return copies of ``records`` with ``value`` penalised where the policy says so.

    Parameters
    ----------
    records : list of dict
        Batch records (``case_id``, ``structure``, ``metric``, ``value``, ``unit``, ``status``).
    penalty : {"none", "diagonal"} or float
        ``"none"`` (default): no change; a number: that many mm (e.g. 373.13 as in BraTS);
        ``"diagonal"``: the case's reference image diagonal in mm (from ``diagonals``), which depends on
        the field of view.
    diagonals : dict, optional
        ``{case_id: diagonal in mm}``; needed for ``"diagonal"``.

    Each returned record has ``penalised`` (bool) and ``raw_value`` (the value before).
    """
    info = _metric_info() if info is None else info
    return [_penalised(record, penalty, diagonals, info) for record in records]


def _penalised(record: dict, penalty, diagonals, info: dict) -> dict:
    """A copy of one record after the penalty (see :func:`apply_penalty`)."""
    value = record["value"]
    unit, better = info.get(record["metric"], (record.get("unit"), None))
    hit = (penalty not in (None, "none") and unit == "mm" and better == "lower"
           and not math.isfinite(value) and record["status"] in PENALISED_STATUSES)
    if hit:
        value = float((diagonals or {}).get(record["case_id"], math.nan)) if penalty == "diagonal" else float(penalty)
    return {**record, "value": value, "raw_value": record["value"], "penalised": hit}


class ReadOnce:
    """``Aggregate.records`` when :func:`aggregate` read its records from an iterator: they were not
    kept, and iterating this raises :class:`TypeError` rather than showing no records."""

    def __iter__(self):
        raise TypeError("aggregate() read its records from an iterator and did not keep them; give it a list "
                        "(e.g. from read_results) for a report that shows every record")


def bootstrap_ci(values, groups, *, confidence=0.95, n_boot=2000, seed=0):
    """Percentile bootstrap CI of the mean, resampling whole ``groups`` (cases) with replacement.

    Resampling cases rather than single values keeps the structures of one subject together:
    ``scipy.stats.bootstrap`` resamples the per-case (sum, count) pairs, in the sorted order of the
    group labels (case ids, or integers ranking them), and the statistic is Σ sums / Σ counts.
    Returns ``(low, high)``; NaN when fewer than two groups.
    """
    from scipy.stats import bootstrap

    values = np.asarray(values, dtype=float)
    names, index = np.unique(np.asarray(groups), return_inverse=True)
    if len(names) < 2:
        return math.nan, math.nan
    sums = np.bincount(index, weights=values)
    counts = np.bincount(index).astype(float)
    if np.ptp(sums / counts) == 0:  # every case has the same mean: every resample has it too
        return float(sums[0] / counts[0]), float(sums[0] / counts[0])
    result = bootstrap((sums, counts), lambda s, c, axis=-1: s.sum(axis=axis) / c.sum(axis=axis), paired=True,
                       vectorized=True, n_resamples=n_boot, confidence_level=confidence, method="percentile",
                       random_state=np.random.default_rng(seed))
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def summarize(values, cases, statuses, *, confidence=0.95, n_boot=2000, seed=0) -> dict:
    """Mean, median, std (ddof=1), min, max, bootstrap CI and status counts of one group.

    Values that are not finite are left out of the numbers but counted in ``n`` and ``statuses``.
    """
    values = np.asarray(values, dtype=float)
    used = np.isfinite(values)
    finite, finite_cases = values[used], np.asarray(cases)[used]
    low, high = bootstrap_ci(finite, finite_cases, confidence=confidence, n_boot=n_boot, seed=seed)
    stat = (lambda f: float(f(finite))) if finite.size else (lambda f: math.nan)
    return {
        "n": int(values.size), "n_used": int(finite.size),
        "mean": stat(np.mean), "median": stat(np.median),
        "std": float(np.std(finite, ddof=1)) if finite.size > 1 else math.nan,
        "min": stat(np.min), "max": stat(np.max), "ci_low": low, "ci_high": high,
        "statuses": dict(sorted(Counter(statuses).items())),
    }


@dataclass
class Aggregate:
    """Aggregated statistics of a batch.

    ``rows``: one dict per (structure, metric), plus an :data:`OVERALL` row per metric whose
    ``class_mean`` is the class-balanced mean (mean of the per-class means).
    Every row counts its misses: ``n_test_empty`` (structure missed by the test) and
    ``n_reference_empty`` (structure only in the test).
    ``worst``: ``{metric: [record, ...]}``, worst first (after the penalty).
    ``records``: the input records after the penalty (see :func:`apply_penalty`) when :func:`aggregate`
    was given a list, :class:`ReadOnce` when it read them from an iterator.
    ``misses``: ``[{"case_id", "structure", "status"}]`` of every case × structure with exactly one
    empty mask. ``n_cases`` counts the cases with records (evaluated), ``n_listed`` every case of
    the run: evaluated, failed and not run. ``voxel_mm`` is the smallest voxel size of the cases
    (mm; None when unknown), which bounds the precision of the distances displayed.
    """

    rows: list
    worst: dict
    penalty: str
    confidence: float
    n_cases: int
    failed: dict = field(default_factory=dict)
    records: list | ReadOnce = field(default_factory=list)
    misses: list = field(default_factory=list)
    n_listed: int = 0
    voxel_mm: float | None = None

    def case_count(self) -> str:
        """Every case of the run and what became of it: ``11 cases (8 evaluated, 3 failed)``."""
        parts = [f"{self.n_cases} evaluated", f"{len(self.failed)} failed"]
        not_run = self.n_listed - self.n_cases - len(self.failed)
        if not_run > 0:
            parts.append(f"{not_run} not run")
        return f"{self.n_listed} cases ({', '.join(parts)})"

    def metrics(self) -> list:
        return list(dict.fromkeys(r["metric"] for r in self.rows))

    def row(self, structure: str, metric: str) -> dict:
        """The statistics row of one structure (or :data:`OVERALL`) and metric; ``KeyError`` if absent."""
        for r in self.rows:
            if r["structure"] == structure and r["metric"] == metric:
                return r
        raise KeyError(f"no aggregate row for structure {structure!r} and metric {metric!r}")


@dataclass
class _Column:
    """The values of one group (a class and metric) in the order read, with the index of each value's
    case: 12 bytes per value; its unit (of its first record), statuses and penalised count."""

    unit: str
    values: array = field(default_factory=lambda: array("d"))
    cases: array = field(default_factory=lambda: array("i"))
    statuses: Counter = field(default_factory=Counter)
    n_penalised: int = 0

    def add(self, record: dict, case: int) -> None:
        self.values.append(float(record["value"]))
        self.cases.append(case)
        self.statuses[record["status"]] += 1
        self.n_penalised += bool(record["penalised"])


def _row(columns: list, ranks, better, options) -> dict:
    """:func:`summarize` statistics of ``columns`` pooled in their order, with their unit, better
    direction, penalised values and misses counted. ``ranks`` maps case indices to the rank of
    the case id in sorted order (the order the bootstrap takes the cases in)."""
    values = np.concatenate([np.frombuffer(c.values, dtype=float) for c in columns])
    cases = ranks[np.concatenate([np.frombuffer(c.cases, dtype=np.int32) for c in columns])]
    statuses = sum((c.statuses for c in columns), Counter())
    row = {"unit": columns[0].unit, "better": better, "n_penalised": sum(c.n_penalised for c in columns),
           **summarize(values, cases, statuses.elements(), **options)}
    row.update(n_test_empty=row["statuses"].get(Status.TEST_EMPTY, 0),
               n_reference_empty=row["statuses"].get(Status.REFERENCE_EMPTY, 0))
    return row


class _Worst:
    """The ``n`` worst records of one metric read so far, worst first; ties keep the reading order."""

    def __init__(self, n: int, direction: str):
        self.n, self.sign, self.ranked = n, 1.0 if direction == "higher" else -1.0, []

    def add(self, record: dict, position: int) -> None:
        if math.isnan(record["value"]) or self.n <= 0:
            return
        key = (self.sign * record["value"], position)
        if len(self.ranked) < self.n or key < self.ranked[-1][0]:
            bisect.insort(self.ranked, (key, record), key=lambda item: item[0])
            del self.ranked[self.n:]

    def records(self) -> list:
        return [record for _key, record in self.ranked]


def aggregate(records, *, penalty="none", diagonals=None, confidence=0.95, n_boot=2000, seed=0,
              n_worst=3, failed=None, case_ids=None, voxel_mm=None) -> Aggregate:
    """Summarise batch records per class and overall (see :func:`summarize`), in one pass over them.

    Parameters
    ----------
    records : iterable of dict
        From :func:`segmetrics.evaluation.batch.read_results` (a list, kept penalised in
        ``Aggregate.records`` for the report) or :func:`segmetrics.evaluation.batch.iter_results` (an
        iterator, read once: 12 bytes kept per record), values as floats, NaN/inf kept.
    penalty, diagonals
        Empty-mask policy, see :func:`apply_penalty` (default ``"none"``: statistics over the defined
        values, misses counted); it is applied here only.
    confidence, n_boot, seed
        Bootstrap CI level, resamples and seed (results are reproducible).
    n_worst : int
        Worst case × structure records listed per metric.
    failed : dict, optional
        ``{case_id: error}`` of failed cases, carried into the report.
    case_ids : iterable of str, optional
        Every case of the run (a manifest's rows), so that reports count them all; default the
        cases with records and the failed ones.
    voxel_mm : float, optional
        The smallest voxel size of the cases in mm (display rounding of distances).
    """
    info = _metric_info()
    kept = None if iter(records) is records else []
    columns, cases, better, worst, misses = {}, {}, {}, {}, {}
    for position, record in enumerate(_penalised(r, penalty, diagonals, info) for r in records):
        if kept is not None:
            kept.append(record)
        structure, metric = record["structure"], record["metric"]
        case = cases.setdefault(record["case_id"], len(cases))
        if metric not in better:
            better[metric] = info.get(metric, (None, None))[1]
            if better[metric] in ("higher", "lower"):  # e.g. volumes have no worse direction
                worst[metric] = _Worst(n_worst, better[metric])
        column = columns.get((structure, metric))
        if column is None:
            column = columns[(structure, metric)] = _Column(record["unit"])
        column.add(record, case)
        if metric in worst:
            worst[metric].add(record, position)
        if record["status"] in PENALISED_STATUSES:
            misses.setdefault((record["case_id"], structure), record["status"])
    ranks = np.empty(len(cases), dtype=np.int32)
    ranks[np.argsort(np.array(list(cases), dtype=str), kind="stable")] = np.arange(len(cases), dtype=np.int32)
    options = {"confidence": confidence, "n_boot": n_boot, "seed": seed}
    per_class = [{"structure": structure, "metric": metric, **_row([column], ranks, better[metric], options)}
                 for (structure, metric), column in columns.items()]
    # the overall rows pool the values class by class (classes in the order first read), each class's in the order read
    classes = {structure: index for index, structure in enumerate(dict.fromkeys(s for s, _metric in columns))}
    by_metric = {}
    for (structure, metric), column in sorted(columns.items(), key=lambda item: classes[item[0][0]]):
        by_metric.setdefault(metric, []).append(column)
    overall = []
    for metric, pooled in by_metric.items():
        means = np.array([row["mean"] for row in per_class if row["metric"] == metric])
        class_mean = float(np.mean(means[np.isfinite(means)])) if np.isfinite(means).any() else math.nan
        overall.append({"structure": OVERALL, "metric": metric, **_row(pooled, ranks, better[metric], options),
                        "class_mean": class_mean})
    listed = set(cases) | set(failed or {}) | set(case_ids or ())
    return Aggregate(per_class + overall, {metric: ranked.records() for metric, ranked in worst.items()},
                     describe_penalty(penalty), confidence, len(cases), dict(failed or {}),
                     ReadOnce() if kept is None else kept,
                     [{"case_id": case_id, "structure": structure, "status": status}
                      for (case_id, structure), status in misses.items()], len(listed), voxel_mm)
