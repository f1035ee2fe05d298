"""Dataset statistics in one pass over the records: exact, and 12 bytes kept per record.

The truth is computed here by brute force from the whole list (numpy on each class × metric
group, a full sort for the worst cases); :func:`aggregate` must give exactly the same numbers
whether it gets a list or reads the records one at a time from ``results.jsonl``.
"""
import math
import random
import tracemalloc

import numpy as np
import pytest

from segmetrics.evaluation.aggregate import OVERALL, aggregate, bootstrap_ci
from segmetrics.evaluation.batch import Case, CaseOutcome, iter_results, run_batch

#: metric -> (unit, better): what the registry says of the metrics used here.
INFO = {"dice": ("", "higher"), "hd95_mm": ("mm", "lower"), "volume_ml": ("ml", None)}


def _records(n_cases=12, seed=4):
    """Records of 3 classes × 3 metrics, with ties, misses (inf) and undefined values (NaN)."""
    rng = random.Random(seed)
    records = []
    for case in rng.sample(range(1000), n_cases):  # case ids not in sorted order
        for structure in rng.sample(["liver", "spleen", "kidney"], 3):
            status = rng.choice(["ok"] * 5 + ["test_empty", "both_empty"])
            for metric in ("volume_ml", "dice", "hd95_mm"):
                value = round(rng.uniform(0, 4), 1)  # ties
                if status == "test_empty" and metric == "hd95_mm":
                    value = math.inf
                elif status == "both_empty":
                    value = math.nan
                records.append({"case_id": f"c{case}", "structure": structure, "reference_label": 1, "test_label": 1,
                                "metric": metric, "value": value, "unit": INFO[metric][0], "status": status,
                                "params": {}})
    return records


def test_statistics_equal_brute_force_from_a_list_and_from_a_stream(monkeypatch):
    monkeypatch.setattr("segmetrics.evaluation.aggregate._metric_info", lambda: INFO)
    records = _records()
    agg = aggregate(records, penalty=50.0, n_boot=200)
    streamed = aggregate(iter(records), penalty=50.0, n_boot=200)
    assert repr(streamed.rows) == repr(agg.rows) and streamed.worst == agg.worst and streamed.misses == agg.misses
    penalised = [{**r, "value": 50.0 if r["metric"] == "hd95_mm" and r["status"] == "test_empty" else r["value"]}
                 for r in records]
    for structure in ("liver", "spleen", "kidney", OVERALL):
        for metric in INFO:
            group = [r for r in penalised if r["metric"] == metric and structure in (r["structure"], OVERALL)]
            if structure == OVERALL:  # pooled class by class, classes in the order first read
                classes = list(dict.fromkeys(r["structure"] for r in penalised))
                group.sort(key=lambda r: classes.index(r["structure"]))
            values = np.array([r["value"] for r in group])
            finite = np.isfinite(values)
            row = agg.row(structure, metric)
            assert (row["n"], row["n_used"]) == (len(group), finite.sum())
            assert row["mean"] == np.mean(values[finite]) and row["median"] == np.median(values[finite])
            assert row["std"] == np.std(values[finite], ddof=1)
            assert (row["ci_low"], row["ci_high"]) == bootstrap_ci(values[finite],
                                                                    [r["case_id"] for r, f in zip(group, finite) if f],
                                                                    n_boot=200)
    class_means = [agg.row(structure, "dice")["mean"] for structure in ("liver", "spleen", "kidney")]
    assert agg.row(OVERALL, "dice")["class_mean"] == pytest.approx(np.mean(class_means), abs=1e-15)
    # the worst: lowest Dice, highest HD95 (the penalised misses first), ties in the order read; none for volumes
    for metric, sign in (("dice", 1), ("hd95_mm", -1)):
        ranked = sorted((r for r in penalised if r["metric"] == metric and not math.isnan(r["value"])),
                        key=lambda r: sign * r["value"])  # sorted() is stable
        assert [(w["case_id"], w["structure"], w["value"]) for w in agg.worst[metric]] == \
               [(r["case_id"], r["structure"], r["value"]) for r in ranked[:3]]
    assert "volume_ml" not in agg.worst
    missed = list(dict.fromkeys((r["case_id"], r["structure"]) for r in records if r["status"] == "test_empty"))
    assert [(m["case_id"], m["structure"]) for m in agg.misses] == missed
    assert [r["raw_value"] for r in agg.records] == [r["value"] for r in records]
    with pytest.raises(TypeError, match="iterator"):  # not kept: never an empty list of records
        list(streamed.records)


def _stream(n_cases):
    """Records made one at a time (none is kept): 50 classes × 2 metrics per case."""
    for case in range(n_cases):
        for structure in range(50):
            for metric in ("dice", "hd95_mm"):
                yield {"case_id": f"case{case:05d}", "structure": f"class {structure}", "metric": metric,
                       "value": (case * 7 + structure) % 11 / 10, "unit": INFO[metric][0], "status": "ok"}


def _peak_bytes(records):
    tracemalloc.start()
    try:
        aggregate(records, n_boot=20)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_per_record_is_bounded(monkeypatch):
    monkeypatch.setattr("segmetrics.evaluation.aggregate._metric_info", lambda: INFO)
    aggregate(_stream(2), n_boot=20)  # imports
    few, many = 50, 200
    growth = _peak_bytes(_stream(many)) - _peak_bytes(_stream(few))
    # 12 bytes per record kept, plus the statistics' temporary arrays of one group; a record as a
    # dict is about 1 KB
    assert growth / ((many - few) * 100) < 60, growth


def test_batch_results_aggregated_from_the_file(tmp_path, monkeypatch):
    monkeypatch.setattr("segmetrics.evaluation.aggregate._metric_info", lambda: INFO)
    records = _records()
    by_case = {}
    for record in records:
        by_case.setdefault(record["case_id"], []).append(record)
    cases = [Case(case_id, "reference.nii.gz", "test.nii.gz") for case_id in by_case]
    monkeypatch.setattr("segmetrics.evaluation.batch.evaluate_case",
                        lambda case, **job: CaseOutcome(case.case_id, "ok", by_case[case.case_id]))
    run_batch(cases, tmp_path, workers=0, progress=False)
    expected, got = aggregate(records, n_boot=100), aggregate(iter_results(tmp_path), n_boot=100)
    assert repr(got.rows) == repr(expected.rows) and got.worst == expected.worst
