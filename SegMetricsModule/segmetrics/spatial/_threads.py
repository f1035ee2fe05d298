"""The package's worker threads: one pool of a thread per core, for work that releases the GIL
(compiled kernels, NumPy reductions over large arrays, reading two images). Plain threads are safe
in forked processes, unlike numba's OpenMP layer. Light to import (no numba)."""
import os
import threading
from concurrent.futures import ThreadPoolExecutor, wait

import numpy as np

from .checkpoints import checkpoint

#: Chunks per core that :func:`in_threads` splits the query points into, and their fewest points.
CHUNKS_PER_THREAD = 4
MIN_POINTS_PER_CHUNK = 1024
#: Name prefix of the pool's threads.
THREAD_NAME = "segmetrics"
#: Longest wait (s) for a chunk before the calling thread passes a checkpoint (:mod:`.checkpoints`).
CHECKPOINT_WAIT_S = 0.1

_THREADS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
_POOL = []


def in_threads(kernel, per_point: tuple, shared: tuple) -> tuple:
    """``kernel(*per_point, *shared)`` with the ``per_point`` arrays split row-wise into chunks
    (:data:`CHUNKS_PER_THREAD` per core, so that a costly region does not keep one core busy
    alone) run on :func:`thread_pool`; the kernel's output arrays are joined back in order."""
    return in_threads_together([(kernel, per_point, shared)])[0]


def in_threads_together(jobs: list) -> list:
    """:func:`in_threads` of several ``(kernel, per_point, shared)`` jobs, whose chunks are all
    queued at once (one wait for all, and no core idles between jobs); their outputs in order.
    Fewer points than two chunks' worth in all run in the calling thread (handing them to the
    pool would cost more than it saves), and so do the chunks when called from a task of the pool
    itself (a task that waited for others could wait forever). While the pool works, the calling
    thread passes a checkpoint every :data:`CHECKPOINT_WAIT_S` seconds; when it raises (a
    cancelled run), the chunks not yet started are dropped. ValueError for ``per_point`` arrays
    of other lengths."""
    tasks, spans, points = [], [], 0
    for kernel, per_point, shared in jobs:
        if len({len(a) for a in per_point}) != 1:
            raise ValueError(f"in_threads: the per-point arrays of {getattr(kernel, '__name__', kernel)} differ in length "
                             f"({', '.join(str(len(a)) for a in per_point)})")
        points += len(per_point[0])
        chunks = min(_THREADS * CHUNKS_PER_THREAD, max(len(per_point[0]) // MIN_POINTS_PER_CHUNK, 1))
        bounds = np.linspace(0, len(per_point[0]), chunks + 1).astype(int)
        spans.append((len(tasks), len(tasks) + chunks))
        tasks += [(kernel, tuple(a[lo:hi] for a in per_point), shared) for lo, hi in zip(bounds[:-1], bounds[1:])]
    if points < 2 * MIN_POINTS_PER_CHUNK or len(tasks) == 1 or threading.current_thread().name.startswith(THREAD_NAME):
        parts = [kernel(*per_point, *shared) for kernel, per_point, shared in tasks]
    else:
        futures = [thread_pool().submit(kernel, *per_point, *shared) for kernel, per_point, shared in tasks]
        try:
            parts = [_result_with_checkpoints(future) for future in futures]
        finally:
            for future in futures:
                future.cancel()  # only chunks not yet started: none left after a normal run
    joined = []
    for start, stop in spans:  # each job's chunks dropped once joined: not all outputs held twice at once
        chunk_outputs, parts[start:stop] = parts[start:stop], [None] * (stop - start)
        joined.append(chunk_outputs[0] if len(chunk_outputs) == 1 else tuple(map(np.concatenate, zip(*chunk_outputs))))
        del chunk_outputs
    return joined


def _result_with_checkpoints(future):
    """A pool task's result, passing a checkpoint every :data:`CHECKPOINT_WAIT_S` seconds until it is done."""
    while not wait([future], timeout=CHECKPOINT_WAIT_S).done:
        checkpoint()
    return future.result()


def set_thread_count(count: int) -> None:
    """Run the kernels on ``count`` threads from now on (batch workers share the cores)."""
    global _THREADS
    _THREADS = max(1, count)
    for pool in _POOL:  # a pool already started lets its threads end
        pool.shutdown(wait=False)
    _POOL.clear()


def thread_pool() -> ThreadPoolExecutor:
    """The package's thread pool (one thread per core), started on first use. Its tasks must not
    wait for other tasks of the pool."""
    if not _POOL:
        _POOL.append(ThreadPoolExecutor(_THREADS, thread_name_prefix=THREAD_NAME))
    return _POOL[0]


if hasattr(os, "register_at_fork"):  # a forked child has none of the parent's threads
    os.register_at_fork(after_in_child=_POOL.clear)
