"""Dataset statistics of batch records: per class and overall, with bootstrap CIs and worst cases.

UKBOB-style: every metric is summarised per class (structure) and then over all classes and
subjects together. By default the statistics are over the defined (finite) values, and the misses
(``test_empty`` / ``reference_empty`` pairs) are counted beside every mean and listed. An empty-mask
penalty (a stated constant such as ``373.13`` mm, or the image diagonal) replaces a missed structure's
infinite distances only when asked for; it is applied here, at aggregation only, and the per-case
records keep ``inf`` and their status.
"""
from __future__ import annotations

import math
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
    out = []
    for record in records:
        value = record["value"]
        unit, better = info.get(record["metric"], (record.get("unit"), None))
        hit = (penalty not in (None, "none") and unit == "mm" and better == "lower"
               and not math.isfinite(value) and record["status"] in PENALISED_STATUSES)
        if hit:
            value = float((diagonals or {}).get(record["case_id"], math.nan)) if penalty == "diagonal" else float(penalty)
        out.append({**record, "value": value, "raw_value": record["value"], "penalised": hit})
    return out


def bootstrap_ci(values, groups, *, confidence=0.95, n_boot=2000, seed=0):
    """Percentile bootstrap CI of the mean, resampling whole ``groups`` (cases) with replacement.

    Resampling cases rather than single values keeps the structures of one subject together:
    ``scipy.stats.bootstrap`` resamples the per-case (sum, count) pairs and the statistic is
    Σ sums / Σ counts. Returns ``(low, high)``; NaN when fewer than two groups.
    """
    from scipy.stats import bootstrap

    values = np.asarray(values, dtype=float)
    names, index = np.unique(np.asarray(groups, dtype=str), return_inverse=True)
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
    finite, finite_cases = values[used], np.asarray(cases, dtype=str)[used]
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
    ``records``: the input records after the penalty (see :func:`apply_penalty`).
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
    records: list = field(default_factory=list)
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


def _statistics(frame, keys, better: dict, options) -> list:
    """One row of :func:`summarize` statistics per group of ``frame`` by the columns ``keys`` (which
    include ``metric``), in the order of first appearance, with the group's unit, better direction
    (``better[metric]``), penalised values and misses counted."""
    rows = []
    for key, group in frame.groupby(keys, sort=False):
        row = dict(zip(keys, key))
        row.update(unit=group["unit"].iloc[0], better=better[row["metric"]], n_penalised=int(group["penalised"].sum()),
                   **summarize(group["value"], group["case_id"], group["status"], **options))
        row.update(n_test_empty=row["statuses"].get(Status.TEST_EMPTY, 0),
                   n_reference_empty=row["statuses"].get(Status.REFERENCE_EMPTY, 0))
        rows.append(row)
    return rows


def aggregate(records, *, penalty="none", diagonals=None, confidence=0.95, n_boot=2000, seed=0,
              n_worst=3, failed=None, case_ids=None, voxel_mm=None) -> Aggregate:
    """Summarise batch records per class and overall (see :func:`summarize`), grouped with pandas.

    Parameters
    ----------
    records : list of dict
        From :func:`segmetrics.evaluation.batch.read_results` (values as floats, NaN/inf kept).
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
    import pandas as pd

    info = _metric_info()
    records = apply_penalty(records, penalty, diagonals, info)
    columns = ["case_id", "structure", "metric", "value", "unit", "status", "penalised"]
    frame = pd.DataFrame([{k: r[k] for k in columns} for r in records], columns=columns)
    frame["value"] = frame["value"].astype(float)
    better = {metric: info.get(metric, (None, None))[1] for metric in frame["metric"].unique()}
    options = {"confidence": confidence, "n_boot": n_boot, "seed": seed}
    per_class = _statistics(frame, ["structure", "metric"], better, options)
    class_means = pd.DataFrame(per_class, columns=["metric", "mean"]).groupby("metric")["mean"].agg(
        lambda means: float(np.mean(means[np.isfinite(means)])) if np.isfinite(means).any() else math.nan)
    # the overall rows pool the values class by class (each class's values together, classes in order)
    in_class_order = frame.iloc[np.argsort(pd.factorize(frame["structure"])[0], kind="stable")]
    overall = [{"structure": OVERALL, **row, "class_mean": class_means[row["metric"]]}
               for row in _statistics(in_class_order, ["metric"], better, options)]
    worst = {}
    for metric, direction in better.items():
        if direction in ("higher", "lower"):  # e.g. volumes have no worse direction
            ranked = frame[(frame["metric"] == metric) & frame["value"].notna()]
            order = ranked["value"].sort_values(ascending=direction == "higher", kind="stable").index[:n_worst]
            worst[metric] = [records[i] for i in order]
    missed = frame[frame["status"].isin(PENALISED_STATUSES)].drop_duplicates(["case_id", "structure"])
    misses = missed[["case_id", "structure", "status"]].to_dict("records")
    failed = dict(failed or {})
    listed = set(frame["case_id"]) | set(failed) | set(case_ids or ())
    return Aggregate(per_class + overall, worst, describe_penalty(penalty), confidence, int(frame["case_id"].nunique()),
                     failed, records, misses, len(listed), voxel_mm)
