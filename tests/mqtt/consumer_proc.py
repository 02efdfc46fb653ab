"""Child process for the SIGKILL test: consume N messages, never settle, report, wait to be killed."""

from __future__ import annotations

import sys
import time

import ackbridge


def main() -> None:
    url, topic, client_id, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    conn = ackbridge.connect(url, client_id=client_id)
    consumer = conn.consume(topic, prefetch=count)
    got = 0
    end = time.monotonic() + 30
    while got < count and time.monotonic() < end:
        if consumer.get(timeout=1.0) is not None:
            got += 1
    print(f"RECEIVED {got}", flush=True)
    time.sleep(60)  # hold every delivery unsettled until the parent SIGKILLs us


if __name__ == "__main__":
    main()
