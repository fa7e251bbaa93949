"""The repository keeps room for data (issue 34). Every call of the device tool sends the tracked
files along, 64 MiB in all with what it carries; kept under 40 MiB, they leave 24 MiB per call for
a data set's parts, the wheels and a resumable checkpoint (docs/scaling.md, "The cifar size on a
lent GPU"; scripts/gpu.py plan sizes the parts from what is left)."""

import importlib.util
import sys
from collections import Counter

import pytest

from frost_nb.paths import repo_root

spec = importlib.util.spec_from_file_location("gpu", repo_root() / "scripts" / "gpu.py")
gpu = sys.modules["gpu"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu)
MIB = 1 << 20


def largest_folders(sizes: dict[str, int], most: int = 5) -> str:
    """The ``most`` largest folders (two levels: ``outputs/runs``) of ``sizes`` (path -> bytes)."""
    folders = Counter()
    for path, size in sizes.items():
        parts = path.split("/")
        folders["/".join(parts[:2]) if len(parts) > 2 else parts[0] if len(parts) > 1 else "."] += size
    return ", ".join(f"{name} {size / MIB:.1f} MiB" for name, size in folders.most_common(most))


def test_tracked_files_stay_within_the_budget():
    try:
        sizes = gpu.tracked_sizes(repo_root())
    except gpu.GpuError as err:
        pytest.skip(f"not a git checkout, nothing to measure: {err}")
    total = sum(sizes.values())
    assert gpu.REPO_BUDGET == 40 * MIB
    assert total <= gpu.REPO_BUDGET, (
        f"the tracked files take {total / MIB:.2f} MiB, over the budget of 40 MiB that leaves room for "
        f"data beside the repository on a lent GPU; largest folders: {largest_folders(sizes)}. Commit "
        "lean exports with bf16 weights (scripts/gpu.py fetch --commit), thinner histories, or fewer files")


def test_the_message_names_the_largest_folders():
    sizes = {"outputs/runs/a/b/model.pt": 3 * MIB, "outputs/runs/c/d/model.pt": 2 * MIB,
             "notebooks/01.ipynb": MIB, "README.md": MIB // 2, "frost_nb/x.py": MIB // 4}
    assert largest_folders(sizes, 3) == "outputs/runs 5.0 MiB, notebooks 1.0 MiB, . 0.5 MiB"
