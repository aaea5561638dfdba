"""Leader election: ``store.campaign()`` (a ``Leadership``, resigned by
``with``) and ``store.observe()`` (leader changes, ``for`` and ``async for``),
on every store."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import List, Optional

import pytest

import pyleasehold as lh

from conftest import unique


def test_candidates_lead_in_turn_and_the_observer_sees_each(store_url: str) -> None:
    store = lh.Store(store_url)
    name = unique()
    observer = store.observe(name)
    assert next(observer) == {"name": name, "leader": None}
    first = store.campaign(name, id="a", ttl="3s")
    assert first is not None and first.is_leader and first.lost is None
    change = next(observer)
    leader = change["leader"]
    assert leader is not None and (leader["owner"], leader["token"]) == ("a", first.token)
    assert leader["since"].tzinfo is not None
    # Held, and no wait: nobody else leads.
    assert store.campaign(name, id="b", ttl="3s", wait=False) is None
    assert store.campaign(name, id="b", ttl="3s", wait="200ms") is None

    won: List[lh.Leadership] = []
    waiting = threading.Thread(target=lambda: won.append(store.campaign(name, id="b", ttl="3s")))  # type: ignore[arg-type]
    waiting.start()
    time.sleep(0.3)
    with first:
        pass  # resigns on exit
    assert not first.is_leader
    waiting.join(10)
    second = won[0]
    assert second.is_leader and second.token > leader["token"]
    seen: Optional[lh.Leader] = next(observer)["leader"]
    if seen is None:  # the observer looked between the resignation and the takeover
        seen = next(observer)["leader"]
    assert seen is not None and (seen["owner"], seen["token"]) == ("b", second.token)
    second.resign()
    second.resign()  # twice is fine
    assert next(observer)["leader"] is None
    observer.close()
    assert list(observer) == []


def test_a_live_namesake_is_refused_not_resumed(sqlite_url: str) -> None:
    """Two live candidates under one id would both lead with one token: the
    second is refused (`Held`); once the first resigns, the id leads again.
    (A restarted candidate whose predecessor is provably gone takes over at
    once with a new token: fault case 31.)"""
    store = lh.Store(sqlite_url)
    first = store.campaign("job", id="a", ttl="5s")
    assert first is not None
    token = first.token
    with pytest.raises(lh.Held, match='candidate id "a" already leads job'):
        store.campaign("job", id="a", ttl="5s", wait=False)
    assert first.is_leader and first.token == token
    first.resign()
    again = store.campaign("job", id="a", ttl="5s", wait=False)
    assert again is not None and again.token > token
    again.resign()


def test_async_for_sees_changes(store_url: str) -> None:
    store = lh.Store(store_url)
    name = unique()

    async def main() -> List[Optional[str]]:
        owners: List[Optional[str]] = []
        async for change in store.observe(name):
            leader = change["leader"]
            owners.append(leader and leader["owner"])
            if len(owners) == 1:
                lead = await asyncio.to_thread(store.campaign, name, id="x", ttl="3s")
            elif len(owners) == 2:
                assert lead is not None
                lead.resign()
            else:
                return owners
        return owners

    assert asyncio.run(asyncio.wait_for(main(), 30)) == [None, "x", None]
