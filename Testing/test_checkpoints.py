"""segmetrics.spatial.checkpoints: the hook long loops call, where a caller reports progress or stops."""
import threading

import pytest

from segmetrics.spatial.checkpoints import checkpoint, checkpoints


def test_the_hook_is_called_inside_the_block_only():
    calls = []
    checkpoint()  # no hook: nothing happens
    with checkpoints(lambda: calls.append("outer")):
        checkpoint()
        with checkpoints(lambda: calls.append("inner")):
            checkpoint()
        checkpoint()
    checkpoint()
    assert calls == ["outer", "inner", "outer"]


def test_a_raising_hook_stops_the_loop_and_is_unset_afterwards():
    class Stop(Exception):
        pass

    def stop():
        raise Stop()

    done = []
    with pytest.raises(Stop), checkpoints(stop):
        for index in range(3):
            checkpoint()
            done.append(index)
    assert done == []
    checkpoint()  # the hook is gone with its block


def test_worker_threads_do_not_call_the_hook():
    """A hook (e.g. one that runs the user interface's event loop) is called only by the thread
    that set it, never from the threads the metric code starts."""
    calls = []
    with checkpoints(lambda: calls.append(threading.get_ident())):
        worker = threading.Thread(target=checkpoint)
        worker.start()
        worker.join()
        checkpoint()
    assert calls == [threading.get_ident()]


def test_waiting_for_the_thread_pool_passes_checkpoints_and_a_stop_drops_the_queued_chunks():
    """While the pool computes, the calling thread passes checkpoints (every 0.1 s); when one
    raises, the chunks not yet started never run."""
    import time

    import numpy as np

    from segmetrics.spatial import _threads

    started = []

    def slow_kernel(points):
        started.append(len(points))
        time.sleep(0.3)
        return (points * 2,)

    points = np.arange(64 * _threads.MIN_POINTS_PER_CHUNK, dtype=float)
    chunks = min(_threads._THREADS * _threads.CHUNKS_PER_THREAD, 64)
    assert chunks > _threads._THREADS  # some chunks wait in the queue

    class Stop(Exception):
        pass

    def stop():
        raise Stop()

    with pytest.raises(Stop), checkpoints(stop):
        _threads.in_threads(slow_kernel, (points,), ())
    time.sleep(0.5)  # the chunks that were running end
    assert len(started) <= _threads._THREADS < chunks
    calls = []
    with checkpoints(lambda: calls.append(1)):
        (doubled,) = _threads.in_threads(lambda p: (time.sleep(0.15) or p * 2,), (points,), ())
    assert np.array_equal(doubled, points * 2) and calls
