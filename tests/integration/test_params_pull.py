#!/usr/bin/python3
"""e2e_params_pull: box pulls with `meshserve pull --params --offset --shape
--version` from `meshserve local --workers 4` (issue 34, the C++ client),
every expected tensor a NumPy slice of the file pushed with `meshserve push`:

  - an MLP (mslib.mlp_model, d_in 640, hidden 2048: w1 [640, 2048]
    P(None,'model') is held in column quarters of 1.25 MiB, so a piece is
    several ReadParam chunks of strided rows; w2 [2048, 16] P('model',None)
    in row quarters; b2 replicated) gets a NumPy-written checkpoint pushed;
  - whole params (one and several names), boxes crossing the holders'
    boundaries in both dims, a box from --offset alone (the rest of the
    tensor), --shape alone (from the origin), a 1-d box and a one-element box
    are each byte-identical to the NumPy slice, with the version in the
    file's metadata and "path: direct from N workers" printed (N >= 2 for a
    box spanning several holders);
  - a checkpoint tensor name: model "fused" reads q, k, v from one tensor
    c_attn [64, 192] (`from`/`from_offset`, as GPT-2's import does); c_attn
    whole and boxes across q/k and inside v equal the checkpoint's slices;
  - --version: after a second push, --version of the first gives the first
    push's bytes while the server holds it (else NOT_FOUND naming it), and a
    version never made is NOT_FOUND; the current one gives the second push;
  - under TLS (a second cluster, --tls_dir) push and a box pull go through
    the coordinator, the pulled box equal to the pushed slice;
  - a box outside the tensor fails (exit 1, INVALID_ARGUMENT or OUT_OF_RANGE
    naming the value), an unknown name is NOT_FOUND, and no file is left;
    --offset with two names, --offset without --params and a malformed
    --shape are flag errors (exit 2) naming the flag.

The client's side of the wire, against a fake ClusterService + WorkerService
(grpcio, in this process; runs even where the real server is not there):
PlanPull pieces on two "workers" (this server under two addresses) are read
with ReadParam in chunks of 100 bytes and land in place (a float32 [12, 20]
tensor cut in column cells of 5), EndPull is called with the lease; a piece
on an unreachable worker makes the CLI pull through the coordinator instead
(PullParams carrying offset, shape and the plan's version) and say so.

The cluster stages skip (exit 77) only while the coordinator answers
PlanPull UNIMPLEMENTED (the server side of issue 34 not landed yet).

Usage: test_params_pull.py --bin_dir build/bin [--keep]
"""
import json
import os
import re
import sys

import numpy as np

import e2e_common as e2e
import mslib

MODEL = "mlp"
SKIPPED = []  # the reason, when PlanPull is not implemented


class State:
    def __init__(self, env):
        self.env = env
        self.c = env.c
        self.rng = np.random.default_rng(34)
        self.model = mslib.mlp_model(MODEL, d_in=640, hidden=2048, d_out=16)
        self.model_dir = os.path.join(env.root, "models")
        os.makedirs(self.model_dir)
        with open(os.path.join(self.model_dir, MODEL + ".json"), "w") as f:
            json.dump(self.model, f)
        # "fused": q, k, v read from one checkpoint tensor c_attn [64, 192] (as
        # GPT-2's import does), sharded three ways.
        self.c_attn = (self.rng.standard_normal((64, 192)) / 8).astype(np.float32)
        mslib.write_safetensors(os.path.join(self.model_dir, "fused.safetensors"),
                                {"c_attn": self.c_attn})
        specs = {"q": [None, "model"], "k": ["model", None], "v": [None, None]}
        fused = {"name": "fused", "mesh": {"model": -1}, "dtype": "float32", "seed": 1,
                 "checkpoint": "fused.safetensors",
                 "inputs": {"x": {"shape": [-1, 64], "sharding": [None, None]}},
                 "params": {n: {"shape": [64, 64], "sharding": specs[n], "from": "c_attn",
                                "from_offset": [0, 64 * i]} for i, n in enumerate("qkv")},
                 "layers": [{"name": "a", "op": "linear", "input": "x", "kernel": "q"},
                            {"name": "b", "op": "linear", "input": "a", "kernel": "k",
                             "out_sharding": [None, None]},
                            {"name": "c", "op": "linear", "input": "b", "kernel": "v"}],
                 "outputs": ["c"]}
        with open(os.path.join(self.model_dir, "fused.json"), "w") as f:
            json.dump(fused, f)
        self.cluster = None
        self.n = 0
        self.pushed = {}  # version -> {name: array}

    def path(self, name):
        self.n += 1
        return os.path.join(self.env.root, "%d-%s" % (self.n, name))

    def push(self):
        tensors = mslib.mlp_random_params(self.model, self.rng)
        path = self.path("push.safetensors")
        mslib.write_safetensors(path, tensors)
        rc, out, err = self.env.cli.run("push", "--target", self.cluster.target, "--model",
                                        MODEL, "--checkpoint", path)
        m = re.search(r"version (\d+)", out)
        self.c.check(rc == 0 and m is not None, "push exits 0 with a version", out + err)
        if m:
            self.pushed[int(m.group(1))] = tensors
            return int(m.group(1))
        return None

    def pull(self, *flags, model=MODEL):
        """`meshserve pull FLAGS` -> (rc, stdout, stderr, tensors, metadata, path)."""
        out = self.path("pull.safetensors")
        rc, stdout, err = self.env.cli.run("pull", "--target", self.cluster.target, "--model",
                                           model, "--output", out, *flags)
        tensors, meta = (None, None)
        if rc == 0 and os.path.exists(out):
            tensors, meta = mslib.read_safetensors(out)
        return rc, stdout, err, tensors, meta, out


def start(st):
    st.cluster = st.env.cluster(4, st.model_dir, "pull")
    import grpc
    mc = mslib.client_package(st.env.bin_dir)
    pb = mc.proto.cluster_service_pb2
    stub = mc.proto.cluster_service_pb2_grpc.ClusterServiceStub(
        grpc.insecure_channel(st.cluster.target))
    try:
        reply = stub.PlanPull(pb.PlanPullRequest(model=MODEL, name="b2"), timeout=30)
        stub.EndPull(pb.EndPullRequest(model=MODEL, lease_id=reply.lease_id), timeout=30)
    except grpc.RpcError as e:
        if e.code() == grpc.StatusCode.UNIMPLEMENTED:
            SKIPPED.append("the coordinator answers PlanPull UNIMPLEMENTED (%s)" % e.details())
            return
        raise


def stage_boxes(st):
    if SKIPPED:
        return
    version = st.push()
    if version is None:
        return
    ref = st.pushed[version]
    w1, w2, b2 = ref["w1"], ref["w2"], ref["b2"]
    cases = [  # (what, flags, {name: expected}, least workers named)
        ("whole w1", ["--params", "w1"], {"w1": w1}, 4),
        ("w1,w2,b2 at once", ["--params", "w1,w2,b2"], {"w1": w1, "w2": w2, "b2": b2}, 4),
        ("w1 box across column holders", ["--params", "w1", "--offset", "3,500",
                                          "--shape", "100,1100"], {"w1": w1[3:103, 500:1600]}, 3),
        ("w2 box across row holders", ["--params", "w2", "--offset", "1000,4",
                                       "--shape", "600,9"], {"w2": w2[1000:1600, 4:13]}, 2),
        ("w1 --offset alone: the rest", ["--params", "w1", "--offset", "600,1500"],
         {"w1": w1[600:, 1500:]}, 2),
        ("w1 --shape alone: from the origin", ["--params", "w1", "--shape", "7,513"],
         {"w1": w1[:7, :513]}, 2),
        ("b2 1-d box", ["--params", "b2", "--offset", "5", "--shape", "6"], {"b2": b2[5:11]}, 1),
        ("w2 one element", ["--params", "w2", "--offset", "2047,15", "--shape", "1,1"],
         {"w2": w2[2047:, 15:]}, 1),
    ]
    for what, flags, want, least in cases:
        rc, out, err, got, meta, _ = st.pull(*flags)
        m = re.search(r"path: direct from (\d+) workers", out)
        st.c.check(rc == 0 and got is not None and list(got) == list(want)
                   and all(got[k].shape == v.shape and got[k].tobytes() == v.tobytes()
                           for k, v in want.items())
                   and meta.get("version") == str(version),
                   "pull %s: byte-identical to the NumPy slice, version %d" % (what, version),
                   "    rc=%d %s %s got %s" % (rc, out, err, {k: v.shape for k, v in
                                                             (got or {}).items()}))
        st.c.check(m is not None and int(m.group(1)) >= least,
                   "pull %s: read direct from >= %d workers" % (what, least), out + err)


def stage_checkpoint_names(st):
    """Boxes of the checkpoint tensor c_attn that the fused model's q, k, v read."""
    if SKIPPED:
        return
    for what, flags, want in [
            ("whole c_attn", [], st.c_attn),
            ("c_attn box across q and k", ["--offset", "3,50", "--shape", "20,40"],
             st.c_attn[3:23, 50:90]),
            ("c_attn box inside v", ["--offset", "60,130"], st.c_attn[60:, 130:])]:
        rc, out, err, got, meta, _ = st.pull("--params", "c_attn", *flags, model="fused")
        st.c.check(rc == 0 and got is not None and got["c_attn"].shape == want.shape
                   and got["c_attn"].tobytes() == want.tobytes()
                   and meta.get("version") == "1" and "path: direct from" in out,
                   "pull %s of model fused (checkpoint name): the checkpoint's slice" % what,
                   "    rc=%d %s %s" % (rc, out, err))


def stage_versions(st):
    if SKIPPED or len(st.pushed) != 1:
        return
    first = next(iter(st.pushed))
    second = st.push()
    if second is None:
        return
    rc, out, err, got, meta, _ = st.pull("--params", "w1", "--offset", "0,1000",
                                         "--shape", "640,100", "--version", str(first))
    if rc == 0:
        st.c.check(got["w1"].tobytes() == st.pushed[first]["w1"][:, 1000:1100].tobytes()
                   and meta.get("version") == str(first),
                   "pull --version %d (held): the first push's bytes" % first)
    else:
        e2e.expect_code(st.c, "pull --version %d (no longer held)" % first, rc, err,
                        ["NOT_FOUND"])
        st.c.check(str(first) in err, "NOT_FOUND names version %d" % first, err)
    rc, out, err, got, meta, _ = st.pull("--params", "w2", "--shape", "5,5")
    st.c.check(rc == 0 and got["w2"].tobytes() == st.pushed[second]["w2"][:5, :5].tobytes()
               and meta.get("version") == str(second),
               "pull of the current version gives the second push", out + err)
    rc, out, err, *_ = st.pull("--params", "w2", "--version", "999")
    e2e.expect_code(st.c, "pull --version 999 (never made)", rc, err, ["NOT_FOUND"])
    st.c.check("999" in err, "NOT_FOUND names version 999", err)


def stage_refused(st):
    if SKIPPED:
        return
    rc, out, err, _, _, path = st.pull("--params", "w1", "--offset", "600,0",
                                       "--shape", "41,10")
    e2e.expect_code(st.c, "box past w1's rows", rc, err, ["INVALID_ARGUMENT", "OUT_OF_RANGE"])
    st.c.check(rc == 1 and not os.path.exists(path) and not os.path.exists(path + ".tmp"),
               "box past w1's rows: exit 1, no file left", err)
    rc, out, err, _, _, path = st.pull("--params", "nosuch")
    e2e.expect_code(st.c, "unknown name", rc, err, ["NOT_FOUND"])
    st.c.check("nosuch" in err and not os.path.exists(path), "NOT_FOUND names 'nosuch'", err)
    for flags, needle in [(["--params", "w1,w2", "--offset", "0,0"], "--offset"),
                          (["--offset", "0,0"], "--params"),
                          (["--params", "w1", "--shape", "3,x"], "--shape"),
                          (["--params", "w1", "--version", "0"], "--version")]:
        rc, out, err, *_ = st.pull(*flags)
        st.c.check(rc == 2 and needle in err, "pull %s: flag error naming %s" % (flags, needle),
                   "    rc=%d %s" % (rc, err))


class FakePull:
    """PlanPull / EndPull / PullParams and WorkerService.ReadParam over one
    NumPy array `t` (float32 [12, 20], column cells of 5)."""

    def __init__(self, mc):
        import importlib
        from concurrent import futures

        import grpc
        self.pb = mc.proto.cluster_service_pb2
        wpb = importlib.import_module(mc.proto.__name__ + ".worker_service_pb2")
        self.wpb = wpb
        self.t = np.arange(240, dtype=np.float32).reshape(12, 20) * 0.5 - 3
        self.unreachable = False
        self.ended, self.reads, self.pulls = [], [], []
        pb = self.pb
        table = {  # service -> {method: (kind, handler, request, response)}
            "meshserve.ClusterService": {
                "PlanPull": ("unary_unary", self.plan, pb.PlanPullRequest, pb.PlanPullReply),
                "EndPull": ("unary_unary", self.end, pb.EndPullRequest, pb.EndPullReply),
                "PullParams": ("unary_stream", self.pull, pb.PullParamsRequest,
                               pb.PullParamsChunk)},
            "meshserve.WorkerService": {
                "ReadParam": ("unary_stream", self.read, wpb.ReadParamRequest, wpb.ParamChunk)}}
        handlers = [grpc.method_handlers_generic_handler(service, {
            name: getattr(grpc, kind + "_rpc_method_handler")(
                fn, request_deserializer=req.FromString,
                response_serializer=resp.SerializeToString)
            for name, (kind, fn, req, resp) in methods.items()})
            for service, methods in table.items()]
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        self.server.add_generic_rpc_handlers(handlers)
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()
        self.target = "127.0.0.1:%d" % port
        self.workers = ["127.0.0.1:%d" % port, "localhost:%d" % port]

    def box(self, request):
        offset = list(request.offset) or [0, 0]
        shape = list(request.shape) or [12 - offset[0], 20 - offset[1]]
        return offset, shape

    def plan(self, request, context):
        offset, shape = self.box(request)
        reply = self.pb.PlanPullReply(lease_id="lease-%s" % request.name, lease_s=30,
                                      generation=4, version=request.version or 6,
                                      dtype=1, shape=shape)
        for cell in range(4):
            lo, hi = max(offset[1], cell * 5), min(offset[1] + shape[1], cell * 5 + 5)
            if lo >= hi:
                continue
            address = self.workers[cell % 2]
            if self.unreachable and cell == 3:
                address = "127.0.0.1:1"
            piece = reply.pieces.add(param=request.name, dst_offset=[0, lo - offset[1]],
                                     worker_id=cell % 2, address=address)
            piece.box.begin.extend([offset[0], lo])
            piece.box.end.extend([offset[0] + shape[0], hi])
        return reply

    def end(self, request, context):
        self.ended.append(request.lease_id)
        return self.pb.EndPullReply()

    def read(self, request, context):
        b, e = list(request.box.begin), list(request.box.end)
        self.reads.append((request.generation, request.version, b, e))
        data = self.t[b[0]:e[0], b[1]:e[1]].tobytes()
        for at in range(0, len(data), 100):
            yield self.wpb.ParamChunk(total_bytes=len(data), offset=at, data=data[at:at + 100])

    def pull(self, request, context):
        offset, shape = self.box(request)
        self.pulls.append((list(request.params), offset, shape, request.version))
        data = self.t[offset[0]:offset[0] + shape[0], offset[1]:offset[1] + shape[1]].tobytes()
        for at in range(0, len(data), 100):
            msg = self.pb.PullParamsChunk(byte_offset=at, data=data[at:at + 100],
                                          version=request.version)
            if at == 0:
                msg.param, msg.dtype, msg.total_bytes = request.params[0], 1, len(data)
                msg.shape.extend(shape)
            yield msg


def stage_fake(env):
    fake = FakePull(mslib.client_package(env.bin_dir))
    c = env.c
    try:
        for n, (offset, shape) in enumerate([("0,0", "12,20"), ("2,3", "7,14"), ("5,12", "4,8")]):
            out = os.path.join(env.root, "fake-%d.safetensors" % n)
            o = [int(x) for x in offset.split(",")]
            s = [int(x) for x in shape.split(",")]
            rc, stdout, err = env.cli.run("pull", "--target", fake.target, "--model", "m",
                                          "--output", out, "--params", "t", "--offset", offset,
                                          "--shape", shape)
            got, meta = mslib.read_safetensors(out) if rc == 0 else ({}, {})
            want = fake.t[o[0]:o[0] + s[0], o[1]:o[1] + s[1]]
            c.check(rc == 0 and got["t"].shape == want.shape
                    and got["t"].tobytes() == want.tobytes() and meta.get("version") == "6"
                    and "path: direct from 2 workers" in stdout,
                    "fake: pull box %s+%s read from 2 workers lands in place" % (offset, shape),
                    "    rc=%d %s %s" % (rc, stdout, err))
            c.check(fake.ended[-1:] == ["lease-t"] and all(r[:2] == (4, 6) for r in fake.reads),
                    "fake: EndPull with the lease; ReadParam of generation 4 version 6",
                    "    %s %s" % (fake.ended, fake.reads[-2:]))
        fake.unreachable = True
        out = os.path.join(env.root, "fake-relay.safetensors")
        rc, stdout, err = env.cli.run("pull", "--target", fake.target, "--model", "m",
                                      "--output", out, "--params", "t", "--offset", "1,2",
                                      "--shape", "3,17", "--version", "5")
        got, meta = mslib.read_safetensors(out) if rc == 0 else ({}, {})
        c.check(rc == 0 and got["t"].tobytes() == fake.t[1:4, 2:19].tobytes()
                and "through the coordinator" in stdout and "127.0.0.1:1" in stdout
                and fake.pulls[-1:] == [(["t"], [1, 2], [3, 17], 5)],
                "fake: a holder unreachable -> PullParams with offset, shape, version",
                "    rc=%d %s %s %s" % (rc, stdout, err, fake.pulls))
    finally:
        fake.server.stop(0)


def stage_tls(st):
    """Under TLS (`meshserve local --tls_dir`, certificates from
    scripts/make-dev-certs.sh) push and pull go through the coordinator: the
    push's zero-copy stream on its own channel with the client's credentials,
    the pull as PullParams with the box."""
    if SKIPPED:
        return
    mslib._cleanup()  # the plaintext cluster
    certs = os.path.join(st.env.root, "certs")
    rc, out, err = mslib.run(["sh", os.path.join(e2e.ROOT, "scripts", "make-dev-certs.sh"),
                              certs], timeout=120)
    st.c.check(rc == 0, "make-dev-certs.sh", out + err)
    st.cluster = st.env.cluster(2, st.model_dir, "tls", extra_args=["--tls_dir", certs])
    tensors = mslib.mlp_random_params(st.model, st.rng)
    path = st.path("tls-push.safetensors")
    mslib.write_safetensors(path, tensors)
    rc, out, err = st.env.cli.run("push", "--target", st.cluster.target, "--model", MODEL,
                                  "--checkpoint", path, "--tls_dir", certs)
    st.c.check(rc == 0 and "path: through the coordinator" in out,
               "TLS: push through the coordinator", out + err)
    rc, out, err, got, meta, _ = st.pull("--params", "w1", "--offset", "5,700", "--shape",
                                         "30,900", "--tls_dir", certs)
    st.c.check(rc == 0 and got is not None
               and got["w1"].tobytes() == tensors["w1"][5:35, 700:1600].tobytes()
               and "through the coordinator (TLS" in out,
               "TLS: pull of a box through the coordinator equals the pushed slice",
               "    rc=%d %s %s" % (rc, out, err))


def stages(env):
    st = State(env)
    return [("fake", lambda: stage_fake(env)), ("start", lambda: start(st)), ("boxes", lambda: stage_boxes(st)),
            ("checkpoint names", lambda: stage_checkpoint_names(st)),
            ("versions", lambda: stage_versions(st)), ("refused", lambda: stage_refused(st)),
            ("tls", lambda: stage_tls(st))]


if __name__ == "__main__":
    rc = e2e.main("params_pull", stages, doc=__doc__)
    if SKIPPED and rc == 0:
        print("SKIP: %s" % SKIPPED[0])
        sys.exit(77)
    sys.exit(rc)
