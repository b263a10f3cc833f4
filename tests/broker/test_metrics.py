import time

from rmqpy.broker.metrics import BrokerMetrics
from rmqpy.remoting.codes import RequestCode, ResponseCode


def test_the_sends_of_one_read_count_once_each_under_their_own_code() -> None:
    metrics = BrokerMetrics()
    v2, v1 = RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_MESSAGE
    received = time.monotonic() - 0.002  # answered 2 ms after the read arrived

    metrics.record_answered([v2, v1, v2, v2], ResponseCode.SUCCESS, received)
    metrics.record_answered([v2], ResponseCode.SUCCESS, received)

    sends_v2 = metrics.rpc[(v2, ResponseCode.SUCCESS, False)]
    sends_v1 = metrics.rpc[(v1, ResponseCode.SUCCESS, False)]
    assert (sends_v2.count, sends_v1.count) == (4, 1)
    assert 4 * 0.002 <= sends_v2.total < 4 * 1.0
    assert 0.002 <= sends_v1.total < 1.0
    assert metrics.rpc.keys() == {(v2, 0, False), (v1, 0, False)}
