"""Checkpoints inside long loops, where a caller may report progress or stop the work.

The long loops (per slice, per structure, per metric group) call :func:`checkpoint`; it does
nothing unless a caller has set a hook with :func:`checkpoints`, e.g. the Slicer module, whose hook
keeps the user interface responsive and raises to cancel a run. The hook is held in a context
variable, so it is called only in the thread (and context) that set it, never in worker threads.
"""
from __future__ import annotations

import contextvars
from contextlib import contextmanager

_HOOK = contextvars.ContextVar("segmetrics_checkpoint_hook", default=None)


def checkpoint() -> None:
    """Call the hook set by :func:`checkpoints` (it may raise to stop the work); nothing without one."""
    hook = _HOOK.get()
    if hook is not None:
        hook()


@contextmanager
def checkpoints(hook):
    """Call ``hook()`` (no argument) at every :func:`checkpoint` reached inside the ``with`` block."""
    token = _HOOK.set(hook)
    try:
        yield
    finally:
        _HOOK.reset(token)
