"""What a measurement machine is: versions, accelerator, driver and ``nvidia-smi -q``.

``python -m calibrate.device_env --out env.json`` writes one JSON document (the device
script's first file): Python, platform, CPU, torch (CUDA, cuDNN, NCCL versions), the GPU's
name, memory, multiprocessors and L2 cache where there is one, the driver, and the full
text of ``nvidia-smi -q`` (a read-only query) when the tool exists. Needs torch only.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from calibrate.compute import cpu_model, gpu_driver, nccl_version, require_torch
from calibrate.measurements import utc_now
from sim.errors import CalibrationError

__all__ = ["device_env", "main"]


def _smi_query() -> str | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "-q"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout


def device_env(created: str | None = None) -> dict[str, Any]:
    """The machine's description (see the module docstring)."""
    torch = require_torch()
    env: dict[str, Any] = {
        "created": utc_now(created), "python": sys.version.split()[0],
        "platform": platform.platform(), "host": platform.node(), "cpu_model": cpu_model(),
        "torch_version": torch.__version__, "cuda_available": torch.cuda.is_available(),
    }  # fmt: skip
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        env |= {
            "gpu_model": props.name, "gpu_memory_bytes": int(props.total_memory),
            "multiprocessors": int(props.multi_processor_count),
            "l2_cache_bytes": int(getattr(props, "L2_cache_size", 0)),
            "capability": f"{props.major}.{props.minor}", "cuda_version": torch.version.cuda,
            "cudnn_version": torch.backends.cudnn.version(), "nccl_version": nccl_version(torch),
            "driver": gpu_driver(),
        }  # fmt: skip
    env["nvidia_smi_q"] = _smi_query()
    return env


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m calibrate.device_env --out env.json``."""
    ap = argparse.ArgumentParser(prog="python -m calibrate.device_env", description=__doc__)
    ap.add_argument("--out", required=True, help="JSON file to write")
    args = ap.parse_args(argv)
    try:
        from sim.files import check_output_path, write_atomic

        check_output_path(args.out, "--out")
        env = device_env()
    except CalibrationError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    write_atomic(args.out, json.dumps(env, indent=1, sort_keys=True) + "\n", "--out")
    print(f"{env.get('gpu_model') or env['cpu_model']}, torch {env['torch_version']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
