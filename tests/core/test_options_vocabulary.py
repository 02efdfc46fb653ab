"""One option vocabulary: the shared connection options have one spelling on
every registered plugin, and old per-plugin spellings point to it."""

from __future__ import annotations

import pytest

from ackbridge.connect import resolve
from ackbridge.errors import InvalidOptionError
from ackbridge.options import CONNECTION_OPTIONS, RENAMED_OPTIONS, ConnectionSettings
from ackbridge.plugins import registry

SHARED = {"connect_timeout": 5, "heartbeat": 20, "reconnect": False, "reconnect_max_delay": 2,
          "tls_verify": True, "tls_ca_file": None, "tls_cert_file": None, "tls_key_file": None}
SCHEMES = sorted(registry().adapters)


def _url(scheme: str) -> str:
    return f"{scheme}:///tmp/vocab.db" if scheme == "local" else f"{scheme}://guest:guest@127.0.0.1:1/"


def test_every_shared_option_is_swept() -> None:
    assert set(SHARED) == {spec.name for spec in CONNECTION_OPTIONS}


@pytest.mark.parametrize("scheme", SCHEMES)
def test_shared_options_have_one_spelling_on_every_plugin(scheme: str) -> None:
    _, spec, _, transport = resolve(_url(scheme), SHARED)
    settings = ConnectionSettings.from_options(transport)
    assert settings.connect_timeout == 5.0 and settings.heartbeat == 20.0 and settings.reconnect is False
    assert settings.reconnect_max_delay == 2.0
    own = {s.name for s in spec.option_specs}
    assert not own & set(SHARED), f"{spec.name} redeclares shared options {sorted(own & set(SHARED))}"


@pytest.mark.parametrize("scheme", SCHEMES)
def test_shared_options_arrive_typed_from_the_url_query(scheme: str) -> None:
    url = _url(scheme) + "?heartbeat=15&reconnect=off&connect_timeout=3"
    _, _, _, transport = resolve(url, {})
    assert (transport["heartbeat"], transport["reconnect"], transport["connect_timeout"]) == (15.0, False, 3.0)


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize(("old", "new"), sorted(RENAMED_OPTIONS.items()))
def test_old_spellings_say_did_you_mean(scheme: str, old: str, new: str) -> None:
    with pytest.raises(InvalidOptionError, match=f"did you mean {new!r}"):
        resolve(_url(scheme), {old: "1"})


def test_reconnect_max_delay_reaches_the_retransmit_back_off(tmp_path: object) -> None:
    """The publisher's retransmit back-off reads the connection's option, not a default of its own."""
    import ackbridge

    with ackbridge.connect(f"local://{tmp_path}/backoff.db", reconnect_max_delay=2.5) as conn:
        assert conn.settings.reconnect_max_delay == 2.5
        assert conn.publisher()._backoff.max_delay == 2.5
    with ackbridge.connect(f"local://{tmp_path}/backoff.db") as conn:
        default = next(s.default for s in CONNECTION_OPTIONS if s.name == "reconnect_max_delay")
        assert conn.publisher()._backoff.max_delay == default
