"""The block-recurrent rewrite of a trained ``vanilla`` model, after Raptor (Jacobs et al., "Block-Recurrent
Dynamics in Vision Transformers", arXiv 2512.19941): docs/method.md section 16. A student's k branches
cover the contiguous ranges of the teacher's steps that maximise J (eq. (ranges)) over its step similarity
S (eq. (sim)), found exactly by dynamic programming; equal ranges are the control."""

from __future__ import annotations

import functools
import math
import numbers
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor

from ..checkpoint import checkpoint_config, load_model
from ..config import RunConfig
from ..data.datasets import make_batches
from ..models import gap
from ..runs import file_stamp, load_teacher, read_metrics, run_name, teacher_folder
from ..training import first_batches, load_split
from .trajectories import model_trajectories, similarity_matrix

Ranges = tuple[tuple[int, int], ...]  # (start, stop) per branch: 0-based steps start..stop-1


# ---------------------------------------------------------------- the ranges
def range_score(similarity: Tensor, ranges: Ranges) -> float:
    """J of eq. (ranges): sum over ranges of their within-range similarity sum over their length."""
    s = similarity.double()
    return sum(s[a:b, a:b].sum().item() / (b - a) for a, b in ranges)


def _check_k(k: int, steps: int) -> int:
    if isinstance(k, bool) or not (isinstance(k, numbers.Integral) and 1 <= k <= steps):  # np.int64 too
        raise ValueError(f"k={k!r} must be a whole number of ranges from 1 to T = {steps}")
    return int(k)


def best_ranges(similarity: Tensor, k: int) -> Ranges:
    """The contiguous split of the T steps into k ranges that maximises J (eq. (ranges)), by dynamic
    programming over best[m][j] (the first j steps in m ranges); a tie keeps the earliest start."""
    if similarity.dim() != 2 or similarity.shape[0] != similarity.shape[1] or not similarity.isfinite().all():
        raise ValueError(f"similarity must be a finite square (T, T) matrix, got {tuple(similarity.shape)}")
    steps, k = similarity.shape[0], _check_k(k, similarity.shape[0])
    term = [[range_score(similarity, ((i, j),)) if j > i else -math.inf for j in range(steps + 1)]
            for i in range(steps + 1)]  # term[i][j]: the range i..j-1
    best = [[-math.inf] * (steps + 1) for _ in range(k + 1)]
    cut = [[0] * (steps + 1) for _ in range(k + 1)]
    best[0][0] = 0.0
    for m in range(1, k + 1):
        for j in range(m, steps + 1):
            for i in range(m - 1, j):
                if (v := best[m - 1][i] + term[i][j]) > best[m][j]:
                    best[m][j], cut[m][j] = v, i
    stops = [steps]  # back from the last: cut[m][j] starts the last of m ranges over the first j steps
    for m in range(k, 1, -1):
        stops.insert(0, cut[m][stops[0]])
    return tuple(zip([0] + stops[:-1], stops))


def equal_ranges(steps: int, k: int) -> Ranges:
    """The control: k contiguous ranges whose lengths differ by at most one, the longer first."""
    k = _check_k(k, steps)  # the first steps % k ranges one step longer
    stops = [(i + 1) * (steps // k) + min(i + 1, steps % k) for i in range(k)]
    return tuple(zip([0] + stops[:-1], stops))


def branch_steps(ranges: Ranges) -> str:
    """``ranges`` as ``model.branch_steps`` ("5,11")."""
    return ",".join(str(b - a) for a, b in ranges)


@functools.lru_cache(maxsize=16)
def _run_similarity(path: str, stamp: tuple[int, int]) -> Tensor:
    model, _ = load_model(path)  # (T, T): the mean cosine of its pooled h_1..h_T (h_0 dropped)
    return similarity_matrix(model_trajectories(model, checkpoint_config(path), "val").pooled)[1:, 1:]


def run_similarity(checkpoint: str | Path) -> Tensor:
    """eq. (sim) of a stored run (its ``model.pt``) on its held-out split, computed once per file."""
    return _run_similarity(*file_stamp(Path(checkpoint)))


# ---------------------------------------------------------------- after training
@torch.no_grad()
def state_match(student: torch.nn.Module, teacher: torch.nn.Module, dataset, *, batch_size: int = 512,
                max_samples: int | None = None) -> dict[str, list[float]]:
    """Per step t = 1..T, the sample means of cos(GAP(h_t), GAP(h'_t)) (``state_cosine``) and of eq.
    (state)'s error (``state_error``) of the student against its teacher, each running free."""
    student.eval(), teacher.eval()
    device = next(student.parameters()).device
    batches = make_batches(dataset, batch_size, shuffle=False, augment=False, device=device)
    cos, err, n = 0.0, 0.0, 0
    for x, _ in first_batches(batches, max_samples):
        a, b = (m(x, return_states=True).states[:, 1:].float() for m in (student, teacher))  # (B, T, *state)
        pooled = lambda h: gap(h.flatten(0, 1)).view(*h.shape[:2], -1)  # (B, T, D)
        cos = cos + F.cosine_similarity(pooled(a), pooled(b), dim=2).sum(0)  # (T,)
        err = err + ((a - b).flatten(2).pow(2).sum(2) / b.flatten(2).pow(2).sum(2).clamp_min(1e-12)).sum(0)
        n += len(x)
    if not n:
        raise ValueError("state_match got no samples (an empty split?)")
    return {"state_cosine": (cos / n).tolist(), "state_error": (err / n).tolist()}


def run_kind(cfg: RunConfig) -> str | None:
    """What a run with a teacher is: "student" (eq. (match)), "raptor" (``loss.raptor``) or "warm" (task
    loss alone: claim 19's warm-start control); None without a teacher."""
    loss = cfg.loss
    if loss.teacher is None:
        return None
    return "raptor" if loss.raptor else "student" if loss.teacher_state or loss.teacher_kl else "warm"


def summary(results: dict, split: str = "test", max_samples: int | None = None,
            kinds: tuple[str, ...] = ("student",)) -> pd.DataFrame:
    """One row per run of ``kinds`` among ``results`` (the ``block-recurrent`` grid's), by k then seed:
    accuracies, ``recovered`` (over the teacher), ``gain`` over the from-scratch control, ``state_match``."""
    rows, teachers = [], {}
    # from scratch: no teacher, and not one branch per step (the teachers themselves)
    scratch = [r for r in results.values() if r.config.loss.teacher is None
               and len(r.config.model.branch_ranges) < r.config.model.steps]
    for label, r in results.items():
        cfg = r.config
        if run_kind(cfg) not in kinds:
            continue
        if cfg.loss.teacher not in teachers:
            teachers[cfg.loss.teacher] = (load_teacher(cfg), read_metrics(teacher_folder(cfg)))
        teacher, teacher_metrics = teachers[cfg.loss.teacher]
        k, accuracy = len(cfg.model.branch_ranges), r.metrics.get("test_accuracy", math.nan)
        teacher_accuracy = teacher_metrics.get("test_accuracy", math.nan)
        recipe = lambda c: (len(c.model.branch_ranges), c.data.name, c.size, c.train.epochs)
        same = sorted((s for s in scratch if recipe(s.config) == recipe(cfg)),
                      key=lambda s: (s.config.model.branch_ranges != cfg.model.branch_ranges,
                                     s.config.train.seed != cfg.train.seed, s.config.train.seed))
        base = same[0].metrics.get("test_accuracy", math.nan) if same else math.nan
        match = state_match(r.model, teacher.to(next(r.model.parameters()).device), load_split(cfg, split),
                            batch_size=cfg.train.eval_batch_size, max_samples=max_samples)
        mean = lambda v: sum(v) / len(v)
        rows.append({"label": label, "kind": run_kind(cfg), "key": run_name(r.checkpoint), "k": k,
                     "branch_steps": branch_steps(cfg.model.branch_ranges), "seed": cfg.train.seed,
                     "teacher": cfg.loss.teacher, "accuracy": accuracy, "teacher_accuracy": teacher_accuracy,
                     "recovered": accuracy / teacher_accuracy, "scratch_accuracy": base,
                     "scratch_steps": branch_steps(same[0].config.model.branch_ranges) if same else None,
                     "scratch_seed": same[0].config.train.seed if same else None, "gain": accuracy - base,
                     # the share of the gap from the same k from scratch to the teacher that it closes
                     "gap_closed": (accuracy - base) / (teacher_accuracy - base) if teacher_accuracy != base else math.nan,
                     "state_cosine_mean": mean(match["state_cosine"]),
                     "state_cosine_last": match["state_cosine"][-1],
                     "state_error_mean": mean(match["state_error"]), **match})
    if not rows:
        raise ValueError(f"summary found no run of kinds {kinds} (a run with loss.teacher) among the results")
    return pd.DataFrame(rows).sort_values(["k", "seed"], kind="stable").reset_index(drop=True)


# ---------------------------------------------------------------- the read-out against k
def against_k(table: pd.DataFrame) -> pd.DataFrame:
    """``summary``'s students by k: their number, means (accuracies, ``recovered``, ``gain``, state
    cosine), the sample sd of ``recovered`` and ``gain``, and the controls' seeds."""
    rows = []
    for k, group in table.groupby("k", sort=True):
        if group["recovered"].isna().any():
            raise ValueError(f"against_k: a student of k = {k} has no test accuracy recovered (its run or its "
                             "teacher's lacks metrics.json): export both finished runs, then read again")
        sd = lambda col: group[col].std(ddof=1) if len(group) > 1 else math.nan
        per_step = torch.tensor(group["state_cosine"].tolist(), dtype=torch.float64).mean(0)  # (T,)
        rows.append({"k": int(k), "students": len(group), "branch_steps": " / ".join(dict.fromkeys(group["branch_steps"])),
                     **{col: group[col].mean() for col in ("accuracy", "teacher_accuracy", "recovered")},
                     "recovered_sd": sd("recovered"), "scratch_accuracy": group["scratch_accuracy"].mean(),
                     "gain": group["gain"].mean(), "gain_sd": sd("gain"),
                     "scratch_seeds": " / ".join(str(int(s)) for s in dict.fromkeys(
                         group.get("scratch_seed", pd.Series(dtype=float)).dropna())),
                     "state_cosine_mean": group["state_cosine_mean"].mean(), "state_cosine": per_step.tolist()})
    return pd.DataFrame(rows)


def ranges_table(results: dict) -> pd.DataFrame:
    """One row per student among ``results``: its teacher, k, its ranges and the control's equal ones,
    with J of eq. (ranges) for both on that teacher's similarity."""
    rows = []
    for label, r in results.items():
        cfg = r.config
        if run_kind(cfg) != "student":
            continue
        similarity = run_similarity(teacher_folder(cfg) / "model.pt")
        chosen, equal = cfg.model.branch_ranges, equal_ranges(cfg.model.steps, len(cfg.model.branch_ranges))
        rows.append({"label": label, "teacher": cfg.loss.teacher, "seed": cfg.train.seed, "k": len(chosen),
                     "branch_steps": branch_steps(chosen), "equal_steps": branch_steps(equal),
                     "score": range_score(similarity, chosen), "equal_score": range_score(similarity, equal)})
    if not rows:
        raise ValueError("ranges_table found no student (a run with loss.teacher) among the results")
    return pd.DataFrame(rows).sort_values(["seed", "k"], kind="stable").reset_index(drop=True)


def teacher_view(results: dict, seed: int = 0) -> tuple[Tensor, dict[int, Ranges]]:
    """The step similarity (eq. (sim)) of the teacher of seed ``seed``'s students among ``results``, and
    the ranges each of its students (by k) was given."""
    students = {len(r.config.model.branch_ranges): r.config for r in results.values()
                if run_kind(r.config) == "student" and r.config.train.seed == seed}
    if not students:
        raise ValueError(f"teacher_view found no student of seed {seed} among the results")
    return (run_similarity(teacher_folder(next(iter(students.values()))) / "model.pt"),
            {k: cfg.model.branch_ranges for k, cfg in sorted(students.items())})
