"""The background event recorder (hami_core.cluster.events): queued without blocking the caller, bounded,
failures logged without stopping it, flushed and closed on demand."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from hami_core.cluster.events import EventRecorder

WAIT_S = 10.0


def body(reason: str, name: str = "p") -> dict[str, Any]:
    return {"reason": reason, "type": "Normal", "involvedObject": {"kind": "Pod", "namespace": "default", "name": name}}


def test_record_does_not_wait_for_a_slow_api_server() -> None:
    release = threading.Event()
    posted: list[str] = []

    def post(event: dict[str, Any]) -> None:
        assert release.wait(WAIT_S)
        posted.append(event["reason"])

    recorder = EventRecorder(post)
    assert recorder.record(body("A")) and recorder.record(body("B"))  # returned while the post is stuck
    assert posted == [] and not recorder.flush(0.05)
    release.set()
    assert recorder.flush(WAIT_S)
    assert posted == ["A", "B"] and recorder.posted == 2  # in order
    recorder.close()


def test_a_full_queue_drops_and_counts(caplog: pytest.LogCaptureFixture) -> None:
    release = threading.Event()
    entered = threading.Event()
    posted: list[str] = []

    def post(event: dict[str, Any]) -> None:
        entered.set()
        assert release.wait(WAIT_S)
        posted.append(event["reason"])

    recorder = EventRecorder(post, capacity=2)
    recorder.record(body("first"))  # taken by the thread, which then waits
    assert entered.wait(WAIT_S)
    with caplog.at_level(logging.WARNING, "hami.cluster.events"):
        results = [recorder.record(body(f"e{i}")) for i in range(5)]
    assert results == [True, True, False, False, False] and recorder.dropped == 3
    assert [r.getMessage() for r in caplog.records] == [
        "event queue full (2 queued): dropped 1 events so far, latest e2 Pod default/p"]  # not one per drop
    release.set()
    assert recorder.flush(WAIT_S)
    assert posted == ["first", "e0", "e1"]
    recorder.close()


def test_failures_are_logged_and_the_next_event_still_goes(caplog: pytest.LogCaptureFixture) -> None:
    posted: list[str] = []

    def post(event: dict[str, Any]) -> None:
        if event["reason"] == "bad":
            raise RuntimeError("HTTP 500:\n  internal error")
        posted.append(event["reason"])

    recorder = EventRecorder(post)
    with caplog.at_level(logging.WARNING, "hami.cluster.events"):
        for reason in ("bad", "good"):
            recorder.record(body(reason, name="train-0"))
        assert recorder.flush(WAIT_S)
    assert posted == ["good"] and recorder.failed == 1 and recorder.posted == 1
    assert [r.getMessage() for r in caplog.records] == [
        "could not record event Normal bad about Pod default/train-0: HTTP 500: internal error"]
    recorder.close()


def test_close_posts_what_is_queued_and_a_later_record_starts_again() -> None:
    posted: list[str] = []
    recorder = EventRecorder(lambda event: posted.append(event["reason"]))
    assert recorder.flush(0)  # nothing recorded, no thread: nothing to wait for
    for reason in ("a", "b", "c"):
        recorder.record(body(reason))
    recorder.close()
    assert posted == ["a", "b", "c"]
    assert not any(t.name == "hami-events" and t.is_alive() for t in threading.enumerate())
    recorder.close()  # idempotent
    recorder.record(body("d"))  # a client closed and used again
    assert recorder.flush(WAIT_S) and posted == ["a", "b", "c", "d"]
    recorder.close()
