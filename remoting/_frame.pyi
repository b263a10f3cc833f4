from collections.abc import Sequence

from rmqpy.remoting.command import RemotingCommand
from rmqpy.remoting.errors import RemoteProtocolError

def decode_frames(
    buf: bytearray, pos: int, max_frame_length: int, first: bool
) -> tuple[list[RemotingCommand], int, RemoteProtocolError | None]: ...
def encode_frames(cmds: Sequence[RemotingCommand]) -> list[bytes]: ...
