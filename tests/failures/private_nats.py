"""A nats-server of the test's own (its port, config and JetStream store), started and SIGKILLed by the test.

Used where the shared server on 4222 cannot serve: a user and password, or a
kill and restart on the same JetStream store directory.
"""

from __future__ import annotations

import asyncio

from tests.failures.private_server import PrivateServer


class PrivateNats(PrivateServer):
    """``with PrivateNats(...) as server:``; ``kill()`` then ``start()`` restarts it on the same store.

    JetStream's file store writes each message to its block file before the
    PubAck; ``sync_interval`` says how often nats-server fsyncs (default 2 min,
    ``always`` syncs every write). A SIGKILL loses nothing written (the page
    cache survives the process); only a power loss can lose what was not synced.
    """

    program, config, scheme = "nats-server", "nats.conf", "nats"
    start_timeout = 15.0

    def __init__(self, *, users: dict[str, str] | None = None, sync_interval: str | None = None,
                 extra: str = "") -> None:
        super().__init__("ab-nats-")
        lines = [f"listen: 127.0.0.1:{self.port}",
                 "jetstream {", f'  store_dir: "{self.dir / "js"}"']
        if sync_interval is not None:
            lines.append(f"  sync_interval: {sync_interval}")
        lines.append("}")
        if users:
            entries = ", ".join(f'{{user: "{u}", password: "{p}"}}' for u, p in users.items())
            lines.append(f"authorization {{ users: [{entries}] }}")
        (self.dir / self.config).write_text("\n".join(lines) + "\n" + extra)

    def add_stream(self, subject: str, *, user: str | None = None, password: str | None = None,
                   file_storage: bool = True, ack_wait: float = 30.0) -> None:
        """A work-queue stream (file store by default) and ackbridge's durable consumer for *subject*
        (*ack_wait*: seconds before JetStream redelivers an unacked message; 30 is its default)."""
        import nats
        from nats.js.api import AckPolicy, ConsumerConfig, RetentionPolicy, StorageType, StreamConfig

        from ackbridge_nats.naming import DEFAULT_DURABLE, stream_name

        async def run() -> None:
            client = await nats.connect(self.url(user, password))
            try:
                jsm = client.jsm()
                storage = StorageType.FILE if file_storage else StorageType.MEMORY
                await jsm.add_stream(StreamConfig(name=stream_name(subject), subjects=[subject],
                                                  retention=RetentionPolicy.WORK_QUEUE, storage=storage))
                await jsm.add_consumer(stream_name(subject), ConsumerConfig(
                    durable_name=DEFAULT_DURABLE, ack_policy=AckPolicy.EXPLICIT, filter_subject=subject,
                    ack_wait=ack_wait))
            finally:
                await client.close()

        asyncio.run(run())

    def stream_messages(self, subject: str, *, user: str | None = None, password: str | None = None) -> int:
        """Messages the stream of *subject* holds, as the server says."""
        import nats

        from ackbridge_nats.naming import stream_name

        async def run() -> int:
            client = await nats.connect(self.url(user, password))
            try:
                info = await client.jsm().stream_info(stream_name(subject))
                return int(info.state.messages)
            finally:
                await client.close()

        return asyncio.run(run())
