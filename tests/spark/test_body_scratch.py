"""The reader's reused body buffer (issue 18 at 4 KiB): a planned batch's bodies are
copied once, into memory reused from batch to batch, and never into memory an Arrow
array of an earlier batch still reads."""

from __future__ import annotations

import gc
from typing import Any

import pytest

pytestmark = pytest.mark.spark


def _scratch_module() -> Any:
    # Imported here: the lowest-versions tier collects this file without the connector.
    from ackbridge_spark import schema

    return schema


def test_bodies_come_back_as_given_in_order() -> None:
    schema = _scratch_module()
    scratch = schema.BodyScratch()
    bodies = [b"a" * 4096, b"", b"bc", bytearray(b"def"), memoryview(b"xyz")]
    array = schema._binary_array(bodies, scratch)
    assert array.to_pylist() == [bytes(b) for b in bodies]
    assert array.null_count == 0


def test_the_buffer_is_reused_once_the_last_batch_is_gone() -> None:
    schema = _scratch_module()
    scratch = schema.BodyScratch()
    first = scratch.join([b"x" * 4096] * 4, 4 * 4096)
    address = first.address
    del first
    gc.collect()
    second = scratch.join([b"y" * 4096] * 2, 2 * 4096)
    assert second.address == address  # the same memory, no fresh pages
    assert second.to_pybytes() == b"y" * 8192


def test_a_batch_still_read_keeps_its_bodies() -> None:
    schema = _scratch_module()
    scratch = schema.BodyScratch()
    first = schema._binary_array([b"1" * 4096, b"2" * 4096], scratch)
    second = schema._binary_array([b"3" * 4096, b"4" * 4096], scratch)
    # The first batch is still alive (say, being written): the second went elsewhere.
    assert first.to_pylist() == [b"1" * 4096, b"2" * 4096]
    assert second.to_pylist() == [b"3" * 4096, b"4" * 4096]


def test_a_batch_larger_than_kept_gets_a_buffer_of_its_own() -> None:
    schema = _scratch_module()
    scratch = schema.BodyScratch(keep=1024)
    small = scratch.join([b"s" * 512], 512)
    small_address = small.address
    del small
    gc.collect()
    large = scratch.join([b"L" * 4096], 4096)
    assert large.to_pybytes() == b"L" * 4096
    del large
    gc.collect()
    again = scratch.join([b"t" * 256], 256)
    assert again.address == small_address  # the large one was not kept
