"""Live exploration of the halting threshold in JupyterLab (notebook 05): ``HaltingExplorer``, a model
selector and a quantile (or mean-depth budget) slider over ``ExitCache`` objects computed once; figures go
to ``Image`` widgets as PNG bytes (``Output`` widgets showed text under ``MPLBACKEND=Agg``)."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
from torch import Tensor

from ..analysis.exits import ExitCache, Exits
from .glue import figure_png
from .plotting import plot_depth_per_class, plot_exit_examples, plot_exit_histogram


def describe(e: Exits) -> str:
    """The one-line summary the explorer shows (and the browser test reads)."""
    return (f"q = {e.quantile:.3f} · threshold {e.threshold:.4f} · accuracy {100 * e.accuracy:.2f}% · "
            f"mean depth {e.mean_depth:.2f} of {e.steps} (std {e.std_depth:.2f})")


class HaltingExplorer:
    """Quantile slider and model selector over cached exits, with three live views."""

    def __init__(self, caches: dict[str, ExitCache], *, images: Tensor | None = None,
                 classes: Sequence[str] | None = None, quantile: float = 0.5, examples: int = 8,
                 step: float = 0.025, budgets: dict[str, ExitCache] | None = None) -> None:
        import ipywidgets as W

        if not caches:
            raise ValueError("HaltingExplorer needs at least one ExitCache (label -> cache)")
        if budgets and set(budgets) != set(caches):
            raise ValueError(f"budgets needs a held-out ExitCache for every model {sorted(caches)}, "
                             f"got {sorted(budgets)}")
        self.caches, self.images, self.examples = caches, images, examples
        self.budgets, self._syncing = dict(budgets or {}), False
        self.classes = list(classes) if classes is not None else None
        first = next(iter(caches.values()))
        first.at(quantile)  # a bad quantile fails here, with the calibrator's message
        slider = lambda **kw: W.FloatSlider(continuous_update=False, layout=W.Layout(width="420px"), **kw)
        self.slider = slider(value=quantile, min=0.0, max=1.0, step=step, description="quantile q",
                             readout_format=".3f")
        self.selector = W.Dropdown(options=list(caches), value=next(iter(caches)), description="model")
        self.stats = W.HTML()
        # each figure a PNG in an Image widget: shown the same under every matplotlib backend
        self.histogram, self.per_class, self.gallery = (
            W.Image(format="png", layout=W.Layout(max_width="100%", height="auto")) for _ in range(3))
        self.slider.observe(self._on_change, names="value")
        self.selector.observe(self._on_change, names="value")
        # the compute-budget knob: a mean depth in steps, met on the held-out split
        start = self._held_out_depth() if self.budgets else float(first.steps)
        self.budget = slider(value=start, min=1.0, max=float(first.steps), step=0.25,
                             description="mean depth", readout_format=".2f")
        self.budget_note = W.HTML()
        self.budget.observe(self._on_budget, names="value")
        views = [W.HBox([self.histogram, self.per_class], layout=W.Layout(flex_flow="row wrap"))]
        views += [self.gallery] * (images is not None)
        controls = [self.selector, self.slider] + ([self.budget] if self.budgets else [])
        notes = [self.budget_note] if self.budgets else []
        self.widget = W.VBox([W.HBox(controls, layout=W.Layout(flex_flow="row wrap")), self.stats, *notes, *views])
        # stable CSS classes for the browser test (tests/test_browser.py) and for styling
        for w, name in ((self.widget, "explorer"), (self.slider, "quantile"), (self.selector, "model"),
                        (self.stats, "stats"), (self.histogram, "histogram"), (self.per_class, "per-class"),
                        (self.gallery, "gallery"), (self.budget, "budget"), (self.budget_note, "budget-note")):
            w.add_class(f"frost-{name}")
        self.redraws = 0
        self.refresh()

    @property
    def cache(self) -> ExitCache:
        return self.caches[self.selector.value]

    @property
    def current(self) -> Exits:
        return self.cache.at(self.slider.value)

    def _held_out_depth(self) -> float:
        """The current model's held-out mean depth at the current quantile (``budgets`` given)."""
        return self.budgets[self.selector.value].at(self.slider.value).mean_depth

    def _on_change(self, _change) -> None:
        if self.budgets and not self._syncing:  # a quantile or model chosen: show its held-out depth
            self._syncing = True
            self.budget.value = self._held_out_depth()
            self._syncing = False
        self.refresh()

    def _on_budget(self, change) -> None:
        """A mean depth asked for: move the quantile to the one that meets it on the held-out split."""
        if self._syncing or not self.budgets:
            return
        self._syncing = True
        try:
            found = self.budgets[self.selector.value].quantile_for_depth(change["new"])
            unchanged = found.quantile == self.slider.value
            self.slider.value = found.quantile  # redraws through _on_change (unless unchanged)
        finally:
            self._syncing = False
        if unchanged:
            self.refresh()

    @staticmethod
    def _show(image, fig) -> None:
        image.value = figure_png(fig, dpi=90, compact=False)
        plt.close(fig)  # never left to pyplot: the inline backend would show it under the next cell

    def refresh(self) -> None:
        """Redraw every view for the current model and quantile (no model call); the summary
        line last, so the numbers never run ahead of their figures."""
        e = self.current
        self._show(self.histogram, plot_exit_histogram(e.histogram(), f"exit steps at q = {e.quantile:.3f}"))
        table = self.cache.per_class(e.quantile, self.classes)
        self._show(self.per_class, plot_depth_per_class(table, e.steps))
        if self.images is not None:
            order = e.order()
            names = [self.classes[int(c)] if self.classes else str(int(c)) for c in self.cache.y]
            self._show(self.gallery, plot_exit_examples(self.images, order[:self.examples],
                                                        order.flip(0)[:self.examples], e.depth, names))
        if self.budgets:
            self.budget_note.value = (f"held-out mean depth at this q: {self._held_out_depth():.2f} of {e.steps} "
                                      f"(the mean-depth slider is met there; the views are the test split)")
        self.stats.value = f"<b>{self.selector.value}</b>: {describe(e)}"
        self.redraws += 1

    def show_static(self) -> None:
        """The explorer's summary line and views as they stand, as plain outputs (text and PNG):
        what a notebook viewer without widget state, or a headless run, shows of it."""
        from IPython.display import Image, display

        print(f"{self.selector.value}: {describe(self.current)}")
        if self.budgets:
            print(f"held-out mean depth at this q: {self._held_out_depth():.2f}")
        for view in (self.histogram, self.per_class) + ((self.gallery,) if self.images is not None else ()):
            display(Image(data=view.value, format="png"))

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)
