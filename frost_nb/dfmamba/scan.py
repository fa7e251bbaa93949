"""The selective scan inside DF-Mamba's state-space block (section 3.1; the block is Mamba's, Gu and Dao
2023): per sequence n, channel e and state s, with a step dt_t > 0 and a diagonal A < 0,

    h_t = exp(dt_t A) h_{t-1} + dt_t B_t x_t        eq. (2)-(3): A by zero-order hold, B by Euler
    y_t = C_t . h_t + D x_t                          eq. (2), plus Mamba's D skip

(eq. (3)-(4) write the exact hold for B too; Mamba's code, and mambapy, which the tests hold the block
against, use dt B: docs/df-mamba.md). ``sequential_scan`` is the reference loop; ``chunked_scan``, what
the model runs, loops over small tensors with a hand-written backward that recomputes each chunk's
states from the state entering it: no (N, L, E, S) tensor is held, and every decay lies in (0, 1]. A
closed form inside chunks (Mamba-2's segment sums) measured 3x to 25x slower here, A being per (e, s)."""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

LOG2E = 1.0 / math.log(2.0)


def sequential_scan(x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, D: Tensor) -> Tensor:
    """The reference: one step at a time, autograd through the loop. x, dt (N, L, E); A (E, S);
    B, C (N, L, S); D (E,). Returns y (N, L, E)."""
    h = x.new_zeros(x.shape[0], x.shape[2], A.shape[1])  # (N, E, S)
    ys = []
    for t in range(x.shape[1]):
        decay = torch.exp(dt[:, t, :, None] * A)  # (N, E, S)  eq. (3), zero-order hold
        h = decay * h + (dt[:, t] * x[:, t])[:, :, None] * B[:, t, None, :]  # eq. (2)
        ys.append(torch.einsum("nes,ns->ne", h, C[:, t]))  # (N, E)
    return torch.stack(ys, 1) + D * x  # (N, L, E)


def chunked_scan(x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, D: Tensor,
                 chunk: int = 8, block: int = 64) -> Tensor:
    """``sequential_scan``'s result (same shapes), its states held for ``block`` sequences x ``chunk``
    steps at a time. 64 x 8 was the fastest of N in {16..448} x T in {2..32} at N = 448, E = 128, S = 16."""
    if chunk < 1 or block < 1:
        raise ValueError(f"chunk={chunk}, block={block}: expected positive sizes")
    if torch.is_grad_enabled() and any(t.requires_grad for t in (x, dt, A, B, C, D)):
        return _ChunkedScan.apply(x, dt, A, B, C, D, chunk, block)
    return _forward(x, dt, A, B, C, D, chunk, block, keep_starts=False)[0]


def _states(h: Tensor, decay: Tensor, u: Tensor, dt: Tensor, v: Tensor, B: Tensor, A2: Tensor) -> Tensor:
    """Eq. (2) over one chunk, in place, from h_{-1} = h: decay[t] <- exp(dt_t A) = 2^(dt_t A log2 e), u[t]
    <- decay[t] * h_{t-1} + v_t B_t (v = dt x); returns the last state. exp2 is about 6x faster than exp in
    this torch on the CPU; the exponent is floored at the smallest normal number's, since denormal results
    are several times slower still (the change is below 1e-38)."""
    torch.mul(dt[..., None], A2, out=decay)
    decay.clamp_(min=math.log2(torch.finfo(decay.dtype).smallest_normal)).exp2_()
    torch.mul(v[..., None], B[:, :, None, :], out=u)  # dt B x
    for t in range(len(u)):
        h = u[t].addcmul_(decay[t], h)
    return h


def _view(flat: Tensor, *shape: int) -> Tensor:
    return flat[:math.prod(shape)].view(shape)  # a contiguous (n, m, E, S) out of a reused buffer


def _forward(x, dt, A, B, C, D, chunk, block, keep_starts):
    """y, and (keep_starts) the state entering every chunk: the checkpoints the backward starts from."""
    (N, L, E), S = x.shape, A.shape[1]
    xt, dtt, Bt, Ct = (z.transpose(0, 1) for z in (x, dt, B, C))  # (L, N, .) views: a copy costs more
    vt, A2 = dtt * xt, A * LOG2E  # (L, N, E): the input dt x, eq. (2)
    n_chunks = -(-L // chunk)
    starts = x.new_empty(n_chunks if keep_starts else 1, N, E, S)  # the state entering each chunk
    y = x.new_empty(L, N, E)
    a, u = x.new_empty(2, chunk * min(block, N) * E * S)  # decays; inputs, then states
    for b0 in range(0, N, block):
        nb = slice(b0, b0 + block)
        h = starts[0, nb].zero_()
        for i in range(n_chunks):
            t = slice(i * chunk, (i + 1) * chunk)
            n, m = len(range(L)[t]), len(range(N)[nb])
            ac, uc = _view(a, n, m, E, S), _view(u, n, m, E, S)
            if i:  # h out of uc, which holds it, before uc is overwritten
                h = starts[i, nb].copy_(h) if keep_starts else h.clone()
            h = _states(h, ac, uc, dtt[t, nb], vt[t, nb], Bt[t, nb], A2)  # uc: the states h_t
            y[t, nb] = torch.mul(uc, Ct[t, nb, None, :], out=ac).sum(-1)  # C . h, eq. (2)
    return torch.addcmul(y.transpose(0, 1), D, x), starts


class _ChunkedScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dt, A, B, C, D, chunk, block):
        y, starts = _forward(x, dt, A, B, C, D, chunk, block, keep_starts=True)
        ctx.save_for_backward(x, dt, A, B, C, D, starts)
        ctx.sizes = chunk, block
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, gy):
        """Chunks last to first, each: recompute its states from its checkpoint, then the adjoint
        g_t = dL/dh_t = gy_t C_t + exp(dt_{t+1} A) g_{t+1}, and from it every input's gradient."""
        x, dt, A, B, C, D, starts = ctx.saved_tensors
        chunk, block = ctx.sizes
        (N, L, E), S = x.shape, A.shape[1]
        # gy may be expanded
        xt, dtt, Bt, Ct, gyt = (z.transpose(0, 1) for z in (x, dt, B, C, gy.contiguous()))
        vt, A2 = dtt * xt, A * LOG2E
        gv, gdt = x.new_empty(2, L, N, E)  # dL/d(dt x) and dL/dt through the decay
        gB, gC = x.new_empty(2, L, N, S)
        gA = torch.zeros_like(A)
        size = min(block, N) * E * S
        a, g, ga = x.new_empty(3, chunk * size)  # decays, adjoints, adjoints x decays
        hs = x.new_empty((chunk + 1) * size)  # h_{t-1} for the chunk's steps, and h_t
        for b0 in range(0, N, block):
            nb = slice(b0, b0 + block)
            m = len(range(N)[nb])
            carry = x.new_zeros(m, E, S)  # exp(dt A) g of the step after the chunk
            for i in reversed(range(len(starts))):
                t = slice(i * chunk, (i + 1) * chunk)
                n = len(range(L)[t])
                ac, gc, gac = (_view(z, n, m, E, S) for z in (a, g, ga))
                hc = _view(hs, n + 1, m, E, S)
                hc[0] = starts[i, nb]
                _states(hc[0], ac, hc[1:], dtt[t, nb], vt[t, nb], Bt[t, nb], A2)
                # contractions over E as batched row-vector products (bmm is fast in this shape only)
                gC[t, nb] = torch.bmm(gyt[t, nb].reshape(n * m, 1, E), hc[1:].view(n * m, E, S)).view(n, m, S)
                for s in reversed(range(n)):
                    step = i * chunk + s
                    torch.addcmul(carry, gyt[step, nb, :, None], Ct[step, nb, None, :], out=gc[s])
                    carry = torch.mul(gc[s], ac[s], out=gac[s])
                carry = carry.clone()  # gac is overwritten next
                gv[t, nb] = torch.mul(gc, Bt[t, nb, None, :], out=ac).sum(-1)
                gB[t, nb] = torch.bmm(vt[t, nb].reshape(n * m, 1, E), gc.view(n * m, E, S)).view(n, m, S)
                q = gac.mul_(hc[:n])  # dL/d(dt A): (n, m, E, S)
                gdt[t, nb] = torch.mul(q, A, out=ac).sum(-1)
                gA += torch.mul(q, dtt[t, nb, :, None], out=ac).sum((0, 1))
        gv, gdt, gB, gC = (z.transpose(0, 1) for z in (gv, gdt, gB, gC))
        gx = torch.addcmul(gy * D, gv, dt)
        return gx, gdt + gv * x, gA, gB, gC, (gy * x).sum((0, 1)), None, None
