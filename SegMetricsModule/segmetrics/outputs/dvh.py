"""The cumulative dose-volume histograms of a comparison as a CSV table: one row per structure
and dose, the volume receiving at least that dose in cc and in % of the structure's volume inside
the dose grid, and the share outside the grid the curve leaves out, for the reference and the
test (:class:`segmetrics.metrics.dose.DoseVolumeHistogram`)."""
from __future__ import annotations

from .tables import csv_text, write_text

#: The table's columns: ``{name: (unit, description)}``, in order.
DVH_COLUMNS = {
    "structure": ("", "structure name"),
    "dose_gy": ("Gy", "dose"),
    "reference_cc": ("cc", "reference volume receiving at least the dose"),
    "reference_percent": ("%", "the same in % of the reference volume inside the dose grid"),
    "reference_outside_percent": ("%", "share of the reference outside the dose grid, left out of its curve"),
    "test_cc": ("cc", "test volume receiving at least the dose"),
    "test_percent": ("%", "the same in % of the test volume inside the dose grid"),
    "test_outside_percent": ("%", "share of the test outside the dose grid, left out of its curve"),
}


def dvh_rows(result) -> list:
    """The rows of every structure of a :class:`segmetrics.evaluation.compare.ComparisonResult`
    with DVHs (``extras["dvh"]``), structure by structure, doses increasing."""
    return [{"structure": structure.structure, **row} for structure in result.structures
            if "dvh" in structure.extras for row in structure.extras["dvh"].rows()]


def write_dvh_table(result, path) -> None:
    """Write :func:`dvh_rows` to a CSV file."""
    write_text(path, csv_text(dvh_rows(result), list(DVH_COLUMNS)))
