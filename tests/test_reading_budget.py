"""The documents stay readable in one sitting: the README (the answer on one screen, its verdict
table and bottom line) in 200 lines, docs/results.md (current results only) in 300, and all of
docs/*.md in 1,500 but DF-Mamba's own account (docs/df-mamba.md, 250 of its own). A change that
needs more room trims elsewhere."""

import re

import pytest

from frost_nb.paths import repo_root

BUDGETS = {"README.md": 200, "docs/results.md": 300, "docs/*.md": 1500, "docs/df-mamba.md": 250}  # lines
APART = ("docs/df-mamba.md",)  # counted on its own, not in docs/*.md


@pytest.mark.parametrize("pattern", BUDGETS)
def test_documents_fit_their_line_budget(pattern):
    files = sorted(f for f in repo_root().glob(pattern)
                   if pattern in APART or f.relative_to(repo_root()).as_posix() not in APART)
    assert files, f"{pattern} matches no file"
    lines = sum(len(f.read_text(encoding="utf-8").splitlines()) for f in files)
    assert lines <= BUDGETS[pattern], f"{pattern}: {lines} lines, over its budget of {BUDGETS[pattern]}; trim it"


BOTTOM_LINE_WORDS = 150  # the answer on one screen


def bottom_line_words(text: str) -> int:
    """The words of the README's bottom line, from "**Bottom line**" to the verdict table's lead paragraph
    ("One row per claim"): each run of non-space characters that holds a letter or a digit ("0.75" is a
    word, "/" and "-" are not)."""
    start, end = text.index("**Bottom line**"), text.index("One row per claim")
    return sum(bool(re.search(r"[A-Za-z0-9]", w)) for w in text[start:end].split())


def test_bottom_line_words_are_counted_as_stated():
    assert bottom_line_words("**Bottom line** holds 0.75 / 0.83 - yes\nOne row per claim") == 6


def test_the_bottom_line_fits_one_screen():
    words = bottom_line_words((repo_root() / "README.md").read_text(encoding="utf-8"))
    assert words <= BOTTOM_LINE_WORDS, f"the README's bottom line has {words} words, over {BOTTOM_LINE_WORDS}; trim it"
