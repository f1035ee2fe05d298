"""Run Testing/slicer_end_to_end.py on real data and check its CSV against segmetrics.compare."""
import csv
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("slicer", reason="slicer-core (MRML Python wrapping) is not installed")

from segmetrics import compare  # noqa: E402
from segmetrics.registry import all_groups  # noqa: E402

SCRIPT = Path(__file__).with_name("slicer_end_to_end.py")
REFERENCE = "sct_testing_data/history_2016_commit7f79c3e/t2/t2_seg_manual.nii.gz"
TEST = "sct_testing_data/t2/t2_seg-deepseg_sc-2d.nii.gz"


@pytest.fixture(scope="module")
def run(data_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("e2e")
    done = subprocess.run([sys.executable, str(SCRIPT), str(out), "--reference", str(data_dir / REFERENCE),
                           "--test", str(data_dir / TEST)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    (out / "stderr.txt").write_text(done.stderr)
    with open(out / "results.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    return out, rows


def test_csv_values_equal_the_core_on_the_same_files(run, data_dir):
    _, rows = run
    assert len(rows) == 1 and rows[0]["Structure"] == "spinal cord" and rows[0]["Status"] == "ok"
    expected = compare(data_dir / REFERENCE, data_dir / TEST, metrics=list(all_groups())).structures[0]
    assert len(expected.values) > 9  # more than the overlap group
    for value in expected.values:
        column = value.metric
        got = float(rows[0][column])
        if math.isnan(value.value):
            assert math.isnan(got), column
        else:  # Slicer's CSV writer keeps 6 significant digits
            assert got == pytest.approx(value.value, rel=1e-5, abs=1e-9), column
    # independent sanity: the MANIFEST's rough Dice for manual vs deepseg-2d is 0.968
    assert float(rows[0]["dice"]) == pytest.approx(0.968, abs=0.002)


def test_render_is_written(run):
    out, _ = run
    from PIL import Image

    with Image.open(out / "surface.png") as image:
        pixels = np.asarray(image.convert("RGB"), dtype=int)
    assert pixels.shape == (600, 800, 3)
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 500  # a shaded surface, not a flat fill


def model_pixels(pixels):
    """The rendered model: largest connected blob that is not background, white text or the magenta box."""
    from scipy import ndimage

    rgb = pixels / 255
    background = (rgb[..., 2] > rgb[..., 0] + 0.1) & (rgb[..., 2] > rgb[..., 1] + 0.05)  # Slicer's blue
    white = rgb.min(axis=-1) > 0.85  # orientation letters and legend text
    magenta = (rgb[..., 0] > 0.6) & (rgb[..., 2] > 0.6) & (rgb[..., 1] < 0.5)  # bounding box
    labels, _ = ndimage.label(ndimage.binary_opening(~background & ~white & ~magenta, iterations=2))
    sizes = np.bincount(labels.ravel())
    sizes[0] = 0
    return labels == sizes.argmax(), rgb, white


def test_render_of_the_mirrored_direction_data_is_lit_and_coloured(run):
    """The SCT masks have det(direction) = -1; the cord once rendered black (triangles wound inwards)."""
    out, _ = run
    from PIL import Image

    with Image.open(out / "surface.png") as image:
        pixels = np.asarray(image.convert("RGB"), dtype=float)
    model, rgb, white = model_pixels(pixels)
    assert model.sum() > 20000  # the cord fills a good part of the view
    assert rgb[model].max(axis=-1).mean() > 0.25  # lit (the black render gave 0.002)
    # coloured by signed distance (the default): near 0 (white) over much of the cord, with red
    # patches where one surface lies outside the other; never the grey of an uncoloured model
    pale = np.ptp(rgb[model], axis=-1) < 0.15  # white, shaded grey by the lighting
    red = (rgb[model][:, 0] > rgb[model][:, 1] + 0.25) & (rgb[model][:, 0] > rgb[model][:, 2] + 0.25)
    assert pale.mean() > 0.35 and red.sum() > 500
    _, cols = np.nonzero(model)
    legend_cols = np.nonzero(white[:, 600:].any(axis=0))[0] + 600  # the legend's text, right of the view
    assert len(legend_cols) and cols.max() < legend_cols.min(), "the legend must not cover the model"


def test_no_error_is_logged(run):
    out, _ = run
    assert (out / "stderr.txt").read_text().count("ERR|") == 0


def test_slice_view_shows_the_worst_slice_with_both_contours_coloured(run, data_dir):
    """The worst MSI slice in a slice view: both contours, with several colours of the diverging
    map along them (red where a contour lies outside the other, blue inside, white on it)."""
    out, _ = run
    from PIL import Image

    with Image.open(out / "slice_view.png") as image:
        rgb = np.asarray(image.convert("RGB"), dtype=float) / 255
    view = rgb[:, :440]  # left of the colour legend
    drawn = view.max(axis=-1) > 0.2  # contours on the black background
    red = drawn & (view[..., 0] > view[..., 1] + 0.25) & (view[..., 0] > view[..., 2] + 0.25)
    blue = drawn & (view[..., 2] > view[..., 0] + 0.25)
    white = view.min(axis=-1) > 0.85
    assert red.sum() > 200 and blue.sum() > 200 and white.sum() > 200
    # two contours: the drawn pixels form two closed rings, i.e. at least three background regions
    # (outside, inside the outer ring between the rings or inside the inner one)
    from scipy import ndimage

    _, regions = ndimage.label(~ndimage.binary_dilation(drawn))
    assert regions >= 2


def test_msi_slices_csv_equals_the_core(run, data_dir):
    out, _ = run
    with open(out / "msi_slices.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    expected = compare(data_dir / REFERENCE, data_dir / TEST, metrics=["msi"]).structures[0].extras["msi_slices"]
    assert [int(r["slice"]) for r in rows] == [e.slice for e in expected]
    assert [float(r["msi"]) for r in rows] == pytest.approx([e.msi for e in expected], rel=1e-9)
