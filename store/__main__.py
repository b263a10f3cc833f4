"""`python -m store --root DIR`: a store demo until the broker daemon lands (`make run`).

Opens (and recovers) the store, appends a few messages, reads them back through the consume
queue and the key index, prints the recovery report and the offsets, and shuts down cleanly.
"""

from __future__ import annotations

import argparse
import sys
import time

from config.logging_setup import configure_logging
from config.store_config import MessageStoreConfig
from store.message import Message, decode_record
from store.message_store import MessageStore
from store.store_lock import StoreLockedError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m store", description=__doc__)
    parser.add_argument("--root", default="./data/store", help="store directory")
    parser.add_argument("--count", type=int, default=10, help="messages to append")
    args = parser.parse_args(argv)
    configure_logging()
    store = MessageStore(MessageStoreConfig(store_path_root_dir=args.root))
    try:
        report = store.start()
    except StoreLockedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    try:
        print(f"recovered {args.root}: {report}")
        start = store.get_max_offset_in_queue("DemoTopic", 0)
        stamp = int(time.time() * 1000)
        for i in range(args.count):
            props = {"TAGS": "demo", "KEYS": f"demo-{stamp}-{i}"}
            result = store.put_message(
                Message("DemoTopic", f"hello {i}".encode(), 0, props, born_timestamp=stamp)
            )
            if not result.ok:
                print(f"error: put failed: {result.status.name} {result.remark}", file=sys.stderr)
                return 1
        store.wait_dispatched()
        got = store.get_message("DemoTopic", 0, start, 32)
        for raw in got.messages:
            record = decode_record(raw)
            print(
                f"  queue offset {record.queue_offset}: {record.body.decode()} keys={record.keys}"
            )
        hits = store.query_message("DemoTopic", f"demo-{stamp}-0", 4)
        print(f"query by key demo-{stamp}-0: {len(hits.messages)} hit(s)")
        print(f"runtime: {store.runtime_info()}")
    finally:
        store.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
