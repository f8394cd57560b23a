"""Tiny models with torchvision's constructors' signatures (see the package docstring)."""

from __future__ import annotations

from collections import namedtuple
from typing import Any

import torch

InceptionOutputs = namedtuple("InceptionOutputs", ["logits", "aux_logits"])


class _Tiny(torch.nn.Module):
    def __init__(self, num_classes: int = 1000, aux: bool = False) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, stride=4)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, num_classes)
        self.aux = torch.nn.Linear(8, num_classes) if aux else None

    def forward(self, x: Any) -> Any:
        h = torch.relu(self.bn(self.conv(x))).mean(dim=(2, 3))
        if self.aux is not None and self.training:
            return InceptionOutputs(self.fc(h), self.aux(h))
        return self.fc(h)


def resnet50(*, weights: Any = None, num_classes: int = 1000) -> torch.nn.Module:
    assert weights is None
    return _Tiny(num_classes)


def vgg16(*, weights: Any = None, num_classes: int = 1000) -> torch.nn.Module:
    assert weights is None
    return _Tiny(num_classes)


def inception_v3(
    *,
    weights: Any = None,
    aux_logits: bool = True,
    init_weights: bool | None = None,
    num_classes: int = 1000,
) -> torch.nn.Module:
    assert weights is None
    return _Tiny(num_classes, aux=aux_logits)
