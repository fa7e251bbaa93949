"""The documents stay readable in one sitting: the README (the answer on one screen, its verdict
table and bottom line) in 200 lines, docs/results.md (current results only) in 300, and all of
docs/*.md in 1,500. A change that needs more room trims elsewhere."""

import pytest

from frost_nb.paths import repo_root

BUDGETS = {"README.md": 200, "docs/results.md": 300, "docs/*.md": 1500}  # lines


@pytest.mark.parametrize("pattern", BUDGETS)
def test_documents_fit_their_line_budget(pattern):
    files = sorted(repo_root().glob(pattern))
    assert files, f"{pattern} matches no file"
    lines = sum(len(f.read_text(encoding="utf-8").splitlines()) for f in files)
    assert lines <= BUDGETS[pattern], f"{pattern}: {lines} lines, over its budget of {BUDGETS[pattern]}; trim it"
