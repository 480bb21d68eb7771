"""TorchThread runs every job on one thread, in order, and hands back results and exceptions;
a served engine is stepped on the thread that built it."""
import asyncio
import threading

import pytest

import haltwise.engine.factory as factory
from haltwise.config import EngineConfig
from haltwise.engine.async_engine import AsyncEngine
from haltwise.engine.torch_thread import TorchThread
from tests.conftest import greedy


def test_jobs_run_in_order_on_one_thread_and_errors_come_back():
    worker = TorchThread()
    seen = [worker.call(lambda i=i: (i, threading.get_ident())) for i in range(5)]
    assert [i for i, _ in seen] == list(range(5))
    assert {ident for _, ident in seen} == {worker.thread.ident} != {threading.get_ident()}
    with pytest.raises(ZeroDivisionError):
        worker.call(lambda: 1 / 0)
    assert worker.call(sum, [1, 2, 3]) == 6          # the thread survived the exception
    worker.close()
    worker.thread.join(timeout=5)
    assert not worker.is_alive()


def test_served_engine_is_built_and_stepped_on_the_same_thread(monkeypatch):
    built_on: list[int] = []
    stepped_on: set[int] = set()
    real_build = factory.build_engine

    def recording_build(*args, **kwargs):
        built_on.append(threading.get_ident())
        engine = real_build(*args, **kwargs)
        real_step = engine.step

        def recording_step():
            stepped_on.add(threading.get_ident())
            return real_step()

        engine.step = recording_step
        return engine

    monkeypatch.setattr(factory, "build_engine", recording_build)
    served = AsyncEngine.build(engine_config=EngineConfig(kv_cache_memory=8 * 2**20, max_model_len=256), tiny=True)

    async def run_one():
        await served.start()
        async for update in served.generate("r1", [5, 6, 7], greedy(4)):
            last = update
        await served.shutdown(grace=1.0)
        return last

    assert asyncio.run(run_one()).finished
    assert built_on and built_on[0] != threading.get_ident()
    assert stepped_on == {built_on[0]}
