"""How long a second report takes to answer (issue 23: each froze the
interpreter — kill -9 was the only way out). Each sequence runs in a child
interpreter, killed after LIMIT seconds.

    python bench/second_reports.py [LIMIT]
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time

SEQUENCES = {
    "l.release(); l.release()": "l = store.lease('x', ttl='10s').acquire(); l.release(); l.release()",
    "release() after with": "with store.lease('x', ttl='10s') as l: pass\nl.release()",
    "release() never acquired": "store.lease('x', ttl='10s').release()",
    "t.done(); t.done()": "t = claimed(); t.done(); t.done()",
    "t.done(); t.fail()": "t = claimed(); t.done(); t.fail('x')",
    "t.release(); t.done()": "t = claimed(); t.release(); t.done()",
    "with t: pass; t.release()": "t = claimed()\nwith t: pass\nt.release()",
}

PRELUDE = """
import sys, pyleasehold as lh
store = lh.Store("sqlite://" + sys.argv[1])
def claimed():
    q = store.queue("q"); q.add({"n": 1}); return q.claim(ttl="1m")
try:
    pass
"""


def main() -> None:
    limit = float(sys.argv[1]) if len(sys.argv) > 1 else 10.0
    for name, code in SEQUENCES.items():
        body = "\n".join("    " + line for line in code.splitlines())
        script = PRELUDE.replace("    pass\n", body + "\n") + "except Exception as e:\n    print(type(e).__name__)\n"
        with tempfile.TemporaryDirectory() as d:
            child = subprocess.Popen([sys.executable, "-c", script, f"{d}/l.db"], stdout=subprocess.PIPE, text=True)
            # Time from the start: the child also imports and opens the store.
            started = time.monotonic()
            try:
                out, _ = child.communicate(timeout=limit)
                print(f"{name:28} answered {out.strip() or 'nothing'} in {time.monotonic() - started:.2f} s (whole child)")
            except subprocess.TimeoutExpired:
                child.kill()
                child.communicate()
                print(f"{name:28} FROZE: killed after {limit:.0f} s")


if __name__ == "__main__":
    main()
