"""`leasehold serve` in a real headless browser (Debian's chromium, driven
by Playwright), and /metrics through Prometheus' own text parser.

Run by scripts/test: LEASEHOLD_BIN names the binary, SCREENSHOTS where the
pictures go (under target/). Each test starts its own store and serve on
127.0.0.1 and stops them by pid.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request

import pytest
from playwright.sync_api import sync_playwright
from prometheus_client.parser import text_string_to_metric_families

BIN = os.environ.get("LEASEHOLD_BIN", "target/debug/leasehold")
SHOTS = os.environ.get("SCREENSHOTS", "target/serve-screenshots")
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
HOSTILE = '<img src=x onerror="document.title=\'pwned\'">\u202eevil'


class Env:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="leasehold-serve-")
        self.env = dict(os.environ, LEASEHOLD_STORE=f"sqlite://{self.dir}/s.db", NO_COLOR="1")
        self.procs = []

    def run(self, *args, check=True):
        p = subprocess.run([BIN, *args], env=self.env, capture_output=True, text=True, timeout=60)
        if check and p.returncode != 0:
            raise AssertionError(f"leasehold {args}: {p.returncode} {p.stderr}")
        return p

    def spawn(self, *args):
        p = subprocess.Popen([BIN, *args], env=self.env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.procs.append(p)
        return p

    def serve(self, *args):
        p = self.spawn("serve", "--listen", "127.0.0.1:0", "--refresh", "250ms", *args)
        line = p.stderr.readline()
        m = re.search(r"http://([^/]+)/", line)
        assert m, line
        return f"http://{m.group(1)}"

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def env():
    e = Env()
    yield e
    e.close()


def get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def metrics(base):
    out = {}
    for family in text_string_to_metric_families(get(base + "/metrics")):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def wait_for(what, limit=10.0):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        v = what()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError("timed out")


def test_metrics_parse_and_count_what_happened(env):
    env.run("acquire", "warmup", "--ttl", "1m")
    base = env.serve()
    # What this test does after serve started is what the counters say.
    for _ in range(3):
        t = env.run("acquire", "job", "--ttl", "1m").stdout.strip()
        env.run("fence", "job", "--token", t)
        env.run("release", "job", "--token", t)
    env.run("fence", "job", "--token", "1", check=False)          # refused: stale
    env.run("renew", "job", "--token", "1", check=False)          # refused: stale
    env.run("acquire", "short", "--ttl", "200ms")
    time.sleep(0.4)
    env.run("acquire", "short", "--ttl", "1m")                     # expiry + takeover
    env.run("task", "add", "q", "--id", "a")
    env.run("task", "add", "q", "--id", "b", "--delay", "1h")
    c = json.loads(env.run("task", "claim", "q").stdout)
    env.run("task", "done", "q", c["id"], "--token", str(c["token"]))

    def counted():
        m = metrics(base)
        want = {
            ("leasehold_lease_grants_total", "job"): 3,
            ("leasehold_lease_releases_total", "job"): 3,
            ("leasehold_fence_passes_total", "job"): 3,
            ("leasehold_fence_refusals_total", "job"): 1,
            ("leasehold_lease_refusals_total", "job"): 1,
            ("leasehold_lease_grants_total", "short"): 2,
            ("leasehold_lease_expiries_total", "short"): 1,
            ("leasehold_lease_takeovers_by_expiry_total", "short"): 1,
        }
        got = {k: m.get((k[0], (("name", k[1]),))) for k in want}
        counted.last = got
        return m if got == want else None

    try:
        m = wait_for(counted)
    except AssertionError:
        raise AssertionError(f"counters: {counted.last}") from None
    assert ("leasehold_lease_grants_total", (("name", "warmup"),)) not in m, "nothing before serve started"
    assert m[("leasehold_lease_holders", (("mode", "exclusive"), ("name", "short")))] == 1
    assert m[("leasehold_queue_tasks", (("queue", "q"), ("state", "done")))] == 1
    assert m[("leasehold_queue_tasks", (("queue", "q"), ("state", "pending")))] == 1
    assert m[("leasehold_queue_completions_total", (("queue", "q"),))] == 1
    assert m[("leasehold_queue_claims_total", (("queue", "q"),))] == 1
    assert ("leasehold_queue_oldest_pending_age_seconds", (("queue", "q"),)) in m


def chromium(p):
    return p.chromium.launch(
        executable_path=CHROMIUM,
        args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
              "--disable-sync", "--no-first-run", "--disable-quic", "--disable-default-apps",
              "--disable-domain-reliability", "--metrics-recording-only"],
    )


def test_the_page_in_a_browser(env):
    os.makedirs(SHOTS, exist_ok=True)
    # A history worth drawing: releases, an expiry taken over, fences.
    t = env.run("acquire", "nightly-report", "--ttl", "1m", "--owner", "alice").stdout.strip()
    env.run("fence", "nightly-report", "--token", t)
    time.sleep(0.3)
    env.run("release", "nightly-report", "--token", t, "--owner", "alice")
    env.run("acquire", "nightly-report", "--ttl", "300ms", "--owner", "bob")
    time.sleep(0.6)
    env.run("acquire", "nightly-report", "--ttl", "1m", "--owner", "carol")
    env.run("fence", "nightly-report", "--token", t, check=False)
    holder = env.spawn("run", "nightly-sync", "--ttl", "2m", "--", "sleep", "600")
    wait_for(lambda: "nightly-sync" in env.run("list", "--live").stdout)
    env.run("acquire", HOSTILE, "--ttl", "10m")
    for i in range(12):
        env.run("acquire", f"worker-{i:02}", "--ttl", f"{30 + i * 7}s", "--shared")
    env.run("task", "add", "crawl", "--id", "a", "--payload", '{"url": "<script>x</script>"}')
    env.run("task", "add", "crawl", "--id", "b")
    env.run("task", "add", "crawl", "--id", "c")
    c = json.loads(env.run("task", "claim", "crawl").stdout)
    env.run("task", "fail", "crawl", c["id"], "--token", str(c["token"]), "--no-retry",
            "--error", "<b>HTTP 503</b> from upstream")
    env.run("task", "claim", "crawl", "--ttl", "10m")
    base = env.serve()

    with sync_playwright() as p:
        browser = chromium(p)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        requests = []
        page.on("request", lambda r: requests.append(r.url))
        dialogs = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))

        page.goto(base + "/")
        page.wait_for_selector("table.leases")
        # The countdown moves without reloading.
        span = page.locator("tr.held .countdown").first
        first = span.text_content()
        page.wait_for_timeout(1500)
        assert span.text_content() != first
        # A hostile name is text, never markup.
        names = page.locator("a.name").all_text_contents()
        assert HOSTILE in names, names
        assert page.locator("img[src=x]").count() == 0 and page.title() != "pwned" and not dialogs
        # Read-only: no form that changes anything.
        assert page.locator("form[method=post]").count() == 0
        page.screenshot(path=f"{SHOTS}/leases.png", full_page=True)

        # The timeline: a takeover made from the CLI appears within 5 s.
        page.goto(base + "/timeline?name=nightly-report&name=nightly-sync&range=1m")
        page.wait_for_selector("svg.chart .bar")
        assert page.locator("svg.chart .mark.proof").count() == 0
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        subprocess.run(["sleep", "0.2"])
        env.run("acquire", "nightly-sync", "--ttl", "2m", "--wait", "5s")
        started = time.monotonic()
        page.wait_for_selector("svg.chart .mark.proof", timeout=5000)
        assert time.monotonic() - started < 5
        assert page.locator("svg.chart .bar.takenover").count() >= 1
        assert page.locator("svg.chart .bar title").first.text_content().startswith("token ")
        page.wait_for_timeout(300)
        page.screenshot(path=f"{SHOTS}/timeline.png", full_page=True)

        page.goto(base + "/queues/crawl")
        page.wait_for_selector("dl.counts")
        assert "HTTP 503" in page.content() and page.locator("b").count() == 0
        assert page.locator("form[method=post]").count() == 0, "no actions without --allow-actions"
        page.screenshot(path=f"{SHOTS}/queue.png", full_page=True)

        page.goto(base + "/queues/crawl/tasks/a")
        assert "<script>x</script>" in " ".join(page.locator("pre").all_text_contents())

        # Nothing left the machine: every request went to this serve.
        assert requests and all(u.startswith(base + "/") for u in requests), requests
        browser.close()
