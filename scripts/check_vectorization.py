"""Check that every `#pragma omp simd` loop of the C kernels vectorizes on AVX2 and on AVX-512.

Compiles each C source of gradcraft/backend/cpu/native with the flags compiler.py uses, once per target
(-march=x86-64-v3 is AVX2 + FMA, the Zen 2/3 and Haswell-and-later level; skylake-avx512 is
AVX-512), asks gcc for its vectorization report (-fopt-info-vec-all) and lists the `omp simd`
loops it did not vectorize, with gcc's reason. Exit status 1 when one is missed, 0 otherwise.

    python scripts/check_vectorization.py              # x86-64-v3 and skylake-avx512
    python scripts/check_vectorization.py znver3       # other -march targets

Needs gcc on an x86-64 machine (the targets are only compiled for, never run).
"""

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
from gradcraft.backend.cpu.native.compiler import SOURCES, _COMMON  # noqa: E402

DEFAULT_TARGETS = ("x86-64-v3", "skylake-avx512")


def simd_loops(source: str) -> list[tuple[int, int]]:
    """(first, last) line numbers (1-based) of each `for` statement that follows an `omp simd`
    pragma: its body ends before the next non-blank line indented no deeper than the `for` (gcc
    reports a loop at a line of its body, not always at the `for`)."""
    lines = source.splitlines()
    loops = []
    for i, line in enumerate(lines[:-1]):
        if not (line.strip().startswith("#pragma omp simd") and lines[i + 1].strip().startswith("for")):
            continue
        start = i + 1
        indent = len(lines[start]) - len(lines[start].lstrip())
        end = start + 1
        while end < len(lines) and (not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip()) > indent):
            end += 1
        if end < len(lines) and lines[end].strip() == "}":  # the closing brace of a braced body
            end += 1
        loops.append((start + 1, end))
    return loops


def report(target: str, source: Path, compiler: str = "gcc") -> tuple[set[int], dict[int, str]]:
    """(lines of loops vectorized, {line: first reason a loop there was not}) of one source file for
    one -march target."""
    with tempfile.TemporaryDirectory() as tmp:
        result = subprocess.run(
            [compiler, f"-march={target}", *_COMMON, str(source), "-o", f"{tmp}/k.so", "-lm", "-fopt-info-vec-all"],
            capture_output=True,
            text=True,
            timeout=300,
        )
    if result.returncode != 0:
        raise RuntimeError(f"{compiler} -march={target} failed: {result.stderr.strip()[-500:]}")
    vectorized, missed = set(), {}
    for line in result.stderr.splitlines():
        m = re.match(rf".*{re.escape(source.name)}:(\d+):\d+: (optimized|missed): (.*)", line)
        if not m:
            continue
        number, kind, message = int(m.group(1)), m.group(2), m.group(3)
        if kind == "optimized" and "loop vectorized" in message:
            vectorized.add(number)
        elif kind == "missed" and message.startswith("not vectorized"):
            missed.setdefault(number, message)
    return vectorized, missed


def check(targets=DEFAULT_TARGETS, compiler: str = "gcc") -> list[str]:
    """One line per `omp simd` loop that some target did not vectorize (empty: all did)."""
    problems = []
    for source in SOURCES:
        loops = simd_loops(source.read_text())
        for target in targets:
            vectorized, missed = report(target, source, compiler)
            for first, last in loops:
                if not any(first <= number <= last for number in vectorized):
                    reasons = [missed[n] for n in range(first, last + 1) if n in missed] or ["not vectorized"]
                    problems.append(f"{source.name}:{first} -march={target}: {reasons[0]}")
    return problems


def main(argv: list[str]) -> int:
    if shutil.which("gcc") is None:
        print("error: gcc not found, install gcc to check the vectorization report", file=sys.stderr)
        return 2
    targets = argv or DEFAULT_TARGETS
    problems = check(targets)
    loops = sum(len(simd_loops(source.read_text())) for source in SOURCES)
    for problem in problems:
        print(problem)
    print(f"{loops} omp simd loops x {len(targets)} targets ({', '.join(targets)}): {len(problems)} not vectorized")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
