import numpy as np
import numpy.typing as npt

def scan(
    buf: bytes | bytearray | memoryview, start: int, stop: int
) -> npt.NDArray[np.int64] | None: ...
