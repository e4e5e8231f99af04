#!/usr/bin/python3
"""e2e_auto_shard: `"sharding": "auto"` is resolved by the layout search before
serving (issue 35 item 6, docs/suggest.md).

1. The SwiGLU test model (e2e_common.make_model_dir, NumPy-written checkpoint)
   with gate_proj.kernel's sharding "auto": a cluster refuses to serve it
   (a request's error names the param and "auto"), while `meshserve suggest
   --model_file` writes it resolved: no "auto" left, the explicit params keep
   their specs, 2 devices.
2. `meshserve import --auto_shard --workers 2` on a Llama directory written
   with NumPy (test_lm_import's config and weights): the printed line names
   the choice, the written file has no "auto" and 2 devices.
3. Both written files serve on `meshserve local --workers 2` and answer as
   NumPy (SwiGLU y, Llama logits).

Usage: test_auto_shard.py --bin_dir build/bin [--keep]
"""
import json
import os
import shutil
import sys

import numpy as np

import e2e_common as e2e
import test_lm_import as lm

WORKERS = 2


def auto_swiglu(env, model_dir, out_dir):
    """The SwiGLU file with one "auto" param, resolved by suggest into out_dir."""
    c, cli = env.c, env.cli
    with open(os.path.join(model_dir, "swiglu_small.json")) as f:
        model = json.load(f)
    model["params"]["gate_proj.kernel"]["sharding"] = "auto"
    model["name"] = "swiglu_auto"
    src = os.path.join(model_dir, "swiglu_auto.json")
    with open(src, "w") as f:
        json.dump(model, f)
    out = os.path.join(out_dir, "swiglu_auto.json")
    rc, stdout, err = cli.run("suggest", "--model_file", src, "--workers", str(WORKERS),
                              "--input_shape", "x=4,8,64", "--out", out, "--json", timeout=120)
    if not c.check(rc == 0 and os.path.exists(out), "suggest resolves a file with \"auto\"",
                   "    rc=%d\n%s\n%s" % (rc, stdout, err)):
        return False
    with open(out) as f:
        written = json.load(f)
    params = written["params"]
    c.check("auto" not in json.dumps(params), "the written file has no \"auto\"",
            "    %s" % params)
    c.check(params["up_proj.kernel"]["sharding"] == model["params"]["up_proj.kernel"]["sharding"]
            and params["down_proj.kernel"]["sharding"]
            == model["params"]["down_proj.kernel"]["sharding"],
            "the explicit params keep their specs", "    %s" % params)
    c.check(int(np.prod(list(written["mesh"].values()))) == WORKERS,
            "the written mesh has %d devices" % WORKERS, "    %s" % written["mesh"])
    return True


def import_auto(env, out_dir):
    """A Llama directory imported with --auto_shard; returns (ids, reference)."""
    c, cli = env.c, env.cli
    rng = np.random.default_rng(5)
    weights = lm.llama_weights(rng, lm.LLAMA_CONFIG)
    hf = os.path.join(env.root, "hf", "llama")
    lm.write_hf_dir(hf, lm.LLAMA_CONFIG, weights)
    rc, stdout, err = cli.run("import", "--hf_dir", hf, "--out_dir", out_dir, "--name",
                              "llama_auto", "--workers", str(WORKERS), "--auto_shard",
                              timeout=180)
    path = os.path.join(out_dir, "llama_auto.json")
    if not c.check(rc == 0 and "auto_shard on %d workers" % WORKERS in stdout
                   and os.path.exists(path), "import --auto_shard prints its choice",
                   "    rc=%d\n%s\n%s" % (rc, stdout, err)):
        return None
    with open(path) as f:
        written = json.load(f)
    c.check("\"auto\"" not in json.dumps(written["params"]),
            "import --auto_shard: no \"auto\" in the file")
    c.check(int(np.prod(list(written["mesh"].values()))) == WORKERS,
            "import --auto_shard: the mesh has %d devices" % WORKERS, "    %s" % written["mesh"])
    ids = rng.integers(0, lm.LLAMA_CONFIG["vocab_size"], size=(1, 8)).astype(np.int32)
    return ids, lm.llama_forward(weights, lm.LLAMA_CONFIG, ids)


def run(env):
    c, cli = env.c, env.cli
    model_dir, cases = env.models()
    # A cluster on a folder holding only the unresolved file serves nothing.
    unresolved = os.path.join(env.root, "unresolved")
    os.makedirs(unresolved)
    out_dir = os.path.join(env.root, "resolved")
    os.makedirs(out_dir)
    ok = auto_swiglu(env, model_dir, out_dir)
    shutil.copy(os.path.join(model_dir, "swiglu_auto.json"), unresolved)
    for f in os.listdir(model_dir):
        if f.endswith(".safetensors"):
            shutil.copy(os.path.join(model_dir, f), unresolved)
    cluster = env.cluster(WORKERS, unresolved, "auto-unresolved")
    try:
        ref_fn, requests = cases["swiglu_small"]
        rc, out, err, _ = cli.infer(cluster.target, "swiglu_auto", requests[0][0])
        c.check(rc != 0 and "param 'gate_proj.kernel' sharding \"auto\" is not resolved"
                in out + err, "a file still saying \"auto\" is not served, the error names "
                "the param", "    rc=%d\n%s\n%s" % (rc, out, err))
    finally:
        cluster.stop()
    llama = import_auto(env, out_dir)
    cluster = env.cluster(WORKERS, out_dir, "auto-resolved")
    try:
        if ok:
            ref_fn, requests = cases["swiglu_small"]
            inputs = requests[0][0]
            rc, out, err, outputs = cli.infer(cluster.target, "swiglu_auto", inputs)
            if c.check(rc == 0 and "y" in outputs, "swiglu_auto (resolved) serves",
                       "    rc=%d\n%s\n%s" % (rc, out, err)):
                c.close(outputs["y"], ref_fn(inputs)["y"], "swiglu_auto: y matches NumPy")
        if llama is not None:
            ids, ref = llama
            rc, out, err, outputs = cli.infer(cluster.target, "llama_auto", {"input_ids": ids})
            if c.check(rc == 0 and "logits" in outputs, "llama_auto serves logits",
                       "    rc=%d\n%s\n%s" % (rc, out, err)):
                c.close(outputs["logits"], ref, "llama_auto: logits match NumPy")
    finally:
        cluster.stop()


if __name__ == "__main__":
    sys.exit(e2e.main("auto_shard", lambda env: [("auto sharding resolved and served",
                                                  lambda: run(env))], doc=__doc__))
