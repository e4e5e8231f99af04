#!/usr/bin/python3
"""The docker-compose cluster, checked from the host as a user would use it:
parameters live in the cluster (issue #8) and the worker count scales while it
serves.

  1. `docker-compose up -d --scale worker=4`: `linear` (examples/models) is
     served and answers x @ kernel, the kernel from its seeded initializer
     (mslib.init_params, an independent NumPy implementation).
  2. `meshserve push` of a NumPy-made kernel from the host: version 2, answers
     equal x @ new kernel.
  3. `--scale worker=8` under traffic, then `docker kill` of one worker, then a
     restart of the coordinator container: every answer is the pushed
     kernel's (never the seed's, never wrong); the version stays 2.
  4. `meshserve pull` returns the pushed kernel byte for byte.

It needs a Docker engine and the images (deploy/start-dockerd.sh,
deploy/make-base-image.sh, `docker-compose build`); `tests/compose/run.sh`
does all of it. Not part of scripts/test.sh: building the image takes
10-20 minutes on two cores.

Usage: compose_check.py --bin_dir build/bin [--project mscheck] [--keep]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import mslib  # noqa: E402

TARGET = "localhost:8500"


class Checks:
    def __init__(self):
        self.passed = 0
        self.failed = []

    def check(self, ok, what, detail=""):
        print("%s %s" % ("ok  " if ok else "FAIL", what), flush=True)
        if ok:
            self.passed += 1
        else:
            self.failed.append(what)
            if detail:
                print("    " + str(detail).replace("\n", "\n    ")[:3000], flush=True)


class Compose:
    def __init__(self, project):
        self.base = ["docker-compose", "-p", project, "-f", os.path.join(ROOT, "docker-compose.yml")]
        self.project = project

    def run(self, *args, timeout=600):
        p = subprocess.run(self.base + list(args), cwd=ROOT, capture_output=True, text=True,
                           timeout=timeout)
        return p.returncode, p.stdout + p.stderr

    def containers(self, service):
        rc, out = self.run("ps", "-q", service)
        return [c for c in out.split() if re.fullmatch(r"[0-9a-f]{12,64}", c)]


class Cli:
    def __init__(self, bin_dir):
        self.exe = os.path.join(bin_dir, "meshserve")

    def run(self, *args, timeout=120):
        p = subprocess.run([self.exe] + list(args), capture_output=True, text=True,
                           timeout=timeout)
        return p.returncode, p.stdout + p.stderr



class Status:
    """ClusterService.Status through the built Python client."""

    def __init__(self, bin_dir):
        self.mc = mslib.client_package(bin_dir)
        self.client = self.mc.MeshserveClient(TARGET, timeout_s=30)

    def get(self):
        """(healthy workers, linear's version or None when not ready, text)."""
        try:
            st = self.client.status(timeout_s=10)
        except Exception as e:  # noqa: BLE001 - coordinator down or busy: retry
            return 0, None, str(e)
        healthy = sum(1 for w in st.workers if w.healthy)
        m = next((m for m in st.models if m.name == "linear"), None)
        version = m.version if m is not None and m.state == "ready" else None
        return healthy, version, str(st)[-3000:]


def wait_for(what, fn, timeout_s):
    deadline = time.time() + timeout_s
    last = None
    while time.time() < deadline:
        ok, last = fn()
        if ok:
            return True, last
        time.sleep(1)
    print("    gave up waiting for %s" % what, flush=True)
    return False, last


class Client:
    """Batch-1..3 requests to `linear` over gRPC; each answer is right for
    exactly one of the given kernels, or it is wrong."""

    def __init__(self, bin_dir):
        (self.grpc, self.pb2, pb2_grpc) = mslib.grpc_stubs(bin_dir)[:3]
        self.channel = self.grpc.insecure_channel(TARGET, options=[
            ("grpc.initial_reconnect_backoff_ms", 100), ("grpc.min_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 500)])
        self.stub = pb2_grpc.GRPCInferenceServiceStub(self.channel)

    def infer(self, x, kernels, timeout=30):
        """("ok", index of the matching kernel), ("wrong", detail) or (code, message)."""
        try:
            r = self.stub.ModelInfer(mslib.grpc_infer_request(self.pb2, "linear", x),
                                     timeout=timeout)
        except self.grpc.RpcError as e:
            return e.code().name, e.details() or ""
        y = mslib.grpc_output(r, (x.shape[0], 32)).astype(np.float64)
        for i, k in enumerate(kernels):
            ref = x.astype(np.float64) @ k
            if np.allclose(y, ref, rtol=1e-5, atol=1e-5 * float(np.max(np.abs(ref)))):
                return "ok", i
        return "wrong", "matches none of %d kernels" % len(kernels)


class PushedClient:
    """Client for mslib.Traffic: "ok" is the pushed kernel's answer, "seed"
    the seed kernel's (a stale version), "wrong" neither."""

    def __init__(self, client, pushed, seed):
        self.client, self.kernels = client, [pushed, seed]

    def infer(self, x, timeout=30):
        code, detail = self.client.infer(x, self.kernels, timeout=timeout)
        if code == "ok":
            return ("ok", 0) if detail == 0 else ("seed", "seed kernel's answer")
        return code, detail


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin_dir", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--project", default="mscheck")
    ap.add_argument("--keep", action="store_true", help="leave the cluster running")
    args = ap.parse_args()
    c = Checks()
    compose, cli = Compose(args.project), Cli(args.bin_dir)
    status = None
    with open(os.path.join(ROOT, "examples", "models", "linear.json")) as f:
        seed_kernel = mslib.init_params(json.load(f))["kernel"].astype(np.float64)
    new_kernel32 = (np.random.default_rng(11).standard_normal((32, 32)) / 4).astype(np.float32)
    new_kernel = new_kernel32.astype(np.float64)
    # linear's x is P('data') over its 8 devices: the rows must divide by 8.
    x = np.random.default_rng(5).standard_normal((8, 32)).astype(np.float32)
    tmp = tempfile.mkdtemp(prefix="compose-check-")
    figures = {}
    try:
        compose.run("down", "--remove-orphans", timeout=300)
        start = time.time()
        rc, out = compose.run("up", "-d", "--scale", "worker=4", timeout=900)
        c.check(rc == 0, "docker-compose up -d --scale worker=4", out[-2000:])

        status = Status(args.bin_dir)

        def ready(n):
            healthy, version, text = status.get()
            return healthy == n and version is not None, text
        ok, out = wait_for("4 workers and linear ready", lambda: ready(4), 180)
        figures["up_s"] = time.time() - start
        c.check(ok, "status: 4 workers, linear ready (%.1f s after up)" % figures["up_s"], out)
        client = Client(args.bin_dir)
        ok, _ = wait_for("a right answer", lambda: (client.infer(x, [seed_kernel])[0] == "ok", 0), 60)
        c.check(ok, "linear answers x @ kernel of its seeded initializer (NumPy reference)")

        ckpt = os.path.join(tmp, "new.safetensors")
        mslib.write_safetensors(ckpt, {"kernel": new_kernel32})
        rc, out = cli.run("push", "--target", TARGET, "--model", "linear", "--checkpoint", ckpt)
        c.check(rc == 0, "meshserve push from the host", out)
        # The workers advertise container names, which the host cannot resolve:
        # the push says so and goes through the coordinator.
        print("    push %s" % next((l for l in out.splitlines() if l.startswith("path:")),
                                    "path: (none printed)"), flush=True)
        _, version, out = status.get()
        c.check(version == 2, "status shows linear at version 2", out)
        code, detail = client.infer(x, [new_kernel, seed_kernel])
        c.check((code, detail) == ("ok", 0), "after the push, answers use the pushed kernel",
                "%s %s" % (code, detail))

        traffic = mslib.Traffic(PushedClient(client, new_kernel, seed_kernel), clients=3,
                                width=32, row_multiple=8)
        time.sleep(1)
        start = time.time()
        events = [(start, "scale 4 -> 8")]
        rc, out = compose.run("up", "-d", "--scale", "worker=8", "--no-recreate", timeout=600)
        c.check(rc == 0, "docker-compose up -d --scale worker=8 while serving", out[-2000:])
        ok, out = wait_for("8 workers", lambda: ready(8), 180)
        figures["scale_s"] = time.time() - start
        c.check(ok, "status: 8 workers (%.1f s)" % figures["scale_s"], out)
        time.sleep(2)

        workers = compose.containers("worker")
        events.append((time.time(), "docker kill"))
        rc, out = subprocess.run(["docker", "kill", workers[-1]], capture_output=True,
                                 text=True).returncode, ""
        c.check(rc == 0, "docker kill of one worker container")
        ok, out = wait_for("7 workers", lambda: ready(7), 120)
        c.check(ok, "status: 7 workers after the kill", out)
        time.sleep(2)

        events.append((time.time(), "coordinator restart"))
        rc, out = compose.run("restart", "coordinator", timeout=300)
        c.check(rc == 0, "docker-compose restart coordinator", out[-2000:])
        ok, out = wait_for("linear ready after the restart", lambda: ready(7), 180)
        c.check(ok and status.get()[1] == 2,
                "after the coordinator restart: 7 workers, linear still version 2", out)
        ok, _ = wait_for("a right answer after the restart",
                         lambda: (client.infer(x, [new_kernel])[0] == "ok", 0), 60)
        finished, counts = traffic.stop(), traffic.counts()
        print("    traffic: %s" % counts, flush=True)
        c.check(finished, "every traffic client returned (no hang)")
        c.check(counts.get("wrong", 0) == 0 and counts.get("seed", 0) == 0,
                "no answer was wrong or used the seed's kernel after the push (%s)" % counts)
        c.check(counts.get("ok", 0) > 0, "answers were served throughout (%s)" % counts)
        bad = {k: v for k, v in counts.items() if k not in ("ok", "UNAVAILABLE")}
        # When and why each other failure came: after which event, how long after.
        when = []
        for t, code, detail in list(traffic.outcomes):
            if code not in ("ok", "UNAVAILABLE") and len(when) < 10:
                at, event = max((e for e in events if e[0] <= t), default=(start, "start"))
                when.append("%s +%.2f s: %s %s" % (event, t - at, code, detail))
        c.check(not bad, "every failure during scale, kill and restart is UNAVAILABLE (%s)" % bad,
                "\n".join(when))
        c.check(ok, "served with the pushed kernel after the restart")

        out_path = os.path.join(tmp, "pulled.safetensors")
        rc, out = cli.run("pull", "--target", TARGET, "--model", "linear", "--output", out_path)
        pulled = mslib.read_safetensors(out_path)[0] if rc == 0 else {}
        c.check(rc == 0 and "kernel" in pulled and
                pulled["kernel"].tobytes() == new_kernel32.tobytes(),
                "meshserve pull returns the pushed kernel byte for byte", out)
        client.channel.close()
        status.client.close()
    finally:
        if not args.keep:
            rc, out = compose.run("down", "--remove-orphans", timeout=300)
            if rc != 0:
                print(out[-2000:])
    print("figures: %s" % json.dumps({k: round(v, 1) for k, v in figures.items()}))
    print("compose: %d passed, %d failed" % (c.passed, len(c.failed)))
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main())
