"""The kept mutation list (scripts/mutation_audit.py) stays applicable: every mutant's text occurs exactly
once in its file. A refactor or a formatter that changes that text would otherwise turn the mutant
"stale", and the audit would silently test less (five were, after the code was reformatted)."""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import mutation_audit  # noqa: E402


@pytest.mark.parametrize("mutant", mutation_audit.MUTANTS, ids=lambda m: m.name)
def test_each_mutant_applies_once(mutant):
    with open(os.path.join(ROOT, mutant.path)) as f:
        text = f.read()
    assert text.count(mutant.old) == 1, (
        f"{mutant.name}: its text occurs {text.count(mutant.old)} times in {mutant.path}"
    )
    assert mutant.new != mutant.old


def test_mutant_names_are_unique():
    names = [m.name for m in mutation_audit.MUTANTS]
    assert len(names) == len(set(names))
