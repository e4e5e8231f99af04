#!/usr/bin/python3
"""e2e_describe_bench: on 8 workers, `meshserve describe` types swiglu as JAX
does and `meshserve bench` runs 40 requests without errors.

Usage: test_describe_bench.py --bin_dir build/bin [--workers 8] [--keep]
"""
import json
import sys

import e2e_common as e2e


def check_describe(c, cli, cluster):
    rc, out, err = cli.run("describe", "--target", cluster.target, "swiglu",
                           "--input_shape", "x=8,4096,2048", timeout=120)
    lines = {l.split()[0]: l.split()[1] for l in out.splitlines()
             if len(l.split()) >= 2 and not l.startswith("#")}
    c.check(rc == 0 and lines.get("gate") == "float32[8@fsdp,4096,8192@model]",
            "describe swiglu: gate is float32[8@fsdp,4096,8192@model]",
            "    rc=%d\n%s\n%s" % (rc, out, err))
    for name, t in (("x", "float32[8@fsdp,4096,2048]"),
                    ("gate_proj.kernel", "float32[2048@fsdp,8192@model]"),
                    ("down_proj.kernel", "float32[8192@model,2048@fsdp]"),
                    ("h", "float32[8@fsdp,4096,8192@model]"),
                    ("y", "float32[8@fsdp,4096,2048@model]")):
        c.check(lines.get(name) == t, "describe swiglu: %s is %s" % (name, t),
                "    got %s" % lines.get(name))


def check_bench(c, cli, cluster):
    rc, out, err = cli.run("bench", "--target", cluster.target, "--model", "linear",
                           "--input_shape", "x=16,32", "--concurrency", "4",
                           "--requests", "40", timeout=300)
    last = out.strip().splitlines()[-1] if out.strip() else ""
    try:
        stats = json.loads(last)
    except ValueError:
        stats = {}
    c.check(rc == 0 and stats.get("requests") == 40 and stats.get("errors") == 0
            and stats.get("p50_ms", 0) > 0 and stats.get("p99_ms", 0) >= stats.get("p50_ms", 0)
            and stats.get("requests_per_s", 0) > 0,
            "bench: 40 requests, 0 errors, JSON line last", "    rc=%d\n%s\n%s" % (rc, out, err))


def run(env):
    workers = env.args.workers
    print("== describe and bench (%d workers)" % workers, flush=True)
    model_dir, _ = env.models()
    cluster = env.cluster(workers, model_dir, "describe-bench")
    try:
        check_describe(env.c, env.cli, cluster)
        check_bench(env.c, env.cli, cluster)
    finally:
        cluster.stop()


if __name__ == "__main__":
    sys.exit(e2e.main("describe_bench", lambda env: [("describe and bench", lambda: run(env))],
                      doc=__doc__, add_args=lambda ap: ap.add_argument(
                          "--workers", type=int, default=8)))
