"""Offscreen VTK renders of surfaces coloured by a per-vertex array, saved as PNG.

Pure VTK (no Slicer, no display): ``vtkRenderWindow`` with offscreen rendering. On Linux without an
X server VTK falls back to EGL, which needs the system Mesa EGL libraries; call
:func:`rendering_available` first, it probes in a child process so a broken GL stack cannot crash
the caller.
"""
from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

#: Colour map, value range rule and scalar-bar title of the per-vertex arrays we know.
ARRAY_STYLES = {
    "SignedDistance_mm": ("RdBu_r", "symmetric", "signed distance\n(mm, + outside)"),
    "MSI": ("RdYlGn", (0.0, 1.0), "MSI\n(1 = acceptable)"),
    "Roughness_mm": ("viridis", "data", "roughness (mm)"),
}


def array_style(array_name: str) -> tuple:
    """``(colour map, range rule, legend title)`` of a point array: its :data:`ARRAY_STYLES` entry,
    else viridis over the data range titled by the array's name."""
    return ARRAY_STYLES.get(array_name, ("viridis", "data", array_name))


def headless_window_environment() -> dict:
    """On Linux without a display, the environment variable making VTK create EGL windows directly
    instead of trying X first (which only prints a "bad X server connection" warning before
    falling back); empty elsewhere."""
    if sys.platform.startswith("linux") and not os.environ.get("DISPLAY"):
        return {"VTK_DEFAULT_OPENGL_WINDOW": "vtkEGLRenderWindow"}
    return {}


def prefer_headless_window() -> None:
    """Set :func:`headless_window_environment` in this process (unless already set). Called by the
    offscreen renders, never at import: inside Slicer, importing this module must not change how
    VTK opens the application's windows."""
    for name, value in headless_window_environment().items():
        os.environ.setdefault(name, value)

_PROBE = """
import vtk
window = vtk.vtkRenderWindow()
window.SetOffScreenRendering(1)
window.AddRenderer(vtk.vtkRenderer())
window.SetSize(8, 8)
window.Render()
"""


@functools.lru_cache(maxsize=1)
def rendering_available() -> tuple:
    """``(True, "")`` if an offscreen VTK window can render here, else ``(False, reason)``."""
    try:
        done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120,
                              env={**headless_window_environment(), **os.environ})
    except (OSError, subprocess.TimeoutExpired) as error:
        return False, f"offscreen rendering probe did not run ({error})"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return False, (f"offscreen VTK rendering failed (exit {done.returncode}: {last}); on Debian/Ubuntu install "
                       "libegl1 libegl-mesa0 libgl1-mesa-dri libgbm1")
    return True, ""


#: Colour maps as evenly spaced control points, interpolated linearly: ColorBrewer's 11-class RdBu
#: (reversed: blue = negative) and RdYlGn, and viridis at 17 points, the same colours as matplotlib's
#: maps of these names, so that building a lookup table needs no matplotlib (the Slicer module
#: does not install it).
COLOUR_MAPS = {
    "RdBu_r": ("#053061", "#2166ac", "#4393c3", "#92c5de", "#d1e5f0", "#f7f7f7",
               "#fddbc7", "#f4a582", "#d6604d", "#b2182b", "#67001f"),
    "RdYlGn": ("#a50026", "#d73027", "#f46d43", "#fdae61", "#fee08b", "#ffffbf",
               "#d9ef8b", "#a6d96a", "#66bd63", "#1a9850", "#006837"),
    "viridis": ("#440154", "#48186a", "#472d7b", "#424086", "#3b528b", "#33638d", "#2c728e", "#26828e", "#21918c",
                "#1fa088", "#28ae80", "#3fbc73", "#5ec962", "#84d44b", "#addc30", "#d8e219", "#fde725"),
}


def colour_map_rgb(colormap: str, count: int = 256) -> np.ndarray:
    """``count`` RGB colours (0..1, shape (count, 3)) evenly spaced along a map of :data:`COLOUR_MAPS`."""
    if colormap not in COLOUR_MAPS:
        raise KeyError(f"unknown colour map {colormap!r}; known: {', '.join(COLOUR_MAPS)}")
    points = np.array([[int(h[i:i + 2], 16) / 255 for i in (1, 3, 5)] for h in COLOUR_MAPS[colormap]])
    where, stops = np.linspace(0.0, 1.0, count), np.linspace(0.0, 1.0, len(points))
    return np.stack([np.interp(where, stops, points[:, k]) for k in range(3)], axis=1)


def lookup_table(colormap: str, scalar_range):
    """A 256-entry VTK lookup table of a map of :data:`COLOUR_MAPS` over ``scalar_range``; NaN is grey."""
    import vtk

    table = vtk.vtkLookupTable()
    table.SetNumberOfTableValues(256)
    for i, rgb in enumerate(colour_map_rgb(colormap)):
        table.SetTableValue(i, *rgb, 1.0)
    table.SetRange(*scalar_range)
    table.SetNanColor(0.6, 0.6, 0.6, 1.0)
    table.Build()
    return table


def colour_range(polydata, array_name: str, rule):
    """Colour range of a point array: ``"symmetric"`` (±98th percentile of |value|, for signed
    distances), ``"data"`` (min..max) or a fixed ``(low, high)`` pair given as ``rule``."""
    array = polydata.GetPointData().GetArray(array_name)
    values = array.GetRange()
    if rule == "symmetric":  # the 98th percentile of |value|, so that one outlier does not wash out the rest
        from vtk.util.numpy_support import vtk_to_numpy

        bound = max(float(np.nanpercentile(np.abs(vtk_to_numpy(array)), 98)), 1e-6)
        return -bound, bound
    if rule == "data":
        return values if values[1] > values[0] else (values[0], values[0] + 1e-6)
    return rule


#: Plain colour (RGB 0..1) and opacity of the context surface (e.g. the reference) in renders.
CONTEXT_STYLE = ((0.55, 0.55, 0.6), 0.3)


def render_surface(polydata, array_name: str, path, *, title: str = "", size=(640, 520),
                   value_range=None, context=None) -> Path:
    """Render ``polydata`` coloured by its point array ``array_name`` to a PNG file.

    Parameters
    ----------
    polydata : vtkPolyData
        Surface in physical coordinates (mm, LPS); the camera looks from anterior, head up.
    array_name : str
        A point-data array, e.g. ``"MSI"``, ``"SignedDistance_mm"`` or ``"Roughness_mm"``.
    path : path
        Output PNG file.
    title : str
        Text drawn in the upper-left corner.
    value_range : (float, float), optional
        Colour range; default from :data:`ARRAY_STYLES` (signed distances: ± the 98th percentile
        of their magnitude; values beyond get the end colours).
    context : vtkPolyData, optional
        A second surface in the same coordinates (e.g. the reference), drawn translucent grey
        (:data:`CONTEXT_STYLE`) so that the coloured surface is seen against it.
    """
    import vtk

    if polydata.GetPointData().GetArray(array_name) is None:
        raise KeyError(f"surface has no point array {array_name!r}")
    prefer_headless_window()
    colormap, rule, bar_title = array_style(array_name)
    table = lookup_table(colormap, value_range or colour_range(polydata, array_name, rule))

    mapper = vtk.vtkPolyDataMapper()
    mapper.SetInputData(polydata)
    mapper.SetScalarModeToUsePointFieldData()
    mapper.SelectColorArray(array_name)
    mapper.SetLookupTable(table)
    mapper.UseLookupTableScalarRangeOn()
    mapper.ScalarVisibilityOn()
    actor = vtk.vtkActor()
    actor.SetMapper(mapper)

    bar = vtk.vtkScalarBarActor()
    bar.SetLookupTable(table)
    bar.SetTitle(bar_title)
    bar.SetNumberOfLabels(5)
    bar.UnconstrainedFontSizeOn()
    bar.SetWidth(0.1)
    bar.SetHeight(0.7)
    bar.SetPosition(0.84, 0.12)
    for text in (bar.GetTitleTextProperty(), bar.GetLabelTextProperty()):
        text.SetColor(0.1, 0.1, 0.1)
        text.SetFontSize(12)
        text.ItalicOff()
        text.ShadowOff()
    caption = vtk.vtkTextActor()
    caption.SetInput(title)
    caption.GetTextProperty().SetColor(0.1, 0.1, 0.1)
    caption.GetTextProperty().SetFontSize(16)
    caption.SetPosition(10, size[1] - 30)

    renderer = vtk.vtkRenderer()
    renderer.SetBackground(1.0, 1.0, 1.0)
    renderer.AddActor(actor)
    if context is not None and context.GetNumberOfPoints():
        context_mapper = vtk.vtkPolyDataMapper()
        context_mapper.SetInputData(context)
        context_mapper.ScalarVisibilityOff()
        context_actor = vtk.vtkActor()
        context_actor.SetMapper(context_mapper)
        context_actor.GetProperty().SetColor(*CONTEXT_STYLE[0])
        context_actor.GetProperty().SetOpacity(CONTEXT_STYLE[1])
        renderer.AddActor(context_actor)
    renderer.AddViewProp(bar)
    renderer.AddViewProp(caption)
    window = vtk.vtkRenderWindow()
    window.SetOffScreenRendering(1)
    window.SetSize(*size)
    window.AddRenderer(renderer)

    x0, x1, y0, y1, z0, z1 = polydata.GetBounds()
    centre = ((x0 + x1) / 2, (y0 + y1) / 2, (z0 + z1) / 2)
    camera = renderer.GetActiveCamera()
    camera.SetFocalPoint(*centre)
    camera.SetPosition(centre[0], centre[1] - 1000.0, centre[2])  # LPS: anterior is -y
    camera.SetViewUp(0.0, 0.0, 1.0)
    renderer.ResetCamera()
    camera.Zoom(1.1)
    window.Render()

    grab = vtk.vtkWindowToImageFilter()
    grab.SetInput(window)
    grab.ReadFrontBufferOff()
    grab.Update()
    writer = vtk.vtkPNGWriter()
    writer.SetFileName(str(path))
    writer.SetInputConnection(grab.GetOutputPort())
    writer.Write()
    window.Finalize()
    return Path(path)
