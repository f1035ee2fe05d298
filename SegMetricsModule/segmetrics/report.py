"""Batch reports: a self-contained HTML page and a Markdown summary with the same content.

Content, most important first: a summary (cases, failures, misses, the worst structures by Dice,
HD95, ASSD, NSD and MSI), failed cases, a table of contents, the overall table with the misses
beside every mean, a sortable case × structure table, per-metric tables and box plots (defined
values; misses counted beside), the worst pairs by Dice, HD95 and MSI in detail (per-slice MSI,
offscreen renders of the test surface coloured by MSI and signed distance), and at the end the
settings and provenance (collapsible) and the input files.
Both documents are made from one list of blocks (:func:`_blocks`). The HTML page is the Jinja2
template ``templates/report.html.j2`` (with ``report.css`` and ``sort_table.js``, package data) and
embeds every image as base64; the Markdown links the PNG files in ``figures/``.
Names and case ids come from user files: both documents escape them (:func:`markdown_escape`, the
template's autoescaping), so a segment named ``<script>`` or ``a|b`` can neither inject HTML nor break
a table.
"""
from __future__ import annotations

import base64
import functools
import html
import json
import math
import re
from pathlib import Path

from .evaluation.aggregate import OVERALL, PENALISED_STATUSES, Aggregate
from .outputs.tables import csv_text, format_value, write_text

#: Metrics whose worst pair is shown in detail (each once).
DETAIL_METRICS = ("dice", "hd95_mm", "msi")
SURFACE_ARRAYS = ("MSI", "SignedDistance_mm")


#: Cases below which a bootstrap CI of the mean is marked unreliable.
MIN_CASES_FOR_CI = 10
#: Metrics of the summary's "worst structures" table and of the case × structure table, when computed.
KEY_METRICS = ("dice", "hd95_mm", "assd_mm", "nsd", "msi", "msi_3d")
#: What each MSI variant answers (shown in the report beside the MSI sections).
MSI_GUIDANCE = {
    "msi": "msi (slice-wise): the Medical Similarity Index of the contours drawn slice by slice, as a clinician "
           "edits them; it falls with every slice whose contour is too small, too large or missing. Report it "
           "for contour acceptability slice by slice (the MSI paper's question).",
    "msi_3d": "msi_3d (surface): the same weighting on the 3-D test surface, area-weighted; thin errors spread "
              "over a large surface barely move it, so it stays near 1 while Dice is 0.5-0.8. Use it to locate "
              "errors on the surface (renders), not as the headline number; report msi for acceptability.",
}


def _ci(row: dict) -> str:
    if math.isnan(row["ci_low"]):
        return "–"
    return f"{format_value(row['ci_low'])} – {format_value(row['ci_high'])}"


def _statuses(row: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in row["statuses"].items())


def _misses(row: dict) -> str:
    """The misses beside a mean: ``missed m, extra e`` (test_empty / reference_empty), or ``0``."""
    parts = [f"{label} {row[key]}" for key, label in (("n_test_empty", "missed"), ("n_reference_empty", "extra"))
             if row.get(key)]
    return ", ".join(parts) or "0"


STAT_HEADER = ["n used / n", "mean", "misses", "median", "std", "min", "max", "95% CI of mean", "penalised",
               "statuses"]


def _stat_cells(row: dict) -> list:
    return [f"{row['n_used']} / {row['n']}", format_value(row["mean"]), _misses(row),
            *(format_value(row[k]) for k in ("median", "std", "min", "max")), _ci(row), str(row["n_penalised"]),
            _statuses(row)]


def _sigma(agg: Aggregate, metric: str, compact: bool = False) -> str:
    """The σ of an MSI metric's weights in this batch (:func:`segmetrics.outputs.tables.sigma_of`), else ``""``."""
    from .outputs.tables import sigma_of

    return sigma_of(metric, (r.get("params") for r in agg.records if r["metric"] == metric), compact)


def _labelled(agg: Aggregate, metric: str) -> str:
    """The metric's name, with the σ of its weights for MSI: ``msi (σ 10 mm)``."""
    sigma = _sigma(agg, metric)
    return f"{metric} ({sigma})" if sigma else metric


def summary_rows(agg: Aggregate) -> tuple:
    """Header and rows of the overall table: one row per metric (all classes and subjects)."""
    header = ["metric", "unit", "class-balanced mean", *STAT_HEADER]
    rows = [[_link(_labelled(agg, r["metric"]), slug(r["metric"])), r["unit"], format_value(r["class_mean"]), *_stat_cells(r)]
            for r in agg.rows if r["structure"] == OVERALL and r["metric"] in _shown_metrics(agg)]
    return header, rows


def summary_table(agg: Aggregate):
    """The overall table as a :class:`rich.table.Table` (for the terminal; short metric names and
    values rounded for display as in ``segmetrics compare``, distances never finer than 1/100 of the
    cases' smallest voxel, ``agg.voxel_mm``). On a narrow terminal only the metric names are
    shortened (with an ellipsis), never a number or the misses."""
    from rich import box
    from rich.table import Table

    from .outputs.tables import SHORT_NAMES, display_value

    table = Table(title=f"{agg.case_count()}, all classes, {len(agg.misses)} misses",
                  box=box.SIMPLE_HEAD, pad_edge=False)
    header = ("metric", "used/n", "mean", "class mean", "median", "95% CI", "misses")
    rows = []
    for r in agg.rows:
        if r["structure"] == OVERALL and r["metric"] in _shown_metrics(agg):
            value = functools.partial(display_value, unit=r["unit"], voxel_mm=agg.voxel_mm)
            ci = "–" if math.isnan(r["ci_low"]) else f"{value(r['ci_low'])}–{value(r['ci_high'])}"
            name = " ".join(filter(None, (SHORT_NAMES.get(r["metric"], r["metric"]), _sigma(agg, r["metric"], True))))
            rows.append((name, f"{r['n_used']}/{r['n']}", value(r["mean"]),
                         value(r["class_mean"]), value(r["median"]), ci, _misses(r)))
    for column, name in enumerate(header):
        width = None if name == "metric" else max(len(cell) for cell in (name, *(row[column] for row in rows)))
        table.add_column(name, justify="left" if name in ("metric", "misses") else "right", no_wrap=width is not None,
                         overflow="ellipsis", min_width=width)
    for row in rows:
        table.add_row(*row)
    return table


def print_summary(agg: Aggregate, html_path) -> None:
    """Print the overall table and the report path to the terminal."""
    from rich.console import Console

    from .outputs.tables import rounding_note

    Console().print(summary_table(agg))
    print(f"{rounding_note(agg.voxel_mm)}; the report and aggregate.csv keep more digits")
    print(agg.penalty)
    print(f"report: {Path(html_path).resolve()}")


def _shown_metrics(agg: Aggregate) -> list:
    """The aggregated metrics, without ``hdp_mm`` when every value repeats ``hd95_mm`` (percentile 95)."""
    metrics = agg.metrics()
    if "hdp_mm" in metrics and "hd95_mm" in metrics:
        def values(metric):
            return [(r["case_id"], r["structure"], r["raw_value"]) for r in agg.records if r["metric"] == metric]
        if str(values("hdp_mm")) == str(values("hd95_mm")):  # str: NaN equals NaN
            metrics.remove("hdp_mm")
    return metrics


# ---------------------------------------------------------------------------------- figures
def _plot_text(text) -> str:
    """A name as figure text: control characters (tab, line breaks), which fonts cannot draw, as spaces."""
    return "".join(" " if not character.isprintable() else character for character in str(text))


def _box_plot(agg: Aggregate, metric: str, path: Path) -> bool:
    """Box plot of one metric, one box per class, over the defined values only: penalised or infinite
    values of missed structures do not stretch the axis; their count is written at the right."""
    from matplotlib.figure import Figure  # no pyplot: no global backend or figure state

    classes = [r["structure"] for r in agg.rows if r["metric"] == metric and r["structure"] != OVERALL]
    members = {c: [x for x in agg.records if x["metric"] == metric and x["structure"] == c] for c in classes}
    data = [[x["raw_value"] for x in members[c] if math.isfinite(x["raw_value"])] for c in classes]
    if not any(data):
        return False
    unit = next(r["unit"] for r in agg.rows if r["metric"] == metric)
    fig = Figure(figsize=(7, 1.2 + 0.28 * len(classes)))
    ax = fig.subplots()
    ax.boxplot([d or [math.nan] for d in data], orientation="horizontal", showmeans=True)  # matplotlib >= 3.10
    ax.set_yticks(range(1, len(classes) + 1), [_plot_text(c) for c in classes], fontsize=8)
    for row, c in enumerate(classes, start=1):
        missed = sum(x["status"] in PENALISED_STATUSES for x in members[c])
        if missed:
            ax.annotate(f"✕ {missed} missed", (1.01, row), xycoords=("axes fraction", "data"), color="crimson",
                        fontsize=8, va="center")
    ax.invert_yaxis()
    ax.set_xlabel(" ".join(filter(None, (metric, f"({unit})" if unit else "", _sigma(agg, metric)))))
    ax.set_title(f"{metric} per class ({agg.n_cases} cases; triangle = mean; misses counted at right)", fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    return True


def _msi_curve(rows, title: str, path: Path) -> bool:
    """Per-slice MSI of one structure pair (``extras["msi_slices"]``: :class:`segmetrics.metrics.msi.SliceMSI` rows),
    by slice index with integer ticks (bottom) and position in mm (top: the rows' ``position_mm``,
    slice x spacing for masks, the contour plane's position in patient mm for RT Structure Sets)."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    points = [(r.slice, r.msi) for r in rows if math.isfinite(r.msi)]
    if not points:
        return False
    fig = Figure(figsize=(7, 2.8))
    ax = fig.subplots()
    ax.plot(*zip(*points), marker="o", markersize=3)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    first, last = min(rows, key=lambda r: r.slice), max(rows, key=lambda r: r.slice)
    step = (last.position_mm - first.position_mm) / (last.slice - first.slice) if last.slice > first.slice else 0
    if step:  # position (mm) = first.position_mm + (index - first.slice) x step
        top = ax.secondary_xaxis("top", functions=(lambda index: first.position_mm + (index - first.slice) * step,
                                                   lambda mm: first.slice + (mm - first.position_mm) / step))
        top.set_xlabel("position along the MSI axis (mm)", fontsize=8)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("slice index (MSI axis)")
    ax.set_ylabel("MSI")
    ax.set_title(_plot_text(title), fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    return True


def ranked_records(agg: Aggregate, metric: str) -> list:
    """The records of ``metric`` with both structures present (status ``ok``, finite value), worst
    first (equals in record order); empty when the metric has no worse direction."""
    better = agg.row(OVERALL, metric)["better"]
    if better not in ("higher", "lower"):
        return []
    defined = [r for r in agg.records if r["metric"] == metric and r["status"] == "ok" and math.isfinite(r["raw_value"])]
    return sorted(defined, key=lambda r: r["raw_value"], reverse=better == "lower")


def _worst_label(agg: Aggregate, metric: str, rank: int, record) -> str:
    """``worst msi = 0.4 (σ 10 mm)``, or ``2nd-worst ...`` for ``rank`` 1 (0 = the worst)."""
    ordinal = {0: "", 1: "2nd-", 2: "3rd-"}.get(rank, f"{rank + 1}th-")
    sigma = _sigma(agg, metric)
    return f"{ordinal}worst {metric} = {format_value(record['raw_value'])}" + (f" ({sigma})" if sigma else "")


def worst_pairs(agg: Aggregate, metrics=DETAIL_METRICS) -> list:
    """Case × structure pairs to show in detail, as ``[(record, heading)]``: for each of ``metrics``
    that was computed, its worst pair with both structures present (the pair the summary names). A
    pair worst by several metrics comes once, its heading naming each value (and the σ of MSI
    weights); the metric that found its worst pair taken adds its worst pair not yet shown, named by
    rank: ``c2 / bowel (worst dice = 0.5223, worst msi = 0.4 (σ 10 mm))``, ``c1 / bowel (2nd-worst
    msi = 0.6 (σ 10 mm))``."""
    def pair(record) -> tuple:
        return record["case_id"], record["structure"]

    found = {}
    for name in metrics:
        ranked = ranked_records(agg, name) if name in agg.metrics() else []
        if not ranked:
            continue
        repeated = pair(ranked[0]) in found
        found.setdefault(pair(ranked[0]), (ranked[0], []))[1].append(_worst_label(agg, name, 0, ranked[0]))
        if repeated:
            rank, record = next(((k, r) for k, r in enumerate(ranked) if pair(r) not in found), (0, None))
            if record is not None:
                found[pair(record)] = (record, [_worst_label(agg, name, rank, record)])
    return [(record, f"{record['case_id']} / {record['structure']} ({', '.join(labels)})")
            for record, labels in found.values()]


def _dvh_plot(dvh, title: str, path: Path) -> bool:
    """Cumulative DVHs of one structure pair (``extras["dvh"]``: :class:`segmetrics.metrics.dose.DoseVolumeHistogram`),
    reference solid and test dashed, volume in % of each side's volume inside the dose grid."""
    from matplotlib.figure import Figure

    rows = dvh.rows()
    sides = [side for side in ("reference", "test") if any(math.isfinite(row[f"{side}_percent"]) for row in rows)]
    if not sides:
        return False
    fig = Figure(figsize=(7, 2.8))
    ax = fig.subplots()
    for side in sides:
        ax.plot([row["dose_gy"] for row in rows], [row[f"{side}_percent"] for row in rows],
                "-" if side == "reference" else "--", label=side)
    ax.set_ylim(-2, 102)
    ax.set_xlabel("dose (Gy)")
    ax.set_ylabel("volume (%)")
    ax.set_title(_plot_text(title), fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    return True


def worst_details(agg: Aggregate, cases, job: dict, *, n: int = 3, metric: str | None = None) -> list:
    """Recompute the worst case × structure pairs with the ``msi`` group for their extras (and the
    ``dose`` group for their DVHs when the case has a dose).

    The pairs of :func:`worst_pairs` for :data:`DETAIL_METRICS` (or only ``metric``), ``n`` at most
    (missed structures have no surface; the summary lists them). ``cases`` are
    :class:`~segmetrics.evaluation.batch.Case` objects; ``job`` holds ``params``, ``resample_to``,
    ``threshold``, ``input_policy`` and ``synonyms`` as given to the batch.
    Returns ``[(title, reference_image, StructureResult)]``;
    empty when the ``msi`` group (per-slice MSI, coloured test surface) is not available.
    """
    from .evaluation.batch import load_case
    from .evaluation.compare import compare
    from .inputs.readers.rtdose import load_dose
    from .registry import all_groups

    if "msi" not in all_groups():
        return []
    by_id = {case.case_id: case for case in cases}
    details = []
    for record, title in worst_pairs(agg, [metric] if metric else DETAIL_METRICS)[:n]:
        case = by_id[record["case_id"]]
        reference, test, _ = load_case(case, job.get("threshold"), job.get("input_policy"))
        result = compare(reference, test, labels=[record["structure"]], metrics="msi,dose" if case.dose else "msi",
                         params=job.get("params"), resample_to=job.get("resample_to"),
                         input_policy=job.get("input_policy"), synonyms=job.get("synonyms"),
                         dose=load_dose(case.dose, {})[0] if case.dose else None)  # its frame checked by the batch
        details += [(title, reference, s) for s in result.structures if s.structure == record["structure"]]
    return details


def _detail_figures(details, figures: Path) -> tuple:
    """MSI curves and surface renders of the detailed cases; returns ``(blocks, notes)``."""
    from .outputs.render import render_surface, rendering_available

    blocks, notes = [], []
    can_render, reason = rendering_available()
    if not can_render:
        notes.append(f"3-D renders skipped: {reason}")
    for index, (title, reference, structure) in enumerate(details):
        blocks.append(("h", 3, title))
        name = f"worst{index + 1}"
        if structure.extras.get("msi_slices") and _msi_curve(structure.extras["msi_slices"], f"per-slice MSI: {title}",
                                                             figures / f"{name}_msi_slices.png"):
            blocks.append(("img", f"{name}_msi_slices.png", "Per-slice MSI along the MSI axis."))
        if "dvh" in structure.extras and _dvh_plot(structure.extras["dvh"], f"DVH: {title}", figures / f"{name}_dvh.png"):
            blocks.append(("img", f"{name}_dvh.png", "Cumulative dose-volume histograms of the planned dose: reference "
                                                     "(solid) and test (dashed) contour."))
        surface = structure.extras.get("test_surface")
        if surface is None or not can_render:
            continue
        from .spatial.mesh import surface_mesh, to_physical

        placed = to_physical(surface, reference)
        context = to_physical(surface_mesh(reference.mask(structure.reference_label), reference.spacing), reference)
        for array in SURFACE_ARRAYS:
            if placed.GetPointData().GetArray(array) is not None:
                render_surface(placed, array, figures / f"{name}_{array}.png", title=title, context=context)
                blocks.append(("img", f"{name}_{array}.png", f"Test surface coloured by {array} over the reference "
                                                             "surface (translucent grey), seen from anterior."))
    return blocks, notes


# ---------------------------------------------------------------------------------- document
def slug(text: str) -> str:
    """The anchor of a heading, as GitHub makes it: lower case, spaces to ``-``, punctuation dropped,
    letters and digits of any script kept (``Läsion / Lésion`` -> ``läsion--lésion``)."""
    return re.sub(r"[^\w -]", "", str(text).lower()).replace(" ", "-")


def _anchored(blocks) -> list:
    """``blocks`` with each heading given its anchor as a fourth item: :func:`slug`, and ``-1``,
    ``-2``, ... appended when an earlier heading took it (as GitHub does), ``section`` for a heading
    without letters or digits; every anchor of the page is then unique and non-empty."""
    taken, anchored = set(), []
    for block in blocks:
        if block[0] == "h":
            base = slug(block[2]) or "section"
            anchor, number = base, 0
            while anchor in taken:
                number += 1
                anchor = f"{base}-{number}"
            taken.add(anchor)
            block = (*block[:3], anchor)
        anchored.append(block)
    return anchored


def _link(text: str, anchor: str | None = None) -> tuple:
    """A table cell or list item that links to a heading of the report."""
    return ("link", str(text), anchor or slug(text))


def _worst_structures(agg: Aggregate) -> tuple:
    """Summary table: per key metric, the worst class (by its mean) and the worst case × structure
    with both structures present, and the misses (listed separately in the summary)."""
    header = ["metric", "worst class (mean)", "mean", "worst pair (both present)", "value", "misses"]
    rows = []
    for metric in [m for m in KEY_METRICS if m in agg.metrics()]:
        overall = agg.row(OVERALL, metric)
        better = overall["better"]
        classes = [r for r in agg.rows if r["metric"] == metric and r["structure"] != OVERALL
                   and math.isfinite(r["mean"])]
        if not classes or better not in ("higher", "lower"):
            continue
        worst_class = (min if better == "higher" else max)(classes, key=lambda r: r["mean"])
        worst = next(iter(ranked_records(agg, metric)), None)
        rows.append([_link(_labelled(agg, metric), slug(metric)), worst_class["structure"], format_value(worst_class["mean"]),
                     f"{worst['case_id']} / {worst['structure']}" if worst else "–",
                     format_value(worst["raw_value"]) if worst else "–", _misses(overall)])
    return header, rows


def _case_table(agg: Aggregate) -> tuple:
    """One row per case × structure: status and the key metrics (raw per-case values)."""
    metrics = [m for m in KEY_METRICS if m in agg.metrics()]
    cells: dict = {}
    for r in agg.records:
        entry = cells.setdefault((r["case_id"], r["structure"]), {"status": "ok"})
        if r["status"] not in ("ok", "not_applicable"):
            entry["status"] = r["status"]
        entry[r["metric"]] = r["raw_value"]
    rows = [[case, structure, entry["status"], *(format_value(entry[m]) if m in entry else "" for m in metrics)]
            for (case, structure), entry in cells.items()]
    return ["case", "structure", "status", *(_labelled(agg, m) for m in metrics)], rows


def _source_lines(settings) -> list:
    """Lines naming the run's sources with their SHA-256 (a manifest, a name map; folders by path) and
    where each case's input digests are, from the ``provenance`` of ``run.json``."""
    provenance = (settings or {}).get("provenance", {})
    lines = [f"Input {name}: {info['path']}" + (f" (SHA-256 {info['sha256']})" if "sha256" in info else "")
             if isinstance(info, dict) and "path" in info else f"Input {name}: {info}"
             for name, info in provenance.get("inputs", {}).items()]
    if provenance.get("case_digests"):
        lines.append(f"SHA-256 of every case's input files: {provenance['case_digests']}.")
    return lines


def _blocks(agg: Aggregate, figures: Path, details, settings, inputs=(), notes=()) -> list:
    """The report as a list of blocks, most important first: summary, failures, contents, tables,
    per-metric sections, worst cases in detail, settings and provenance; headings carry their unique
    anchor (:func:`_anchored`)."""
    from ._version import __version__
    from .evaluation.provenance import utc_now

    few = agg.n_cases < MIN_CASES_FOR_CI
    metrics = _shown_metrics(agg)
    blocks = [("p", f"segmetrics {__version__} · report written {utc_now()} · {agg.case_count()}, "
                    f"{len(agg.misses)} misses"),
              ("h", 2, "Summary"),
              ("ul", [f"{agg.case_count()}; the statistics are over the {agg.n_cases} evaluated cases"
                      + (" (failed cases listed below)." if agg.failed else "."),
                      f"{len(agg.misses)} misses (a structure in only one of reference and test): "
                      + (", ".join(f"{m['case_id']} / {m['structure']} ({m['status']})" for m in agg.misses[:20])
                         + (" ..." if len(agg.misses) > 20 else "") if agg.misses else "none") + ".",
                      agg.penalty]
                     + ([f"Only {agg.n_cases} cases: bootstrap confidence intervals below {MIN_CASES_FOR_CI} cases "
                         "are unreliable (marked)."] if few else [])),
              ("table", *_worst_structures(agg))]
    if agg.failed:
        blocks += [("h", 2, "Failed cases"),
                   ("table", ["case", "error"], [[cid, error] for cid, error in agg.failed.items()])]
    if notes:
        blocks += [("h", 2, "Notes on the inputs"),
                   ("table", ["case", "note (resampling, warnings)"], [list(row) for row in notes])]
    sections = ["Overall", "Cases and structures", *metrics, "Worst cases in detail", "Settings and provenance"]
    blocks += [("h", 2, "Contents"), ("ul", [_link(name) for name in sections], "inline")]
    header, rows = summary_rows(agg)
    if few:
        header = [h + " (unreliable: n < 10)" if h.endswith("CI of mean") else h for h in header]
    blocks += [("h", 2, "Overall"), ("table", header, rows),
               ("p", "Statistics: mean, median, sample standard deviation (ddof = 1), min and max over the defined "
                     f"(finite) values; {round(agg.confidence * 100)}% percentile-bootstrap CI of the mean resampling "
                     "whole cases (seeded); 'class-balanced mean' averages the per-class means (UKBOB-style). "
                     "'misses': missed = structure absent from the test (test_empty), extra = absent from the "
                     "reference (reference_empty); their distances are infinite and not in the numbers unless a "
                     "penalty is set.")]
    case_header, case_rows = _case_table(agg)
    blocks += [("h", 2, "Cases and structures"),
               ("details", f"{len(case_rows)} case × structure rows (click a column header to sort)",
                [("table", case_header, case_rows, "sortable")])]
    detail_blocks, render_notes = _detail_figures(details, figures)
    for metric in metrics:
        blocks.append(("h", 2, metric))
        if metric in MSI_GUIDANCE:
            blocks.append(("p", MSI_GUIDANCE[metric]))
        if _sigma(agg, metric):
            blocks.append(("p", f"Weights: Gaussians of width {_sigma(agg, metric)} (σ = 10 / penalty level, inside "
                                "and outside the reference); a larger σ forgives larger distances."))
        rows = [r for r in agg.rows if r["metric"] == metric and r["structure"] != OVERALL]
        blocks.append(("table", ["class", *STAT_HEADER], [[r["structure"], *_stat_cells(r)] for r in rows]))
        if _box_plot(agg, metric, figures / f"box_{metric}.png"):
            blocks.append(("img", f"box_{metric}.png", f"{metric} per class, defined values only."))
        if agg.worst.get(metric):
            blocks.append(("p", "Worst cases:"))
            blocks.append(("table", ["case", "class", "value", "raw value", "status"],
                           [[w["case_id"], w["structure"], format_value(w["value"]), format_value(w["raw_value"]),
                             w["status"]] for w in agg.worst[metric]]))
    if not details:
        render_notes = ["No per-slice MSI curves or surface renders: they need the msi metric group and a case "
                        "with both structures present."]
    blocks.append(("h", 2, "Worst cases in detail"))
    blocks += [("p", "The worst pair by each of Dice, HD95 and MSI with both structures present (the pairs the "
                     "summary names; a pair worst by several metrics is shown once, with the next pair of the "
                     "metric that found it taken); missed structures are listed in the summary.")]
    blocks += [("p", note) for note in render_notes] + detail_blocks
    blocks.append(("h", 2, "Settings and provenance"))
    blocks += [("p", line) for line in _source_lines(settings)]
    if settings:
        blocks.append(("details", "run settings and provenance (run.json)",
                       [("pre", json.dumps(settings, indent=1, sort_keys=True, default=str))]))
    if inputs:
        blocks.append(("details", f"input files of {len(inputs)} cases",
                       [("table", ["case", "reference", "test"], [list(row) for row in inputs])]))
    return _anchored(blocks)


def markdown_escape(text) -> str:
    """``text`` shown literally in Markdown: HTML tags escaped as entities, Markdown control characters
    (``\\ ` * _ [ ] | ~``) backslash-escaped, line breaks made spaces (a table row stays one line)."""
    text = html.escape(" ".join(str(text).splitlines()), quote=False)
    return re.sub(r"([\\`*_\[\]|~])", r"\\\1", text)


def _markdown_cell(cell) -> str:
    if isinstance(cell, tuple):
        return f"[{markdown_escape(cell[1])}](#{cell[2]})"
    return markdown_escape(cell)


def _markdown_lines(blocks) -> list:
    esc = markdown_escape
    lines = []
    for kind, *content in blocks:
        if kind == "h":
            lines += ["#" * content[0] + " " + esc(content[1]), ""]
        elif kind == "p":
            lines += [esc(content[0]), ""]
        elif kind == "ul":
            lines += [f"- {_markdown_cell(item)}" for item in content[0]] + [""]
        elif kind == "pre":
            fence = "`" * max(3, 1 + max(map(len, re.findall("`+", content[0])), default=0))
            lines += [fence, content[0], fence, ""]
        elif kind == "details":
            lines += [f"*{esc(content[0])}*", ""] + _markdown_lines(content[1])
        elif kind == "table":
            header, rows = content[:2]
            lines.append("| " + " | ".join(map(esc, header)) + " |")
            lines.append("|" + "---|" * len(header))
            lines += ["| " + " | ".join(map(_markdown_cell, row)) + " |" for row in rows]
            lines.append("")
        elif kind == "img":
            lines += [f"![{esc(content[1])}](figures/{content[0]})", "", esc(content[1]), ""]
    return lines


def _markdown(title: str, blocks) -> str:
    return "\n".join([f"# {markdown_escape(title)}", "", *_markdown_lines(blocks)])


@functools.lru_cache(maxsize=1)
def _templates():
    """The Jinja2 environment of the report templates (package data ``segmetrics/templates``), autoescaping."""
    import jinja2

    environment = jinja2.Environment(loader=jinja2.PackageLoader("segmetrics", "templates"), autoescape=True,
                                     undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    environment.tests["link"] = lambda cell: isinstance(cell, tuple)
    return environment


def _html(title: str, blocks, figures: Path) -> str:
    """The self-contained HTML page (``templates/report.html.j2``), every figure of ``figures`` embedded."""
    def png_base64(name: str) -> str:
        return base64.b64encode((figures / name).read_bytes()).decode("ascii")

    return _templates().get_template("report.html.j2").render(title=title, blocks=blocks, png_base64=png_base64)


def write_aggregate_csv(agg: Aggregate, path) -> None:
    """Every aggregate row (per class and overall) as CSV; statuses as a JSON object; text cells
    that a spreadsheet would run as formulas neutralised (:func:`segmetrics.outputs.tables.safe_csv_cell`)."""
    fields = ["structure", "metric", "unit", "better", "n", "n_used", "n_penalised", "n_test_empty",
              "n_reference_empty", "mean", "class_mean",
              "median", "std", "min", "max", "ci_low", "ci_high", "statuses"]
    write_text(path, csv_text(({**r, "statuses": json.dumps(r["statuses"], sort_keys=True)} for r in agg.rows), fields))


def write_report(report_dir, agg: Aggregate, *, details=(), settings=None, inputs=(), notes=(),
                 title: str = "SegMetrics batch report") -> Path:
    """Write ``report.html``, ``report.md``, ``aggregate.csv`` and ``figures/*.png`` into ``report_dir``.

    Parameters
    ----------
    report_dir : path
        Created if needed.
    agg : Aggregate
        From :func:`segmetrics.evaluation.aggregate.aggregate`.
    details : list
        From :func:`worst_details`: worst cases recomputed with their extras.
    settings : dict, optional
        The run settings (metrics, parameters) and provenance, shown at the end of the report.
    inputs : list, optional
        ``(case_id, reference path, test path)`` of every case, shown at the end of the report.
    notes : list, optional
        ``(case_id, note)`` of the cases whose inputs were prepared (resampling), shown near the top.

    Returns the path of ``report.html``.
    """
    report_dir = Path(report_dir)
    figures = report_dir / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    blocks = _blocks(agg, figures, details, settings, inputs, notes)
    write_text(report_dir / "report.md", _markdown(title, blocks))
    write_text(report_dir / "report.html", _html(title, blocks, figures))
    write_aggregate_csv(agg, report_dir / "aggregate.csv")
    return report_dir / "report.html"


def report_batch(output, cases, report_dir, *, penalty="none", job=None, n_details: int = 3,
                 title: str = "SegMetrics batch report"):
    """Aggregate a batch output folder and write its report; returns ``(Aggregate, html_path)``.

    ``output`` is the folder given to :func:`segmetrics.evaluation.batch.run_batch`, ``cases`` its cases,
    ``job`` the ``params``/``resample_to``/``threshold``/``input_policy``/``synonyms`` of that run (to recompute
    the worst cases).
    """
    from .evaluation.aggregate import aggregate
    from .evaluation.batch import read_case_log, read_results, value_from_json

    log = read_case_log(output)
    diagonals = {cid: value_from_json(entry.get("diagonal_mm")) for cid, entry in log.items()}
    failed = {c.case_id: log[c.case_id]["error"] for c in cases
              if c.case_id in log and log[c.case_id]["status"] not in ("ok", "not run")}
    voxels = [value_from_json(entry.get("voxel_mm")) for entry in log.values()]
    voxels = [voxel for voxel in voxels if math.isfinite(voxel)]
    agg = aggregate(read_results(output), penalty=penalty, diagonals=diagonals, failed=failed,
                    case_ids=[case.case_id for case in cases], voxel_mm=min(voxels, default=None))
    details = worst_details(agg, cases, job or {}, n=n_details)
    settings_path = Path(output) / "run.json"
    settings = json.loads(settings_path.read_text()) if settings_path.is_file() else None
    inputs = [(case.case_id, str(case.reference), str(case.test)) for case in cases]
    notes = [(c.case_id, f"not run: {c.not_run}") for c in cases if c.not_run]
    notes += [(c.case_id, note) for c in cases for note in log.get(c.case_id, {}).get("notes", [])]
    return agg, write_report(report_dir, agg, details=details, settings=settings, inputs=inputs, notes=notes,
                             title=title)
