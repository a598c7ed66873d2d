import faulthandler
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(__file__))  # tests import their shared tables (optable.py)

import pytest

# GRADCRAFT_TEST_TIMEOUT=S: a test still running after S seconds (its fixtures' setup and teardown
# included) ends the whole run, with every thread's stack on stderr. On a GPU, a kernel that hangs (a
# barrier no one arrives at) cannot be interrupted from the host, and would hold the machine until its
# session ran out; this way the run stops within S seconds and the stack names the test.
TEST_TIMEOUT = float(os.environ.get("GRADCRAFT_TEST_TIMEOUT") or 0)
_stderr_fd = None


def pytest_configure(config):
    global _stderr_fd
    # A shell without job control starts background commands (`bash scripts/test.sh &`, two suites at
    # once) with SIGINT ignored; the tests of Ctrl-C (in this process and in the runs they start, which
    # inherit it) need its usual action.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if TEST_TIMEOUT > 0:  # (pytest does not capture stderr here: this is the terminal's)
        _stderr_fd = os.dup(sys.stderr.fileno())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if _stderr_fd is None:
        yield
        return
    faulthandler.dump_traceback_later(TEST_TIMEOUT, exit=True, file=_stderr_fd)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def pytest_collection_modifyitems(config, items):
    """test_every_contract_kernel_ran (test_cuda.py) reads what every CUDA kernel test ran: it goes last.
    Tests marked `extended` (slow cases whose behaviour a faster test also covers) are deselected
    unless GRADCRAFT_EXTENDED=1 or `-m` names the marker: CI's 2 cores run the rest (docs/testing.md)."""
    last = [item for item in items if item.name == "test_every_contract_kernel_ran"]
    items[:] = [item for item in items if item.name != "test_every_contract_kernel_ran"] + last
    if os.environ.get("GRADCRAFT_EXTENDED") == "1" or "extended" in (config.getoption("markexpr") or ""):
        return
    extended = [item for item in items if item.get_closest_marker("extended")]
    if extended:
        config.hook.pytest_deselected(items=extended)
        items[:] = [item for item in items if not item.get_closest_marker("extended")]


@pytest.fixture(scope="module")
def cuda_backend():
    """The CUDA backend for one module of CUDA kernel tests (cuda_support.py): the handwritten kernels'
    outputs poisoned (NaN bits) before each run, so a kernel that skips elements fails, and every op it
    runs recorded in cuda_support.SEEN."""
    from cuda_support import SEEN

    from gradcraft.backend.cuda import launch
    from gradcraft.device import get_backend

    backend = get_backend("cuda:0")
    run = type(backend).run

    def recording_run(self, op, args, attrs):
        SEEN.add(op)
        return run(self, op, args, attrs)

    type(backend).run = recording_run
    launch.POISON = True
    yield backend
    launch.POISON = False
    type(backend).run = run


@pytest.fixture
def gpu(cuda_backend, request):
    """cuda_backend, for a test that draws its inputs from cuda_support.rng(): restarted from the session's
    seed (new every session unless GRADCRAFT_TEST_SEED is set) for each test, and named in its failure
    report."""
    import cuda_support

    cuda_support.reseed()
    request.node.add_report_section("call", "seed", f"inputs drawn with GRADCRAFT_TEST_SEED={cuda_support.SEED}")
    return cuda_backend


@pytest.fixture
def primitives_only(monkeypatch):
    """The CPU backend with every optional kernel removed from its table (for the test's duration)."""
    from gradcraft.backend import PRIMITIVES
    from gradcraft.device import get_backend

    backend = get_backend("cpu")
    table = {name: kernel for name, kernel in backend.kernels.items() if name in PRIMITIVES}
    monkeypatch.setattr(backend, "kernels", table)
    backend.check_contract()  # the primitives alone satisfy the contract
    return backend


@pytest.fixture
def cpu_kernels_run(monkeypatch):
    """The names of the kernels the CPU backend runs from now on (for the test's duration), in order."""
    from gradcraft.device import get_backend

    backend = get_backend("cpu")
    ran, run = [], backend.run
    monkeypatch.setattr(backend, "run", lambda op, args, attrs: (ran.append(op), run(op, args, attrs))[1])
    return ran


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory):
    """A tokenizer, a token file and a briefly trained model, made with the real CLIs."""
    from gradcraft.cli.main import main

    root = tmp_path_factory.mktemp("gen")
    raw = root / "raw"
    raw.mkdir()
    text = "def reverse_string(s):\n    return s[::-1]\n# ünïcödé ✓ 漢字 🙂\n"
    for i in range(30):
        (raw / f"f{i}.txt").write_text(text * 3 + f"x = {i}\n")
    assert (
        main(
            [
                "tokenize",
                "--data_dir",
                str(raw),
                "--output_path",
                str(root / "tokens.bin"),
                "--vocab_size",
                "300",
                "--workers",
                "1",
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "train",
                "--dataset",
                str(root / "tokens.bin"),
                "--model_dir",
                str(root / "run"),
                "--preset",
                "toy-v0",
                "--embed_dim",
                "32",
                "--num_layers",
                "1",
                "--num_heads",
                "2",
                "--steps",
                "30",
                "--batch_size",
                "4",
                "--seq_len",
                "24",
                "--warmup_steps",
                "2",
                "--max_lr",
                "1e-2",
                "--no_progress",
            ]
        )
        == 0
    )
    return root


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """A small token file (vocabulary 64) with a .val split, for the training tests."""
    import numpy as np
    from gradcraft.data.tokenfile import write_token_file

    folder = tmp_path_factory.mktemp("data")
    rng = np.random.default_rng(0)
    # a learnable sequence: a repeating pattern with noise, vocabulary 64
    pattern = rng.integers(0, 64, size=50)
    tokens = np.concatenate([np.where(rng.random(50) < 0.1, rng.integers(0, 64, 50), pattern) for _ in range(200)])
    path = folder / "tokens.bin"
    write_token_file(str(path), tokens.astype(np.uint16), vocab_size=64, fingerprint="abc123")
    write_token_file(
        str(folder / "tokens.val.bin"), tokens[:2000].astype(np.uint16), vocab_size=64, fingerprint="abc123"
    )
    return str(path)


def pytest_terminal_summary(terminalreporter):
    """The PyTorch compatibility suite's count (tests/compat): programs that print torch's numbers,
    and how many of them needed no edit. (Here, not in tests/compat: with -n 2 only this file is
    loaded by the process that writes the summary.)"""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "compat"))
    from harness import summary_line

    line = summary_line(terminalreporter.stats)
    if line:
        terminalreporter.write_line(line)
