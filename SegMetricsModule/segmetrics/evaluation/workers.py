"""Crash-isolated worker processes: a task that kills its process costs only that task.

:func:`run_isolated` keeps ``processes`` child processes (``spawn`` start method) that each take
one task at a time over a pipe. When a child dies (segmentation fault in compiled code, killed by
the kernel's out-of-memory killer, ``os._exit``), the task it held is answered with
:class:`WorkerDied` naming the signal, a new child replaces it, and the other tasks go on. Children
are persistent: their start-up (NumPy, VTK, numba imports) is paid once per child, not per task.
"""
from __future__ import annotations

import contextlib
import multiprocessing
import signal
from multiprocessing.connection import wait


#: First message of a child: started, ready for tasks.
READY = "ready"


class WorkerDied(Exception):
    """The child process running a task ended without answering (its signal or exit status in the message)."""


def death_description(exitcode: int | None) -> str:
    """``"killed by SIGSEGV"`` for a negative exit code (a signal), ``"exited with status 3"`` otherwise."""
    if exitcode is not None and exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exited with status {exitcode}"


def _serve(connection, function, initializer, initargs) -> None:
    """Child loop: receive a task, send back its result or the exception it raised; stop on ``None``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it ends the children
    if initializer is not None:
        initializer(*initargs)
    connection.send(READY)
    while True:
        try:
            task = connection.recv()
        except EOFError:  # the parent is gone
            return
        if task is None:
            return
        try:
            answer = function(task)
        except Exception as error:
            answer = error
        try:
            connection.send(answer)
        except (BrokenPipeError, EOFError):
            return
        except Exception as error:  # an unpicklable result or exception: send its description instead
            connection.send(RuntimeError(f"{type(error).__name__}: {error}"))


class _Child:
    """One child process, the parent's end of its pipe, and the task it holds."""

    def __init__(self, context, function, initializer, initargs):
        self.connection, child_end = context.Pipe()
        self.process = context.Process(target=_serve, args=(child_end, function, initializer, initargs), daemon=True)
        self.process.start()
        child_end.close()
        self.task, self.busy = None, False

    def wait_ready(self) -> None:
        """Wait until the child has started; :class:`ChildProcessError` if it died first (e.g. the
        function could not be imported there), since every task would then fail alike."""
        wait([self.connection, self.process.sentinel])
        try:
            if self.connection.poll() and self.connection.recv() == READY:
                return
        except (EOFError, OSError):
            pass
        self.process.join()
        raise ChildProcessError(f"a worker process could not start ({death_description(self.process.exitcode)}); "
                                "its error is printed above")

    def give(self, task) -> None:
        self.task, self.busy = task, True
        with contextlib.suppress(OSError):  # died since its last answer: its sentinel reports it
            self.connection.send(task)

    def answer(self):
        """The result (or raised exception) of the held task; :class:`WorkerDied` when the child died."""
        self.busy = False
        try:
            if self.connection.poll():
                return self.connection.recv()
        except (EOFError, OSError):
            pass
        self.process.join()
        return WorkerDied(death_description(self.process.exitcode))

    def stop(self) -> None:
        """Ask an idle child to end (killed if it does not within 5 s); kill a busy one."""
        if self.busy:
            self.process.kill()
        elif self.process.is_alive():
            with contextlib.suppress(OSError):
                self.connection.send(None)
            self.process.join(5.0)
            if self.process.is_alive():
                self.process.kill()
        self.process.join()
        self.connection.close()


def run_isolated(function, tasks, processes: int = 1, initializer=None, initargs=()):
    """Run ``function(task)`` for every task in child processes; yield ``(task, result)`` as each finishes.

    ``result`` is the return value, the exception the function raised, or :class:`WorkerDied` when
    the child died while running it (a new child then takes its place). ``function``,
    ``initializer``, the tasks and the results must be picklable (module-level functions).
    ``initializer(*initargs)`` runs once in each child before its first task. Results come in
    order of completion.
    """
    pending = list(tasks)[::-1]  # pop() takes them in the given order
    context = multiprocessing.get_context("spawn")
    children = []
    try:
        children = [_Child(context, function, initializer, initargs) for _ in range(min(max(processes, 1), len(pending)))]
        for child in children:
            child.wait_ready()
            child.give(pending.pop())
        while any(child.busy for child in children):
            busy = [child for child in children if child.busy]
            ready = set(wait([c.connection for c in busy] + [c.process.sentinel for c in busy]))
            for index, child in enumerate(children):
                if not child.busy or not {child.connection, child.process.sentinel} & ready:
                    continue
                task, result = child.task, child.answer()
                if pending:
                    if not child.process.is_alive():
                        child.stop()
                        child = children[index] = _Child(context, function, initializer, initargs)
                        child.wait_ready()
                    child.give(pending.pop())
                yield task, result
    finally:
        for child in children:
            child.stop()
