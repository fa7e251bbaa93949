"""Halting of FROST (Yu and Hwang, ICML 2026, arXiv 2601.19551): the score, the KLL threshold
tau_q and adaptive inference as ``docs/method.md`` sections 6-8 define them (eq. (tau):
tau_q = sketch.get_quantile(q) for q < 1, tau_1 = +inf; eq. (exit): a sample exits at the
first step t with p_t > tau_q, else at T).

``adaptive_predict`` really skips the work of exited samples; ``analysis.curves.curve`` reads the
same exits off cached full-depth outputs without calling the model (the two agree; see the tests).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
from datasketches import kll_floats_sketch
from torch import Tensor

from .distributed import in_process_group
from .inputs import check_images, check_scores, number_in, real_number

PAPER_QUANTILES = (0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1.0)  # the grid of Table 2


class HaltingCalibrator:
    """KLL quantile sketch of halting scores, and the thresholds read from it.

    >>> cal = HaltingCalibrator(k=200)
    >>> cal.update(torch.rand(64, 16))      # all steps, all samples; flattened
    >>> tau = cal.threshold(0.5)            # exit when p_t > tau
    >>> cal.threshold(1.0)                  # full depth for everyone
    inf

    Not deterministic (docs/method.md section 7): the KLL sketch compacts with coin flips that
    cannot be seeded, so two runs fed the same scores, or a run resumed from a checkpoint (the
    restored sketch is exact, later scores get new flips), end with thresholds that differ by
    at most about twice ``rank_error`` (about 1.3% of the scores at k = 200) in rank.

    A KLL sketch cannot be pickled: checkpoints store ``to_bytes()`` (``from_bytes`` restores
    it), and pickling this wrapper goes through those bytes.
    """

    def __init__(self, k: int = 200) -> None:
        k = number_in("sketch size k", k, 8, 65535, integer=True, hint=" (default 200)")
        self._sketch = kll_floats_sketch(k)

    # --- feeding -----------------------------------------------------------------------
    def update(self, scores: Any) -> HaltingCalibrator:
        """Add scores of any shape (torch tensor on any device, numpy array, sequence), each a
        probability in [0, 1]; with a NaN, an infinite or an out-of-range value nothing is added
        (one would poison the sketch's quantiles: after one +inf, ``threshold(0.99)`` is inf)."""
        if isinstance(scores, Tensor):  # numpy has no bf16: to float32 on the tensor's side first
            arr = scores.detach().reshape(-1).to(dtype=torch.float32).cpu().numpy()
        else:
            arr = np.ascontiguousarray(np.asarray(scores, dtype=np.float32).reshape(-1))
        check_scores(arr, "the calibrator added nothing: the scores hold")
        if arr.size:
            self._sketch.update(arr)  # vectorised update of datasketches >= 5
        return self

    def merge(self, other: HaltingCalibrator) -> HaltingCalibrator:
        """Fold ``other``'s scores into this sketch (e.g. the per-rank sketches of DDP)."""
        if not isinstance(other, HaltingCalibrator):
            raise TypeError(f"can only merge another HaltingCalibrator, got {type(other).__name__}")
        self._sketch.merge(other._sketch)
        return self

    @classmethod
    def pooled(cls, blobs: Sequence[bytes]) -> HaltingCalibrator:
        """One calibrator holding every score of the serialised sketches ``blobs`` (each once)."""
        if not blobs:
            raise ValueError("pooled needs at least one serialised sketch (from to_bytes())")
        out = cls.from_bytes(blobs[0])
        for blob in blobs[1:]:
            out.merge(cls.from_bytes(blob))
        return out

    def merge_across_ranks(self, shared: HaltingCalibrator | None = None) -> HaltingCalibrator:
        """Pool the sketches of all processes of a DDP job: afterwards every rank holds the
        same sketch, with each rank's scores counted once (``n`` is the sum over ranks).
        ``shared``: a sketch every rank holds alike (of the same scores), folded in once.

        A collective: every rank must call it. Rank 0 merges and sends the result to all, as
        KLL merging flips unseeded coins. Without a process group it merges ``shared`` only.
        """
        if shared is not None and (not in_process_group() or torch.distributed.get_rank() == 0):
            self.merge(shared)
        if not in_process_group():
            return self
        dist = torch.distributed
        gathered = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
        dist.gather_object(self.to_bytes(), gathered, dst=0)
        pooled = [HaltingCalibrator.pooled(gathered).to_bytes() if gathered else None]
        dist.broadcast_object_list(pooled, src=0)
        self._sketch = kll_floats_sketch.deserialize(pooled[0])
        return self

    def reset(self) -> HaltingCalibrator:
        """Forget every score (same k)."""
        self._sketch = kll_floats_sketch(self.k)
        return self

    # --- reading -----------------------------------------------------------------------
    @property
    def k(self) -> int:
        return int(self._sketch.k)

    @property
    def n(self) -> int:
        """Number of scores fed so far."""
        return int(self._sketch.n)

    @property
    def is_empty(self) -> bool:
        return bool(self._sketch.is_empty())

    @property
    def rank_error(self) -> float:
        """A-priori normalised rank error of one quantile (about 0.013 at k=200)."""
        return float(self._sketch.normalized_rank_error(False))

    def threshold(self, q: float) -> float:
        """tau_q: exit at the first step with p_t > tau_q. q in [0, 1]; q == 1 gives +inf."""
        q = number_in("quantile q", q, 0, 1, hint=": give the target fraction of halting scores "
                      "below the threshold, e.g. 0.5 (q=1 means full depth for everyone)")
        if q == 1.0:
            return math.inf  # eq. (tau): above every score, including unseen test scores
        if self.is_empty:
            raise ValueError("no halting scores were fed to the calibrator, so it has no "
                             "threshold: train the model (the trainer feeds the sketch) or call "
                             "calibrator.update(sigmoid(halt_logits)) over a held-out pass first")
        return float(self._sketch.get_quantile(q))  # eq. (tau)

    def thresholds(self, qs: Sequence[float]) -> list[float]:
        return [self.threshold(q) for q in qs]

    @property
    def median(self) -> float:
        return self.threshold(0.5)

    # --- serialisation -----------------------------------------------------------------
    def to_bytes(self) -> bytes:
        return bytes(self._sketch.serialize())

    @classmethod
    def from_bytes(cls, blob: bytes) -> HaltingCalibrator:
        obj = cls.__new__(cls)
        obj._sketch = kll_floats_sketch.deserialize(bytes(blob))  # keeps k
        return obj

    def __getstate__(self) -> dict:
        return {"sketch": self.to_bytes()}

    def __setstate__(self, state: dict) -> None:
        self._sketch = kll_floats_sketch.deserialize(state["sketch"])

    def __repr__(self) -> str:
        if self.is_empty:
            return f"HaltingCalibrator(k={self.k}, n=0)"
        return f"HaltingCalibrator(k={self.k}, n={self.n}, median={self.median:.4g})"


def _checked_tau(tau: Any) -> float:
    """tau as a float; NaN is refused: ``p > NaN`` is False, so everyone would run to T."""
    return real_number("threshold tau", tau, allow_inf=True,
                       hint=" (HaltingCalibrator.threshold(q); +inf runs every sample to full depth)")


def exit_steps(scores: Tensor, tau: float) -> Tensor:
    """Exit depth in 1..T of each sample: first t with p_t > tau, else T. (N, T) -> (N,) int64.

    tau: any real number but NaN (+inf: full depth for everyone, as ``threshold(1.0)``)."""
    tau = _checked_tau(tau)
    scores = torch.as_tensor(scores)
    if scores.dim() != 2:
        raise ValueError(f"scores must be (N, T), got shape {tuple(scores.shape)}")
    if scores.is_floating_point() and scores.element_size() < 4:
        scores = scores.float()  # compare in float32: bf16 > tau would round tau to bf16
    n, t = scores.shape
    exceed = scores > tau  # (N, T) bool, eq. (exit)
    first = exceed.to(torch.uint8).argmax(dim=1)  # (N,) index of the first True (0 if none)
    full = torch.full((n,), t, dtype=torch.int64, device=scores.device)
    return torch.where(exceed.any(dim=1), first.to(torch.int64) + 1, full)


class AdaptiveResult(NamedTuple):
    logits: Tensor  # (N, K) class logits at each sample's exit step
    depth: Tensor  # (N,) int64 exit depth in 1..T
    halt_scores: Tensor | None  # (N,) float32 p at the exit step (return_scores=True), else None


def _per_sample_fields(obj: Any, n: int) -> dict[str, Tensor | None] | None:
    """The fields of a dataclass instance when every one is None or a tensor of ``n`` rows
    (a bundle of per-sample tensors such as the models' StepContext), else None."""
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        return None
    fields = {}
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if not f.init or not (v is None or (isinstance(v, Tensor) and v.dim() > 0
                                            and v.shape[0] == n)):
            return None  # a shared or non-tensor field: leave the subset to obj.select
        fields[f.name] = v
    return fields


def _select(obj: Any, idx: Tensor, n: int | None = None) -> Any:
    """The rows ``idx`` of a state or context of ``n`` samples: tensors, dataclasses of
    per-sample tensors, objects with ``select``, tuples. Rows are taken with ``index_select``
    (on the CPU several times faster than ``v[idx]``: compaction runs at nearly every step)."""
    if obj is None:
        return None
    if isinstance(obj, Tensor):
        return obj.index_select(0, idx)
    fields = _per_sample_fields(obj, n) if n is not None else None
    if fields is not None:
        return type(obj)(**{k: _select(v, idx) for k, v in fields.items()})
    if hasattr(obj, "select") and callable(obj.select):
        return obj.select(idx)
    if isinstance(obj, (tuple, list)):
        return type(obj)(_select(o, idx, n) for o in obj)
    raise TypeError(f"do not know how to take a subset of the batch from {type(obj).__name__}")


def _span(obj: Any, lo: int, hi: int, n: int) -> Any:
    """Rows ``lo`` to ``hi`` of a state or context of ``n`` samples, as views where it can
    (tensors, dataclasses of per-sample tensors, tuples), else ``_select``'s copy."""
    if obj is None:
        return None
    if isinstance(obj, Tensor):
        return obj[lo:hi]
    fields = _per_sample_fields(obj, n)
    if fields is not None:
        return type(obj)(**{k: _span(v, lo, hi, n) for k, v in fields.items()})
    if isinstance(obj, (tuple, list)):
        return type(obj)(_span(o, lo, hi, n) for o in obj)
    return _select(obj, torch.arange(lo, hi), n)


def prologue(model: torch.nn.Module, x: Tensor) -> tuple[Any, Any]:
    """(h_0, ctx): embed, context and init_state, what every forward runs once before step 1:
    ``FrostNet.prologue``, or for another model with the step-wise API the same calls (``ctx``
    is the stem output itself for a model without ``context``)."""
    if callable(getattr(model, "prologue", None)):
        return model.prologue(x)
    e = model.embed(x)
    context = getattr(model, "context", None)
    ctx = context(e) if callable(context) else e
    return model.init_state(ctx), ctx


def _halting(tau: Any, rule: Any, caller: str) -> Any:
    """What the loops test exits with: FROST's threshold tau (a float, NaN refused) or an
    ``OnlineRule`` (anything with ``start`` and ``fires``), checked once."""
    if rule is not None and tau is not None:
        raise TypeError(f"{caller}: give either tau (FROST's threshold) or rule "
                        "(a halting_rules.OnlineRule), not both")
    if rule is not None and not callable(getattr(rule, "fires", None)):
        raise TypeError(f"rule={rule!r} is not a rule: pass halting_rules.OnlineRule(name, threshold), "
                        "e.g. OnlineRule('confidence', 0.9)")
    return _checked_tau(tau) if rule is None else rule  # None without a rule: named as not a number


def _step_readout(model: torch.nn.Module, h: Any, ctx: Any, t: int) -> tuple[Any, Tensor, Tensor, Tensor]:
    """h_{t+1} and its readout: (h, class logits (n, K), halt logit (n,), score p (n,) float32)."""
    h = model.step(h, ctx, t)
    logits, halt_logit, _ = model.readout(h, ctx)
    return h, logits, halt_logit, torch.sigmoid(halt_logit.float())


def _exit_test(halting: Any, t: Tensor | int, h: Any, logits: Tensor, halt_logit: Tensor, p: Tensor,
               memory: Any) -> tuple[Tensor, Any]:
    """(exits (n,) bool, memory) of the rows just stepped to step t (1..T, per row or one int)."""
    if isinstance(halting, float):
        return p > halting, memory  # eq. (exit)
    return halting.fires(t, h, logits, halt_logit, memory)


class _Exits:
    """The outputs of the samples that have exited, kept by input row until the end (when the
    number of samples may only then be known) and put in input order once."""

    def __init__(self, return_scores: bool) -> None:
        self.return_scores = return_scores
        self.parts: list[tuple[Tensor, Tensor, Tensor, Tensor | None]] = []

    def add(self, rows: Tensor, logits: Tensor, depth: Tensor | int, p: Tensor) -> None:
        """rows (m,) input positions; logits (m, K); depth (m,) or one int; p (m,)."""
        if not isinstance(depth, Tensor):
            depth = torch.full(rows.shape, depth, dtype=torch.int64, device=rows.device)
        self.parts.append((rows, logits, depth, p if self.return_scores else None))

    def result(self, n: int, num_classes: int, device: Any) -> AdaptiveResult:
        if not self.parts:  # nothing ran: an empty input
            return AdaptiveResult(torch.empty((0, num_classes), device=device),
                                  torch.empty(0, dtype=torch.int64, device=device),
                                  torch.empty(0, device=device) if self.return_scores else None)
        rows, logits, depth, p = zip(*self.parts)
        rows = torch.cat(rows)  # (n,) every input row once

        def in_input_order(parts):
            v = torch.cat(parts)  # (n, ...) in the order of the exits
            return v.new_empty(v.shape).index_copy_(0, rows, v)

        return AdaptiveResult(in_input_order(logits), in_input_order(depth),
                              in_input_order(p) if self.return_scores else None)


def adaptive_predict(model: torch.nn.Module, x: Tensor, tau: float | None = None, *,
                     return_scores: bool = False, allow_other_size: bool = False,
                     compact_below: float = 1.0, rule: Any = None) -> AdaptiveResult:
    """Run the model step by step, dropping each sample from the batch once it exits
    (docs/method.md section 8). Runs without gradient and leaves the model's mode alone: call
    ``model.eval()`` first.

    Uses the model's step-wise API (``embed``, optional ``context``, ``init_state``, ``step``,
    ``readout``, ``config.steps``). ``x`` is checked once (``inputs.check_images``): float
    images normalised as in training, of the config's shape (``allow_other_size``: the ResNet
    family at another image size). ``tau`` may be any real number but NaN (+inf: full depth).

    Cost beyond the model's own steps: one host sync per step (the exit count) and a row copy
    of the state and context at each step where some sample exits. ``compact_below`` in [0, 1]:
    compact only once the samples still running are at most this share of the rows carried
    (1: at every exit; 0: never); exits do not depend on it (docs/scaling.md measures it).

    ``rule`` (a ``halting_rules.OnlineRule``, instead of ``tau``) exits by another halting rule
    (docs/method.md section 10); its per-row memory is compacted with the rows.

    A batch ends with its late steps on the few samples still running; ``stream_predict`` keeps
    the batch full instead (weight-tied families only).
    """
    steps = int(model.config.steps)
    halting = _halting(tau, rule, "adaptive_predict")
    compact_below = number_in("compact_below", compact_below, 0.0, 1.0)
    x = check_images(model, x, allow_other_size=allow_other_size)  # one pass, one host sync
    n = x.shape[0]
    exits = _Exits(return_scores)
    with torch.no_grad():
        h, ctx = prologue(model, x)  # h_0 and the per-sample step inputs
        memory = None if isinstance(halting, float) else halting.start(h)  # the rule's per-row memory
        idx = torch.arange(n, device=x.device)  # original row of each carried sample
        live = None  # (n_carried,) bool: still running; None: every carried row is
        n_live = n
        for t in range(steps if n else 0):
            h, logits, halt_logit, p = _step_readout(model, h, ctx, t)  # h_{t+1}, (n_carried, K), ...
            if t == steps - 1:  # at T every sample still running stops
                pos = None if live is None else live.nonzero().squeeze(1)
                pick = (lambda v: v) if pos is None else (lambda v: v.index_select(0, pos))
                exits.add(pick(idx), pick(logits), steps, pick(p))
                break
            done, memory = _exit_test(halting, t + 1, h, logits, halt_logit, p, memory)
            if live is not None:
                done &= live  # a sample that exited already never writes again
            exit_pos = done.nonzero().squeeze(1)  # one host sync per step: compaction needs it
            n_exit = exit_pos.numel()
            if n_exit == 0:
                continue
            exits.add(idx.index_select(0, exit_pos), logits.index_select(0, exit_pos), t + 1,
                      p.index_select(0, exit_pos))
            n_live -= n_exit
            if n_live == 0:
                break
            live = ~done if live is None else live & ~done
            n_carried = idx.numel()
            if n_live <= compact_below * n_carried:  # drop the exited rows now
                keep = live.nonzero().squeeze(1)  # (n_live,) ascending
                idx, live = idx.index_select(0, keep), None
                h, ctx = _select(h, keep, n_carried), _select(ctx, keep, n_carried)
                memory = _select(memory, keep, n_carried)
    return exits.result(n, getattr(model.config, "num_classes", 0), x.device)


# --- continuous batching ------------------------------------------------------------------------

def _join(a: Any, b: Any, na: int, nb: int) -> Any:
    """The rows of ``a`` (na samples) followed by those of ``b`` (nb): tensors, dataclasses of
    per-sample tensors (the models' StepContext), tuples. A tensor of ``b`` whose trailing
    shape broadcasts to ``a``'s (a rule's placeholder memory before step 1, e.g. the KL rule's
    (n, 1) zeros) is expanded to it."""
    if a is None and b is None:
        return None
    if isinstance(a, Tensor):
        if b.shape[1:] != a.shape[1:]:
            b = b.expand(nb, *a.shape[1:])
        return torch.cat([a, b])
    fa, fb = _per_sample_fields(a, na), _per_sample_fields(b, nb)
    if fa is not None and fb is not None and type(a) is type(b):
        return type(a)(**{k: _join(fa[k], fb[k], na, nb) for k in fa})
    if isinstance(a, (tuple, list)) and type(a) is type(b):
        return type(a)(_join(u, v, na, nb) for u, v in zip(a, b))
    raise TypeError(f"stream_predict cannot join the rows of two {type(a).__name__} contexts: make "
                    f"the context a dataclass of per-sample tensors (as the models' StepContext) "
                    f"or a tensor, or use adaptive_predict")


def _refuse_a_step_that_reads_t(model: torch.nn.Module) -> None:
    """Rows at different depths share one step call: only a weight-tied step allows that."""
    config = getattr(model, "config", None)
    if getattr(config, "name", None) == "vanilla" or not getattr(model, "weight_tied", True):
        raise ValueError("stream_predict needs a weight-tied step (recurrent, basic_ssm, frost): "
                         f"{getattr(config, 'name', type(model).__name__)}'s step depends on t, so "
                         "rows at different depths cannot share a step call; use adaptive_predict")


class StreamEvent(NamedTuple):
    """What ``stream_steps`` reports: images taken from the stream to be embedded and admitted
    (``kind`` "admit", before their stem runs), or the samples that exit at a step (``kind`` "exit")."""

    kind: str  # "admit" or "exit"
    rows: Tensor  # (m,) int64 input positions (counted over every batch of the stream)
    logits: Tensor | None = None  # (m, K) at the exit step
    depth: Tensor | None = None  # (m,) int64 exit depth in 1..T
    halt_scores: Tensor | None = None  # (m,) float32 p at the exit step


class _Feed:
    """The stream's images, handed out a few at a time across its batches; each batch is checked
    (``inputs.check_images``, the error naming the batch) when it is first reached, so before any
    of its images is stepped."""

    def __init__(self, model: torch.nn.Module, images: Any, allow_other_size: bool) -> None:
        self.model, self.allow_other_size = model, allow_other_size
        self.batches = iter([images] if isinstance(images, (Tensor, np.ndarray)) else images)
        self.pending: Tensor | None = None  # the rest of the batch being admitted
        self.count = 0  # batches taken so far
        self.shape: tuple[int, ...] | None = None  # (C, H, W) of the first batch
        self.offset = 0  # input position of the next image
        self.more = True

    def _next_batch(self) -> Tensor | None:
        for x in self.batches:
            i, self.count = self.count, self.count + 1
            x = check_images(self.model, x, allow_other_size=self.allow_other_size,
                             name=f"batch {i} of the stream")
            if self.shape is None:
                self.shape = tuple(x.shape[1:])
            elif tuple(x.shape[1:]) != self.shape:
                raise ValueError(f"batch {i} of the stream holds images of shape {tuple(x.shape[1:])}, "
                                 f"the first batch {self.shape}: every batch of a stream must hold "
                                 f"images of one shape")
            if x.shape[0]:
                return x
        self.more = False
        return None

    def take(self, k: int) -> tuple[Tensor, Tensor] | None:
        """Up to ``k`` images (a, C, H, W) and their input positions (a,), None once none is left."""
        parts, a = [], 0
        while a < k and self.more:
            if self.pending is None or self.pending.shape[0] == 0:
                self.pending = self._next_batch()
                if self.pending is None:
                    break
            part, self.pending = self.pending[:k - a], self.pending[k - a:]  # views
            parts.append(part)
            a += part.shape[0]
        if not parts:
            return None
        x = parts[0] if len(parts) == 1 else torch.cat(parts)  # (a, C, H, W)
        rows = torch.arange(self.offset, self.offset + a, device=x.device)
        self.offset += a
        return x, rows


class _Embedded:
    """The stream's next images already embedded (stem, context and h_0: ``prologue``), taken
    from ``feed`` ``ahead`` at a time, so admitting a few rows is a row copy, not a stem call on
    a few rows at the small-batch price (docs/scaling.md, "Continuous batching"). ``ahead = 1``
    embeds exactly the rows admitted."""

    def __init__(self, model: torch.nn.Module, feed: _Feed, ahead: int) -> None:
        self.model, self.feed, self.ahead = model, feed, ahead
        self.rows = self.h0 = self.ctx0 = None  # the buffer: input positions, h_0, context
        self.at = self.n = 0  # the next buffered row; the rows buffered
        self.pending: tuple[Tensor, Tensor] | None = None  # taken by fetch, not yet embedded

    @property
    def more(self) -> bool:
        return self.at < self.n or self.feed.more

    def fetch(self, k: int) -> Tensor | None:
        """Take the next images from the feed when fewer than ``k`` are buffered (``ahead`` of
        them, or ``k`` if more); their input positions, before they are embedded (``embed``)."""
        if self.n - self.at >= k or not self.feed.more:
            return None
        self.pending = self.feed.take(max(self.ahead, k) - (self.n - self.at))
        return None if self.pending is None else self.pending[1]

    def embed(self) -> None:
        """Embed what ``fetch`` took, after the rows still buffered."""
        x, rows = self.pending
        self.pending = None
        h0, ctx0 = prologue(self.model, x)
        left = self.n - self.at
        if left == 0:
            self.rows, self.h0, self.ctx0 = rows, h0, ctx0
        else:  # the rows still buffered, then the new ones
            self.rows = torch.cat([self.rows[self.at:], rows])
            self.h0 = _join(_span(self.h0, self.at, self.n, self.n), h0, left, rows.numel())
            self.ctx0 = _join(_span(self.ctx0, self.at, self.n, self.n), ctx0, left, rows.numel())
        self.at, self.n = 0, left + rows.numel()

    def take(self, k: int) -> tuple[Tensor, Any, Any] | None:
        """Up to ``k`` buffered rows: (input positions, h_0, context); None if none is buffered."""
        a = min(k, self.n - self.at)
        if a == 0:
            return None
        lo, hi = self.at, self.at + a
        self.at = hi  # views: the buffer is never written in place, only replaced by embed
        return self.rows[lo:hi], _span(self.h0, lo, hi, self.n), _span(self.ctx0, lo, hi, self.n)


def _put(obj: Any, pos: Tensor, new: Any, n: int) -> Any:
    """Write the rows of ``new`` into the rows ``pos`` of ``obj`` (``n`` rows), in place: tensors,
    dataclasses of per-sample tensors, tuples (as ``_join``, a broadcastable placeholder is
    expanded). Returns ``obj``."""
    if obj is None:
        return None
    if isinstance(obj, Tensor):
        if new.shape[1:] != obj.shape[1:]:
            new = new.expand(new.shape[0], *obj.shape[1:])
        return obj.index_copy_(0, pos, new.to(obj.dtype))
    fields, new_fields = _per_sample_fields(obj, n), _per_sample_fields(new, pos.numel())
    if fields is not None and new_fields is not None and type(obj) is type(new):
        for k, v in fields.items():
            _put(v, pos, new_fields[k], n)
        return obj
    if isinstance(obj, (tuple, list)) and type(obj) is type(new):
        for u, v in zip(obj, new):
            _put(u, pos, v, n)
        return obj
    raise TypeError(f"stream_predict cannot write rows into a {type(obj).__name__} context: make the "
                    f"context a dataclass of per-sample tensors (as the models' StepContext) or a "
                    f"tensor, or use adaptive_predict")


def stream_steps(model: torch.nn.Module, images: Any, tau: float | None = None, *, slots: int = 256,
                 rule: Any = None, refill_at: int = 1, embed_batch: int | None = None,
                 allow_other_size: bool = False) -> Iterator[StreamEvent]:
    """Continuous batching, step by step (``stream_predict`` collects it): keep up to ``slots``
    samples running; once at least ``refill_at`` slots are free (or none runs), admit the next
    images into them, then step every running sample together, whatever its depth: a weight-tied
    ``step`` does not depend on t. The next images are embedded (stem, context and h_0)
    ``embed_batch`` at a time (default ``slots``) ahead of their admission, so an admission is a
    row copy; ``embed_batch = 1`` embeds exactly the rows admitted. Yields an "admit" event when
    images are taken from the stream, before their stem runs, and an "exit" event after each step
    where samples exit.

    New images take the rows of the samples that just exited, written in place (a copy of the
    new rows only); rows left free are dropped (a row copy of the rest, as ``adaptive_predict``
    compacts) and appended to later. Exits are ``adaptive_predict``'s (eq. (exit), or ``rule``,
    with a step index per row); each sample is stepped as in a batch of its own, so its logits
    match within float noise (docs/method.md section 8)."""
    halting = _halting(tau, rule, "stream_predict")
    slots = number_in("slots", slots, 1, 2**31, integer=True, hint=": the number of samples stepped together")
    refill_at = number_in("refill_at", refill_at, 1, slots, integer=True,
                          hint=f": admit new images once this many of the {slots} slots are free")
    embed_batch = slots if embed_batch is None else number_in(
        "embed_batch", embed_batch, 1, 2**31, integer=True, hint=": the images embedded together ahead of admission")
    _refuse_a_step_that_reads_t(model)
    steps = int(model.config.steps)
    feed = _Embedded(model, _Feed(model, images, allow_other_size), embed_batch)
    h = ctx = memory = idx = t = None  # the running rows: state, context, rule memory, input row, depth
    n_live = 0

    def admit(k: int):  # up to k new samples: (input rows, h_0, context, rule memory, depth 0)
        entering = feed.fetch(k)
        if entering is not None:
            yield StreamEvent("admit", entering)  # (timed from here: before their stem runs)
            feed.embed()
        got = feed.take(k)
        if got is None:
            return None
        rows, h0, ctx0 = got
        mem0 = None if isinstance(halting, float) else halting.start(h0)
        return rows, h0, ctx0, mem0, torch.zeros(rows.numel(), dtype=torch.int64, device=rows.device)

    with torch.no_grad():
        while True:
            free = slots - n_live
            if feed.more and free > 0 and (free >= refill_at or n_live == 0):  # append to the free slots
                new = yield from admit(free)
                if new is not None:
                    rows, h0, ctx0, mem0, t0 = new
                    a = rows.numel()
                    if n_live == 0:  # idx is written in place later: not the event's rows
                        h, ctx, memory, idx, t = h0, ctx0, mem0, rows.clone(), t0
                    else:
                        h, ctx = _join(h, h0, n_live, a), _join(ctx, ctx0, n_live, a)
                        memory = _join(memory, mem0, n_live, a)
                        idx, t = torch.cat([idx, rows]), torch.cat([t, t0])
                    n_live += a
            if n_live == 0:
                return
            h, logits, halt_logit, p = _step_readout(model, h, ctx, 0)  # weight-tied: any t is step t
            t = t + 1  # (n_live,) each row's depth now
            done, memory = _exit_test(halting, t, h, logits, halt_logit, p, memory)
            done |= t >= steps  # at T every sample stops
            exit_pos = done.nonzero().squeeze(1)  # one host sync per step, as adaptive_predict
            m = exit_pos.numel()
            if m == 0:
                continue
            pick = lambda v: v.index_select(0, exit_pos)
            yield StreamEvent("exit", pick(idx), pick(logits), pick(t), pick(p))
            free = slots - n_live + m
            refill = feed.more and (free >= refill_at or n_live == m)
            new = (yield from admit(free)) if refill else None  # first into the rows just freed, in place
            if new is not None:
                a = new[0].numel()
                k = min(a, m)
                span = lambda lo, hi: torch.arange(lo, hi, device=exit_pos.device)
                part = lambda v, lo, hi: v if (lo, hi) == (0, a) else _select(v, span(lo, hi), a)
                pos = exit_pos[:k]
                for state, fresh in zip((idx, h, ctx, memory, t), new):
                    _put(state, pos, part(fresh, 0, k), n_live)
                if a > m:  # more slots were free than rows just freed: the rest is appended
                    rest = [part(v, m, a) for v in new]
                    idx, t = torch.cat([idx, rest[0]]), torch.cat([t, rest[4]])
                    h, ctx = _join(h, rest[1], n_live, a - m), _join(ctx, rest[2], n_live, a - m)
                    memory = _join(memory, rest[3], n_live, a - m)
                    n_live += a - m
                if a >= m:
                    continue  # every freed row taken again: no row copy of the running ones
                done.index_fill_(0, pos, False)
            keep = (~done).nonzero().squeeze(1)  # (n_live - m + a,) ascending
            h, ctx, memory = (_select(v, keep, n_live) for v in (h, ctx, memory))
            idx, t = idx.index_select(0, keep), t.index_select(0, keep)
            n_live = keep.numel()


def stream_predict(model: torch.nn.Module, images: Any, tau: float | None = None, *, slots: int = 256,
                   rule: Any = None, return_scores: bool = False, refill_at: int = 1,
                   embed_batch: int | None = None, allow_other_size: bool = False) -> AdaptiveResult:
    """``adaptive_predict`` with continuous batching (docs/method.md section 8): ``slots`` samples
    run together, and the slots that exited samples free are refilled with new images
    (``refill_at``: once that many are free), so no batch ends with late steps on a few rows;
    the next images are embedded ``embed_batch`` at a time (default ``slots``) ahead of admission.

    ``images``: a tensor (N, C, H, W) or an iterable of such batches (any sizes, one image
    shape), each checked as it is admitted (``inputs.check_images``; the error names the batch).
    Returns an ``AdaptiveResult`` in input order (empty for an empty stream). ``tau`` or ``rule``
    as in ``adaptive_predict``. Weight-tied families only (recurrent, basic_ssm, frost): vanilla's
    step depends on t (use ``adaptive_predict``). Runs without gradient; call ``model.eval()``."""
    exits = _Exits(return_scores)
    device = next(model.parameters(), torch.empty(0)).device
    n = 0
    for event in stream_steps(model, images, tau, slots=slots, rule=rule, refill_at=refill_at,
                              embed_batch=embed_batch, allow_other_size=allow_other_size):
        if event.kind == "exit":
            exits.add(event.rows, event.logits, event.depth, event.halt_scores)
        else:
            n += event.rows.numel()
            device = event.rows.device
    return exits.result(n, getattr(model.config, "num_classes", 0), device)
