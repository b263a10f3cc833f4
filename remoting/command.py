"""`RemotingCommand` (RocketMQ's class of the same name): one request or response.

`ext_fields` holds the custom header as strings, the way every serialize type carries it; the
typed views in `remoting.headers` convert to and from it. `serialize_type` records what the
peer used, so a response goes back in the request's type.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rmqpy.remoting.codes import BROKER_VERSION, LanguageCode, ResponseCode, SerializeType
from rmqpy.remoting.wire import RPC_ONEWAY, RPC_RESPONSE


@dataclass(slots=True)
class RemotingCommand:
    code: int
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    language: LanguageCode = LanguageCode.PYTHON
    version: int = BROKER_VERSION
    serialize_type: SerializeType = SerializeType.JSON
    # The whole frame this command encodes to, when it was written along with the command
    # (the compiled send path answers so); frames are then taken as they are.
    wire: bytes | None = field(default=None, compare=False, repr=False)

    @property
    def is_response(self) -> bool:
        return bool(self.flag & RPC_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & RPC_ONEWAY)

    def response(
        self,
        code: int = ResponseCode.SUCCESS,
        remark: str | None = None,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
    ) -> RemotingCommand:
        """The answer to this request: same opaque and serialize type, RESPONSE flag set."""
        return RemotingCommand(
            code=code,
            opaque=self.opaque,
            flag=RPC_RESPONSE,
            remark=remark,
            ext_fields=ext_fields if ext_fields is not None else {},
            body=body,
            serialize_type=self.serialize_type,
        )
