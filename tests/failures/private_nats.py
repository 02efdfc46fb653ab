"""A nats-server of the test's own (its port, config and JetStream store), started and SIGKILLed by the test.

Used where the shared server on 4222 cannot serve: a user and password, or a
kill and restart on the same JetStream store directory.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from tests.failures.private_mosquitto import free_port


class PrivateNats:
    """``with PrivateNats(...) as server:``; ``kill()`` then ``start()`` restarts it on the same store.

    JetStream's file store writes each message to its block file before the
    PubAck; ``sync_interval`` says how often nats-server fsyncs (default 2 min,
    ``always`` syncs every write). A SIGKILL loses nothing written (the page
    cache survives the process); only a power loss can lose what was not synced.
    """

    def __init__(self, *, users: dict[str, str] | None = None, sync_interval: str | None = None,
                 extra: str = "") -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="ab-nats-"))
        self.port = free_port()
        lines = [f"listen: 127.0.0.1:{self.port}",
                 "jetstream {", f'  store_dir: "{self.dir / "js"}"']
        if sync_interval is not None:
            lines.append(f"  sync_interval: {sync_interval}")
        lines.append("}")
        if users:
            entries = ", ".join(f'{{user: "{u}", password: "{p}"}}' for u, p in users.items())
            lines.append(f"authorization {{ users: [{entries}] }}")
        (self.dir / "nats.conf").write_text("\n".join(lines) + "\n" + extra)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(["nats-server", "-c", str(self.dir / "nats.conf")],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        end = time.monotonic() + 15
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                if time.monotonic() > end or self.proc.poll() is not None:
                    err = self.proc.stderr.read() if self.proc.stderr and self.proc.poll() is not None else b""
                    raise AssertionError(f"private nats-server did not start: {err!r}") from None
                time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL: no goodbye, no final flush of the store."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def url(self, user: str | None = None, password: str | None = None) -> str:
        auth = f"{user}:{password}@" if user is not None else ""
        return f"nats://{auth}127.0.0.1:{self.port}"

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

    def __enter__(self) -> PrivateNats:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)
