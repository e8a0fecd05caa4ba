"""numpy views of Arrow arrays' buffers, for the record readers.

Owns reading an Arrow array's values without copying: primitive data, float columns with NaN
for null, and a list array's offsets and covered values. pyarrow's own `to_numpy` and
`fill_null` import pandas when it is installed (0.2 s of every check), and so does `pa.array` of a
numpy array (0.4 s), hence these. It does not know record fields or files.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "float64_array", "float_values", "list_offsets", "list_values", "null_mask", "primitive_values",
]  # fmt: skip

_NUMPY_TYPES = {"double": np.float64, "int8": np.int8, "int16": np.int16, "int32": np.int32,
                "int64": np.int64}  # fmt: skip


def primitive_values(array: pa.Array) -> np.ndarray:
    """A zero-copy view of a primitive array's data (null slots hold whatever they hold)."""
    dtype = np.dtype(_NUMPY_TYPES[str(array.type)])
    data = array.buffers()[1]
    if data is None:
        return np.zeros(0, dtype=dtype)
    return np.frombuffer(data, dtype=dtype, count=array.offset + len(array))[array.offset :]


def float_values(array: pa.Array) -> np.ndarray:
    """A float64 (or integer) array's values as float64 with NaN for null (a view when it is
    float64 without nulls)."""
    values = primitive_values(array)
    if values.dtype != np.float64:
        values = values.astype(np.float64)
    if not array.null_count:
        return values
    bits = np.frombuffer(array.buffers()[0], dtype=np.uint8)
    valid = np.unpackbits(bits, bitorder="little")[array.offset :][: len(array)]
    return np.where(valid, values, np.nan)


def null_mask(array: pa.Array) -> np.ndarray:
    """True where `array` (any type, one chunk) is null."""
    if not array.null_count:
        return np.zeros(len(array), dtype=bool)
    bits = np.frombuffer(array.buffers()[0], dtype=np.uint8)
    return np.unpackbits(bits, bitorder="little")[array.offset :][: len(array)] == 0


def list_offsets(array: pa.Array) -> np.ndarray:
    """A list array's offsets (len + 1 of them, into its values buffer), as a view."""
    buffer = array.buffers()[1]
    if buffer is None:
        return np.zeros(len(array) + 1, dtype=np.int32)
    offsets = np.frombuffer(buffer, dtype=np.int32, count=array.offset + len(array) + 1)
    return offsets[array.offset :]


def list_values(array: pa.Array) -> np.ndarray:
    """The values a list array's rows cover, back to back, as a view (a null element reads as
    whatever its slot holds: the records never have them)."""
    offsets = list_offsets(array)
    whole = primitive_values(array.values)  # the child's own offset applied
    return whole[offsets[0] : offsets[-1]]


def float64_array(values: np.ndarray) -> pa.Array:
    """An Arrow float64 array of `values` (NaN stays NaN, not null), sharing their memory when
    they are float64 and contiguous."""
    import pyarrow as pa

    data = np.ascontiguousarray(values, dtype=np.float64)
    return pa.Array.from_buffers(pa.float64(), len(data), [None, pa.py_buffer(data)])
