"""BrokerHarness for RabbitMQ streams, answering from the broker's side.

A stream keeps every message; what the broker knows of a consumer is the
offset stored under its reference. So ``ready`` counts the records after the
offset stored for the plugin's default reference (every message not settled),
read on a raw rstream connection of the harness's own; the broker knows
nothing of what was handed out (``counts_deliveries = False``). Clients under
test go through a :class:`~ackbridge.testing.proxy.FaultProxy`: a cut is a TCP
reset, held confirms are frames the proxy does not forward yet.
"""

from __future__ import annotations

import uuid
from typing import Any

from ackbridge.testing.harness import ProxiedHarness
from ackbridge.testing.proxy import FaultProxy
from tests.rabbitmq_streams.streams import StreamAdmin

PORT = 5552
REFERENCE = "ackbridge"


class StreamsHarness(ProxiedHarness):
    name = "rabbitmq-streams"
    kind = "rabbitmq-streams"
    can_count_unacked = False
    can_hold_confirms = True
    counts_deliveries = False

    def __init__(self) -> None:
        self.run_id = uuid.uuid4().hex[:8]
        self.admin = StreamAdmin()
        self.proxy = FaultProxy(PORT)

    def url(self, **options: Any) -> str:
        query = "&".join(f"{k}={v}" for k, v in options.items())
        return f"rabbitmq-stream://guest:guest@127.0.0.1:{self.proxy.port}/" + (f"?{query}" if query else "")

    def new_queue(self, *, dead_letter: bool = True) -> str:
        return self.admin.new_stream(f"abtest-{self.run_id}")

    def unroutable_target(self) -> str | None:
        return self.admin.name_only(f"abtest-{self.run_id}-missing")

    def ready(self, queue: str) -> int:
        stored = self.admin.broker_offset(queue, REFERENCE)
        start = 0 if stored is None else stored + 1
        found = sum(1 for offset, _ in self.admin.records(queue) if offset >= start)
        return found

    def unacked(self, queue: str) -> int:
        raise NotImplementedError("a stream does not know what a consumer was handed")

    def dead_lettered(self, queue: str) -> list[bytes]:
        return []

    def cleanup(self) -> None:
        self.proxy.close()
        self.admin.__exit__()
