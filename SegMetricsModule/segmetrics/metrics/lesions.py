"""Lesion-wise detection of one structure: connected components matched at an IoU threshold.

Each connected component of the reference mask is one reference lesion, each component of the
test mask one detected lesion (full connectivity: 26-neighbours in 3-D ``(z, y, x)``, 8 in 2-D).
Matching is the greedy one of :func:`segmetrics.metrics.instances.detection_scores`: detections in raster
order each take the unmatched reference lesion with the highest IoU >= ``Parameters.lesion_iou``
(default 0.5). IoUs are voxel-count ratios, so spacing plays no role in the matching.

- ``lesion_tp``: matched pairs; ``lesion_fp``: unmatched test lesions; ``lesion_fn``: unmatched
  reference lesions.
- ``lesion_precision`` = TP / (TP + FP), ``lesion_recall`` = TP / (TP + FN),
  ``lesion_f1`` = 2 TP / (2 TP + FP + FN); NaN when the denominator is 0.

Size bins. Each lesion's size is its equivalent diameter: the diameter of the ball with its volume
(3-D, mm³) or of the disc with its area (2-D, mm²), from the voxel count and the spacing. The edges
``Parameters.lesion_size_edges_mm`` (default 3 and 10 mm) split the lesions into ``small`` (< 3 mm),
``medium`` (3 to < 10 mm) and ``large`` (>= 10 mm): 10 mm is RECIST 1.1's smallest measurable
lesion, and below 3, 3-10 and above 10 mm is a split several brain-metastasis detection studies
report sensitivity in. In volume, 3 mm is 14.1 mm³ and 10 mm is 523.6 mm³ (in area 7.1 and 78.5 mm²).
Per bin: ``lesion_tp_<bin>`` and ``lesion_fn_<bin>`` count the reference lesions of that size
(matched or not), ``lesion_recall_<bin>`` = TP / (TP + FN) of that bin (NaN without reference
lesions of that size), and ``lesion_fp_<bin>`` counts the unmatched test lesions by their own size.
"""
from __future__ import annotations

import numpy as np

from .instances import SIZE_BINS, detection_scores, instances_from_semantic
from ..registry import MetricGroup, MetricSpec, MetricValue, Parameters, StructurePair, register_group

LESION_METRICS = (
    MetricSpec("lesion_f1", "1", "higher", "lesion-wise F1 2TP/(2TP+FP+FN), components matched at IoU >= lesion_iou"),
    MetricSpec("lesion_precision", "1", "higher", "lesion-wise precision TP/(TP+FP)"),
    MetricSpec("lesion_recall", "1", "higher", "lesion-wise recall (sensitivity) TP/(TP+FN)"),
    MetricSpec("lesion_tp", "count", "higher", "reference lesions matched by a test lesion"),
    MetricSpec("lesion_fp", "count", "lower", "test lesions matching no reference lesion"),
    MetricSpec("lesion_fn", "count", "lower", "reference lesions matched by no test lesion"),
)
#: Per size bin (see the module docstring): recall, TP and FN by reference size, FP by test size.
SIZE_METRICS = tuple(
    spec for size in SIZE_BINS for spec in (
        MetricSpec(f"lesion_recall_{size}", "1", "higher", f"lesion-wise recall of the {size} reference lesions"),
        MetricSpec(f"lesion_tp_{size}", "count", "higher", f"{size} reference lesions matched by a test lesion"),
        MetricSpec(f"lesion_fn_{size}", "count", "lower", f"{size} reference lesions matched by no test lesion"),
        MetricSpec(f"lesion_fp_{size}", "count", "lower", f"{size} test lesions matching no reference lesion"),
    ))


def compute_lesions(pair: StructurePair, params: Parameters | None = None) -> list:
    """Lesion-wise detection counts, precision, recall and F1 of one structure pair, in total and
    per size bin (equivalent diameter in mm from ``pair.spacing``)."""
    params = params or Parameters()
    reference = instances_from_semantic(pair.reference.astype(np.uint8))
    test = instances_from_semantic(pair.test.astype(np.uint8))
    counts = detection_scores([(reference, test)], params.lesion_iou, pair.spacing, params.lesion_size_edges_mm)
    values = {
        "lesion_f1": counts.f1,
        "lesion_precision": counts.precision,
        "lesion_recall": counts.recall,
        "lesion_tp": float(counts.true_positives),
        "lesion_fp": float(counts.false_positives),
        "lesion_fn": float(counts.false_negatives),
    }
    for size, (tp, fn, fp) in counts.by_size.items():
        values.update({f"lesion_recall_{size}": counts.bin_recall(size), f"lesion_tp_{size}": float(tp),
                       f"lesion_fn_{size}": float(fn), f"lesion_fp_{size}": float(fp)})
    settings = {"lesion_iou": params.lesion_iou, "connectivity": pair.reference.ndim}
    size_settings = {**settings, "lesion_size_edges_mm": list(params.lesion_size_edges_mm)}
    return [MetricValue(spec.name, values[spec.name], spec.unit, pair.emptiness, dict(settings))
            for spec in LESION_METRICS] + [MetricValue(spec.name, values[spec.name], spec.unit, pair.emptiness,
                                                       dict(size_settings)) for spec in SIZE_METRICS]


register_group(MetricGroup("lesions", LESION_METRICS + SIZE_METRICS, compute_lesions,
                           "lesion-wise detection: connected components matched at an IoU threshold, per size bin"))
