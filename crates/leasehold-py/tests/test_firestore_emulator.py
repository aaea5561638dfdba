"""The Firestore emulator of conftest as a test meets it: it answers its
REST API, keeps projects apart, pauses and resumes as a whole, and stops
with every process of it — the Java server is a grandchild of the process
conftest starts, and one left behind would keep its port after the suite."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from typing import Optional

import pytest

from conftest import Firestore, NotInstalled, missing


def document(emulator: Firestore, project: str, body: Optional[dict[str, object]] = None, timeout: float = 10) -> object:
    """Write document c/x of `project` (with `body`), or read it (None if missing)."""
    url = f"http://{emulator.host}/v1/projects/{project}/databases/(default)/documents/c/x"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="GET" if body is None else "PATCH")
    request.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return json.load(answer)["fields"]
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return None
        raise


def test_the_emulator_answers_pauses_and_stops_with_its_java() -> None:
    try:
        emulator = Firestore()
    except NotInstalled as e:
        missing(f"Firestore emulator: {e}")
    try:
        processes = emulator.processes()
        assert len(processes) >= 2, f"gcloud and its Java server: {processes}"
        a, b = emulator.unique_project(), emulator.unique_project()
        fields = {"n": {"integerValue": "7"}}
        assert document(emulator, a, {"fields": fields}) == fields
        assert document(emulator, a) == fields
        assert document(emulator, b) is None

        emulator.pause()
        with pytest.raises(OSError):  # a timeout: accepted, never answered
            document(emulator, a, timeout=1)
        emulator.resume()
        assert document(emulator, a) == fields

        emulator.pause()  # stopped while paused: it must still end
    finally:
        emulator.stop()
    assert emulator.processes() == []
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", emulator.port)) != 0, "its port is still open"
    assert not emulator.dir.exists()
