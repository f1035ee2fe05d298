"""Provenance of a result: software version, time, command, input files and settings.

Every output (JSON, the CSV sidecar, batch ``run.json``, the report) carries the same block so a
number can be traced back to the files and settings that produced it. Standard library only.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import platform
import sys
from datetime import datetime, timezone
from pathlib import Path

#: Bytes read at a time when hashing an input file.
_HASH_CHUNK = 1 << 20


def utc_now() -> str:
    """The current time in UTC, ISO 8601 to the second (``2026-12-01T15:36:54Z``)."""
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def file_info(path) -> dict:
    """``{"path", "size_bytes", "sha256"}`` of one input file (absolute path; a missing file has no size/hash)."""
    path = Path(path)
    info = {"path": str(path.resolve())}
    if path.is_file():
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(_HASH_CHUNK), b""):
                digest.update(chunk)
        info.update(size_bytes=path.stat().st_size, sha256=digest.hexdigest())
    return info


def describe_input(source) -> dict:
    """Provenance of one input: :func:`file_info` for a path, else its Python type (an in-memory image)."""
    if isinstance(source, (str, os.PathLike)):
        return file_info(source)
    return {"in_memory": f"{type(source).__module__}.{type(source).__qualname__}"}


def grid_info(image) -> dict:
    """The voxel grid of a :class:`~segmetrics.spatial.geometry.LabelImage`: shape and spacing in array order
    ``(z, y, x)`` (mm), origin (mm) and direction in ITK (x, y, z) order."""
    return {"shape_zyx": list(image.array.shape), "spacing_mm_zyx": list(image.spacing),
            "origin_mm_xyz": list(image.origin), "direction_xyz": list(image.direction)}


def plain(value):
    """``value`` with dataclasses turned into dicts (JSON-able settings)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


def provenance(inputs: dict | None = None, settings: dict | None = None, command=None, **extra) -> dict:
    """The provenance block: ``software``, ``version``, ``created_utc``, ``command`` (the command line
    when run from the CLI, else ``None``), ``python``, ``platform``, ``inputs`` (name -> :func:`describe_input`
    result), ``settings`` (dataclasses made dicts) and any ``extra`` entries."""
    from .._version import __version__

    return {
        "software": "segmetrics",
        "version": __version__,
        "created_utc": utc_now(),
        "command": command,
        "python": sys.version.split()[0],
        "platform": platform.platform(terse=True),
        "inputs": dict(inputs or {}),
        "settings": {key: plain(value) for key, value in (settings or {}).items()},
        **extra,
    }

