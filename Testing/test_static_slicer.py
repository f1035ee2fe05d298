"""Static checks of the Slicer extension files; they need neither Slicer nor slicer-core."""
import ast
import builtins
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
MODULE = ROOT / "SegMetricsModule"
MODULE_PY = MODULE / "SegMetrics.py"
UI_FILE = MODULE / "Resources" / "UI" / "SegMetrics.ui"


def cmake_listed_files() -> set:
    """Paths listed in SegMetricsModule/CMakeLists.txt (SCRIPTS and RESOURCES), ${MODULE_NAME} expanded."""
    text = (MODULE / "CMakeLists.txt").read_text()
    name = re.search(r"set\(MODULE_NAME\s+(\S+)\)", text).group(1)
    blocks = re.findall(r"set\(MODULE_PYTHON_(?:SCRIPTS|RESOURCES)\s+(.*?)\)", text, re.S)
    return {entry.replace("${MODULE_NAME}", name) for block in blocks for entry in block.split()}


def ui_widget_names() -> set:
    return {w.get("name") for w in ET.parse(UI_FILE).iter("widget")}


def test_every_module_file_is_listed_in_cmake():
    on_disk = {
        p.relative_to(MODULE).as_posix()
        for p in MODULE.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc" and p.name != "CMakeLists.txt"
    }
    listed = cmake_listed_files()
    assert "segmetrics/__init__.py" in on_disk and "SegMetrics.py" in on_disk
    assert sorted(on_disk - listed) == [], "files missing from SegMetricsModule/CMakeLists.txt"
    assert sorted(listed - on_disk) == [], "CMakeLists.txt lists files that do not exist (fatal at configure time)"


def test_every_ui_attribute_used_exists_in_the_ui_file():
    used = set(re.findall(r"self\.ui\.(\w+)", MODULE_PY.read_text()))
    assert {"applyButton", "referenceSegmentSelector", "testSegmentSelector"} <= used
    assert sorted(used - ui_widget_names()) == []


def test_parameter_bindings_in_the_ui_match_the_parameter_node():
    """Every SlicerParameterName in the .ui names a field of the @parameterNodeWrapper class."""
    tree = ast.parse(MODULE_PY.read_text())
    wrapper = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "SegMetricsParameterNode")
    fields = {s.target.id for s in wrapper.body if isinstance(s, ast.AnnAssign)}
    bound = {
        prop.find("string").text
        for prop in ET.parse(UI_FILE).iter("property")
        if prop.get("name") == "SlicerParameterName"
    }
    assert {"allSegments", "outputTable", "colorArray"} <= bound
    assert sorted(bound - fields) == []


def _undefined_names(source: str) -> set:
    """Names loaded somewhere but bound nowhere in the module (a coarse, scope-free pyflakes)."""
    tree = ast.parse(source)
    bound = set(dir(builtins)) | {"__file__", "__name__"}
    loaded = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Name):
            (bound if isinstance(node.ctx, (ast.Store, ast.Del)) else loaded).add(node.id)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return loaded - bound


def test_module_parses_and_has_no_undefined_names():
    source = MODULE_PY.read_text()
    assert _undefined_names(source) == set()
    classes = {n.name for n in ast.parse(source).body if isinstance(n, ast.ClassDef)}
    assert {"SegMetrics", "SegMetricsWidget", "SegMetricsLogic", "SegMetricsTest"} <= classes


def test_undefined_name_check_catches_a_typo():
    assert _undefined_names("import os\ndef f(x):\n    return os.path.join(x, y)\n") == {"y"}


def test_no_package_installation_at_import_time():
    """pip is only called from a function (on Apply), never at module level."""
    tree = ast.parse(MODULE_PY.read_text())
    top_level = [n for n in tree.body if not isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    assert "pip" not in "".join(ast.unparse(n) for n in top_level)


def test_catalog_entry():
    raw = (ROOT / "SegMetrics.json").read_bytes()
    assert b"\r" not in raw, "the ExtensionsIndex requires LF line endings"
    entry = json.loads(raw)
    assert entry["$schema"].endswith("slicer-extension-catalog-entry-schema-v1.0.1.json#")
    assert entry["category"] in ("Quantification", "Segmentation")
    assert entry["scm_url"].startswith("https://") and entry["scm_url"].endswith(".git")
    assert 1 <= entry.get("tier", 1) <= 5


@pytest.fixture(scope="module")
def top_cmake() -> str:
    return (ROOT / "CMakeLists.txt").read_text()


def test_top_level_cmake_has_the_extension_fields(top_cmake):
    assert re.search(r"^project\(SegMetrics\)", top_cmake, re.M)
    for variable in ("HOMEPAGE", "CATEGORY", "CONTRIBUTORS", "DESCRIPTION", "ICONURL", "SCREENSHOTURLS", "DEPENDS"):
        assert re.search(rf'set\(EXTENSION_{variable} "[^"]+"\)', top_cmake), variable
    assert "add_subdirectory(SegMetricsModule)" in top_cmake
    assert top_cmake.index("find_package(Slicer REQUIRED)") < top_cmake.index("add_subdirectory(SegMetricsModule)")
    assert top_cmake.rstrip().endswith("include(${Slicer_EXTENSION_CPACK})")


def test_icon_and_screenshot_urls_point_at_committed_files(top_cmake):
    for variable in ("ICONURL", "SCREENSHOTURLS"):
        url = re.search(rf'set\(EXTENSION_{variable} "([^"]+)"\)', top_cmake).group(1)
        path = ROOT / url.split("/main/", 1)[1]
        assert path.is_file(), url
    with Image.open(MODULE / "Resources" / "Icons" / "SegMetrics.png") as icon:
        assert icon.size == (128, 128)


def test_requirements_are_not_slicer_bundled_packages():
    requirements = (MODULE / "Resources" / "requirements.txt").read_text().split()
    names = {re.split(r"[<>=!~ ;]", r)[0].lower() for r in requirements}
    assert "scikit-image" in names
    assert not names & {"numpy", "scipy", "simpleitk", "vtk"}
