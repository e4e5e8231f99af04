#!/usr/bin/python3
"""e2e_bad_models: a model directory with the bad files of models_bad/ (see
its README) beside examples/models/linear.json still gets ready and serves
linear; status and infer name each bad model's error.

Usage: test_bad_models.py --bin_dir build/bin [--keep]
"""
import os
import shutil
import sys

import numpy as np

import e2e_common as e2e


def make_bad_model_dir(root):
    d = os.path.join(root, "models_bad")
    shutil.copytree(os.path.join(e2e.HERE, "models_bad"), d)
    shutil.copy(os.path.join(e2e.EXAMPLES, "linear.json"), d)
    return d


def run(env):
    print("== bad model files (2 workers)", flush=True)
    c, cli = env.c, env.cli
    d = make_bad_model_dir(env.root)
    cluster = env.cluster(2, d, "bad-models", ready_timeout_s=60, require_ready=False)
    try:
        # "ready" = every loadable model placed; the bad files must not block it.
        c.check(cluster.ready, "bad model dir: the cluster still reports ready",
                "\n".join(cluster.lines) + "\n" + cluster.logs_tail(5))
        rc, out, err, _ = cli.infer(cluster.target, "linear", {"x": np.ones((16, 32), np.float32)})
        c.check(rc == 0, "bad model dir: the good model is served", err)
        rc, out, err = cli.run("status", "--target", cluster.target)
        c.check(rc == 0 and "swiglu_no_out_sharding" in out and "Contracting dimensions" in out,
                "bad model dir: status names the JAX error of swiglu_no_out_sharding", out + err)
        rc, _, err, _ = cli.infer(cluster.target, "swiglu_no_out_sharding",
                                  {"x": np.ones((2, 4, 64), np.float32)})
        e2e.expect_code(c, "infer on a model JAX rejects", rc, err,
                        ["NOT_FOUND", "FAILED_PRECONDITION", "INVALID_ARGUMENT"])
        c.check("Contracting dimensions are sharded" in err,
                "infer on a model JAX rejects names JAX's error", err)
        for name in ("malformed_json", "unknown_op", "bad_checkpoint", "missing_checkpoint"):
            rc, _, err, _ = cli.infer(cluster.target, name, {"x": np.ones((2, 4, 64), np.float32)})
            e2e.expect_code(c, "infer on bad model %s" % name, rc, err,
                            ["NOT_FOUND", "FAILED_PRECONDITION", "INVALID_ARGUMENT", "DATA_LOSS"])
    finally:
        cluster.stop()


if __name__ == "__main__":
    sys.exit(e2e.main("bad_models", lambda env: [("bad models", lambda: run(env))], doc=__doc__))
