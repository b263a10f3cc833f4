import numpy as np
import numpy.typing as npt
import pyarrow as pa

def decode_batch(
    buf: bytes | memoryview, positions: npt.NDArray[np.int64]
) -> pa.RecordBatch | None: ...
