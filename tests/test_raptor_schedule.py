"""Claim 19's student under Raptor's schedule (``loss.raptor``): the teacher-forced share tf, the
teacher-forced states, and a loss that is tf x their state error + (1 - tf) x the free run's, no task
loss and no KL, on a tiny constructed model (no data, no stored teacher)."""

import pytest
import torch

from frost_nb.config import ConfigError, make_config, replace_model
from frost_nb.losses import teacher_losses
from frost_nb.models import create_model, init_from_teacher
from frost_nb.repro.grids import CLAIM_CONTROLS, TASK_ONLY
from frost_nb.training import RAPTOR_FORCED_SPAN, forward_loss, teacher_forced_share, teacher_forced_states

RAPTOR = CLAIM_CONTROLS["raptor k=2"]


def test_the_teacher_forced_share_falls_from_one_to_zero_over_the_first_quarter():
    assert RAPTOR_FORCED_SPAN == 0.25
    total = 800  # 200 steps to 0
    assert teacher_forced_share(0, total) == 1.0
    assert teacher_forced_share(50, total) == 0.75
    assert teacher_forced_share(100, total) == 0.5  # 12.5% of the steps
    assert teacher_forced_share(200, total) == 0.0  # 25%
    assert teacher_forced_share(201, total) == teacher_forced_share(799, total) == 0.0  # never below 0
    assert teacher_forced_share(1, 3) == 0.0  # 0.75 steps to 0: the second step is already free


def _pair(seed=0):
    """A teacher (vanilla, T = 4) and a k = 2 student (ranges 1 and 3) started from it, its branches then
    moved so that it differs from the teacher; the student's config with Raptor's loss."""
    cfg = make_config("smoke", "digits", "vanilla", **{**TASK_ONLY["vanilla"], "model.branch_steps": "1,3",
                                                      "loss.teacher": "digits-smoke-families/vanilla-seed0",
                                                      **RAPTOR})
    torch.manual_seed(seed)
    teacher = create_model(replace_model(cfg.model, branch_steps="")).eval()  # the same model, T branches
    student = create_model(cfg.model)
    init_from_teacher(student, teacher)
    with torch.no_grad():
        for p in student.branches.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return cfg, teacher.requires_grad_(False), student


def _relative_error(a, b):  # eq. (state) by hand: mean over samples and steps of ||a - b||^2 / ||b||^2
    a, b = a[:, 1:].flatten(2), b[:, 1:].flatten(2)
    return ((a - b).pow(2).sum(-1) / b.pow(2).sum(-1)).mean()


def test_teacher_forced_states_are_one_student_step_from_each_teacher_state():
    cfg, teacher, student = _pair()
    x = torch.randn(5, 1, 8, 8)
    h = teacher(x, return_states=True).states  # (N, T+1, C, S, S): h'_0 .. h'_4
    forced = teacher_forced_states(student, h)
    assert forced.shape == h.shape and torch.equal(forced[:, 0], h[:, 0])
    for t, branch in enumerate((0, 1, 1, 1)):  # ranges 1, 3: step 0 by branch 0, steps 1..3 by branch 1
        by_hand = h[:, t] + student.branches[branch](h[:, t])  # vanilla's step from the teacher's state
        assert torch.allclose(forced[:, t + 1], by_hand, atol=1e-6), t
    # not the free run: that one goes on from the student's own states
    free = student(x, return_states=True).states
    assert torch.allclose(forced[:, 1], free[:, 1], atol=1e-6)  # the same stem, the same first step
    assert not torch.allclose(forced[:, 2:], free[:, 2:], atol=1e-4)


def test_the_loss_mixes_the_teacher_forced_and_free_state_errors_and_nothing_else():
    cfg, teacher, student = _pair()
    x, y = torch.randn(6, 1, 8, 8), torch.arange(6)
    ref = teacher(x, return_states=True)
    free = _relative_error(student(x, return_states=True).states, ref.states)
    forced = _relative_error(teacher_forced_states(student, ref.states), ref.states)
    assert free > 0 and forced > 0 and not torch.isclose(free, forced)
    loss = lambda tf, labels=y: forward_loss(student, x, labels, cfg, amp=False, channels_last=False,
                                             teacher=teacher, forced=None if tf is None else torch.tensor(tf))
    for tf in (None, 1.0, 0.5, 0.25):
        out, total, parts = loss(tf)
        share = tf or 0.0
        assert total.item() == pytest.approx((share * forced + (1 - share) * free).item(), rel=1e-5), tf
        assert parts["loss"].item() == total.item()
        assert parts["teacher_state"].item() == pytest.approx(free.item())  # the free run's, logged
        assert parts["teacher_kl"] > 0  # logged, not in the loss (loss.teacher_kl = 0)
        permuted = y[torch.randperm(6, generator=torch.Generator().manual_seed(1))]
        assert loss(tf, permuted)[1].item() == total.item()  # no task loss: the labels do not move it
    # the gradient of the free run reaches the stem; at tf = 1 only the branches' one steps count
    total = loss(1.0)[1]
    stem = torch.autograd.grad(total, student.stem[0].weight, allow_unused=True)[0]
    assert stem is None or torch.count_nonzero(stem) == 0
    free_loss = loss(None)[1]
    assert torch.count_nonzero(torch.autograd.grad(free_loss, student.stem[0].weight)[0]) > 0


def test_raptor_needs_a_teacher():
    with pytest.raises(ConfigError, match=r"^loss\.raptor=True.*without loss\.teacher"):
        make_config("smoke", "digits", "vanilla", **{"loss.raptor": True})
    # off by default: every stored config without the field reads as before
    assert make_config("smoke", "digits", "vanilla").loss.raptor is False
