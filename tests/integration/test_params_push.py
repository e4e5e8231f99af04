#!/usr/bin/python3
"""e2e_params_push: parameters as state on `meshserve local --workers 4`
(docs/PARAMETERS.md), on a 2-layer MLP (mslib.mlp_model: w1 P(None,'model'),
w2 P('model',None), b2 replicated; w1/w2 from a NumPy-written checkpoint, b2
from the seed), every reference computed in NumPy:

  1. `meshserve push` of a NumPy-written safetensors file, then infer equals
     the reference with the new weights; version 1 -> 2 in `meshserve status`,
     ClusterService.Status and OIP ModelMetadata.versions;
  2. `meshserve pull` is byte-identical to what was pushed, and untouched
     params equal a pull before the push (and the checkpoint / seed);
  3. a push of boxes of w1 and w2 from four "trainer ranks" in shardings other
     than the server's (gRPC stubs directly; boxes split over several
     messages) is assembled exactly;
  4. a request loop running during pushes gets only answers equal to one
     pushed version's reference, and no error;
  5. `meshserve push` goes direct to the 4 workers by default, through the
     coordinator with --direct off (both checked by the answers); a PushDirect
     whose client stages nothing, or part of a param, or that plans a gap, or
     drops its stream after the plan, is refused (FAILED_PRECONDITION naming
     what a worker lacks, INVALID_ARGUMENT naming the gap, nothing for the
     drop) and changes nothing;
  6. refused pushes (box out of bounds, a gap, an overlap, a wrong dtype, an
     unknown param or model, a wrong byte length, a tensor of the wrong shape
     through the CLI) each fail with the right gRPC code naming the value, and
     change nothing (version, answers, pulled bytes).

Usage: test_params_push.py --bin_dir build/bin [--keep]
"""
import json
import os
import re
import sys
import threading
import time

import numpy as np

import e2e_common as e2e
import mslib

MODEL = "mlp"


class State:
    """The scenario's cluster, clients and the params the server should hold."""

    def __init__(self, env):
        self.env = env
        self.c = env.c
        self.rng = np.random.default_rng(8)
        self.model = mslib.mlp_model(MODEL, checkpoint="mlp.safetensors")
        self.model_dir = os.path.join(env.root, "models")
        os.makedirs(self.model_dir)
        self.ckpt = mslib.mlp_random_params(self.model, self.rng, names=("w1", "w2"))
        mslib.write_safetensors(os.path.join(self.model_dir, "mlp.safetensors"), self.ckpt)
        with open(os.path.join(self.model_dir, MODEL + ".json"), "w") as f:
            json.dump(self.model, f)
        self.seed_b2 = mslib.init_param(self.model["seed"], "b2", [16], "uniform", scale=0.5)
        self.x = self.rng.standard_normal((5, 16)).astype(np.float32)
        self.cluster = None
        self.client = None
        self.pb = None
        self.current = None  # the params the server should serve
        self.version = 1
        self.n = 0

    def path(self, name):
        self.n += 1
        return os.path.join(self.env.root, "%d-%s" % (self.n, name))

    # ---- probes ----

    def status_model(self):
        for m in self.client.status().models:
            if m.name == MODEL:
                return m
        return None

    def pull(self, params=None):
        """`meshserve pull` -> (rc, stdout, stderr, tensors or None)."""
        out = self.path("pull.safetensors")
        args = ["pull", "--target", self.cluster.target, "--model", MODEL, "--output", out]
        if params:
            args += ["--params", ",".join(params)]
        rc, stdout, err = self.env.cli.run(*args)
        tensors = mslib.read_safetensors(out)[0] if rc == 0 and os.path.exists(out) else None
        return rc, stdout, err, tensors

    def push_file(self, tensors, *extra):
        """`meshserve push` of a NumPy-written file -> (rc, stdout, stderr)."""
        path = self.path("push.safetensors")
        mslib.write_safetensors(path, tensors)
        return self.env.cli.run("push", "--target", self.cluster.target, "--model", MODEL,
                                "--checkpoint", path, *extra)

    def push_boxes(self, boxes, chunk_bytes=1 << 20, model=MODEL):
        """PushParams of `boxes` (mslib.push_chunks) over the stubs."""
        return self.push_messages(mslib.push_chunks(model, boxes, chunk_bytes, self.pb))

    def push_messages(self, messages):
        """PushParams -> (response or None, gRPC code name, details)."""
        import grpc
        stub = self.pb_grpc.ClusterServiceStub(self.client._channel)
        try:
            return stub.PushParams(iter(messages), timeout=60), "OK", ""
        except grpc.RpcError as e:
            return None, e.code().name, e.details()

    def check_serving(self, what):
        """The answer equals the reference of self.current; version unchanged."""
        y = self.client.infer(MODEL, {"x": self.x})["y"]
        self.c.close(y, mslib.mlp_ref(self.current, self.x), what + ": infer equals NumPy")
        m = self.status_model()
        self.c.check(m is not None and m.version == self.version,
                     what + ": status version %d" % self.version,
                     "    got %s" % (m.version if m else None))

    def check_unchanged(self, what):
        """check_serving, and a pull gives self.current's bytes."""
        self.check_serving(what)
        rc, out, err, pulled = self.pull()
        self.c.check(rc == 0 and pulled is not None
                     and all(pulled[n].tobytes() == self.current[n].tobytes()
                             for n in self.current),
                     "%s: pull gives version %d's bytes" % (what, self.version))


def start(st):
    env = st.env
    st.cluster = env.cluster(4, st.model_dir, "push")
    mc = mslib.client_package(env.bin_dir)
    st.pb = mc.proto.cluster_service_pb2
    st.pb_grpc = mc.proto.cluster_service_pb2_grpc
    st.inference_pb = mc.proto.inference_pb2
    st.tensor_pb = __import__(mc.proto.__name__ + ".tensor_pb2", fromlist=["x"])
    st.client = mc.MeshserveClient(st.cluster.target, timeout_s=60)
    st.current = dict(st.ckpt, b2=st.seed_b2)


def stage_before(st):
    """Version 1 at load; a pull gives the checkpoint's bytes and the seed's b2."""
    c = st.c
    m = st.status_model()
    c.check(m is not None and m.version == 1 and m.state == "ready",
            "load: status shows version 1, ready", "    %s" % m)
    md = st.client.metadata(MODEL)
    c.check(list(md.versions) == ["1"], "load: ModelMetadata.versions == ['1']",
            "    got %s" % list(md.versions))
    rc, out, err, pulled = st.pull()
    if not c.check(rc == 0 and pulled is not None, "pull before push", "    %s%s" % (out, err)):
        return
    c.check(re.search(r"version 1\b", out) is not None and "bytes" in out,
            "pull prints version 1 and the bytes", out)
    c.check(sorted(pulled) == ["b2", "w1", "w2"], "pull: every param by default",
            "    got %s" % sorted(pulled))
    for name in ("w1", "w2"):
        c.check(pulled.get(name) is not None and pulled[name].dtype == np.float32
                and pulled[name].tobytes() == st.ckpt[name].tobytes(),
                "pull: %s is the checkpoint's bytes" % name)
    c.close(pulled.get("b2", np.zeros(0)), st.seed_b2, "pull: b2 is the seed's initializer",
            rtol=1e-6)
    st.before = pulled
    st.current = dict(pulled)  # the server's own b2 bits from here on
    st.check_serving("load")


def stage_push_all(st):
    """1 + 2: push every param, infer, versions, pull byte-identical."""
    c = st.c
    new = mslib.mlp_random_params(st.model, st.rng)
    rc, out, err = st.push_file(new)
    total = sum(v.nbytes for v in new.values())
    if not c.check(rc == 0, "push all: meshserve push exits 0", "    %s%s" % (out, err)):
        return
    c.check(re.search(r"version 2\b", out) is not None, "push all: prints version 2", out)
    c.check(re.search(r"\b%d bytes sent" % total, out) is not None,
            "push all: prints the %d bytes sent" % total, out)
    c.check("path: direct to 4 workers" in out and re.search(r"received 0 bytes", out),
            "push all: direct to the 4 workers, no byte through the coordinator", out + err)
    st.current, st.version = new, 2
    st.check_serving("push all")
    # Not client.metadata(): it caches the answer of version 1.
    md = st.client._inference.ModelMetadata(st.inference_pb.ModelMetadataRequest(name=MODEL),
                                            timeout=30)
    c.check("2" in list(md.versions), "push all: ModelMetadata.versions has '2'",
            "    got %s" % list(md.versions))
    rc, out, err = st.env.cli.run("status", "--target", st.cluster.target)
    c.check(rc == 0 and re.search(r"^\s+%s\s+ready\s+\S+\s+generation \d+\s+version 2\b" % MODEL,
                                  out, re.M) is not None and "workers: 4" in out,
            "push all: meshserve status shows version 2 (and workers: 4)", out)
    rc, out, err, pulled = st.pull()
    c.check(rc == 0 and pulled is not None and re.search(r"version 2\b", out) is not None,
            "pull after push: version 2", "    %s%s" % (out, err))
    for name, value in new.items():
        c.check(pulled is not None and pulled[name].tobytes() == value.tobytes(),
                "pull after push: %s byte-identical to the pushed tensor" % name)
    rc, out, err, only = st.pull(["w2"])
    c.check(rc == 0 and only is not None and list(only) == ["w2"]
            and only["w2"].tobytes() == new["w2"].tobytes(),
            "pull --params w2: only w2, byte-identical", "    %s%s" % (out, err))


def stage_push_partial(st):
    """A push of one param: the others keep their bytes."""
    c = st.c
    w1 = mslib.mlp_random_params(st.model, st.rng, names=("w1",))
    rc, out, err = st.push_file(w1, "--direct", "off")
    if not c.check(rc == 0 and re.search(r"version 3\b", out) is not None
                   and "path: through the coordinator" in out,
                   "push w1 only (--direct off): version 3 through the coordinator",
                   "    %s%s" % (out, err)):
        return
    previous = dict(st.current)
    st.current, st.version = dict(previous, **w1), 3
    st.check_serving("push w1 only")
    rc, out, err, pulled = st.pull()
    ok = rc == 0 and pulled is not None
    c.check(ok and pulled["w1"].tobytes() == w1["w1"].tobytes(), "push w1 only: w1 pulled back")
    c.check(ok and all(pulled[n].tobytes() == previous[n].tobytes() for n in ("w2", "b2")),
            "push w1 only: w2 and b2 keep version 2's bytes")


def stage_push_ranks(st):
    """3: boxes of w1 and w2 from four trainer ranks, in other shardings."""
    c = st.c
    new = mslib.mlp_random_params(st.model, st.rng, names=("w1", "w2"))
    w1, w2 = new["w1"], new["w2"]  # w1 [16,48] P(None,'model'); w2 [48,16] P('model',None)
    boxes = []
    # w1 by rows (the server splits its columns), uneven: rows 0:5, 5:9, 9:16.
    for r0, r1 in ((0, 5), (5, 9), (9, 16)):
        boxes.append(("w1", (r0, 0), w1[r0:r1, :], None))
    # w2 by columns over 4 ranks (the server splits rows), each column block
    # also split in rows 0:30 / 30:48 (a 2-D grid of 8 boxes, in rank order).
    for rank in range(4):
        for r0, r1 in ((0, 30), (30, 48)):
            boxes.append(("w2", (r0, 4 * rank), w2[r0:r1, 4 * rank:4 * rank + 4], None))
    r, code, details = st.push_boxes(boxes, chunk_bytes=100)  # several messages per box
    if not c.check(r is not None and r.version == 4,
                   "push from ranks: 11 boxes in other shardings commit version 4",
                   "    %s %s" % (code, details)):
        return
    c.check(r.bytes_received == w1.nbytes + w2.nbytes and sorted(r.params) == ["w1", "w2"],
            "push from ranks: the response counts %d bytes of w1, w2" % (w1.nbytes + w2.nbytes),
            "    %s" % r)
    st.current, st.version = dict(st.current, **new), 4
    st.check_serving("push from ranks")
    rc, out, err, pulled = st.pull()
    c.check(rc == 0 and pulled is not None and pulled["w1"].tobytes() == w1.tobytes()
            and pulled["w2"].tobytes() == w2.tobytes(),
            "push from ranks: pull gives the assembled tensors exactly")


def stage_direct_refused(st):
    """5: PushDirect calls that must not commit."""
    import grpc
    c = st.c
    stub = st.pb_grpc.ClusterServiceStub(st.client._channel)
    w2 = st.current["w2"]

    def box(name, offset, shape):
        return st.pb.PushParamsChunk(param=name, offset=offset, shape=shape, dtype=1)

    def direct(boxes, stage):
        """Plans `boxes`, runs stage(plan) and commits unless it returns False."""
        q = mslib.RequestQueue(st.pb.PushDirectRequest(model=MODEL, boxes=boxes))
        call = stub.PushDirect(iter(q), timeout=60)
        try:
            plan = next(call)
            if stage(plan) is False:
                call.cancel()
                return "CANCELLED", ""
            q.put(st.pb.PushDirectRequest(commit=True))
            next(call)
            q.close()
            return "OK", ""
        except grpc.RpcError as e:
            return e.code().name, e.details()
        finally:
            q.close()

    whole = [box("w2", [0, 0], [48, 16])]
    code, details = direct(whole, lambda plan: None)
    c.check(code == "FAILED_PRECONDITION" and "w2" in details,
            "PushDirect committed with nothing staged: FAILED_PRECONDITION naming w2",
            "    %s %s" % (code, details))
    wpb = __import__(st.pb.__name__.rsplit(".", 1)[0] + ".worker_service_pb2",
                     fromlist=["x"])

    def stage_first(plan):
        """Stages the first route only."""
        r = plan.routes[0]
        sl = tuple(slice(o, o + n) for o, n in zip(r.offset, r.shape))
        data = np.ascontiguousarray(w2[sl]).tobytes()
        channel = grpc.insecure_channel(r.address)
        method = channel.stream_unary("/meshserve.WorkerService/StageParams",
                                      request_serializer=wpb.StageParamChunk.SerializeToString,
                                      response_deserializer=wpb.StageParamsResponse.FromString)
        end = [o + n for o, n in zip(r.offset, r.shape)]
        method(iter([wpb.StageParamChunk(
            model=MODEL, generation=plan.generation, version=plan.version, param="w2",
            box=st.tensor_pb.BoxProto(begin=list(r.offset), end=end),
            total_bytes=len(data), offset=0, data=data)]), timeout=30)
        channel.close()
    code, details = direct(whole, stage_first)
    c.check(code == "FAILED_PRECONDITION" and "w2" in details,
            "PushDirect with one of its pieces staged: FAILED_PRECONDITION naming w2",
            "    %s %s" % (code, details))
    code, details = direct([box("w2", [0, 0], [20, 16])], lambda plan: None)
    c.check(code == "INVALID_ARGUMENT" and "w2" in details and "missing" in details,
            "PushDirect planning a gap: INVALID_ARGUMENT naming the missing box",
            "    %s %s" % (code, details))
    code, details = direct(whole, lambda plan: False)
    c.check(code == "CANCELLED", "PushDirect dropped after its plan", "    %s" % code)
    st.check_unchanged("after the refused direct pushes")


def stage_refused(st):
    """6: each refused push names the value, and nothing changes."""
    c = st.c
    w2 = st.current["w2"]
    f32 = np.ones((48, 16), np.float32)
    cases = [
        ("box out of bounds", [("w2", (40, 0), f32[:16], None)],
         ("OUT_OF_RANGE", "INVALID_ARGUMENT"), "w2"),
        ("a gap (rows 20:24 missing)",
         [("w2", (0, 0), f32[:20], None), ("w2", (24, 0), f32[24:], None)],
         ("INVALID_ARGUMENT", "FAILED_PRECONDITION"), "w2"),
        ("an overlap (rows 20:30 twice)",
         [("w2", (0, 0), f32[:30], None), ("w2", (20, 0), f32[20:], None)],
         ("INVALID_ARGUMENT", "FAILED_PRECONDITION"), "w2"),
        ("wrong dtype (bfloat16 for float32)",
         [("w2", (0, 0), np.zeros((48, 16), np.uint16), 2)], ("INVALID_ARGUMENT",), "w2"),
        ("unknown param", [("nope", (0,), np.ones(4, np.float32), None)], ("NOT_FOUND",), "nope"),
        ("wrong byte length", [("w2", (0, 0), f32, None)], ("INVALID_ARGUMENT",), "w2"),
    ]
    for what, boxes, codes, name in cases:
        chunks = list(mslib.push_chunks(MODEL, boxes, 1 << 20, st.pb))
        if what == "wrong byte length":
            chunks[0].data = chunks[0].data[:-4]
        _, code, details = st.push_messages(chunks)
        c.check(code in codes and name in details,
                "refused: %s -> %s naming '%s'" % (what, "/".join(codes), name),
                "    got %s: %s" % (code, details))
    r, code, details = st.push_boxes([("w2", (0, 0), w2, None)], model="no_such_model")
    c.check(code == "NOT_FOUND" and "no_such_model" in details,
            "refused: unknown model -> NOT_FOUND naming it", "    got %s: %s" % (code, details))
    # Through the CLI: a tensor that is no param, a whole tensor of the wrong
    # shape; both print the server's error and exit 1.
    for what, tensors, codes, name in [
            ("a file whose tensor is not a param", {"w9": np.ones((2, 2), np.float32)},
             ("NOT_FOUND",), "w9"),
            ("w2 of shape [16,48]", {"w2": np.ones((16, 48), np.float32)},
             ("INVALID_ARGUMENT", "OUT_OF_RANGE"), "w2")]:
        rc, out, err = st.push_file(tensors)
        e2e.expect_code(c, "refused via the CLI: " + what, rc, err, list(codes))
        c.check(name in err, "refused via the CLI: %s names '%s'" % (what, name), err)
    rc, out, err = st.env.cli.run("push", "--target", st.cluster.target, "--model", MODEL,
                                  "--checkpoint", "/nonexistent/w.safetensors")
    c.check(rc == 1 and "/nonexistent/w.safetensors" in err,
            "push of a missing file: exit 1 naming the path", "    rc=%d %s" % (rc, err))
    rc, out, err = st.env.cli.run("push", "--target", "nohost", "--model", MODEL,
                                  "--checkpoint", "x.safetensors")
    c.check(rc == 2 and "nohost" in err, "push --target nohost: usage error naming it",
            "    rc=%d %s" % (rc, err))
    st.check_unchanged("after the refused pushes")


def stage_concurrent(st):
    """4: a request loop during pushes: every answer is one version's, no error."""
    c = st.c
    versions = {st.version: dict(st.current)}
    stop = threading.Event()
    answers = []  # (y or None, error text)

    def loop():
        while not stop.is_set():
            try:
                answers.append((st.client.infer(MODEL, {"x": st.x})["y"], ""))
            except Exception as e:  # noqa: BLE001 - every error is a failure here
                answers.append((None, str(e)))

    thread = threading.Thread(target=loop)
    thread.start()
    counts = []
    try:
        for i in range(4):
            new = mslib.mlp_random_params(st.model, st.rng)
            before = len(answers)
            rc, out, err = st.push_file(new)
            counts.append(len(answers) - before)
            m = re.search(r"version (\d+)\b", out)
            if not c.check(rc == 0 and m is not None, "concurrent: push %d accepted" % i,
                           "    %s%s" % (out, err)):
                break
            versions[int(m.group(1))] = new
            st.current, st.version = new, int(m.group(1))
            time.sleep(0.2)
    finally:
        stop.set()
        thread.join(timeout=120)
    refs = {v: mslib.mlp_ref(p, st.x) for v, p in versions.items()}
    scale = max(float(np.max(np.abs(r))) for r in refs.values())
    errors = [e for y, e in answers if y is None]
    matched, unmatched = {}, 0
    for y, _ in answers:
        if y is None:
            continue
        hits = [v for v, r in refs.items()
                if np.allclose(y, r, rtol=e2e.RTOL, atol=e2e.ATOL_FRACTION * scale)]
        if len(hits) == 1:
            matched[hits[0]] = matched.get(hits[0], 0) + 1
        else:
            unmatched += 1
    c.check(len(answers) >= 10 and sum(counts) > 0,
            "concurrent: %d answers, %s during the pushes" % (len(answers), counts))
    c.check(not errors, "concurrent: no request fails (%d failed)" % len(errors),
            "\n".join("    " + e[:300] for e in errors[:5]))
    c.check(unmatched == 0,
            "concurrent: every answer equals exactly one version's reference "
            "(per version %s, %d match none)" % (dict(sorted(matched.items())), unmatched))
    st.check_serving("after the concurrent pushes")


def stages(env):
    st = State(env)
    return [("start", lambda: start(st)),
            ("before a push", lambda: stage_before(st)),
            ("push all", lambda: stage_push_all(st)),
            ("push one param", lambda: stage_push_partial(st)),
            ("push from ranks", lambda: stage_push_ranks(st)),
            ("refused direct pushes", lambda: stage_direct_refused(st)),
            ("refused pushes", lambda: stage_refused(st)),
            ("pushes under load", lambda: stage_concurrent(st)),
            ("stop", lambda: st.cluster.stop())]


if __name__ == "__main__":
    sys.exit(e2e.main("params_push", stages, doc=__doc__))
