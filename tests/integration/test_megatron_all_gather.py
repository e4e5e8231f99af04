#!/usr/bin/python3
"""e2e_megatron_all_gather: the example transformer in a Megatron
column-then-row layout (bench/suggest_quality.py's "megatron_column_row") on
`meshserve local --workers 2`. At 64 x 16 rows the plan all-gathers the
attention's activation and its o_proj kernel in one round; the kernel's
gather is param-only, so requests after the first (kFill) skip it (kUse).
That skip once left the activation's send queued: both workers waited for
each other until the deadline and every request after the first hung.

  1. 6 requests of x [64, 16, 64] (then 6 of [48, 16, 64] and [16, 16, 64]),
     each with a 10 s client timeout: every one answers, equal to NumPy's
     transformer_ref (e2e_common.py) of the same initialised params (a
     shape stops at its first error, so a hang costs one timeout).

Usage: test_megatron_all_gather.py --bin_dir build/bin [--keep]
"""
import json
import os
import sys

import numpy as np

import e2e_common as e2e
import mslib

sys.path.insert(0, os.path.join(e2e.ROOT, "bench"))
import suggest_quality  # noqa: E402

NAME = "transformer__megatron_column_row"


def answers(env):
    c = env.c
    variant = suggest_quality.variant(e2e.load_example("transformer"), "megatron_column_row", 2)
    variant["name"] = NAME
    model_dir = os.path.join(env.root, "models")
    os.makedirs(model_dir)
    with open(os.path.join(model_dir, NAME + ".json"), "w") as f:
        json.dump(variant, f)
    params = mslib.init_params(variant)
    cluster = env.cluster(2, model_dir, "megatron")
    try:
        client = mslib.client_package(env.bin_dir).MeshserveClient(cluster.target, timeout_s=10)
        rng = np.random.default_rng(9)
        for rows in (64, 48, 16):
            right, errors = 0, []
            for _ in range(6):
                x = rng.standard_normal((rows, 16, 64)).astype(np.float32)
                try:
                    y = client.infer(NAME, {"x": x})["y"]
                except Exception as e:  # noqa: BLE001 - counted and shown
                    errors.append(str(e)[:200])
                    break
                ref = e2e.transformer_ref(params, x.astype(np.float64))
                right += bool(np.allclose(y, ref, rtol=e2e.RTOL,
                                          atol=e2e.ATOL_FRACTION * float(np.max(np.abs(ref)))))
            c.check(right == 6, "x [%d, 16, 64]: %d of 6 answers equal NumPy's" % (rows, right),
                    "\n".join("    " + e for e in errors[:3]))
    finally:
        cluster.stop()


if __name__ == "__main__":
    sys.exit(e2e.main("megatron_all_gather", lambda env: [("answers", lambda: answers(env))],
                      doc=__doc__))
