"""One parallel reader process (``parallelism=N`` starts N of them): its own broker
connection, driven by the source's runner over a pipe.

Started as ``python -m ackbridge_spark.push.reader_process``: stdin carries pickled
commands, the process's original stdout carries pickled replies (``sys.stdout``
is pointed at stderr so that nothing else can write into the protocol). Inside
is a plain :class:`~ackbridge_spark.push.source.AckbridgeStreamReader` over this
reader's sources: numbering, settle-after-commit, stale refusal, write-ahead
files and loss detection are the single reader's, run N times in parallel.

The process ends when the runner says ``stop`` or when its stdin closes (the
runner died, e.g. a SIGKILLed driver): the connection closes without settling
anything undecided, so the broker redelivers it.
"""

from __future__ import annotations

import logging
import os
import pickle
import sys
from typing import Any, BinaryIO

#: Commands: ("init", ConnectorOptions) ("latest", start, cap) ("partitions", start, end)
#: ("commit", end) ("available_now",) ("stop",). Replies: ("ok", value) or ("error", type name, text).


def serve(commands: BinaryIO, replies: BinaryIO) -> None:
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from ackbridge_spark.push.source import AckbridgeStreamReader

    reader: AckbridgeStreamReader | None = None

    def reply(value: Any) -> None:
        pickle.dump(value, replies, protocol=pickle.HIGHEST_PROTOCOL)
        replies.flush()

    try:
        while True:
            try:
                command = pickle.load(commands)
            except EOFError:
                return  # the runner is gone
            verb, args = command[0], command[1:]
            try:
                if verb == "init":
                    reader = AckbridgeStreamReader(args[0])
                    # Subscribe now: deliveries arrive while the other readers start and
                    # before the first trigger, so the first batch is not empty.
                    reader._ensure_connected()
                    result: Any = None
                elif reader is None:
                    raise RuntimeError(f"reader process: {verb!r} before 'init'")
                elif verb == "latest":
                    offset = reader.latestOffset(args[0], ReadMaxRows(args[1]))
                    result = (offset, reader.reportLatestOffset())
                elif verb == "partitions":
                    result = list(reader.partitions(args[0], args[1]))
                elif verb == "commit":
                    reader.commit(args[0])
                    result = reader.reportLatestOffset()
                elif verb == "available_now":
                    reader.prepareForTriggerAvailableNow()
                    result = None
                elif verb == "stop":
                    reply(("ok", None))
                    return
                else:
                    raise RuntimeError(f"reader process: unknown command {verb!r}")
            except Exception as exc:  # the runner re-raises it in the query
                reply(("error", type(exc).__name__, str(exc)))
                continue
            reply(("ok", result))
    finally:
        if reader is not None:
            reader.stop()


def main() -> None:
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    sys.stdout = sys.stderr  # nothing but replies on the protocol's fd
    os.dup2(sys.stderr.fileno(), 1)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="ackbridge reader %(process)d: %(levelname)s %(name)s: %(message)s")
    serve(sys.stdin.buffer, replies)


if __name__ == "__main__":
    main()
