"""Memory of the process that runs a batch: it must not grow with the number of records.

A UKBOB-sized run (51,761 subjects × 72 classes, about 100 million records) cannot hold its
records in the submitting process. Synthetic cases (no file is read) produce many records
cheaply; Python's allocations are measured with :mod:`tracemalloc` on N and on 4N cases.
"""
import json
import tracemalloc

import pytest

from segmetrics.evaluation import batch
from segmetrics.evaluation.batch import Case, CaseOutcome, read_results, run_batch

RECORDS_PER_CASE = 200


def synthetic_evaluate(case, **job):
    """``RECORDS_PER_CASE`` records of one case, distinct values (no file is read)."""
    number = int(case.case_id[4:])
    records = [{"case_id": case.case_id, "structure": f"structure {index}", "reference_label": index,
                "test_label": index, "metric": "dice", "value": number + index / RECORDS_PER_CASE, "unit": "",
                "status": "ok", "params": {}} for index in range(RECORDS_PER_CASE)]
    return CaseOutcome(case.case_id, "ok", records, diagonal_mm=100.0, voxel_mm=1.0)


def _cases(count):
    return [Case(f"case{index:05d}", "reference.nii.gz", "test.nii.gz") for index in range(count)]


def _peak_bytes(cases, output):
    """Peak of Python's traced allocations (bytes) while ``run_batch`` runs ``cases`` into ``output``
    (after a first run of one case elsewhere, which imports what the run needs)."""
    run_batch(_cases(1), output.with_name(f"{output.name}-imports"), progress=False, workers=0,
              evaluate=synthetic_evaluate)
    tracemalloc.start()
    try:
        run_batch(cases, output, progress=False, workers=0, evaluate=synthetic_evaluate)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_submitting_process_memory_does_not_grow_with_the_records(tmp_path, monkeypatch):
    monkeypatch.setattr(batch, "PARQUET_GROUP_ROWS", 500)  # results.parquet is written a group at a time
    few, many = 8, 32
    peak_few = _peak_bytes(_cases(few), tmp_path / "few")
    peak_many = _peak_bytes(_cases(many), tmp_path / "many")
    one_case = len((tmp_path / "few" / "results.jsonl").read_bytes()) / few  # bytes of one case's records as text
    # Holding the records would add at least their text per added case (about 5 × that as dicts); what
    # grows with the cases (the case list, the log index) is a few hundred bytes per case.
    assert peak_many - peak_few < 0.1 * one_case * (many - few), (peak_few, peak_many, one_case)
    # the files hold every record, in case order, resumable: a second run redoes nothing
    records = read_results(tmp_path / "many")
    assert len(records) == many * RECORDS_PER_CASE
    assert [r["case_id"] for r in records[::RECORDS_PER_CASE]] == [c.case_id for c in _cases(many)]
    assert records[-1]["value"] == many - 1 + (RECORDS_PER_CASE - 1) / RECORDS_PER_CASE
    again = run_batch(_cases(many), tmp_path / "many", progress=False, workers=0, evaluate=synthetic_evaluate)
    assert again.computed == [] and len(again.skipped) == many
    pq = pytest.importorskip("pyarrow.parquet")  # written a row group of 500 records at a time
    table = pq.read_table(tmp_path / "many" / "results.parquet")
    assert table.to_pydict()["value"] == [r["value"] for r in records] and table.num_rows == len(records)


@pytest.mark.parametrize("lines, expected", [
    (['{"case_id": "a", "status": "ok"}', '{"case_id": "b", "sta'], ["a"]),  # cut by a kill: ignored
    (['{"case_id": "a", "status": "ok"}', '', '{"case_id": "b", "status": "ok"}'], ["a", "b"]),
])
def test_case_log_with_a_cut_last_line(tmp_path, lines, expected):
    from segmetrics.evaluation.batch import read_case_log

    (tmp_path / "cases.jsonl").write_text("\n".join(lines))
    assert list(read_case_log(tmp_path)) == expected


def test_a_broken_line_before_the_last_is_an_error(tmp_path):
    from segmetrics.evaluation.batch import read_case_log

    (tmp_path / "cases.jsonl").write_text('{"case_id": "a", "sta\n{"case_id": "b", "status": "ok"}\n')
    with pytest.raises(json.JSONDecodeError):
        read_case_log(tmp_path)
