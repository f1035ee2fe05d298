"""Lesion-wise detection of one structure: connected components matched at an IoU threshold.

Each connected component of the reference mask is one reference lesion, each component of the
test mask one detected lesion (full connectivity: 26-neighbours in 3-D ``(z, y, x)``, 8 in 2-D).
Matching is the greedy one of :func:`segmetrics.instances.detection_scores`: detections in raster
order each take the unmatched reference lesion with the highest IoU >= ``Parameters.lesion_iou``
(default 0.5). IoUs are voxel-count ratios, so spacing plays no role.

- ``lesion_tp``: matched pairs; ``lesion_fp``: unmatched test lesions; ``lesion_fn``: unmatched
  reference lesions.
- ``lesion_precision`` = TP / (TP + FP), ``lesion_recall`` = TP / (TP + FN),
  ``lesion_f1`` = 2 TP / (2 TP + FP + FN); NaN when the denominator is 0.
"""
from __future__ import annotations

import numpy as np

from .instances import detection_scores, instances_from_semantic
from .registry import MetricGroup, MetricSpec, MetricValue, Parameters, StructurePair, register_group

LESION_METRICS = (
    MetricSpec("lesion_f1", "1", "higher", "lesion-wise F1 2TP/(2TP+FP+FN), components matched at IoU >= lesion_iou"),
    MetricSpec("lesion_precision", "1", "higher", "lesion-wise precision TP/(TP+FP)"),
    MetricSpec("lesion_recall", "1", "higher", "lesion-wise recall (sensitivity) TP/(TP+FN)"),
    MetricSpec("lesion_tp", "count", "higher", "reference lesions matched by a test lesion"),
    MetricSpec("lesion_fp", "count", "lower", "test lesions matching no reference lesion"),
    MetricSpec("lesion_fn", "count", "lower", "reference lesions matched by no test lesion"),
)


def compute_lesions(pair: StructurePair, params: Parameters | None = None) -> list:
    """Lesion-wise detection counts, precision, recall and F1 of one structure pair."""
    params = params or Parameters()
    reference = instances_from_semantic(pair.reference.astype(np.uint8))
    test = instances_from_semantic(pair.test.astype(np.uint8))
    counts = detection_scores([(reference, test)], params.lesion_iou)
    values = {
        "lesion_f1": counts.f1,
        "lesion_precision": counts.precision,
        "lesion_recall": counts.recall,
        "lesion_tp": float(counts.true_positives),
        "lesion_fp": float(counts.false_positives),
        "lesion_fn": float(counts.false_negatives),
    }
    settings = {"lesion_iou": params.lesion_iou, "connectivity": pair.reference.ndim}
    return [MetricValue(spec.name, values[spec.name], spec.unit, pair.emptiness, dict(settings))
            for spec in LESION_METRICS]


register_group(MetricGroup("lesions", LESION_METRICS, compute_lesions,
                           "lesion-wise detection: connected components matched at an IoU threshold"))
