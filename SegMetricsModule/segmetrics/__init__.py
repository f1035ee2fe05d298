"""SegMetrics: segmentation evaluation with geometry-aware metrics.

Importable without Slicer or Qt. Arrays are in NumPy/SimpleITK array order ``(z, y, x)`` and every
``spacing`` is in mm in that same order; see :mod:`segmetrics.geometry`.

Importing the package needs only NumPy and SimpleITK (so the Slicer module loads before its extra
packages are installed); the frame and instance functions below load their modules on first use.
"""
import importlib

from .compare import ComparisonResult, NothingToCompareError, StructureResult, compare
from .geometry import GeometryMismatchError, LabelImage
from .registry import MetricValue, ParameterError, Parameters, Status, metric_specs
from .validation import InputPolicy, ReadError

__version__ = "0.2.0"

#: Public names served lazily from submodules that need scikit-image.
_LAZY = {
    "EdgeRules": "frames",
    "evaluate_frames": "frames",
    "evaluate_folders": "frames",
    "average_precision": "instances",
    "detection_scores": "instances",
    "instances_from_labels": "instances",
    "instances_from_semantic": "instances",
}


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "compare",
    "ComparisonResult",
    "StructureResult",
    "LabelImage",
    "GeometryMismatchError",
    "NothingToCompareError",
    "InputPolicy",
    "ReadError",
    "ParameterError",
    "MetricValue",
    "Parameters",
    "Status",
    "metric_specs",
    *_LAZY,
]
