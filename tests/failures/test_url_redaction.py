"""Issue 15: a canary password never shows, whatever shape the URL has.

Hypothesis builds URLs (spaces, a forgotten host, ``@`` in the password,
percent-escapes, IPv6, no scheme, odd ports and queries) around a canary
password; connecting (to a port where nothing listens, or failing to parse)
must not show the canary in the error's message, repr, chained traceback, or
any log record, nor in the parsed URL's str/repr.
"""

from __future__ import annotations

import logging
import traceback
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ackbridge
from ackbridge.urls import parse_url, redact_url

CANARY = "Kq7ZcanaryX9"  # letters and digits only: the same before and after percent-escaping
_ODD = st.sampled_from([" ", "@", ":", "/", "%", "%40", "%zz", "#", "?", "\t", "[", "]", "'", '"', "é"])
PASSWORDS = st.builds(lambda a, b: "".join(a) + CANARY + "".join(b), st.lists(_ODD, max_size=3),
                      st.lists(_ODD, max_size=3))
SCHEMES = st.sampled_from(["amqp://", "amqps://", "mqtt://", "amqp10://", "AMQP://", ""])
HOSTS = st.sampled_from(["127.0.0.1:1", "[::1]:1", "localhost:1", "", "127.0.0.1:notaport", "[::1"])
TAILS = st.sampled_from(["", "/", "/vhost", "?connect_timeout=1", "/%2f", "/a b", "?bad=%zz"])


@st.composite
def urls(draw: st.DrawFn) -> str:
    password = draw(PASSWORDS)
    if draw(st.booleans()):
        password = quote(password, safe="")
    user = draw(st.sampled_from(["guest", "", "u@x", "user name"]))
    shape = draw(st.sampled_from(["full", "no-host", "no-at"]))
    scheme, host, tail = draw(SCHEMES), draw(HOSTS), draw(TAILS)
    if shape == "no-at":
        # amqp://user:secret -- the host was forgotten. An unescaped '@' here would make the
        # rest a host name in any parser's reading, so this shape has none.
        return f"{scheme}{user.replace('@', '')}:{password.replace('@', '')}{tail}"
    return f"{scheme}{user}:{password}@{'' if shape == 'no-host' else host}{tail}"


def _shown(error: BaseException) -> str:
    return "".join(traceback.format_exception(error)) + repr(error) + str(error)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(url=urls())
def test_the_canary_never_shows(url: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.clear()
    assert CANARY not in redact_url(url)
    try:
        parsed = parse_url(url)
    except ackbridge.AckbridgeError as exc:
        assert CANARY not in _shown(exc), url
    else:
        assert CANARY not in str(parsed) + repr(parsed) + parsed.redacted, url
    if parsed_host_is_safe(url):
        with caplog.at_level(logging.DEBUG):
            try:
                ackbridge.connect(url, connect_timeout=2, reconnect=False).close()
            except ackbridge.AckbridgeError as exc:
                assert CANARY not in _shown(exc), url
    for record in caplog.records:
        assert CANARY not in record.getMessage() + (record.exc_text or ""), url


def parsed_host_is_safe(url: str) -> bool:
    """Connect only where nothing listens (port 1) or the URL cannot parse: never a live broker."""
    try:
        parsed = parse_url(url)
    except ackbridge.AckbridgeError:
        return True
    return parsed.port == 1 and parsed.host in ("127.0.0.1", "::1", "localhost")


@pytest.mark.parametrize("url", [
    f"amqp://user:{CANARY} x@127.0.0.1:1/",  # a space in the password
    f"amqp://user:{CANARY}",  # the host forgotten
    f"amqp://user:a@{CANARY}@127.0.0.1:1/",  # @ in the password
    f"amqp://user:{CANARY}%40x@127.0.0.1:1/",  # percent-escape
    f"amqp://user:{CANARY}@[::1]:1/",  # IPv6
    f"user:{CANARY}@127.0.0.1:1",  # no scheme
    f"amqp://u:{CANARY}\n@h",  # a newline
])
def test_the_shapes_of_the_issue(url: str) -> None:
    with pytest.raises(ackbridge.AckbridgeError) as info:
        ackbridge.connect(url, connect_timeout=2, reconnect=False).close()
    assert CANARY not in _shown(info.value)
