"""Offscreen render through Slicer's displayable managers: a surface coloured by MSI with its legend."""
from types import SimpleNamespace

import matplotlib
import numpy as np
import pytest

pytest.importorskip("slicer", reason="slicer-core (MRML Python wrapping) is not installed")

from PIL import Image  # noqa: E402

from segmetrics import LabelImage, Parameters, mrml  # noqa: E402
from segmetrics.registry import all_groups  # noqa: E402
from segmetrics.outputs.render import rendering_available  # noqa: E402


def ball_scene(reference, test):
    """A headless scene with ``reference`` and ``test`` (1 mm voxels, label 1 named "ball") as
    segmentation nodes; skips when MSI or offscreen rendering is unavailable."""
    if "msi" not in all_groups():
        pytest.skip("the MSI group is not registered yet")
    available, reason = rendering_available()
    if not available:
        pytest.skip(reason)
    headless = mrml.create_headless_scene()
    nodes = [mrml.add_segmentation_from_label_image(headless.scene, LabelImage(a, (1, 1, 1), names={1: "ball"}), n)
             for a, n in ((reference, "reference"), (test, "test"))]
    return headless, nodes


@pytest.fixture(scope="module")
def render(tmp_path_factory):
    z, y, x = np.mgrid[:40, :48, :48]
    reference = ((z - 20) ** 2 + (y - 24) ** 2 + (x - 24) ** 2 <= 14**2).astype(np.uint8)
    test = reference.copy()
    test[14:26, 4:16, 18:30] = 1  # a 6 mm bump towards anterior (low LPS y), facing the camera
    headless, nodes = ball_scene(reference, test)
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


# --- slice review: a ball whose test misses a cap --------------------------------------------------

CUT = 28  # the test misses the cap x >= 28 (1 mm voxels); the ball has radius 12 about x = 20


@pytest.fixture(scope="module")
def missed_cap(tmp_path_factory):
    z, y, x = np.mgrid[:32, :40, :40]
    reference = ((z - 16) ** 2 + (y - 20) ** 2 + (x - 20) ** 2 <= 12**2).astype(np.uint8)
    test = reference.copy()
    test[:, :, CUT:] = 0
    headless, nodes = ball_scene(reference, test)
    outputs = mrml.run(*nodes, metrics=["overlap", "msi"])  # coloured by signed distance (the default)
    folder = tmp_path_factory.mktemp("review")
    ras = mrml.worst_slice_ras(outputs, "ball")
    mrml.render_slice_png(headless.scene, headless.app_logic, folder / "slice.png", ras, "Axial", 60.0)
    mrml.render_png(headless.scene, headless.app_logic, folder / "surface.png", size=(800, 600))
    images = {}
    for name in ("slice", "surface"):
        with Image.open(folder / f"{name}.png") as image:
            images[name] = np.asarray(image.convert("RGB"), dtype=float) / 255
    return SimpleNamespace(headless=headless, outputs=outputs, images=images, ras=ras)


def diverging(pixels):
    """Masks of the signed-distance map's red (+) and blue (-) halves and its near-white middle."""
    r, g, b = pixels[..., 0], pixels[..., 1], pixels[..., 2]
    red = (r > g + 0.25) & (r > b + 0.25)
    blue = (b > r + 0.25) & (b > g + 0.05)
    white = pixels.min(axis=-1) > 0.85
    return red, blue, white


def test_reference_surface_shows_what_the_test_missed(missed_cap):
    """Reference vertices beyond the cut lie (x - 27.5) mm outside the test (its boundary sits
    half a voxel before the first missed column): the array is high there and near 0 elsewhere."""
    from vtk.util.numpy_support import vtk_to_numpy

    polydata = missed_cap.outputs.reference_models["ball"].GetPolyData()
    x_lps = -vtk_to_numpy(polydata.GetPoints().GetData())[:, 0]  # RAS -> LPS x, = index x (origin 0)
    signed = vtk_to_numpy(polydata.GetPointData().GetArray("SignedDistance_mm"))
    msi = vtk_to_numpy(polydata.GetPointData().GetArray("MSI"))
    deep = x_lps > CUT + 1.5
    assert deep.sum() > 50
    assert np.all(signed[deep] >= x_lps[deep] - (CUT - 0.5) - 0.6)  # at least the distance to the cut plane
    far = x_lps < CUT - 6
    assert np.median(np.abs(signed[far])) < 0.3
    assert msi[deep].mean() < msi[far].mean() - 0.05


def test_slice_view_shows_both_contours_coloured(missed_cap):
    pixels = missed_cap.images["slice"]
    assert pixels.shape == (600, 600, 3)
    view = pixels[:, :440]  # left of the colour legend
    red, blue, white = diverging(view)
    # the reference arc over the missed cap: red (+, missed); the test's cut edge: blue (-, inside
    # the reference); the rest of both contours: near white (distance about 0)
    assert red.sum() > 300 and blue.sum() > 300 and white.sum() > 1000
    rows, cols = np.nonzero(red)
    # radiological view (patient's left on the right): the missed cap (LPS x >= 28, patient's left)
    # lies right of the ball's centre, which is the view's centre horizontally
    assert cols.mean() > 300
    legend = pixels[:, 440:]
    legend_red, legend_blue, _ = diverging(legend)
    assert legend_red.sum() > 50 and legend_blue.sum() > 50, "the colour legend shows in the slice view"


def test_three_d_view_shows_both_surfaces(missed_cap):
    """Only the reference surface can be red (the test's values are <= 0 at its cut): red pixels
    show that the reference surface is drawn and lights up where the test missed."""
    pixels = missed_cap.images["surface"][:, :600]
    red, _, white = diverging(pixels)
    assert red.sum() > 500
    test_values = missed_cap.outputs.models["ball"].GetPolyData().GetPointData().GetArray("SignedDistance_mm")
    assert test_values.GetRange()[1] < 0.5


def test_offscreen_renders_leave_no_nodes(missed_cap, tmp_path):
    scene = missed_cap.headless.scene
    before = scene.GetNumberOfNodes()
    mrml.render_slice_png(scene, missed_cap.headless.app_logic, tmp_path / "slice.png", missed_cap.ras)
    mrml.render_png(scene, missed_cap.headless.app_logic, tmp_path / "surface.png", size=(80, 60))
    assert scene.GetNumberOfNodes() == before


@pytest.mark.parametrize("name, tolerance", [("RdBu_r", 0.005), ("RdYlGn", 0.005), ("viridis", 0.03)])
def test_colour_maps_match_matplotlibs(name, tolerance):
    """The module's colour tables are built without matplotlib but show its maps."""
    from segmetrics.outputs.render import colour_map_rgb

    expected = matplotlib.colormaps[name](np.linspace(0, 1, 256))[:, :3]
    assert np.abs(colour_map_rgb(name) - expected).max() < tolerance
