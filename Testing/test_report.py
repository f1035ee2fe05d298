"""Aggregation statistics, the empty-mask penalty, reports and offscreen renders."""
import base64
import csv
import io
import math
import re

import numpy as np
import pytest
from PIL import Image

from segmetrics.evaluation.aggregate import OVERALL, aggregate, apply_penalty, bootstrap_ci, summarize
from segmetrics.report import write_report

INFO = {"hd": ("mm", "lower"), "dice": ("1", "higher")}


def _record(case, structure, metric, value, status="ok"):
    return {"case_id": case, "structure": structure, "metric": metric, "value": value,
            "unit": INFO[metric][0], "status": status}


def test_summary_statistics_match_numpy():
    values = [0.91, 0.42, 0.77, 0.85, math.nan]
    s = summarize(values, ["a", "b", "c", "d", "e"], ["ok"] * 4 + ["both_empty"])
    finite = np.array(values[:4])
    assert (s["n"], s["n_used"]) == (5, 4)
    assert s["mean"] == pytest.approx(finite.mean())
    assert s["median"] == pytest.approx(0.81)
    assert s["std"] == pytest.approx(np.sqrt(((finite - finite.mean()) ** 2).sum() / 3))
    assert (s["min"], s["max"]) == (0.42, 0.91)
    assert s["statuses"] == {"both_empty": 1, "ok": 4}
    assert s["ci_low"] <= s["mean"] <= s["ci_high"]


def test_bootstrap_ci_width_matches_normal_theory_and_is_seeded():
    rng = np.random.default_rng(1)
    values = rng.normal(10.0, 2.0, 400)
    cases = [str(i) for i in range(400)]
    low, high = bootstrap_ci(values, cases, n_boot=4000, seed=3)
    expected_half_width = 1.96 * values.std(ddof=1) / np.sqrt(values.size)
    assert (high - low) / 2 == pytest.approx(expected_half_width, rel=0.1)
    assert low < values.mean() < high
    assert bootstrap_ci(values, cases, n_boot=4000, seed=3) == (low, high)
    assert bootstrap_ci([5.0, 5.0, 5.0], ["a", "b", "c"]) == (5.0, 5.0)
    assert all(math.isnan(x) for x in bootstrap_ci([1.0, 2.0], ["a", "a"]))  # one case: no CI


def test_penalty_policies():
    records = [_record("a", "liver", "hd", math.inf, "test_empty"),
               _record("b", "liver", "hd", math.nan, "both_empty"),
               _record("c", "liver", "hd", 4.0),
               _record("a", "liver", "dice", 0.0, "test_empty")]
    diagonal = apply_penalty(records, "diagonal", {"a": 250.0}, INFO)
    assert [r["value"] for r in diagonal][0] == 250.0
    assert math.isnan(diagonal[1]["value"]) and diagonal[2]["value"] == 4.0 and diagonal[3]["value"] == 0.0
    assert [r["penalised"] for r in diagonal] == [True, False, False, False]
    assert apply_penalty(records, 373.0, None, INFO)[0]["value"] == 373.0
    assert math.isinf(apply_penalty(records, "none", None, INFO)[0]["value"])


def test_aggregate_per_class_overall_and_worst(monkeypatch):
    monkeypatch.setattr("segmetrics.evaluation.aggregate._metric_info", lambda: INFO)
    records = [_record("a", "liver", "dice", 0.9), _record("b", "liver", "dice", 0.7),
               _record("a", "spleen", "dice", 0.5), _record("b", "spleen", "dice", 0.0, "test_empty"),
               _record("c", "spleen", "dice", 0.8),
               _record("a", "liver", "hd", 3.0), _record("b", "liver", "hd", 9.0),
               _record("b", "spleen", "hd", math.inf, "test_empty")]
    agg = aggregate(records, penalty=100.0, n_worst=2)
    assert agg.row("liver", "dice")["mean"] == pytest.approx(0.8)
    assert agg.row("spleen", "dice")["mean"] == pytest.approx(1.3 / 3)
    overall = agg.row(OVERALL, "dice")
    assert overall["mean"] == pytest.approx(2.9 / 5)  # every class of every subject
    assert overall["class_mean"] == pytest.approx((0.8 + 1.3 / 3) / 2)  # class-balanced
    assert overall["statuses"] == {"ok": 4, "test_empty": 1}
    hd = agg.row(OVERALL, "hd")
    assert (hd["n_penalised"], hd["max"], hd["mean"]) == (1, 100.0, pytest.approx(112.0 / 3))
    assert [(w["case_id"], w["structure"]) for w in agg.worst["dice"]] == [("b", "spleen"), ("a", "spleen")]
    assert [w["value"] for w in agg.worst["hd"]] == [100.0, 9.0]
    assert math.isinf(agg.worst["hd"][0]["raw_value"])
    assert "100 mm" in agg.penalty


def _png_is_not_blank(data: bytes) -> bool:
    array = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"), dtype=float)
    return array.shape[0] > 50 and array.std() > 5


@pytest.mark.needs("matplotlib", "jinja2")
def test_report_embeds_every_figure(tmp_path, monkeypatch):
    monkeypatch.setattr("segmetrics.evaluation.aggregate._metric_info", lambda: INFO)
    rng = np.random.default_rng(0)
    records = [_record(f"c{i}", s, "dice", float(rng.uniform(0.5, 1))) for i in range(6) for s in ("liver", "spleen")]
    agg = aggregate(records, failed={"broken": "ReadError: x.nii.gz: no such file"})
    html_path = write_report(tmp_path / "report", agg)
    html = html_path.read_text()
    images = re.findall(r"src='data:image/png;base64,([^']+)'", html)
    assert len(images) == 1 and "<img" in html and html.count("<img") == len(images)
    assert all(_png_is_not_blank(base64.b64decode(i)) for i in images)
    markdown = (tmp_path / "report" / "report.md").read_text()
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", markdown)
    assert links and all(_png_is_not_blank((tmp_path / "report" / link).read_bytes()) for link in links)
    assert "broken" in html and "ReadError" in markdown
    assert (tmp_path / "report" / "aggregate.csv").read_text().count("\n") == 1 + len(agg.rows)


def test_offscreen_render_shows_the_colour_scale(tmp_path):
    vtk = pytest.importorskip("vtk")
    from vtk.util.numpy_support import numpy_to_vtk

    from segmetrics.outputs.render import render_surface, rendering_available

    available, reason = rendering_available()
    if not available:
        pytest.skip(reason)
    sphere = vtk.vtkSphereSource()
    sphere.SetRadius(20.0)
    sphere.SetThetaResolution(32)
    sphere.SetPhiResolution(32)
    sphere.Update()
    surface = sphere.GetOutput()
    z = np.array([surface.GetPoint(i)[2] for i in range(surface.GetNumberOfPoints())])
    array = numpy_to_vtk(z / 10.0, deep=1)
    array.SetName("SignedDistance_mm")
    surface.GetPointData().AddArray(array)
    path = render_surface(surface, "SignedDistance_mm", tmp_path / "sd.png", title="sphere")
    rgb = np.asarray(Image.open(path).convert("RGB"), dtype=int)
    red = (rgb[..., 0] > 150) & (rgb[..., 2] < 100)
    blue = (rgb[..., 2] > 100) & (rgb[..., 0] < 60)
    # Diverging map: the top of the sphere (z > 0, outside) is red, the bottom blue, both visible.
    rows_red, rows_blue = np.nonzero(red)[0], np.nonzero(blue)[0]
    assert red.sum() > 500 and blue.sum() > 500
    assert np.median(rows_red[rows_red < rgb.shape[0] * 0.9]) < np.median(rows_blue)
    with pytest.raises(KeyError):
        render_surface(surface, "MSI", tmp_path / "msi.png")


@pytest.mark.needs("matplotlib", "jinja2")
def test_report_escapes_names_and_neutralises_csv_formulas(tmp_path, monkeypatch):
    monkeypatch.setattr("segmetrics.evaluation.aggregate._metric_info", lambda: INFO)
    script, formula, piped = "<script>alert(1)</script>", '=HYPERLINK("http://x")', "a|b *c* _d_ [e](f) `g`"
    records = [_record(case, structure, "hd", value) for case, value in (("@SUM(1)", -2.0), ("c2", -1.0))
               for structure in (script, formula, piped)]
    agg = aggregate(records, failed={"bad|case": "ReadError: <b>x</b>"}, n_worst=6)
    write_report(tmp_path, agg)
    markdown = (tmp_path / "report.md").read_text()
    assert "<script" not in markdown and "<b>" not in markdown and "&lt;script&gt;alert(1)&lt;/script&gt;" in markdown
    assert r"a\|b \*c\* \_d\_ \[e\](f) \`g\`" in markdown and r"@SUM(1)" in markdown
    unescaped_pipes = re.compile(r"(?<!\\)\|")
    for table in re.findall(r"(?:^\|.*\n)+", markdown, flags=re.M):
        widths = {len(unescaped_pipes.findall(line)) for line in table.splitlines()}
        assert len(widths) == 1, table  # no name adds a column
    page = (tmp_path / "report.html").read_text()
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page  # only our own script
    with open(tmp_path / "aggregate.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert {r["structure"] for r in rows} == {script, "'" + formula, piped, OVERALL}
    assert {float(r["mean"]) for r in rows} == {-1.5} and all(r["mean"] == "-1.5" for r in rows)  # numbers stay numbers


@pytest.mark.needs("matplotlib", "jinja2")
def test_report_anchors_are_unique_and_keep_unicode_names(tmp_path, monkeypatch):
    from types import SimpleNamespace

    monkeypatch.setattr("segmetrics.evaluation.aggregate._metric_info", lambda: INFO)
    agg = aggregate([_record("c1", name, "dice", 0.5) for name in ("Läsion", "Lésion")])
    titles = [f"c1 / {name} (worst dice = 0.5)" for name in ("Läsion", "Lésion", "Lésion")] + ["¿?"]
    write_report(tmp_path, agg, details=[(title, None, SimpleNamespace(extras={})) for title in titles])
    page = (tmp_path / "report.html").read_text()
    ids = re.findall(r"<h\d id='([^']*)'>", page)
    assert len(ids) == len(set(ids)) and all(ids) and not any(re.search(r"\s", i) for i in ids)
    assert ids[-5:-1] == ["c1--läsion-worst-dice--05", "c1--lésion-worst-dice--05", "c1--lésion-worst-dice--05-1",
                          "section"]  # GitHub's anchors: the Markdown report's headings get the same
    assert set(re.findall(r"href='#([^']*)'", page)) <= set(ids)  # every link has its heading


@pytest.mark.needs("matplotlib", "jinja2")
def test_report_leads_with_the_summary_and_failures_and_ends_with_settings(tmp_path, monkeypatch):
    info = {**INFO, "hd95_mm": ("mm", "lower"), "hdp_mm": ("mm", "lower")}
    monkeypatch.setattr("segmetrics.evaluation.aggregate._metric_info", lambda: info)
    records = []
    for case in ("c1", "c2", "c3"):
        for structure, dice, hd, status in (("liver", 0.9, 2.0, "ok"), ("lobe", 0.0, math.inf, "test_empty"),
                                            ("bowel", 0.8, 87.0 if case == "c2" else 3.0, "ok")):
            if case != "c1" and structure == "lobe":
                dice, hd, status = 0.7, 5.0, "ok"  # only c1 misses the lobe
            for metric, value in (("dice", dice), ("hd95_mm", hd), ("hdp_mm", hd)):
                records.append({"case_id": case, "structure": structure, "metric": metric, "value": value,
                                "unit": info[metric][0], "status": status})
    agg = aggregate(records, failed={"c4": "ReadError: broken file"})
    write_report(tmp_path, agg, settings={"metrics": "all", "provenance": {"version": "x"}},
                 inputs=[("c1", "/data/r1.nii.gz", "/data/t1.nii.gz")])
    page = (tmp_path / "report.html").read_text()
    order = [page.index(text) for text in ("id='summary'", "id='failed-cases'", "id='contents'", "id='overall'",
                                           "id='cases-and-structures'", "id='worst-cases-in-detail'",
                                           "id='settings-and-provenance'", "&#34;provenance&#34;")]
    assert order == sorted(order)  # summary first, failures next, raw settings last
    summary = page[page.index("id='summary'"):page.index("id='failed-cases'")]
    assert "c1 / lobe (test_empty)" in summary  # the miss is named
    assert "c2 / bowel" in summary and "87" in summary  # the worst HD95 pair, not only the worst MSI
    assert "unreliable" in page  # 3 cases: the CI caveat
    assert "id='hdp_mm'" not in page and "id='hd95_mm'" in page  # hdp_mm repeats hd95_mm: one section
    assert "<details><summary>run settings" in page and "/data/t1.nii.gz" in page
    row = agg.row(OVERALL, "hd95_mm")
    assert row["n_used"] == 8 and row["mean"] == pytest.approx((2.0 * 3 + 5.0 * 2 + 3.0 * 2 + 87.0) / 8)


def test_report_counts_every_case_of_the_run(tmp_path, monkeypatch):
    # An 11-case manifest: 7 evaluated, 3 failed, 1 not run (a run stopped early): the report says 11.
    for package in ("pandas", "jinja2", "matplotlib"):
        pytest.importorskip(package)
    monkeypatch.setattr("segmetrics.evaluation.aggregate._metric_info", lambda: INFO)
    records = [_record(f"c{i}", "liver", "dice", 0.9) for i in range(7)]
    failed = {f"c{i}": "ReadError: broken" for i in range(7, 10)}
    agg = aggregate(records, failed=failed, case_ids=[f"c{i}" for i in range(11)])
    assert (agg.n_listed, agg.n_cases) == (11, 7)
    assert agg.case_count() == "11 cases (7 evaluated, 3 failed, 1 not run)"
    write_report(tmp_path, agg)
    markdown = (tmp_path / "report.md").read_text()
    assert "11 cases (7 evaluated, 3 failed, 1 not run)" in markdown.split("## Summary")[0]
    summary = markdown.split("## Summary")[1].split("##")[0]
    assert "11 cases (7 evaluated, 3 failed, 1 not run); the statistics are over the 7 evaluated cases" in summary
    assert aggregate(records, failed=failed).case_count() == "10 cases (7 evaluated, 3 failed)"


def test_worst_case_headings_agree_with_the_summary(monkeypatch):
    # c1 / liver is the worst pair by Dice and by MSI: one heading names both values, as the summary does
    # (before, the MSI heading moved on to the next pair: "worst msi = 0.9283" beside a summary's 0.5223).
    from segmetrics.report import _worst_structures, worst_pairs

    pytest.importorskip("pandas")
    info = {"dice": ("1", "higher"), "msi": ("1", "higher"), "hd95_mm": ("mm", "lower")}
    monkeypatch.setattr("segmetrics.evaluation.aggregate._metric_info", lambda: info)
    values = {("c1", "liver"): (0.5, 0.5223, 3.0), ("c2", "liver"): (0.9, 0.9283, 9.0), ("c3", "liver"): (0.95, 0.97, 1.0)}
    records = [{"case_id": case, "structure": structure, "metric": metric, "value": value, "unit": info[metric][0],
                "status": "ok"} for (case, structure), row in values.items()
               for metric, value in zip(("dice", "msi", "hd95_mm"), row)]
    agg = aggregate(records)
    headings = [heading for _, heading in worst_pairs(agg)]
    assert headings == ["c1 / liver (worst dice = 0.5, worst msi = 0.5223)", "c2 / liver (worst hd95_mm = 9)",
                        "c3 / liver (3rd-worst msi = 0.97)"]  # MSI's next pair not shown yet, named by its rank
    summary = {row[0][1]: (row[3], row[4]) for row in _worst_structures(agg)[1]}
    assert summary == {"dice": ("c1 / liver", "0.5"), "hd95_mm": ("c2 / liver", "9"), "msi": ("c1 / liver", "0.5223")}


def test_render_draws_the_context_surface_translucent_around_the_coloured_one(tmp_path):
    vtk = pytest.importorskip("vtk")
    from vtk.util.numpy_support import numpy_to_vtk

    from segmetrics.outputs.render import render_surface, rendering_available

    available, reason = rendering_available()
    if not available:
        pytest.skip(reason)

    def sphere(radius):
        source = vtk.vtkSphereSource()
        source.SetRadius(radius)
        source.SetThetaResolution(24)
        source.SetPhiResolution(24)
        source.Update()
        return source.GetOutput()

    inner, outer = sphere(10.0), sphere(30.0)  # test inside a larger reference
    values = numpy_to_vtk(np.ones(inner.GetNumberOfPoints()), deep=1)
    values.SetName("MSI")
    inner.GetPointData().AddArray(values)
    alone = np.asarray(Image.open(render_surface(inner, "MSI", tmp_path / "a.png")).convert("RGB"), dtype=int)
    both = np.asarray(Image.open(render_surface(inner, "MSI", tmp_path / "b.png", context=outer)).convert("RGB"),
                      dtype=int)

    def grey(rgb):  # translucent grey over white: equal channels, clearly darker than the background
        return (np.ptp(rgb, axis=-1) < 12) & (rgb[..., 0] < 235) & (rgb[..., 0] > 100)

    left = (slice(None), slice(0, int(alone.shape[1] * 0.8)))  # leave out the colour bar
    assert grey(both[left]).sum() > grey(alone[left]).sum() + 2000  # the reference ring around the test
    green = (both[..., 1] > 90) & (both[..., 0] < 90)
    assert green.sum() > 300  # the coloured test surface (MSI 1 = green) is still visible through it


#: Headless browsers tried for the layout test (Debian: apt-get install chromium-headless-shell).
BROWSERS = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")
#: Writes layout facts into the page title, read back with --dump-dom.
_LAYOUT_PROBE = """<script>
window.addEventListener('load', function () {
  var table = document.querySelector('#summary ~ div.wide');
  document.title = JSON.stringify({summary_bottom: table.getBoundingClientRect().bottom,
    scroll_width: document.documentElement.scrollWidth, client_width: document.documentElement.clientWidth,
    screen_height: window.innerHeight});
});
</script>"""


@pytest.mark.needs("matplotlib", "jinja2")
def test_report_in_a_headless_browser_shows_the_summary_first_without_horizontal_overflow(tmp_path, monkeypatch):
    import json
    import shutil
    import subprocess

    browser = next((shutil.which(name) for name in BROWSERS if shutil.which(name)), None)
    if browser is None:
        pytest.skip("no headless Chromium (apt-get install chromium-headless-shell)")
    info = {**INFO, "hd95_mm": ("mm", "lower")}
    monkeypatch.setattr("segmetrics.evaluation.aggregate._metric_info", lambda: info)
    structures = [f"{name}_{side}" for name in ("iliopsoas", "autochthon", "kidney", "lung_lower_lobe", "femur")
                  for side in ("left", "right")]
    records = [{"case_id": f"case{c}", "structure": s, "metric": m, "value": v, "unit": info[m][0], "status": "ok"}
               for c in range(4) for s in structures for m, v in (("dice", 0.8 + 0.01 * c), ("hd95_mm", 2.0 + c))]
    agg = aggregate(records, failed={"case9": "ReadError: " + "a very long error message " * 20})
    page = write_report(tmp_path, agg, settings={"metrics": "all", "note": "x" * 3000})
    probed = tmp_path / "probed.html"
    probed.write_text(page.read_text().replace("</body>", _LAYOUT_PROBE + "</body>"))
    done = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1280,900",
                           "--virtual-time-budget=5000", "--dump-dom", probed.as_uri()],
                          capture_output=True, text=True, timeout=120)
    title = re.search(r"<title>(.*?)</title>", done.stdout, flags=re.S)
    assert title, done.stderr[-2000:]
    layout = json.loads(html_unescape(title.group(1)))
    assert layout["summary_bottom"] <= layout["screen_height"]  # the summary table is in the first screen
    assert layout["scroll_width"] <= layout["client_width"]  # no horizontal scrolling of the page


def test_sort_table_sorts_the_second_table_by_its_own_clicked_column(tmp_path):
    """sort_table.js in a headless browser: a click on the first header of the second sortable
    table on a page sorts that table by its first column (not by a column counted across tables)."""
    import shutil
    import subprocess
    from importlib import resources

    browser = next((shutil.which(name) for name in BROWSERS if shutil.which(name)), None)
    if browser is None:
        pytest.skip("no headless Chromium (apt-get install chromium-headless-shell)")
    script = resources.files("segmetrics").joinpath("templates/sort_table.js").read_text()
    table = ("<table class='sortable'><tr><th>a</th><th>b</th></tr>"
             "<tr><td>{}</td><td>{}</td></tr><tr><td>{}</td><td>{}</td></tr><tr><td>{}</td><td>{}</td></tr></table>")
    page = tmp_path / "sort.html"
    page.write_text("<html><head><title>-</title></head><body>" + table.format(1, 2, 3, 4, 5, 6)
                    + table.format(3, "x", 1, "y", 2, "z") + f"<script>{script}</script><script>"
                    "window.addEventListener('load', function () {"
                    " var second = document.querySelectorAll('table')[1]; second.querySelector('th').click();"
                    " document.title = Array.from(second.querySelectorAll('tr')).slice(1)"
                    ".map(function (r) { return r.children[1].textContent; }).join(''); });</script></body></html>")
    done = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000",
                           "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    title = re.search(r"<title>(.*?)</title>", done.stdout, flags=re.S)
    assert title, done.stderr[-2000:]
    assert title.group(1) == "yzx"  # rows in ascending order of the first column: 1, 2, 3


def html_unescape(text: str) -> str:
    import html

    return html.unescape(text)


@pytest.fixture
def saved_figures(monkeypatch):
    """Figures saved by the report, kept in a list instead of only written as PNG."""
    from matplotlib.figure import Figure

    figures = []
    original = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: (figures.append(self), original(self, *a, **k)))
    return figures


@pytest.mark.needs("matplotlib", "jinja2")
def test_box_plot_keeps_the_scale_of_the_defined_values_under_a_penalty(tmp_path, monkeypatch, saved_figures):
    from segmetrics.report import _box_plot

    monkeypatch.setattr("segmetrics.evaluation.aggregate._metric_info", lambda: INFO)
    records = [_record(c, "lung", "hd", v) for c, v in (("a", 2.0), ("b", 4.0), ("c", 6.0))]
    records.append(_record("d", "lung", "hd", math.inf, "test_empty"))
    agg = aggregate(records, penalty=373.13)
    assert agg.row("lung", "hd")["max"] == 373.13  # the penalised statistics do use the penalty
    assert _box_plot(agg, "hd", tmp_path / "box.png")
    axes = saved_figures[-1].axes[0]
    assert axes.get_xlim()[1] < 10  # the box spans the defined 2..6 mm, not the 373 mm penalty
    assert any("1 missed" in text.get_text() for text in axes.texts)  # the miss is marked beside the box


def test_per_slice_msi_ticks_are_whole_slices(tmp_path, saved_figures):
    from types import SimpleNamespace

    from segmetrics.report import _msi_curve

    rows = [SimpleNamespace(slice=k, msi=0.5 + 0.1 * k, position_mm=2.5 * k) for k in range(3)]  # a 3-slice nodule
    assert _msi_curve(rows, "nodule", tmp_path / "curve.png")
    axes = saved_figures[-1].axes[0]
    ticks = [t for t in axes.get_xticks() if axes.get_xlim()[0] <= t <= axes.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks)


@pytest.mark.parametrize("positions", [(5.0, 7.0, 9.0, 11.0), (0.0, 2.0, 4.0, 6.0), (11.0, 9.0, 7.0, 5.0)])
def test_per_slice_msi_top_axis_shows_the_rows_positions(tmp_path, saved_figures, positions):
    """Contour planes at 5..11 mm (RT Structure Sets: patient positions, not slice x spacing), masks
    (slice x 2 mm) and a grid stored head first (positions decrease): slice k sits at positions[k]."""
    from types import SimpleNamespace

    from segmetrics.report import _msi_curve

    rows = [SimpleNamespace(slice=k, msi=0.5, position_mm=p) for k, p in enumerate(positions)]
    assert _msi_curve(rows, "planes", tmp_path / "curve.png")
    axes = saved_figures[-1].axes[0]
    (top,) = axes.child_axes  # the secondary x axis in mm
    step = positions[1] - positions[0]
    expected = [positions[0] + x * step for x in axes.get_xlim()]  # slice index x -> mm, beyond the ends too
    assert sorted(top.get_xlim()) == pytest.approx(sorted(expected))


def test_templates_are_package_data_of_a_built_package(tmp_path):
    """``pip install .`` (not only editable) ships the report templates: setuptools' build_py, which
    builds the wheel's contents, copies every file of segmetrics/templates."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    import segmetrics

    pytest.importorskip("setuptools")
    root = Path(__file__).resolve().parents[1]
    source = tmp_path / "source"
    shutil.copytree(root / "SegMetricsModule" / "segmetrics", source / "SegMetricsModule" / "segmetrics",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(root / name, source / name)
    done = subprocess.run([sys.executable, "-c", "from setuptools import setup; setup()", "build_py", "-d",
                           str(tmp_path / "built")], cwd=source, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    templates = Path(segmetrics.__file__).parent / "templates"
    shipped = {p.name for p in (tmp_path / "built" / "segmetrics" / "templates").iterdir()}
    assert shipped == {p.name for p in templates.iterdir()} and "report.html.j2" in shipped


def test_report_module_imports_neither_jinja2_nor_pandas_until_a_report_is_built():
    """``import segmetrics`` stays light: Jinja2 and pandas load only when a report is aggregated and written."""
    import subprocess
    import sys

    code = ("import sys, segmetrics, segmetrics.report, segmetrics.evaluation.aggregate, segmetrics.cli\n"
            "print(sorted({'jinja2', 'pandas'} & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_terminal_summary_never_shows_distances_finer_than_a_hundredth_of_a_voxel():
    pytest.importorskip("pandas")
    pytest.importorskip("rich")
    from rich.console import Console

    from segmetrics.report import summary_table

    records = [{"case_id": f"c{i}", "structure": "liver", "metric": "hd95_mm", "value": 0.000247, "unit": "mm",
                "status": "ok"} for i in range(3)]
    for voxel_mm, shown in ((1.0, "0.00"), (10.0, "0.0")):  # 1/100 voxel: 0.01 mm, then 0.1 mm
        console = Console(width=120, record=True)
        console.print(summary_table(aggregate(records, voxel_mm=voxel_mm)))
        row = next(line for line in console.export_text().splitlines() if line.lstrip().startswith("HD95"))
        assert row.split()[2:5] == [shown] * 3 and "0.000247" not in row


@pytest.mark.needs("rich")
def test_terminal_summary_at_80_columns_shortens_names_never_numbers_or_misses():
    from rich.console import Console

    from segmetrics.report import summary_table

    metrics = ("dice", "hd95_mm", "contour_mean_distance_mm", "lesion_recall_medium")
    def record(case, metric, value, status="ok"):
        return {"case_id": case, "structure": "liver", "metric": metric, "value": value,
                "unit": "mm" if metric.endswith("mm") else "1", "status": status}

    records = [record(f"c{i}", metric, 0.123456 + i / 10) for i in range(3) for metric in metrics]
    records += [record("c3", metric, math.inf if metric.endswith("mm") else 0.0, "test_empty") for metric in metrics]
    console = Console(width=80, record=True)
    console.print(summary_table(aggregate(records)))
    lines = console.export_text().splitlines()
    assert max(map(len, lines)) <= 80
    dice = next(line for line in lines if line.lstrip().startswith("Dice"))
    dice_values = [0.123456, 0.223456, 0.323456, 0.0]
    mean, median = f"{np.mean(dice_values):.3f}", f"{np.median(dice_values):.3f}"
    assert dice.split()[1:] == ["4/4", mean, mean, median, dice.split()[5], "missed", "1"]
    assert "…" not in dice and dice.split()[5].count(".") == 2  # the CI, both ends in full
    assert all(line.rstrip().endswith("missed 1") for line in lines if "/4" in line)
    wide = Console(width=200, record=True)
    wide.print(summary_table(aggregate(records)))
    assert "contour_mean_distance_mm" in wide.export_text() and "…" not in wide.export_text()


def test_worst_case_details_read_the_cases_with_the_runs_input_policy(tmp_path):
    """A batch run with --assume-unit-spacing (MetaImage headers without a voxel size) evaluated its
    cases, then its report stopped: the worst cases were read again without the run's input policy."""
    from segmetrics.evaluation.aggregate import aggregate
    from segmetrics.evaluation.batch import Case, read_results, run_batch
    from segmetrics.inputs.io import InputPolicy
    from segmetrics.report import worst_details

    masks = {"ref": np.zeros((6, 10, 10), np.uint8), "test": np.zeros((6, 10, 10), np.uint8)}
    masks["ref"][1:5, 2:8, 2:8] = 1
    masks["test"][1:5, 3:9, 2:8] = 1
    for side, mask in masks.items():  # DimSize is x, y, z; no ElementSpacing
        header = "ObjectType = Image\nNDims = 3\nDimSize = 10 10 6\nElementType = MET_UCHAR\nElementDataFile = LOCAL\n"
        (tmp_path / f"{side}.mha").write_bytes(header.encode() + mask.tobytes())
    cases = [Case("a", str(tmp_path / "ref.mha"), str(tmp_path / "test.mha"))]
    job = {"metrics": "dice,msi", "input_policy": InputPolicy(assume_unit_spacing=True)}
    run_batch(cases, tmp_path / "out", workers=0, progress=False, **job)
    agg = aggregate(read_results(tmp_path / "out"), case_ids=["a"])
    ((title, reference, structure),) = worst_details(agg, cases, job, n=1)
    assert structure.structure == "1" and structure.value("msi") < 1
