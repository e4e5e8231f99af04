#!/usr/bin/python3
"""e2e_suggest: `meshserve suggest` writes model files that serve unchanged on
N workers and answer as the original models (NumPy references).

For the SwiGLU (d_model 64) and transformer-block test models of
e2e_common.make_model_dir (NumPy-written checkpoints), it runs `meshserve
suggest --workers 2` (the transformer at a prefill/decode mix, the SwiGLU
also with a --memory_per_worker that rules out replication), checks the JSON
line (fields, alternatives, param bytes under the limit) and the written
file's mesh (2 devices), then serves the written files with `meshserve local
--workers 2` and compares each answer with the NumPy reference.

Usage: test_suggest.py --bin_dir build/bin [--keep]
"""
import json
import os
import sys

import numpy as np

import e2e_common as e2e

WORKERS = 2
# (model in make_model_dir, name of the written copy, --input_shape flags,
#  --memory_per_worker or None)
RUNS = [
    ("swiglu_small", "swiglu_small", ["x=4,8,64"], None),
    # Replicated needs 3 * 64 * 256 * 4 = 196608 param bytes per worker.
    ("swiglu_small", "swiglu_small_mem", ["x=4,8,64"], 150000),
    ("transformer_ckpt", "transformer_ckpt", ["x=4,16,64", "x=1,16,64"], None),
]
FIELDS = ("predicted_ms", "bytes_per_request", "param_bytes_per_worker", "search_s",
          "alternatives")


def suggest(env, model_dir, out_dir, run):
    c, cli = env.c, env.cli
    model, name, shapes, memory = run
    out = os.path.join(out_dir, name + ".json")
    args = ["suggest", "--model_file", os.path.join(model_dir, model + ".json"),
            "--workers", str(WORKERS), "--out", out, "--json"]
    for s in shapes:
        args += ["--input_shape", s]
    if memory is not None:
        args += ["--memory_per_worker", str(memory)]
    rc, stdout, err = cli.run(*args, timeout=120)
    what = "suggest %s" % name
    last = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    try:
        j = json.loads(last)
    except ValueError:
        j = {}
    if not c.check(rc == 0 and all(f in j for f in FIELDS), what + ": JSON line last with "
                   + ", ".join(FIELDS), "    rc=%d\n%s\n%s" % (rc, stdout, err)):
        return
    c.check(j["predicted_ms"] > 0 and 0 < len(j["alternatives"]) <= 3
            and all(a["predicted_ms"] > 0 and "param_bytes_per_worker" in a
                    for a in j["alternatives"]),
            what + ": 1..3 alternatives with predictions", "    %s" % last)
    if memory is not None:
        c.check(j["param_bytes_per_worker"] <= memory
                and all(a["param_bytes_per_worker"] <= memory for a in j["alternatives"]),
                what + ": every layout listed fits --memory_per_worker", "    %s" % last)
    with open(out) as f:
        written = json.load(f)
    sizes = [s for s in written["mesh"].values()]
    c.check(int(np.prod(sizes)) == WORKERS,
            what + ": the written mesh has %d devices" % WORKERS, "    %s" % written["mesh"])
    if name != model:  # a second copy of one model: its own name in the folder
        written["name"] = name
        with open(out, "w") as f:
            json.dump(written, f)


def run(env):
    c, cli = env.c, env.cli
    model_dir, cases = env.models()
    out_dir = os.path.join(env.root, "suggested")
    os.makedirs(out_dir)
    for r in RUNS:
        suggest(env, model_dir, out_dir, r)
    cluster = env.cluster(WORKERS, out_dir, "suggest")
    try:
        for model, name, _, _ in RUNS:
            ref_fn, requests = cases[model]
            inputs = requests[0][0]
            rc, out, err, outputs = cli.infer(cluster.target, name, inputs)
            what = "%s on %d workers" % (name, WORKERS)
            if not c.check(rc == 0, what + " serves", "    rc=%d\n%s\n%s" % (rc, out, err)):
                continue
            for output, ref in ref_fn(inputs).items():
                got = outputs.get(output)
                if c.check(got is not None, "%s: wrote %s.npy" % (what, output)):
                    c.close(got, ref, "%s: %s matches NumPy" % (what, output))
    finally:
        cluster.stop()


if __name__ == "__main__":
    sys.exit(e2e.main("suggest", lambda env: [("suggest and serve", lambda: run(env))],
                      doc=__doc__))
