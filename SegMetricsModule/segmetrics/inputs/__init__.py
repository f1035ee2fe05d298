"""Reading inputs: every file format and in-memory image becomes a checked :class:`LabelImage`.

Data flows down, one module each: a file goes to the reader of its format (:mod:`.readers`, picked
from the file's content), which reads and verifies it; the :class:`LabelImage` it returns passes
the generic label-map checks (:mod:`.validation`); :mod:`.io` reads, checks and pairs a reference
with a test (:mod:`.grids`: how their grids meet). :mod:`.polygons` and :mod:`.masks` serve the
DICOM readers; :mod:`.structure_names` matches structures by name; :mod:`.dicom_folders` lists
what folders of DICOM files hold (from their headers) for batch runs.

Imports only :mod:`segmetrics.spatial` and :mod:`segmetrics.registry` below it.
"""
