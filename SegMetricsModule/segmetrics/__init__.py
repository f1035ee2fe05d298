"""SegMetrics: segmentation evaluation with geometry-aware metrics.

Importable without Slicer or Qt. Arrays are in NumPy/SimpleITK array order ``(z, y, x)`` and every
``spacing`` is in mm in that same order; see :mod:`segmetrics.spatial.geometry`.

Importing the package needs only NumPy and SimpleITK (so the Slicer module loads before its extra
packages are installed); the frame and instance functions below load their modules on first use.
"""
import importlib

from .evaluation.compare import ComparisonResult, NothingToCompareError, StructureResult, compare
from .spatial.geometry import GeometryMismatchError, LabelImage
from .registry import MetricValue, ParameterError, Parameters, Status, metric_specs
from .inputs.validation import InputPolicy, ReadError
from ._version import __version__


#: Public names served lazily from submodules that need scikit-image.
_LAZY = {
    "EdgeRules": "evaluation.frames",
    "evaluate_frames": "evaluation.frames",
    "evaluate_folders": "evaluation.frames",
    "average_precision": "metrics.instances",
    "detection_scores": "metrics.instances",
    "instances_from_labels": "metrics.instances",
    "instances_from_semantic": "metrics.instances",
}


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "__version__",
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
