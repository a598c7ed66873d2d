"""gradcraft.backend.blas: NumPy's OpenBLAS thread count without threadpoolctl, and the CPU backend's
policy of running small products on one BLAS thread (same results, fewer threads)."""

import numpy as np
import pytest

import gradcraft as gc
from gradcraft.backend.cpu import blas
from gradcraft.device import get_backend

pytestmark = pytest.mark.skipif(blas._functions() is None, reason="NumPy's BLAS is not an OpenBLAS reachable here")


def local_threads() -> int:
    """The calling thread's BLAS thread count (set_local returns the previous one)."""
    set_local = blas._functions()[2]
    current = set_local(1)
    set_local(current)
    return current


def test_set_threads_round_trip():
    before = blas.threads()
    try:
        blas.set_threads(1)
        assert blas.threads() == 1
        blas.set_threads(2)
        assert blas.threads() == 2
    finally:
        blas.set_threads(before)


@pytest.mark.skipif(blas._functions() is None or blas._functions()[2] is None, reason="no per-thread counts")
def test_limit_and_policy_choose_threads_by_product_size():
    before = blas.threads()
    blas.set_threads(2)
    try:
        with blas.limit(1):
            assert local_threads() == 1
        seen = []

        def fake_matmul(a, b):
            seen.append(local_threads())
            return a @ b

        policy = blas.thread_policy({"matmul": fake_matmul})
        small, big = np.ones((8, 16, 32), np.float32), np.ones((4096, 64), np.float32)
        for _ in range(3):
            policy["matmul"](small, np.ones((8, 32, 16), np.float32))  # 16 x 32 x 16 per call: one thread
        assert seen == [1, 1, 1]
        for _ in range(2):  # 4096 x 64 x 1024: one big call; the first two try each thread count
            policy["matmul"](big, np.ones((64, 1024), np.float32))
        assert sorted(seen[3:]) == [1, 2]
        assert local_threads() == 2  # restored
    finally:
        blas.set_threads(before)


def test_per_call_sizes():
    assert blas._per_call_matmul(np.empty((2, 3, 4)), np.empty((4, 5))) == 6 * 4 * 5  # one call on (6, 4)
    assert blas._per_call_matmul(np.empty((2, 3, 4)), np.empty((2, 4, 5))) == 3 * 4 * 5  # per matrix
    assert blas._per_call_attention(np.empty((1, 2, 7, 8)), np.empty((1, 2, 9, 8))) == 7 * 8 * 9


def test_backend_results_do_not_depend_on_the_policy():
    backend = get_backend("cpu")
    assert backend.kernels["matmul"] is not backend.reference_kernels["matmul"]  # the policy is in place
    rng = np.random.default_rng(0)
    for a, b in [((3, 5, 7), (7, 4)), ((2, 3, 64, 32), (2, 3, 32, 64)), ((512, 128), (128, 1024))]:
        x, y = rng.standard_normal(a).astype(np.float32), rng.standard_normal(b).astype(np.float32)
        got = (gc.tensor(x) @ gc.tensor(y)).numpy()
        np.testing.assert_allclose(got, backend.reference_kernels["matmul"](x, y), rtol=1e-6, atol=1e-5)
        np.testing.assert_allclose(got, np.matmul(x.astype(np.float64), y), rtol=1e-4, atol=1e-4)


def test_thread_chooser_follows_the_faster_count():
    chooser = blas._ThreadChooser()
    size = 27  # a size class: products of 2^26..2^27 multiply-adds
    assert chooser.choose(size, 2) == 1  # nothing measured: try one thread
    chooser.record(size, 1, 1 << 26, 0.010)
    assert chooser.choose(size, 2) == 2  # then the other
    chooser.record(size, 2, 1 << 26, 0.005)  # idle cores: two threads twice as fast
    picks = [chooser.choose(size, 2) for _ in range(256)]
    assert picks.count(2) >= 248 and picks.count(1) >= 3  # two threads, one tried now and then
    for _ in range(4):
        chooser.record(size, 2, 1 << 26, 0.005)
    for _ in range(2):  # a stray slow call or two on idle cores does not hand the class to one thread
        chooser.record(size, 2, 1 << 26, 0.060)
        assert chooser.choose(size, 2) == 2 or chooser.calls[size] % chooser.EXPLORE_ONE == 0
    for _ in range(3):  # contention: most two-thread calls now wait at their barrier
        chooser.record(size, 2, 1 << 26, 0.060)
    picks = [chooser.choose(size, 2) for _ in range(64)]
    assert picks.count(1) >= 56 and picks.count(2) >= 3  # one thread, two tried now and then
    for _ in range(3):  # idle again: the tries of two threads are fast
        chooser.record(size, 2, 1 << 26, 0.005)
    assert [chooser.choose(size, 2) for _ in range(8)].count(2) >= 7
