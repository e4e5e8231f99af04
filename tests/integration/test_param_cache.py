#!/usr/bin/python3
"""e2e_param_cache: a program's param-only steps run once per param version
(ExecuteRequest.param_cache; docs/PERFORMANCE.md). The model all-gathers its
kernel on every request if nothing is kept: x P('data', None), kernel
P(None, 'data'), y out_sharding ('data', None), mesh {data: 4} on
`meshserve local --workers 2 --http_port P`. Every answer is checked against
NumPy (x @ kernel):

  1. 40 requests with different x: all right; the coordinator's /metrics
     count one or two kFill runs and the rest kUse;
  2. `meshserve push` of a new kernel: every answer after it uses the new
     kernel (the kept gather of version 1 is not used on version 2), and a
     new kFill is counted;
  3. a third worker joins (new placement, new programs): answers stay right
     and a new kFill is counted;
  4. kill -9 of a worker: once the model is ready again, answers are right
     (the pushed kernel, gathered anew);
  5. a cluster started with --param_cache_bytes 0 answers right and counts
     no kFill or kUse run;
  6. with --param_cache_bytes 8000 (one program's gathered kernel, not two)
     a second input shape's program runs whole on every request, answering
     right;
  7. meshserve-coordinator --max_cached_programs 2 (2 worker processes): 4
     input shapes cycled 3 times answer right (the programs, and what their
     gathers kept, evicted and installed again), the coordinator counts an
     eviction for every compile past the second, and each worker holds at
     most 2 programs (/v1/status).

Usage: test_param_cache.py --bin_dir build/bin [--keep]
"""
import json
import os
import re
import signal
import sys
import time
import urllib.request

import numpy as np

import e2e_common as e2e
import mslib

MODEL = {
    "name": "gat", "mesh": {"data": 4}, "dtype": "float32", "checkpoint": "gat.safetensors",
    "inputs": {"x": {"shape": [-1, 32], "sharding": ["data", None]}},
    "params": {"kernel": {"shape": [32, 24], "sharding": [None, "data"]}},
    "layers": [{"name": "y", "op": "linear", "input": "x", "kernel": "kernel",
                "out_sharding": ["data", None]}],
    "outputs": ["y"],
}


def counts(http_port, metric, label):
    """{label value: count} of the coordinator's counter `metric`."""
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % http_port, timeout=10) as r:
        text = r.read().decode()
    found = {}
    for value, count in re.findall(
            r'^%s\{%s="(\w+)"\} ([0-9.e+]+)$' % (metric, label), text, re.M):
        found[value] = int(float(count))
    return found


def cache_counts(http_port):
    """{mode: count} of meshserve_param_cache_requests_total."""
    return counts(http_port, "meshserve_param_cache_requests_total", "mode")


class Run:
    def __init__(self, env, name, extra_args=(), coordinator_args=None):
        self.env, self.c = env, env.c
        self.rng = np.random.default_rng(5)
        self.model_dir = os.path.join(env.root, "models-" + name)
        os.makedirs(self.model_dir)
        self.kernel = self.rng.standard_normal((32, 24)).astype(np.float32) / 4
        mslib.write_safetensors(os.path.join(self.model_dir, "gat.safetensors"),
                                {"kernel": self.kernel})
        with open(os.path.join(self.model_dir, "gat.json"), "w") as f:
            json.dump(MODEL, f)
        self.http_port = mslib.free_port()
        if coordinator_args is None:  # meshserve local
            self.cluster = env.cluster(2, self.model_dir, name,
                                       extra_args=["--http_port", str(self.http_port)] +
                                       list(extra_args))
        else:  # meshserve-coordinator and 2 meshserve-worker processes
            self.cluster = mslib.ProcessCluster(
                env.bin_dir, 2, self.model_dir, os.path.join(env.root, "logs-" + name),
                coordinator_args=["--http_port", str(self.http_port)] + coordinator_args)
            if not self.cluster.wait_ready():
                raise RuntimeError("cluster not ready:\n" + self.cluster.logs_tail())
        self.client = mslib.client_package(env.bin_dir).MeshserveClient(
            self.cluster.target, timeout_s=30)

    def requests(self, what, n, rows=8):
        """n requests with fresh x of `rows` rows, each checked."""
        right, errors = 0, []
        for _ in range(n):
            x = self.rng.standard_normal((rows, 32)).astype(np.float32)
            try:
                y = self.client.infer("gat", {"x": x})["y"]
            except Exception as e:  # noqa: BLE001 - counted and shown
                errors.append(str(e)[:200])
                continue
            ref = x.astype(np.float64) @ self.kernel.astype(np.float64)
            right += bool(np.allclose(y, ref, rtol=e2e.RTOL,
                                      atol=e2e.ATOL_FRACTION * float(np.max(np.abs(ref)))))
        self.c.check(right == n, "%s: %d of %d answers equal NumPy's" % (what, right, n),
                     "\n".join("    " + e for e in errors[:3]))

    def generation(self):
        st = self.client.status(timeout_s=10)
        return next(x for x in st.models if x.name == "gat").generation

    def wait_ready(self, workers, after_generation, timeout_s=60):
        """Until the model is ready on a generation after `after_generation`
        with `workers` healthy workers."""
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            try:
                st = self.client.status(timeout_s=10)
                m = next((x for x in st.models if x.name == "gat"), None)
                healthy = sum(w.healthy for w in st.workers)
                if (m is not None and m.state == "ready" and m.generation > after_generation
                        and healthy == workers):
                    return True
            except Exception:  # noqa: BLE001 - re-placing: retry
                pass
            time.sleep(0.2)
        return False


def cached(env):
    c, cli = env.c, env.cli
    r = Run(env, "cache")
    try:
        r.requests("version 1", 40)
        n = cache_counts(r.http_port)
        c.check(1 <= n.get("fill", 0) <= 2 and n.get("use", 0) >= 38,
                "version 1: the gather ran once and was kept (%s)" % n)
        paths = counts(r.http_port, "meshserve_inference_async_total", "path")
        c.check(paths.get("callback", 0) >= 38 and sum(paths.values()) == 40,
                "ModelInfer: compiled plans answered by the last worker's callback, "
                "no thread waiting (%s)" % paths)
        r.requests("version 1, 4 rows (a second program)", 5, rows=4)
        n4 = cache_counts(r.http_port)
        c.check(n4.get("fill", 0) == n["fill"] + 1 and n4.get("use", 0) == n["use"] + 4,
                "version 1, 4 rows: its own program keeps its own gather (%s)" % n4)
        n = n4
        r.kernel = r.rng.standard_normal((32, 24)).astype(np.float32)
        path = os.path.join(env.root, "new.safetensors")
        mslib.write_safetensors(path, {"kernel": r.kernel})
        rc, out, err = cli.run("push", "--target", r.cluster.target, "--model", "gat",
                               "--checkpoint", path)
        c.check(rc == 0 and re.search(r"version 2\b", out), "push: version 2", out + err)
        r.requests("version 2", 20)
        n2 = cache_counts(r.http_port)
        c.check(n2.get("fill", 0) > n.get("fill", 0) and n2.get("use", 0) >= n["use"] + 18,
                "version 2: gathered anew once, then kept (%s)" % n2)
        g = r.generation()
        extra = mslib.start_worker(env.bin_dir, r.cluster.target,
                                   os.path.join(r.cluster.log_dir, "extra.log"))
        c.check(r.wait_ready(3, g), "a third worker joins and the model is ready on it")
        r.requests("3 workers", 20)
        n3 = cache_counts(r.http_port)
        c.check(n3.get("fill", 0) > n2.get("fill", 0),
                "3 workers: the new placement's programs gather and keep anew (%s)" % n3)
        g = r.generation()
        os.kill(r.cluster.worker_pids[0], signal.SIGKILL)
        c.check(r.wait_ready(2, g), "kill -9 of worker 0: the model is ready again")
        r.requests("after kill -9", 20)
        mslib.stop_process(extra, grace_s=5)
    finally:
        r.cluster.stop()


def off(env):
    r = Run(env, "off", extra_args=["--param_cache_bytes", "0"])
    try:
        r.requests("--param_cache_bytes 0", 20)
        n = cache_counts(r.http_port)
        env.c.check(n.get("fill", 0) == 0 and n.get("use", 0) == 0,
                    "--param_cache_bytes 0: nothing kept or used (%s)" % n)
    finally:
        r.cluster.stop()


def budget(env):
    """--param_cache_bytes 8000 holds one program's gathered kernel (2 devices x
    32 x 24 floats = 6,144 bytes on each worker), not two: the second input
    shape's program runs its gather on every request."""
    r = Run(env, "budget", extra_args=["--param_cache_bytes", "8000"])
    try:
        r.requests("budget: 8 rows", 10)
        n = cache_counts(r.http_port)
        r.requests("budget: 4 rows (a second program)", 10, rows=4)
        n2 = cache_counts(r.http_port)
        env.c.check(n.get("fill") == 1 and n2 == n,
                    "budget: the first program keeps (%s), the second runs whole (%s)" % (n, n2))
    finally:
        r.cluster.stop()


def metric(http_port, name):
    """The value of the coordinator's unlabelled metric `name`."""
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % http_port, timeout=10) as r:
        text = r.read().decode()
    found = re.search(r"^%s ([0-9.e+]+)$" % name, text, re.M)
    return int(float(found.group(1))) if found else None


def most_programs(http_port, timeout_s=10):
    """The most programs any worker holds (/v1/status), once at most 2 (the
    coordinator uninstalls evicted programs in the background), or after
    timeout_s."""
    deadline = time.time() + timeout_s
    while True:
        url = "http://127.0.0.1:%d/v1/status" % http_port
        with urllib.request.urlopen(url, timeout=10) as r:
            workers = json.loads(r.read().decode())["workers"]
        most = max(w.get("programs", 0) for w in workers)
        if most <= 2 or time.time() >= deadline:
            return most, [w.get("programs") for w in workers]
        time.sleep(0.1)


def bounded(env):
    """--max_cached_programs 2: 4 input shapes cycled 3 times."""
    c = env.c
    r = Run(env, "bounded", coordinator_args=["--max_cached_programs", "2"])
    try:
        worst = []
        for rnd in range(3):
            for rows in (4, 8, 12, 16):
                r.requests("bound 2: round %d, %d rows" % (rnd, rows), 2, rows=rows)
                worst.append(most_programs(r.http_port))
        c.check(all(m <= 2 for m, _ in worst),
                "bound 2: no worker held more than 2 programs after any request (%s)"
                % [per for _, per in worst])
        compiles = metric(r.http_port, "meshserve_program_cache_compiles_total")
        evictions = metric(r.http_port, "meshserve_program_cache_evictions_total")
        cached_now = metric(r.http_port, "meshserve_program_cache_programs")
        c.check(compiles is not None and compiles >= 12 and evictions == compiles - 2 and
                cached_now == 2,
                "bound 2: every request compiled, every compile past the second evicted "
                "one (compiles %s, evictions %s, cached %s)" % (compiles, evictions, cached_now))
    finally:
        r.cluster.stop()


if __name__ == "__main__":
    sys.exit(e2e.main("param_cache", lambda env: [("cached", lambda: cached(env)),
                                                  ("off", lambda: off(env)),
                                                  ("budget", lambda: budget(env)),
                                                  ("bounded", lambda: bounded(env))],
                    doc=__doc__))
