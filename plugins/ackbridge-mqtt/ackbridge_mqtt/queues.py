"""The topology verbs: a "queue" is a topic (or topic filter) plus the persistent
session that holds its messages (names in :mod:`ackbridge_mqtt.sessions`).

Each verb is a short-lived client connecting as the session's client id:
subscribing creates the session, a clean connect discards it, and the
CONNACK's session-present flag says whether it exists.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ackbridge.errors import BrokerError, InvalidOptionError
from ackbridge.messages import QueueInfo
from ackbridge.urls import BrokerURL
from ackbridge_mqtt.options import MqttSettings
from ackbridge_mqtt.sessions import check_source, consumer_session_id, dead_letter_topic, is_filter, session_id

if TYPE_CHECKING:
    from ackbridge_mqtt.link import Link

#: Makes a short-lived link: (role, client id, clean, topics).
NewLink = Callable[[str, str, bool, Sequence[str]], "Link"]


class Queues:
    def __init__(self, settings: MqttSettings, url: BrokerURL, new_link: NewLink) -> None:
        self._settings = settings
        self._url = url
        self._new_link = new_link

    def _dead_letter(self, name: str) -> str:
        dlq = dead_letter_topic(self._settings.dead_letter_template, name)
        if is_filter(name):
            try:
                check_source(dlq)
            except InvalidOptionError:
                raise InvalidOptionError(
                    f"the dead-letter filter of {name!r} would be {dlq!r}, which is no valid MQTT filter; set "
                    "dead_letter_topic= so that it is (e.g. 'dlq/{topic}'), or declare_queue(..., "
                    "dead_letter=False)") from None
        return dlq

    def _sessions(self, name: str, dead_letter: bool) -> list[tuple[str, str]]:
        """(session id, topic) pairs that hold *name* (and its dead-letter topic)."""
        found = [(consumer_session_id(name, self._settings.client_id), name)]
        if dead_letter:
            dlq = self._dead_letter(name)
            found.append((session_id(dlq), dlq))
        return found

    def declare(self, name: str, *, dead_letter: bool = True) -> None:
        """Create the persistent session(s) that hold *name*'s messages until consumed."""
        for session, topic in self._sessions(name, dead_letter):
            self._ensure_session(session, topic)

    def delete(self, name: str, *, dead_letter: bool = True) -> None:
        """End the persistent session(s) of *name*: a clean connect discards the stored
        session and the new one ends when it disconnects (its queued messages go)."""
        for session, _topic in self._sessions(name, dead_letter):
            self._clean_connect(session)

    def purge(self, name: str) -> int | None:
        """Emulated: the session is ended and created again, empty (MQTT cannot drop
        queued messages otherwise). The broker does not say how many went."""
        session, topic = self._sessions(name, False)[0]
        self._clean_connect(session)
        self._ensure_session(session, topic)
        return None

    def inspect(self, name: str) -> QueueInfo:
        """Whether *name* has a persistent session (the CONNACK's session-present flag);
        MQTT tells no depth or consumers. Raises BrokerError when it has none."""
        session = consumer_session_id(name, self._settings.client_id)
        if not self._session_present(session):
            raise BrokerError(
                f"MQTT topic {name!r} has no persistent session on {self._url.redacted}: messages published "
                "to it are kept for nobody (declare the queue, or subscribe once, first)")
        dlq = dead_letter_topic(self._settings.dead_letter_template, name)
        return QueueInfo(name, dead_letter=dlq if self._session_present(session_id(dlq)) else None)

    def _session_present(self, session: str) -> bool:
        link = self._new_link("inspect", session, False, ())
        link.start()
        present = bool(link.session_present)
        link.stop(graceful=True)
        if not present:
            self._clean_connect(session)  # the look created an empty session: take it away again
        return present

    def _clean_connect(self, session: str) -> None:
        link = self._new_link("delete", session, True, ())
        link.start()
        link.stop(graceful=True)

    def _ensure_session(self, session: str, topic: str) -> None:
        link = self._new_link("declare", session, False, [topic])
        link.start()
        link.stop(graceful=False)
