"""The package's folders are its layers, and imports only go down them.

Layers, lowest first: ``registry`` and ``_version``; ``spatial``; ``inputs``; ``metrics``; ``outputs``;
``evaluation``; the applications (``cli``, ``demo``, ``report``, ``mrml`` and the package root). A module
may import its own layer and any layer below, never one above: function-level imports count too.
"""
import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "SegMetricsModule" / "segmetrics"
LAYERS = ["registry", "_version", "spatial", "inputs", "metrics", "outputs", "evaluation", "application"]
RANK = {"registry": 0, "_version": 0, "spatial": 1, "inputs": 2, "metrics": 3, "outputs": 4, "evaluation": 5,
        "application": 6}


def _layer(parts):
    """The layer of a module given by its dotted path inside the package (``("metrics", "msi")``)."""
    if not parts:
        return "application"  # the package root re-exports the public API
    return parts[0] if parts[0] in RANK else "application"


def _module_parts(path):
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def _imported(path):
    """Every package module a file imports, as dotted parts inside the package."""
    here = _module_parts(path)
    package = here if path.name == "__init__.py" else here[:-1]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                target = base + (node.module.split(".") if node.module else [])
            elif node.module and node.module.split(".")[0] == "segmetrics":
                target = node.module.split(".")[1:]
            else:
                continue
            if node.module is None or node.module.split(".")[-1] not in RANK:
                yield node.lineno, target + ([node.names[0].name] if node.module is None else [])
            else:
                yield node.lineno, target
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "segmetrics":
                    yield node.lineno, alias.name.split(".")[1:]


MODULES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_go_down_the_layers(path):
    own = RANK[_layer(_module_parts(path))]
    upward = [f"line {line}: {'.'.join(target) or 'segmetrics'} ({_layer(target)})"
              for line, target in _imported(path) if RANK[_layer(target)] > own]
    assert not upward, f"{path.relative_to(PACKAGE)} ({_layer(_module_parts(path))}) imports upward: {upward}"


def test_every_module_is_in_a_layer_folder_or_is_an_application():
    top_level = {p.stem for p in PACKAGE.glob("*.py")}
    assert top_level == {"__init__", "_version", "registry", "cli", "demo", "report", "mrml"}
    assert {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()} == set(LAYERS[2:-1])


#: Inside ``inputs`` data flows down too: the generic checks and the polygon, mask and grid helpers, then the
#: format readers, then ``io`` (reading, label-map checks, pairing); a module imports only its rank or below.
INPUTS_RANK = {"validation": 0, "structure_names": 0, "polygons": 0, "masks": 0, "grids": 0, "readers": 1, "io": 2, "dicom_folders": 2}


@pytest.mark.parametrize("path", sorted((PACKAGE / "inputs").rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_inputs_flow_from_files_to_readers_to_pairing(path):
    parts = _module_parts(path)
    if len(parts) < 2:
        return  # the package's own __init__
    own = INPUTS_RANK[parts[1]]
    upward = [f"line {line}: {'.'.join(target)}" for line, target in _imported(path)
              if target[:1] == ["inputs"] and len(target) > 1 and INPUTS_RANK.get(target[1], 0) > own]
    assert not upward, f"{path.relative_to(PACKAGE)} imports upward within inputs: {upward}"
