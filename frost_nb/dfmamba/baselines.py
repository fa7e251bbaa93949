"""The linear baselines of DF-Mamba's Table 1, one map shared by every variable, each returning the model's
``Forecast`` (no auxiliary loss).

- ``DLinear`` (cure-lab/LTSF-Linear ``models/DLinear.py``, ``individual=False``): the window's trend, its
  25-step moving average (the ends repeated 12 times), and the remainder, each through a Linear(look-back
  -> horizon), summed.
- ``RLinear`` (plumprc/RTSF ``models/RLinear.py``): RevIN, dropout, one Linear(look-back -> horizon), RevIN
  undone; affine RevIN (RTSF's default, its ETTh2 script passing ``--rev``), eps 1e-5, the window's mean
  and population variance detached; dropout 0.1 (``run.py``'s default)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..config import _Validated
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


class DLinear(nn.Module):
    def __init__(self, cfg: DLinearConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.seasonal, self.trend = nn.Linear(cfg.lookback, cfg.horizon), nn.Linear(cfg.lookback, cfg.horizon)

    def decompose(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, L, C) -> the remainder and the trend, each (B, L, C): the trend the centred mean over
        ``kernel`` steps, the ends repeated (kernel - 1) / 2 times."""
        k = self.cfg.kernel
        padded = torch.cat([x[:, :1].expand(-1, k // 2, -1), x, x[:, -1:].expand(-1, k // 2, -1)], 1)
        trend = F.avg_pool1d(padded.transpose(1, 2), k, stride=1).transpose(1, 2)
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
