"""Stand-ins for the parts of the Slicer application that slicer-core lacks, so that SegMetrics.py
imports and its logic and self-test run on a real (headless) MRML scene.

slicer-core has the MRML scene, nodes and module logics, but no ``qt``, ``slicer.app``,
``slicer.ScriptedLoadableModule``, ``slicer.parameterNodeWrapper`` or ``slicer.i18n``. The
stand-ins do only what the module needs at import and in its logic and tests; their behaviour
follows Slicer v5.12.0 (``Base/Python/slicer/ScriptedLoadableModule.py``: the test base class is a
``unittest.TestCase``; ``slicer/i18n.py``: ``tr`` returns the text when untranslated).
"""
import importlib.abc
import logging
import socket
import sys
import types
import unittest

import slicer

from segmetrics import mrml

#: The Slicer slice views and their orientations.
SLICE_VIEWS = {"Red": "Axial", "Yellow": "Sagittal", "Green": "Coronal"}


class ScriptedLoadableModuleTest(unittest.TestCase):
    """Slicer's test base class without its display: ``delayDisplay`` does nothing. As in v5.12.0,
    ``runTest`` (what *Reload and Test* calls) runs every callable attribute whose name contains
    "test", in ``dir`` (alphabetical) order, each after ``setUp``; with none, it only warns."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.moduleTestNames = [name for name in dir(self) if "test" in name and callable(getattr(self, name))]

    def delayDisplay(self, message, requestedDelay=None, msec=None):
        pass

    def runTest(self):
        if not self.moduleTestNames:
            logging.warning("No test is defined in " + self.__class__.__name__)
            return
        self.setUpClass()
        for name in self.moduleTestNames:
            self.setUp()
            getattr(self, name)()
            self.tearDown()
        self.tearDownClass()


def stand_in_modules() -> dict:
    """``{module name: stand-in module}`` for ``sys.modules``."""
    scripted = types.ModuleType("slicer.ScriptedLoadableModule")
    for name in ("ScriptedLoadableModule", "ScriptedLoadableModuleWidget"):
        setattr(scripted, name, type(name, (), {"__init__": lambda self, *a: None}))
    scripted.ScriptedLoadableModuleLogic = type("ScriptedLoadableModuleLogic", (), {"__init__": lambda self: None})
    scripted.ScriptedLoadableModuleTest = ScriptedLoadableModuleTest
    wrapper = types.ModuleType("slicer.parameterNodeWrapper")
    wrapper.parameterNodeWrapper = lambda cls: cls
    wrapper.Choice = wrapper.WithinRange = lambda *args: None
    i18n = types.ModuleType("slicer.i18n")
    i18n.tr = lambda text: text
    i18n.translate = lambda context, text: text
    return {"slicer.ScriptedLoadableModule": scripted, "slicer.parameterNodeWrapper": wrapper, "slicer.i18n": i18n,
            "qt": types.ModuleType("qt")}


class Application:
    """``slicer.app`` on a headless scene: application logic, slice views by name, testing mode."""

    def __init__(self):
        self.headless = mrml.create_headless_scene()
        scene = self.headless.scene
        self.slice_logics = {}
        for name, orientation in SLICE_VIEWS.items():
            logic = slicer.vtkMRMLSliceLogic()
            logic.SetMRMLApplicationLogic(self.headless.app_logic)
            logic.SetMRMLScene(scene)
            logic.AddSliceNode(name).SetOrientation(orientation)
            self.slice_logics[name] = logic
        layout = scene.AddNewNodeByClass("vtkMRMLLayoutNode")
        layout.SetSingletonTag("vtkMRMLLayoutNode")  # as in Slicer: it survives scene.Clear()
        layout.SetViewArrangement(slicer.vtkMRMLLayoutNode.SlicerLayoutOneUp3DView)

    @property
    def scene(self):
        return self.headless.scene

    def applicationLogic(self):
        return self.headless.app_logic

    def layoutManager(self):
        slice_node = lambda name: self.slice_logics[name].GetSliceNode()  # noqa: E731
        widget = lambda name: types.SimpleNamespace(mrmlSliceNode=lambda: slice_node(name))  # noqa: E731
        return types.SimpleNamespace(sliceWidget=widget)

    def testingEnabled(self):
        return True

    def processEvents(self):
        pass


def install(patch) -> Application:
    """Put the stand-ins in place with ``patch`` (a ``pytest.MonkeyPatch``); returns ``slicer.app``."""
    for name, module in stand_in_modules().items():
        patch.setitem(sys.modules, name, module)
    app = Application()
    patch.setattr(slicer, "app", app, raising=False)
    patch.setattr(slicer, "mrmlScene", app.scene, raising=False)
    return app


class BlockImports(importlib.abc.MetaPathFinder):
    """Makes the top-level packages ``names`` unimportable, as in a Slicer without them."""

    def __init__(self, names):
        self.names = set(names)

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in self.names:
            raise ImportError(f"{name} is not installed (blocked for the test)")


def block_network(patch) -> None:
    """Every socket connection fails, as on a build machine or workstation without network."""
    def refuse(*args, **kwargs):
        raise OSError("network access is blocked for the test")

    patch.setattr(socket.socket, "connect", refuse)
    patch.setattr(socket, "create_connection", refuse)
