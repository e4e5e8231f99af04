#!/usr/bin/python3
"""e2e_launcher: `meshserve local` itself, with fake coordinator/worker
scripts beside a copy of the meshserve binary (only `meshserve` is needed):
one 'ready' line, worker pids, the coordinator's flags, a killed worker
reported, SIGINT stops every child, --then, a dead coordinator, usage errors.

Usage: test_launcher.py --bin_dir build/bin [--keep]
"""
import os
import re
import shutil
import subprocess
import sys
import time

import e2e_common as e2e
import mslib

FAKE_COORDINATOR = """#!/bin/sh
echo "fake coordinator $*"
port=8500; prev=""
for a in "$@"; do [ "$prev" = "--port" ] && port="$a"; prev="$a"; done
[ "$port" = 0 ] && port=45678  # as the OS would pick one
echo "fake coordinator listening on 127.0.0.1:$port (fake)"
sleep 0.3
echo "fake coordinator: every model servable, ready"
if [ -n "$FAKE_COORDINATOR_EXIT_AFTER" ]; then sleep "$FAKE_COORDINATOR_EXIT_AFTER"; exit 3; fi
exec sleep 600
"""
FAKE_WORKER = """#!/bin/sh
echo "meshserve-worker ready (fake) $*"
exec sleep 600
"""


def l_startswith(lines, prefix):
    return all(l.startswith(prefix) for l in lines)


def run(env):
    print("== meshserve local with fake children", flush=True)
    c, root = env.c, env.root
    fake_bin = os.path.join(root, "fakebin")
    os.makedirs(fake_bin)
    shutil.copy(os.path.join(env.bin_dir, "meshserve"), fake_bin)
    for name, text in (("meshserve-coordinator", FAKE_COORDINATOR),
                       ("meshserve-worker", FAKE_WORKER)):
        path = os.path.join(fake_bin, name)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o755)
    models = os.path.join(root, "fake-models")
    os.makedirs(models, exist_ok=True)
    cluster = env.cluster(3, models, "fake", bin_dir=fake_bin, ready_timeout_s=30)
    try:
        ready_lines = [l for l in cluster.lines if "ready" in l]
        c.check(len(ready_lines) == 1 and l_startswith(ready_lines, "meshserve local: ready"),
                "launcher: exactly one 'ready' line on stdout (children's go to logs)",
                "\n".join(cluster.lines))
        c.check(sorted(cluster.worker_pids) == [0, 1, 2], "launcher: prints 3 worker pids",
                "\n".join(cluster.lines))
        c.check(cluster.target == "127.0.0.1:45678",
                "launcher: --port 0 serves on the port the coordinator says it listens on",
                "%s\n%s" % (cluster.target, "\n".join(cluster.lines)))
        log = os.path.join(root, "logs-fake", "coordinator.log")
        text = open(log).read() if os.path.exists(log) else ""
        c.check("--min_workers 3" in text and "--model_dir " + models in text,
                "launcher: coordinator gets --port/--model_dir/--min_workers", text)
        victim = cluster.worker_pids[1]
        os.kill(victim, 9)
        deadline = time.time() + 5
        while time.time() < deadline and "exited unexpectedly" not in cluster.stderr_text():
            time.sleep(0.1)
        c.check(re.search(r"worker-1 \(pid %d\) exited unexpectedly: killed by signal 9" % victim,
                          cluster.stderr_text()) is not None,
                "launcher: a killed worker is reported", cluster.stderr_text())
        c.check(cluster.proc.poll() is None, "launcher: keeps running after a worker dies")
        cluster.proc.send_signal(2)  # SIGINT, as Ctrl-C
        rc = cluster.proc.wait(timeout=20)
        c.check(rc == 0, "launcher: SIGINT stops it with exit 0", "rc=%s" % rc)
    finally:
        cluster.stop()
    c.check(e2e.wait_gone(list(cluster.worker_pids.values())),
            "launcher: every child is gone after SIGINT")
    local = os.path.join(fake_bin, "meshserve")
    port = mslib.free_port()
    rc, out, err = mslib.run([local, "local", "--workers", "2",
                              "--model_dir", models, "--port", str(port),
                              "--log_dir", os.path.join(root, "logs-then"), "--then",
                              'test "$MESHSERVE_TARGET" = 127.0.0.1:%d && exit 7' % port],
                             timeout=60)
    c.check(rc == 7, "launcher: --then runs with MESHSERVE_TARGET and passes its exit code",
            "rc=%d\n%s\n%s" % (rc, out, err))
    env_vars = dict(os.environ, FAKE_COORDINATOR_EXIT_AFTER="1")
    p = subprocess.run([local, "local", "--workers", "2",
                        "--model_dir", models, "--port", str(mslib.free_port()),
                        "--log_dir", os.path.join(root, "logs-dead-coordinator")],
                       capture_output=True, text=True, timeout=60, env=env_vars)
    c.check(p.returncode == 1 and "coordinator (pid" in p.stderr and "exited unexpectedly" in p.stderr,
            "launcher: a dead coordinator stops everything (exit 1, reported)",
            "rc=%d\n%s\n%s" % (p.returncode, p.stdout, p.stderr))
    rc, out, err = mslib.run([local, "local", "--workers", "0", "--model_dir", models])
    c.check(rc == 2 and "--workers" in err, "launcher: --workers 0 is a usage error naming it", err)
    rc, out, err = mslib.run([local, "local", "--workers", "1",
                              "--model_dir", os.path.join(root, "nope")])
    c.check(rc == 2 and "--model_dir" in err, "launcher: missing --model_dir dir is a usage error", err)


if __name__ == "__main__":
    sys.exit(e2e.main("launcher", lambda env: [("launcher", lambda: run(env))],
                      needs=("meshserve",), doc=__doc__))
