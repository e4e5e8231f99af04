"""What meshserve's end-to-end scenarios (tests/integration/test_*.py) share:
the checker, the CLI wrapper, the test's models with their NumPy references,
and `main`, which runs one scenario's stages and cleans up after them.

Each scenario is its own CTest entry (e2e_<scenario>). A scenario script calls
`main(name, stages)`; `stages(env)` returns [(stage name, callable)], run in
order, an exception in one being one failure; --deadline_s ends the run (a
failure). Afterwards every process the scenario started is stopped, and any
left in their process groups is a failure (and is killed). Exit: 0 all
passed, 1 failures, 77 binaries missing (CTest: skipped).

Models and references: `make_model_dir` writes the models into a temp dir and
returns for each its NumPy reference (float64, compared with the float32
result at RTOL and a small atol; see ATOL_FRACTION) and its requests.
Parameters come from safetensors checkpoints written here with NumPy, or, for
the initialised example models, from the initializer generator re-implemented
in mslib from common/tensor/initializers.h.
"""
import argparse
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time
import traceback

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mslib  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
EXAMPLES = os.path.join(ROOT, "examples", "models")
TESTDATA = os.path.join(HERE, "testdata")  # test-only model files

CLUSTER_BINARIES = ("meshserve", "meshserve-coordinator", "meshserve-worker")

RTOL = 1e-5
# atol = ATOL_FRACTION * max|reference|: float32 accumulation over K <= 2048
# terms differs from the float64 reference by ~sqrt(K) * 2^-24 relative to the
# terms' magnitude, i.e. < 3e-6 of the output scale; elements near zero need
# this absolute slack, rtol alone would demand more than float32 can give.
ATOL_FRACTION = 1e-5
# bfloat16 models: see make_model_dir.
BF16_TOL = 2.0 ** -5


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


def tolerance(model):
    """Extra (rtol, atol_fraction) arguments of Checker.close for `model`."""
    return (BF16_TOL, BF16_TOL) if model.endswith("bf16") else ()


# ---- the test's models and their references ----

def load_model(directory, name):
    with open(os.path.join(directory, name + ".json")) as f:
        return json.load(f)


def load_example(name):
    return load_model(EXAMPLES, name)


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

    def write(model, checkpoint=None):
        """model["name"].json, and its checkpoint {name: array or ("BF16", bits)}."""
        if checkpoint is not None:
            mslib.write_safetensors(os.path.join(d, model["checkpoint"]), checkpoint)
        with open(os.path.join(d, model["name"] + ".json"), "w") as f:
            json.dump(model, f)

    def with_random_checkpoint(model, input_shape):
        """Writes model with random params; returns (params, a random input)."""
        params = random_params(model, rng)
        write(model, params)
        return params, rng.standard_normal(input_shape).astype(np.float32)

    # The seed's Linear, initialised (xavier_uniform re-implemented here).
    linear = load_example("linear")
    write(linear)
    kernel = mslib.init_param(linear["seed"], "kernel", [32, 32], "xavier_uniform")
    x = rng.standard_normal((16, 32)).astype(np.float32)
    cases["linear"] = (lambda inp, k=kernel: {"y": inp["x"].astype(np.float64) @ k}, [
        ({"x": x}, {}, {"y": "float32[16@data,32]"}),
        ({"x": x}, {"y": "P(None, 'data')"}, {"y": "float32[16,32@data]"}),
        ({"x": x}, {"y": "P()"}, {"y": "float32[16,32]"}),
    ])

    # Same model, data=-1: the mesh follows the worker count.
    write(dict(linear, name="linear_scaled", mesh={"data": -1}))
    cases["linear_scaled"] = (cases["linear"][0], [({"x": x}, {}, {"y": "float32[16@data,32]"})])

    # The example SwiGLU at d_model 64 (testdata/) with a NumPy-written checkpoint.
    sw = load_model(TESTDATA, "swiglu_small")
    sw_params, xs = with_random_checkpoint(sw, (4, 8, 64))
    cases["swiglu_small"] = (lambda inp, p=sw_params: {"y": swiglu_ref(p, inp["x"])}, [
        ({"x": xs}, {}, {"y": "float32[4@fsdp,8,64@model]"}),
        ({"x": xs}, {"y": "P('fsdp', None, None)"}, {"y": "float32[4@fsdp,8,64]"}),
        ({"x": xs}, {"y": "P(None, None, ('fsdp', 'model'))"},
         {"y": "float32[4,8,64@(fsdp,model)]"}),
    ])

    # SwiGLU in bfloat16 (params stored BF16 in the checkpoint; the CLI rounds
    # the float32 .npy input to bfloat16). The reference rounds to bfloat16
    # where the model stores a value (params, input, every layer result) and
    # computes in float64 between. Tolerance (BF16_TOL): bfloat16 keeps 8
    # significant bits, so one rounding step that lands on the other side of a
    # tie (float32 vs float64 accumulation) moves a value by 2^-8 relative and
    # the next layers carry that on: rtol = atol/max = 2^-5 (3%) bounds it
    # with a margin while still catching a wrong layout (errors of order 100%).
    bf = dict(sw, name="swiglu_bf16", dtype="bfloat16", checkpoint="swiglu_bf16.safetensors")
    bf_params = {k: mslib.from_bf16_bits(mslib.to_bf16_bits(v)) for k, v in sw_params.items()}
    write(bf, {k: ("BF16", mslib.to_bf16_bits(v)) for k, v in sw_params.items()})
    cases["swiglu_bf16"] = (lambda inp, p=bf_params: {"y": swiglu_bf16_ref(p, inp["x"])}, [
        ({"x": xs}, {}, {"y": "bfloat16[4@fsdp,8,64@model]"}),
    ])

    # The example transformer block with a NumPy-written checkpoint.
    tr = dict(load_example("transformer"), name="transformer_ckpt",
              checkpoint="transformer_ckpt.safetensors")
    tr_params, xt = with_random_checkpoint(tr, (4, 16, 64))
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

    def run(self, *args, timeout=120):
        """`meshserve ARGS...`; returns (rc, stdout, stderr)."""
        return mslib.run([self.bin] + list(args), timeout=timeout)


def expect_code(c, what, rc, err, codes):
    """The CLI failed (not a usage error) with one of the gRPC `codes`."""
    codes = [codes] if isinstance(codes, str) else codes
    c.check(rc not in (0, 2) and any(code in err for code in codes),
            "%s -> %s" % (what, "/".join(codes)), "    rc=%d stderr:\n%s" % (rc, err))


# ---- processes ----

def _alive(pid):
    try:
        os.kill(pid, 0)
        with open("/proc/%d/stat" % pid) as f:  # zombies count as gone
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (ProcessLookupError, FileNotFoundError):
        return False


def wait_gone(pids, timeout_s=15):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if not any(_alive(pid) for pid in pids):
            return True
        time.sleep(0.2)
    return False


def group_members(pgids):
    """Live (not zombie) processes whose process group is one of `pgids`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) in pgids:
            found.append(int(entry))
    return found


class Env:
    """One scenario's run: its checker, temp dir, binaries and clusters."""

    def __init__(self, args, root):
        self.args = args
        self.bin_dir = args.bin_dir
        self.root = root
        self.c = Checker()
        self.cli = Cli(args.bin_dir, root)
        self._models = None

    def models(self):
        """(model_dir, cases) of make_model_dir, written on first use."""
        if self._models is None:
            self._models = make_model_dir(self.root, np.random.default_rng(0))
        return self._models

    def cluster(self, workers, model_dir, name, bin_dir=None, **kwargs):
        """`meshserve local` (mslib.LocalCluster) with its logs in ROOT/logs-NAME."""
        return mslib.LocalCluster(bin_dir or self.bin_dir, workers, model_dir,
                                  os.path.join(self.root, "logs-" + name), **kwargs)

    def check_nothing_left(self):
        """After mslib._cleanup: no process of a group this scenario started
        is alive (meshserve local's workers and coordinator share its group)."""
        pgids = {p.pid for p in mslib._PROCS}
        deadline = time.time() + 10
        left = group_members(pgids)
        while left and time.time() < deadline:
            time.sleep(0.2)
            left = group_members(pgids)
        self.c.check(not left, "no process of the test is left behind",
                     "    left: %s" % left)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


class DeadlineReached(BaseException):
    """--deadline_s passed (not an Exception: it ends the scenario)."""


def _on_alarm(signum, frame):
    raise DeadlineReached()


def main(name, stages, needs=CLUSTER_BINARIES, add_args=None, doc=None):
    """Runs scenario `name`: `stages(env)` -> [(stage name, callable)]."""
    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("--bin_dir", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    ap.add_argument("--deadline_s", type=int, default=0,
                    help="stop the scenario (a failure) and clean up after this many "
                         "seconds; set below CTest's TIMEOUT, which kills without cleanup")
    if add_args:
        add_args(ap)
    args = ap.parse_args()
    for b in needs:
        if not os.access(os.path.join(args.bin_dir, b), os.X_OK):
            print("SKIP: %s/%s not built" % (args.bin_dir, b))
            return 77
    root = tempfile.mkdtemp(prefix="meshserve-e2e-%s-" % name)
    env = Env(args, root)
    c = env.c
    start = time.time()
    if args.deadline_s > 0:
        signal.signal(signal.SIGALRM, _on_alarm)
        signal.alarm(args.deadline_s)
    try:
        for stage_name, stage in stages(env):
            try:
                stage()
            except Exception:  # a stage that cannot run is one failure
                c.check(False, "stage '%s' ran" % stage_name, traceback.format_exc())
    except DeadlineReached:
        c.check(False, "scenario finished within --deadline_s %d" % args.deadline_s,
                traceback.format_exc())
    finally:
        signal.alarm(0)
        mslib._cleanup()
        env.check_nothing_left()
        if args.keep:
            print("kept %s" % root)
        else:
            shutil.rmtree(root, ignore_errors=True)
    print("e2e_%s: %d passed, %d failed (%.1fs)" % (name, c.passed, len(c.failed),
                                                    time.time() - start))
    for f in c.failed:
        print("  failed: %s" % f)
    return 0 if not c.failed else 1
