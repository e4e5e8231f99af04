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

While that cluster runs, `meshserve suggest --target` against it: the
figures are the workers' calibration (figures_source "target"), positive and
plausible (large-M GEMM rate above the one-row rate, 0.1 .. 10000 GFLOP/s,
memory 0.1 .. 1000 GB/s). The workers' calibration cache is in the test's
own XDG_CACHE_HOME.

Then `meshserve suggest --hf_dir` on a GPT-2 and a Llama directory written
with NumPy (test_lm_import's configs and weights), capped one byte below the
replicated layout's param bytes so the choice is sharded: the written files
name the checkpoint relative to their folder, serve on 2 workers, and their
logits match test_lm_import's NumPy forward passes.

Usage: test_suggest.py --bin_dir build/bin [--keep]
"""
import json
import os
import sys

import numpy as np

import e2e_common as e2e
import test_lm_import as lm

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


def suggest_target(env, model_dir, out_dir, target):
    c, cli = env.c, env.cli
    out = os.path.join(out_dir, "target", "swiglu_small.json")
    os.makedirs(os.path.dirname(out))
    rc, stdout, err = cli.run(
        "suggest", "--model_file", os.path.join(model_dir, "swiglu_small.json"),
        "--workers", str(WORKERS), "--input_shape", "x=4,8,64", "--out", out, "--json",
        "--target", target, timeout=120)
    j = json.loads(stdout.strip().splitlines()[-1]) if rc == 0 else {}
    f = j.get("figures", {})
    if not c.check(rc == 0 and j.get("figures_source") == "target",
                   "suggest --target: figures_source is target",
                   "    rc=%d\n%s\n%s" % (rc, stdout, err)):
        return
    gemm = [f.get(k, 0) for k in ("gemm_gflops_one_row", "gemm_gflops_small_m",
                                  "gemm_gflops_large_m")]
    c.check(all(0.1 < g < 10000 for g in gemm) and gemm[2] > gemm[0]
            and 0.1e9 < f.get("memory_bytes_per_s", 0) < 1e12,
            "suggest --target: the workers' figures are positive and plausible "
            "(large-M GEMM faster than one row)", "    %s" % f)
    # The workers' loopback link measurement reaches suggest through
    # ClusterService.Status (worker Status -> coordinator -> client).
    c.check(0.1e9 < f.get("link_bytes_per_s", 0) < 1e12 and f.get("link_bytes_per_s") != 1.7e9,
            "suggest --target: the link bandwidth is the workers' measurement, not the default",
            "    %s" % f)
    c.check("figures (target)" in stdout, "suggest --target: the output names its figures",
            "    %s" % stdout)
    print("    measured figures: %s" % json.dumps(f))


def run(env):
    c, cli = env.c, env.cli
    model_dir, cases = env.models()
    out_dir = os.path.join(env.root, "suggested")
    os.makedirs(out_dir)
    for r in RUNS:
        suggest(env, model_dir, out_dir, r)
    os.environ["XDG_CACHE_HOME"] = os.path.join(env.root, "cache")
    cluster = env.cluster(WORKERS, out_dir, "suggest")
    try:
        suggest_target(env, model_dir, env.root, cluster.target)
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


def run_hf(env):
    c, cli = env.c, env.cli
    rng = np.random.default_rng(3)
    out_dir = os.path.join(env.root, "suggested_lm")
    os.makedirs(out_dir)
    cases = {}
    for name, cfg, weights, forward in (
            ("gpt2", lm.GPT2_CONFIG, lm.gpt2_weights(rng, lm.GPT2_CONFIG), lm.gpt2_forward),
            ("llama", lm.LLAMA_CONFIG, lm.llama_weights(rng, lm.LLAMA_CONFIG),
             lm.llama_forward)):
        hf = os.path.join(env.root, "hf", name)
        lm.write_hf_dir(hf, cfg, weights)
        out = os.path.join(out_dir, name + ".json")
        args = ["suggest", "--hf_dir", hf, "--workers", str(WORKERS), "--input_shape",
                "input_ids=2,8", "--out", out, "--json"]
        # First free, for the replicated layout's param bytes; then capped one
        # byte below them, so that the served file is sharded.
        rc, stdout, err = cli.run(*args, timeout=180)
        j = json.loads(stdout.strip().splitlines()[-1]) if rc == 0 else {}
        rep = [b["param_bytes_per_worker"] for b in j.get("baselines", [])
               if b["layout"] == "replicated"]
        if not c.check(rc == 0 and rep, "suggest --hf_dir %s: replicated is a baseline" % name,
                       "    rc=%d\n%s\n%s" % (rc, stdout, err)):
            continue
        rc, stdout, err = cli.run(*(args + ["--memory_per_worker", str(rep[0] - 1)]),
                                  timeout=180)
        j = json.loads(stdout.strip().splitlines()[-1]) if rc == 0 else {}
        if not c.check(rc == 0 and os.path.exists(out)
                       and j.get("param_bytes_per_worker", rep[0]) < rep[0],
                       "suggest --hf_dir %s --memory_per_worker %d: a sharded layout"
                       % (name, rep[0] - 1), "    rc=%d\n%s\n%s" % (rc, stdout, err)):
            continue
        with open(out) as f:
            written = json.load(f)
        c.check(written.get("checkpoint") == os.path.join("..", "hf", name, "model.safetensors"),
                "suggest --hf_dir %s: the checkpoint is named from OUT's folder" % name,
                "    %s" % written.get("checkpoint"))
        ids = rng.integers(0, cfg["vocab_size"], size=(2, 8)).astype(np.int32)
        cases[name] = (ids, lambda i, t=weights, cf=cfg, fw=forward: fw(t, cf, i))
    if not cases:
        return
    cluster = env.cluster(WORKERS, out_dir, "suggest-lm")
    try:
        for name, (ids, ref) in cases.items():
            rc, out, err, outputs = cli.infer(cluster.target, name, {"input_ids": ids})
            what = "%s (suggested) on %d workers" % (name, WORKERS)
            if c.check(rc == 0 and "logits" in outputs, what + " serves logits",
                       "    rc=%d\n%s\n%s" % (rc, out, err)):
                c.close(outputs["logits"], ref(ids), what + ": logits match NumPy")
    finally:
        cluster.stop()


if __name__ == "__main__":
    sys.exit(e2e.main("suggest", lambda env: [("suggest and serve", lambda: run(env)),
                                              ("suggest --hf_dir and serve",
                                               lambda: run_hf(env))],
                      doc=__doc__))
