"""``segmetrics demo``: the batch + report job on real built-in data, no downloads.

Reference: the CT chest segmentation shipped in the ``slicerio`` wheel
(``slicerio/data/Segmentation.seg.nrrd``: 128 × 128 × 34 voxels of 3.05 × 3.05 × 10 mm, 7 segments).
Test: deterministic simulated auto-contours of increasing severity, each with the error types of a
real auto-contouring tool:

* an outward **leak** of the left lung into the neighbouring soft tissue (a ball-shaped blob);
* an **under-segmented slab**: the top slices of the right lung are missing;
* a **jagged boundary** of the lumbar vertebral column (boundary voxels randomly added or removed);
* a **missed small structure**: the cervical vertebral column is absent (from severity 0.5 on),
  otherwise eroded.

Six structures are evaluated: the soft tissue (the body outline, 155 000 voxels, more than all the
others together) is left out, because its surface alone took three quarters of the demo's time
(MSI slice by slice and roughness over the whole body outline) and shows no error type the others
do not.
"""
from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
from scipy import ndimage

#: Metric groups of the demo (those registered are used): all four, so that the jagged boundary
#: shows in the roughness ratio.
DEMO_GROUPS = ("overlap", "distance", "msi", "roughness")
#: Segment names of the slicerio sample used by the simulated errors; SURROUNDING takes the leak.
LEAKING, SLAB, JAGGED, MISSED = "left lung", "right lung", "lumbar vertebral column", "cervical vertebral column"
SURROUNDING = "tissue"
#: Segments of the sample left out of the evaluation (see the module docstring).
NOT_EVALUATED = (SURROUNDING,)


def reference_path() -> Path:
    """Path of the CT chest segmentation inside the installed ``slicerio`` package."""
    import slicerio

    path = Path(slicerio.__file__).resolve().parent / "data" / "Segmentation.seg.nrrd"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: slicerio's sample segmentation is missing (slicerio >= 1.4 needed)")
    return path


def _label(image, name: str) -> int:
    return next(value for value, n in image.names.items() if n == name)


def simulate_auto_contour(reference, severity: float, seed: int = 0):
    """A simulated auto-contour of ``reference`` (a LabelImage with segment names).

    ``severity`` in (0, 1] scales every error: leak radius 10–30 mm, 1–3 missing lung slices,
    15–40 % of the lumbar vertebral column's boundary voxels flipped. The same inputs always give the
    same output.
    """
    rng = np.random.default_rng(seed)
    labels = reference.array.copy()
    spacing = np.asarray(reference.spacing)

    # Leak: a ball centred on the left-lung voxel nearest the image centre, spilling into tissue.
    lung, tissue = _label(reference, LEAKING), _label(reference, SURROUNDING)
    points = np.argwhere(labels == lung)
    centre = points[np.argmin(np.linalg.norm((points - np.asarray(labels.shape) / 2) * spacing, axis=1))]
    grid = np.indices(labels.shape).transpose(1, 2, 3, 0)
    ball = np.linalg.norm((grid - centre) * spacing, axis=-1) <= 10 + 20 * severity
    labels[ball & (labels == tissue)] = lung

    # Under-segmented slab: the top slices (highest first-axis index) of the right lung are lost.
    slab = _label(reference, SLAB)
    top = np.flatnonzero((labels == slab).any(axis=(1, 2))).max()
    lost = labels[top - int(round(2 * severity)):top + 1]  # a view: edits go into labels
    lost[lost == slab] = 0

    # Jagged boundary: random voxels of the structure's inner and outer boundary layers flip.
    jagged = _label(reference, JAGGED)
    body = labels == jagged
    flip = 0.15 + 0.25 * severity
    outer = ndimage.binary_dilation(body) & (labels == 0)
    inner = body & ~ndimage.binary_erosion(body)
    labels[outer & (rng.random(labels.shape) < flip)] = jagged
    labels[inner & (rng.random(labels.shape) < flip)] = 0

    # Missed small structure (or eroded when the error is mild).
    small = labels == _label(reference, MISSED)
    labels[small if severity >= 0.5 else small & ~ndimage.binary_erosion(small)] = 0
    return reference.with_array(labels)


def write_demo_data(folder, n_cases: int = 3) -> list:
    """Write the reference, ``n_cases`` simulated auto-contours, names and a manifest into ``folder``.

    Returns the cases (see :func:`segmetrics.evaluation.batch.read_manifest`).
    """
    import SimpleITK as sitk

    from .evaluation.batch import read_manifest
    from .inputs.io import load_label_image

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    reference = load_label_image(reference_path())
    sitk.WriteImage(reference.to_sitk(), str(folder / "reference.nrrd"), True)
    (folder / "labels.json").write_text(json.dumps({str(k): v for k, v in reference.names.items()}, indent=1))
    with open(folder / "manifest.csv", "w", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["case_id", "reference", "test", "names"])
        for index in range(n_cases):
            case_id = f"auto{index + 1}"
            test = simulate_auto_contour(reference, (index + 1) / n_cases, seed=index)
            sitk.WriteImage(test.to_sitk(), str(folder / f"{case_id}.nrrd"), True)
            writer.writerow([case_id, "reference.nrrd", f"{case_id}.nrrd", "labels.json"])
    return read_manifest(folder / "manifest.csv")


def run_demo(output="segmetrics-demo", *, n_cases: int = 3, metrics=None, workers: int = 1, progress: bool = True):
    """Simulate the data, run the batch and write the report into ``output``.

    ``metrics`` defaults to the registered groups of :data:`DEMO_GROUPS`.

    Every segment but :data:`NOT_EVALUATED` is evaluated.
    Layout: ``data/`` (inputs and manifest), ``results/`` (batch records, recomputed on every
    run), ``report.html``, ``report.md``, ``aggregate.csv``, ``figures/``.
    Returns ``(Aggregate, path of report.html, BatchSummary)``.
    """
    from .evaluation.batch import run_batch
    from .registry import all_groups
    from .report import report_batch

    metrics = metrics or [group for group in DEMO_GROUPS if group in all_groups()]

    output = Path(output)
    cases = write_demo_data(output / "data", n_cases)
    shutil.rmtree(output / "results", ignore_errors=True)
    names = json.loads((output / "data" / "labels.json").read_text()).values()
    labels = [name for name in names if name not in NOT_EVALUATED]
    summary = run_batch(cases, output / "results", metrics=metrics, labels=labels, workers=workers, progress=progress)
    agg, html_path = report_batch(output / "results", cases, output, job={"metrics": metrics},
                                  title="SegMetrics demo: simulated auto-contours vs the slicerio CT chest segmentation")
    return agg, html_path, summary
