"""SegMetrics: segmentation evaluation with geometry-aware metrics.

Importable without Slicer or Qt. Arrays are in NumPy/SimpleITK array order ``(z, y, x)`` and every
``spacing`` is in mm in that same order; see :mod:`segmetrics.geometry`.
"""
from .compare import ComparisonResult, StructureResult, compare
from .geometry import GeometryMismatchError, LabelImage
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
]
