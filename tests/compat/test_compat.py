"""Each program of tests/compat/programs runs with torch and with gradcraft as torch, and prints the
same numbers (tests/compat/harness.py)."""

import pytest
from harness import compare, edits, programs, run


@pytest.mark.parametrize("path", programs(), ids=lambda p: p.stem)
def test_program_matches_torch(path):
    expected = run(path, "torch")
    got = run(path, "gradcraft")
    assert expected.strip(), "the program printed nothing"
    problems = compare(expected, got)
    assert not problems, "\n".join(problems) + f"\n--- torch:\n{expected}\n--- gradcraft:\n{got}"


def test_most_programs_need_no_edit():
    paths = programs()
    assert len(paths) >= 40
    assert sum(edits(p) == 0 for p in paths) >= 0.9 * len(paths)
