#!/usr/bin/python3
"""e2e_worker_kill: on 4 workers, a worker killed (SIGKILL) mid-request gives
UNAVAILABLE or a retried success, later requests are served again with the
right answer, and `meshserve local` reports the dead worker.

Usage: test_worker_kill.py --bin_dir build/bin [--keep]
"""
import os
import re
import sys
import threading
import time

import numpy as np

import e2e_common as e2e


def run(env):
    print("== worker killed mid-request (4 workers)", flush=True)
    c, cli = env.c, env.cli
    model_dir, cases = env.models()
    cluster = env.cluster(4, model_dir, "kill")
    try:
        big = np.random.default_rng(1).standard_normal((8, 256, 2048)).astype(np.float32)
        # Warm up (compile) with the same shapes, and time it.
        start = time.time()
        rc, _, err, _ = cli.infer(cluster.target, "swiglu", {"x": big})
        took = time.time() - start
        c.check(rc == 0, "kill: warm-up request on swiglu x[8,256,2048] (%.2fs)" % took, err)
        result = {}

        def background():
            result["r"] = cli.infer(cluster.target, "swiglu", {"x": big}, timeout=300,
                                    extra=("--timeout_s", "60"))
        thread = threading.Thread(target=background)
        thread.start()
        time.sleep(min(0.5, took / 3))
        victim = cluster.worker_pids[1]
        os.kill(victim, 9)
        thread.join(timeout=300)
        rc, out, err, _ = result.get("r", (-1, "", "no result", {}))
        code = re.search(r"meshserve infer: ([A-Z_]+):", err)
        c.check(rc == 0 or "UNAVAILABLE" in err,
                "kill: the request in flight fails with UNAVAILABLE or is retried "
                "(got %s)" % ("OK (retried)" if rc == 0 else code.group(1) if code else rc), err)
        # The next requests are served (placement moves off the dead worker).
        ref_fn, requests = cases["linear"]
        inputs = requests[0][0]
        ok = False
        deadline = time.time() + 30
        attempts = 0
        while time.time() < deadline and attempts < 60:
            attempts += 1
            rc, out, err, outputs = cli.infer(cluster.target, "linear", inputs)
            if rc == 0:
                ok = True
                break
            time.sleep(0.5)
        if c.check(ok, "kill: a later request is served (after %d attempts)" % attempts, err):
            c.close(outputs["y"], ref_fn(inputs)["y"], "kill: the later answer is right")
        time.sleep(0.5)
        c.check("exited unexpectedly" in cluster.stderr_text(),
                "kill: meshserve local reports the dead worker", cluster.stderr_text())
    finally:
        cluster.stop()


if __name__ == "__main__":
    sys.exit(e2e.main("worker_kill", lambda env: [("worker kill", lambda: run(env))], doc=__doc__))
