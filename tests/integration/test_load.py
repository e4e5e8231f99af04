#!/usr/bin/python3
"""e2e_load (CTest label "soak"): many concurrent gRPC clients against a
4-worker cluster (mslib.ProcessCluster, --max_inflight_per_model 16).

  nominal   CLIENTS (16, the in-flight bound) clients sending batch-1..3
            requests back to back, each answer checked against NumPy: no
            error and no wrong answer over >= --requests (10,000) requests
            after a warm-up; requests/s, p50 and p99 printed; the RSS of the
            coordinator and of every worker after the run within 10% (plus
            4 MiB for allocator rounding) of its RSS after the warm-up.
  overload  OVERLOAD (256) requests sent at once: each is answered right or
            rejected at once with RESOURCE_EXHAUSTED naming the model and the
            limit; some are rejected; the cluster serves afterwards.

Bounded: the nominal phase stops at --max_duration_s (a failure when fewer
requests were made). Prints one "figures:" line for docs/RELIABILITY.md.

Usage: test_load.py --bin_dir build/bin [--requests N] [--max_duration_s S]
"""
import os
import sys
import threading
import time

import numpy as np

import e2e_common as e2e
import mslib

WORKERS = 4
LIMIT = 16
CLIENTS = 16
WARMUP = 1500
OVERLOAD = 256


def add_args(ap):
    ap.add_argument("--requests", type=int, default=10000)
    ap.add_argument("--max_duration_s", type=int, default=150)


def nominal(env, cl, client, figures):
    c = env.c
    lock = threading.Lock()
    latencies, errors, wrong = [], [], []
    count = [0]
    target = WARMUP + env.args.requests
    stop_at = time.time() + env.args.max_duration_s
    baseline = {}
    warm = threading.Event()

    def loop(i):
        rng = np.random.default_rng(i)
        while time.time() < stop_at:
            with lock:
                if count[0] >= target:
                    return
                count[0] += 1
                n = count[0]
            x = rng.standard_normal((1 + n % 3, 64)).astype(np.float32)
            code, detail = client.infer(x, timeout=30)
            with lock:
                if n > WARMUP:
                    if code == "ok":
                        latencies.append(detail)
                    elif code == "wrong":
                        wrong.append(detail)
                    else:
                        errors.append((code, detail))
            if n == WARMUP:
                warm.set()

    threads = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    warm.wait(timeout=env.args.max_duration_s)
    time.sleep(0.5)  # the warm-up's last requests finish
    pids = {"coordinator": cl.coordinator.pid}
    pids.update({"worker%d" % i: w.pid for i, w in enumerate(cl.workers)})
    baseline = {name: mslib.rss_bytes(pid) for name, pid in pids.items()}
    start = time.time()
    for t in threads:
        t.join(timeout=env.args.max_duration_s + 60)
    took = time.time() - start
    done = len(latencies) + len(errors) + len(wrong)
    rate = done / took if took > 0 else 0
    p50 = mslib.percentile(latencies, 50) * 1000
    p99 = mslib.percentile(latencies, 99) * 1000
    print("    %d requests in %.1fs: %.0f req/s, p50 %.2f ms, p99 %.2f ms, %d errors, %d wrong" % (
        done, took, rate, p50, p99, len(errors), len(wrong)), flush=True)
    figures.update(requests=done, rps=round(rate), p50_ms=round(p50, 2), p99_ms=round(p99, 2),
                   errors=len(errors), wrong=len(wrong))
    c.check(done >= env.args.requests, "nominal: %d requests made after the warm-up (>= %d "
            "within %ds)" % (done, env.args.requests, env.args.max_duration_s))
    c.check(not errors, "nominal: no error at %d clients (limit %d)" % (CLIENTS, LIMIT),
            "    %s" % errors[:5])
    c.check(not wrong, "nominal: every answer equals NumPy", "    %s" % wrong[:5])
    growth = {}
    for name, pid in pids.items():
        after = mslib.rss_bytes(pid)
        growth[name] = (baseline[name], after)
        ok = baseline[name] > 0 and after <= baseline[name] * 1.10 + (4 << 20)
        c.check(ok, "nominal: %s RSS flat (%.1f -> %.1f MiB)" % (
            name, baseline[name] / 2**20, after / 2**20))
    worst = max((a - b) / b for b, a in growth.values() if b > 0)
    figures["rss_growth_max_pct"] = round(100 * worst, 1)
    figures["rss_mib"] = {k: round(a / 2**20, 1) for k, (b, a) in growth.items()}


def overload(env, client, figures):
    c = env.c
    rng = np.random.default_rng(99)
    xs = [rng.standard_normal((3, 64)).astype(np.float32) for _ in range(OVERLOAD)]
    futures = [client.stub.ModelInfer.future(
        mslib.grpc_infer_request(client.pb2, "lin", x, "o%d" % i), timeout=60)
        for i, x in enumerate(xs)]
    counts, wrong, other, messages = {}, [], [], set()
    for x, f in zip(xs, futures):
        try:
            r = f.result()
            bad = client.check(x, r)
            code = "wrong" if bad else "ok"
            if bad:
                wrong.append(bad)
        except client.grpc.RpcError as e:
            code = e.code().name
            if code == "RESOURCE_EXHAUSTED":
                messages.add(e.details())
            else:
                other.append((code, e.details()))
        counts[code] = counts.get(code, 0) + 1
    print("    %d at once: %s; e.g. %s" % (OVERLOAD, counts, sorted(messages)[:1]), flush=True)
    figures["overload"] = counts
    c.check(not wrong, "overload: every answer equals NumPy", "    %s" % wrong[:3])
    c.check(not other, "overload: every failure is RESOURCE_EXHAUSTED", "    %s" % other[:3])
    c.check(counts.get("RESOURCE_EXHAUSTED", 0) > 0,
            "overload: requests beyond the bound are rejected (%d)" %
            counts.get("RESOURCE_EXHAUSTED", 0))
    c.check(messages and all("model 'lin'" in m and "--max_inflight_per_model=%d" % LIMIT in m
                             for m in messages),
            "overload: the rejection names the model and the limit", "    %s" % messages)
    code, detail = client.wait_served()
    c.check(code == "ok", "overload: served right afterwards", detail)


def run(env):
    model_dir = os.path.join(env.root, "models")
    kernel = mslib.write_lin_model(model_dir)
    cl = mslib.ProcessCluster(env.bin_dir, WORKERS, model_dir, os.path.join(env.root, "logs"),
                              coordinator_args=["--max_inflight_per_model", str(LIMIT)])
    figures = {}
    try:
        if not env.c.check(cl.wait_ready(), "cluster of %d workers ready" % WORKERS,
                           cl.logs_tail()):
            return
        client = mslib.LinClient(env.bin_dir, cl.target, kernel)
        nominal(env, cl, client, figures)
        overload(env, client, figures)
        client.close()
    finally:
        print("figures: %s" % figures, flush=True)
        cl.stop()


if __name__ == "__main__":
    sys.exit(e2e.main("load", lambda env: [("load and soak", lambda: run(env))],
                      add_args=add_args, doc=__doc__))
