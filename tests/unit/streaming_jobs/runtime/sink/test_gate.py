"""The quiesce gate: admitted batches, refusal once closed, holding, draining on commit."""

from __future__ import annotations

import threading

import pytest

from streaming_jobs.runtime.sink.gate import BatchGate, QuiesceRequested, Superseded, is_gate_stop


def test_closed_gate_refuses_and_drains_on_commit() -> None:
    gate = BatchGate()
    gate.admit(7)
    gate.close()
    with pytest.raises(QuiesceRequested) as refused:
        gate.admit(8)
    assert is_gate_stop(f"py4j wrapped: {refused.value!r}")
    assert not gate.wait_drained(0.05, lambda: False)  # batch 7 still writing
    threading.Timer(0.05, gate.committed, args=(7,)).start()
    assert gate.wait_drained(5.0, lambda: False)


def test_terminated_query_counts_as_drained() -> None:
    gate = BatchGate()
    gate.admit(1)
    gate.close()
    assert gate.wait_drained(1.0, lambda: True)


def test_reopened_gate_forgets_uncommitted_batches() -> None:
    gate = BatchGate()
    gate.admit(3)
    gate.close()
    gate.open()
    gate.admit(3)  # the replay of the same batch is admitted again
    gate.committed(3)
    assert gate.wait_drained(0.0, lambda: False)
    assert not is_gate_stop("java.lang.OutOfMemoryError") and not is_gate_stop(None)


def test_a_held_gate_makes_new_batches_wait_until_released() -> None:
    gate = BatchGate()
    gate.admit(4)
    gate.hold()
    admitted = threading.Event()
    waiting = threading.Thread(target=lambda: (gate.admit(5), admitted.set()))
    waiting.start()
    gate.committed(4)
    assert gate.wait_drained(1.0, lambda: False)  # batch 5 waits outside: not admitted yet
    assert not admitted.wait(0.3)
    gate.release()
    assert admitted.wait(5.0)
    waiting.join(5.0)
    assert not gate.wait_drained(0.0, lambda: False)  # batch 5 is now writing


def test_closing_a_held_gate_refuses_the_waiting_batch() -> None:
    gate = BatchGate()
    gate.hold()
    errors: list[BaseException] = []

    def admit() -> None:
        try:
            gate.admit(9)
        except QuiesceRequested as exc:
            errors.append(exc)

    waiting = threading.Thread(target=admit)
    waiting.start()
    gate.close()
    waiting.join(5.0)
    assert len(errors) == 1 and not waiting.is_alive()


def test_a_superseded_instance_refuses_every_batch_before_it_runs() -> None:
    owner: list[str | None] = [None]
    gate = BatchGate(ownership=lambda: owner[0])
    gate.admit(4)
    owner[0] = "instance b was made active at epoch 2 (this instance runs epoch 1)"
    with pytest.raises(Superseded) as refused:
        gate.admit(5)
    assert refused.value.batch_id == 5 and "superseded, instance b" in str(refused.value)
    assert gate.superseded == owner[0] and gate.last_admitted == 4
    assert is_gate_stop(f"py4j wrapped: {refused.value!r}")  # a normal stop, not a failure
    gate.open()
    assert gate.superseded is None
