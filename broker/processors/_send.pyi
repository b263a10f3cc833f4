from array import array
from collections.abc import Callable

from rmqpy.broker.context import RequestContext
from rmqpy.remoting.command import RemotingCommand
from rmqpy.store.commitlog import PutMessageResult
from rmqpy.store.message import Host, Message
from rmqpy.store.staged import StagedSends

NATIVE_CRC32: bool

class SendLane:
    def __init__(
        self,
        v1_keys: dict[str, str],
        v2_keys: dict[str, str],
        route: Callable[[str], int],
        writable: bool,
        cluster_name: str,
        region_id: str,
        answer_keys: tuple[str, str, str],
        store_host: Host,
        max_body: int,
    ) -> None: ...
    def stage(self, group: list[RequestContext]) -> StagedSends | None: ...
    def stage_read(self, peer: str, requests: list[RemotingCommand]) -> StagedSends | None: ...
    def stage_frames(
        self, peer: str, buf: memoryview, max_frame_length: int
    ) -> tuple[int, StagedSends, array[int], array[int]] | None: ...
    def answer_frames(
        self, requests: list[RemotingCommand], staged: StagedSends, store_host: Host
    ) -> list[bytes] | None: ...
    def answer_opaques(
        self, opaques: array[int], kinds: array[int], staged: StagedSends, store_host: Host
    ) -> list[bytes] | None: ...
    def answer_staged(
        self,
        group: list[RequestContext],
        staged: StagedSends,
        answers: list[RemotingCommand | None],
        timed_out: bool,
        store_host: Host,
    ) -> None: ...
    def group_messages(
        self,
        group: list[RequestContext],
        answers: list[RemotingCommand | None],
        slow: Callable[[RequestContext], list[Message] | RemotingCommand],
    ) -> tuple[list[list[Message]], list[int]]: ...
    def answer_all(
        self,
        group: list[RequestContext],
        owners: list[int],
        puts: list[list[Message]],
        results: list[PutMessageResult],
        answers: list[RemotingCommand | None],
        timed_out: bool,
        slow: Callable[[RequestContext, list[Message], PutMessageResult, bool], RemotingCommand],
    ) -> None: ...
