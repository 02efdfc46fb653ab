"""Options are checked before a query starts: at load() for the source, at
save()/start() for the sink, with a "did you mean" over the connector's options
and the broker plugin's, and never a password in the message."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ackbridge.errors import InvalidOptionError
from ackbridge_spark.options import parse

from .helpers import RABBIT_URL, Broker, make_spark

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]

CANARY = "canary-Pw-51c0de"


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = make_spark("ackbridge-option-checks")
    yield session
    session.stop()


@pytest.mark.parametrize(("given", "expected"), [
    ({"maxRecordPerBatch": "5"}, "did you mean 'maxRecordsPerBatch'"),
    ({"failOnDataLos": "true"}, "did you mean 'failOnDataLoss'"),
    ({"lease_timeot": "3"}, "did you mean 'lease_timeout'"),  # a plugin option
    ({"leaseTimeout": "3"}, "did you mean 'lease_timeout'"),  # camelCase of a plugin option
    ({"prefetch": "many"}, "'prefetch' must be an integer"),
    ({"heartbeat": "soon"}, "'heartbeat'='soon' is not a valid float"),
    ({"confirmTimeout": "-1"}, "'confirmTimeout' must be a number of seconds > 0"),
    ({"failOnDataLoss": "maybe"}, "'failOnDataLoss' must be true or false"),
    ({"queue": "a,,b"}, "empty name"),
    ({"queue": "a,b,a"}, "names 'a' twice"),
    ({"topic": "t"}, "not several"),
    # another source's own options (fetch=executors, the stream source) are named too
    ({"fetchIdelMs": "100"}, "did you mean 'fetchIdleMs'"),
    ({"minPartition": "2"}, "did you mean 'minPartitions'"),
    ({"consumerRefrence": "r"}, "did you mean 'consumerReference'"),
])
def test_parse_refuses_before_connecting(tmp_path: Path, given: dict[str, str], expected: str) -> None:
    options = {"url": f"local://spark:{CANARY}@{tmp_path / 'b.db'}", "queue": "q", **given}
    with pytest.raises(InvalidOptionError, match=expected) as info:
        parse(options)
    assert CANARY not in str(info.value)
    assert not (tmp_path / "b.db").exists()  # nothing connected


def test_a_list_of_sources_is_parsed(tmp_path: Path) -> None:
    parsed = parse({"url": f"local://{tmp_path / 'b.db'}", "subscribe": " a, b ,c"})
    assert parsed.sources == ("a", "b", "c")


def test_load_fails_on_a_typo_before_the_query_starts(spark: Any, tmp_path: Path) -> None:
    reader = (spark.readStream.format("ackbridge").option("url", f"local://spark:{CANARY}@{tmp_path / 'b.db'}")
              .option("queue", "q").option("maxRecordPerBatch", "10"))
    with pytest.raises(Exception, match="did you mean 'maxRecordsPerBatch'") as info:
        reader.load()
    assert CANARY not in str(info.value)
    assert spark.streams.active == []


def test_load_fails_on_an_ill_typed_plugin_option(spark: Any, tmp_path: Path) -> None:
    reader = (spark.readStream.format("ackbridge").option("url", f"local://{tmp_path / 'b.db'}")
              .option("queue", "q").option("lease_timeout", "forever"))
    with pytest.raises(Exception, match="lease_timeout"):
        reader.load()


def _frame(spark: Any) -> Any:
    return spark.createDataFrame([(b"x",)], "body binary")


def test_save_fails_on_bad_sink_options_before_any_task(spark: Any, broker: Broker) -> None:
    queue = broker.new_queue()
    for key, value, expected in [("confirmTimeout", "-1", "confirmTimeout"),
                                 ("confirmTimout", "5", "did you mean 'confirmTimeout'"),
                                 ("windw", "5", "did you mean 'window'")]:
        writer = (_frame(spark).write.format("ackbridge").mode("append").option("url", broker.url())
                  .option("queue", queue).option(key, value))
        with pytest.raises(Exception, match=expected) as info:
            writer.save()
        # Failed on the driver: no task ran, so no Spark task-failure text and nothing published.
        assert "Task" not in str(info.value).split("\n")[0]
    assert broker.counts(queue) == (0, 0)


def test_start_fails_on_bad_sink_options(spark: Any, tmp_path: Path) -> None:
    frame = spark.readStream.format("rate").option("rowsPerSecond", "1").load().selectExpr(
        "cast(value as string) as body")
    writer = (frame.writeStream.format("ackbridge").option("url", f"local://{tmp_path / 'b.db'}")
              .option("queue", "q").option("confirmTimeout", "-1")
              .option("checkpointLocation", str(tmp_path / "ck")))
    with pytest.raises(Exception, match="confirmTimeout"):
        query = writer.start()
        try:
            query.awaitTermination(60)  # a failure here means it started: still wrong, but report it
        finally:
            query.stop()
    assert not (tmp_path / "b.db").exists()


def test_the_sink_refuses_a_list_of_destinations(spark: Any, tmp_path: Path) -> None:
    writer = (_frame(spark).write.format("ackbridge").mode("append").option("url", f"local://{tmp_path / 'b.db'}")
              .option("queue", "a,b"))
    with pytest.raises(Exception, match="publishes to one"):
        writer.save()


def test_rabbitmq_password_never_in_the_message(spark: Any) -> None:
    url = RABBIT_URL.replace("guest:guest", f"guest:{CANARY}")
    reader = (spark.readStream.format("ackbridge").option("url", url).option("queue", f"q-{uuid.uuid4().hex[:6]}")
              .option("hearbeat", "5"))
    with pytest.raises(Exception, match="did you mean 'heartbeat'") as info:
        reader.load()
    assert CANARY not in str(info.value)



def test_fault_options_are_the_seams_not_the_users(tmp_path: Path) -> None:
    """Test-only faults (ackbridge_spark.fault_seam) are parsed from the same map but are
    no documented option: never suggested, never passed to the broker plugin."""
    from ackbridge_spark.fault_seam import FAULT_OPTIONS
    from ackbridge_spark.options import OWN_OPTIONS
    from ackbridge_spark.validation import suggest

    url = f"local://{tmp_path / 'b.db'}"
    assert not [name for name in OWN_OPTIONS if name.lower().startswith("test")]
    assert suggest("testseverafterbatch", []) is None
    parsed = parse({"url": url, "queue": "q", "testSeverAfterBatches": "2", "testFailAfterRows": "5"})
    assert (parsed.faults.sever_after_batches, parsed.faults.fail_after_rows) == (2, 5)
    assert not [k for k in parsed.passthrough if k.startswith("test")]
    assert parse({"url": url, "queue": "q"}).faults.sever_after_batches == 0
    with pytest.raises(InvalidOptionError, match="fault seam has no option") as info:
        parse({"url": url, "queue": "q", "testSeverAfterBatch": "2"})
    assert all(spec.name in str(info.value) for spec in FAULT_OPTIONS)
