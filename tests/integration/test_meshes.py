#!/usr/bin/python3
"""e2e_meshes: every model on 1, 2, 4 and 8 workers, and the same answers on
every mesh.

For each worker count it starts `meshserve local` on the model directory of
e2e_common.make_model_dir, runs `meshserve infer` on every model with and
without per-request `--out_sharding`, checks the printed types and compares
each output with the NumPy reference; `status` lists the workers and models;
SIGTERM stops the cluster with every worker. Then every model must answer the
same on every mesh.

Usage: test_meshes.py --bin_dir build/bin [--workers 1,2,4,8] [--keep]
"""
import re
import sys

import numpy as np

import e2e_common as e2e


def printed_types(stdout):
    types = {}
    for line in stdout.splitlines():
        m = re.match(r"^(\S+): (\S+)", line)
        if m:
            types[m.group(1)] = m.group(2)
    return types


def run_mesh(env, workers, results):
    print("== %d worker(s)" % workers, flush=True)
    c, cli = env.c, env.cli
    model_dir, cases = env.models()
    cluster = env.cluster(workers, model_dir, str(workers))
    try:
        for model, (ref_fn, requests) in cases.items():
            for i, (inputs, outs, types) in enumerate(requests):
                what = "%d workers: %s request %d %s" % (workers, model, i, outs or "")
                rc, out, err, outputs = cli.infer(cluster.target, model, inputs, outs)
                if not c.check(rc == 0, what + " succeeds", "    rc=%d\n%s\n%s" % (rc, out, err)):
                    continue
                got_types = printed_types(out)
                for name, t in types.items():
                    c.check(got_types.get(name) == t, "%s: prints %s" % (what, t),
                            "    stdout:\n%s" % out)
                if ref_fn is not None:
                    for name, ref in ref_fn(inputs).items():
                        c.check(outputs.get(name) is not None, "%s: wrote %s.npy" % (what, name))
                        if outputs.get(name) is not None:
                            c.check(outputs[name].dtype == np.float32, "%s: %s is float32" % (what, name))
                            c.close(outputs[name], ref, "%s: %s matches NumPy" % (what, name),
                                    *e2e.tolerance(model))
                results.setdefault((model, i), {})[workers] = outputs
        rc, out, err = cli.run("status", "--target", cluster.target, timeout=60)
        c.check(rc == 0 and ("workers: %d" % workers) in out and "linear" in out,
                "%d workers: status lists the workers and models" % workers,
                "    rc=%d\n%s\n%s" % (rc, out, err))
    finally:
        rc = cluster.stop()
        pids = list(cluster.worker_pids.values())
    c.check(rc == 0, "%d workers: meshserve local exits 0 on SIGTERM" % workers,
            "    rc=%s\n%s" % (rc, cluster.stderr_text()))
    c.check(e2e.wait_gone(pids), "%d workers: every worker process is gone after stop" % workers)


def check_same_across_meshes(c, results):
    for (model, i), by_workers in sorted(results.items()):
        counts = sorted(by_workers)
        base = by_workers[counts[0]]
        for w in counts[1:]:
            for name, value in base.items():
                other = by_workers[w].get(name)
                if other is None:
                    c.check(False, "%s request %d: %s present on %d workers" % (model, i, name, w))
                    continue
                c.close(other, value, "%s request %d: %s on %d workers == on %d" % (
                    model, i, name, w, counts[0]), *e2e.tolerance(model))


def stages(env):
    results = {}
    worker_counts = [int(w) for w in env.args.workers.split(",")]
    return [("%d workers" % w, lambda w=w: run_mesh(env, w, results)) for w in worker_counts] + [
        ("same answers on every mesh", lambda: check_same_across_meshes(env.c, results))]


if __name__ == "__main__":
    sys.exit(e2e.main("meshes", stages, doc=__doc__, add_args=lambda ap: ap.add_argument(
        "--workers", default="1,2,4,8", help="comma list of worker counts")))
