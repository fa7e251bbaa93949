"""Figures: what they draw where (plotting never computes results; these check the drawing)."""

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from frost_nb.notebook.plotting import (  # noqa: E402
    plot_against_k,
    plot_block_ranges,
    plot_depth_accuracy,
    plot_exit_examples,
    plot_stream_throughput,
    plot_training,
)


def _history(logged_steps):
    n = len(logged_steps)
    return {"steps": {"step": logged_steps, "loss": np.linspace(2, 1, n), "task": np.linspace(2, 1, n),
                      "accuracy": np.linspace(0.1, 0.9, n)},
            "epochs": {"epoch": [1, 2, 3, 4], "val_accuracy": [0.5, 0.6, 0.7, 0.8]}}


def test_held_out_points_sit_at_the_end_of_their_epoch_in_full_and_lean_histories():
    """400 optimiser steps in 4 epochs: the held-out points at steps 100, 200, 300, 400, whether
    every step was logged or a lean export kept 21 of them (first and last included)."""
    full = list(range(1, 401))
    lean = [int(s) for s in np.linspace(1, 400, 21).round()]
    for logged in (full, lean):
        held_out = plot_training(_history(logged)).axes[1].lines[1]
        assert np.allclose(held_out.get_xdata(), [100, 200, 300, 400])


def test_stream_throughput_figure_draws_the_four_lines_of_each_panel():
    """One panel per (threads, B); in each: full depth, batch-at-a-time, one stream line per refill_at
    and embed_batch, and the ideal, at the quantiles of the rows (the values drawn are the table's)."""
    rows = []
    for threads in (1, 2):
        for b in (64, 256):
            for q in (0.25, 0.5, 0.75):
                base = {"threads": threads, "batch_size": b, "quantile": q, "full_images_per_s": 1000.0 * threads,
                        "ideal_images_per_s": 3000.0 * (1 - q)}
                rows.append({**base, "mode": "eager", "compact_below": 1.0, "refill_at": np.nan,
                             "embed_batch": np.nan, "images_per_s": 1500.0})
                rows += [{**base, "mode": "stream", "compact_below": 1.0, "refill_at": f, "embed_batch": b,
                          "images_per_s": 2000.0 + f} for f in (1, 16)]
    fig = plot_stream_throughput(pd.DataFrame(rows))
    assert len(fig.axes) == 4 and fig.axes[3].get_title() == "B = 256, 2 threads"
    lines = {line.get_label(): line for line in fig.axes[1].lines}  # threads 1, B = 256
    assert set(lines) == {"full depth", "batch-at-a-time", "stream (refill at 1, embed 256 ahead)",
                          "stream (refill at 16, embed 256 ahead)", "ideal (FLOPs)"}
    assert list(lines["stream (refill at 16, embed 256 ahead)"].get_ydata()) == [2016.0] * 3
    assert list(lines["ideal (FLOPs)"].get_xdata()) == [0.25, 0.5, 0.75]
    assert np.allclose(lines["ideal (FLOPs)"].get_ydata(), [2250.0, 1500.0, 750.0])
    assert list(fig.axes[2].lines[0].get_ydata()) == [2000.0] * 3  # threads 2: full depth
    # several embed_batch (how many images are embedded ahead of admission): a line per pair
    rows = [{**r, "embed_batch": e, "images_per_s": r["images_per_s"] + e} if r["mode"] == "stream"
            else r for r in rows for e in ((1, 64) if r["mode"] == "stream" else (0,))]
    lines = {line.get_label(): line for line in plot_stream_throughput(pd.DataFrame(rows)).axes[0].lines}
    assert {"stream (refill at 1, embed 1 ahead)", "stream (refill at 16, embed 64 ahead)"} < set(lines)
    assert list(lines["stream (refill at 16, embed 64 ahead)"].get_ydata()) == [2080.0] * 3


def test_depth_accuracy_figure_draws_the_curve_tables_it_is_given():
    """Each run's FROST curve, its fixed-depth curve and its rival: the points of the
    ``curves.curve`` tables (one table shape; the fixed depth's mean_depth is t)."""
    sweep = pd.DataFrame({"quantile": [0.5, 1.0], "mean_depth": [2.0, 4.0], "accuracy": [0.5, 0.8]})
    fixed = pd.DataFrame({"mean_depth": [1.0, 2.0, 3.0, 4.0], "accuracy": [0.1, 0.3, 0.5, 0.8]})
    rival = pd.DataFrame({"mean_depth": [4.0, 1.0, 3.0], "accuracy": [0.8, 0.2, 0.6]})
    ax = plot_depth_accuracy({"a": sweep}, {"a": fixed}, rivals={"a": rival}).axes[0]
    (xs, ys), (xf, yf), (xr, yr) = ((line.get_xdata(), line.get_ydata()) for line in ax.lines)
    assert list(xs) == [2.0, 4.0] and list(xf) == [1.0, 2.0, 3.0, 4.0] and list(yf) == [0.1, 0.3, 0.5, 0.8]
    assert list(xr) == [1.0, 3.0, 4.0] and list(yr) == [0.2, 0.6, 0.8]  # in order of depth


def test_stored_figures_are_256_colours_and_byte_stable():
    import io

    import matplotlib.pyplot as plt
    from PIL import Image

    from frost_nb.notebook.glue import figure_png

    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot(np.sin(np.linspace(0, 6, 200)), label="sin")
    ax.legend()
    stored, live = figure_png(fig), figure_png(fig, compact=False)
    plt.close(fig)
    pixels = [np.asarray(Image.open(io.BytesIO(b)).convert("RGB")).astype(int) for b in (stored, live)]
    # 256 colours: the antialiased edges move by a few levels at most, in well under 5% of the pixels
    assert pixels[0].shape == pixels[1].shape and np.abs(pixels[0] - pixels[1]).max() <= 8
    assert (pixels[0] != pixels[1]).any(-1).mean() < 0.05
    assert len(stored) < 0.6 * len(live), (len(stored), len(live))
    assert figure_png(plt.figure()) == figure_png(plt.figure())  # byte-stable


def test_block_ranges_figure_boxes_the_chosen_and_the_equal_ranges():
    """One panel per k: the similarity over steps 1..T, a solid box per range chosen, a dashed one per
    equal range, each box over its range's steps."""
    from matplotlib.patches import Rectangle

    similarity = np.eye(4)
    fig = plot_block_ranges(similarity, {1: ((0, 4),), 2: ((0, 1), (1, 4))}, {1: ((0, 4),), 2: ((0, 2), (2, 4))})
    one, two = fig.axes[:2]  # the third is the colour bar
    boxes = [p for p in two.patches if isinstance(p, Rectangle)]
    solid = [(p.get_x(), p.get_width()) for p in boxes if p.get_linestyle() == "-"]
    dashed = [(p.get_x(), p.get_width()) for p in boxes if p.get_linestyle() == "--"]
    assert solid == [(0.5, 1), (1.5, 3)] and dashed == [(0.5, 2), (2.5, 2)]
    assert len(one.patches) == 2 and two.get_title() == "k = 2: steps 1-1, 2-4"


def test_against_k_figure_draws_each_student_the_means_and_the_margin():
    """The line joins the first seed's students (one teacher across k); a k with students of several
    seeds gets its mean as a separate marker, never on that line."""
    table = pd.DataFrame({"k": [1, 2, 2], "seed": [0, 0, 1], "recovered": [0.5, 0.8, 0.9],
                          "accuracy": [0.25, 0.4, 0.45], "teacher": ["seed0", "seed0", "seed1"],
                          "teacher_accuracy": [0.4, 0.4, 0.6]})
    per_k = pd.DataFrame({"k": [1, 2], "students": [1, 2], "recovered": [0.5, 0.85], "accuracy": [0.25, 0.425],
                          "scratch_accuracy": [0.3, 0.35], "state_cosine": [[0.9, 0.7], [0.8, 0.6]]})
    a, b, c = plot_against_k(table, per_k, 0.94).axes
    assert list(a.collections[0].get_offsets()[:, 1]) == [0.5, 0.8, 0.9]  # every student
    assert a.collections[1].get_offsets().tolist() == [[2, 0.85]]  # k = 2's mean over its two seeds
    seed0, margin, teacher = a.lines
    assert list(seed0.get_ydata()) == [0.5, 0.8] and list(margin.get_ydata()) == [0.94, 0.94]
    assert list(b.lines[0].get_ydata()) == [0.25, 0.4] and b.collections[1].get_offsets().tolist() == [[2, 0.425]]
    assert list(b.lines[1].get_ydata()) == [0.3, 0.35] and list(b.lines[2].get_ydata()) == [0.5, 0.5]  # each teacher once
    assert [list(line.get_ydata()) for line in c.lines] == [[0.9, 0.7], [0.8, 0.6]]


def test_alpha_summary_of_a_run_with_one_logged_step_puts_its_minimum_at_the_start():
    from types import SimpleNamespace

    from frost_nb.notebook.tables import alpha_summary

    run = SimpleNamespace(history={"steps": {"alpha": [0.8]}}, checkpoint=None,
                          config=SimpleNamespace(train=SimpleNamespace(seed=0)))
    row = alpha_summary({"frost": run}).loc["frost"]
    assert row["min at (fraction of training)"] == 0.0 and row["start"] == row["end"] == row["min"] == 0.8


def test_exit_examples_show_one_channel_images_on_the_pixel_scale_not_stretched_each():
    dark = np.full((2, 1, 4, 4), 40, dtype=np.uint8)  # a dark image must stay dark
    dark[:, :, 0, 0] = 80
    fig = plot_exit_examples(dark, [0], [1], np.array([1, 2]), ["a", "b"])
    assert all(im.get_clim() == (0, 1) for ax in fig.axes for im in ax.images)
