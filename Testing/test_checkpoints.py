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
