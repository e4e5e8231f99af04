#!/usr/bin/python3
"""e2e_params_scale: pushed weights survive membership changes. On
`meshserve local --workers 4` (replicas on, the default), mslib.mlp_model
(mesh {model: -1}) gets new weights by `meshserve push`; then 4 workers join
(mesh[model=8]), 5 leave by SIGTERM (mesh[model=3]), one is killed with
SIGKILL (mesh[model=2]) and, once its boxes are re-replicated, a second one
(mesh[model=1]). After each change the model answers with the pushed
weights (NumPy reference), status shows version 2 on every placement, and the
change's scale step reports bytes_moved == lower_bound_bytes. A request loop
runs throughout: no answer differs from the pushed reference, and none fails
during the graceful changes.

Usage: test_params_scale.py --bin_dir build/bin [--keep]
"""
import json
import os
import re
import signal
import sys
import threading
import time

import numpy as np

import e2e_common as e2e
import mslib

MODEL = "mlp"


def wait_model(client, want_mesh, timeout_s=60):
    """Polls Status until MODEL is ready on `want_mesh`; returns the model's
    status entry (the last seen) and the whole response."""
    deadline = time.time() + timeout_s
    m, status = None, None
    while time.time() < deadline:
        try:
            status = client.status(timeout_s=10)
            m = next((x for x in status.models if x.name == MODEL), None)
            if m is not None and m.mesh == want_mesh and m.state == "ready":
                return m, status
        except Exception:  # noqa: BLE001 - a coordinator busy re-placing: retry
            pass
        time.sleep(0.2)
    return m, status


def placement_versions(status):
    return sorted({p.version for w in status.workers for p in w.placements if p.model == MODEL})


def run(env):
    c, cli = env.c, env.cli
    rng = np.random.default_rng(11)
    model = mslib.mlp_model(MODEL)
    model_dir = os.path.join(env.root, "models")
    os.makedirs(model_dir)
    with open(os.path.join(model_dir, MODEL + ".json"), "w") as f:
        json.dump(model, f)
    x = rng.standard_normal((6, 16)).astype(np.float32)
    cluster = env.cluster(4, model_dir, "scale")
    mc = mslib.client_package(env.bin_dir)
    client = mc.MeshserveClient(cluster.target, timeout_s=60)
    new = mslib.mlp_random_params(model, rng)
    path = os.path.join(env.root, "new.safetensors")
    mslib.write_safetensors(path, new)
    rc, out, err = cli.run("push", "--target", cluster.target, "--model", MODEL,
                           "--checkpoint", path)
    if not c.check(rc == 0 and re.search(r"version 2\b", out), "push: version 2", out + err):
        return
    ref = mslib.mlp_ref(new, x)
    atol = e2e.ATOL_FRACTION * float(np.max(np.abs(ref)))
    phase = ["steady"]
    answers = []  # (phase, ok, right)
    errors = []
    stop = threading.Event()

    def loop():
        while not stop.is_set():
            p = phase[0]
            try:
                y = client.infer(MODEL, {"x": x}, timeout_s=30)["y"]
                answers.append((p, True, bool(np.allclose(y, ref, rtol=e2e.RTOL, atol=atol))))
            except Exception as e:  # noqa: BLE001 - counted per phase
                answers.append((p, False, False))
                errors.append("%s: %s" % (p, str(e)[:300]))
            time.sleep(0.02)

    def check_change(what, want_mesh, workers):
        m, status = wait_model(client, want_mesh)
        if not c.check(m is not None and m.mesh == want_mesh and m.state == "ready",
                       "%s: ready on %s" % (what, want_mesh),
                       "    got %s\n%s" % (m and (m.mesh, m.state), cluster.logs_tail(8))):
            return
        y = client.infer(MODEL, {"x": x})["y"]
        c.close(y, ref, "%s: answers with the pushed weights" % what)
        c.check(m.version == 2 and placement_versions(status) == [2],
                "%s: version 2 in status and on every placement" % what,
                "    model %d, placements %s" % (m.version, placement_versions(status)))
        healthy = sum(w.healthy for w in status.workers)  # departed ones stay listed a while
        c.check(healthy == workers, "%s: %d healthy workers" % (what, workers),
                "    got %d" % healthy)
        steps = list(m.scale_steps)
        last = steps[-1] if steps else None
        c.check(last is not None and last.generation == m.generation
                and last.bytes_moved == last.lower_bound_bytes,
                "%s: the scale step moves the lower bound (%s bytes moved, %s lower bound, "
                "%.3f s)" % (what, last and last.bytes_moved, last and last.lower_bound_bytes,
                             last.seconds if last else 0), "    %s" % last)
        rc, out, _ = cli.run("status", "--target", cluster.target)
        c.check(rc == 0 and "last scale step: generation %d, %d workers" % (m.generation, workers)
                in out and "workers: " in out,
                "%s: meshserve status shows the last scale step" % what, out)

    thread = threading.Thread(target=loop)
    thread.start()
    extra = []
    try:
        m, _ = wait_model(client, "mesh[model=4]")
        c.check(m is not None and m.replicas == 1, "start: 4 workers, replicas 1",
                "    %s" % m)
        phase[0] = "up"
        for i in range(4):
            extra.append(mslib.start_worker(env.bin_dir, cluster.target,
                                            os.path.join(cluster.log_dir, "extra-%d.log" % i)))
        check_change("scale 4 -> 8", "mesh[model=8]", 8)
        phase[0] = "down"
        leaving = list(extra) + [cluster.worker_pids[3]]
        for proc in extra:
            proc.send_signal(signal.SIGTERM)
        os.kill(cluster.worker_pids[3], signal.SIGTERM)
        for proc in extra:
            try:
                proc.wait(timeout=30)
            except Exception:  # noqa: BLE001
                pass
        c.check(e2e.wait_gone([cluster.worker_pids[3]] + [p.pid for p in extra], 30),
                "scale 8 -> 3: the %d SIGTERMed workers exit" % len(leaving))
        check_change("scale 8 -> 3", "mesh[model=3]", 3)
        phase[0] = "kill"
        os.kill(cluster.worker_pids[2], signal.SIGKILL)
        check_change("kill -9 of a worker (3 -> 2)", "mesh[model=2]", 2)
        # The lost boxes were re-replicated onto the 2 survivors: a second loss
        # loses nothing either.
        phase[0] = "kill2"
        os.kill(cluster.worker_pids[1], signal.SIGKILL)
        check_change("second kill -9 (2 -> 1)", "mesh[model=1]", 1)
        phase[0] = "after"
        time.sleep(1.0)
    finally:
        stop.set()
        thread.join(timeout=120)
        for proc in extra:
            mslib.stop_process(proc, grace_s=5)
        cluster.stop()
    by_phase = {}
    for p, ok, right in answers:
        n, failed, wrong = by_phase.get(p, (0, 0, 0))
        by_phase[p] = (n + 1, failed + (not ok), wrong + (ok and not right))
    c.check(len(answers) >= 10, "load: %d requests ran across the changes %s"
            % (len(answers), by_phase))
    c.check(all(w == 0 for _, _, w in by_phase.values()),
            "load: no answer differs from the pushed reference %s" % by_phase)
    c.check(all(by_phase.get(p, (0, 0, 0))[1] == 0 for p in ("steady", "up", "down", "after")),
            "load: no request fails outside the kill -9 %s" % by_phase,
            "\n".join("    " + e for e in errors[:5]))


if __name__ == "__main__":
    sys.exit(e2e.main("params_scale", lambda env: [("scale", lambda: run(env))], doc=__doc__))
