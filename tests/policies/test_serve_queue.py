"""The fair queue of ``agentgym serve``: rows come out round-robin over clients, then over
each client's requests; every row once, each request's rows in order."""

from __future__ import annotations

import itertools
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentgym_envs.serving.work_queue import FairQueue, QueueStopped


def drain(queue: FairQueue[str]) -> list[str]:
    out = []
    while (row := queue.get(0)) is not None:
        out.append(row)
    return out


def test_rows_take_turns_over_clients_then_requests() -> None:
    queue: FairQueue[str] = FairQueue()
    queue.put("a", ["a1.0", "a1.1", "a1.2", "a1.3"])  # one big request of client a
    queue.put("a", ["a2.0"])  # a second request of a
    queue.put("b", ["b1.0", "b1.1"])
    assert len(queue) == 7
    assert drain(queue) == ["a1.0", "b1.0", "a2.0", "b1.1", "a1.1", "a1.2", "a1.3"]


def test_a_request_behind_a_big_one_is_served_next() -> None:
    queue: FairQueue[str] = FairQueue()
    queue.put(object(), [f"big{i}" for i in range(128)])
    assert queue.get(0) == "big0"
    queue.put(object(), ["small"])
    assert [queue.get(0), queue.get(0)] == ["big1", "small"]


def test_get_waits_stop_ends_it_once_empty() -> None:
    queue: FairQueue[str] = FairQueue()
    assert queue.get(0) is None and queue.get(0.01) is None
    later = threading.Timer(0.05, lambda: queue.put("c", ["late"]))
    later.start()
    assert queue.get(30) == "late"  # woken by the put, long before the bound
    queue.put("c", ["x"])
    queue.stop()
    assert queue.get(None) == "x"  # what was queued still comes out
    with pytest.raises(QueueStopped):
        queue.get(None)


@given(
    st.lists(st.tuples(st.sampled_from("abc"), st.integers(min_value=0, max_value=6)), max_size=12)
)
def test_every_row_comes_out_once_in_request_order(requests: list[tuple[str, int]]) -> None:
    queue: FairQueue[str] = FairQueue()
    for number, (client, size) in enumerate(requests):
        queue.put(client, [f"{client}:{number}:{i}" for i in range(size)])
    out = drain(queue)
    assert sorted(out) == sorted(
        f"{c}:{n}:{i}" for n, (c, k) in enumerate(requests) for i in range(k)
    )
    for number in range(len(requests)):
        mine = [int(r.split(":")[2]) for r in out if int(r.split(":")[1]) == number]
        assert mine == sorted(mine)
    # while two clients both wait, neither gets two rows in a row
    for at, (first, second) in enumerate(itertools.pairwise(out)):
        waiting = {r.split(":")[0] for r in out[at:]}
        if len(waiting) > 1:
            assert first.split(":")[0] != second.split(":")[0]
