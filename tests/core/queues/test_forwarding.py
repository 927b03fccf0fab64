"""The requests that carry messages to a queue another broker owns (core/queues/forwarding.py)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from core.queues.forwarding import MAX_REQUEST_BYTES, _requests, decode_records, encode_records
from core.records.builder import Record

optional_bytes = st.none() | st.binary(max_size=64)
records = st.builds(Record, st.integers(0, 2**62), optional_bytes, optional_bytes,
                    st.lists(st.tuples(st.text(max_size=8), optional_bytes), max_size=3).map(tuple))


@given(st.lists(records, max_size=5))
def test_records_survive_the_trip_as_they_were(batch: list[Record]) -> None:
    assert decode_records(json.loads(json.dumps(encode_records(batch)))) == batch


def test_large_batches_are_split_under_the_limit_and_named_by_their_content() -> None:
    batch = [Record(n, value=bytes(100_000)) for n in range(12)]
    requests = list(_requests("q", batch))
    assert len(requests) > 1
    assert all(len(json.dumps(body)) <= MAX_REQUEST_BYTES + 1024 for _, body in requests)
    assert [r for _, body in requests for r in decode_records(body["records"])] == batch
    assert [name for name, _ in requests] == [name for name, _ in _requests("q", batch)]   # asked again: the same
    assert len({name for name, _ in requests}) == len(requests)
