"""The queues the redelivery policy uses beside the application's queue."""

from __future__ import annotations


def delay_queue(queue: str, level: int, prefix: str | None = None) -> str:
    """The delay queue of back-off *level* (0-based) for *queue*: ``QUEUE.retry.<level>``."""
    return f"{prefix or queue + '.retry'}.{level}"


def dead_letter_queue(queue: str) -> str:
    """The dead-letter companion ``declare_queue`` makes on RabbitMQ and the embedded broker."""
    return f"{queue}.dlq"
