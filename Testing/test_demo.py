"""`segmetrics demo`: built-in data only, the simulated errors show up, and the report opens."""
import base64
import csv
import io
import json
import math
import re

import numpy as np
import pytest
from PIL import Image

from segmetrics.evaluation.batch import read_results
from segmetrics.cli import main
from segmetrics.demo import reference_path, simulate_auto_contour
from segmetrics.inputs.io import load_label_image
from segmetrics.registry import all_groups
from segmetrics.outputs.render import rendering_available

pytestmark = pytest.mark.needs("slicerio")  # the demo segments slicerio's sample segmentation


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    assert main(["demo", "-o", str(out), "--no-progress"]) == 0
    return out


def _not_blank(data: bytes) -> bool:
    array = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"), dtype=float)
    return array.shape[0] > 50 and array.std() > 5


def test_report_images_are_embedded_and_not_blank(demo):
    html = (demo / "report.html").read_text()
    sources = re.findall(r"<img[^>]*src='([^']+)'", html)
    assert len(sources) == html.count("<img") >= 5  # box plots at least
    assert all(s.startswith("data:image/png;base64,") for s in sources)
    assert all(_not_blank(base64.b64decode(s.split(",", 1)[1])) for s in sources)
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", (demo / "report.md").read_text())
    assert sorted(links) == sorted(f"figures/{name}" for name in re.findall(r"<img alt='([^']+)'", html))
    assert all(_not_blank((demo / link).read_bytes()) for link in links)
    # The worst pairs in detail: per-slice MSI curves and 3-D renders coloured by MSI / signed distance.
    names = set(re.findall(r"<img alt='([^']+)'", html))
    if "msi" in all_groups():
        assert {"worst1_msi_slices.png", "worst2_msi_slices.png"} <= names
        if rendering_available()[0]:
            assert {"worst1_MSI.png", "worst1_SignedDistance_mm.png"} <= names


def _values(demo, metric):
    return {(r["case_id"], r["structure"]): (r["value"], r["status"])
            for r in read_results(demo / "results") if r["metric"] == metric}


def test_simulated_errors_show_in_the_metrics(demo):
    dice, sensitivity, precision = (_values(demo, m) for m in ("dice", "sensitivity", "precision"))
    cases = sorted({case for case, _ in dice})
    assert cases == ["auto1", "auto2", "auto3"]
    assert {structure for _, structure in dice} == {"ribs", "cervical vertebral column", "thoracic vertebral column",
                                                     "lumbar vertebral column", "right lung", "left lung"}  # no tissue
    roughness = _values(demo, "rr")
    for case in cases:
        for untouched in ("ribs", "thoracic vertebral column"):
            assert dice[case, untouched] == (1.0, "ok")
        assert sensitivity[case, "left lung"][0] == 1.0 and precision[case, "left lung"][0] < 0.999  # leak only adds
        assert precision[case, "right lung"][0] == 1.0 and sensitivity[case, "right lung"][0] < 0.999  # slab only removes
        assert dice[case, "lumbar vertebral column"][0] < 0.99  # jagged boundary
        # ... which is rougher than the reference's, unlike the untouched ones
        assert roughness[case, "lumbar vertebral column"][0] > 0.1
        assert roughness[case, "thoracic vertebral column"][0] == pytest.approx(0, abs=1e-9)
    # Missed small structure from severity 0.5 on (cases 2 and 3), eroded in case 1.
    assert dice["auto1", "cervical vertebral column"][1] == "ok"
    assert [dice[c, "cervical vertebral column"][1] for c in ("auto2", "auto3")] == ["test_empty"] * 2
    # Errors grow with severity.
    assert precision["auto1", "left lung"][0] > precision["auto3", "left lung"][0]
    assert sensitivity["auto1", "right lung"][0] > sensitivity["auto3", "right lung"][0]


def test_missed_structure_is_counted_not_penalised_by_default_and_the_diagonal_on_request(demo):
    from segmetrics.evaluation.aggregate import aggregate
    from segmetrics.evaluation.batch import read_case_log

    hd = _values(demo, "hd_mm")
    if not hd:
        pytest.skip("distance group not available")
    assert math.isinf(hd["auto2", "cervical vertebral column"][0])  # per-case records keep inf
    with open(demo / "aggregate.csv") as handle:
        row = next(r for r in csv.DictReader(handle)
                   if r["structure"] == "cervical vertebral column" and r["metric"] == "hd_mm")
    # default: statistics over the one defined value (auto1), the two misses counted beside it
    assert float(row["max"]) == pytest.approx(hd["auto1", "cervical vertebral column"][0])
    assert (int(row["n_penalised"]), int(row["n_test_empty"])) == (0, 2)
    assert json.loads(row["statuses"]) == {"ok": 1, "test_empty": 2}
    report = (demo / "report.md").read_text()
    assert "auto2 / cervical vertebral column (test\\_empty)" in report and "No empty-mask penalty" in report
    import slicerio

    header = slicerio.read_segmentation(str(reference_path()))
    extent = np.linalg.norm(np.asarray(header["ijkToLPS"])[:3, :3], axis=0) * header["voxels"].shape[:3]
    diagonal = float(np.linalg.norm(extent))  # 128 × 3.047 mm, 128 × 3.047 mm, 34 × 10 mm
    diagonals = {case: entry["diagonal_mm"] for case, entry in read_case_log(demo / "results").items()}
    penalised = aggregate(read_results(demo / "results"), penalty="diagonal", diagonals=diagonals)
    assert penalised.row("cervical vertebral column", "hd_mm")["max"] == pytest.approx(diagonal)


def test_simulation_is_deterministic():
    reference = load_label_image(reference_path())
    first = simulate_auto_contour(reference, 0.5, seed=1)
    assert np.array_equal(first.array, simulate_auto_contour(reference, 0.5, seed=1).array)
    assert not np.array_equal(first.array, reference.array)
    assert first.spacing == reference.spacing and first.origin == reference.origin
