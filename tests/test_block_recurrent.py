"""The block-recurrent rewrite (docs/method.md section 16): ranges, the student model, its start from
the teacher, the loss that matches it, and a distillation run that trains, saves and resumes."""

import itertools
import math
import os
import shutil
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from frost_nb.analysis.block_recurrent import (
    against_k,
    best_ranges,
    branch_steps,
    equal_ranges,
    range_score,
    ranges_table,
    run_kind,
    state_match,
    summary,
    teacher_view,
)
from frost_nb.config import ConfigError, make_config
from frost_nb.data.datasets import make_batches
from frost_nb.losses import teacher_losses
from frost_nb.models import create_model, init_from_teacher
from frost_nb.repro.grids import CLAIM_CONTROLS, TASK_ONLY, grid
from frost_nb.runs import load_teacher
from frost_nb.training import TrainingError, build_trainer, forward_loss, load_split

TEACHER = "digits-smoke-families/vanilla-seed0"  # the families grid's vanilla at smoke size, as stored


def _brute_force(similarity, k):
    steps = similarity.shape[0]
    cuts = itertools.combinations(range(1, steps), k - 1)
    splits = [tuple(zip((0, *c), (*c, steps))) for c in cuts]
    return max(range_score(similarity, r) for r in splits)


def _block_matrix(sizes, inside=0.9, outside=0.2):
    labels = torch.cat([torch.full((n,), i) for i, n in enumerate(sizes)])
    s = torch.where(labels[:, None] == labels[None, :], inside, outside)
    return s.fill_diagonal_(1.0)


def _pooled_states_by_hand(model, cfg, split):
    """(N, T, D) GAP of h_1..h_T of ``model`` over ``split`` of ``cfg``'s data, by a plain forward pass."""
    model.eval()
    batches = make_batches(load_split(cfg, split), cfg.train.eval_batch_size, shuffle=False, augment=False, device="cpu")
    with torch.no_grad():
        return torch.cat([model(x, return_states=True).states[:, 1:].mean((3, 4)) for x, _ in batches])


def _similarity_by_hand(model, cfg):
    """eq. (sim) on the held-out split: S[s, t] the mean over samples of cos(GAP(h_s), GAP(h_t)), s, t = 1..T."""
    z = _pooled_states_by_hand(model, cfg, "val").double()
    z = z / z.norm(dim=2, keepdim=True)
    steps = z.shape[1]
    return torch.tensor([[(z[:, s] * z[:, t]).sum(1).mean().item() for t in range(steps)] for s in range(steps)])


def _j_by_hand(similarity, sizes):
    """eq. (ranges) of the contiguous ranges of ``sizes``: per range, its similarity sum over its length."""
    total, start = 0.0, 0
    for size in sizes:
        steps = range(start, start + size)
        total += sum(float(similarity[s, t]) for s in steps for t in steps) / size
        start += size
    return total


# a known step similarity (T = 4: steps 1-3 one phase, step 4 another) and its J by hand (inside 0.9,
# outside 0.2, 1 on the diagonal): k = 1 (4 + 6 x 0.9 + 6 x 0.2) / 4 = 2.65; k = 2 "3,1" (3 + 6 x 0.9) / 3
# + 1 = 3.8, the best (of "1,3" 1 + 5.6 / 3 = 2.8667 and equal "2,2" 3.8 / 2 + 2.4 / 2 = 3.1); k = 4: 4
KNOWN = _block_matrix((3, 1))


def test_best_ranges_are_the_brute_force_optimum():
    g = torch.Generator().manual_seed(0)
    z = torch.nn.functional.normalize(torch.randn(7, 3, generator=g).cumsum(0), dim=1)  # a drifting path
    similarity = z @ z.T
    for k in range(1, 8):
        ranges = best_ranges(similarity, k)
        assert len(ranges) == k and ranges[0][0] == 0 and ranges[-1][1] == 7
        assert all(a < b == c for (a, b), (c, _) in zip(ranges, ranges[1:]))  # contiguous, none empty
        assert range_score(similarity, ranges) == pytest.approx(_brute_force(similarity, k), abs=1e-12)
    # phases of a block-diagonal matrix are found exactly, where equal ranges cut through them
    blocks = _block_matrix((3, 6, 2, 5))
    assert best_ranges(blocks, 4) == ((0, 3), (3, 9), (9, 11), (11, 16))
    assert range_score(blocks, best_ranges(blocks, 4)) > range_score(blocks, equal_ranges(16, 4))
    with pytest.raises(ValueError, match="k=0"):
        best_ranges(blocks, 0)
    with pytest.raises(ValueError, match="square"):
        best_ranges(blocks[:3], 2)
    with pytest.raises(ValueError, match="finite"):  # defect: a NaN matrix gave an empty range
        best_ranges(torch.full((4, 4), math.nan), 2)


def test_equal_ranges_are_the_control():
    assert equal_ranges(16, 2) == ((0, 8), (8, 16))
    assert equal_ranges(16, 3) == ((0, 6), (6, 11), (11, 16))
    assert branch_steps(equal_ranges(16, 4)) == "4,4,4,4"
    with pytest.raises(ValueError, match="from 1 to T = 16"):
        equal_ranges(16, 17)
    # defects: a numpy integer (as read off an array) was refused, a bool taken for 1
    assert equal_ranges(16, np.int64(2)) == equal_ranges(16, 2)
    assert type(equal_ranges(16, np.int64(2))[0][1]) is int  # not a numpy integer, which json refuses
    assert best_ranges(_block_matrix((3, 6, 2, 5)), np.int64(4)) == ((0, 3), (3, 9), (9, 11), (11, 16))
    with pytest.raises(ValueError, match="k=True"):
        equal_ranges(16, True)
    for bad in (2.0, np.array(2.5), torch.tensor(2.5)):  # not whole numbers (the last two refuse __index__)
        with pytest.raises(ValueError, match="must be a whole number"):
            equal_ranges(16, bad)


def test_branch_steps_is_validated_and_spelled_one_way():
    cfg = make_config("demo", "cifar100", "vanilla", **{"model.branch_steps": " 5, 11"})
    assert cfg.model.branch_steps == "5,11" and cfg.model.branch_ranges == ((0, 5), (5, 16))
    ones = make_config("demo", "cifar100", "vanilla", **{"model.branch_steps": ",".join("1" * 16)})
    assert ones == make_config("demo", "cifar100", "vanilla")  # one branch per step is vanilla itself
    for bad in ("8,7", "8,x", "0,16"):
        with pytest.raises(ConfigError, match=r"^model\.branch_steps=.*sum to model\.steps=16"):
            make_config("demo", "cifar100", "vanilla", **{"model.branch_steps": bad})
    with pytest.raises(ConfigError, match=r"^model\.branch_steps='8,8'.*'vanilla'"):
        make_config("demo", "cifar100", "recurrent", **{"model.branch_steps": "8,8"})
    with pytest.raises(ConfigError, match=r"^loss\.teacher=.*'vanilla'"):
        make_config("smoke", model="frost", **{"loss.teacher": TEACHER})
    with pytest.raises(ConfigError, match=r"^loss\.teacher='vanilla'.*GRID/LABEL"):
        make_config("smoke", model="vanilla", **{"loss.teacher": "vanilla"})


def test_k16_ranges_reproduce_vanilla_exactly():
    teacher = create_model(make_config("smoke", model="vanilla").model)
    steps = teacher.config.steps
    ranges = best_ranges(_block_matrix((steps,)), steps)
    assert ranges == tuple((t, t + 1) for t in range(steps))
    cfg = make_config("smoke", model="vanilla", **{"model.branch_steps": branch_steps(ranges)})
    student = create_model(cfg.model)
    assert student.config == teacher.config and student.branch_of_step == tuple(range(steps))
    assert init_from_teacher(student, teacher) == list(range(steps))
    x = torch.randn(3, 1, 8, 8)
    a, b = student(x, return_states=True), teacher(x, return_states=True)
    assert torch.equal(a.states, b.states) and torch.equal(a.logits, b.logits)


def test_k1_is_one_shared_branch():
    row = lambda m: make_config("demo", "cifar100", m, **TASK_ONLY[m])  # the committed families runs
    cfg = row("vanilla").replace(**{"model.branch_steps": branch_steps(equal_ranges(16, 1))})
    student, recurrent = create_model(cfg.model), create_model(row("recurrent").model)
    assert cfg.model.branch_steps == "16" and len(student.branches) == 1
    assert set(student.branch_of_step) == {0}
    # the committed runs' counts (their metrics.json): recurrent's, and vanilla's 16 branches unchanged
    assert student.num_parameters() == recurrent.num_parameters() == 13093
    assert create_model(row("vanilla").model).num_parameters() == 81253
    recurrent.load_state_dict(student.state_dict())  # the same weights: the same model as recurrent
    x = torch.randn(2, 3, 32, 32)
    assert torch.equal(student(x).logits, recurrent(x).logits)


def test_initialisation_copies_stem_heads_and_the_middle_branch():
    teacher = create_model(make_config("smoke", model="vanilla", **{"model.steps": 8}).model)
    cfg = make_config("smoke", model="vanilla", **{"model.steps": 8, "model.branch_steps": "3,5"})
    torch.manual_seed(1)
    student = create_model(cfg.model)
    assert init_from_teacher(student, teacher) == [1, 5]  # ranges 0..2 and 3..7: t = 0 + 1, 3 + 2
    theirs = teacher.state_dict()
    for name, value in student.state_dict().items():
        if name.startswith("branches."):
            i, rest = name.split(".", 2)[1:]
            assert torch.equal(value, theirs[f"branches.{[1, 5][int(i)]}.{rest}"]), name
        else:
            assert torch.equal(value, theirs[name]), name
    wider = create_model(make_config("smoke", model="vanilla", **{"model.width": 32}).model)
    with pytest.raises(ConfigError, match="does not fit the student"):
        init_from_teacher(create_model(make_config("smoke", model="vanilla").model), wider)


def test_teacher_losses_vanish_on_the_teacher_and_only_there():
    torch.manual_seed(0)
    model = create_model(make_config("smoke", model="vanilla").model)
    x = torch.randn(4, 1, 8, 8)
    out = model(x, return_states=True)
    same = teacher_losses(out.states, out.logits, out.states, out.logits)
    assert same.loss.item() == same.state.item() == same.kl.item() == 0.0
    other = create_model(make_config("smoke", model="vanilla").model)(x, return_states=True)
    diff = teacher_losses(other.states, other.logits, out.states, out.logits, w_state=2.0, w_kl=0.5)
    assert diff.state > 0 and diff.kl > 0
    assert diff.loss.item() == pytest.approx(2.0 * diff.state.item() + 0.5 * diff.kl.item())
    # normalised by the teacher state's norm: both scaled alike, the state term stays
    scaled = teacher_losses(3 * other.states, other.logits, 3 * out.states, out.logits)
    assert scaled.state.item() == pytest.approx(diff.state.item(), rel=1e-5)
    # by hand: one sample, one step, ||s - t||^2 / ||t||^2
    s, t = torch.zeros(1, 2, 2), torch.tensor([[[9.0, 9.0], [3.0, 4.0]]])
    s[0, 1] = torch.tensor([0.0, 4.0])
    logits = torch.zeros(1, 1, 3)
    assert teacher_losses(s, logits, t, logits).state.item() == pytest.approx(9.0 / 25.0)
    with pytest.raises(ValueError, match="states and teacher_states"):
        teacher_losses(s, logits, t[:, :1], logits)


@pytest.fixture(scope="module")
def stored_teacher(tmp_path_factory):
    """A local store holding the families grid's vanilla at smoke size on digits (seconds)."""
    from frost_nb.runs import train_or_load

    root = tmp_path_factory.mktemp("teacher_store")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FROST_CACHE", str(root))
        mp.setenv("FROST_PROGRESS", "0")
        families = grid("families", "smoke", "digits")
        train_or_load(families["vanilla"], name=families.run_name("vanilla"))
    assert (root / TEACHER / "metrics.json").is_file()
    return root


@pytest.fixture
def teacher_store(stored_teacher):
    """The stored teacher, copied into this test's own local store."""
    cache = os.environ["FROST_CACHE"]
    shutil.copytree(stored_teacher / TEACHER, os.path.join(cache, TEACHER))
    return cache


def _student(k_steps="1,3", **overrides):
    """A student of TEACHER (its model config, the families grid's vanilla row) on a slice of digits."""
    return make_config("smoke", "digits", "vanilla", **{
        **TASK_ONLY["vanilla"], "model.branch_steps": k_steps, "loss.teacher": TEACHER, "data.limit": 200,
        "train.epochs": 2, "train.device": "cpu", **overrides})


def test_a_student_trains_saves_and_resumes(teacher_store, tmp_path):
    cfg = _student()
    teacher = load_teacher(cfg)
    whole = build_trainer(cfg, tmp_path / "whole.pt", teacher=teacher)
    assert whole.teacher is not None and not any(p.requires_grad for p in whole.teacher.parameters())
    # the student starts from its teacher: branch 0 from step 0, branch 1 from step 1 + 3 // 2 = 2
    assert torch.equal(whole.model.branches[1].conv1.weight, teacher.branches[2].conv1.weight)
    assert torch.equal(whole.model.stem[0].weight, teacher.stem[0].weight)
    x, y = torch.randn(8, 1, 8, 8), torch.arange(8)  # not the batches: their order is the run's
    out, loss, parts = forward_loss(whole.model, x, y, cfg, amp=False, channels_last=False, teacher=teacher)
    ref = teacher(x, return_states=True)
    match = teacher_losses(out.states, out.logits, ref.states, ref.logits).loss  # the weights 1, 1
    assert loss.item() == pytest.approx(parts["task"].item() + match.item()) and match > 0
    done = whole.fit()
    assert done.metrics["epochs"] == 2
    # the full-depth test accuracy, by a plain forward pass of the trained model over the test split
    batches = make_batches(load_split(cfg, "test"), cfg.train.eval_batch_size, shuffle=False, augment=False, device="cpu")
    done.model.eval()
    with torch.no_grad():
        right = sum((done.model(x).logits[:, -1].argmax(1) == y).sum().item() for x, y in batches)
    assert done.metrics["test_accuracy"] == pytest.approx(right / len(load_split(cfg, "test")), abs=1e-7)  # a float32 mean
    steps = done.history["steps"]  # every step's loss had the match to the teacher in it
    assert all(total > task for total, task in zip(steps["loss"], steps["task"]))
    # and the history keeps both its parts, which with the weights 1, 1 and no ranking loss add up
    parts = zip(steps["task"], steps["teacher_state"], steps["teacher_kl"])
    assert steps["loss"] == pytest.approx([sum(p) for p in parts], rel=1e-4)
    assert len(steps["teacher_state"]) == len(steps["step"]) and min(steps["teacher_state"]) > 0
    assert not torch.equal(done.model.branches[1].conv1.weight, teacher.branches[2].conv1.weight)  # trained

    cut = build_trainer(cfg, tmp_path / "cut.pt", teacher=teacher)
    cut.fit(until_epoch=1)
    assert (tmp_path / "cut.pt").is_file()
    resumed = build_trainer(cfg, tmp_path / "cut.pt", teacher=teacher)
    again = resumed.fit()
    assert resumed.resumed and again.history["epochs"]["epoch"] == [1, 2]
    for (name, a), b in zip(done.model.state_dict().items(), again.model.state_dict().values()):
        assert torch.equal(a, b), name  # the resumed run is the uninterrupted one, to the bit
    match = state_match(again.model, teacher, load_split(cfg, "test"), max_samples=64)
    mine, theirs = (_pooled_states_by_hand(m, cfg, "test")[:64] for m in (again.model, teacher))
    by_hand = torch.nn.functional.cosine_similarity(mine, theirs, dim=2).mean(0)  # (T,)
    assert match["state_cosine"] == pytest.approx(by_hand.tolist(), abs=1e-5)
    # known values: the teacher against itself; the student at its start against its teacher at step 1
    # (the teacher's stem and, for step 0, its branch 0: the same h_1); at step 2 it runs teacher branch 2
    same = state_match(teacher, teacher, load_split(cfg, "test"), max_samples=64)
    assert same["state_cosine"] == pytest.approx([1.0] * 4, abs=1e-6) and same["state_error"] == [0.0] * 4
    start = state_match(build_trainer(cfg, teacher=teacher).model, teacher, load_split(cfg, "test"),
                        max_samples=64)
    assert start["state_cosine"][0] == pytest.approx(1.0, abs=1e-6) and start["state_error"][0] == 0.0
    assert start["state_error"][1] > 0


def test_a_student_refuses_to_resume_against_other_teacher_weights(teacher_store, tmp_path):
    from frost_nb.checkpoint import CheckpointError, load_checkpoint, save_checkpoint, weights_digest

    cfg = _student()
    cut = build_trainer(cfg, tmp_path / "cut.pt", teacher=load_teacher(cfg))
    cut.fit(until_epoch=1)
    assert load_checkpoint(tmp_path / "cut.pt")["teacher_digest"] == weights_digest(cut.teacher)
    stored = os.path.join(teacher_store, TEACHER, "model.pt")
    state = load_checkpoint(stored)
    name = next(iter(state["model"]))
    state["model"][name] = state["model"][name] + 1.0  # the teacher run trained again: other weights
    save_checkpoint(stored, state)
    with pytest.raises(CheckpointError, match=r"cut\.pt was trained against other weights of its teacher "
                                              r"loss\.teacher=.*delete the checkpoint"):
        build_trainer(cfg, tmp_path / "cut.pt", teacher=load_teacher(cfg)).fit()
    assert load_checkpoint(tmp_path / "cut.pt")["epoch"] == 1  # nothing lost


def test_a_missing_or_unfit_teacher_stops_before_anything_is_written(teacher_store, tmp_path):
    from frost_nb.runs import train_or_load

    cache = tmp_path / "cache"
    before = sorted(p.relative_to(cache) for p in cache.rglob("*"))
    missing = _student(**{"loss.teacher": "nowhere/vanilla-seed0"})
    with pytest.raises(TrainingError, match=r"^loss\.teacher='nowhere/vanilla-seed0': no finished run .* "
                                            r"train the teacher first"):
        train_or_load(missing, name="students/missing")
    broken = cache / "broken" / "vanilla-seed0"
    shutil.copytree(cache / TEACHER, broken)
    (broken / "model.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(TrainingError, match=r"^loss\.teacher='broken/vanilla-seed0' cannot be loaded: .*dam"):
        train_or_load(_student(**{"loss.teacher": "broken/vanilla-seed0"}), name="students/broken")
    with pytest.raises(ConfigError, match=r"not the student's model .*model\.width 16 -> 32"):
        train_or_load(_student(**{"model.width": 32}), name="students/wider")
    with pytest.raises(TrainingError, match=rf"^loss\.teacher='{TEACHER}': a student trains against its "
                                            r"teacher: pass teacher=runs\.load_teacher\(config\)$"):
        build_trainer(_student(), tmp_path / "none.pt")  # the trainer loads no teacher: its caller does
    assert sorted(p.relative_to(cache) for p in cache.rglob("*") if "broken" not in p.parts) == before


def test_the_grid_reads_its_ranges_off_the_teacher(teacher_store, monkeypatch):
    with pytest.raises(ValueError, match="vanilla seed 1 .* is not trained: train it first"):
        grid("block-recurrent", "smoke", "digits", seeds=(0, 1))
    runs = grid("block-recurrent", "smoke", "digits")
    assert list(runs) == ["vanilla", "recurrent", "student k=1", "student k=2", "student k=4", "scratch k=2",
                          "scratch k=4", "warm k=2", "raptor k=2"]  # claim 19's controls last: no shard moves
    # the teacher's step similarity, by hand, and the best of the three splits of T = 4 steps into two
    similarity = _similarity_by_hand(load_teacher(runs["student k=2"]), runs["vanilla"])
    scores = {split: _j_by_hand(similarity, [int(n) for n in split.split(",")]) for split in ("1,3", "2,2", "3,1")}
    best = max(scores, key=scores.get)
    assert sorted(scores.values())[-1] - sorted(scores.values())[-2] > 1e-4  # no near tie to flip
    assert runs["student k=2"].model.branch_steps == runs["scratch k=2"].model.branch_steps == best
    # k = 1 one branch over the 4 steps; k = 4 one per step, spelled "" as vanilla's own
    assert runs["student k=1"].model.branch_steps == "4" and runs["student k=4"].model.branch_steps == ""
    assert runs["student k=2"].loss.teacher == TEACHER
    assert runs["scratch k=2"].loss.teacher is None
    assert runs["scratch k=2"].model == runs["student k=2"].model
    assert runs.run_name("student k=2") == "digits-smoke-block-recurrent/student-k-2-seed0"
    # a teacher whose similarity is known: its two phases, 3 steps and 1, are the k = 2 ranges
    import frost_nb.analysis.block_recurrent as block_recurrent

    with monkeypatch.context() as mp:
        mp.setattr(block_recurrent, "run_similarity", lambda checkpoint: KNOWN)
        known = grid("block-recurrent", "smoke", "digits")
    assert [known[f"student k={k}"].model.branch_steps for k in (1, 2, 4)] == ["4", "3,1", ""]
    assert known["scratch k=2"].model.branch_steps == "3,1"
    # claim 19's controls: the k = 2 student but for its loss, stored under names of their own
    student = runs["student k=2"]
    as_student = {f"loss.{k}": getattr(student.loss, k) for k in ("teacher_state", "teacher_kl", "raptor")}
    for label, kind in (("warm k=2", "warm"), ("raptor k=2", "raptor")):
        assert runs.run_name(label) == f"digits-smoke-block-recurrent/{kind}-k-2-seed0"
        assert run_kind(runs[label]) == kind and runs[label].replace(**as_student) == student
    assert (runs["warm k=2"].loss.teacher_state, runs["warm k=2"].loss.teacher_kl) == (0.0, 0.0)
    assert runs["raptor k=2"].loss.raptor and runs["raptor k=2"].loss.teacher_kl == 0.0
    assert run_kind(student) == "student" and run_kind(runs["scratch k=2"]) is None


def test_summary_reports_against_k(teacher_store):
    from frost_nb.runs import train_or_load

    cfg = _student("4", **{"train.epochs": 1})
    scratch = cfg.replace(**{"loss.teacher": None})
    results = {"student k=1": train_or_load(cfg, name="students/k1"),
               "scratch k=1": train_or_load(scratch, name="students/scratch-k1")}
    table = summary(results, max_samples=64)
    row = table.iloc[0]
    assert len(table) == 1 and row["k"] == 1 and row["branch_steps"] == "4"
    assert row["recovered"] == pytest.approx(row["accuracy"] / row["teacher_accuracy"])
    assert row["gain"] == pytest.approx(row["accuracy"] - results["scratch k=1"].metrics["test_accuracy"])
    assert row["scratch_seed"] == 0
    assert len(row["state_cosine"]) == 4 and row["state_cosine_last"] == row["state_cosine"][-1]
    # a control of the student's own seed is preferred to a lower seed's; one trained longer is no control
    seed1 = {"train.seed": 1}
    results = {"longer": train_or_load(scratch.replace(**{"train.epochs": 2}), name="students/scratch-longer"),
               **results, "student k=1 seed 1": train_or_load(cfg.replace(**seed1), name="students/k1-seed1"),
               "scratch k=1 seed 1": train_or_load(scratch.replace(**seed1), name="students/scratch-k1-seed1")}
    assert results["longer"].metrics["test_accuracy"] != results["scratch k=1"].metrics["test_accuracy"]
    table = summary(results, max_samples=8)
    assert list(table["seed"]) == [0, 1] and list(table["scratch_seed"]) == [0, 1]
    assert table.iloc[0]["scratch_accuracy"] == results["scratch k=1"].metrics["test_accuracy"]
    assert table.iloc[1]["scratch_accuracy"] == results["scratch k=1 seed 1"].metrics["test_accuracy"]


def test_against_k_averages_each_k_over_its_students():
    """Per k the mean over its students (one per teacher seed), the sample spread of recovered and gain
    (NaN for one student), and the per-step state cosine averaged step by step."""
    row = lambda k, seed, steps, rec, gain, cos: {
        "k": k, "seed": seed, "branch_steps": steps, "accuracy": 0.5 * rec, "teacher_accuracy": 0.5,
        "recovered": rec, "scratch_accuracy": 0.5 * rec - gain, "gain": gain, "state_cosine_mean": sum(cos) / 2,
        "state_cosine": cos}
    table = pd.DataFrame([row(2, 0, "1,3", 0.8, 0.1, [1.0, 0.8]), row(2, 1, "2,2", 0.9, 0.2, [0.6, 0.4]),
                          row(1, 0, "4", 0.5, -0.05, [0.9, 0.7])])
    per_k = against_k(table)
    assert list(per_k["k"]) == [1, 2] and list(per_k["students"]) == [1, 2]
    two = per_k.iloc[1]
    assert two["recovered"] == pytest.approx(0.85) and two["recovered_sd"] == pytest.approx(0.0707107, rel=1e-5)
    assert two["gain"] == pytest.approx(0.15) and two["accuracy"] == pytest.approx(0.425)
    assert two["state_cosine"] == pytest.approx([0.8, 0.6]) and two["state_cosine_mean"] == pytest.approx(0.7)
    assert two["branch_steps"] == "1,3 / 2,2"  # each teacher's own ranges
    assert math.isnan(per_k.iloc[0]["recovered_sd"]) and math.isnan(per_k.iloc[0]["gain_sd"])
    assert list(against_k(table.assign(scratch_seed=[0, 0, 0]))["scratch_seeds"]) == ["0", "0"]
    with pytest.raises(ValueError, match="a student of k = 2 has no test accuracy recovered"):
        against_k(table.assign(recovered=[0.8, math.nan, 0.5]))  # never a mean over fewer seeds than counted


def test_ranges_table_scores_each_students_ranges_on_its_teacher(teacher_store, monkeypatch):
    """J of the ranges each student was given and of equal ranges, on its teacher's step similarity;
    ``teacher_view`` gives that similarity and the ranges by k. Only configs are read: no student is
    trained here. On a teacher of known similarity the values are known; on the stored teacher, J by
    hand of its similarity by hand."""
    import frost_nb.analysis.block_recurrent as block_recurrent

    with monkeypatch.context() as mp:
        mp.setattr(block_recurrent, "run_similarity", lambda checkpoint: KNOWN)
        runs = grid("block-recurrent", "smoke", "digits")
        results = {label: SimpleNamespace(config=cfg) for label, cfg in runs.items()}
        table = ranges_table(results)
        shown, ranges = teacher_view(results)
    assert list(table["label"]) == ["student k=1", "student k=2", "student k=4"]
    assert list(table["k"]) == [1, 2, 4] and set(table["teacher"]) == {TEACHER}
    assert list(table["branch_steps"]) == ["4", "3,1", "1,1,1,1"] and list(table["equal_steps"]) == ["4", "2,2", "1,1,1,1"]
    assert list(table["score"]) == pytest.approx([2.65, 3.8, 4.0], abs=1e-6)  # 0.9, 0.2 in float32
    assert list(table["equal_score"]) == pytest.approx([2.65, 3.1, 4.0], abs=1e-6)
    assert torch.equal(shown, KNOWN)
    assert ranges == {1: ((0, 4),), 2: ((0, 3), (3, 4)), 4: ((0, 1), (1, 2), (2, 3), (3, 4))}
    # the stored teacher: its similarity and each row's J, by hand
    runs = grid("block-recurrent", "smoke", "digits")
    results = {label: SimpleNamespace(config=cfg) for label, cfg in runs.items()}
    similarity = _similarity_by_hand(load_teacher(runs["student k=2"]), runs["vanilla"])
    shown, _ = teacher_view(results)
    assert torch.allclose(shown.double(), similarity.double(), atol=1e-5)
    for r in ranges_table(results).to_dict(orient="records"):
        for key, steps in (("score", r["branch_steps"]), ("equal_score", r["equal_steps"])):
            assert r[key] == pytest.approx(_j_by_hand(similarity, [int(n) for n in steps.split(",")]), abs=1e-4)
    with pytest.raises(ValueError, match="no student of seed 1"):
        teacher_view(results, seed=1)
    with pytest.raises(ValueError, match="no student"):
        ranges_table({"vanilla": results["vanilla"]})


def test_the_grids_runs_stop_before_training_unless_asked(tmp_path, monkeypatch, stored_teacher):
    """Outside smoke mode a notebook that would train stops at once, saying so: first for want of the
    teachers (the grid's ranges are read off them), then, the teacher stored, of the students and
    controls (at smoke size, T = 4, scratch k=4 is the teacher itself: 6 distinct runs, 5 missing)."""
    from frost_nb.repro.grids import RunsNotTrained, block_recurrent_runs

    monkeypatch.delenv("FROST_SMOKE", raising=False)
    with pytest.raises(RunsNotTrained, match=r"^1 of the 1 runs .*\(vanilla\)"):
        block_recurrent_runs("smoke", "digits", (0,))
    shutil.copytree(stored_teacher / TEACHER, tmp_path / "cache" / TEACHER)
    with pytest.raises(RunsNotTrained, match=r"^5 of the 6 runs .*\(recurrent, student k=1, student k=2, student k=4, \.\.\.\)"):
        block_recurrent_runs("smoke", "digits", (0,))
    with pytest.raises(RunsNotTrained, match=r"^7 of the 8 runs"):  # with claim 19's two controls
        block_recurrent_runs("smoke", "digits", (0,), controls=True)


def test_the_warm_start_control_starts_as_a_student_on_the_task_loss_alone(teacher_store, tmp_path):
    """Claim 19's warm-start control: the student's model, started from the teacher by the students' own
    path (build_trainer's init_from_teacher), on the task loss alone; its match to the teacher logged."""
    cfg = _student(**CLAIM_CONTROLS["warm k=2"])
    teacher = load_teacher(cfg)
    warm = build_trainer(cfg, tmp_path / "warm.pt", teacher=teacher)
    student = build_trainer(_student(), teacher=teacher)
    expected = create_model(cfg.model)
    picked = init_from_teacher(expected, teacher)
    for (name, a), b, c in zip(warm.model.state_dict().items(), student.model.state_dict().values(),
                               expected.state_dict().values()):
        assert torch.equal(a, b) and torch.equal(a, c), name  # the student's start, the teacher's weights
    for name, value in warm.model.state_dict().items():
        if name.startswith("branches."):
            i, rest = name.split(".", 2)[1:]
            name = f"branches.{picked[int(i)]}.{rest}"
        assert torch.equal(value, teacher.state_dict()[name]), name
    x, y = torch.randn(8, 1, 8, 8), torch.arange(8)
    _, loss, parts = forward_loss(warm.model, x, y, cfg, amp=False, channels_last=False, teacher=teacher)
    assert loss.item() == parts["task"].item() and parts["teacher_state"] > 0 and parts["teacher_kl"] >= 0
    steps = warm.fit().history["steps"]
    assert steps["loss"] == pytest.approx(steps["task"], rel=1e-6) and min(steps["teacher_state"]) > 0


def test_the_raptor_student_keeps_the_teachers_readout_follows_its_schedule_and_resumes(
        teacher_store, tmp_path, interrupted_after):
    from frost_nb.training import teacher_forced_share

    cfg = _student(**CLAIM_CONTROLS["raptor k=2"])
    teacher = load_teacher(cfg)
    whole = build_trainer(cfg, tmp_path / "whole.pt", teacher=teacher)
    readout = [n for n, _ in whole.model.named_parameters() if n.startswith(("head.", "head_norm."))]
    assert readout and all(not p.requires_grad for n, p in whole.model.named_parameters() if n in readout)
    done = whole.fit()
    trained = done.model.state_dict()
    for name in readout:  # after every step still the teacher's, bit for bit
        assert torch.equal(trained[name], teacher.state_dict()[name]), name
    assert not torch.equal(trained["branches.1.conv1.weight"], teacher.branches[2].conv1.weight)
    steps = done.history["steps"]
    total = whole.total_steps
    assert total == len(steps["step"]) > 4 and teacher_forced_share(0, total) == 1.0
    # from a quarter of the steps on tf = 0: the loss is the free run's state error alone (no task, no KL)
    free = [i for i in range(total) if teacher_forced_share(i, total) == 0.0]
    assert free and [steps["loss"][i] for i in free] == pytest.approx(
        [steps["teacher_state"][i] for i in free], rel=1e-5)
    assert steps["loss"][0] != pytest.approx(steps["teacher_state"][0], rel=1e-3)  # teacher-forced at step 0
    # resumed after an epoch, and within one: the uninterrupted run, to the bit
    cut = build_trainer(cfg, tmp_path / "cut.pt", teacher=teacher)
    cut.fit(until_epoch=1)
    with interrupted_after(1):
        build_trainer(cfg, tmp_path / "mid.pt", teacher=teacher).fit()
    for path in ("cut.pt", "mid.pt"):
        again = build_trainer(cfg, tmp_path / path, teacher=teacher).fit()
        for (name, a), b in zip(done.model.state_dict().items(), again.model.state_dict().values()):
            assert torch.equal(a, b), (path, name)


def test_the_claim_controls_are_read_beside_never_among_the_students(teacher_store):
    """``summary`` reads the students alone unless asked for other kinds; the committed grid holds every
    student, from-scratch control and claim control, finished, each of its own kind."""
    from frost_nb.paths import committed_runs_dir
    from frost_nb.runs import stored_runs, train_or_load

    student, warm = _student("4", **{"train.epochs": 1}), _student("4", **{"train.epochs": 1,
                                                                          **CLAIM_CONTROLS["warm k=2"]})
    results = {"student k=1": train_or_load(student, name="students/k1"),
               "warm k=1": train_or_load(warm, name="students/warm-k1")}
    assert list(summary(results, max_samples=8)["label"]) == ["student k=1"]
    both = summary(results, max_samples=8, kinds=("student", "warm"))
    assert list(both["label"]) == ["student k=1", "warm k=1"] and list(both["kind"]) == ["student", "warm"]
    with pytest.raises(ValueError, match="no run of kinds"):
        summary({"warm k=1": results["warm k=1"]}, max_samples=8)
    stored = {r.name.split("/")[1]: run_kind(r.config) for r in stored_runs(committed_runs_dir())
              if r.finished and r.name.startswith("cifar100-demo-block-recurrent/")}
    students = ("k-1-seed0", "k-2-seed0", "k-4-seed0", "k-2-seed1", "k-2-seed2")
    assert stored == {**{f"student-{s}": "student" for s in students}, "scratch-k-2-seed0": None,
                      "scratch-k-4-seed0": None, "warm-k-2-seed0": "warm", "raptor-k-2-seed0": "raptor"}


def test_a_students_teacher_is_loaded_once(teacher_store, monkeypatch):
    """Defect: train_or_load loaded the teacher to check it, and build_trainer loaded it again. Now once."""
    from frost_nb import runs
    from frost_nb.runs import train_or_load

    calls = []
    real = runs.load_teacher

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(runs, "load_teacher", counted)
    train_or_load(_student(**{"train.epochs": 1}), name="students/once")
    assert len(calls) == 1
