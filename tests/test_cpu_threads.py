"""The CPU backend's thread settings: how many threads its kernels use by default, and the OpenBLAS
setting that `import gradcraft` makes (gradcraft/__init__.py, backend/cpu/threads.py)."""

import os
import subprocess
import sys

import numpy as np

from gradcraft.backend.cpu import threads

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


SETTINGS = ("OPENBLAS_THREAD_TIMEOUT", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "GRADCRAFT_NUM_THREADS")


def _in_child(code: str, **env) -> str:
    """What `code` prints in a fresh interpreter whose thread settings are only `env`."""
    environment = {k: v for k, v in os.environ.items() if k not in SETTINGS}
    environment.update(env, PYTHONPATH=os.path.join(ROOT, "src"))
    result = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_import_stops_openblas_threads_from_spinning_unless_the_user_chose():
    show = "import gradcraft, os; print(os.environ['OPENBLAS_THREAD_TIMEOUT'])"
    assert _in_child(show) == "4"
    assert _in_child(show, OPENBLAS_THREAD_TIMEOUT="12") == "12"


def test_default_threads_follow_the_cores_and_the_usual_variables():
    show = "from gradcraft.backend.cpu import threads; print(threads.num_threads())"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert _in_child(show) == str(cores)
    assert _in_child(show, OMP_NUM_THREADS="1") == "1"
    assert _in_child(show, GRADCRAFT_NUM_THREADS="3") == "3"
    assert _in_child(show, GRADCRAFT_NUM_THREADS="nonsense", OMP_NUM_THREADS="1") == "1"


def test_parallel_blocks_cover_the_range_once_on_any_thread_count(monkeypatch):
    monkeypatch.setattr(threads, "_PARALLEL_MIN", 0)
    for count in (1, 2, 3):
        seen = np.zeros(1000, np.int64)

        def block(a, b):
            seen[a:b] += 1

        threads._parallel(block, 1000, 1, block=7, threads=count)
        assert (seen == 1).all()


def test_parallel_while_another_thread_grows_the_pool(monkeypatch):
    """A call that asks for more threads than the pool has replaces the pool. Another Python thread's
    kernel may be submitting to the old pool at that moment: it must not find it shut down (the hook
    below grows the pool exactly between that kernel's reading the pool and its submit)."""
    import concurrent.futures

    monkeypatch.setattr(threads, "_PARALLEL_MIN", 0)
    monkeypatch.setattr(threads, "_executor", None)
    grown = []

    class Pool(concurrent.futures.ThreadPoolExecutor):
        def submit(self, fn, /, *args, **kwargs):
            if not grown:  # the other thread's kernel, wanting more threads, starts now
                grown.append(self._max_workers + 2)
                threads._parallel(lambda a, b: None, 100, 1, block=1, threads=grown[0])
            return super().submit(fn, *args, **kwargs)

    monkeypatch.setattr(concurrent.futures, "ThreadPoolExecutor", Pool)
    seen = np.zeros(100, np.int64)

    def block(a, b):
        seen[a:b] += 1

    threads._parallel(block, 100, 1, block=1, threads=2)
    assert grown and (seen == 1).all()
