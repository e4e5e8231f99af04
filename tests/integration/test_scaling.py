#!/usr/bin/python3
"""e2e_scaling: workers join and leave while requests run (2 -> 4 -> 2
workers on linear_scaled, mesh {"data": -1}); the mesh follows, and every
request is answered with the NumPy reference's answer.

Usage: test_scaling.py --bin_dir build/bin [--keep]
"""
import os
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np

import e2e_common as e2e
import mslib


def model_status(cli, target, model):
    """(mesh, generation) of `model` from `meshserve status`, or (None, -1)."""
    rc, out, _ = cli.run("status", "--target", target, timeout=30)
    for line in out.splitlines() if rc == 0 else []:
        m = re.match(r"^\s+%s\s+\S+\s+(\S+)\s+generation (\d+)" % re.escape(model), line)
        if m:
            return m.group(1), int(m.group(2))
    return None, -1


def run(env):
    """Workers join and leave while requests run: every request is answered."""
    print("== scaling while serving (2 -> 4 -> 2 workers)", flush=True)
    c, bin_dir, root = env.c, env.bin_dir, env.root
    model_dir, cases = env.models()
    model = "linear_scaled"  # mesh {"data": -1}: follows the worker count
    ref_fn, requests = cases[model]
    inputs = requests[0][0]
    ref = ref_fn(inputs)["y"]
    cluster = env.cluster(2, model_dir, "scale")
    extra = []
    stop = threading.Event()
    results = []  # (rc, stderr, max |y - ref|)

    def serve_loop():
        cli = e2e.Cli(bin_dir, os.path.join(root, "scale-requests"))
        os.makedirs(cli.work, exist_ok=True)
        while not stop.is_set():
            rc, _, err, outputs = cli.infer(cluster.target, model, inputs, timeout=120)
            diff = float(np.max(np.abs(outputs["y"] - ref))) if "y" in outputs else None
            results.append((rc, err, diff))

    def wait_mesh(want, timeout_s=90):
        deadline = time.time() + timeout_s
        mesh, gen = None, -1
        while time.time() < deadline:
            mesh, gen = model_status(env.cli, cluster.target, model)
            if mesh == want:
                break
            time.sleep(0.3)
        return mesh, gen

    try:
        mesh0, gen0 = wait_mesh("mesh[data=2]", 30)
        c.check(mesh0 == "mesh[data=2]", "scale: starts on mesh[data=2] (got %s)" % mesh0)
        loop = threading.Thread(target=serve_loop)
        loop.start()
        time.sleep(1.0)
        for i in range(2):
            log = open(os.path.join(cluster.log_dir, "scale-extra-%d.log" % i), "w")
            proc = subprocess.Popen(
                [os.path.join(bin_dir, "meshserve-worker"), "--port", "0",
                 "--coordinator", cluster.target],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            mslib._PROCS.append(proc)
            extra.append(proc)
        mesh1, gen1 = wait_mesh("mesh[data=4]")
        c.check(mesh1 == "mesh[data=4]" and gen1 > gen0,
                "scale up: two joining workers give mesh[data=4] (got %s, generation %d -> %d)"
                % (mesh1, gen0, gen1), cluster.logs_tail(10))
        n_up = len(results)
        time.sleep(2.0)
        for proc in extra:  # graceful leave: SIGTERM drains
            proc.send_signal(signal.SIGTERM)
        for proc in extra:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
        c.check(all(p.poll() is not None for p in extra),
                "scale down: SIGTERMed workers exit within 20 s")
        mesh2, gen2 = wait_mesh("mesh[data=2]")
        c.check(mesh2 == "mesh[data=2]" and gen2 > gen1,
                "scale down: back to mesh[data=2] (got %s, generation %d -> %d)"
                % (mesh2, gen1, gen2), cluster.logs_tail(10))
        time.sleep(1.0)
    finally:
        stop.set()
        if "loop" in locals():
            loop.join(timeout=180)
        for proc in extra:
            mslib.stop_process(proc, grace_s=5)
        cluster.stop()
    failed = [(rc, err) for rc, err, _ in results if rc != 0]
    wrong = [d for rc, _, d in results if rc == 0 and (d is None or d > 1e-4 * np.max(np.abs(ref)))]
    c.check(len(results) >= 5 and n_up < len(results),
            "scale: %d requests ran across the changes (%d before reaching 4 workers)"
            % (len(results), n_up))
    c.check(not failed, "scale: every request during scaling is served (%d failed)" % len(failed),
            "\n".join("    rc=%d %s" % (rc, err.strip()[-300:]) for rc, err in failed[:5]))
    c.check(not wrong, "scale: every answer equals the NumPy reference (%d differ)" % len(wrong))


if __name__ == "__main__":
    sys.exit(e2e.main("scaling", lambda env: [("scaling", lambda: run(env))], doc=__doc__))
