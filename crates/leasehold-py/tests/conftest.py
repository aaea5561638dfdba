"""Fixtures of the Python suite: stores of every kind, with throwaway
PostgreSQL, etcd and Redis servers and a Firestore emulator on 127.0.0.1
started here, as the Rust tests start theirs (free ports, temp dirs,
stopped by pid). Without the server binaries (or with `postgres`/`etcd`/
`firestore`/`redis` in LEASEHOLD_TEST_HIDE, as for the Rust tests) a store's tests are
skipped with the reason — except with
CI=true, where a missing server fails them. A server that is installed
but does not start is a failure, never a skip; so is a missing `leasehold`
binary, which the cross-checks with the CLI need."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import pytest

import pyleasehold as lh

CI = os.environ.get("CI") == "true"
HIDDEN = set(os.environ.get("LEASEHOLD_TEST_HIDE", "").split(","))
HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent / "examples"
REPO = HERE.parents[2]


def missing(what: str) -> None:
    """This test cannot run here: skipped with the reason, or failed under CI=true."""
    if CI:
        pytest.fail(f"CI=true, and this test cannot run here: {what}")
    pytest.skip(what)


class NotInstalled(Exception):
    """A server's binaries are not here (or hidden): its tests cannot run."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Postgres:
    def __init__(self) -> None:
        versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
        if "postgres" in HIDDEN:
            raise NotInstalled("no PostgreSQL server binaries (hidden by LEASEHOLD_TEST_HIDE)")
        if not versions:
            raise NotInstalled(
                "no PostgreSQL server binaries at /usr/lib/postgresql/*/bin; install the Debian package postgresql"
            )
        self.bin = versions[-1].parent
        self.dir = Path(tempfile.mkdtemp(prefix="leasehold-py-pg-"))
        self.root = os.geteuid() == 0
        if self.root:
            shutil.chown(self.dir, "postgres", "postgres")
        self.data = self.dir / "data"
        self._run("initdb", "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync", "-D", str(self.data))
        for _ in range(5):
            self.port = free_port()
            options = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.dir} -c fsync=off -c max_connections=200"
            started = self._call(
                "pg_ctl", "-D", str(self.data), "-l", str(self.dir / "log"), "-w", "-t", "60", "-o", options, "start"
            )
            if started.returncode == 0:
                return
        raise RuntimeError(f"PostgreSQL did not start; see {self.dir / 'log'}")

    def _call(self, program: str, *args: str) -> subprocess.CompletedProcess[bytes]:
        argv = [str(self.bin / program), *args]
        if self.root:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        return subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)

    def _run(self, program: str, *args: str) -> None:
        done = self._call(program, *args)
        if done.returncode != 0:
            raise RuntimeError(f"{program} failed: {done.stderr.decode(errors='replace')}")

    def url(self, schema: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/postgres?schema={schema}&connect_timeout=5"

    def stop(self) -> None:
        self._call("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)


class Etcd:
    def __init__(self) -> None:
        etcd = shutil.which("etcd")
        if "etcd" in HIDDEN:
            raise NotInstalled("no `etcd` (hidden by LEASEHOLD_TEST_HIDE)")
        if etcd is None or shutil.which("etcdctl") is None:
            raise NotInstalled(
                "no `etcd` or `etcdctl` on PATH; install the Debian packages etcd-server and etcd-client"
            )
        self.dir = Path(tempfile.mkdtemp(prefix="leasehold-py-etcd-"))
        self.port, peer = free_port(), free_port()
        client = f"http://127.0.0.1:{self.port}"
        peer_url = f"http://127.0.0.1:{peer}"
        log = open(self.dir / "log", "wb")
        self.process = subprocess.Popen(
            [etcd, "--name", "t", "--data-dir", str(self.dir / "data"),
             "--listen-client-urls", client, "--advertise-client-urls", client,
             "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
             "--initial-cluster", f"t={peer_url}", "--initial-cluster-state", "new",
             "--unsafe-no-fsync", "--logger", "zap", "--log-outputs", "stderr"],
            stdout=log, stderr=log,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            healthy = subprocess.run(
                ["etcdctl", "--endpoints", f"127.0.0.1:{self.port}", "--command-timeout=2s", "endpoint", "health"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
            )  # fmt: skip
            if healthy.returncode == 0:
                return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"etcd did not become healthy; see {self.dir / 'log'}")

    def url(self, prefix: str) -> str:
        return f"etcd://127.0.0.1:{self.port}?prefix=/{prefix}"

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class Firestore:
    """Google's Firestore emulator (`gcloud emulators firestore start`), as
    leasehold-testkit's `firestore::FirestoreEmulator` starts it: gcloud in
    a session of its own, so that stopping, pausing and resuming reach its
    Java server (a grandchild), with a temp gcloud configuration and no
    prompts, update checks or usage reports. A client finds it through
    FIRESTORE_EMULATOR_HOST (`env()`); each test takes a project of its own
    (`unique_project()`), which the emulator keeps apart from the others."""

    INSTALL = (
        "install the Google Cloud CLI with its cloud-firestore-emulator component "
        "(the Debian package google-cloud-cli-firestore-emulator, from Google's apt repository)"
    )

    def __init__(self) -> None:
        if "firestore" in HIDDEN:
            raise NotInstalled(f"no Firestore emulator (hidden by LEASEHOLD_TEST_HIDE); {self.INSTALL}")
        gcloud = shutil.which("gcloud")
        if gcloud is None:
            raise NotInstalled(f"no `gcloud` on PATH; {self.INSTALL}")
        if shutil.which("java") is None:
            raise NotInstalled("no `java` on PATH; install the Debian package default-jre-headless (Java 11 or later)")
        sdk = Path(gcloud).resolve().parent.parent
        if not (sdk / "platform/cloud-firestore-emulator/cloud_firestore_emulator").is_file():
            raise NotInstalled(f"gcloud has no cloud-firestore-emulator component; {self.INSTALL}")
        self.dir = Path(tempfile.mkdtemp(prefix="leasehold-py-firestore-"))
        env = {
            **os.environ,
            "CLOUDSDK_CONFIG": str(self.dir / "gcloud"),
            "CLOUDSDK_CORE_DISABLE_PROMPTS": "1",
            "CLOUDSDK_COMPONENT_MANAGER_DISABLE_UPDATE_CHECK": "1",
            "CLOUDSDK_CORE_DISABLE_USAGE_REPORTING": "true",
            "CLOUDSDK_CORE_CHECK_GCE_METADATA": "false",
        }
        # The free port may be taken before the emulator binds it.
        for _ in range(3):
            self.port = free_port()
            log = open(self.dir / "log", "ab")
            self.process = subprocess.Popen(
                [gcloud, "emulators", "firestore", "start", f"--host-port={self.host}"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, start_new_session=True,
            )  # fmt: skip
            log.close()
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline and self.process.poll() is None:
                if self._answers():
                    return
                time.sleep(0.1)
            tail = self.log_tail()
            self.stop(remove=False)
            if "BindException" not in tail and "Address already in use" not in tail:
                break
        shutil.rmtree(self.dir, ignore_errors=True)
        raise RuntimeError(f"the Firestore emulator did not answer within 90 s; its log ends:\n{tail}")

    @property
    def host(self) -> str:
        """`127.0.0.1:PORT`, what FIRESTORE_EMULATOR_HOST says."""
        return f"127.0.0.1:{self.port}"

    def env(self, project: Optional[str] = None) -> dict[str, str]:
        """The environment of a client of this emulator (and of `project`,
        for clients that take it from GOOGLE_CLOUD_PROJECT)."""
        env = {"FIRESTORE_EMULATOR_HOST": self.host}
        if project is not None:
            env["GOOGLE_CLOUD_PROJECT"] = project
        return env

    def unique_project(self) -> str:
        """A project id no other test uses, valid as a Google Cloud project
        id too (6–30 lowercase letters, digits and hyphens)."""
        return "lh-" + uuid.uuid4().hex[:16]

    def url(self, project: str, prefix: Optional[str] = None) -> str:
        """The store URL of `project` (for the Firestore store; the store
        finds the emulator through FIRESTORE_EMULATOR_HOST)."""
        return f"firestore://{project}" + (f"?prefix={prefix}" if prefix else "")

    def _answers(self) -> bool:
        """Whether the REST API answers a read (a missing document is an answer)."""
        url = f"http://{self.host}/v1/projects/leasehold-py/databases/(default)/documents/ready/ready"
        try:
            with urllib.request.urlopen(url, timeout=5):
                return True
        except urllib.error.HTTPError as e:
            return e.code == 404
        except OSError:
            return False

    def log_tail(self) -> str:
        try:
            return "\n".join((self.dir / "log").read_text(errors="replace").splitlines()[-40:])
        except OSError:
            return ""

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.process.pid, sig)
        except ProcessLookupError:
            pass

    def pause(self) -> None:
        """SIGSTOP to the whole emulator: connections are still accepted, nothing answers."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def processes(self) -> list[int]:
        """The running processes of the emulator (its session's group):
        gcloud, its start script and the Java server; none once stopped."""
        return _group_members(self.process.pid)

    def _gone(self) -> bool:
        with socket.socket() as s:
            s.settimeout(1)
            port_closed = s.connect_ex(("127.0.0.1", self.port)) != 0
        # The port too: Java's first thread shows as a zombie while its
        # other threads still exit, the socket still open.
        return self.process.poll() is not None and not self.processes() and port_closed

    def stop(self, remove: bool = True) -> None:
        """TERM to the group (and CONT: a paused emulator acts on it only
        once it runs), then KILL after 10 s; returns once no process of it
        runs and its port is closed."""
        for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
            self._signal(sig)
            self._signal(signal.SIGCONT)
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                if self._gone():
                    break
                time.sleep(0.05)
            else:
                continue
            break
        if remove:
            shutil.rmtree(self.dir, ignore_errors=True)


class Redis:
    """A throwaway redis-server, as leasehold-testkit's `redis::RedisServer`
    starts it (Durability::Always): a `redis.conf` in its temp dir (bind
    127.0.0.1, a free port, its data and log there, `appendonly yes` with
    `appendfsync always`, no RDB snapshots), no other configuration read —
    so the store opens without `?durability=relaxed`. Each test takes a key
    prefix of its own (`url(prefix)`)."""

    def __init__(self) -> None:
        if "redis" in HIDDEN:
            raise NotInstalled("no `redis-server` (hidden by LEASEHOLD_TEST_HIDE)")
        server = shutil.which("redis-server")
        if server is None:
            raise NotInstalled("no `redis-server` on PATH; install the Debian package redis-server")
        self.dir = Path(tempfile.mkdtemp(prefix="leasehold-py-redis-"))
        # The free port may be taken before the server binds it.
        for _ in range(5):
            self.port = free_port()
            conf = self.dir / "redis.conf"
            conf.write_text(
                "\n".join(
                    [
                        "bind 127.0.0.1",
                        "protected-mode yes",
                        "daemonize no",
                        f"port {self.port}",
                        f'dir "{self.dir}"',
                        f'logfile "{self.dir / "redis.log"}"',
                        "appendonly yes",
                        "appendfsync always",
                        # No RDB snapshots: what survives a crash is the AOF's alone.
                        'save ""',
                    ]
                )
                + "\n"
            )
            with open(self.dir / "redis.log", "ab") as log:
                self.process = subprocess.Popen(
                    [server, str(conf)], cwd=self.dir, stdin=subprocess.DEVNULL, stdout=log, stderr=log
                )
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and self.process.poll() is None:
                if self._pong():
                    return
                time.sleep(0.05)
            tail = self.log_tail()
            self.stop(remove=False)
            if "Address already in use" not in tail:
                break
        shutil.rmtree(self.dir, ignore_errors=True)
        raise RuntimeError(f"redis-server did not answer PING within 30 s; its log ends:\n{tail}")

    def url(self, prefix: str) -> str:
        return f"redis://127.0.0.1:{self.port}?prefix={prefix}"

    def _pong(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
                s.sendall(b"PING\r\n")
                return s.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def log_tail(self) -> str:
        try:
            return "\n".join((self.dir / "redis.log").read_text(errors="replace").splitlines()[-40:])
        except OSError:
            return ""

    def stop(self, remove: bool = True) -> None:
        """SIGTERM by pid, sent again every 200 ms (Redis refuses one while
        it writes its first AOF, and forgets it), SIGKILL after 10 s."""
        for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
            deadline = time.monotonic() + wait
            while self.process.poll() is None and time.monotonic() < deadline:
                self.process.send_signal(sig)
                try:
                    self.process.wait(0.2)
                except subprocess.TimeoutExpired:
                    pass
            if self.process.poll() is not None:
                break
        if remove:
            shutil.rmtree(self.dir, ignore_errors=True)


def _group_members(group: int) -> list[int]:
    """The running processes (zombies do not run) of process group `group`."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # `pid (comm) state ppid pgrp ...`: the fields after the name.
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z" and int(fields[2]) == group:
            members.append(int(entry))
    return members


class Servers:
    """Started on first use, stopped at the end of the session."""

    def __init__(self) -> None:
        self._started: dict[str, Any] = {}
        self._failed: dict[str, str] = {}

    def _get(self, kind: str, start: Callable[[], Any]) -> Any:
        if kind not in self._started and kind not in self._failed:
            try:
                self._started[kind] = start()
            except NotInstalled as e:
                self._failed[kind] = str(e)
        if kind in self._failed:
            missing(f"{kind}: {self._failed[kind]}")
        return self._started[kind]

    def postgres(self) -> Postgres:
        server: Postgres = self._get("PostgreSQL", Postgres)
        return server

    def etcd(self) -> Etcd:
        if not lh.ETCD:
            missing("this build of the package has no etcd store (build it with --features etcd)")
        server: Etcd = self._get("etcd", Etcd)
        return server

    def firestore(self) -> Firestore:
        """The session's emulator. The first use also points this process
        at it (FIRESTORE_EMULATOR_HOST, which the Rust store reads from the
        process environment when a store is opened — and children inherit):
        a `firestore://` store opened by a test never reaches Google."""
        server: Firestore = self._get("Firestore emulator", Firestore)
        os.environ["FIRESTORE_EMULATOR_HOST"] = server.host
        return server

    def redis(self) -> Redis:
        server: Redis = self._get("Redis", Redis)
        return server

    def stop(self) -> None:
        for server in self._started.values():
            server.stop()


@pytest.fixture(scope="session")
def servers() -> Iterator[Servers]:
    s = Servers()
    yield s
    s.stop()


@pytest.fixture
def firestore_emulator(servers: Servers) -> Firestore:
    """The session's Firestore emulator (started on first use; this
    process's FIRESTORE_EMULATOR_HOST points at it from then on); take a
    project of your own with `unique_project()`."""
    return servers.firestore()


def unique() -> str:
    return "t" + uuid.uuid4().hex[:12]


@pytest.fixture
def ctrl_c_raises() -> Iterator[None]:
    """^C raises KeyboardInterrupt in this test, however the suite was
    started. A process started in the background by a shell without job
    control (`pytest ... &` in a script, as a CI runner may start it)
    inherits SIGINT ignored, and Python then leaves it ignored: ^C — and
    `_thread.interrupt_main()`, which only trips a handled signal — does
    nothing, and a test waiting for it waits forever (seen: a CI run hung
    in the ^C test of test_api.py)."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite://{tmp_path / 'leasehold.db'}"


@pytest.fixture(params=["sqlite", "postgres", "etcd", "firestore", "redis"])
def store_url(request: pytest.FixtureRequest, servers: Servers, tmp_path: Path) -> str:
    """A fresh store of each kind (Firestore: a project of its own on the
    session's emulator; Redis: a key prefix of its own on the session's
    server)."""
    kind = request.param
    if kind == "sqlite":
        return f"sqlite://{tmp_path / 'leasehold.db'}"
    if kind == "postgres":
        return servers.postgres().url(unique())
    if kind == "etcd":
        return servers.etcd().url(unique())
    if kind == "redis":
        return servers.redis().url(unique())
    emulator = servers.firestore()
    return emulator.url(emulator.unique_project())


@pytest.fixture(params=["sqlite", "postgres"])
def queue_store_url(request: pytest.FixtureRequest, servers: Servers, tmp_path: Path) -> str:
    """A fresh store of each kind that has a task queue."""
    if request.param == "sqlite":
        return f"sqlite://{tmp_path / 'leasehold.db'}"
    return servers.postgres().url(unique())


def python(script: str, *args: str, env: Optional[dict[str, str]] = None, **popen: object) -> "subprocess.Popen[str]":
    """Start a Python child running `script` (source text) with `args`."""
    return subprocess.Popen(  # type: ignore[call-overload, no-any-return]
        [sys.executable, "-c", script, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
        **popen,
    )


def read_line(process: "subprocess.Popen[str]", timeout: float = 30) -> str:
    """The next line the child prints (failing with its stderr if it ends)."""
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    import selectors

    with selectors.DefaultSelector() as sel:
        sel.register(process.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if sel.select(timeout=0.1):
                line = process.stdout.readline()
                if line:
                    return line.strip()
                break
    process.kill()
    _, err = process.communicate()
    raise AssertionError(f"the child printed no line (exit {process.returncode}): {err}")


def leasehold_cli() -> Path:
    """The workspace's `leasehold` binary ($LEASEHOLD_BIN, else target/debug
    or target/release); a test that cross-checks with it fails without it —
    a cross-check is never dropped."""
    if "LEASEHOLD_BIN" in os.environ:
        candidates = [Path(os.environ["LEASEHOLD_BIN"])]
    else:
        target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
        candidates = [target / profile / "leasehold" for profile in ("debug", "release")]
    for binary in candidates:
        if binary.exists():
            return binary
    pytest.fail(
        f"the `leasehold` binary this test checks against is missing ({', '.join(map(str, candidates))}): "
        "build it with `cargo build -p leasehold-cli` (scripts/test does), or set LEASEHOLD_BIN"
    )


def block_sqlite(db: Path, seconds: float) -> "subprocess.Popen[str]":
    """Another process holding the SQLite store's write lock for `seconds`
    (so renewals fail until the holder-side deadline). A process of its
    own: SQLite's locks are per process, and Python's sqlite3 module in
    this process would not exclude leasehold's SQLite at all."""
    blocker = python(
        "import sqlite3, sys, time\n"
        "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "c.execute('BEGIN IMMEDIATE')\n"
        "print('locked', flush=True)\n"
        "time.sleep(float(sys.argv[2]))\n",
        str(db),
        str(seconds),
    )
    assert read_line(blocker) == "locked"
    return blocker
