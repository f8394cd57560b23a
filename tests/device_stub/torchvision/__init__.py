"""A stand-in for torchvision in the device script's CPU dry run (tests only).

torchvision's PyPI wheels are CUDA builds that do not load beside this project's CPU torch,
so the dry run of ``calibrate/scripts/device_h100.sh cpu`` puts this folder first on
PYTHONPATH: ``models.resnet50``, ``vgg16`` and ``inception_v3`` with torchvision's call
signatures and output types (Inception V3 returns (logits, aux_logits) while training),
as tiny convolutional networks, so that ``calibrate.cnn``'s training loop, autocast,
memory format and output run exactly as on the GPU.
"""

from . import models

__version__ = "stub"
__all__ = ["models"]
