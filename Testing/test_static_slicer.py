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
    """Paths listed in SegMetricsModule/CMakeLists.txt (SCRIPTS and RESOURCES), with ${MODULE_NAME}
    and the ``file(GLOB_RECURSE VARIABLE RELATIVE ... CONFIGURE_DEPENDS dir/pattern ...)`` variables
    expanded as CMake does (each pattern matched in its ``dir`` and every folder below it)."""
    text = (MODULE / "CMakeLists.txt").read_text()
    variables = {"MODULE_NAME": re.search(r"set\(MODULE_NAME\s+(\S+)\)", text).group(1)}
    for variable, patterns in re.findall(r"file\(GLOB_RECURSE (\w+) RELATIVE \S+ CONFIGURE_DEPENDS ([^)]+)\)", text):
        found = [p for folder, name in (pattern.rsplit("/", 1) for pattern in patterns.split())
                 for p in (MODULE / folder).rglob(name) if p.is_file() and "__pycache__" not in p.parts]
        variables[variable] = " ".join(p.relative_to(MODULE).as_posix() for p in found)
    blocks = re.findall(r"set\(MODULE_PYTHON_(?:SCRIPTS|RESOURCES)\s+(.*?)\)", text, re.S)
    listed = " ".join(blocks)
    for variable, value in variables.items():
        listed = listed.replace("${" + variable + "}", value)
    return set(listed.split())


def ui_widget_names() -> set:
    return {w.get("name") for w in ET.parse(UI_FILE).iter("widget")}


def test_every_module_file_is_listed_in_cmake():
    on_disk = {
        p.relative_to(MODULE).as_posix()
        for p in MODULE.rglob("*")
        if p.is_file() and p.suffix != ".pyc" and p.name != "CMakeLists.txt"
        and not any(part == "__pycache__" or part.endswith(".egg-info") for part in p.parts)
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


def test_every_mrml_widget_gets_the_scene():
    """Each MRML widget of the .ui receives the scene: ``uiWidget.setMRMLScene`` sets only the root
    ``qMRMLWidget``, which passes it on through its ``mrmlSceneChanged(vtkMRMLScene*)`` signal to the
    ``setMRMLScene`` slot of the widgets connected in the .ui (as in Slicer's module templates); a
    node selector left out lists no node. The parameter node wrapper's connectors set no scene."""
    root = ET.parse(UI_FILE).getroot()
    top = root.find("widget").get("name")
    mrml_widgets = {w.get("name") for w in root.find("widget").iter("widget") if w.get("class").startswith("qMRML")}
    fed = {c.findtext("receiver") for c in root.iter("connection")
           if (c.findtext("sender"), c.findtext("signal"), c.findtext("slot"))
           == (top, "mrmlSceneChanged(vtkMRMLScene*)", "setMRMLScene(vtkMRMLScene*)")}
    assert {"referenceSegmentSelector", "doseVolumeSelector", "outputTableSelector"} <= mrml_widgets
    assert sorted(mrml_widgets - {top} - fed) == []


#: Slicer modules whose logic the module's files call, by what the call looks like.
LOGIC_CALLS = {"Segmentations": "vtkSlicerSegmentationsModuleLogic", "Colors": "vtkSlicerColorLogic",
               "Plots": 'GetModuleLogic("Plots")'}


def test_the_module_depends_on_the_modules_whose_logic_it_calls():
    """``parent.dependencies`` names every module whose logic is called, so that Slicer loads them
    first and does not load SegMetrics without them (``qSlicerAbstractCoreModule::dependencies``)."""
    tree = ast.parse(MODULE_PY.read_text())
    declared = next(ast.literal_eval(n.value) for n in ast.walk(tree) if isinstance(n, ast.Assign)
                    and _dotted(n.targets[0]) == "self.parent.dependencies")
    sources = "".join(p.read_text() for p in SLICER_SOURCES)
    called = {module for module, call in LOGIC_CALLS.items() if call in sources}
    assert called == set(LOGIC_CALLS)  # the patterns still find the calls
    assert sorted(called - set(declared)) == []


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
    """pip is only called from a function (after Apply, when the user agrees), never at module level."""
    tree = ast.parse(MODULE_PY.read_text())
    top_level = [n for n in tree.body if not isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    calls = {_dotted(c.func) for n in top_level for c in ast.walk(n) if isinstance(c, ast.Call)}
    assert [c for c in calls if "pip" in c] == []
    calls = {_dotted(c.func) for c in ast.walk(tree) if isinstance(c, ast.Call)}
    assert {"slicer.util.pip_install", "packaging.pip_ensure"} <= calls  # the check above sees calls


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
        for url in re.search(rf'set\(EXTENSION_{variable} "([^"]+)"\)', top_cmake).group(1).split():
            path = ROOT / url.split("/main/", 1)[1]
            assert path.is_file(), url
    with Image.open(MODULE / "Resources" / "Icons" / "SegMetrics.png") as icon:
        assert icon.size == (128, 128)


def accelerator_requirements() -> list:
    lines = (MODULE / "Resources" / "accelerator-requirements.txt").read_text().splitlines()
    return [line for line in (raw.split("#")[0].strip() for raw in lines) if line]


def test_the_module_requires_nothing_and_offers_only_what_slicer_lacks():
    """The only requirements file is the optional accelerator's, and it names no package that
    Slicer 5.12 bundles (pip would replace Slicer's copy)."""
    assert sorted(p.name for p in (MODULE / "Resources").glob("*requirements*")) == ["accelerator-requirements.txt"]
    names = {re.split(r"[<>=!~ ;\[]", r)[0].lower() for r in accelerator_requirements()}
    assert names == {"numba"}
    assert not names & {"numpy", "scipy", "simpleitk", "vtk", "pydicom", "pillow", "highdicom", "packaging"}


def test_pyproject_never_asks_for_newer_bundled_packages_than_slicer_5_12_ships():
    """Lower bounds at or below Slicer 5.12's bundled versions (highdicom 0.27.0, numpy 2.4, ...)."""
    import tomllib

    from packaging.requirements import Requirement

    shipped = {"numpy": "2.4.6", "scipy": "1.17.1", "simpleitk": "2.5.5", "vtk": "9.6.2", "pydicom": "3.0.2",
               "pillow": "12.2.0", "highdicom": "0.27.0"}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = {Requirement(r).name.lower(): Requirement(r) for r in project["dependencies"]}
    for name, version in shipped.items():
        assert requirements[name].specifier.contains(version), (name, str(requirements[name]))
    assert "scikit-image" not in requirements and "shapely" not in requirements


# --- Slicer API names used by the module, checked against slicer-core or Slicer's source ---------

SLICER_SOURCES = [MODULE_PY, MODULE / "segmetrics" / "mrml.py"]

#: Names the desktop application has but slicer-core does not (no Qt, no application object),
#: each checked by hand in Slicer's sources at tag v5.12.0 (and, where noted, v5.10.0):
DESKTOP_ONLY = {
    "slicer.app": "qSlicerApplication (Base/QTGUI); .applicationLogic(), .layoutManager() (qSlicerLayoutManager.h:"
                  " sliceWidget(name); qMRMLSliceWidget.h: mrmlSliceNode(); qMRMLLayoutManager.h: layout), .processEvents(),"
                  " .testingEnabled() (qSlicerCoreApplication.h)",
    "slicer.mrmlScene": "set by the application at start-up (a vtkMRMLScene: StartCloseEvent, EndCloseEvent)",
    "slicer.util.childWidgetVariables": "Base/Python/slicer/util.py",
    "slicer.util.confirmYesNoDisplay": "Base/Python/slicer/util.py",
    "slicer.util.createProgressDialog": "Base/Python/slicer/util.py: a qt.QProgressDialog (has wasCanceled); "
                                        "keyword arguments set its properties (windowModality)",
    "slicer.util.showStatusMessage": "Base/Python/slicer/util.py: (message, duration in ms)",
    "slicer.util.loadUI": "Base/Python/slicer/util.py",
    "slicer.util.tryWithErrorDisplay": "Base/Python/slicer/util.py",
    "slicer.util.pip_install": "Base/Python/slicer/util.py (v5.10.0: list of pip arguments)",
    "slicer.vtkMRMLLayoutNode.SlicerLayoutFourUpPlotTableView": "Libs/MRML/Core/vtkMRMLLayoutNode.h (38)",
}
#: Modules imported from the desktop application only, checked the same way.
DESKTOP_MODULES = {
    "qt": "PythonQt: QTableWidgetItem, QSettings, Qt.WindowModal, QProgressDialog.wasCanceled (Qt property)",
    "slicer.i18n": "Base/Python/slicer/i18n.py: tr, translate (also v5.10.0)",
    "slicer.packaging": "Base/Python/slicer/packaging.py: pip_ensure(requirements as a list of strings, constraints,"
                        " requester, prompt_install; skip_in_testing defaults to True); raises CalledProcessError"
                        " when pip fails",
    "slicer.parameterNodeWrapper": "Base/Python/slicer/parameterNodeWrapper: parameterNodeWrapper, Choice, WithinRange",
    "slicer.ScriptedLoadableModule": "Base/Python/slicer/ScriptedLoadableModule.py",
}


def _dotted(node) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def _slicer_names(path) -> set:
    """Every ``slicer.X.Y...`` chain in a file, longest form only."""
    chains = {_dotted(n) for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Attribute)}
    chains = {c for c in chains if c.startswith("slicer.")}
    return {c for c in chains if not any(other.startswith(c + ".") for other in chains)}


def test_every_slicer_name_exists_in_slicer_core_or_was_checked_in_slicers_source():
    slicer = pytest.importorskip("slicer", reason="slicer-core is not installed")
    unknown = []
    for path in SLICER_SOURCES:
        for chain in sorted(_slicer_names(path)):
            if any(chain == name or chain.startswith(name + ".") for name in (*DESKTOP_ONLY, *DESKTOP_MODULES)):
                continue
            target = slicer
            for part in chain.split(".")[1:]:
                if not hasattr(target, part):
                    unknown.append(f"{path.name}: {chain}")
                    break
                target = getattr(target, part)
    assert unknown == []


def test_every_desktop_only_name_is_still_used():
    """The hand-checked list stays exact: a name no longer used is dropped from it."""
    used = set().union(*(_slicer_names(p) for p in SLICER_SOURCES))
    assert sorted(n for n in DESKTOP_ONLY if not any(u == n or u.startswith(n + ".") for u in used)) == []
    imported = {a.name if isinstance(n, ast.Import) else n.module
                for p in SLICER_SOURCES for n in ast.walk(ast.parse(p.read_text()))
                if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    imported |= set(re.findall(r'import_module\("([\w.]+)"\)', MODULE_PY.read_text()))
    assert sorted(set(DESKTOP_MODULES) - imported) == []


def _vtk_method_names(path) -> set:
    """Names of CamelCase methods called in a file (``x.GetScene()``): VTK/MRML methods; calls on
    imported Python modules (``tempfile.TemporaryDirectory``) are left out."""
    tree = ast.parse(path.read_text())
    modules = {(a.asname or a.name).split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    modules -= {"vtk", "slicer", "qt"}
    return {n.func.attr for n in ast.walk(tree)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and re.match(r"[A-Z]\w*$", n.func.attr)
            and _dotted(n.func.value).split(".")[0] not in modules}


def test_every_vtk_method_called_exists_on_some_slicer_core_or_vtk_class():
    """Method names on MRML/VTK objects (typed only at run time) exist on some class that the
    module's files use: a misspelt or removed method would fail here."""
    slicer = pytest.importorskip("slicer", reason="slicer-core is not installed")
    import vtk

    classes = [getattr(slicer, n) for n in dir(slicer) if n.startswith("vtk")]
    for path in SLICER_SOURCES:
        classes += [getattr(vtk, n) for n in set(re.findall(r"vtk\.(vtk\w+)", path.read_text()))]
    classes += [vtk.vtkPolyData, vtk.vtkPointData, vtk.vtkLookupTable, vtk.vtkDataArray, vtk.vtkTable, vtk.vtkImageData, vtk.vtkVariant,
                vtk.vtkAbstractArray]
    known = set().union(*(dir(c) for c in classes))
    qt_calls = {"QTableWidgetItem", "QSettings"}  # qt classes, see DESKTOP_MODULES
    missing = {f"{p.name}: {name}" for p in SLICER_SOURCES for name in _vtk_method_names(p) - known - qt_calls}
    assert sorted(missing) == []


def test_slicer_guide_states_the_minimum_version_and_the_optional_packages():
    source = MODULE_PY.read_text()
    version = re.search(r'MINIMUM_SLICER_VERSION = "([\d.]+)"', source).group(1)
    guide = (ROOT / "docs" / "SLICER.md").read_text()
    assert f"Slicer {version} or later" in guide
    assert "Requires Slicer {version} or later" in source  # the module's help text
    for line in accelerator_requirements():
        assert f"`{re.split(r'[<>=!~]', line)[0]}`" in guide, line
