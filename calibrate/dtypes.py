"""Element sizes of the dtypes measurement records name (torch's spelling).

Its own module, below both the records (:mod:`calibrate.measurements`) and their pydantic
models (:mod:`calibrate.measurement_models`), so that saving measurements needs no
pydantic (a lent GPU's image has none) and neither module imports the other for it.
"""

from __future__ import annotations

__all__ = ["DTYPE_BYTES"]

#: Bytes per element, by dtype name.
DTYPE_BYTES: dict[str, int] = {
    "int8": 1, "uint8": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
    "float16": 2, "bfloat16": 2,
    "int32": 4, "uint32": 4, "float32": 4,
    "int64": 8, "uint64": 8, "float64": 8,
}  # fmt: skip
