"""The public API as a type checker and an IDE see it, and the conveniences of issue 16."""

from __future__ import annotations

import asyncio
import inspect
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import ackbridge
from ackbridge.options import CONNECTION_OPTIONS, CORE_OPTIONS

USER_PROGRAM = textwrap.dedent("""
    import ackbridge

    def main() -> None:
        with ackbridge.connect("local://x.db", prefetch=10) as conn:
            conn.publish("orders", b"{}", mesage_id="1")
""")


def test_mypy_strict_catches_a_typo_in_publish(tmp_path: Path) -> None:
    # An editable install of ackbridge goes through setuptools' import hook (the embedded
    # broker's source is mapped in), which mypy does not follow: point it at the source.
    env = dict(os.environ, MYPYPATH=str(Path(ackbridge.__file__).resolve().parents[1]))
    program = tmp_path / "user_program.py"
    program.write_text(USER_PROGRAM)
    result = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(program)],
                            capture_output=True, text=True, cwd=tmp_path, timeout=300, check=False, env=env)
    assert result.returncode == 1, result.stdout
    assert 'Unexpected keyword argument "mesage_id"' in result.stdout, result.stdout
    program.write_text(USER_PROGRAM.replace("mesage_id", "message_id"))
    clean = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(program)],
                           capture_output=True, text=True, cwd=tmp_path, timeout=300, check=False, env=env)
    assert clean.returncode == 0, clean.stdout


@pytest.mark.parametrize("function", [ackbridge.connect, ackbridge.connect_async])
def test_connect_names_every_shared_option(function: object) -> None:
    params = inspect.signature(function).parameters  # type: ignore[arg-type]
    for spec in (*CORE_OPTIONS, *CONNECTION_OPTIONS):
        assert params[spec.name].kind is inspect.Parameter.KEYWORD_ONLY, spec.name


def test_plugin_options_still_checked_with_did_you_mean(tmp_path: Path) -> None:
    with pytest.raises(ackbridge.InvalidOptionError, match="did you mean 'fsync'"):
        ackbridge.connect(f"local://{tmp_path}/t.db", fsinc=False)


def test_keyword_wins_over_url_query_and_none_means_not_given(tmp_path: Path) -> None:
    with ackbridge.connect(f"local://{tmp_path}/t.db?prefetch=7", window=5) as conn:
        assert conn._options["prefetch"] == 7 and conn._options["window"] == 5
    with ackbridge.connect(f"local://{tmp_path}/t.db?prefetch=7", prefetch=9) as conn:
        assert conn._options["prefetch"] == 9


def test_process_acks_on_success_and_rejects_or_requeues_on_error(tmp_path: Path) -> None:
    with ackbridge.connect(f"local://{tmp_path}/p.db") as conn:
        conn.declare_queue("q")
        for i in range(3):
            conn.publish("q", str(i).encode()).result()
        consumer = conn.consume("q", prefetch=1)
        first = consumer.get(timeout=5)
        assert first is not None
        with first.process():
            pass
        assert first.state is ackbridge.State.ACKED
        second = consumer.get(timeout=5)
        assert second is not None
        with pytest.raises(ValueError), second.process():
            raise ValueError("boom")
        assert second.state is ackbridge.State.REJECTED
        third = consumer.get(timeout=5)
        assert third is not None
        with pytest.raises(ValueError), third.process(requeue=True):
            raise ValueError("again")
        assert third.state is ackbridge.State.REQUEUED
        consumer.close()


def test_async_confirm_is_awaitable_and_async_process(tmp_path: Path) -> None:
    async def main() -> None:
        async with await ackbridge.connect_async(f"local://{tmp_path}/a.db") as conn:
            await conn.declare_queue("q")
            confirm = await conn.publish("q", b"x")
            outcome = await confirm
            assert outcome.confirmed and repr(outcome) == "ConfirmOutcome(status=confirmed)"
            consumer = await conn.consume("q")
            delivery = await consumer.get(timeout=5)
            assert delivery is not None
            async with delivery.process():
                pass
            assert delivery.state is ackbridge.State.ACKED
            await consumer.close()

    asyncio.run(main())


def test_every_public_name_has_a_docstring() -> None:
    missing = []
    for name in ackbridge.__all__:
        obj = getattr(ackbridge, name)
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue
        if not inspect.getdoc(obj):
            missing.append(name)
        if inspect.isclass(obj) and not issubclass(obj, BaseException):
            for attr, member in vars(obj).items():
                if attr.startswith("_") or not callable(member):
                    continue
                if not inspect.getdoc(member):
                    missing.append(f"{name}.{attr}")
    assert not missing, f"public names without a docstring: {missing}"


def test_connect_async_takes_the_options_connect_declares() -> None:
    sync, twin = inspect.signature(ackbridge.connect), inspect.signature(ackbridge.connect_async)
    assert list(twin.parameters) == list(sync.parameters)


def test_a_typo_in_consume_or_publisher_options_says_did_you_mean(tmp_path: Path) -> None:
    url = f"local://{tmp_path}/kw.db"
    with ackbridge.connect(url) as conn:
        with pytest.raises(ackbridge.InvalidOptionError, match="did you mean 'prefetch'"):
            conn.consume("q", prefech=5)  # type: ignore[call-arg]
        with pytest.raises(ackbridge.InvalidOptionError, match="did you mean 'retransmit'"):
            conn.publisher(retransmitt=True)  # type: ignore[call-arg]

    async def twin() -> None:
        async with await ackbridge.connect_async(url) as aconn:
            with pytest.raises(ackbridge.InvalidOptionError, match="did you mean 'dedupe_window'"):
                await aconn.consume("q", dedup_window=5)  # type: ignore[call-arg]
            with pytest.raises(ackbridge.InvalidOptionError, match="did you mean 'window'"):
                aconn.publisher(windw=5)  # type: ignore[call-arg]

    asyncio.run(twin())


def test_on_gap_raise_is_refused_for_a_handler_consumer(tmp_path: Path) -> None:
    with ackbridge.connect(f"local://{tmp_path}/gap.db") as conn:
        with pytest.raises(ackbridge.InvalidOptionError, match="on_gap"):
            conn.consume("q", handler=lambda d: d.ack(), on_gap="raise")
