#!/usr/bin/python3
"""e2e_python_params: the Python client's push sessions and box pulls (issue
34; meshserve_client.params) on `meshserve local --workers 4`, every value
checked against NumPy.

Two models read their params from fused checkpoint tensors, as GPT-2's c_attn
feeds q/k/v: `gate` and `up` [16, 48] are the column halves of `c_fc`
[16, 96], `down` [48, 16] is `proj`, `b2` [16] is `b`, on mesh {model: 4}
(gate/up column-sharded, down row-sharded, b2 replicated); the checkpoint also
holds a buffer `attn.bias` the model does not read (checkpoint_ignored), and
`tied.proj` is tied to `proj` (checkpoint_tied). `fused` is float32,
`fused_bf` bfloat16.

  1. The test process begins a push of each model; two rank processes join
     them (push_id as a string), put halves of every param in their own
     layouts (rank 0: checkpoint names, FSDP rows of c_fc, TP columns of proj,
     b and the ignored attn.bias; rank 1: model names, the other rows of gate
     and up, the other columns of down, the replicated b2 again) and exit;
     a third process joins and commits. bfloat16 puts come as float32
     (rounded to nearest even by the client), float16 and uint16 bits.
  2. After the commit: status shows the new version; pulls of whole params
     and of boxes (by model and checkpoint name, across the gate/up seam,
     into out= arrays of float32/float16/float64/uint16) equal the NumPy
     slices of what was pushed (bfloat16: mslib.to_bf16_bits of it); a pull
     pinned at version 1 gives the checkpoint's values; inference equals the
     NumPy reference with the new weights.
  3. A push with direct=False stages every byte through the coordinator
     (StageThrough) and commits the same way.
  4. A client that cannot reach one worker stages its pieces through
     StageThrough and reads them through PullParams; same results.
  5. Bad inputs raise MeshserveError with the right code and change nothing
     (the cluster keeps serving the same version): an unknown name
     (NOT_FOUND, at put and pull), a bad offset (INVALID_ARGUMENT), a commit
     that does not cover a param (refused naming it; the push is over), puts
     of one replicated param that differ (refused), an unheld version
     (NOT_FOUND), a dtype the client cannot carry (TypeError, no RPC); an
     abort drops the staged puts.

Byte paths: the stages run the client's native byte movers
(_meshserve_native, when built; MESHSERVE_PYTHON_NATIVE=0 in the environment
forces the grpcio path throughout), except stage 1 + 2 run a second time with
MESHSERVE_PYTHON_NATIVE=0 (the pure grpcio path, this process and the ranks),
whose push the default path then pulls. The native module is also checked
alone against a fake worker (a grpcio server): staged messages of strided,
reversed, contiguous and 0-d pieces parse to NumPy's bytes, reads land in
strided and reversed out= views, bad streams are refused.

RPCs the server answers UNIMPLEMENTED (probed first) skip their stages with
the reason printed; with every push and pull RPC unimplemented the test exits
77 (skipped).

Usage: test_python_params.py --bin_dir build/bin [--keep]
"""
import json
import os
import subprocess
import sys
import time

import numpy as np

import e2e_common as e2e
import mslib

D, HIDDEN = 16, 48
MODELS = ("fused", "fused_bf")


# ---- the client package ----

def import_client(bin_dir):
    """The built package (BUILD/python, next to BUILD/bin)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(bin_dir)), "python"))
    import meshserve_client
    from meshserve_client import params  # noqa: F401
    return meshserve_client


# ---- the models ----

def fused_model(name, dtype):
    return {
        "name": name, "mesh": {"model": -1}, "dtype": dtype, "seed": 5,
        "checkpoint": name + ".safetensors",
        "checkpoint_ignored": ["attn.bias"],
        "checkpoint_tied": {"tied.proj": "proj"},
        "inputs": {"x": {"shape": [-1, D], "sharding": [None, None]}},
        "params": {
            "gate": {"shape": [D, HIDDEN], "sharding": [None, "model"], "from": "c_fc",
                     "from_offset": [0, 0]},
            "up": {"shape": [D, HIDDEN], "sharding": [None, "model"], "from": "c_fc",
                   "from_offset": [0, HIDDEN]},
            "down": {"shape": [HIDDEN, D], "sharding": ["model", None], "from": "proj"},
            "b2": {"shape": [D], "sharding": [None], "from": "b"},
        },
        "layers": [
            {"name": "g", "op": "linear", "input": "x", "kernel": "gate"},
            {"name": "u", "op": "linear", "input": "x", "kernel": "up"},
            {"name": "a", "op": "silu", "input": "g"},
            {"name": "h", "op": "mul", "inputs": ["a", "u"]},
            {"name": "y", "op": "linear", "input": "h", "kernel": "down", "bias": "b2",
             "out_sharding": [None, None]},
        ],
        "outputs": ["y"],
    }


def random_ckpt(rng, exact=False):
    """{c_fc, proj, b}: float32; exact: multiples of 1/64 in [-1, 1), exactly
    representable in bfloat16 and float16."""
    def draw(shape):
        if exact:
            return (rng.integers(-64, 64, size=shape) / 64.0).astype(np.float32)
        return (rng.standard_normal(shape) / 4).astype(np.float32)
    return {"c_fc": draw((D, 2 * HIDDEN)), "proj": draw((HIDDEN, D)), "b": draw((D,))}


def as_params(ckpt):
    return {"gate": ckpt["c_fc"][:, :HIDDEN], "up": ckpt["c_fc"][:, HIDDEN:],
            "down": ckpt["proj"], "b2": ckpt["b"]}


def ref(ckpt, x):
    p = {k: np.asarray(v, np.float64) for k, v in as_params(ckpt).items()}
    x = np.asarray(x, np.float64)
    return (mslib.silu(x @ p["gate"]) * (x @ p["up"])) @ p["down"] + p["b2"]


def stored(model, ckpt):
    """The server's values of ckpt in model's dtype: float32, or bf16 bits."""
    if model == "fused":
        return {k: v.copy() for k, v in ckpt.items()}
    return {k: mslib.to_bf16_bits(v) for k, v in ckpt.items()}


# ---- the child processes (ranks and the committer) ----

def rank_puts(rank, data, model):
    """[(name, array, offset)] of one rank: halves in its own layout."""
    c_fc, proj, b = data["c_fc"], data["proj"], data["b"]
    half = D // 2
    if rank == 0:
        puts = [("c_fc", c_fc[:half], [0, 0]), ("proj", proj[:, :half], [0, 0]), ("b", b, None),
                ("attn.bias", np.tril(np.ones((4, 4), np.float32)), None),
                ("tied.proj", proj, None)]  # over both ranks' puts of proj: identical
        return puts  # float32: the client rounds to bfloat16 for fused_bf
    if model == "fused":
        return [("gate", c_fc[half:, :HIDDEN], [half, 0]), ("up", c_fc[half:, HIDDEN:], [half, 0]),
                ("down", proj[:, half:], [0, half]), ("b2", b, None)]
    return [("gate", mslib.to_bf16_bits(c_fc[half:, :HIDDEN]), [half, 0]),
            ("up", c_fc[half:, HIDDEN:].astype(np.float16), [half, 0]),  # exact values
            ("down", proj[:, half:].astype(np.float16), [0, half]),
            ("b2", mslib.to_bf16_bits(b), None)]


def child_main(argv):
    """`rank TARGET BIN_DIR DATA_DIR PUSH_IDS_JSON N` or `commit TARGET BIN_DIR
    PUSH_IDS_JSON`: prints one JSON line."""
    role, target, bin_dir = argv[0], argv[1], argv[2]
    mc = import_client(bin_dir)
    out = {}
    with mc.MeshserveClient(target, timeout_s=60) as client:
        if role == "rank":
            data_dir, push_ids, rank = argv[3], json.loads(argv[4]), int(argv[5])
            for model in MODELS:
                push = client.join_push(model, str(push_ids[model]))
                data = np.load(os.path.join(data_dir, model + ".npz"))
                for name, array, offset in rank_puts(rank, data, model):
                    push.put(name, array, offset=offset)
                out[model] = {"notes": push.notes, "ignored": push.ignored,
                              "direct": push.bytes_direct,
                              "through": push.bytes_through}
        else:
            push_ids = json.loads(argv[3])
            for model in MODELS:
                out[model] = client.join_push(model, push_ids[model]).commit()
    print(json.dumps(out), flush=True)
    return 0


def run_child(args, timeout=120):
    cmd = [sys.executable, os.path.abspath(__file__)] + [str(a) for a in args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    last = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
    try:
        return p.returncode, json.loads(last), p.stdout + p.stderr
    except ValueError:
        return p.returncode, None, p.stdout + p.stderr


# ---- the scenario ----

class State:
    def __init__(self, env):
        self.env, self.c = env, env.c
        self.rng = np.random.default_rng(34)
        self.model_dir = os.path.join(env.root, "models")
        os.makedirs(self.model_dir)
        self.current = {}  # model -> ckpt-named float32 values pushed last
        self.version = {m: 1 for m in MODELS}
        for model, dtype in zip(MODELS, ("float32", "bfloat16")):
            ckpt = random_ckpt(self.rng, exact=False)
            ckpt_file = dict(ckpt, **{"attn.bias": np.tril(np.ones((4, 4), np.float32))})
            if dtype == "bfloat16":
                ckpt_file = {k: ("BF16", mslib.to_bf16_bits(v)) for k, v in ckpt_file.items()}
                ckpt = {k: mslib.from_bf16_bits(mslib.to_bf16_bits(v)) for k, v in ckpt.items()}
            mslib.write_safetensors(os.path.join(self.model_dir, model + ".safetensors"),
                                    ckpt_file)
            with open(os.path.join(self.model_dir, model + ".json"), "w") as f:
                json.dump(fused_model(model, dtype), f)
            self.current[model] = ckpt
        self.first = {m: dict(v) for m, v in self.current.items()}
        self.x = self.rng.standard_normal((5, D)).astype(np.float32)
        self.mc = None
        self.client = None
        self.cluster = None
        self.skip = {}  # RPC -> reason

    def status_version(self, model):
        for m in self.client.status().models:
            if m.name == model:
                return m.version
        return None

    def expect_error(self, what, call, code, text=None):
        """call() raises MeshserveError `code` whose message names `text`."""
        import grpc
        try:
            call()
            return self.c.check(False, "%s -> MeshserveError %s" % (what, code), "    no error")
        except self.mc.MeshserveError as e:
            codes = [code] if isinstance(code, str) else code
            ok = (e.code in [getattr(grpc.StatusCode, k) for k in codes]
                  and (text is None or any(t in e.message for t in
                                           ([text] if isinstance(text, str) else text))))
            return self.c.check(ok, "%s -> MeshserveError %s naming %s" % (
                what, "/".join(codes), text), "    got %s" % e)

    def check_serving(self, what):
        """fused answers the reference of its current params; versions held."""
        y = self.client.infer("fused", {"x": self.x})["y"]
        self.c.close(y, ref(self.current["fused"], self.x), what + ": fused infer equals NumPy")
        for model in MODELS:
            v = self.status_version(model)
            self.c.check(v == self.version[model], "%s: %s at version %d" % (
                what, model, self.version[model]), "    got %s" % v)

    def check_pulls(self, what, model, values, version=None):
        """Whole params and boxes pulled equal NumPy slices of `values`."""
        c, want = self.c, stored(model, values)
        wire = np.float32 if model == "fused" else np.uint16
        params = {"gate": want["c_fc"][:, :HIDDEN], "up": want["c_fc"][:, HIDDEN:],
                  "down": want["proj"], "b2": want["b"]}
        pull = self.client.pull
        named = list(params.items())
        boxes = [("c_fc", [3, 40], [10, 20]), ("gate", [1, 5], [15, 30]),
                 ("down", [5, 2], [30, 9]), ("b", [4], [9]), ("proj", [47, 0], [1, 16])]
        if "PlanPull" in self.skip:  # PullParams of whole params by model name only
            print("SKIP pulls of boxes and checkpoint names: PlanPull UNIMPLEMENTED")
            boxes = []
        else:
            named += [("c_fc", want["c_fc"]), ("proj", want["proj"]), ("b", want["b"]),
                      ("tied.proj", want["proj"])]
        for name, value in named:
            got = pull(model, name, version=version)
            c.check(got.dtype == wire and np.array_equal(got, value),
                    "%s: %s pull '%s' equals what was pushed" % (what, model, name),
                    "    got %s\n    want %s" % (got, value))
        srcs = {"c_fc": want["c_fc"], "gate": params["gate"], "down": want["proj"],
                "b": want["b"], "proj": want["proj"]}
        for name, offset, shape in boxes:
            index = tuple(slice(o, o + s) for o, s in zip(offset, shape))
            box = srcs[name][index]
            got = pull(model, name, offset=offset, shape=shape, version=version)
            c.check(np.array_equal(got, box), "%s: %s pull '%s' box %s+%s equals NumPy" % (
                what, model, name, offset, shape), "    got %s\n    want %s" % (got, box))
            for dtype in (np.float32, np.float64, np.float16, np.uint16):
                out = np.full(shape, 7, dtype)
                back = pull(model, name, offset=offset, shape=shape, version=version, out=out)
                exact = box if model == "fused" else mslib.from_bf16_bits(box)
                if dtype == np.uint16:
                    expect = mslib.to_bf16_bits(exact) if model == "fused" else box
                else:
                    expect = np.asarray(exact, np.float32).astype(dtype)
                c.check(back is out and np.array_equal(out, expect),
                        "%s: %s pull '%s' box into out=%s" % (what, model, name,
                                                              np.dtype(dtype).name),
                        "    got %s\n    want %s" % (out, expect))

    def check_all(self, what, version=None):
        for model in MODELS:
            self.check_pulls(what, model, self.current[model], version)
        self.check_serving(what)


def stage_encoding(st):
    """The client's messages and writers against protobuf and NumPy, no
    server: StageParams messages of strided, converted pieces parse (by
    protobuf) to the NumPy slice in the param's dtype (bfloat16:
    mslib.to_bf16_bits, NaN kept); BoxWriter puts chunks split anywhere into
    a strided out= of another dtype."""
    c, mc = st.c, import_client(st.env.bin_dir)
    from meshserve_client import params as P
    from meshserve_client.proto import tensor_pb2, worker_service_pb2
    rng = np.random.default_rng(1)
    src = rng.standard_normal((37, 50)).astype(np.float32)
    src[0, :3] = [np.nan, np.inf, -np.inf]

    class Piece:
        param, src_offset = "w", [2, 3]
        box = tensor_pb2.BoxProto(begin=[12, 3], end=[40, 50])
    sources = {"float32": src, "float16": src.astype(np.float16),
               "bf16 bits": mslib.to_bf16_bits(src)}
    for chunk in (64, 1 << 20):
        P.CHUNK_BYTES = chunk
        for wire, name in ((P.FLOAT32, "float32"), (P.BFLOAT16, "bfloat16"),
                           (P.FLOAT16, "float16")):
            for what, array in sources.items():
                Piece.dtype = wire
                msgs = [worker_service_pb2.StageParamChunk.FromString(m) for m in
                        P.stage_messages("m", 3, 4, [Piece], array, "w")]
                box = array[2:30, 3:50]
                exact = box if what != "bf16 bits" else mslib.from_bf16_bits(box)
                want = (mslib.to_bf16_bits(np.asarray(exact, np.float32)) if name == "bfloat16"
                        else np.asarray(exact, np.float32).astype(P.WIRE_DTYPES[wire]))
                offsets = [m.offset for m in msgs]
                data = b"".join(m.data for m in msgs)
                c.check(data == want.tobytes() and offsets == sorted(offsets)
                        and all(m.total_bytes == want.nbytes and m.version == 4
                                and list(m.box.end) == [40, 50] for m in msgs),
                        "StageParams messages (%d B chunks) of a strided %s piece as %s" % (
                            chunk, what, name))
                out = np.full((40, 60), 9, np.float64)
                writer = P.BoxWriter(out[5:33, 7:54], P.WIRE_DTYPES[wire])
                for start in range(0, len(data), 1000):
                    writer.write(start, memoryview(data)[start:start + 1000], "t")
                back = (mslib.from_bf16_bits(want) if name == "bfloat16" else want)
                c.check(writer.done() and np.array_equal(out[5:33, 7:54], back, equal_nan=True)
                        and (out[:5] == 9).all() and (out[:, :7] == 9).all(),
                        "BoxWriter: %s chunks into a strided float64 out=" % name)
    P.CHUNK_BYTES = 1 << 20
    try:
        import torch
    except ImportError:
        print("SKIP torch tensors: no torch")
        return
    t = torch.from_numpy(src[1:])
    bits = P.as_source_array("t", t.to(torch.bfloat16))
    c.check(bits.dtype == np.uint16 and np.array_equal(bits, mslib.to_bf16_bits(src[1:])),
            "a torch bfloat16 tensor is put as its bits")
    c.check(np.array_equal(P.as_source_array("t", t.T), src[1:].T),
            "a transposed torch tensor is put as its values")


def start(st):
    env = st.env
    st.mc = import_client(env.bin_dir)
    st.cluster = env.cluster(4, st.model_dir, "python_params")
    st.client = st.mc.MeshserveClient(st.cluster.target, timeout_s=60)
    probes = {
        "BeginPush": lambda: st.client.begin_push("fused").abort(),
        "PlanPull": lambda: st.client._cluster.PlanPull(
            st.mc.proto.cluster_service_pb2.PlanPullRequest(model="fused", name="b2"),
            timeout=30),
    }
    import grpc
    for rpc, probe in probes.items():
        try:
            probe()
        except st.mc.MeshserveError as e:
            if e.code == grpc.StatusCode.UNIMPLEMENTED:
                st.skip[rpc] = e.message
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.UNIMPLEMENTED:
                st.skip[rpc] = e.details()
    for rpc, why in st.skip.items():
        print("SKIP: %s answers UNIMPLEMENTED (%s): its stages are skipped" % (rpc, why),
              flush=True)


def stage_ranks(st, path="native"):
    """1 + 2: two rank processes put halves, a third commits; pulls, infer.
    `path` names the client's byte path (the data directory's name)."""
    c = st.c
    before = dict(st.version)
    previous = {m: dict(v) for m, v in st.current.items()}
    new = {"fused": random_ckpt(st.rng), "fused_bf": random_ckpt(st.rng, exact=False)}
    # fused_bf: rank 1's float16 puts must be exact, so those parts are exact values.
    exact = random_ckpt(st.rng, exact=True)
    new["fused_bf"]["c_fc"][D // 2:, HIDDEN:] = exact["c_fc"][D // 2:, HIDDEN:]
    new["fused_bf"]["proj"][:, D // 2:] = exact["proj"][:, D // 2:]
    data_dir = os.path.join(st.env.root, "push-data-" + path)
    os.makedirs(data_dir)
    for model, values in new.items():
        np.savez(os.path.join(data_dir, model + ".npz"), **values)
    pushes = {m: st.client.begin_push(m) for m in MODELS}
    ids = json.dumps({m: p.push_id for m, p in pushes.items()})
    common = [st.cluster.target, st.env.bin_dir]
    results = [run_child(["rank"] + common + [data_dir, ids, r]) for r in (0, 1)]
    for r, (rc, out, log) in enumerate(results):
        c.check(rc == 0 and out is not None, "rank %d process joined, put its halves, exited 0"
                % r, log)
    rc, out, log = results[0]
    for model in MODELS:
        info = (out or {}).get(model, {})
        notes = info.get("notes", [])
        c.check(info.get("ignored") == ["attn.bias"] and any(n[0] == "attn.bias" for n in notes),
                "%s: put of the buffer attn.bias is ignored with a note" % model,
                "    %s" % info)
    for r, (rc, out, log) in enumerate(results):
        for model in MODELS:
            info = (out or {}).get(model, {})
            c.check(info.get("direct", 0) > 0 and info.get("through", 1) == 0,
                    "rank %d %s: staged straight on the workers" % (r, model), "    %s" % info)
    c.check(all(st.status_version(m) == before[m] for m in MODELS),
            "before the commit: both models still at version %s" % before)
    # The version stays held while a pull lease on it lives (PlanPull .. EndPull).
    pb = st.mc.proto.cluster_service_pb2
    leases = {m: st.client._cluster.PlanPull(pb.PlanPullRequest(model=m, name="b2"), timeout=30)
              for m in MODELS}
    c.check(all(lease.version == before[m] for m, lease in leases.items()),
            "a pull lease on version %s of both models" % before)
    rc, out, log = run_child(["commit"] + common + [ids])
    after = {m: before[m] + 1 for m in MODELS}
    ok = c.check(rc == 0 and out == after,
                 "a third process joins and commits: version %s" % after, log)
    if not ok:
        return
    st.current = {m: {k: (np.asarray(mslib.from_bf16_bits(mslib.to_bf16_bits(v)), np.float32)
                          if m == "fused_bf" else v) for k, v in new[m].items()}
                  for m in MODELS}
    st.version = after
    st.check_all("after the ranks' push (%s)" % path)
    # The version before while the server still holds it (the lease); then not.
    for model in MODELS:
        st.check_pulls("pinned version %d" % before[model], model, previous[model],
                       version=before[model])
        st.client._cluster.EndPull(pb.EndPullRequest(model=model,
                                                     lease_id=leases[model].lease_id), timeout=30)
    st.expect_error("pull at version 99", lambda: st.client.pull("fused", "gate", version=99),
                    "NOT_FOUND", "99")


class native_path:
    """Sets MESHSERVE_PYTHON_NATIVE (inherited by child processes) for a
    block, then puts back what was there."""

    def __init__(self, value):
        self.value = value

    def __enter__(self):
        self.old = os.environ.get("MESHSERVE_PYTHON_NATIVE")
        os.environ["MESHSERVE_PYTHON_NATIVE"] = self.value

    def __exit__(self, *exc):
        if self.old is None:
            del os.environ["MESHSERVE_PYTHON_NATIVE"]
        else:
            os.environ["MESHSERVE_PYTHON_NATIVE"] = self.old


def native_built(bin_dir):
    """True if the build made the native module (BUILD/python/meshserve_client)."""
    pkg = os.path.join(os.path.dirname(os.path.abspath(bin_dir)), "python", "meshserve_client")
    return any(f.startswith("_meshserve_native") for f in os.listdir(pkg))


def stage_native(st):
    """Which byte path the stages before stage_grpcio_path take: the native
    module when it was built (it must then import), else the grpcio path."""
    from meshserve_client import params as P
    if not native_built(st.env.bin_dir):
        print("SKIP native byte path: _meshserve_native not built (no pybind11); every "
              "stage runs the grpcio path", flush=True)
        return
    st.c.check(P._meshserve_native is not None, "the native module _meshserve_native imports")
    with native_path("0"):
        st.c.check(P.native() is None, "MESHSERVE_PYTHON_NATIVE=0 turns the native path off")
    if os.environ.get("MESHSERVE_PYTHON_NATIVE") == "0":
        print("NOTE: MESHSERVE_PYTHON_NATIVE=0 is set: every stage runs the grpcio path")


def stage_grpcio_path(st):
    """stage_ranks again with MESHSERVE_PYTHON_NATIVE=0 (this process and the
    ranks): the pure grpcio path pushes and pulls the same; then the default
    path pulls what it pushed."""
    with native_path("0"):
        stage_ranks(st, "grpcio")
    st.check_all("the default path pulls the grpcio path's push")


class FakeWorker:
    """A WorkerService answering StageParams (recording each parsed message)
    and ReadParam (serving `reads`: param -> (bytes, dtype, how), in chunks of
    1000 bytes; how: "ok", "skip" (the second chunk's offset is wrong),
    "short" (the last chunk is missing), "dtype" (a wrong dtype), "missing"
    (NOT_FOUND))."""

    def __init__(self):
        import grpc
        from concurrent import futures
        from meshserve_client.proto import worker_service_pb2 as wpb
        self.staged, self.reads = [], {}
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        handler = grpc.method_handlers_generic_handler("meshserve.WorkerService", {
            "StageParams": grpc.stream_unary_rpc_method_handler(
                self.stage, request_deserializer=wpb.StageParamChunk.FromString,
                response_serializer=wpb.StageParamsResponse.SerializeToString),
            "ReadParam": grpc.unary_stream_rpc_method_handler(
                self.read, request_deserializer=wpb.ReadParamRequest.FromString,
                response_serializer=wpb.ParamChunk.SerializeToString)})
        self.server.add_generic_rpc_handlers((handler,))
        self.address = "127.0.0.1:%d" % self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()
        self.wpb = wpb

    def stage(self, chunks, context):
        n = 0
        for m in chunks:
            self.staged.append(m)
            n += len(m.data)
        return self.wpb.StageParamsResponse(bytes=n)

    def read(self, request, context):
        import grpc
        data, dtype, how = self.reads[request.param]
        if how == "missing":
            context.abort(grpc.StatusCode.NOT_FOUND, "no param '%s'" % request.param)
        starts = list(range(0, len(data), 1000))
        if how == "short":
            starts = starts[:-1]
        for i, start in enumerate(starts):
            offset = start + (4 if how == "skip" and i == 1 else 0)
            yield self.wpb.ParamChunk(total_bytes=len(data), offset=offset,
                                      data=data[start:start + 1000],
                                      dtype=dtype + (1 if how == "dtype" else 0))


def stage_native_fake_worker(st):
    """The native module against a fake worker, no cluster: staged messages
    of strided, reversed, contiguous (sent as views of the array) and 0-d
    pieces parse (by protobuf) to NumPy's bytes of those views; reads land in
    strided and reversed out= views; streams out of order, short or of the
    wrong dtype are refused (code -1), a worker's error comes back with its
    code and the failed piece's index."""
    from meshserve_client import params as P
    native, c = P._meshserve_native, st.c
    if native is None:
        print("SKIP native module against a fake worker: _meshserve_native not built")
        return
    fake = FakeWorker()
    try:
        rng = np.random.default_rng(7)
        a = rng.standard_normal((37, 50)).astype(np.float32)
        big = rng.standard_normal((700, 600)).astype(np.float32)  # 1.6 MiB: 2 chunks, views
        half = P.to_bfloat16_bits(a)
        views = {"strided": a[2:30, 3:50], "reversed": a[::-1, 5:9], "big": big,
                 "columns": big[:, 100:400], "bf16": half[1:3, ::2], "scalar": a[4, 4],
                 "empty": a[3:3, :]}
        pieces = [(name, [1] * v.ndim, [1 + d for d in v.shape], np.asarray(v))
                  for name, v in views.items()]
        results = native.stage([(fake.address, "m", 3, 4, pieces)], 30.0)
        c.check(results == [(0, "", sum(v.nbytes for v in views.values()))],
                "native stage to a fake worker: OK, every byte counted", "    %s" % results)
        for name, v in views.items():
            msgs = [m for m in fake.staged if m.param == name]
            want = np.ascontiguousarray(v).tobytes()
            c.check(b"".join(m.data for m in msgs) == want
                    and [m.offset for m in msgs] == list(range(0, len(want), 1 << 20))
                    and all(m.model == "m" and m.generation == 3 and m.version == 4
                            and m.total_bytes == len(want)
                            and list(m.box.begin) == [1] * v.ndim
                            and list(m.box.end) == [1 + d for d in v.shape] for m in msgs),
                    "native stage: piece '%s' %s arrives as NumPy's bytes" % (name, v.shape),
                    "    %d messages" % len(msgs))
        fake.reads = {"a": (a.tobytes(), P.FLOAT32, "ok"),
                      "h": (half.tobytes(), P.BFLOAT16, "ok")}
        out = np.full((40, 60), 9, np.float32)
        back = np.zeros_like(half)
        items = [("a", [0, 0], [37, 50], out[2:39, 5:55]), ("h", [0, 0], [37, 50], back[::-1])]
        got = native.read([(fake.address, "m", 3, 4, P.FLOAT32, items[:1]),
                           (fake.address, "m", 3, 4, P.BFLOAT16, items[1:])], 30.0)
        c.check(got == [(0, "", 0), (0, "", 0)] and np.array_equal(out[2:39, 5:55], a)
                and (out[:2] == 9).all() and (out[:, :5] == 9).all() and (out[:, 55:] == 9).all()
                and np.array_equal(back[::-1], half),
                "native read: chunks land in a strided and a reversed out= view", "    %s" % got)
        for how, code, text in (("skip", -1, "out of order"), ("short", -1, "ended at byte"),
                                ("dtype", -1, "dtype"), ("missing", 5, "no param 'x'")):
            fake.reads["x"] = (a.tobytes(), P.FLOAT32, how)
            dst = np.zeros_like(a)
            got = native.read([(fake.address, "m", 3, 4, P.FLOAT32,
                                [("a", [0, 0], [37, 50], np.zeros_like(a)),
                                 ("x", [0, 0], [37, 50], dst)])], 30.0)
            c.check(len(got) == 1 and got[0][0] == code and text in got[0][1] and got[0][2] == 1,
                    "native read of a stream '%s': code %d naming '%s', piece 1" % (
                        how, code, text), "    %s" % got)
    finally:
        fake.server.stop(0)


def stage_through(st):
    """3: direct=False stages through the coordinator; same commit."""
    c = st.c
    new = random_ckpt(st.rng)
    push = st.client.begin_push("fused", direct=False)
    # A state dict as it is: the checkpoint's names, a buffer, a tied twin.
    notes = push.put_state_dict(dict(new, **{"attn.bias": np.ones((4, 4), np.float32),
                                             "tied.proj": new["proj"]}))
    c.check(push.ignored == ["attn.bias"] and "attn.bias" in dict(notes)
            and "proj" in dict(notes).get("tied.proj", ""),
            "put_state_dict: the buffer attn.bias skipped with a note, tied.proj noted as "
            "proj's twin", "    ignored %s notes %s" % (push.ignored, notes))
    want = sum(v.nbytes for v in as_params(new).values()) + new["proj"].nbytes
    c.check(push.bytes_through == want and push.bytes_direct == 0,
            "direct=False: every byte through StageThrough (tied.proj's too)",
            "    through %d (want %d) direct %d" % (push.bytes_through, want, push.bytes_direct))
    v = push.commit()
    if c.check(v == st.version["fused"] + 1, "StageThrough push commits version %d" % (
            st.version["fused"] + 1), "    got %d" % v):
        st.version["fused"] = v
        st.current["fused"] = new
    st.check_all("after the StageThrough push")


def stage_unreachable(st):
    """A worker the client cannot reach: its pieces go through StageThrough,
    its pulls through PullParams; the results are the same."""
    c, mc = st.c, st.mc
    from meshserve_client import params as P
    dead = "127.0.0.1:%d" % mslib.free_port()  # nothing listens there
    victim = st.client.status().workers[0].address

    class OneDown(P.WorkerChannels):
        def channel(self, address):
            return super().channel(dead if address == victim else address)
    client = mc.MeshserveClient(st.cluster.target, timeout_s=60)
    client._workers = OneDown([], connect_timeout_s=1.0)
    try:
        new = random_ckpt(st.rng)
        push = client.begin_push("fused")
        for name, value in new.items():
            push.put(name, value)
        c.check(push.bytes_through > 0 and push.bytes_direct > 0
                and push.bytes_through + push.bytes_direct
                == sum(v.nbytes for v in new.values()),
                "one worker unreachable: its pieces through StageThrough, the rest direct",
                "    through %d direct %d" % (push.bytes_through, push.bytes_direct))
        v = push.commit()
        c.check(v == st.version["fused"] + 1, "the push commits version %d" % v)
        st.version["fused"], st.current["fused"] = v, new
        through = []
        real = P.pull_through
        P.pull_through = lambda *a: through.append(a[2]) or real(*a)
        try:
            for name, value in as_params(new).items():
                got = client.pull("fused", name)
                c.check(np.array_equal(got, value),
                        "one worker unreachable: pull '%s' equals what was pushed" % name)
        finally:
            P.pull_through = real
        c.check(len(through) > 0, "the unreachable worker's pieces were pulled via PullParams",
                "    pieces via PullParams: %s" % through)
        st.check_serving("after the push with a worker unreachable")
    finally:
        client.close()


def stage_refusals(st):
    """4: refused inputs change nothing, the cluster keeps serving."""
    client, mc, c = st.client, st.mc, st.c
    good = st.current["fused"]
    push = client.begin_push("fused")
    st.expect_error("put of an unknown name",
                    lambda: push.put("no_such_param", np.zeros((2, 2), np.float32)),
                    "NOT_FOUND", "no_such_param")
    st.expect_error("put of a box past the end",
                    lambda: push.put("c_fc", good["c_fc"][:8], offset=[12, 0]),
                    "INVALID_ARGUMENT", ["12", "c_fc"])
    st.expect_error("put with an offset of the wrong rank",
                    lambda: push.put("proj", good["proj"], offset=[0]), "INVALID_ARGUMENT")
    try:
        push.put("b", np.zeros(D, np.int32))
        c.check(False, "put of int32 -> TypeError before any RPC")
    except TypeError as e:
        c.check("int32" in str(e), "put of int32 -> TypeError before any RPC", str(e))
    push.put("c_fc", good["c_fc"][:8])  # rows 8.. of gate and up stay uncovered
    st.expect_error("commit of a push that covers half of gate",
                    push.commit, "INVALID_ARGUMENT", ["gate", "up", "c_fc"])
    st.expect_error("the refused push is over: join_push", lambda: client.join_push(
        "fused", push.push_id), "NOT_FOUND", push.push_id)
    st.check_serving("after the refused commit")

    push = client.begin_push("fused")
    for name, value in good.items():
        push.put(name, value)
    refused = False
    try:
        push.put("b2", good["b"] + 1)  # the replicated b2 again, different bytes
        push.commit()
    except mc.MeshserveError as e:
        refused = "b2" in e.message or "'b'" in e.message or " b " in e.message
        c.check(refused, "puts of b2 that differ are refused naming it", "    got %s" % e)
    if not refused:
        c.check(False, "puts of b2 that differ are refused", "    the push committed")
        st.version["fused"] += 1
    try:
        push.abort()
    except mc.MeshserveError:
        pass  # already ended by the refusal
    st.check_serving("after the differing overlap")

    push = client.begin_push("fused")
    for name, value in random_ckpt(st.rng).items():
        push.put(name, value)
    push.abort()
    st.expect_error("put after abort", lambda: push.put("b", good["b"]), "NOT_FOUND")
    st.expect_error("pull of an unknown name", lambda: client.pull("fused", "nope"),
                    "NOT_FOUND", "nope")
    st.expect_error("pull of a box past the end",
                    lambda: client.pull("fused", "gate", offset=[10, 0], shape=[8, 48]),
                    ["INVALID_ARGUMENT", "OUT_OF_RANGE"], ["10", "gate"])
    st.expect_error("pull from an unknown model", lambda: client.pull("nomodel", "gate"),
                    "NOT_FOUND", "nomodel")
    try:
        client.pull("fused", "gate", out=np.zeros((3, 3), np.float32))
        c.check(False, "pull into an out= of the wrong shape -> ValueError")
    except ValueError as e:
        c.check("[3, 3]" in str(e), "pull into an out= of the wrong shape -> ValueError", str(e))
    st.check_all("after the refusals and the abort")


def stages(env):
    st = State(env)
    out = [("encoding", lambda: stage_encoding(st)), ("start", lambda: start(st))]

    def when(rpcs, name, fn):
        def run():
            missing = [r for r in rpcs if r in st.skip]
            if missing:
                print("SKIP %s: %s UNIMPLEMENTED on the server" % (name, ", ".join(missing)))
                return
            fn(st)
        return (name, run)
    out += [("pulls at load", lambda: st.check_all("at load")),
            ("native byte path", lambda: stage_native(st)),
            ("native module against a fake worker", lambda: stage_native_fake_worker(st)),
            when(["BeginPush"], "ranks push, a third process commits", stage_ranks),
            when(["BeginPush"], "the same on the grpcio path", stage_grpcio_path),
            when(["BeginPush"], "push through the coordinator", stage_through),
            when(["BeginPush"], "a worker unreachable", stage_unreachable),
            when(["BeginPush"], "refusals", stage_refusals),
            ("stop", lambda: st.cluster.stop() if st.cluster else None)]
    env.state = st
    return out


def main():
    holder = {}

    def keep(env):
        result = stages(env)
        holder["env"] = env
        return result
    rc = e2e.main("python_params", keep, doc=__doc__)
    env = holder.get("env")
    if rc == 0 and env is not None and "BeginPush" in env.state.skip:
        print("SKIP: the push RPCs are not implemented by this server")
        return 77
    return rc


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("rank", "commit"):
        sys.exit(child_main(sys.argv[1:]))
    sys.exit(main())
