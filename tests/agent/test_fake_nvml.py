"""The stand-in NVML library (tests/support/fake_nvml.c) itself: the GPU tests trust what it answers.

The agent calls NVML from several threads at once (the collection and the XID event watcher; ctypes
drops the GIL around each call), so a scenario change must never show a call a half-read scenario.
"""

from __future__ import annotations

import threading

import pynvml


def test_a_call_in_another_thread_never_sees_a_scenario_being_reloaded(fake_nvml) -> None:
    """Before: 3,359 of the calls made while the scenario was rewritten 3,000 times read GPU 1 healthy.

    A reload emptied the one shared table before refilling it; the CI run on a loaded machine saw
    ``status@1 unknown`` read as a healthy GPU (tests/agent/test_gpu_unreadable.py).
    """
    fake_nvml.set("status@1 unknown")
    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(1)
        healthy: list[int] = []
        failed = [0]
        done = threading.Event()

        def read() -> None:
            while not done.is_set():
                try:
                    healthy.append(pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU))
                except pynvml.NVMLError_Unknown:
                    failed[0] += 1

        readers = [threading.Thread(target=read) for _ in range(3)]
        for reader in readers:
            reader.start()
        try:
            # Each rewrite differs in size, so the library reads the file again on its next call.
            for i in range(1000):
                fake_nvml.set("status@1 unknown\n" + "#" * (i % 7 + 1))
        finally:
            done.set()
            for reader in readers:
                reader.join()
    finally:
        pynvml.nvmlShutdown()
    assert failed[0] > 0 and healthy == []
