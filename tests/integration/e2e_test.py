#!/usr/bin/python3
"""meshserve end to end, over real processes on loopback.

For each worker count (default 1, 2, 4, 8) it starts `meshserve local` on a
model directory made by this test, runs `meshserve infer` on every model with
and without per-request `--out_sharding`, and compares each output with a
NumPy reference written here from the ops' definitions (float64, then compared
with the float32 result at rtol 1e-5 and a small atol; see ATOL_FRACTION).
Parameters come from safetensors checkpoints this test writes with NumPy, or,
for the initialised example models, from the initializer generator
re-implemented here from common/tensor/initializers.h (exact kinds only:
xavier_uniform, ones). Every model must answer the same on every mesh.

Then: `describe` types swiglu as JAX does, `status` and `bench` work, bad
requests get the right gRPC codes, a directory with bad model files still
serves its good model, and a worker killed mid-request gives UNAVAILABLE
(or a retried success) after which requests are served again.

Usage: e2e_test.py --bin_dir build/bin [--workers 1,2,4,8] [--keep]
Exit: 0 all passed, 1 failures, 77 binaries missing (CTest: skipped).
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mslib  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
EXAMPLES = os.path.join(ROOT, "examples", "models")

RTOL = 1e-5
# atol = ATOL_FRACTION * max|reference|: float32 accumulation over K <= 2048
# terms differs from the float64 reference by ~sqrt(K) * 2^-24 relative to the
# terms' magnitude, i.e. < 3e-6 of the output scale; elements near zero need
# this absolute slack, rtol alone would demand more than float32 can give.
ATOL_FRACTION = 1e-5


class Checker:
    def __init__(self):
        self.passed = 0
        self.failed = []

    def check(self, cond, what, detail=""):
        if cond:
            self.passed += 1
            print("  ok   %s" % what, flush=True)
        else:
            self.failed.append(what)
            print("  FAIL %s\n%s" % (what, detail), flush=True)
        return cond

    def close(self, out, ref, what, rtol=RTOL, atol_fraction=ATOL_FRACTION):
        out = np.asarray(out, np.float64)
        ref = np.asarray(ref, np.float64)
        if out.shape != ref.shape:
            return self.check(False, what, "    shape %s != reference %s" % (out.shape, ref.shape))
        atol = atol_fraction * max(1e-30, float(np.max(np.abs(ref))) if ref.size else 0.0)
        ok = np.allclose(out, ref, rtol=rtol, atol=atol)
        err = np.max(np.abs(out - ref) / (atol + rtol * np.abs(ref))) if ref.size else 0
        return self.check(ok, what + " (max err/tol %.3g)" % err,
                          "    max |out-ref| = %.3g, max|ref| = %.3g" % (
                              np.max(np.abs(out - ref)), np.max(np.abs(ref))))


# ---- the test's models and their references ----

def load_example(name):
    with open(os.path.join(EXAMPLES, name + ".json")) as f:
        return json.load(f)


def swiglu_small_model():
    return {
        "name": "swiglu_small", "mesh": {"fsdp": 2, "model": 4}, "dtype": "float32",
        "seed": 0, "checkpoint": "swiglu_small.safetensors",
        "inputs": {"x": {"shape": [-1, -1, 64], "sharding": ["fsdp", None, None]}},
        "params": {
            "gate_proj.kernel": {"shape": [64, 256], "sharding": ["fsdp", "model"], "init": "lecun_normal"},
            "up_proj.kernel": {"shape": [64, 256], "sharding": ["fsdp", "model"], "init": "lecun_normal"},
            "down_proj.kernel": {"shape": [256, 64], "sharding": ["model", "fsdp"], "init": "lecun_normal"},
        },
        "layers": [
            {"name": "gate", "op": "linear", "input": "x", "kernel": "gate_proj.kernel"},
            {"name": "up", "op": "linear", "input": "x", "kernel": "up_proj.kernel"},
            {"name": "act", "op": "silu", "input": "gate"},
            {"name": "h", "op": "mul", "inputs": ["act", "up"]},
            {"name": "y", "op": "linear", "input": "h", "kernel": "down_proj.kernel",
             "out_sharding": ["fsdp", None, "model"]},
        ],
        "outputs": ["y"],
    }


def swiglu_ref(p, x):
    x = x.astype(np.float64)
    g = x @ p["gate_proj.kernel"]
    u = x @ p["up_proj.kernel"]
    return (silu(g) * u) @ p["down_proj.kernel"]


def bf16(x):
    return mslib.from_bf16_bits(mslib.to_bf16_bits(np.asarray(x, np.float32))).astype(np.float64)


def swiglu_bf16_ref(p, x):
    x = bf16(x)
    g = bf16(x @ p["gate_proj.kernel"])
    u = bf16(x @ p["up_proj.kernel"])
    h = bf16(bf16(silu(g)) * u)
    return bf16(h @ p["down_proj.kernel"])


BF16_TOL = 2.0 ** -5


def transformer_ref(p, x, eps=1e-6):
    """The block of examples/models/transformer.json, op by op."""
    x = x.astype(np.float64)
    b, s, d = x.shape
    heads, head_dim = 4, d // 4
    a = rms_norm(x, p["attn_norm.scale"], eps)
    q = (a @ p["attn.q_proj.kernel"]).reshape(b, s, heads, head_dim)
    k = (a @ p["attn.k_proj.kernel"]).reshape(b, s, heads, head_dim)
    v = (a @ p["attn.v_proj.kernel"]).reshape(b, s, heads, head_dim)
    w = softmax(np.einsum("bqhd,bkhd->bhqk", q, k), axis=-1)
    attn = np.einsum("bhqk,bkhd->bqhd", w, v).reshape(b, s, d)
    h = x + attn @ p["attn.o_proj.kernel"]
    m = rms_norm(h, p["mlp_norm.scale"], eps)
    mlp = (silu(m @ p["mlp.gate_proj.kernel"]) * (m @ p["mlp.up_proj.kernel"])) @ p["mlp.down_proj.kernel"]
    return h + mlp


silu, rms_norm, softmax = mslib.silu, mslib.rms_norm, mslib.softmax


def random_params(model, rng):
    params = {}
    for name, spec in model["params"].items():
        shape = spec["shape"]
        if name.endswith("norm.scale"):
            params[name] = (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
        else:
            fan_in = int(np.prod(shape[:-1]))
            params[name] = (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)
    return params


def make_model_dir(root, rng):
    """Writes the models; returns {model: (reference_fn or None, [requests])}.

    A request is (inputs {name: array}, out_shardings {output: spec} or {},
    expected type strings {output: type_str} or {}).
    """
    d = os.path.join(root, "models")
    os.makedirs(d)
    cases = {}

    # The seed's Linear, initialised (xavier_uniform re-implemented here).
    linear = load_example("linear")
    with open(os.path.join(d, "linear.json"), "w") as f:
        json.dump(linear, f)
    kernel = mslib.init_param(linear["seed"], "kernel", [32, 32], "xavier_uniform")
    x = rng.standard_normal((16, 32)).astype(np.float32)
    cases["linear"] = (lambda inp, k=kernel: {"y": inp["x"].astype(np.float64) @ k}, [
        ({"x": x}, {}, {"y": "float32[16@data,32]"}),
        ({"x": x}, {"y": "P(None, 'data')"}, {"y": "float32[16,32@data]"}),
        ({"x": x}, {"y": "P()"}, {"y": "float32[16,32]"}),
    ])

    # Same model, data=-1: the mesh follows the worker count.
    scaled = dict(linear, name="linear_scaled", mesh={"data": -1})
    with open(os.path.join(d, "linear_scaled.json"), "w") as f:
        json.dump(scaled, f)
    cases["linear_scaled"] = (cases["linear"][0], [({"x": x}, {}, {"y": "float32[16@data,32]"})])

    # SwiGLU with a NumPy-written checkpoint.
    sw = swiglu_small_model()
    sw_params = random_params(sw, rng)
    mslib.write_safetensors(os.path.join(d, "swiglu_small.safetensors"), sw_params)
    with open(os.path.join(d, "swiglu_small.json"), "w") as f:
        json.dump(sw, f)
    xs = rng.standard_normal((4, 8, 64)).astype(np.float32)
    cases["swiglu_small"] = (lambda inp, p=sw_params: {"y": swiglu_ref(p, inp["x"])}, [
        ({"x": xs}, {}, {"y": "float32[4@fsdp,8,64@model]"}),
        ({"x": xs}, {"y": "P('fsdp', None, None)"}, {"y": "float32[4@fsdp,8,64]"}),
        ({"x": xs}, {"y": "P(None, None, ('fsdp', 'model'))"},
         {"y": "float32[4,8,64@(fsdp,model)]"}),
    ])

    # SwiGLU in bfloat16 (params stored BF16 in the checkpoint; the CLI rounds
    # the float32 .npy input to bfloat16). The reference rounds to bfloat16
    # where the model stores a value (params, input, every layer result) and
    # computes in float64 between. Tolerance: bfloat16 keeps 8 significant
    # bits, so one rounding step that lands on the other side of a tie
    # (float32 vs float64 accumulation) moves a value by 2^-8 relative and the
    # next layers carry that on: rtol = atol/max = 2^-5 (3%) bounds it with a
    # margin while still catching a wrong layout (errors of order 100%).
    bf = dict(sw, name="swiglu_bf16", dtype="bfloat16", checkpoint="swiglu_bf16.safetensors")
    bf_params = {k: mslib.from_bf16_bits(mslib.to_bf16_bits(v)) for k, v in sw_params.items()}
    mslib.write_safetensors(os.path.join(d, "swiglu_bf16.safetensors"),
                            {k: ("BF16", mslib.to_bf16_bits(v)) for k, v in sw_params.items()})
    with open(os.path.join(d, "swiglu_bf16.json"), "w") as f:
        json.dump(bf, f)
    cases["swiglu_bf16"] = (lambda inp, p=bf_params: {"y": swiglu_bf16_ref(p, inp["x"])}, [
        ({"x": xs}, {}, {"y": "bfloat16[4@fsdp,8,64@model]"}),
    ])

    # The example transformer block with a NumPy-written checkpoint.
    tr = dict(load_example("transformer"), name="transformer_ckpt",
              checkpoint="transformer_ckpt.safetensors")
    tr_params = random_params(tr, rng)
    mslib.write_safetensors(os.path.join(d, "transformer_ckpt.safetensors"), tr_params)
    with open(os.path.join(d, "transformer_ckpt.json"), "w") as f:
        json.dump(tr, f)
    xt = rng.standard_normal((4, 16, 64)).astype(np.float32)
    cases["transformer_ckpt"] = (lambda inp, p=tr_params: {"y": transformer_ref(p, inp["x"])}, [
        ({"x": xt}, {}, {"y": "float32[4@fsdp,16,64]"}),
        ({"x": xt}, {"y": "P(None, None, 'model')"}, {"y": "float32[4,16,64@model]"}),
    ])

    # The initialised examples as shipped. The transformer's reference uses
    # the initializers re-implemented in mslib (lecun_normal's erfinv differs
    # from the C++ polynomial by ~2e-7 relative, well inside RTOL); swiglu's
    # 3 x 16M params are too many for a Python erfinv, so it is checked for
    # equality across meshes only.
    shutil.copy(os.path.join(EXAMPLES, "transformer.json"), d)
    tr_init = mslib.init_params(load_example("transformer"))
    xe = rng.standard_normal((2, 16, 64)).astype(np.float32)
    cases["transformer"] = (lambda inp, p=tr_init: {"y": transformer_ref(p, inp["x"])},
                            [({"x": xe}, {}, {"y": "float32[2@fsdp,16,64]"})])
    shutil.copy(os.path.join(EXAMPLES, "swiglu.json"), d)
    xe = rng.standard_normal((2, 4, 2048)).astype(np.float32)
    cases["swiglu"] = (None, [({"x": xe}, {}, {"y": "float32[2@fsdp,4,2048@model]"})])
    return d, cases


# ---- running the CLI ----

class Cli:
    def __init__(self, bin_dir, work):
        self.bin = os.path.join(bin_dir, "meshserve")
        self.work = work
        self.n = 0

    def infer(self, target, model, inputs, out_shardings=None, timeout=180, extra=()):
        """Returns (rc, stdout, stderr, {output: array})."""
        self.n += 1
        req = os.path.join(self.work, "req%d" % self.n)
        os.makedirs(req)
        cmd = [self.bin, "infer", "--target", target, "--model", model,
               "--output_dir", req]
        for name, value in inputs.items():
            path = os.path.join(req, "in_%s.npy" % name)
            np.save(path, value)
            cmd += ["--input", "%s=%s" % (name, path)]
        for name, spec in (out_shardings or {}).items():
            cmd += ["--out_sharding", "%s=%s" % (name, spec)]
        cmd += list(extra)
        rc, out, err = mslib.run(cmd, timeout=timeout)
        outputs = {}
        for f in os.listdir(req):
            if f.endswith(".npy") and not f.startswith("in_"):
                outputs[f[:-4]] = np.load(os.path.join(req, f))
        return rc, out, err, outputs


def printed_types(stdout):
    types = {}
    for line in stdout.splitlines():
        m = re.match(r"^(\S+): (\S+)", line)
        if m:
            types[m.group(1)] = m.group(2)
    return types


def run_mesh(c, cli, bin_dir, root, model_dir, cases, workers, results):
    print("== %d worker(s)" % workers, flush=True)
    cluster = mslib.LocalCluster(bin_dir, workers, model_dir,
                                 os.path.join(root, "logs-%d" % workers))
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
                            tol = BF16_TOL if model.endswith("bf16") else None
                            c.close(outputs[name], ref, "%s: %s matches NumPy" % (what, name),
                                    *((tol, tol) if tol else ()))
                results.setdefault((model, i), {})[workers] = outputs
        rc, out, err = mslib.run([cli.bin, "status", "--target", cluster.target], timeout=60)
        c.check(rc == 0 and ("workers: %d" % workers) in out and "linear" in out,
                "%d workers: status lists the workers and models" % workers,
                "    rc=%d\n%s\n%s" % (rc, out, err))
        if workers == max(WORKER_COUNTS):
            check_describe(c, cli, cluster)
            check_bench(c, cli, cluster)
    finally:
        rc = cluster.stop()
        pids = list(cluster.worker_pids.values())
    c.check(rc == 0, "%d workers: meshserve local exits 0 on SIGTERM" % workers,
            "    rc=%s\n%s" % (rc, cluster.stderr_text()))
    c.check(wait_gone(pids), "%d workers: every worker process is gone after stop" % workers)


def wait_gone(pids, timeout_s=15):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        alive = []
        for pid in pids:
            try:
                os.kill(pid, 0)
                with open("/proc/%d/stat" % pid) as f:  # zombies count as gone
                    if f.read().split()[2] != "Z":
                        alive.append(pid)
            except (ProcessLookupError, FileNotFoundError):
                pass
        if not alive:
            return True
        time.sleep(0.2)
    return False


def check_describe(c, cli, cluster):
    rc, out, err = mslib.run([cli.bin, "describe", "--target", cluster.target, "swiglu",
                              "--input_shape", "x=8,4096,2048"], timeout=120)
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
    rc, out, err = mslib.run([cli.bin, "bench", "--target", cluster.target, "--model", "linear",
                              "--input_shape", "x=16,32", "--concurrency", "4",
                              "--requests", "40"], timeout=300)
    last = out.strip().splitlines()[-1] if out.strip() else ""
    try:
        stats = json.loads(last)
    except ValueError:
        stats = {}
    c.check(rc == 0 and stats.get("requests") == 40 and stats.get("errors") == 0
            and stats.get("p50_ms", 0) > 0 and stats.get("p99_ms", 0) >= stats.get("p50_ms", 0)
            and stats.get("requests_per_s", 0) > 0,
            "bench: 40 requests, 0 errors, JSON line last", "    rc=%d\n%s\n%s" % (rc, out, err))


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
                tol = (BF16_TOL, BF16_TOL) if model.endswith("bf16") else ()
                c.close(other, value, "%s request %d: %s on %d workers == on %d" % (
                    model, i, name, w, counts[0]), *tol)


# ---- bad requests ----

def expect_code(c, what, rc, err, codes):
    codes = [codes] if isinstance(codes, str) else codes
    c.check(rc not in (0, 2) and any(code in err for code in codes),
            "%s -> %s" % (what, "/".join(codes)), "    rc=%d stderr:\n%s" % (rc, err))


def raw_infer(target, request_bytes):
    """ModelInfer with hand-encoded bytes; returns the grpc.StatusCode."""
    import grpc
    with grpc.insecure_channel(target) as channel:
        call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer",
                                   request_serializer=None, response_deserializer=None)
        try:
            call(request_bytes, timeout=30)
            return grpc.StatusCode.OK, ""
        except grpc.RpcError as e:
            return e.code(), e.details()


def run_bad_requests(c, cli, bin_dir, root, model_dir):
    print("== bad requests (2 workers)", flush=True)
    cluster = mslib.LocalCluster(bin_dir, 2, model_dir, os.path.join(root, "logs-bad"))
    t = cluster.target
    x = np.ones((16, 32), np.float32)
    try:
        rc, _, err, _ = cli.infer(t, "no_such_model", {"x": x})
        expect_code(c, "unknown model", rc, err, "NOT_FOUND")
        rc, _, err, _ = cli.infer(t, "linear", {"z": x})
        expect_code(c, "unknown input name", rc, err, "INVALID_ARGUMENT")
        rc, _, err, _ = cli.infer(t, "linear", {"x": np.ones((16, 31), np.float32)})
        expect_code(c, "wrong input shape [16,31]", rc, err, "INVALID_ARGUMENT")
        rc, _, err, _ = cli.infer(t, "linear", {"x": np.ones((16, 32, 1), np.float32)})
        expect_code(c, "wrong input rank", rc, err, "INVALID_ARGUMENT")
        rc, _, err, _ = cli.infer(t, "linear", {"x": np.ones((3, 32), np.float32)})
        expect_code(c, "batch 3 not divisible by data=8", rc, err, "INVALID_ARGUMENT")
        rc, _, err, _ = cli.infer(t, "linear", {"x": np.ones((16, 32), np.float64)})
        expect_code(c, "wrong input dtype float64", rc, err, "INVALID_ARGUMENT")
        rc, _, err, _ = cli.infer(t, "linear", {"x": x}, {"y": "P('nope')"})
        expect_code(c, "out_sharding with unknown axis", rc, err, "INVALID_ARGUMENT")
        rc, _, err, _ = cli.infer(t, "linear", {"x": x}, {"y": "P('data', 'data')"})
        expect_code(c, "out_sharding with a duplicate axis", rc, err, "INVALID_ARGUMENT")
        rc, _, err, _ = cli.infer(t, "linear", {"x": x}, {"y": "P((("})
        expect_code(c, "unparsable out_sharding", rc, err, "INVALID_ARGUMENT")
        rc, _, err, _ = cli.infer(t, "linear", {"x": x}, {"nope": "P()"})
        expect_code(c, "out_sharding for an unknown output", rc, err,
                    ["INVALID_ARGUMENT", "NOT_FOUND"])
        rc, _, err = mslib.run([cli.bin, "infer", "--target", t, "--model", "linear"])
        expect_code(c, "missing input", rc, err, "INVALID_ARGUMENT")
        # Byte length and datatype checks need a request the CLI would not send.
        import grpc
        code, msg = raw_infer(t, mslib.infer_request("linear", [("x", "FP32", [16, 32])],
                                                     [b"\0" * 100]))
        c.check(code == grpc.StatusCode.INVALID_ARGUMENT,
                "raw request with 100 bytes for f32[16,32] -> INVALID_ARGUMENT",
                "    got %s %s" % (code, msg))
        code, msg = raw_infer(t, mslib.infer_request("linear", [("x", "FP16", [16, 32])],
                                                     [b"\0" * 1024]))
        c.check(code == grpc.StatusCode.INVALID_ARGUMENT,
                "raw request with datatype FP16 -> INVALID_ARGUMENT", "    got %s %s" % (code, msg))
        code, msg = raw_infer(t, mslib.infer_request("linear", [("x", "FP32", [16, 32])],
                                                     [x.tobytes()]))
        c.check(code == grpc.StatusCode.OK, "raw request well formed -> OK",
                "    got %s %s" % (code, msg))
        # Bad flags are usage errors (exit 2) naming the flag.
        rc, _, err = mslib.run([cli.bin, "infer", "--target", t, "--modle", "linear"])
        c.check(rc == 2 and "--modle" in err, "unknown flag -> exit 2 naming it", err)
        rc, _, err = mslib.run([cli.bin, "bench", "--target", t, "--model", "linear",
                                "--input_shape", "x=16,32", "--requests", "ten"])
        c.check(rc == 2 and "--requests" in err, "bad --requests -> exit 2 naming it", err)
        rc, _, err = mslib.run([cli.bin, "status", "--target", "nohostport"])
        c.check(rc == 2 and "nohostport" in err, "bad --target -> exit 2 naming it", err)
    finally:
        cluster.stop()


def make_bad_model_dir(root):
    d = os.path.join(root, "models_bad")
    shutil.copytree(os.path.join(HERE, "models_bad"), d)
    shutil.copy(os.path.join(EXAMPLES, "linear.json"), d)
    return d


def run_bad_models(c, cli, bin_dir, root):
    print("== bad model files (2 workers)", flush=True)
    d = make_bad_model_dir(root)
    cluster = mslib.LocalCluster(bin_dir, 2, d, os.path.join(root, "logs-bad-models"),
                                 ready_timeout_s=60, require_ready=False)
    try:
        # "ready" = every loadable model placed; the bad files must not block it.
        c.check(cluster.ready, "bad model dir: the cluster still reports ready",
                "\n".join(cluster.lines) + "\n" + cluster.logs_tail(5))
        rc, out, err, _ = cli.infer(cluster.target, "linear", {"x": np.ones((16, 32), np.float32)})
        c.check(rc == 0, "bad model dir: the good model is served", err)
        rc, out, err = mslib.run([cli.bin, "status", "--target", cluster.target])
        c.check(rc == 0 and "swiglu_no_out_sharding" in out and "Contracting dimensions" in out,
                "bad model dir: status names the JAX error of swiglu_no_out_sharding", out + err)
        rc, _, err, _ = cli.infer(cluster.target, "swiglu_no_out_sharding",
                                  {"x": np.ones((2, 4, 64), np.float32)})
        expect_code(c, "infer on a model JAX rejects", rc, err,
                    ["NOT_FOUND", "FAILED_PRECONDITION", "INVALID_ARGUMENT"])
        c.check("Contracting dimensions are sharded" in err,
                "infer on a model JAX rejects names JAX's error", err)
        for name in ("malformed_json", "unknown_op", "bad_checkpoint", "missing_checkpoint"):
            rc, _, err, _ = cli.infer(cluster.target, name, {"x": np.ones((2, 4, 64), np.float32)})
            expect_code(c, "infer on bad model %s" % name, rc, err,
                        ["NOT_FOUND", "FAILED_PRECONDITION", "INVALID_ARGUMENT", "DATA_LOSS"])
    finally:
        cluster.stop()


def run_worker_kill(c, cli, bin_dir, root, model_dir, cases):
    print("== worker killed mid-request (4 workers)", flush=True)
    cluster = mslib.LocalCluster(bin_dir, 4, model_dir, os.path.join(root, "logs-kill"))
    try:
        big = np.random.default_rng(1).standard_normal((8, 256, 2048)).astype(np.float32)
        # Warm up (compile) with the same shapes, and time it.
        start = time.time()
        rc, _, err, _ = cli.infer(cluster.target, "swiglu", {"x": big})
        took = time.time() - start
        c.check(rc == 0, "kill: warm-up request on swiglu x[8,256,2048] (%.2fs)" % took, err)
        result = {}

        def background():
            result["r"] = cli.infer(cluster.target, "swiglu", {"x": big}, timeout=300,
                                    extra=("--timeout_s", "60"))
        thread = threading.Thread(target=background)
        thread.start()
        time.sleep(min(0.5, took / 3))
        victim = cluster.worker_pids[1]
        os.kill(victim, 9)
        thread.join(timeout=300)
        rc, out, err, _ = result.get("r", (-1, "", "no result", {}))
        code = re.search(r"meshserve infer: ([A-Z_]+):", err)
        c.check(rc == 0 or "UNAVAILABLE" in err,
                "kill: the request in flight fails with UNAVAILABLE or is retried "
                "(got %s)" % ("OK (retried)" if rc == 0 else code.group(1) if code else rc), err)
        # The next requests are served (placement moves off the dead worker).
        ref_fn, requests = cases["linear"]
        inputs = requests[0][0]
        ok = False
        deadline = time.time() + 30
        attempts = 0
        while time.time() < deadline and attempts < 60:
            attempts += 1
            rc, out, err, outputs = cli.infer(cluster.target, "linear", inputs)
            if rc == 0:
                ok = True
                break
            time.sleep(0.5)
        if c.check(ok, "kill: a later request is served (after %d attempts)" % attempts, err):
            c.close(outputs["y"], ref_fn(inputs)["y"], "kill: the later answer is right")
        time.sleep(0.5)
        c.check("exited unexpectedly" in cluster.stderr_text(),
                "kill: meshserve local reports the dead worker", cluster.stderr_text())
    finally:
        cluster.stop()


def model_status(bin_dir, target, model):
    """(mesh, generation) of `model` from `meshserve status`, or (None, -1)."""
    rc, out, _ = mslib.run([os.path.join(bin_dir, "meshserve"), "status", "--target", target],
                           timeout=30)
    for line in out.splitlines() if rc == 0 else []:
        m = re.match(r"^\s+%s\s+\S+\s+(\S+)\s+generation (\d+)" % re.escape(model), line)
        if m:
            return m.group(1), int(m.group(2))
    return None, -1


def run_scaling(c, bin_dir, root, model_dir, cases):
    """Workers join and leave while requests run: every request is answered."""
    print("== scaling while serving (2 -> 4 -> 2 workers)", flush=True)
    model = "linear_scaled"  # mesh {"data": -1}: follows the worker count
    ref_fn, requests = cases[model]
    inputs = requests[0][0]
    ref = ref_fn(inputs)["y"]
    cluster = mslib.LocalCluster(bin_dir, 2, model_dir, os.path.join(root, "logs-scale"))
    extra = []
    stop = threading.Event()
    results = []  # (rc, stderr, max |y - ref|)

    def serve_loop():
        cli = Cli(bin_dir, os.path.join(root, "scale-requests"))
        os.makedirs(cli.work, exist_ok=True)
        while not stop.is_set():
            rc, _, err, outputs = cli.infer(cluster.target, model, inputs, timeout=120)
            diff = float(np.max(np.abs(outputs["y"] - ref))) if "y" in outputs else None
            results.append((rc, err, diff))

    def wait_mesh(want, timeout_s=90):
        deadline = time.time() + timeout_s
        mesh, gen = None, -1
        while time.time() < deadline:
            mesh, gen = model_status(bin_dir, cluster.target, model)
            if mesh == want:
                break
            time.sleep(0.3)
        return mesh, gen

    try:
        mesh0, gen0 = wait_mesh("mesh[data=2]", 30)
        c.check(mesh0 == "mesh[data=2]", "scale: starts on mesh[data=2] (got %s)" % mesh0)
        loop = threading.Thread(target=serve_loop)
        loop.start()
        time.sleep(1.0)
        for i in range(2):
            log = open(os.path.join(cluster.log_dir, "scale-extra-%d.log" % i), "w")
            proc = subprocess.Popen(
                [os.path.join(bin_dir, "meshserve-worker"), "--port", "0",
                 "--coordinator", cluster.target],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            mslib._PROCS.append(proc)
            extra.append(proc)
        mesh1, gen1 = wait_mesh("mesh[data=4]")
        c.check(mesh1 == "mesh[data=4]" and gen1 > gen0,
                "scale up: two joining workers give mesh[data=4] (got %s, generation %d -> %d)"
                % (mesh1, gen0, gen1), cluster.logs_tail(10))
        n_up = len(results)
        time.sleep(2.0)
        for proc in extra:  # graceful leave: SIGTERM drains
            proc.send_signal(signal.SIGTERM)
        for proc in extra:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
        c.check(all(p.poll() is not None for p in extra),
                "scale down: SIGTERMed workers exit within 20 s")
        mesh2, gen2 = wait_mesh("mesh[data=2]")
        c.check(mesh2 == "mesh[data=2]" and gen2 > gen1,
                "scale down: back to mesh[data=2] (got %s, generation %d -> %d)"
                % (mesh2, gen1, gen2), cluster.logs_tail(10))
        time.sleep(1.0)
    finally:
        stop.set()
        if "loop" in locals():
            loop.join(timeout=180)
        for proc in extra:
            mslib.stop_process(proc, grace_s=5)
        cluster.stop()
    failed = [(rc, err) for rc, err, _ in results if rc != 0]
    wrong = [d for rc, _, d in results if rc == 0 and (d is None or d > 1e-4 * np.max(np.abs(ref)))]
    c.check(len(results) >= 5 and n_up < len(results),
            "scale: %d requests ran across the changes (%d before reaching 4 workers)"
            % (len(results), n_up))
    c.check(not failed, "scale: every request during scaling is served (%d failed)" % len(failed),
            "\n".join("    rc=%d %s" % (rc, err.strip()[-300:]) for rc, err in failed[:5]))
    c.check(not wrong, "scale: every answer equals the NumPy reference (%d differ)" % len(wrong))


FAKE_COORDINATOR = """#!/bin/sh
echo "fake coordinator $*"
sleep 0.3
echo "fake coordinator: every model servable, ready"
if [ -n "$FAKE_COORDINATOR_EXIT_AFTER" ]; then sleep "$FAKE_COORDINATOR_EXIT_AFTER"; exit 3; fi
exec sleep 600
"""
FAKE_WORKER = """#!/bin/sh
echo "meshserve-worker ready (fake) $*"
exec sleep 600
"""


def run_launcher(c, bin_dir, root):
    """`meshserve local` itself, with fake coordinator/worker scripts beside a
    copy of the meshserve binary (no teammate binaries needed)."""
    print("== meshserve local with fake children", flush=True)
    fake_bin = os.path.join(root, "fakebin")
    os.makedirs(fake_bin)
    shutil.copy(os.path.join(bin_dir, "meshserve"), fake_bin)
    for name, text in (("meshserve-coordinator", FAKE_COORDINATOR),
                       ("meshserve-worker", FAKE_WORKER)):
        path = os.path.join(fake_bin, name)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o755)
    models = os.path.join(root, "fake-models")
    os.makedirs(models, exist_ok=True)
    cluster = mslib.LocalCluster(fake_bin, 3, models, os.path.join(root, "logs-fake"), 30)
    try:
        ready_lines = [l for l in cluster.lines if "ready" in l]
        c.check(len(ready_lines) == 1 and l_startswith(ready_lines, "meshserve local: ready"),
                "launcher: exactly one 'ready' line on stdout (children's go to logs)",
                "\n".join(cluster.lines))
        c.check(sorted(cluster.worker_pids) == [0, 1, 2], "launcher: prints 3 worker pids",
                "\n".join(cluster.lines))
        log = os.path.join(root, "logs-fake", "coordinator.log")
        text = open(log).read() if os.path.exists(log) else ""
        c.check("--min_workers 3" in text and "--model_dir " + models in text,
                "launcher: coordinator gets --port/--model_dir/--min_workers", text)
        victim = cluster.worker_pids[1]
        os.kill(victim, 9)
        deadline = time.time() + 5
        while time.time() < deadline and "exited unexpectedly" not in cluster.stderr_text():
            time.sleep(0.1)
        c.check(re.search(r"worker-1 \(pid %d\) exited unexpectedly: killed by signal 9" % victim,
                          cluster.stderr_text()) is not None,
                "launcher: a killed worker is reported", cluster.stderr_text())
        c.check(cluster.proc.poll() is None, "launcher: keeps running after a worker dies")
        cluster.proc.send_signal(2)  # SIGINT, as Ctrl-C
        rc = cluster.proc.wait(timeout=20)
        c.check(rc == 0, "launcher: SIGINT stops it with exit 0", "rc=%s" % rc)
    finally:
        cluster.stop()
    c.check(wait_gone(list(cluster.worker_pids.values())),
            "launcher: every child is gone after SIGINT")
    port = mslib.free_port()
    rc, out, err = mslib.run([os.path.join(fake_bin, "meshserve"), "local", "--workers", "2",
                              "--model_dir", models, "--port", str(port),
                              "--log_dir", os.path.join(root, "logs-then"), "--then",
                              'test "$MESHSERVE_TARGET" = 127.0.0.1:%d && exit 7' % port],
                             timeout=60)
    c.check(rc == 7, "launcher: --then runs with MESHSERVE_TARGET and passes its exit code",
            "rc=%d\n%s\n%s" % (rc, out, err))
    env = dict(os.environ, FAKE_COORDINATOR_EXIT_AFTER="1")
    p = subprocess.run([os.path.join(fake_bin, "meshserve"), "local", "--workers", "2",
                        "--model_dir", models, "--port", str(mslib.free_port()),
                        "--log_dir", os.path.join(root, "logs-dead-coordinator")],
                       capture_output=True, text=True, timeout=60, env=env)
    c.check(p.returncode == 1 and "coordinator (pid" in p.stderr and "exited unexpectedly" in p.stderr,
            "launcher: a dead coordinator stops everything (exit 1, reported)",
            "rc=%d\n%s\n%s" % (p.returncode, p.stdout, p.stderr))
    rc, out, err = mslib.run([os.path.join(fake_bin, "meshserve"), "local", "--workers", "0",
                              "--model_dir", models])
    c.check(rc == 2 and "--workers" in err, "launcher: --workers 0 is a usage error naming it", err)
    rc, out, err = mslib.run([os.path.join(fake_bin, "meshserve"), "local", "--workers", "1",
                              "--model_dir", os.path.join(root, "nope")])
    c.check(rc == 2 and "--model_dir" in err, "launcher: missing --model_dir dir is a usage error", err)


def l_startswith(lines, prefix):
    return all(l.startswith(prefix) for l in lines)


WORKER_COUNTS = [1, 2, 4, 8]


def main():
    global WORKER_COUNTS
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin_dir", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--workers", default="1,2,4,8")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    ap.add_argument("--only", default="",
                    help="comma list: launcher,meshes,bad,badmodels,kill,scale")
    args = ap.parse_args()
    WORKER_COUNTS = [int(w) for w in args.workers.split(",")]
    only = set(args.only.split(",")) if args.only else {
        "launcher", "meshes", "bad", "badmodels", "kill", "scale"}
    needed = ["meshserve"]
    if only - {"launcher"}:
        needed += ["meshserve-coordinator", "meshserve-worker"]
    for b in needed:
        if not os.access(os.path.join(args.bin_dir, b), os.X_OK):
            print("SKIP: %s/%s not built" % (args.bin_dir, b))
            return 77
    root = tempfile.mkdtemp(prefix="meshserve-e2e-")
    c = Checker()
    rng = np.random.default_rng(0)
    start = time.time()
    try:
        model_dir, cases = make_model_dir(root, rng)
        cli = Cli(args.bin_dir, root)
        stages = []
        if "launcher" in only:
            stages.append(("launcher", lambda: run_launcher(c, args.bin_dir, root)))
        if "meshes" in only:
            results = {}
            for w in WORKER_COUNTS:
                stages.append(("%d workers" % w, lambda w=w: run_mesh(
                    c, cli, args.bin_dir, root, model_dir, cases, w, results)))
            stages.append(("same answers on every mesh",
                           lambda: check_same_across_meshes(c, results)))
        if "bad" in only:
            stages.append(("bad requests", lambda: run_bad_requests(
                c, cli, args.bin_dir, root, model_dir)))
        if "badmodels" in only:
            stages.append(("bad models", lambda: run_bad_models(c, cli, args.bin_dir, root)))
        if "kill" in only:
            stages.append(("worker kill", lambda: run_worker_kill(
                c, cli, args.bin_dir, root, model_dir, cases)))
        if "scale" in only:
            stages.append(("scaling", lambda: run_scaling(
                c, args.bin_dir, root, model_dir, cases)))
        for name, stage in stages:
            try:
                stage()
            except Exception as e:  # a stage that cannot run is one failure
                c.check(False, "stage '%s' ran" % name, traceback.format_exc())
    finally:
        mslib._cleanup()
        if args.keep:
            print("kept %s" % root)
        else:
            shutil.rmtree(root, ignore_errors=True)
    print("e2e: %d passed, %d failed (%.1fs)" % (c.passed, len(c.failed), time.time() - start))
    for f in c.failed:
        print("  failed: %s" % f)
    return 0 if not c.failed else 1


if __name__ == "__main__":
    sys.exit(main())
