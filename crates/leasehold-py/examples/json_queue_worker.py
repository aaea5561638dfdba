"""Seed 004, ported: an agent that works a list of tasks unattended, kept
safe three ways —

- its state file is written atomically (temp file, fsync, rename, fsync of
  the directory), so a crash leaves the old or the new state, never half;
- one instance per machine, with flock (released by the kernel even after
  kill -9), not a PID file that outlives its process;
- a task is claimed with a lease: a worker that dies mid-task loses its
  claim when the TTL runs out and the task is claimed again, and a late
  worker's "done" is refused, so no task is done twice.

The original kept the tasks in tasks.json with owner and lease_until fields
and could double-claim without the lock around read-modify-write; here the
queue is leasehold's (claims are token-scoped transactions), and the state
file only records results:

    python examples/json_queue_worker.py STORE_URL STATE_DIR [add TASK...]
"""

from __future__ import annotations

import os
import sys
from typing import Any, Dict, List

import pyleasehold as lh

CLAIM_TTL = "2s"  # short for the demonstration: a crashed worker's task comes back fast


def record(state_file: str, task: lh.Task, result: str) -> Dict[str, Any]:
    """Add a task's result to the state file (read-modify-write under its lock)."""

    def add(state: Dict[str, Any]) -> Dict[str, Any]:
        done = dict(state.get("done", {}))
        done[task.id] = {"result": result, "attempt": task.attempt, "by": os.getpid()}
        return {**state, "done": done}

    new: Dict[str, Any] = lh.update_json(state_file, add, default={})
    return new


def work(store: lh.Store, state_dir: str, handle: Any = None) -> List[str]:
    """Work the queue until it is empty, as the single instance; returns
    the ids done. Raises lh.Held when another instance runs."""
    finished: List[str] = []
    with lh.lock(os.path.join(state_dir, "")):  # the directory's .leasehold.lock
        state_file = os.path.join(state_dir, "state.json")
        for task in store.queue("agent-tasks").claim_iter(ttl=CLAIM_TTL, until_empty=True):
            with task:  # fail (with the traceback) on an exception
                result = handle(task) if handle is not None else f"processed {task.payload}"
                # The queue accepts one "done" per task; a late worker's is
                # refused here (lh.LeaseLost) before it records anything.
                task.done(result)
                record(state_file, task, result)
            finished.append(task.id)
    return finished


def main() -> int:
    store = lh.Store(sys.argv[1])
    state_dir = sys.argv[2]
    if len(sys.argv) > 3 and sys.argv[3] == "add":
        for name in sys.argv[4:]:
            store.queue("agent-tasks").add({"name": name}, id=name)
        return 0
    try:
        done = work(store, state_dir)
    except lh.Held:
        print("already running, exit")
        return 0
    print("done:", " ".join(done))
    return 0


if __name__ == "__main__":
    sys.exit(main())
