"""Write comparison results as a terminal table, CSV or JSON records.

JSON cannot hold NaN or infinity: undefined values are written as ``null`` and infinite ones as
the strings ``"inf"`` / ``"-inf"``; the ``status`` field says why.
"""
from __future__ import annotations

import csv
import io as _io
import json
import math
import sys
from pathlib import Path

RECORD_FIELDS = ("structure", "reference_label", "test_label", "metric", "value", "unit", "status", "params")


def json_value(value):
    """A float made JSON-safe: NaN → None, ±inf → "inf"/"-inf"."""
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
    return value


def records_to_json(records) -> str:
    """JSON list of records with JSON-safe values."""
    return json.dumps([{**r, "value": json_value(r["value"])} for r in records], indent=2, default=str)


def csv_row(record: dict) -> dict:
    """A record ready for ``csv.DictWriter``: ``params`` as a JSON object string."""
    return {**record, "params": json.dumps(record.get("params", {}), sort_keys=True)}


def records_to_csv(records, fields=RECORD_FIELDS) -> str:
    """CSV text, one record per line (see :func:`csv_row`)."""
    buffer = _io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(fields), extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(csv_row(record) for record in records)
    return buffer.getvalue()


def format_value(value) -> str:
    """Compact text for a table cell."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "NaN"
    if isinstance(value, float):
        return "inf" if math.isinf(value) else f"{value:.4g}"
    return str(value)


def result_tables(result, structures_per_table: int = 6):
    """Rich tables with one row per metric (unit shown) and one column per structure.

    Structures are split over several tables so that each fits a terminal.
    """
    from rich.table import Table

    metrics = list(dict.fromkeys((v.metric, v.unit) for s in result.structures for v in s.values))
    tables = []
    for start in range(0, len(result.structures), structures_per_table):
        chunk = result.structures[start:start + structures_per_table]
        table = Table(show_lines=False)
        table.add_column("metric", overflow="fold")
        table.add_column("unit")
        for structure in chunk:
            table.add_column(structure.structure, justify="right", overflow="fold")
        statuses = [s.status for s in chunk]
        table.add_row("status", "", *statuses, end_section=True)
        for metric, unit in metrics:
            cells = []
            for structure in chunk:
                value = next((v.value for v in structure.values if v.metric == metric), None)
                cells.append("" if value is None else format_value(value))
            table.add_row(metric, unit, *cells)
        tables.append(table)
    if len(result.structures) > 1:
        tables.append(class_mean_table(result))
    return tables


def class_mean_table(result):
    """Mean of each metric across structures, with how many structures had a finite value."""
    from rich.table import Table

    table = Table(title="mean across structures (NaN, inf not averaged)")
    for column in ("metric", "unit", "mean", "structures used"):
        table.add_column(column, justify="right" if column in ("mean", "structures used") else "left")
    for metric, summary in result.class_means().items():
        table.add_row(metric, summary["unit"], format_value(summary["mean"]), f"{summary['n_used']}/{summary['n_total']}")
    return table


def write_result(result, fmt: str = "table", path=None) -> None:
    """Write a :class:`~segmetrics.compare.ComparisonResult` to ``path`` or standard output."""
    if fmt == "table":
        from rich.console import Console

        console = Console(file=open(path, "w"), width=160) if path else Console()
        for table in result_tables(result):
            console.print(table)
        if path:
            console.file.close()
        for note in result.notes:
            print(f"note: {note}", file=sys.stderr)
        return
    text = records_to_json(result.records()) if fmt == "json" else records_to_csv(result.records())
    if path:
        Path(path).write_text(text)
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")


def write_msi_slices(result, path) -> None:
    """Write the per-slice MSI rows of every structure (``extras["msi_slices"]``) to a CSV file."""
    rows = []
    for structure in result.structures:
        for row in structure.extras.get("msi_slices", []):
            row = row if isinstance(row, dict) else vars(row)
            rows.append({"structure": structure.structure, **row})
    fields = list(dict.fromkeys(key for row in rows for key in row)) or ["structure"]
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
