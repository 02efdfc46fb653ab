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
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ackbridge
from ackbridge.plugins import registry
from ackbridge.urls import parse_url, redact_url

CANARY = "Kq7ZcanaryX9"  # letters and digits only: the same before and after percent-escaping
_ODD = st.sampled_from([" ", "@", ":", "/", "%", "%40", "%zz", "#", "?", "\t", "[", "]", "'", '"', "é"])
PASSWORDS = st.builds(lambda a, b: "".join(a) + CANARY + "".join(b), st.lists(_ODD, max_size=3),
                      st.lists(_ODD, max_size=3))
#: Every registered scheme (TLS ones included): a new plugin is covered without an edit here.
REGISTERED = sorted(registry().adapters)
HOSTS = st.sampled_from(["127.0.0.1:1", "[::1]:1", "localhost:1", "", "127.0.0.1:notaport", "[::1"])
TAILS = st.sampled_from(["", "/", "/vhost", "?connect_timeout=1", "/%2f", "/a b", "?bad=%zz"])


@st.composite
def urls(draw: st.DrawFn, registered: str) -> str:
    password = draw(PASSWORDS)
    if draw(st.booleans()):
        password = quote(password, safe="")
    user = draw(st.sampled_from(["guest", "", "u@x", "user name"]))
    shape = draw(st.sampled_from(["full", "no-host", "no-at"]))
    scheme = draw(st.sampled_from([f"{registered}://", f"{registered.upper()}://", ""]))
    host, tail = draw(HOSTS), draw(TAILS)
    if shape == "no-at":
        # amqp://user:secret -- the host was forgotten. An unescaped '@' here would make the
        # rest a host name in any parser's reading, so this shape has none.
        return f"{scheme}{user.replace('@', '')}:{password.replace('@', '')}{tail}"
    return f"{scheme}{user}:{password}@{'' if shape == 'no-host' else host}{tail}"


def _shown(error: BaseException) -> str:
    return "".join(traceback.format_exception(error)) + repr(error) + str(error)


@pytest.mark.parametrize("scheme", REGISTERED)
def test_the_canary_never_shows(scheme: str, caplog: pytest.LogCaptureFixture, tmp_path: Path,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    # local:// names a file, not a listener: "connecting" creates it, so in a scratch folder.
    monkeypatch.chdir(tmp_path)

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(url=urls(scheme))
    def check(url: str) -> None:
        _check_url(url, caplog)

    check()


def _check_url(url: str, caplog: pytest.LogCaptureFixture) -> None:
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


SHAPES = [
    "{scheme}://user:{canary} x@127.0.0.1:1/",  # a space in the password
    "{scheme}://user:{canary}",  # the host forgotten
    "{scheme}://user:a@{canary}@127.0.0.1:1/",  # @ in the password
    "{scheme}://user:{canary}%40x@127.0.0.1:1/",  # percent-escape
    "{scheme}://user:{canary}@[::1]:1/",  # IPv6
    "user:{canary}@127.0.0.1:1",  # no scheme
    "{scheme}://u:{canary}\n@h",  # a newline
]


@pytest.mark.parametrize("shape", SHAPES, ids=["space", "no-host", "at", "percent", "ipv6", "no-scheme", "newline"])
@pytest.mark.parametrize("scheme", REGISTERED)
def test_the_shapes_of_the_issue(scheme: str, shape: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.chdir(tmp_path)  # local:// opens a file where nothing listens
    url = shape.format(scheme=scheme, canary=CANARY)
    assert CANARY not in redact_url(url)
    with caplog.at_level(logging.DEBUG):
        try:
            ackbridge.connect(url, connect_timeout=2, reconnect=False).close()
        except ackbridge.AckbridgeError as exc:
            assert CANARY not in _shown(exc)
        else:
            # Only a broker that needs no listener (the embedded one: a file) opens here.
            assert registry().adapter(scheme).name == "embedded", url
    for record in caplog.records:
        assert CANARY not in record.getMessage() + (record.exc_text or ""), url
