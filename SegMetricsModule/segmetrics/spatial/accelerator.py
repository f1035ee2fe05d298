"""Whether the optional compiled accelerator (numba) runs the kernels.

Every metric computes on the packages 3D Slicer bundles (numpy, scipy, SimpleITK, VTK); numba, when
installed, runs the same algorithms compiled, with the same values. ``SEGMETRICS_ACCELERATOR=off``
in the environment (read at each call) forces the bundled-packages path, e.g. to compare the two.
"""
import functools
import importlib.util
import os

#: Environment variable that turns the accelerator off (``off``) or leaves it to availability (``auto``).
ENVIRONMENT_VARIABLE = "SEGMETRICS_ACCELERATOR"


@functools.lru_cache(maxsize=None)
def numba_installed() -> bool:
    """Whether numba can be imported (checked once per process, without importing it)."""
    return importlib.util.find_spec("numba") is not None


def use_numba() -> bool:
    """Whether the compiled kernels run: numba is installed and ``SEGMETRICS_ACCELERATOR`` is not ``off``."""
    return os.environ.get(ENVIRONMENT_VARIABLE, "auto").strip().lower() != "off" and numba_installed()


def kernels(bundled):
    """The module whose functions run the kernels: :mod:`segmetrics.spatial._kernels` (numba) when
    :func:`use_numba`, else ``bundled``, a module of the same functions (same arguments, same values to
    1e-9 relative) built on numpy, scipy and VTK only."""
    if use_numba():
        from . import _kernels
        return _kernels
    return bundled
