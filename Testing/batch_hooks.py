"""Test-only evaluation functions for batch runs; module-level so that spawned worker processes can import them."""
import os
import signal

from segmetrics.evaluation.batch import evaluate_case

#: Case id prefix → signal the case's process sends itself (a segfaulting kernel, the out-of-memory killer).
FATAL_SIGNALS = {"segfault": signal.SIGSEGV, "oom": signal.SIGKILL}


def evaluate_or_die(case, **job):
    """:func:`segmetrics.evaluation.batch.evaluate_case`, except that a case whose id starts with a key of
    :data:`FATAL_SIGNALS` kills its own process with that signal."""
    for prefix, number in FATAL_SIGNALS.items():
        if case.case_id.startswith(prefix):
            os.kill(os.getpid(), number)
    return evaluate_case(case, **job)


def evaluate_noting_held_results(case, **job):
    """:func:`segmetrics.evaluation.batch.evaluate_case` on a Dask worker, slowed by 0.3 s, with a note
    ``held N``: how many finished results the worker still held when the case finished."""
    import time

    from distributed import get_worker

    time.sleep(0.3)  # time for the submitting process to collect the previous case
    outcome = evaluate_case(case, **job)
    outcome.notes.append(f"held {len(get_worker().data)}")
    return outcome
