"""Logs and metrics an operator reads (issue 42, items 4 and 5).

What must never happen: an event the native layer logged that Python's
``logging`` never sees, or sees with other facts than the store holds; a
daemon's ``/metrics`` that a Prometheus client cannot parse, or that
counts other than what the store recorded. The checkers are the store's
own records, read through the CLI (``task list``, ``schedule history``),
and ``prometheus_client``'s parser — no code of the package's.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Callable, Optional

import pytest
from prometheus_client.parser import text_string_to_metric_families

import pyleasehold as lh

from conftest import block_sqlite, leasehold_cli


def wait_for(what: str, check: Callable[[], Any], seconds: float = 20) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s: {what}")
        time.sleep(0.05)


def events(caplog: pytest.LogCaptureFixture, event: str, name: str) -> list[dict[str, Any]]:
    """The `event` events of lease `name` (the process's other tests log
    too, and a record may come late)."""
    return [
        r.leasehold  # type: ignore[attr-defined]
        for r in caplog.records
        if r.name == "pyleasehold"
        and getattr(r, "leasehold", {}).get("event") == event
        and r.leasehold.get("name") == name  # type: ignore[attr-defined]
    ]


def test_native_events_reach_the_pyleasehold_logger(caplog: pytest.LogCaptureFixture, sqlite_url: str) -> None:
    caplog.set_level(logging.INFO, logger="pyleasehold")
    store = lh.Store(sqlite_url)
    name = f"nightly-{uuid.uuid4().hex[:8]}"
    with store.lease(name, ttl="30s") as lease:
        token = lease.token
    granted = wait_for("lease.granted logged", lambda: events(caplog, "lease.granted", name))
    released = wait_for("lease.released logged", lambda: events(caplog, "lease.released", name))
    # The facts the store recorded (read by the CLI, not the package).
    history = json.loads(
        subprocess.run(
            [str(leasehold_cli()), "--store", sqlite_url, "history", name, "--json"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    granted_in_store = [e for e in history["history"] if e["event"] == "granted"]
    assert [g["token"] for g in granted] == [token] == [e["token"] for e in granted_in_store]
    assert granted[0]["pid"] == os.getpid() and granted[0]["ttl_ms"] == 30_000
    assert released == [{"event": "lease.released", "name": name, "token": token, "outcome": "released"}]
    record = next(r for r in caplog.records if getattr(r, "leasehold", {}) == granted[0])
    assert record.levelno == logging.INFO and f"token {token}" in record.getMessage()


def test_a_logger_at_warning_gets_the_loss_and_no_info_event(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    caplog.set_level(logging.WARNING, logger="pyleasehold")
    db = tmp_path / "l.db"
    name = f"l-{uuid.uuid4().hex[:8]}"
    lease = lh.Store(f"sqlite://{db}").lease(name, ttl="1s").acquire()
    # Another writer keeps the store locked: the grant is lost at the
    # holder-side deadline, which is worth a warning.
    blocker = block_sqlite(db, 3)
    try:
        lost = wait_for("lease.lost logged", lambda: events(caplog, "lease.lost", name))
    finally:
        blocker.kill()
    assert lost[0]["token"] == lease.token and lost[0]["kind"] == "lease"
    assert "deadline" in lost[0]["reason"]
    # The reader delivers in order: the grant's info event came first and
    # was not let through.
    assert not events(caplog, "lease.granted", name), "an info event passed a logger at warning"


def metrics_of(address: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def start_daemon(args: list[str], store: str) -> "tuple[subprocess.Popen[str], str]":
    """A daemon with --metrics-listen on a free loopback port and a JSON
    log: the address its `metrics.listening` event names."""
    # Before the command's own arguments (after `--`), if any.
    at = args.index("--") if "--" in args else len(args)
    args = [*args[:at], "--metrics-listen", "127.0.0.1:0", *args[at:]]
    daemon = subprocess.Popen(
        [str(leasehold_cli()), "--store", store, "--log-format", "json", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert daemon.stderr is not None
    for _ in range(20):
        line = daemon.stderr.readline()
        if not line:
            break
        event = json.loads(line)
        if event.get("event") == "metrics.listening":
            return daemon, event["message"].split("http://")[1].split("/")[0]
    daemon.kill()
    raise AssertionError(f"no metrics.listening event: {daemon.communicate()}")


def cli_json(store: str, *args: str) -> Any:
    out = subprocess.run(
        [str(leasehold_cli()), "--store", store, *args, "--json"], check=True, capture_output=True, text=True
    ).stdout
    return json.loads(out)


def test_work_metrics_parse_and_count_what_the_store_recorded(sqlite_url: str) -> None:
    store = lh.Store(sqlite_url)
    queue = store.queue("jobs")
    for i in range(3):
        queue.add({"n": i}, id=f"t{i}", max_attempts=1)
    # Task t1 fails; each runs past a heartbeat so renewals are timed.
    script = 'sleep 1.2; test "$LEASEHOLD_TASK_ID" != t1'
    daemon, address = start_daemon(
        ["work", "jobs", "--ttl", "1s", "--concurrency", "3", "--", "sh", "-c", script], sqlite_url
    )
    try:
        tasks = wait_for(
            "the worker finished every task",
            lambda: (lambda t: t if all(x["state"] in ("done", "dead") for x in t) else None)(
                cli_json(sqlite_url, "task", "list", "jobs")["tasks"]
            ),
        )
        in_store = {s: sum(1 for t in tasks if t["state"] == s) for s in ("done", "dead")}
        assert in_store == {"done": 2, "dead": 1}, tasks
        m = wait_for(
            "the metrics count all three",
            lambda: (lambda m: m if m[("leasehold_daemon_tasks_total", (("outcome", "dead"),))] == 1 else None)(
                metrics_of(address)
            ),
        )
        assert m[("leasehold_daemon_tasks_total", (("outcome", "done"),))] == in_store["done"]
        assert m[("leasehold_daemon_tasks_total", (("outcome", "failed"),))] == 0
        assert m[("leasehold_daemon_lease_losses_total", ())] == 0
        count = m[("leasehold_daemon_renewal_latency_seconds_count", ())]
        assert count >= 3, "each task's claim renewed at least once"
        assert m[("leasehold_daemon_renewal_latency_seconds_bucket", (("le", "+Inf"),))] == count
        assert m[("leasehold_daemon_renewal_latency_seconds_bucket", (("le", "10"),))] == count
    finally:
        daemon.terminate()
        daemon.communicate(timeout=30)


def test_cron_metrics_count_the_slots_its_records_show(sqlite_url: str) -> None:
    subprocess.run(
        [str(leasehold_cli()), "--store", sqlite_url, "schedule", "add", "tick", "--cron", "@every 1s", "--", "true"],
        check=True,
        capture_output=True,
    )
    daemon, address = start_daemon(["cron"], sqlite_url)
    try:
        m = wait_for(
            "three slots ran",
            lambda: (lambda m: m if m[("leasehold_daemon_slots_total", (("outcome", "ran"),))] >= 3 else None)(
                metrics_of(address)
            ),
        )
    finally:
        daemon.terminate()
        daemon.communicate(timeout=30)
    ran = sum(1 for r in cli_json(sqlite_url, "schedule", "show", "tick")["slots"] if r["outcome"] == "ran")
    claimed = m[("leasehold_daemon_slots_total", (("outcome", "claimed"),))]
    assert m[("leasehold_daemon_slots_total", (("outcome", "ran"),))] <= ran
    assert claimed >= m[("leasehold_daemon_slots_total", (("outcome", "ran"),))]
    assert m[("leasehold_daemon_slots_total", (("outcome", "missed"),))] == 0


def test_metrics_refuse_an_address_off_loopback(sqlite_url: str) -> None:
    result = subprocess.run(
        [str(leasehold_cli()), "--store", sqlite_url, "cron", "--metrics-listen", "0.0.0.0:0"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2, result.stderr
    assert "loopback only" in result.stderr and "0.0.0.0:0" in result.stderr
