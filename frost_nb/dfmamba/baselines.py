"""The linear baselines of DF-Mamba's Table 1, one map shared by every variable, and the closed-form
least-squares map that checks the protocol; each returns the model's ``Forecast``, no auxiliary loss.

- ``DLinear`` (cure-lab/LTSF-Linear, ``models/DLinear.py``, ``individual=False``): the window's trend,
  its 25-step moving average (the first and last values repeated 12 times at either end), and the
  remainder, each through a Linear(look-back -> horizon), summed.
- ``RLinear`` (plumprc/RTSF, ``models/RLinear.py``): RevIN, dropout, one Linear(look-back -> horizon),
  RevIN undone. RTSF's ETTh2 script passes ``--rev``, and its RevIN defaults to ``affine=True`` (a
  learnable weight and bias per variable; eps 1e-5; the window's mean and population variance,
  detached): affine here too; dropout 0.1 is ``run.py``'s ``--drop`` default.
- ``least_squares``: the Linear(look-back -> horizon) with a bias of least squared error over every
  training window and variable, from the normal equations in float64.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..config import _Validated
from .data import Windows
from .model import Forecast


@dataclass(frozen=True)
class DLinearConfig(_Validated):
    _section = "model"
    lookback: int = 336
    horizon: int = 96
    kernel: int = 25  # of the moving average

    def validate(self) -> None:
        self._check("kernel", self.kernel >= 1 and self.kernel % 2 == 1, "an odd kernel size")


@dataclass(frozen=True)
class RLinearConfig(_Validated):
    _section = "model"
    lookback: int = 336
    horizon: int = 96
    channels: int = 7
    affine: bool = True
    dropout: float = 0.1
    eps: float = 1e-5

    def validate(self) -> None:
        self._check("dropout", 0.0 <= self.dropout < 1.0, "a probability in [0, 1)")


def moving_average(x: torch.Tensor, kernel: int) -> torch.Tensor:
    """(B, L, C) -> (B, L, C): the centred mean over ``kernel`` steps, the ends repeated (kernel - 1) / 2
    times."""
    pad = (kernel - 1) // 2
    padded = torch.cat([x[:, :1].expand(-1, pad, -1), x, x[:, -1:].expand(-1, pad, -1)], 1)
    return F.avg_pool1d(padded.transpose(1, 2), kernel, stride=1).transpose(1, 2)


class DLinear(nn.Module):
    def __init__(self, cfg: DLinearConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.seasonal, self.trend = nn.Linear(cfg.lookback, cfg.horizon), nn.Linear(cfg.lookback, cfg.horizon)

    def decompose(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, L, C) -> the remainder and the trend, each (B, L, C)."""
        trend = moving_average(x, self.cfg.kernel)
        return x - trend, trend

    def forward(self, x: torch.Tensor) -> Forecast:
        seasonal, trend = (part.transpose(1, 2) for part in self.decompose(x))  # (B, C, L)
        return Forecast((self.seasonal(seasonal) + self.trend(trend)).transpose(1, 2), {})


class RLinear(nn.Module):
    def __init__(self, cfg: RLinearConfig) -> None:
        super().__init__()
        self.cfg, self.dropout = cfg, nn.Dropout(cfg.dropout)
        self.linear = nn.Linear(cfg.lookback, cfg.horizon)
        if cfg.affine:
            self.weight = nn.Parameter(torch.ones(cfg.channels))
            self.bias = nn.Parameter(torch.zeros(cfg.channels))

    def forward(self, x: torch.Tensor) -> Forecast:
        cfg = self.cfg
        mean = x.mean(1, keepdim=True).detach()  # (B, 1, C)
        std = torch.sqrt(x.var(1, keepdim=True, unbiased=False) + cfg.eps).detach()
        z = (x - mean) / std * self.weight + self.bias if cfg.affine else (x - mean) / std
        z = self.linear(self.dropout(z).transpose(1, 2)).transpose(1, 2)  # (B, H, C)
        z = (z - self.bias) / (self.weight + cfg.eps * cfg.eps) if cfg.affine else z
        return Forecast(z * std + mean, {})


class SharedLinear(nn.Module):
    def __init__(self, lookback: int, horizon: int) -> None:
        super().__init__()
        self.linear = nn.Linear(lookback, horizon)

    def forward(self, x: torch.Tensor) -> Forecast:
        return Forecast(self.linear(x.transpose(1, 2)).transpose(1, 2), {})


@torch.no_grad()
def least_squares(train: Windows, batch_size: int = 1024) -> SharedLinear:
    """The ``SharedLinear`` of least squared error over ``train``: the normal equations summed in
    float64 a batch at a time, then solved."""
    gram = torch.zeros(train.lookback + 1, train.lookback + 1, dtype=torch.float64)
    cross = torch.zeros(train.lookback + 1, train.horizon, dtype=torch.float64)
    for x, y in train.batches(batch_size):
        a = x.transpose(1, 2).reshape(-1, train.lookback).double()  # (B C, L)
        a = torch.cat([a, torch.ones(len(a), 1, dtype=torch.float64)], 1)  # the bias's column
        gram += a.T @ a
        cross += a.T @ y.transpose(1, 2).reshape(-1, train.horizon).double()
    solution = torch.linalg.solve(gram, cross)  # (L + 1, H)
    model = SharedLinear(train.lookback, train.horizon)
    model.linear.weight.copy_(solution[:-1].T)
    model.linear.bias.copy_(solution[-1])
    return model.eval()
