"""Engine.upsert_pod skips a pod object whose resourceVersion it has applied (watch replays, relists and every
bind's fresh read repeat the same objects), and applies it again whenever the ledger stopped following it."""

from __future__ import annotations

from typing import Any

import pytest
from sched_helpers import gpu_pod, make_engine, nvidia_node

from hami_core.engine.facade import Engine


def _placed(engine: Engine, name: str, rv: str | None) -> dict[str, Any]:
    pod = gpu_pod(name, mem=1000)
    decision = engine.schedule(pod)
    assert decision.node is not None
    pod["metadata"]["annotations"] = dict(decision.annotations)
    if rv is not None:
        pod["metadata"]["resourceVersion"] = rv
    return pod


@pytest.fixture
def engine() -> Engine:
    e = make_engine()
    e.upsert_node(nvidia_node("node-a"))
    return e


def _used(engine: Engine) -> list[int]:
    return [d.usedmem for d in engine.nodes["node-a"].by_uuid.values()]


def _count_decodes(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls = [0]
    decode = engine.state.decode_pod

    def counted(pod: Any) -> Any:
        calls[0] += 1
        return decode(pod)

    monkeypatch.setattr(engine.state, "decode_pod", counted)
    return calls


def test_the_same_version_is_applied_once(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_decodes(engine, monkeypatch)
    pod = _placed(engine, "p", "7")
    for _ in range(3):
        engine.upsert_pod(pod)
    assert calls[0] == 1 and sum(_used(engine)) == 1000
    engine.upsert_pod({**pod, "metadata": {**pod["metadata"], "resourceVersion": "8"}})
    assert calls[0] == 2 and sum(_used(engine)) == 1000  # a new version is read (and books the same)


def test_objects_without_a_version_are_always_applied(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_decodes(engine, monkeypatch)
    pod = _placed(engine, "p", None)
    engine.upsert_pod(pod)
    engine.upsert_pod(pod)
    assert calls[0] == 2


def test_a_reservation_or_removal_makes_the_stored_version_count_again(
        engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_decodes(engine, monkeypatch)
    stored = _placed(engine, "p", "3")
    engine.upsert_pod(stored)
    assert calls[0] == 1
    engine.unreserve(stored)  # e.g. filtered again: the ledger no longer holds version 3's booking
    assert sum(_used(engine)) == 0
    engine.upsert_pod(stored)  # the stored object re-read after a failed patch: booked again, not skipped
    assert calls[0] == 2 and sum(_used(engine)) == 1000
    engine.reserve(stored, engine.schedule(gpu_pod("p", mem=3000)))  # a new reservation replaces it
    assert sum(_used(engine)) == 3000
    engine.upsert_pod(stored)
    assert calls[0] == 3 and sum(_used(engine)) == 1000

    engine.remove_pod(stored)
    assert sum(_used(engine)) == 0
    engine.upsert_pod(stored)  # deleted, then the same object again (a relist): booked again
    assert calls[0] == 4 and sum(_used(engine)) == 1000


def test_a_finished_pod_is_released_and_its_version_forgotten(engine: Engine) -> None:
    placed = _placed(engine, "p", "5")
    engine.upsert_pod(placed)
    done = {**placed, "metadata": {**placed["metadata"], "resourceVersion": "6"}, "status": {"phase": "Succeeded"}}
    engine.upsert_pod(done)
    assert sum(_used(engine)) == 0
    engine.upsert_pod(placed)  # an older object replayed after the release is applied, not skipped
    assert sum(_used(engine)) == 1000
