"""Voxel-counting overlap metrics: Dice, Jaccard, sensitivity, precision, volumes.

Volumes are in ml (cm³) for 3-D masks and areas in mm² for 2-D masks, from the voxel spacing.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..registry import MetricGroup, MetricSpec, MetricValue, StructurePair, emptiness_status, register_group


@dataclass(frozen=True)
class ConfusionCounts:
    """Voxel counts of a binary comparison: true positives, false positives, false negatives."""

    tp: int
    fp: int
    fn: int

    @property
    def reference(self) -> int:
        return self.tp + self.fn

    @property
    def test(self) -> int:
        return self.tp + self.fp


def confusion_counts(reference: np.ndarray, test: np.ndarray) -> ConfusionCounts:
    """Count TP/FP/FN voxels of two boolean masks of the same shape."""
    reference = np.asarray(reference, dtype=bool)
    test = np.asarray(test, dtype=bool)
    if reference.shape != test.shape:
        raise ValueError(f"mask shapes differ: {reference.shape} vs {test.shape}")
    tp = int(np.count_nonzero(reference & test))
    return ConfusionCounts(tp, int(np.count_nonzero(test)) - tp, int(np.count_nonzero(reference)) - tp)


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else math.nan


def overlap_ratios(c: ConfusionCounts) -> dict:
    """Dice, Jaccard, sensitivity, precision and volumetric similarity from voxel counts.

    A ratio whose denominator is zero is NaN (both empty for Dice/Jaccard/VS; empty reference for
    sensitivity; empty test for precision).
    """
    return {
        "dice": _ratio(2 * c.tp, c.reference + c.test),
        "jaccard": _ratio(c.tp, c.tp + c.fp + c.fn),
        "sensitivity": _ratio(c.tp, c.reference),
        "precision": _ratio(c.tp, c.test),
        "volumetric_similarity": 1 - _ratio(abs(c.test - c.reference), c.test + c.reference),
    }


def dice(reference: np.ndarray, test: np.ndarray) -> float:
    """Dice = 2|R∩T| / (|R| + |T|); NaN when both masks are empty."""
    return overlap_ratios(confusion_counts(reference, test))["dice"]


def jaccard(reference: np.ndarray, test: np.ndarray) -> float:
    """Jaccard (IoU) = |R∩T| / |R∪T|; NaN when both masks are empty."""
    return overlap_ratios(confusion_counts(reference, test))["jaccard"]


def _volume_unit(ndim: int) -> tuple:
    """(scale from mm^ndim, unit name): ml for 3-D, mm² for 2-D."""
    return (1e-3, "ml") if ndim == 3 else (1.0, "mm2")


OVERLAP_METRICS = (
    MetricSpec("dice", "1", "higher", "Dice similarity coefficient 2|R∩T|/(|R|+|T|)"),
    MetricSpec("jaccard", "1", "higher", "Jaccard index / IoU |R∩T|/|R∪T|"),
    MetricSpec("sensitivity", "1", "higher", "true positive rate |R∩T|/|R|"),
    MetricSpec("precision", "1", "higher", "positive predictive value |R∩T|/|T|"),
    MetricSpec("volumetric_similarity", "1", "higher", "1 − ||T|−|R|| / (|T|+|R|)"),
    MetricSpec("volume_reference_ml", "ml", "none", "reference volume (area in mm² for 2-D)"),
    MetricSpec("volume_test_ml", "ml", "none", "test volume (area in mm² for 2-D)"),
    MetricSpec("false_positive_volume_ml", "ml", "lower", "volume of test outside the reference"),
    MetricSpec("false_negative_volume_ml", "ml", "lower", "volume of reference missed by the test"),
)


def compute_overlap(pair: StructurePair, params=None) -> list:
    """All overlap metrics of one structure pair, each with the pair's emptiness status.

    Undefined ratios are NaN (see :func:`overlap_ratios`); volumes are always defined.
    """
    c = confusion_counts(pair.reference, pair.test)
    status = emptiness_status(c.reference > 0, c.test > 0)
    scale, unit = _volume_unit(pair.reference.ndim)
    voxel = float(np.prod(pair.spacing)) * scale
    values = {
        **overlap_ratios(c),
        "volume_reference_ml": c.reference * voxel,
        "volume_test_ml": c.test * voxel,
        "false_positive_volume_ml": c.fp * voxel,
        "false_negative_volume_ml": c.fn * voxel,
    }
    return [
        MetricValue(spec.name, values[spec.name], unit if spec.unit == "ml" else spec.unit, status)
        for spec in OVERLAP_METRICS
    ]


register_group(MetricGroup("overlap", OVERLAP_METRICS, compute_overlap, "voxel-counting overlap and volumes"))

