"""Offscreen render through Slicer's displayable managers: a surface coloured by MSI with its legend."""
import matplotlib
import numpy as np
import pytest

pytest.importorskip("slicer", reason="slicer-core (MRML Python wrapping) is not installed")

from PIL import Image  # noqa: E402

from segmetrics import LabelImage, Parameters, mrml  # noqa: E402
from segmetrics.registry import all_groups  # noqa: E402
from segmetrics.render import rendering_available  # noqa: E402


@pytest.fixture(scope="module")
def render(tmp_path_factory):
    if "msi" not in all_groups():
        pytest.skip("the MSI group is not registered yet")
    available, reason = rendering_available()
    if not available:
        pytest.skip(reason)
    z, y, x = np.mgrid[:40, :48, :48]
    reference = ((z - 20) ** 2 + (y - 24) ** 2 + (x - 24) ** 2 <= 14**2).astype(np.uint8)
    test = reference.copy()
    test[14:26, 4:16, 18:30] = 1  # a 6 mm bump towards anterior (low LPS y), facing the camera
    headless = mrml.create_headless_scene()
    nodes = [mrml.add_segmentation_from_label_image(headless.scene, LabelImage(a, (1, 1, 1), names={1: "ball"}), n)
             for a, n in ((reference, "reference"), (test, "test"))]
    # severity level 5: weight width 10/5 = 2 mm, so the 6 mm bump scores MSI near 0
    outputs = mrml.run(*nodes, metrics=["msi"], params=Parameters(msi_il=5.0, msi_ol=5.0), color_array="MSI")
    path = tmp_path_factory.mktemp("render") / "msi.png"
    mrml.render_png(headless.scene, headless.app_logic, path, size=(800, 600))
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"), dtype=float) / 255, outputs


def near(pixels, rgb, tolerance=0.08):
    return np.all(np.abs(pixels - np.asarray(rgb)[:3]) < tolerance, axis=-1)


def test_image_is_not_blank(render):
    pixels, _ = render
    background = (pixels[..., 2] > pixels[..., 0] + 0.1) & (pixels[..., 2] > pixels[..., 1] + 0.05)  # Slicer's blue
    assert 0.05 < 1 - background.mean() < 0.9


def test_legend_shows_both_ends_of_the_msi_colour_map(render):
    pixels, _ = render
    cmap = matplotlib.colormaps["RdYlGn"]
    right = pixels[:, 600:]  # the colour legend sits at the right edge
    assert near(right, cmap(0.0)).sum() > 50  # dark red: MSI 0
    assert near(right, cmap(1.0)).sum() > 50  # dark green: MSI 1


def test_surface_is_coloured_by_msi(render):
    pixels, outputs = render
    surface = pixels[:, 150:600]
    greenish = (surface[..., 1] > surface[..., 0] + 0.1) & (surface[..., 1] > surface[..., 2] + 0.1)
    reddish = (surface[..., 0] > surface[..., 1] + 0.15) & (surface[..., 0] > surface[..., 2] + 0.15)
    msi = outputs.models["ball"].GetPolyData().GetPointData().GetArray("MSI")
    low = sum(msi.GetValue(i) < 0.5 for i in range(msi.GetNumberOfTuples()))
    assert greenish.sum() > 5000, "most of the surface agrees (MSI near 1 = green)"
    # the bump faces the anterior camera only if LPS -> RAS is right; it must show red
    assert low > 0 and reddish.sum() > 100, "the bump (MSI near 0) shows red/orange"
