"""Halting of FROST (Yu and Hwang, ICML 2026, arXiv 2601.19551): the score, the KLL threshold tau_q
(eq. (tau)) and adaptive inference (eq. (exit)) as ``docs/method.md`` sections 6-8 define them;
``adaptive_predict`` really skips the work of exited samples."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
from datasketches import kll_floats_sketch
from torch import Tensor

from .distributed import in_process_group
from .inputs import ParameterError, check_images, check_scores, number_in
from .models import EMBED_CHUNK

PAPER_QUANTILES = (0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1.0)  # the grid of Table 2
stream_ahead = lambda slots: max(512, 4 * slots)  # images a stream embeds ahead by default (docs/scaling.md)


class HaltingCalibrator:
    """KLL quantile sketch of halting scores and the thresholds read from it (docs/architecture.md,
    "Halting"); not deterministic (docs/method.md section 7), pickled through ``to_bytes()``."""

    def __init__(self, k: int = 200) -> None:
        k = number_in("sketch size k", k, 8, 65535, integer=True, hint=" (default 200)")
        self._sketch = kll_floats_sketch(k)

    def update(self, scores: Any) -> HaltingCalibrator:
        """Add scores of any shape (tensor, array, sequence), each in [0, 1]; with a NaN, an infinite or
        an out-of-range value nothing is added (one would poison the sketch's quantiles)."""
        if isinstance(scores, Tensor):  # numpy has no bf16: to float32 on the tensor's side first
            arr = scores.detach().reshape(-1).to(dtype=torch.float32).cpu().numpy()
        else:
            arr = np.ascontiguousarray(np.asarray(scores, dtype=np.float32).reshape(-1))
        check_scores(arr, "the calibrator added nothing: the scores hold")
        self._sketch.update(arr)  # vectorised update of datasketches >= 5 (an empty array adds nothing)
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
        return functools.reduce(cls.merge, map(cls.from_bytes, blobs))  # each merged into the first

    def merge_across_ranks(self, shared: HaltingCalibrator | None = None) -> HaltingCalibrator:
        """Pool the sketches of a DDP job's ranks, and ``shared`` once, into every rank (rank 0 merges:
        KLL merging flips unseeded coins); without a process group it merges ``shared`` only."""
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

    def threshold(self, q: float) -> float:
        """tau_q: exit at the first step with p_t > tau_q. q in [0, 1]; q == 1 gives +inf."""
        q = number_in("quantile q", q, 0, 1, hint=": give the target fraction of halting scores "
                      "below the threshold, e.g. 0.5 (q=1 means full depth for everyone)")
        if q == 1.0:
            return math.inf  # eq. (tau): above every score, including unseen test scores
        if self.is_empty:
            raise ParameterError("no halting scores were fed to the calibrator, so it has no "
                                 "threshold: train the model (the trainer feeds the sketch) or call "
                                 "calibrator.update(sigmoid(halt_logits)) over a held-out pass first")
        return float(self._sketch.get_quantile(q))  # eq. (tau)

    def thresholds(self, qs: Sequence[float]) -> list[float]:
        return [self.threshold(q) for q in qs]

    def to_bytes(self) -> bytes:
        return bytes(self._sketch.serialize())

    @classmethod
    def from_bytes(cls, blob: bytes) -> HaltingCalibrator:
        obj = cls.__new__(cls)
        obj._sketch = kll_floats_sketch.deserialize(bytes(blob))  # keeps k
        return obj

    def __reduce__(self) -> tuple:  # a KLL sketch cannot be pickled: its bytes are
        return type(self).from_bytes, (self.to_bytes(),)

    def __repr__(self) -> str:
        median = "" if self.is_empty else f", median={self.threshold(0.5):.4g}"
        return f"HaltingCalibrator(k={self.k}, n={self.n}{median})"


def _checked_tau(tau: Any) -> float:
    """tau as a float; NaN is refused: ``p > NaN`` is False, so everyone would run to T."""
    return number_in("threshold tau", tau, -math.inf, math.inf,
                     hint=" (HaltingCalibrator.threshold(q); +inf runs every sample to full depth)")


def exit_steps(scores: Tensor, tau: float) -> Tensor:
    """Exit depth in 1..T of each sample: first t with p_t > tau, else T. (N, T) -> (N,) int64;
    tau: any real number but NaN (+inf: full depth for everyone, as ``threshold(1.0)``)."""
    tau = _checked_tau(tau)
    scores = torch.as_tensor(scores)
    if scores.dim() != 2:
        raise ValueError(f"scores must be (N, T), got shape {tuple(scores.shape)}")
    if scores.is_floating_point() and scores.element_size() < 4:
        scores = scores.float()  # compare in float32: bf16 > tau would round tau to bf16
    exceed = scores > tau  # (N, T) bool, eq. (exit)
    first = exceed.to(torch.uint8).argmax(dim=1)  # (N,) index of the first True (0 if none)
    return torch.where(exceed.any(dim=1), first.to(torch.int64) + 1, scores.shape[1])  # T if none


class AdaptiveResult(NamedTuple):
    logits: Tensor  # (N, K) class logits at each sample's exit step
    depth: Tensor  # (N,) int64 exit depth in 1..T
    halt_scores: Tensor | None  # (N,) float32 p at the exit step (return_scores=True), else None


def _per_sample_fields(obj: Any, n: int) -> dict[str, Tensor | None] | None:
    """The fields of a dataclass when each is None or a tensor of ``n`` rows (as StepContext's), else None."""
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        return None
    fields = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    per_sample = lambda v: v is None or (isinstance(v, Tensor) and v.dim() > 0 and v.shape[0] == n)
    # a shared or non-tensor field: None, which _leaves refuses (its rows cannot be taken)
    return fields if all(f.init and per_sample(fields[f.name]) for f in dataclasses.fields(obj)) else None


def _leaves(obj: Any, n: int) -> tuple[list, Any]:
    """The per-sample tensors of a state, context or rule memory of ``n`` rows (a tensor, None, a dataclass
    of per-sample tensors as the models' StepContext, a tuple or list of these), and a function that
    builds its like from an iterator over such leaves; anything else is a TypeError."""
    if obj is None:
        return [], lambda it: None
    if isinstance(obj, Tensor):
        return [obj], next
    fields, cls = _per_sample_fields(obj, n), type(obj)
    if fields is None and not isinstance(obj, (tuple, list)):
        raise TypeError(f"cannot take rows of a {cls.__name__} context: make it a dataclass of per-sample "
                        "tensors (as the models' StepContext) or a tensor")
    items = fields.items() if fields is not None else enumerate(obj)
    parts = [(k, *_leaves(v, n)) for k, v in items]
    build = ((lambda it: cls(**{k: b(it) for k, _, b in parts})) if fields is not None
             else (lambda it: cls(b(it) for _, _, b in parts)))
    return [leaf for _, leaves, _ in parts for leaf in leaves], build


def _select(obj: Any, idx: Tensor, n: int) -> Any:
    """The rows ``idx`` of a state or context of ``n`` samples (``_leaves``), by ``index_select``: on the
    CPU several times faster than ``v[idx]``, and compaction is frequent."""
    leaves, build = _leaves(obj, n)
    return build(iter([v.index_select(0, idx) for v in leaves]))


def _like(v: Tensor, u: Tensor, rows: int) -> Tensor:
    """``v`` (``rows`` rows) expanded to ``u``'s trailing shape: a rule's placeholder memory (KL's zeros)."""
    return v if v.shape[1:] == u.shape[1:] else v.expand(rows, *u.shape[1:])


def _halting(tau: Any, rule: Any, caller: str) -> Any:
    """What exits are tested with: FROST's tau (a float, NaN refused) or an ``OnlineRule``, checked once."""
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
    """The exited samples' outputs, kept by input row and put in input order once, at the end."""

    def __init__(self, return_scores: bool) -> None:
        self.return_scores = return_scores
        self.parts: list[tuple[Tensor, Tensor, Tensor, Tensor | None]] = []

    def add(self, rows: Tensor, logits: Tensor, depth: Tensor, p: Tensor) -> None:
        """rows (m,) input positions; logits (m, K); depth (m,) int64; p (m,)."""
        self.parts.append((rows, logits, depth, p if self.return_scores else None))

    def result(self, num_classes: int, device: Any) -> AdaptiveResult:
        if not self.parts:  # nothing ran: an empty input
            idx = torch.empty(0, dtype=torch.int64, device=device)  # no rows, no depths
            self.add(idx, torch.empty((0, num_classes), device=device), idx, torch.empty(0, device=device))
        rows, logits, depth, p = zip(*self.parts)
        order = torch.argsort(torch.cat(rows))  # rows: every input row once, in the order of the exits
        return AdaptiveResult(torch.cat(logits)[order], torch.cat(depth)[order],
                              torch.cat(p)[order] if self.return_scores else None)


def adaptive_predict(model: torch.nn.Module, x: Tensor, tau: float | None = None, *,
                     return_scores: bool = False, allow_other_size: bool = False,
                     compact_below: float = 1.0, rule: Any = None) -> AdaptiveResult:
    """Run the model step by step, dropping each sample once it exits at ``tau`` or by ``rule``
    (docs/method.md section 8), without gradient (call ``model.eval()``); ``compact_below``: the
    running share of the rows carried at which they are compacted (1: at every exit; 0: never), which
    the exits do not depend on (docs/scaling.md)."""
    steps = int(model.config.steps)
    halting = _halting(tau, rule, "adaptive_predict")
    compact_below = number_in("compact_below", compact_below, 0.0, 1.0)
    x = check_images(model, x, allow_other_size=allow_other_size)  # one pass, one host sync
    n = x.shape[0]
    exits = _Exits(return_scores)
    with torch.no_grad():
        h, ctx = model.prologue(x)  # h_0 and the per-sample step inputs
        memory = None if isinstance(halting, float) else halting.start(h)  # the rule's per-row memory
        idx = torch.arange(n, device=x.device)  # original row of each carried sample
        live, n_live = None, n  # live: (n_carried,) bool, still running; None: every carried row is
        for t in range(steps if n else 0):
            h, logits, halt_logit, p = _step_readout(model, h, ctx, t)  # h_{t+1}, (n_carried, K), ...
            if t < steps - 1:
                done, memory = _exit_test(halting, t + 1, h, logits, halt_logit, p, memory)
            else:  # at T every sample still running stops
                done = torch.ones_like(p, dtype=torch.bool)
            if live is not None:
                done &= live  # a sample that exited already never writes again
            exit_pos = done.nonzero().squeeze(1)  # one host sync per step: compaction needs it
            if exit_pos.numel() == 0:
                continue
            pick = lambda v: v.index_select(0, exit_pos)
            exits.add(pick(idx), pick(logits), torch.full_like(exit_pos, t + 1), pick(p))  # (m,) int64
            n_live -= exit_pos.numel()
            if n_live == 0:
                break
            live = ~done if live is None else live & ~done
            n_carried = idx.numel()
            if n_live <= compact_below * n_carried:  # drop the exited rows now
                keep = live.nonzero().squeeze(1)  # (n_live,) ascending
                idx, live = idx.index_select(0, keep), None
                h, ctx, memory = (_select(v, keep, n_carried) for v in (h, ctx, memory))
    return exits.result(getattr(model.config, "num_classes", 0), x.device)


# --- continuous batching ------------------------------------------------------------------------

class StreamEvent(NamedTuple):
    """What ``stream_steps`` reports: images taken from the stream to be embedded and admitted
    (``kind`` "admit", before their stem runs), or the samples that exit at a step (``kind`` "exit")."""

    kind: str  # "admit" or "exit"
    rows: Tensor  # (m,) int64 input positions (counted over every batch of the stream)
    logits: Tensor | None = None  # (m, K) at the exit step
    depth: Tensor | None = None  # (m,) int64 exit depth in 1..T
    halt_scores: Tensor | None = None  # (m,) float32 p at the exit step


class _Feed:
    """The stream's images, checked and embedded (the model's ``prologue``) ``ahead`` at a time before admission,
    so admitting a few rows is a row copy (docs/scaling.md); a chunk holds what a running row holds."""

    def __init__(self, model: torch.nn.Module, images: Any, allow_other_size: bool, ahead: int,
                 start: Any) -> None:
        self.model, self.allow_other_size, self.ahead, self.start = model, allow_other_size, ahead, start
        if isinstance(images, (Tensor, np.ndarray)) and images.ndim == 4:  # one tensor: read and checked an
            self.batches = ((f"images[{a}:{a + ahead}]", images[a:a + ahead])  # embedding at a time, so its
                            for a in range(0, max(len(images), 1), ahead))  # pixels are in cache for the stem
        else:
            self.batches = ((f"batch {i} of the stream", x) for i, x in enumerate(
                [images] if isinstance(images, (Tensor, np.ndarray)) else images))
        self.rest: Tensor | None = None  # the rest of the batch being taken
        self.shape: tuple[int, ...] | None = None  # (C, H, W) of the first batch
        self.offset, self.unread = 0, True  # the next image's input position; the stream may hold more
        self.chunks: list[list[Tensor]] = []  # embedded, not yet taken: the leaves of (input row, depth,
        self.builds, self.sizes = [], []  # state, context, rule memory), their builders, leaves of each
        self.at = self.n = 0  # the first chunk's next row; the rows embedded and not yet taken
        self.pending: tuple[Tensor, Tensor] | None = None  # taken by fetch, not yet embedded

    def _next_batch(self) -> Tensor | None:
        for name, x in self.batches:
            x = check_images(self.model, x, allow_other_size=self.allow_other_size, name=name)
            if self.shape is None:
                self.shape = tuple(x.shape[1:])
            elif tuple(x.shape[1:]) != self.shape:
                raise ValueError(f"{name} holds images of shape {tuple(x.shape[1:])}, "
                                 f"the first batch {self.shape}: "
                                 "every batch of a stream must hold images of one shape")
            if x.shape[0]:
                return x
        self.unread = False
        return None

    def fetch(self, k: int) -> Tensor | None:
        """Take the next images from the stream when fewer than ``k`` are embedded (``ahead`` of
        them, or ``k`` if more); their input positions, before they are embedded (``embed``)."""
        if self.n >= k or not self.unread:
            return None
        want, parts, a = max(self.ahead, k) - self.n, [], 0
        while a < want and self.unread:
            if self.rest is None or self.rest.shape[0] == 0:
                self.rest = self._next_batch()
                if self.rest is None:
                    break
            part, self.rest = self.rest[:want - a], self.rest[want - a:]  # views
            parts.append(part)
            a += part.shape[0]
        if not parts:
            return None
        x = parts[0] if len(parts) == 1 else torch.cat(parts)  # (a, C, H, W)
        self.pending = x, torch.arange(self.offset, self.offset + a, device=x.device)
        self.offset += a
        return self.pending[1]

    def embed(self) -> None:
        """Embed what ``fetch`` took after the rows still embedded, ``EMBED_CHUNK`` images a chunk."""
        for x, rows in zip(*(v.split(EMBED_CHUNK) for v in self.pending)):
            h0, ctx0 = self.model.prologue(x)
            parts = [_leaves(v, len(rows)) for v in (rows, torch.zeros_like(rows), h0, ctx0, self.start(h0))]
            self.builds, self.sizes = [b for _, b in parts], [len(leaves) for leaves, _ in parts]
            self.chunks.append([leaf for leaves, _ in parts for leaf in leaves])
            self.n += rows.numel()

    def take(self, k: int) -> list[tuple[list[Tensor], int, int]]:
        """Up to ``k`` embedded rows, from one chunk or more: (chunk, first row, end), never written."""
        parts = []
        while k and self.chunks:
            size = self.chunks[0][0].numel()
            a = min(k, size - self.at)
            parts.append((self.chunks[0], self.at, self.at + a))
            self.at, self.n, k = self.at + a, self.n - a, k - a
            if self.at == size:  # that chunk is spent
                self.chunks, self.at = self.chunks[1:], 0
        return parts


def _put(rows: list[Tensor], pos: Tensor, new: list[Tensor], lo: int) -> None:
    """Write rows ``lo``, ... of ``new`` into the rows ``pos`` of ``rows`` (16-byte elements if they fit)."""
    k = pos.numel()
    for u, v in zip(rows, new):
        v = _like(v[lo:lo + k], u, k).to(u.dtype)
        if u.dim() > 1 and all(w.is_contiguous() and not w.stride(0) * w.element_size() % 16
                               and not w.storage_offset() * w.element_size() % 16 for w in (u, v)):
            u, v = u.view(len(u), -1).view(torch.complex128), v.view(k, -1).view(torch.complex128)
        u.index_copy_(0, pos, v)


def _compact(rows: list[Tensor], free: Tensor, n_left: int) -> list[Tensor]:
    """The ``n_left`` rows not ``free`` as the first rows: the running rows past them move into the free
    rows before them (a copy of those rows only), then views."""
    holes = free[:n_left].nonzero().squeeze(1)  # (r,) the free rows that stay
    movers = (~free[n_left:]).nonzero().squeeze(1) + n_left  # (r,) the running rows past them
    return [v.index_copy_(0, holes, v.index_select(0, movers))[:n_left] for v in rows]


def stream_steps(model: torch.nn.Module, images: Any, tau: float | None = None, *, slots: int = 256,
                 rule: Any = None, refill_at: int = 1, embed_batch: int | None = None,
                 allow_other_size: bool = False) -> Iterator[StreamEvent]:
    """Continuous batching, step by step (docs/method.md section 8): ``slots`` samples stepped together,
    the next images taking freed rows once ``refill_at`` are free; yields "admit" and "exit" events."""
    halting = _halting(tau, rule, "stream_predict")
    slots = number_in("slots", slots, 1, 2**31, integer=True, hint=": the number of samples stepped together")
    refill_at = number_in("refill_at", refill_at, 1, slots, integer=True,
                          hint=f": admit new images once this many of the {slots} slots are free")
    embed_batch = stream_ahead(slots) if embed_batch is None else number_in(
        "embed_batch", embed_batch, 1, 2**31, integer=True, hint=": images embedded together, ahead")
    if getattr(model.config, "name", None) == "vanilla":  # rows at different depths share a step
        raise ValueError("stream_predict needs a weight-tied step (recurrent, basic_ssm, frost): vanilla's "
                         "step depends on t, so rows at different depths cannot share a step call; use "
                         "adaptive_predict")
    steps = int(model.config.steps)
    start = (lambda h0: None) if isinstance(halting, float) else halting.start  # the rule's memory
    feed = _Feed(model, images, allow_other_size, embed_batch, start)

    def admit(k: int):  # up to k new samples: (chunk, first row, end) of one chunk or more
        entering = feed.fetch(k)
        if entering is not None:
            yield StreamEvent("admit", entering)  # (timed from here: before their stem runs)
            feed.embed()
        return feed.take(k)

    with torch.no_grad():
        parts = yield from admit(slots)  # the first images fill the slots; later ones only freed slots
        if not parts:
            return
        running, n = [v[:0] for v in parts[0][0]], 0  # the running rows, none yet, leaf by leaf
        exit_pos = done = running[0]  # no exit yet
        state, memory_at = slice(2, 2 + feed.sizes[2]), sum(feed.sizes[:4])  # where h's, memory's leaves are
        while True:
            m, filled = exit_pos.numel(), 0  # new samples take the rows just freed, in place
            for chunk, lo, hi in parts:
                k = min(hi - lo, m - filled)
                if k:
                    _put(running, exit_pos[filled:filled + k], chunk, lo)
                    filled += k
                if hi - lo > k:  # more slots free than rows just freed: the rest is appended (a copy)
                    rest = hi - lo - k
                    running = [torch.cat([u, _like(v[hi - rest:hi], u, rest)])
                               for u, v in zip(running, chunk)]
                    n += rest
            if filled < m:  # rows left free: the last running rows move into them
                if n == m - filled:  # the stream is spent: a refill takes every freed slot it can
                    return
                done.index_fill_(0, exit_pos[:filled], False)
                n -= m - filled
                running = _compact(running, done, n)
            leaves = iter(running)  # (input row, depth, state, context, rule memory) of the running rows
            idx, t, h, ctx, memory = (build(leaves) for build in feed.builds)
            h, logits, halt_logit, p = _step_readout(model, h, ctx, 0)  # weight-tied: any t is step t
            t += 1  # (n,) each row's depth now, in place
            done, memory = _exit_test(halting, t, h, logits, halt_logit, p, memory)
            done |= t >= steps  # at T every sample stops
            exit_pos = done.nonzero().squeeze(1)  # one host sync per step, as adaptive_predict
            running[state] = _leaves(h, n)[0]
            running[memory_at:] = _leaves(memory, n)[0]
            m, parts = exit_pos.numel(), ()
            if m == 0:
                continue
            yield StreamEvent("exit", *(v.index_select(0, exit_pos) for v in (idx, logits, t, p)))
            free = slots - n + m
            if (feed.n or feed.unread) and (free >= refill_at or n == m):  # more images: admit them
                parts = yield from admit(free)


def stream_predict(model: torch.nn.Module, images: Any, tau: float | None = None, *, slots: int = 256,
                   rule: Any = None, return_scores: bool = False, refill_at: int = 1,
                   embed_batch: int | None = None, allow_other_size: bool = False) -> AdaptiveResult:
    """``adaptive_predict`` with continuous batching (``stream_steps``) over ``images``, a tensor or an
    iterable of batches; weight-tied families only. An ``AdaptiveResult`` in input order."""
    exits = _Exits(return_scores)
    device = next(model.parameters(), torch.empty(0)).device  # read only for an empty stream
    for event in stream_steps(model, images, tau, slots=slots, rule=rule, refill_at=refill_at,
                              embed_batch=embed_batch, allow_other_size=allow_other_size):
        if event.kind == "exit":
            exits.add(event.rows, event.logits, event.depth, event.halt_scores)
    return exits.result(getattr(model.config, "num_classes", 0), device)
