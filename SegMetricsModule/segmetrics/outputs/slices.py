"""The per-slice table of a compared structure: one row per slice (or contour plane) holding either
side, joining what the ``msi`` and ``contours`` groups measured on that slice.

Rows come from the structure's ``extras["msi_slices"]`` (:class:`segmetrics.metrics.msi.SliceMSI`) and
``extras["contour_slices"]`` (:mod:`segmetrics.metrics.contours`), matched by slice index and position, or
by slice index alone when both cut the same axis but place a slice differently (two RT Structure
Sets with the ``fda`` or pixel MSI, measured on the rasterised masks: the row keeps the contour
plane's position);
a column whose group did not run is NaN. Slices are those of the MSI slice axis of the user's
stored array (``slice``); for two RT Structure Sets, one row per contour plane, ``slice`` being the
grid slice the plane was rasterised on and ``position_mm`` the plane's position along its normal
(rounded to 1e-6 mm, :data:`POSITION_DECIMALS`).
"""
from __future__ import annotations

import math

from .tables import csv_text, sigma_of, write_text

#: ``position_mm`` in the table is rounded to this many decimals (1e-6 mm): slice index x spacing
#: carries float noise (3 x 0.7 mm = 2.0999999999999996) far below any voxel size.
POSITION_DECIMALS = 6
#: The table's columns: ``{name: (unit, description)}``, in order (``structure`` first in files).
SLICE_COLUMNS = {
    "slice": ("", "slice index along the MSI axis of the stored array (RT Structure Sets: the grid slice of the "
                  "contour plane)"),
    "position_mm": ("mm", "slice index x spacing (masks) or the contour plane's position along its normal, "
                          "patient mm (RT Structure Sets), rounded to 1e-6 mm"),
    "msi": ("", "slice-wise MSI of the slice (msi group)"),
    "msi_sigma": ("", "width of the MSI's Gaussian weights, σ = 10 / penalty level (mm, or px with pixel units), "
                      "inside / outside the reference"),
    "apl_mm": ("mm", "added path length of the slice (contours group)"),
    "dice": ("", "Dice of the slice's areas (pixels, or exact polygon areas) (contours group)"),
    "hd_mm": ("mm", "in-plane Hausdorff distance of the slice's contours (contours group)"),
    "mean_distance_mm": ("mm", "in-plane mean distance of the slice's contours (contours group)"),
    "reference_length_mm": ("mm", "reference contour length in the slice (contours group)"),
    "test_length_mm": ("mm", "test contour length in the slice (contours group)"),
    "status": ("", "ok, test_empty, reference_empty (or multiple_objects for fda MSI)"),
}
#: Columns of the per-slice MSI rows kept after :data:`SLICE_COLUMNS` (see :class:`segmetrics.metrics.msi.SliceMSI`).
MSI_DETAIL_COLUMNS = ("weight", "reference_contours", "test_contours", "reference_objects", "test_objects",
                      "unpaired_reference", "unpaired_test")


def slice_rows(structure) -> list:
    """The per-slice rows (dicts with :data:`SLICE_COLUMNS` then :data:`MSI_DETAIL_COLUMNS`) of a
    :class:`segmetrics.evaluation.compare.StructureResult`, in slice order; empty when neither group ran."""
    rows: dict = {}
    sources: dict = {}  # key -> the sources already merged into that row
    msi = next((v for v in structure.values if v.metric == "msi"), None)
    same_axis = msi is not None and msi.params.get("axis") == structure.extras.get("contour_axis")
    for source in ("msi_slices", "contour_slices"):
        for row in structure.extras.get(source, []):
            row = row if isinstance(row, dict) else vars(row)
            # rows of groups cutting different axes (msi_axis across the contour planes) never join
            key = (int(row["slice"]), round(float(row["position_mm"]), POSITION_DECIMALS), "" if same_axis else source)
            if key not in rows and same_axis:  # the same slice placed otherwise (MSI on the masks of polygons)
                key = next((k for k in rows if k[0] == key[0] and source not in sources[k]), key)
            sources.setdefault(key, set()).add(source)
            merged = rows.setdefault(key, {**dict.fromkeys(SLICE_COLUMNS, math.nan),
                                           **dict.fromkeys(MSI_DETAIL_COLUMNS, math.nan)})
            merged.update((name, value) for name, value in row.items() if name in merged)
    sigma = sigma_of("msi", [msi.params] if msi is not None else []) or math.nan
    for row in rows.values():
        row["position_mm"] = round(float(row["position_mm"]), POSITION_DECIMALS)
        row["msi_sigma"] = sigma
        if not isinstance(row["status"], str):  # no MSI row: the status from the contour lengths
            present = row["reference_length_mm"] > 0, row["test_length_mm"] > 0
            row["status"] = "ok" if all(present) else "test_empty" if present[0] else "reference_empty"
    return [rows[key] for key in sorted(rows)]


def write_slice_table(result, path) -> None:
    """Write the per-slice rows (:func:`slice_rows`) of every structure of a comparison result to a
    CSV file, with a first column ``structure``."""
    rows = [{"structure": structure.structure, **row} for structure in result.structures
            for row in slice_rows(structure)]
    write_text(path, csv_text(rows, ["structure", *SLICE_COLUMNS, *MSI_DETAIL_COLUMNS]))
