"""SegMetrics: segmentation evaluation with geometry-aware metrics.

Importable without Slicer or Qt. Arrays are in NumPy/SimpleITK array order ``(z, y, x)`` and every
``spacing`` is in mm in that same order; see :mod:`segmetrics.geometry`.
"""
from .compare import ComparisonResult, StructureResult, compare
from .frames import EdgeRules, evaluate_folders, evaluate_frames
from .geometry import GeometryMismatchError, LabelImage
from .instances import average_precision, detection_scores, instances_from_labels, instances_from_semantic
from .registry import MetricValue, Parameters, Status, metric_specs

__version__ = "0.1.0"

__all__ = [
    "compare",
    "ComparisonResult",
    "StructureResult",
    "LabelImage",
    "GeometryMismatchError",
    "MetricValue",
    "Parameters",
    "Status",
    "metric_specs",
    "EdgeRules",
    "evaluate_frames",
    "evaluate_folders",
    "average_precision",
    "detection_scores",
    "instances_from_labels",
    "instances_from_semantic",
]
