"""Settings of a ``clustersim`` process that make it start and run faster, set when the
command starts (:func:`settle`); the Python API leaves the caller's process as it is.

- **The C heap, grown and kept in large steps (glibc).** The simulator's NumPy kernels
  make and drop arrays of 10^4-10^5 elements thousands of times per command: a collective
  tuner's step loads, the flow network's solves. glibc's ``malloc`` grows the heap by
  ``M_TOP_PAD`` (128 KiB by default) at a time and gives the free memory at its top back
  to the kernel once more than ``M_TRIM_THRESHOLD`` (128 KiB) is free, so each step's
  arrays land on pages returned a moment before and are faulted in again. Measured on a
  2-core VM, one 64 MiB all-reduce on 256 H100 (``h100-ib-ndr``, flow network): 27.6k
  minor page faults per command, 15.4k with a 16 MiB pad; the tuner's 113 step loads 33
  -> 16 ms. ``MALLOC_TOP_PAD_`` in the environment has the same effect. Other C
  libraries (macOS, musl) are left alone. Commands that time real kernels (``calibrate
  collectives``, ``compute``, ``step``) keep glibc's defaults, so torch runs as in a
  training job: the pad also turns off glibc's dynamic mmap threshold (mallopt(3)), and
  under it ``calibrate compute`` timed AdamW over 16 tensors of 256 KiB at 5.5-8.8 ms of
  thread CPU time per step instead of 1.8-2.2 ms, so the profile it fitted overstated the
  optimizer about 3x and predicted the quick step job 37-44 ms against 30-36 measured.
- **One BLAS thread** unless ``OPENBLAS_NUM_THREADS`` says otherwise: NumPy is imported
  with the variable set to 1, then it is restored, so the processes a command starts
  (calibration jobs) see the user's environment. The simulator's dot products are short
  (hundreds of elements: OpenBLAS runs them on one thread anyway), and the helper
  threads OpenBLAS starts as it loads spin meanwhile: 0.09 s of CPU time per command on
  a 2-core VM, taken from whatever else runs there.
"""

from __future__ import annotations

import ctypes
import os
import sys

__all__ = ["HEAP_PAD_BYTES", "keep_heap", "one_blas_thread", "settle"]

#: Bytes the heap grows by and keeps free at its top (glibc ``M_TOP_PAD``).
HEAP_PAD_BYTES = 16 * 2**20
#: glibc's ``mallopt`` parameter number of ``M_TOP_PAD`` (malloc.h).
_M_TOP_PAD = -2


def settle(heap: bool = True) -> None:
    """Apply this module's settings to the running process (before the simulator's
    imports: they allocate, and the BLAS threads are set as NumPy loads); ``heap`` False
    leaves the C heap's settings as they are (a command that times real kernels)."""
    if heap:
        keep_heap()
    one_blas_thread()


def one_blas_thread() -> None:
    """Import NumPy with ``OPENBLAS_NUM_THREADS=1`` unless the variable is set or NumPy is
    already loaded; the environment is left as it was."""
    if "OPENBLAS_NUM_THREADS" in os.environ or "numpy" in sys.modules:
        return
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        import numpy  # noqa: F401 - OpenBLAS reads the variable as it loads
    finally:
        del os.environ["OPENBLAS_NUM_THREADS"]


def keep_heap(pad_bytes: int = HEAP_PAD_BYTES) -> bool:
    """Set glibc's heap pad to ``pad_bytes`` (bytes) for this process; whether it was set
    (False without glibc's ``mallopt``; Windows' ``CDLL`` refuses ``None`` with a
    TypeError)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_TOP_PAD, pad_bytes))
