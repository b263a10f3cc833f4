"""A writer process for the crash tests: puts messages from several threads and reports each
acknowledged one on stdout (`thread seq queue queue_offset phy`) until it is killed."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

from rmqpy.config.logging_setup import configure_logging
from rmqpy.config.store_config import FlushDiskType
from rmqpy.store.message import Message
from rmqpy.store.message_store import MessageStore
from tests.conftest import small_config


def main() -> None:
    root, mode, threads, tag = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    configure_logging()
    store = MessageStore(small_config(Path(root), flush_disk_type=FlushDiskType[mode]))
    store.start()
    out_lock = threading.Lock()

    def produce(t: int) -> None:
        seq = 0
        while True:
            key = f"{tag}-{t}-{seq}"
            body = key.encode() * 8
            msg = Message("Crash", body, t % 4, {"KEYS": key, "TAGS": tag})
            result = store.put_message(msg)
            if result.ok:
                with out_lock:
                    sys.stdout.write(
                        f"{t} {seq} {t % 4} {result.queue_offset} {result.wrote_offset}\n"
                    )
                    sys.stdout.flush()
            seq += 1

    sys.stdout.write("ready\n")
    sys.stdout.flush()
    for t in range(threads):
        threading.Thread(target=produce, args=(t,), daemon=True).start()
    threading.Event().wait()


if __name__ == "__main__":
    main()
