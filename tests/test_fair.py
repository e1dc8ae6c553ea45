"""Fair slots (``server.fair``): one user's many requests never hold up another user's.

The scheduling rule alone, on a real event loop: turns and outside agents'
tries both go through it (the server tests show it end to end).
"""

from __future__ import annotations

import asyncio

import pytest

from jupyter_data_agent.server.fair import FairSlots


async def _hold(slots: FairSlots, owner: str, log: list[str], release: asyncio.Event) -> None:
    async with slots.slot(owner):
        log.append(owner)
        await release.wait()


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_user_never_holds_every_slot_and_the_next_user_starts_at_once():
    slots = FairSlots(2)  # per owner: one less than the total
    release = asyncio.Event()
    started: list[str] = []
    alice = [asyncio.ensure_future(_hold(slots, "alice", started, release)) for _ in range(4)]
    await _settle()
    assert started == ["alice"] and slots.waiting("alice") == 3
    assert slots.would_wait("alice") and not slots.would_wait("bob")
    bob = asyncio.ensure_future(_hold(slots, "bob", started, release))
    await _settle()
    assert started == ["alice", "bob"], "bob waited behind alice's queued turns"
    release.set()
    await asyncio.gather(*alice, bob)
    assert started.count("alice") == 4 and slots.in_use == 0 and not slots.held


async def test_a_freed_slot_goes_to_the_user_holding_fewest():
    slots = FairSlots(3, 2)
    gates = {name: asyncio.Event() for name in ("a1", "a2", "a3", "b1", "c1")}
    order: list[str] = []

    async def run(owner: str, name: str) -> None:
        async with slots.slot(owner):
            order.append(name)
            await gates[name].wait()

    tasks = [asyncio.ensure_future(run("alice", n)) for n in ("a1", "a2", "a3")]
    await _settle()
    tasks.append(asyncio.ensure_future(run("bob", "b1")))
    await _settle()
    assert order == ["a1", "a2", "b1"]  # alice at her cap: a3 waits, bob takes the third slot
    tasks.append(asyncio.ensure_future(run("carol", "c1")))
    await _settle()
    gates["a1"].set()
    await _settle()
    # a3 (alice, holding one) and c1 (carol, holding none) wait: carol first, though a3 came first.
    assert order == ["a1", "a2", "b1", "c1"]
    gates["b1"].set()
    await _settle()
    assert order[-1] == "a3"
    for gate in gates.values():
        gate.set()
    await asyncio.gather(*tasks)
    assert slots.in_use == 0


async def test_a_cancelled_wait_leaves_the_line_and_holds_nothing():
    slots = FairSlots(1)
    release = asyncio.Event()
    started: list[str] = []
    first = asyncio.ensure_future(_hold(slots, "alice", started, release))
    await _settle()
    waiting = asyncio.ensure_future(_hold(slots, "bob", started, release))
    await _settle()
    assert slots.waiting("bob") == 1
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert slots.waiting() == 0
    release.set()
    await first
    assert slots.in_use == 0 and started == ["alice"]


async def test_the_one_principal_of_a_one_user_server_uses_every_slot():
    slots = FairSlots(2, exempt=frozenset({"<server-owner>"}))
    release = asyncio.Event()
    started: list[str] = []
    tasks = [asyncio.ensure_future(_hold(slots, "<server-owner>", started, release)) for _ in range(3)]
    await _settle()
    assert len(started) == 2 and slots.cap("<server-owner>") == 2 and slots.cap("alice") == 1
    release.set()
    await asyncio.gather(*tasks)
