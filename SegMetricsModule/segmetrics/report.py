"""Batch reports: a self-contained HTML page and a Markdown summary with the same content.

Content: the aggregate tables (overall and per class), box plots per class for every metric, the
worst cases per metric, per-slice MSI curves and offscreen 3-D renders of the worst cases' test
surfaces (coloured by MSI and signed distance), the empty-mask penalty policy and failed cases.
The HTML embeds every image as base64; the Markdown links the PNG files in ``figures/``.
Names and case ids come from user files: both documents escape them (:func:`markdown_escape`,
``html.escape``), so a segment named ``<script>`` or ``a|b`` can neither inject HTML nor break a table.
"""
from __future__ import annotations

import base64
import html
import json
import math
import re
from pathlib import Path

from .aggregate import OVERALL, Aggregate
from .output import csv_text, format_value, write_text

#: Metrics tried, in order, to pick the worst cases shown in detail.
DETAIL_METRICS = ("msi", "dice", "hd95_mm")
SURFACE_ARRAYS = ("MSI", "SignedDistance_mm")


def _ci(row: dict) -> str:
    if math.isnan(row["ci_low"]):
        return "–"
    return f"{format_value(row['ci_low'])} – {format_value(row['ci_high'])}"


def _statuses(row: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in row["statuses"].items())


STAT_HEADER = ["n used / n", "mean", "median", "std", "min", "max", "95% CI of mean", "penalised", "statuses"]


def _stat_cells(row: dict) -> list:
    return [f"{row['n_used']} / {row['n']}", *(format_value(row[k]) for k in ("mean", "median", "std", "min", "max")),
            _ci(row), str(row["n_penalised"]), _statuses(row)]


def summary_rows(agg: Aggregate) -> tuple:
    """Header and rows of the overall table: one row per metric (all classes and subjects)."""
    header = ["metric", "unit", "class-balanced mean", *STAT_HEADER]
    rows = [[r["metric"], r["unit"], format_value(r["class_mean"]), *_stat_cells(r)]
            for r in agg.rows if r["structure"] == OVERALL]
    return header, rows


def summary_table(agg: Aggregate):
    """The overall table as a :class:`rich.table.Table` (for the terminal)."""
    from rich.table import Table

    table = Table(title=f"{agg.n_cases} cases, all classes ({len(agg.failed)} failed)")
    for name in ("metric", "unit", "used/n", "mean", "class mean", "median", "95% CI", "not ok"):
        table.add_column(name, justify="left" if name in ("metric", "unit", "not ok") else "right", overflow="fold")
    for r in agg.rows:
        if r["structure"] == OVERALL:
            not_ok = ", ".join(f"{k} {v}" for k, v in r["statuses"].items() if k != "ok")
            table.add_row(r["metric"], r["unit"], f"{r['n_used']}/{r['n']}", format_value(r["mean"]),
                          format_value(r["class_mean"]), format_value(r["median"]), _ci(r), not_ok)
    return table


def print_summary(agg: Aggregate, html_path) -> None:
    """Print the overall table and the report path to the terminal."""
    from rich.console import Console

    Console().print(summary_table(agg))
    print(f"report: {Path(html_path).resolve()}")


# ---------------------------------------------------------------------------------- figures
def _box_plot(agg: Aggregate, metric: str, path: Path) -> bool:
    """Box plot of one metric, one box per class (penalised values included, NaN left out)."""
    from matplotlib.figure import Figure  # no pyplot: no global backend or figure state

    classes = [r["structure"] for r in agg.rows if r["metric"] == metric and r["structure"] != OVERALL]
    data = [[x["value"] for x in agg.records if x["metric"] == metric and x["structure"] == c
             and math.isfinite(x["value"])] for c in classes]
    if not any(data):
        return False
    unit = next(r["unit"] for r in agg.rows if r["metric"] == metric)
    fig = Figure(figsize=(7, 1.2 + 0.28 * len(classes)))
    ax = fig.subplots()
    ax.boxplot(data, orientation="horizontal", showmeans=True)  # matplotlib >= 3.10
    ax.set_yticks(range(1, len(classes) + 1), classes, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(f"{metric} ({unit})" if unit else metric)
    ax.set_title(f"{metric} per class ({agg.n_cases} cases; triangle = mean)")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    return True


def _msi_curve(rows, title: str, path: Path) -> bool:
    """Per-slice MSI of one structure pair (``extras["msi_slices"]``: :class:`segmetrics.msi.SliceMSI` rows)."""
    from matplotlib.figure import Figure

    points = [(r.slice, r.msi) for r in rows if math.isfinite(r.msi)]
    if not points:
        return False
    fig = Figure(figsize=(7, 2.8))
    ax = fig.subplots()
    ax.plot(*zip(*points), marker="o", markersize=3)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("slice index (first array axis)")
    ax.set_ylabel("MSI")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    return True


def worst_details(agg: Aggregate, cases, job: dict, *, n: int = 2, metric: str | None = None) -> list:
    """Recompute the ``n`` worst case × structure pairs with the ``msi`` group for their extras.

    Only pairs with status ``ok`` qualify (a missed structure has no surface to show). ``cases``
    are :class:`~segmetrics.batch.Case` objects; ``job`` holds ``params``, ``resample_to`` and
    ``threshold`` as given to the batch. Returns ``[(title, reference_image, StructureResult)]``; empty when the
    ``msi`` group (per-slice MSI, coloured test surface) is not available.
    """
    from .batch import load_case
    from .compare import compare
    from .registry import all_groups

    metric = metric or next((m for m in DETAIL_METRICS if agg.worst.get(m)), next(iter(agg.worst), None))
    if "msi" not in all_groups() or metric is None:
        return []
    ranked = [r for r in agg.records if r["metric"] == metric and r["status"] == "ok" and math.isfinite(r["value"])]
    ranked.sort(key=lambda r: r["value"], reverse=agg.row(OVERALL, metric)["better"] == "lower")
    by_id = {case.case_id: case for case in cases}
    details = []
    for record in ranked[:n]:
        reference, test = load_case(by_id[record["case_id"]], job.get("threshold"))
        result = compare(reference, test, labels=[record["structure"]], metrics="msi",
                         params=job.get("params"), resample_to=job.get("resample_to"))
        title = f"{record['case_id']} / {record['structure']} ({metric} = {format_value(record['value'])})"
        details += [(title, reference, s) for s in result.structures if s.structure == record["structure"]]
    return details


def _detail_figures(details, figures: Path) -> tuple:
    """MSI curves and surface renders of the detailed cases; returns ``(blocks, notes)``."""
    from .render import render_surface, rendering_available

    blocks, notes = [], []
    can_render, reason = rendering_available()
    if not can_render:
        notes.append(f"3-D renders skipped: {reason}")
    for index, (title, reference, structure) in enumerate(details):
        blocks.append(("h", 3, title))
        name = f"worst{index + 1}"
        if structure.extras.get("msi_slices") and _msi_curve(structure.extras["msi_slices"], f"per-slice MSI: {title}",
                                                             figures / f"{name}_msi_slices.png"):
            blocks.append(("img", f"{name}_msi_slices.png", "Per-slice MSI (slices along the first array axis)."))
        surface = structure.extras.get("test_surface")
        if surface is None or not can_render:
            continue
        from .mesh import to_physical

        placed = to_physical(surface, reference)
        for array in SURFACE_ARRAYS:
            if placed.GetPointData().GetArray(array) is not None:
                render_surface(placed, array, figures / f"{name}_{array}.png", title=title)
                blocks.append(("img", f"{name}_{array}.png", f"Test surface coloured by {array}, seen from anterior."))
    return blocks, notes


# ---------------------------------------------------------------------------------- document
def _blocks(agg: Aggregate, figures: Path, details, settings) -> list:
    blocks = [("p", f"{agg.n_cases} cases evaluated; {len(agg.failed)} failed (not in the statistics)."),
              ("p", agg.penalty),
              ("p", "Statistics: mean, median, sample standard deviation (ddof = 1), min and max over the finite "
                    f"values; {round(agg.confidence * 100)}% percentile-bootstrap CI of the mean resampling whole "
                    "cases (seeded); 'class-balanced mean' averages the per-class means (UKBOB-style: per class, "
                    "then across classes and subjects). Statuses count every value, finite or not.")]
    if settings:
        blocks.append(("pre", json.dumps(settings, indent=1, sort_keys=True, default=str)))
    blocks += [("h", 2, "Overall (all classes and subjects)"), ("table", *summary_rows(agg))]
    for metric in agg.metrics():
        blocks.append(("h", 2, f"{metric}"))
        rows = [r for r in agg.rows if r["metric"] == metric and r["structure"] != OVERALL]
        blocks.append(("table", ["class", *STAT_HEADER], [[r["structure"], *_stat_cells(r)] for r in rows]))
        if _box_plot(agg, metric, figures / f"box_{metric}.png"):
            blocks.append(("img", f"box_{metric}.png", f"{metric} per class."))
        if agg.worst.get(metric):
            blocks.append(("p", "Worst cases:"))
            blocks.append(("table", ["case", "class", "value", "raw value", "status"],
                           [[w["case_id"], w["structure"], format_value(w["value"]), format_value(w["raw_value"]),
                             w["status"]] for w in agg.worst[metric]]))
    detail_blocks, notes = _detail_figures(details, figures)
    if not details:
        notes = ["No per-slice MSI curves or surface renders: they need the msi metric group and a case with "
                 "both structures present."]
    blocks.append(("h", 2, "Worst cases in detail"))
    blocks += [("p", note) for note in notes] + detail_blocks
    if agg.failed:
        blocks += [("h", 2, "Failed cases"),
                   ("table", ["case", "error"], [[cid, error] for cid, error in agg.failed.items()])]
    return blocks


def markdown_escape(text) -> str:
    """``text`` shown literally in Markdown: HTML tags escaped as entities, Markdown control characters
    (``\\ ` * _ [ ] | ~``) backslash-escaped, line breaks made spaces (a table row stays one line)."""
    text = html.escape(" ".join(str(text).splitlines()), quote=False)
    return re.sub(r"([\\`*_\[\]|~])", r"\\\1", text)


def _markdown(title: str, blocks) -> str:
    esc = markdown_escape
    lines = [f"# {esc(title)}", ""]
    for kind, *content in blocks:
        if kind == "h":
            lines += ["#" * content[0] + " " + esc(content[1]), ""]
        elif kind == "p":
            lines += [esc(content[0]), ""]
        elif kind == "pre":
            fence = "`" * max(3, 1 + max(map(len, re.findall("`+", content[0])), default=0))
            lines += [fence, content[0], fence, ""]
        elif kind == "table":
            header, rows = content
            lines.append("| " + " | ".join(map(esc, header)) + " |")
            lines.append("|" + "---|" * len(header))
            lines += ["| " + " | ".join(map(esc, row)) + " |" for row in rows]
            lines.append("")
        elif kind == "img":
            lines += [f"![{esc(content[1])}](figures/{content[0]})", "", esc(content[1]), ""]
    return "\n".join(lines)


def _html(title: str, blocks, figures: Path) -> str:
    esc = html.escape
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{esc(title)}</title><style>"
             "body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
             "table{border-collapse:collapse;margin:0.5em 0 1.5em;font-size:13px}"
             "td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}td:first-child,th{text-align:left}"
             "img{max-width:100%;border:1px solid #eee}pre{background:#f6f6f6;padding:0.5em;font-size:12px}"
             f"</style></head><body><h1>{esc(title)}</h1>"]
    for kind, *content in blocks:
        if kind == "h":
            parts.append(f"<h{content[0]}>{esc(content[1])}</h{content[0]}>")
        elif kind == "p":
            parts.append(f"<p>{esc(content[0])}</p>")
        elif kind == "pre":
            parts.append(f"<pre>{esc(content[0])}</pre>")
        elif kind == "table":
            header, rows = content
            parts.append("<table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in header) + "</tr>")
            parts += ["<tr>" + "".join(f"<td>{esc(str(c))}</td>" for c in row) + "</tr>" for row in rows]
            parts.append("</table>")
        elif kind == "img":
            data = base64.b64encode((figures / content[0]).read_bytes()).decode("ascii")
            parts.append(f"<figure><img alt='{esc(content[0])}' src='data:image/png;base64,{data}'>"
                         f"<figcaption>{esc(content[1])}</figcaption></figure>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_aggregate_csv(agg: Aggregate, path) -> None:
    """Every aggregate row (per class and overall) as CSV; statuses as a JSON object; text cells
    that a spreadsheet would run as formulas neutralised (:func:`segmetrics.output.safe_csv_cell`)."""
    fields = ["structure", "metric", "unit", "better", "n", "n_used", "n_penalised", "mean", "class_mean",
              "median", "std", "min", "max", "ci_low", "ci_high", "statuses"]
    write_text(path, csv_text(({**r, "statuses": json.dumps(r["statuses"], sort_keys=True)} for r in agg.rows), fields))


def write_report(report_dir, agg: Aggregate, *, details=(), settings=None,
                 title: str = "SegMetrics batch report") -> Path:
    """Write ``report.html``, ``report.md``, ``aggregate.csv`` and ``figures/*.png`` into ``report_dir``.

    Parameters
    ----------
    report_dir : path
        Created if needed.
    agg : Aggregate
        From :func:`segmetrics.aggregate.aggregate`.
    details : list
        From :func:`worst_details`: worst cases recomputed with their extras.
    settings : dict, optional
        The run settings (metrics, parameters) printed in the report.

    Returns the path of ``report.html``.
    """
    report_dir = Path(report_dir)
    figures = report_dir / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    blocks = _blocks(agg, figures, details, settings)
    write_text(report_dir / "report.md", _markdown(title, blocks))
    write_text(report_dir / "report.html", _html(title, blocks, figures))
    write_aggregate_csv(agg, report_dir / "aggregate.csv")
    return report_dir / "report.html"


def report_batch(output, cases, report_dir, *, penalty="diagonal", job=None, n_details: int = 2,
                 title: str = "SegMetrics batch report"):
    """Aggregate a batch output folder and write its report; returns ``(Aggregate, html_path)``.

    ``output`` is the folder given to :func:`segmetrics.batch.run_batch`, ``cases`` its cases,
    ``job`` the ``params``/``resample_to``/``threshold`` of that run (to recompute the worst cases).
    """
    from .aggregate import aggregate
    from .batch import read_case_log, read_results, value_from_json

    log = read_case_log(output)
    diagonals = {cid: value_from_json(entry.get("diagonal_mm")) for cid, entry in log.items()}
    failed = {c.case_id: log[c.case_id]["error"] for c in cases
              if c.case_id in log and log[c.case_id]["status"] != "ok"}
    agg = aggregate(read_results(output), penalty=penalty, diagonals=diagonals, failed=failed)
    details = worst_details(agg, cases, job or {}, n=n_details)
    settings_path = Path(output) / "run.json"
    settings = json.loads(settings_path.read_text()) if settings_path.is_file() else None
    return agg, write_report(report_dir, agg, details=details, settings=settings, title=title)
