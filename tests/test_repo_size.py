"""The repository stays small: a clone is quick. (An upload to an offline GPU host carries only the
checkout that scripts/gpu.py stages, never what is committed here.) Five budgets, each on what it
counts:

- DF-Mamba's files, matched first (its package, tests, docs/df-mamba.md, notebook 11, its runs under
  ``outputs/runs/forecast/``, metrics, scan benchmark and figures): ``DFMAMBA_BUDGET`` (5 MiB);
- everything tracked except the kinds below: ``COUNTED_BUDGET`` (20 MiB);
- paper-size runs (``outputs/runs/<data set>-{paper,cifar,ladder256}-<grid>/``), the GPU's:
  ``PAPER_RUNS_BUDGET``, room for the four families at the ``cifar`` size, two more seeds of two of
  them and the ladder's GPU rung, ``ladder256`` (the paper's width), as lean bf16 exports;
- the scale ladder's CPU rungs (``outputs/runs/<data set>-ladder{32,64,128}-<grid>/``):
  ``LADDER_RUNS_BUDGET``, about 10 MB once finished;
- unfinished checkpoints kept for resuming (``outputs/partial/``): ``paths.PARTIAL_BUDGET`` (16 MiB),
  which also bounds the checkpoint a GPU-host run leaves there between allocations (scripts/gpu.py).
"""

import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from frost_nb.paths import PARTIAL, PARTIAL_BUDGET, repo_root

MIB = 1 << 20
COUNTED_BUDGET = 20 * MIB
PAPER_RUNS_BUDGET = 32 * MIB
LADDER_RUNS_BUDGET = 12 * MIB
DFMAMBA_BUDGET = 5 * MIB
DFMAMBA = re.compile(r"^(frost_nb/dfmamba/|tests/test_dfmamba|docs/df-mamba\.md$|notebooks/11_|outputs/runs/forecast/"
                     r"|outputs/metrics/(11_|bench_[^/]*scan)|outputs/figures/11_)")
PAPER_RUN = re.compile(r"^outputs/runs/[^/]+-(paper|cifar|ladder256)-[^/]+/")
LADDER_RUN = re.compile(r"^outputs/runs/[^/]+-ladder\d+-[^/]+/")  # after PAPER_RUN: ladder256 is one
BUDGETS = {"counted": COUNTED_BUDGET, "paper runs": PAPER_RUNS_BUDGET, "ladder runs": LADDER_RUNS_BUDGET,
           "partial": PARTIAL_BUDGET, "df-mamba": DFMAMBA_BUDGET}


def budget_of(path: str) -> str:
    """Which budget (``BUDGETS``) a tracked path counts against."""
    if DFMAMBA.match(path):
        return "df-mamba"
    if PAPER_RUN.match(path):
        return "paper runs"
    if LADDER_RUN.match(path):
        return "ladder runs"
    return "partial" if path.startswith(f"{PARTIAL}/") else "counted"


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
    for budget, limit in BUDGETS.items():
        part = {p: s for p, s in sizes.items() if budget_of(p) == budget}
        total = sum(part.values())
        assert total <= limit, (
            f"the tracked files counted as {budget!r} take {total / MIB:.2f} MiB, over their budget of "
            f"{limit / MIB:g} MiB; largest folders: {largest_folders(part)}. Prune runs no notebook or "
            "verdict reads (docs/results.md says which are kept), or commit lean exports")


def test_each_path_counts_against_one_budget():
    assert budget_of("outputs/runs/cifar100-cifar-families/frost-seed0/model.pt") == "paper runs"
    assert budget_of("outputs/runs/imagenet100-paper-families/frost-seed0/model.pt") == "paper runs"
    assert budget_of("outputs/runs/cifar100-ladder256-ladder/frost-seed0/model.pt") == "paper runs"
    assert budget_of("outputs/runs/cifar100-ladder128-ladder/frost-seed0/model.pt") == "ladder runs"
    assert budget_of("outputs/runs/cifar100-ladder32-ladder-bf16/basic_ssm-seed2/metrics.json") == "ladder runs"
    assert budget_of("outputs/runs/cifar100-demo-families/frost-seed0/model.pt") == "counted"
    assert budget_of("outputs/partial/cifar100-ladder128-ladder/x/model.pt") == "partial"
    assert budget_of("notebooks/05_halting.ipynb") == "counted"
    for path in ("frost_nb/dfmamba/model.py", "tests/test_dfmamba_model.py", "docs/df-mamba.md",
                 "notebooks/11_df_mamba.ipynb", "outputs/runs/forecast/etth2-dfmamba/dfmamba-h96-seed0/model.pt",
                 "outputs/metrics/11_df_mamba.json", "outputs/metrics/bench_dfmamba_scan.json",
                 "outputs/figures/11_forecasts.png"):
        assert budget_of(path) == "df-mamba", path
    assert budget_of("docs/method.md") == "counted" and budget_of("outputs/figures/10_x.png") == "counted"


def test_the_message_names_the_largest_folders():
    sizes = {"outputs/runs/a/b/model.pt": 3 * MIB, "outputs/runs/c/d/model.pt": 2 * MIB,
             "notebooks/01.ipynb": MIB, "README.md": MIB // 2, "frost_nb/x.py": MIB // 4}
    assert largest_folders(sizes, 3) == "outputs/runs 5.0 MiB, notebooks 1.0 MiB, . 0.5 MiB"
