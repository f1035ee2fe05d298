"""Write comparison results as a terminal table, CSV or JSON records.

JSON cannot hold NaN or infinity: undefined values are written as ``null`` and infinite ones as
the strings ``"inf"`` / ``"-inf"``; the ``status`` field says why.

Every CSV the package writes goes through :func:`safe_csv_cell`: a text cell that a spreadsheet
would run as a formula (a structure or case named ``=HYPERLINK(...)``) gets a leading ``'``.
"""
from __future__ import annotations

import csv
import io as _io
import json
import math
import sys
from pathlib import Path

RECORD_FIELDS = ("structure", "reference_label", "test_label", "metric", "value", "unit", "status", "params")
#: First characters that make a spreadsheet evaluate a text cell as a formula (OWASP "CSV injection").
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


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


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def safe_csv_cell(value):
    """``value`` safe to open in a spreadsheet: text starting like a formula gets a leading ``'``.

    Text starting with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is prefixed with a
    single quote (OWASP's advice against CSV injection), so Excel, LibreOffice or Google Sheets show
    it as text instead of running it. Numbers, and text that reads as a plain number (``-0.5``,
    ``-inf``), are left unchanged. A reader wanting the original drops a leading ``'`` when the
    rest starts with one of those characters.
    """
    if isinstance(value, str) and value.startswith(FORMULA_STARTS) and not _is_number(value):
        return "'" + value
    return value


def safe_csv_row(row: dict) -> dict:
    """:func:`safe_csv_cell` applied to every cell of a ``csv.DictWriter`` row."""
    return {key: safe_csv_cell(value) for key, value in row.items()}


def record_row(record: dict) -> dict:
    """A record as one flat row (``params`` as a JSON object string), text kept exactly (e.g. Parquet)."""
    return {**record, "params": json.dumps(record.get("params", {}), sort_keys=True)}


def csv_row(record: dict) -> dict:
    """A record ready for ``csv.DictWriter``: :func:`record_row` with its text cells made safe."""
    return safe_csv_row(record_row(record))


def csv_text(rows, fields) -> str:
    """CSV text with a header line and one line per row (dicts; keys not in ``fields`` ignored).

    Every cell goes through :func:`safe_csv_cell`.
    """
    buffer = _io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(fields), extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(safe_csv_row(row) for row in rows)
    return buffer.getvalue()


def records_to_csv(records, fields=RECORD_FIELDS) -> str:
    """CSV text, one record per line (see :func:`csv_row`)."""
    return csv_text((record_row(record) for record in records), fields)


def write_text(path, text: str) -> None:
    """Write ``text`` to the file ``path`` in UTF-8; an OS error at write time (a full disk) names the file."""
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as error:
        if error.filename is None:
            raise OSError(error.errno, error.strerror, str(path)) from error
        raise


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

        console = Console(file=_io.StringIO(), width=160) if path else Console()
        for table in result_tables(result):
            console.print(table)
        if path:
            write_text(path, console.file.getvalue())
        for note in result.notes:
            print(f"note: {note}", file=sys.stderr)
        return
    text = records_to_json(result.records()) if fmt == "json" else records_to_csv(result.records())
    if path:
        write_text(path, text)
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
    write_text(path, csv_text(rows, fields))
