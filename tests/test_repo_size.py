"""The repository stays small: a clone is quick, and an upload to an offline GPU host (which carries
the tracked files with every command) leaves room for data. Three budgets, each on what it counts:

- everything tracked except the two kinds below: ``COUNTED_BUDGET`` (21 MiB);
- paper-size runs (``outputs/runs/<data set>-{paper,cifar}-<grid>/``): ``PAPER_RUNS_BUDGET``, room
  for the four families at the ``cifar`` size and two more seeds of two of them as lean exports;
- unfinished checkpoints kept for resuming (``outputs/partial/``): ``PARTIAL_BUDGET``, room for one
  unfinished ``cifar``-size run (scripts/gpu.py keeps at most one) beside demo-size states.
"""

import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from frost_nb.paths import repo_root

MIB = 1 << 20
COUNTED_BUDGET = 21 * MIB  # 20 until the variant beyond the paper (3 runs, notebook 08 and its metrics: 1.5 MiB)
PAPER_RUNS_BUDGET = 32 * MIB
PARTIAL_BUDGET = 16 * MIB  # one unfinished cifar-size checkpoint (12.5 MiB) and demo-size states
PAPER_RUN = re.compile(r"^outputs/runs/[^/]+-(paper|cifar)-[^/]+/")


def budget_of(path: str) -> str:
    """Which budget a tracked path counts against: "paper runs", "partial" or "counted"."""
    if PAPER_RUN.match(path):
        return "paper runs"
    return "partial" if path.startswith("outputs/partial/") else "counted"


def tracked_sizes(root: Path) -> dict[str, int]:
    """path -> bytes of every file git tracks under ``root`` that exists in the working tree."""
    listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True, check=True)
    paths = [p for p in listed.stdout.decode().split("\0") if p]
    return {p: (root / p).stat().st_size for p in paths if (root / p).is_file()}


def largest_folders(sizes: dict[str, int], most: int = 5) -> str:
    """The ``most`` largest folders (two levels: ``outputs/runs``) of ``sizes`` (path -> bytes)."""
    folders = Counter()
    for path, size in sizes.items():
        parts = path.split("/")
        folders["/".join(parts[:2]) if len(parts) > 2 else parts[0] if len(parts) > 1 else "."] += size
    return ", ".join(f"{name} {size / MIB:.1f} MiB" for name, size in folders.most_common(most))


def test_tracked_files_stay_within_their_budgets():
    try:
        sizes = tracked_sizes(repo_root())
    except (subprocess.CalledProcessError, FileNotFoundError) as err:
        pytest.skip(f"not a git checkout, nothing to measure: {err}")
    for budget, limit in (("counted", COUNTED_BUDGET), ("paper runs", PAPER_RUNS_BUDGET),
                          ("partial", PARTIAL_BUDGET)):
        part = {p: s for p, s in sizes.items() if budget_of(p) == budget}
        total = sum(part.values())
        assert total <= limit, (
            f"the tracked files counted as {budget!r} take {total / MIB:.2f} MiB, over their budget of "
            f"{limit / MIB:g} MiB; largest folders: {largest_folders(part)}. Prune runs no notebook or "
            "verdict reads (docs/results.md says which are kept), or commit lean exports")


def test_each_path_counts_against_one_budget():
    assert budget_of("outputs/runs/cifar100-cifar-families/frost-seed0/model.pt") == "paper runs"
    assert budget_of("outputs/runs/imagenet100-paper-families/frost-seed0/model.pt") == "paper runs"
    assert budget_of("outputs/runs/cifar100-demo-families/frost-seed0/model.pt") == "counted"
    assert budget_of("outputs/partial/cifar100-demo-deep-halt/x/model.pt") == "partial"
    assert budget_of("notebooks/05_halting.ipynb") == "counted"


def test_the_message_names_the_largest_folders():
    sizes = {"outputs/runs/a/b/model.pt": 3 * MIB, "outputs/runs/c/d/model.pt": 2 * MIB,
             "notebooks/01.ipynb": MIB, "README.md": MIB // 2, "frost_nb/x.py": MIB // 4}
    assert largest_folders(sizes, 3) == "outputs/runs 5.0 MiB, notebooks 1.0 MiB, . 0.5 MiB"
