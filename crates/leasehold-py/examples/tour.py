"""The API in one sitting — what docs/PYTHON.md walks through, runnable:

    python examples/tour.py sqlite:///tmp/tour.db /tmp/tour

(The issue's sketch, made concrete: every call here is checked by
`mypy --strict` in the test suite.)
"""

from __future__ import annotations

import asyncio
import datetime
import os
import sys
from typing import Any, Dict

import pyleasehold as lh


def send(payload: Dict[str, Any]) -> None:
    print("sending to", payload["to"])


async def report_async(store: lh.Store) -> int:
    async with store.lease("nightly-report", ttl="2m") as lease:  # the same object, under asyncio
        await asyncio.sleep(0)
        return lease.token


def main(url: str, workdir: str) -> None:
    os.makedirs(os.path.join(workdir, "out"), exist_ok=True)
    store = lh.Store(url)  # lh.Store() alone: $LEASEHOLD_STORE, else the CLI's embedded store

    with store.lease("nightly-report", ttl="2m") as lease:  # raises lh.Held when held; wait="30s" waits
        lease.check()  # raises lh.LeaseLost once the grant is lost
        data = b'{"rows": 42}'
        lh.write_atomic(os.path.join(workdir, "out/report.json"), data, fence=lease)  # lh.StaleToken if a newer one wrote
        print("token", lease.token)

    print("async token", asyncio.run(report_async(store)))

    with lh.lock(os.path.join(workdir, "my-agent/")):  # the same flock as `leasehold lock`; raises lh.Held
        state = os.path.join(workdir, "state.json")
        print(lh.update_json(state, lambda s: {**s, "runs": s.get("runs", 0) + 1}, default={}))

    code = store.run("nightly-report", ["sh", "-c", "echo publishing with token $LEASEHOLD_TOKEN"], ttl="2m")
    print("exit", code)

    q = store.queue("emails")
    q.add({"to": "a@b"}, id="welcome-42", priority=0, delay=datetime.timedelta(seconds=0))
    for task in q.claim_iter(ttl="5m", until_empty=True):  # a claim is a lease, heartbeated in the background
        with task:  # done on success; fail (with the traceback) on an exception
            send(task.payload)
    print(q.stats())


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
