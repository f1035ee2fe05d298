"""Write comparison results as a terminal table, CSV or JSON records.

JSON cannot hold NaN or infinity: undefined values are written as ``null`` and infinite ones as
the strings ``"inf"`` / ``"-inf"``; the ``status`` field says why.

Every CSV the package writes goes through :func:`safe_csv_cell`: a text cell that a spreadsheet
would run as a formula (a structure or case named ``=HYPERLINK(...)``) gets a leading ``'``.
"""
from __future__ import annotations

import csv
import dataclasses
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


def json_record(record: dict) -> dict:
    """``record`` with its ``value`` made JSON-safe (:func:`json_value`)."""
    return {**record, "value": json_value(record["value"])}


def records_to_json(records) -> str:
    """JSON list of records with JSON-safe values."""
    return json.dumps([json_record(r) for r in records], indent=2, default=str)


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


#: Significant digits shown for distances and volumes in the terminal table.
DISPLAY_DIGITS = 3
#: Decimals shown for ratios (unit "1": Dice, NSD, MSI, ...) in the terminal table: 0.1 percentage point.
RATIO_DECIMALS = 3
#: Finest distance step shown, as a fraction of the smallest voxel size.
DISTANCE_STEP_VOXELS = 0.01
#: Column order of the compact terminal table (the metrics most reports need first), then registry order.
TABLE_PRIORITY = ("dice", "hd95_mm", "assd_mm", "nsd", "msi", "msi_3d", "hd_mm", "jaccard", "masd_mm",
                  "sensitivity", "precision", "volume_reference_ml", "volume_test_ml")
#: Column headings of the terminal table (full metric names in every file).
SHORT_NAMES = {
    "dice": "Dice", "jaccard": "IoU", "sensitivity": "Sens", "precision": "Prec", "volumetric_similarity": "VolSim",
    "volume_reference_ml": "Vref_ml", "volume_test_ml": "Vtest_ml", "false_positive_volume_ml": "FP_ml",
    "false_negative_volume_ml": "FN_ml", "hd_mm": "HD_mm", "hd95_mm": "HD95_mm", "hdp_mm": "HDp_mm",
    "assd_mm": "ASSD_mm", "masd_mm": "MASD_mm", "mean_distance_reference_to_test_mm": "MDrt_mm",
    "mean_distance_test_to_reference_mm": "MDtr_mm", "nsd": "NSD", "msi": "MSI", "msi_3d": "MSI3D",
    "ri_reference_mm": "RIref_mm", "ri_test_mm": "RItest_mm", "rr": "RR", "ard_mm": "ARD_mm",
}


#: Metrics whose values depend on the MSI levels: their σ is shown beside them (:func:`msi_sigma`).
MSI_METRICS = ("msi", "msi_3d")


def msi_sigma(params: dict, compact: bool = False) -> str:
    """The Gaussian widths σ = 10 / level of an MSI value's weights, from the value's ``params``
    (``il``, ``ol``, ``units``): ``σ 10 mm`` when the inside and outside levels agree, else
    ``σ 10 mm inside / 1 mm outside``; pixel units say ``px``. ``compact`` (table headings):
    ``σ10mm``, ``σ10|1mm`` (inside|outside)."""
    unit = "px" if params.get("units") == "pixel" else "mm"
    inside, outside = (f"{10 / float(params[level]):.3g}" for level in ("il", "ol"))
    if compact:
        return f"σ{inside}{unit}" if inside == outside else f"σ{inside}|{outside}{unit}"
    return f"σ {inside} {unit}" if inside == outside else f"σ {inside} {unit} inside / {outside} {unit} outside"


def sigma_of(metric: str, params_of_values, compact: bool = False) -> str:
    """:func:`msi_sigma` of ``metric`` from the first of ``params_of_values`` (the ``params`` of its
    values) that holds the levels; ``""`` for a metric that has no σ or values without levels."""
    if metric not in MSI_METRICS:
        return ""
    params = next((p for p in params_of_values if isinstance(p, dict) and "il" in p), None)
    return msi_sigma(params, compact) if params else ""


def display_decimals(value: float, unit: str, voxel_mm: float | None = None) -> int:
    """Decimals shown for ``value`` in the terminal table (display only; files keep full precision).

    Ratios (unit ``"1"``): :data:`RATIO_DECIMALS`. Whole counts (unit ``"count"``): none. Other
    units (and means of counts): :data:`DISPLAY_DIGITS` significant digits; distances (mm) never
    finer than :data:`DISTANCE_STEP_VOXELS` of the smallest voxel size ``voxel_mm``: the last
    decimal shown is the finest power of ten not below that step (0.01 mm at 1 mm voxels; 0.1 mm
    at 3 mm voxels, whose step is 0.03 mm, so HD95 0.000108 mm there shows as 0.0).
    """
    if unit == "1":
        return RATIO_DECIMALS
    if unit == "count" and float(value).is_integer():  # a count, not a mean of counts
        return 0
    decimals = DISPLAY_DIGITS - 1 - math.floor(math.log10(abs(value))) if value else 0
    if unit == "mm" and voxel_mm:
        # 1e-9: a step of exactly a power of ten (0.1 mm voxels: 0.001 mm) is not lost to float rounding
        decimals = min(decimals, math.floor(math.log10(1 / (voxel_mm * DISTANCE_STEP_VOXELS)) + 1e-9))
    return max(0, decimals)


def rounding_note(voxel_mm: float | None) -> str:
    """How terminal tables round (:func:`display_decimals`), for a line under them; ``voxel_mm`` is the
    smallest voxel size in mm (None: unknown)."""
    step = f", distances not finer than {DISTANCE_STEP_VOXELS:g} voxel ({voxel_mm * DISTANCE_STEP_VOXELS:.2g} mm)" \
        if voxel_mm else ""
    return f"rounded for display: ratios to {RATIO_DECIMALS} decimals, other values to {DISPLAY_DIGITS} " \
           f"significant digits{step}"


def display_value(value, unit: str = "", voxel_mm: float | None = None) -> str:
    """``value`` rounded for the terminal (see :func:`display_decimals`); NaN shown as ``–``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.{display_decimals(float(value), unit, voxel_mm)}f}"


def _sort_key(value, better: str) -> tuple:
    """Worst first: high values first when lower is better (and for descriptive metrics), low values
    first when higher is better; undefined values last."""
    if value is None or math.isnan(value):
        return (1, 0.0)
    return (0, value if better == "higher" else -value)


def sorted_structures(result, metric: str | None) -> list:
    """The structures of ``result``, worst first by ``metric`` (its registry ``better`` direction)."""
    if metric is None:
        return list(result.structures)
    from ..registry import metric_specs

    specs = metric_specs()
    if metric not in specs:
        raise ValueError(f"--sort {metric}: unknown metric; known: {', '.join(specs)}")
    if metric not in result.metrics():
        raise ValueError(f"--sort {metric}: not computed; add it to --metrics")
    better = specs[metric].better

    def key(structure):
        value = next((v.value for v in structure.values if v.metric == metric), math.nan)
        return _sort_key(value, better)

    return sorted(result.structures, key=key)


def _columns(result) -> list:
    """Metrics of the table in :data:`TABLE_PRIORITY` order; ``hdp_mm`` left out when it repeats ``hd95_mm``."""
    metrics = result.metrics()
    if "hd95_mm" in metrics and result.params is not None and result.params.hd_percentile == 95:
        metrics = [m for m in metrics if m != "hdp_mm"]
    rank = {name: index for index, name in enumerate(TABLE_PRIORITY)}
    return sorted(metrics, key=lambda m: rank.get(m, len(rank)))


def _header(result, voxel_mm) -> str:
    """One line: structures, surface mode and the key parameters, grid."""
    parts = [f"{len(result.structures)} structures"]
    params = result.params
    if params is not None:
        parts += [f"surface mode {params.surface_mode}",
                  f"HD{params.hd_percentile:g} {params.hd_percentile_variant}",
                  f"NSD tolerance {params.nsd_tolerance_mm:g} mm",
                  f"MSI il {params.msi_il:g} / ol {params.msi_ol:g} ({params.msi_convention} convention): "
                  + msi_sigma({"il": params.msi_il, "ol": params.msi_ol,
                               "units": "pixel" if params.msi_convention == "fda" else params.msi_units})]
    grid = result.provenance.get("grid")
    if grid:
        shape = "×".join(map(str, grid["shape_zyx"]))
        spacing = "×".join(f"{s:g}" for s in grid["spacing_mm_zyx"])
        parts.append(f"grid {shape} voxels of {spacing} mm (z, y, x)")
    return " · ".join(parts)


def _footer(result, hidden: list, voxel_mm) -> list:
    """Lines under the table: misses, empty structures, hidden metrics, rounding rule, notes."""
    lines = []
    for status, meaning in (("test_empty", "missed by the test (reference only)"),
                            ("reference_empty", "test only (absent from the reference)"),
                            ("both_empty", "empty in both")):
        names = [s.structure for s in result.structures if status in s.status.split(", ")]
        if names:
            lines.append(f"{status}: {len(names)} {meaning}: {', '.join(names)}")
    if set(MSI_METRICS) & set(result.metrics()):
        lines.append("σ beside MSI: the width of its Gaussian weights, 10 / level (inside|outside the reference); "
                     "a larger σ forgives larger distances")
    if hidden:
        lines.append(f"{len(hidden)} more metrics not shown ({', '.join(hidden)}): --wide shows all, "
                     "--metrics chooses, files (--format csv/json) hold every value")
    lines.append(f"{rounding_note(voxel_mm)}; 'mean' is over the structures with a finite value; files keep "
                 "full precision")
    lines += [note if note.startswith("warning:") else f"note: {note}" for note in result.notes]
    return lines


def terminal_table():
    """An empty :class:`rich.table.Table` in the style of every terminal table of the package (a rule
    under the header, no frame, no outer padding)."""
    from rich import box
    from rich.table import Table

    return Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)


def _table(result, structures, metrics, voxel_mm, show_status: bool):
    """One rich table: a row per structure, a column per metric, a last row of means."""
    from rich.text import Text  # names as plain text: "[red]" in a name is not rich markup

    from ..registry import metric_specs

    specs = metric_specs()
    table = terminal_table()
    table.add_column("structure", no_wrap=True)
    if show_status:
        table.add_column("status", no_wrap=True)
    for metric in metrics:
        sigma = sigma_of(metric, (v.params for s in structures for v in s.values if v.metric == metric), compact=True)
        table.add_column(" ".join(filter(None, (SHORT_NAMES.get(metric, metric), sigma))), justify="right", no_wrap=True)
    for structure in structures:
        values = {v.metric: v.value for v in structure.values}
        cells = [display_value(values.get(m), specs[m].unit if m in specs else "", voxel_mm) for m in metrics]
        table.add_row(Text(structure.structure), *([structure.status] if show_status else []), *cells)
    if len(structures) > 1:
        means = result.class_means()
        cells = [display_value(means[m]["mean"], means[m]["unit"], voxel_mm) for m in metrics]
        table.add_section()
        table.add_row("mean", *([""] if show_status else []), *cells)
    return table


def _width(table, console) -> int:
    from rich.measure import Measurement

    return Measurement.get(console, console.options.update_width(1 << 16), table).maximum


def result_tables(result, console, sort: str | None = None, wide: bool = False) -> list:
    """Renderables for the terminal: a header line, the table(s) and the footer lines.

    One row per structure (worst first by ``sort``), one column per metric. The table fits
    ``console.width``: by default it shows as many metrics as fit, in :data:`TABLE_PRIORITY` order
    (the ``sort`` metric always); ``wide=True`` shows every metric, in several tables of columns
    that fit. Names and numbers are never wrapped.
    """
    from rich.text import Text

    grid = result.provenance.get("grid")
    voxel_mm = min(grid["spacing_mm_zyx"]) if grid else None
    structures = sorted_structures(result, sort)
    metrics = _columns(result)
    if sort in metrics:
        metrics.remove(sort)
        metrics.insert(0, sort)
    show_status = any(s.status != "ok" for s in structures)
    groups, current, hidden = [], [], []
    for metric in metrics:
        trial = _table(result, structures, current + [metric], voxel_mm, show_status)
        if not current or _width(trial, console) <= console.width:
            current.append(metric)
        elif wide:
            groups.append(current)
            current = [metric]
        else:
            hidden.append(metric)
    groups.append(current)
    parts = [Text(_header(result, voxel_mm), style="bold")]
    parts += [_table(result, structures, group, voxel_mm, show_status) for group in groups if group]
    parts += [Text(line) for line in _footer(result, hidden, voxel_mm)]
    return parts


def result_json(result) -> str:
    """JSON object ``{"provenance", "notes", "records"}`` (records as :func:`records_to_json`)."""
    records = [json_record(r) for r in result.records()]
    return json.dumps({"provenance": result.provenance, "notes": list(result.notes), "records": records},
                      indent=2, default=str)


def result_csv(result, layout: str = "long") -> str:
    """CSV text: ``long`` (one row per structure and metric, :data:`RECORD_FIELDS`) or ``wide`` (one row
    per structure, a column per metric, see :meth:`~segmetrics.evaluation.compare.ComparisonResult.wide_rows`)."""
    if layout == "wide":
        fields = ["structure", "reference_label", "test_label", "status", *result.metrics()]
        return csv_text(result.wide_rows(), fields)
    return records_to_csv(result.records())


def sidecar_path(path) -> Path:
    """Where the provenance of a CSV file goes: ``out.csv`` -> ``out.csv.provenance.json``."""
    return Path(str(path) + ".provenance.json")


def write_result(result, fmt: str = "table", path=None, *, layout: str = "long", sort: str | None = None,
                 wide: bool = False) -> None:
    """Write a :class:`~segmetrics.evaluation.compare.ComparisonResult` to ``path`` or standard output.

    ``fmt``: ``table`` (see :func:`result_tables`; ``wide`` applies), ``json`` (with the
    provenance and notes), ``csv`` (``layout`` long or wide; written to a file, the provenance and notes
    go to a sidecar :func:`sidecar_path`). ``sort`` orders the structures worst first in every format
    (:func:`sorted_structures`). Notes (resampling, warnings) are also printed on standard error.
    """
    if sort is not None and fmt != "table":
        result = dataclasses.replace(result, structures=sorted_structures(result, sort))
    if fmt == "table":
        from rich.console import Console

        console = Console(file=_io.StringIO(), width=160) if path else Console()
        for part in result_tables(result, console, sort, wide):
            console.print(part)
        if path:
            write_text(path, console.file.getvalue())
    else:
        text = result_json(result) if fmt == "json" else result_csv(result, layout)
        if path:
            write_text(path, text)
            if fmt == "csv":
                write_text(sidecar_path(path), json.dumps({"provenance": result.provenance, "notes": result.notes},
                                                          indent=2, default=str))
        else:
            sys.stdout.write(text if text.endswith("\n") else text + "\n")
    if path or fmt != "table":  # the table already shows the notes
        for note in result.notes:
            print(note if note.startswith("warning:") else f"note: {note}", file=sys.stderr)
