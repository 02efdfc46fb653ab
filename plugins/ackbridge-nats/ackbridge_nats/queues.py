"""Streams and durable consumers: what declare_queue creates and subscribe finds.

A queue's stream keeps work-queue retention (an acked message is removed, as
from a queue); its dead-letter stream keeps limits retention (kept until read
and purged or aged out by the server's limits).
"""

from __future__ import annotations

import contextlib
import json

from nats.aio.client import Client
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import BadRequestError, NotFoundError

from ackbridge.errors import BrokerError
from ackbridge.messages import QueueInfo
from ackbridge_nats.naming import check_subject, dead_letter_subject, stream_name
from ackbridge_nats.options import NatsSettings

#: JetStream's err_code for "stream name already in use with a different configuration".
STREAM_NAME_IN_USE = 10058


async def ensure_stream(client: Client, subject: str, settings: NatsSettings, *, work_queue: bool) -> str:
    name = stream_name(subject)
    config = StreamConfig(
        name=name, subjects=[subject],
        retention=RetentionPolicy.WORK_QUEUE if work_queue else RetentionPolicy.LIMITS,
        storage=StorageType.MEMORY if settings.storage == "memory" else StorageType.FILE,
        duplicate_window=settings.duplicate_window)
    jsm = client.jsm()
    try:
        await jsm.add_stream(config)
    except BadRequestError as exc:
        if exc.err_code != STREAM_NAME_IN_USE:
            raise
        info = await jsm.stream_info(name)  # declared before with other settings: keep it if it stores *subject*
        if subject not in (info.config.subjects or []):
            raise BrokerError(f"stream {name} exists and does not store subject {subject!r}", exc.code) from None
    return name


async def declare(client: Client, queue: str, settings: NatsSettings, *, dead_letter: bool) -> None:
    check_subject(queue, "queue")
    if dead_letter:
        dlq = check_subject(dead_letter_subject(settings.dead_letter_template, queue), "dead-letter subject")
        await ensure_stream(client, dlq, settings, work_queue=False)
    stream = await ensure_stream(client, queue, settings, work_queue=True)
    await ensure_consumer(client, stream, queue, settings, max_ack_pending=None)


async def find_stream(client: Client, subject: str) -> str:
    """The stream storing *subject*: the one ackbridge names after it, else whichever does."""
    jsm = client.jsm()
    name = stream_name(subject)
    with contextlib.suppress(NotFoundError):
        info = await jsm.stream_info(name)
        if subject in (info.config.subjects or []):
            return name
    try:
        return await jsm.find_stream_name_by_subject(subject)
    except NotFoundError:
        raise BrokerError(f"no stream stores subject {subject!r}: declare_queue({subject!r}) first", 404) from None


async def ensure_consumer(client: Client, stream: str, subject: str, settings: NatsSettings, *,
                          max_ack_pending: int | None) -> None:
    """Create the durable pull consumer, or update its settings (max_ack_pending from prefetch)."""
    config = ConsumerConfig(
        durable_name=settings.durable, ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.ALL,
        ack_wait=settings.ack_wait, max_deliver=settings.max_deliver or -1, filter_subject=subject)
    current = None
    with contextlib.suppress(NotFoundError):
        current = (await client.jsm().consumer_info(stream, settings.durable)).config
    config.max_ack_pending = max_ack_pending if max_ack_pending is not None else (
        current.max_ack_pending if current is not None else None)
    if current is not None and all(getattr(current, f) == getattr(config, f) for f in _COMPARED):
        return  # unchanged: an update would only make the server redo the consumer's state
    await client.jsm().add_consumer(stream, config)


_COMPARED = ("ack_policy", "ack_wait", "max_deliver", "filter_subject", "max_ack_pending")


async def inspect(client: Client, queue: str, settings: NatsSettings) -> QueueInfo:
    """What the server holds for *queue*: its durable's not-yet-delivered (``messages``)
    and delivered-not-acked (``unacked``) counts, and its dead-letter stream's size."""
    jsm = client.jsm()
    stream = await find_stream(client, queue)
    try:
        consumer = await jsm.consumer_info(stream, settings.durable)
    except NotFoundError:
        raise BrokerError(f"queue {queue!r} has no durable consumer {settings.durable!r}: "
                          f"declare_queue({queue!r}) first", 404) from None
    dlq: str | None = dead_letter_subject(settings.dead_letter_template, queue)
    dead: int | None = None
    try:
        dead = int((await jsm.stream_info(stream_name(dlq or ""))).state.messages)
    except NotFoundError:
        dlq = None  # no dead-letter companion (declared with dead_letter=False)
    return QueueInfo(queue, messages=int(consumer.num_pending or 0), unacked=int(consumer.num_ack_pending or 0),
                     consumers=None, dead_letter=dlq, dead_lettered=dead)


async def own_stream(client: Client, queue: str) -> str | None:
    """The stream ackbridge declared for *queue* (named after it, storing exactly it), or
    None when there is none. A stream that stores *queue* among other subjects was made
    by someone else: deleting or purging it would take their messages too, so refused."""
    name = stream_name(queue)
    try:
        info = await client.jsm().stream_info(name)
    except NotFoundError:
        other = None
        with contextlib.suppress(NotFoundError):
            other = await client.jsm().find_stream_name_by_subject(queue)
        if other is not None:
            raise BrokerError(f"subject {queue!r} is stored by stream {other}, which ackbridge did not declare: "
                              f"delete or purge it with the nats CLI", 409) from None
        return None
    if list(info.config.subjects or []) != [queue]:
        raise BrokerError(f"stream {name} stores {info.config.subjects}, not only {queue!r}: ackbridge deletes and "
                          f"purges only the streams declare_queue made", 409)
    return name


async def delete(client: Client, queue: str, settings: NatsSettings, *, dead_letter: bool) -> None:
    """Delete *queue*'s stream (its durable consumers go with it), and its dead-letter
    stream with *dead_letter*. A queue that does not exist is not an error."""
    names = [queue]
    if dead_letter:
        names.append(dead_letter_subject(settings.dead_letter_template, queue))
    for subject in names:
        stream = await own_stream(client, subject)
        if stream is not None:
            with contextlib.suppress(NotFoundError):  # deleted meanwhile by another client
                await client.jsm().delete_stream(stream)


async def purge(client: Client, queue: str) -> int:
    """Drop every message *queue*'s stream stores; return how many.

    JetStream keeps no ready/unacked split in storage: a delivered message waiting for
    its ack is stored like the rest and goes too (its late ack then settles nothing).
    The purge goes through JetStream's request API directly (``STREAM.PURGE``), whose
    reply says how many were purged; nats-py's ``purge_stream`` returns only success."""
    stream = await own_stream(client, queue)
    if stream is None:
        raise BrokerError(f"no stream stores subject {queue!r}: declare_queue({queue!r}) first", 404)
    reply = await client.request(f"$JS.API.STREAM.PURGE.{stream}", b"{}", timeout=10.0)
    answer = json.loads(reply.data)
    if "error" in answer:
        error = answer["error"]
        raise BrokerError(f"purge of stream {stream} refused: {error.get('description', error)}",
                          int(error.get("code", 500)))
    return int(answer.get("purged", 0))
