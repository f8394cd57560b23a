"""Single-GPU CNN training throughput: torchvision's ResNet-50, VGG-16 and Inception V3.

Each model trains on synthetic ImageNet-shaped data (random images, 1,000 classes) with
SGD (momentum 0.9) and cross-entropy (Inception V3 adds its auxiliary head's loss at
0.4, as torchvision's reference recipe does), under bf16 autocast with channels-last
tensors on a GPU (``torch.backends.cudnn.benchmark`` on) and in fp32 on a CPU. After
``warmup`` steps, ``steps`` steps are timed one by one (CUDA events on a GPU, the wall
clock on a CPU); the result is images/s at the median step. Batch sizes
(:data:`BATCH`): 256 for ResNet-50, 128 for VGG-16 and Inception V3 (224 x 224 images; 299
x 299 for Inception V3), the per-GPU batches of NVIDIA's Deep Learning Examples and of
the TensorFlow CNN benchmarks for these models.

The output is a JSON document (``calibrate cnn --out FILE``, or ``python -m calibrate.cnn``):
provenance (device, GPU, torch and torchvision versions, created) and one entry per model.
torchvision is needed (``pip install torchvision``); a missing one is one line, exit 2.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from calibrate.compute import cpu_model, gpu_driver, resolve_device
from calibrate.measurements import utc_now
from sim.errors import CalibrationError

__all__ = ["BATCH", "IMAGE", "MODELS", "main", "run_cnn"]

MODELS = ("resnet50", "vgg16", "inception_v3")
#: Per-GPU batch (see the module docstring) and image side (pixels).
BATCH = {"resnet50": 256, "vgg16": 128, "inception_v3": 128}
IMAGE = {"resnet50": 224, "vgg16": 224, "inception_v3": 299}


def _torchvision() -> ModuleType:
    try:
        import torchvision
    except ImportError:
        raise CalibrationError(
            "CNN throughput needs torchvision: pip install torchvision"
        ) from None
    return torchvision


def _model(tv: ModuleType, name: str) -> Any:
    if name == "inception_v3":
        return tv.models.inception_v3(weights=None, aux_logits=True, init_weights=False)
    return getattr(tv.models, name)(weights=None)


def _time(torch: ModuleType, device: str, step: Any, steps: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        step()
    if device == "cuda":
        torch.cuda.synchronize()
        pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                 for _ in range(steps)]  # fmt: skip
        for a, b in pairs:
            a.record()
            step()
            b.record()
        torch.cuda.synchronize()
        return [a.elapsed_time(b) * 1e-3 for a, b in pairs]
    out = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        out.append(time.perf_counter() - t0)
    return out


def _one(torch: ModuleType, tv: ModuleType, name: str, device: str, batch: int, steps: int,
         warmup: int) -> dict[str, Any]:  # fmt: skip
    torch.manual_seed(0)
    gpu = device == "cuda"
    fmt = torch.channels_last if gpu else torch.contiguous_format
    model = _model(tv, name).to(device, memory_format=fmt).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    side = IMAGE[name]
    x = torch.randn(batch, 3, side, side, device=device).to(memory_format=fmt)
    y = torch.randint(0, 1000, (batch,), device=device)
    ce = torch.nn.functional.cross_entropy

    def step() -> None:
        with torch.autocast(device, dtype=torch.bfloat16, enabled=gpu):
            out = model(x)
            # Inception V3 returns (logits, aux_logits) while training
            loss = ce(out[0], y) + 0.4 * ce(out[1], y) if isinstance(out, tuple) else ce(out, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    times = _time(torch, device, step, steps, warmup)
    median = statistics.median(times)
    return {"model": name, "batch": batch, "image": side, "steps": steps, "warmup": warmup,
            "step_times_s": times, "median_step_s": median, "images_per_s": batch / median,
            "precision": "bf16 autocast" if gpu else "fp32",
            "memory_format": "channels_last" if gpu else "contiguous"}  # fmt: skip


def run_cnn(device: str = "cuda", models: Sequence[str] = MODELS, batch: int | None = None,
            steps: int = 20, warmup: int = 5, created: str | None = None) -> dict[str, Any]:  # fmt: skip
    """Train each of ``models`` for ``warmup`` + ``steps`` steps; images/s per model.

    Parameters
    ----------
    device : {'cuda', 'cpu'}
        Where to train.
    models : sequence of str
        Names from :data:`MODELS`.
    batch : int, optional
        One batch for every model (default :data:`BATCH` per model).
    steps, warmup : int
        Timed and untimed steps.
    created : str, optional
        Fixed ``created`` (UTC ISO-8601).

    Raises
    ------
    CalibrationError
        Unknown model, no torchvision, no CUDA device, steps < 1.
    """
    bad = [m for m in models if m not in MODELS]
    if bad or steps < 1 or warmup < 0 or (batch is not None and batch < 1):
        raise CalibrationError(
            f"cnn: models must be among {', '.join(MODELS)} (got {', '.join(bad) or 'ok'}), "
            f"steps >= 1, warmup >= 0, batch >= 1"
        )
    torch = resolve_device(device)
    tv = _torchvision()
    if device == "cuda":
        torch.backends.cudnn.benchmark = True
    runs = [_one(torch, tv, m, device, batch or BATCH[m], steps, warmup) for m in models]
    gpu = torch.cuda.get_device_name() if device == "cuda" else None
    return {"schema": "clustersim.cnn-throughput/1", "created": utc_now(created),
            "device": device, "gpu_model": gpu, "driver": gpu_driver() if gpu else None,
            "cpu_model": cpu_model(), "host": platform.node(), "torch_version": torch.__version__,
            "torchvision_version": getattr(tv, "__version__", None), "runs": runs}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m calibrate.cnn --device cuda --out cnn.json``."""
    ap = argparse.ArgumentParser(prog="python -m calibrate.cnn", description=__doc__)
    ap.add_argument("--device", default="cuda", help="cuda or cpu")
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated")
    ap.add_argument("--batch", type=int, help="one batch for every model (default per model)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--out", required=True, help="JSON file to write")
    args = ap.parse_args(argv)
    try:
        from sim.files import check_output_path, write_atomic

        check_output_path(args.out, "--out")
        models = [m.strip() for m in args.models.split(",") if m.strip()]
        result = run_cnn(args.device, models, args.batch, args.steps, args.warmup)
        write_atomic(args.out, json.dumps(result, indent=1, sort_keys=True) + "\n", "--out")
    except CalibrationError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for r in result["runs"]:
        print(f"{r['model']}: batch {r['batch']}, {r['images_per_s']:.1f} images/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
