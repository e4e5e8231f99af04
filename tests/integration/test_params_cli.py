#!/usr/bin/python3
"""e2e_params_cli: `meshserve push` and `meshserve pull` against a fake
ClusterService (grpcio, in this process) that records what the CLI sends and
answers from NumPy arrays, so that the client's side of the wire contract is
checked without a cluster:

  - push sends every tensor of the file as one box (offset 0, the tensor's
    shape and dtype) in chunks of at most 1 MiB (--chunk_bytes) with
    byte_offset in order, only the first message of a box naming it; the
    bytes reassemble to the file's tensors exactly; it prints the version and
    the bytes sent;
  - a direct push (--direct auto, the default) against a fake PushDirect
    that plans halves of every tensor (columns of matrices, so the client
    extracts strided pieces) on two "workers" (this same server, under two
    addresses) stages each piece's bytes exactly once, in order, in chunks of
    at most --chunk_bytes, carrying the plan's generation and version, then
    commits; a coordinator without PushDirect, or a route to an unreachable
    worker, falls back to PushParams saying why (--direct on fails instead);
    a route outside a tensor and a worker's refusal of a chunk fail with the
    code named and cancel the push; --direct with another value is a flag
    error;
  - a refused push prints the server's code and message and exits 1; a missing
    file, an unwritable output, a bad target and a bad --timeout_s are
    reported naming the value;
  - pull writes a safetensors file byte-identical to the server's arrays (F32
    and BF16, in the server's order, the version in its metadata), --params
    asks for those params only, and a stream that breaks the contract (a
    short param) fails with no file written.

Usage: test_params_cli.py --bin_dir build/bin [--keep]
"""
import os
import sys
import threading
from concurrent import futures

import numpy as np

import e2e_common as e2e
import mslib


class FakeCluster:
    """PushParams records the messages; PullParams streams self.params;
    PushDirect plans by self.direct (None: UNIMPLEMENTED) and
    WorkerService.StageParams records the staged chunks."""

    def __init__(self, mc):
        import grpc
        self.pb = mc.proto.cluster_service_pb2
        import importlib
        self.wpb = importlib.import_module(mc.proto.__name__ + ".worker_service_pb2")
        self.direct = None  # "here", "unreachable", "badroute", "refuse", "truncate"
        self.truncate = None  # with "truncate": this file is cut before the plan goes out
        self.direct_calls = []  # (boxes, routes, committed) per PushDirect
        self.staged = []  # StageParamChunk, in arrival order
        self.pushes = []  # [messages] per call
        self.refuse = None  # (grpc.StatusCode, message) for the next push
        self.params = {}  # name -> (dtype enum, array)
        self.pull_requests = []
        self.short = False
        self.lock = threading.Lock()
        handler = grpc.method_handlers_generic_handler("meshserve.ClusterService", {
            "PushParams": grpc.stream_unary_rpc_method_handler(
                self.push, request_deserializer=self.pb.PushParamsChunk.FromString,
                response_serializer=self.pb.PushParamsResponse.SerializeToString),
            "PullParams": grpc.unary_stream_rpc_method_handler(
                self.pull, request_deserializer=self.pb.PullParamsRequest.FromString,
                response_serializer=self.pb.PullParamsChunk.SerializeToString),
            "PushDirect": grpc.stream_stream_rpc_method_handler(
                self.push_direct, request_deserializer=self.pb.PushDirectRequest.FromString,
                response_serializer=self.pb.PushDirectReply.SerializeToString)})
        worker = grpc.method_handlers_generic_handler("meshserve.WorkerService", {
            "StageParams": grpc.stream_unary_rpc_method_handler(
                self.stage, request_deserializer=self.wpb.StageParamChunk.FromString,
                response_serializer=self.wpb.StageParamsResponse.SerializeToString)})
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8),
                                  options=[("grpc.max_receive_message_length", 1 << 30)])
        self.server.add_generic_rpc_handlers((handler, worker))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()
        self.target = "127.0.0.1:%d" % self.port
        # Two "workers": this server under two names.
        self.workers = ["127.0.0.1:%d" % self.port, "localhost:%d" % self.port]

    def push_direct(self, requests, context):
        import grpc
        if self.direct is None:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
        first = next(requests)
        routes = []
        for i, box in enumerate(first.boxes):
            shape = list(box.shape)
            if not shape or min(shape) == 0:
                continue
            dim = 1 if len(shape) >= 2 else 0
            cut = shape[dim] // 2
            for k, (begin, end) in enumerate([(0, cut), (cut, shape[dim])]):
                if begin == end:
                    continue
                offset, size = [0] * len(shape), list(shape)
                offset[dim], size[dim] = begin, end - begin
                if self.direct == "badroute":
                    size[dim] += 1
                address = "127.0.0.1:1" if self.direct == "unreachable" else self.workers[k]
                routes.append(self.pb.PushRoute(box=i, worker_id=k, address=address,
                                                offset=offset, shape=size))
        call = [list(first.boxes), routes, False]
        self.direct_calls.append(call)
        if self.direct == "truncate":
            os.truncate(self.truncate, 64)
        yield self.pb.PushDirectReply(generation=3, version=9, routes=routes)
        try:
            commit = next(requests, None)
        except Exception:  # the client cancelled
            commit = None
        if commit is None or not commit.commit:
            return
        call[2] = True
        n = sum(len(m.data) for m in self.staged)
        yield self.pb.PushDirectReply(result=self.pb.PushParamsResponse(
            version=9, bytes_to_workers=n, params=[b.param for b in first.boxes]))

    def stage(self, chunks, context):
        import grpc
        n = 0
        for chunk in chunks:
            if self.direct == "refuse":
                context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                              "param '%s' box is not held here" % chunk.param)
            with self.lock:
                self.staged.append(chunk)
            n += len(chunk.data)
        return self.wpb.StageParamsResponse(bytes=n)

    def push(self, messages, context):
        got = list(messages)
        with self.lock:
            self.pushes.append(got)
        if self.refuse:
            code, message = self.refuse
            context.abort(code, message)
        return self.pb.PushParamsResponse(version=len(self.pushes) + 1,
                                          bytes_received=sum(len(m.data) for m in got))

    def pull(self, request, context):
        self.pull_requests.append(list(request.params))
        names = list(request.params) or list(self.params)
        for name in names:
            dtype, array = self.params[name]
            data = array.tobytes()
            if self.short:
                data = data[:-4]
            step = 1000
            for start in range(0, max(len(data), 1), step):
                msg = self.pb.PullParamsChunk(byte_offset=start, data=data[start:start + step],
                                              version=7)
                if start == 0:
                    msg.param = name
                    msg.shape.extend(array.shape)
                    msg.dtype = dtype
                    msg.total_bytes = array.nbytes
                yield msg


def boxes_of(messages):
    """[(param, offset, shape, dtype, bytes, chunk sizes, continuation names)]."""
    boxes = []
    for m in messages:
        if m.byte_offset == 0:
            boxes.append([m.param, list(m.offset), list(m.shape), m.dtype, b"", [], []])
        else:
            boxes[-1][6].append(m.param)
        box = boxes[-1]
        if m.byte_offset != len(box[4]):
            raise AssertionError("byte_offset %d after %d bytes" % (m.byte_offset, len(box[4])))
        box[4] += m.data
        box[5].append(len(m.data))
    return boxes


def check_direct(env, fake, path, arrays):
    """The direct push's cases (see the top)."""
    c, cli = env.c, env.cli
    push = ["push", "--target", fake.target, "--model", "m", "--checkpoint", path]
    fake.direct, fake.staged = "here", []
    rc, out, err = cli.run(*push, "--chunk_bytes", "65536")
    call = fake.direct_calls[-1] if fake.direct_calls else [[], [], False]
    c.check(rc == 0 and "version 9" in out and "path: direct to 2 workers" in out and call[2],
            "push --direct auto: plans, stages on 2 workers, commits", out + err)
    c.check([(b.param, list(b.offset), list(b.shape)) for b in call[0]]
            == [(n, [0] * arrays[n].ndim, list(arrays[n].shape)) for n in ["b", "h", "w_big"]],
            "push --direct: the plan names every tensor as one whole box")
    got, sizes, meta_ok = {}, [], True
    for m in fake.staged:
        key = (m.param, tuple(m.box.begin), tuple(m.box.end))
        got.setdefault(key, b"")
        meta_ok &= (m.model == "m" and m.generation == 3 and m.version == 9
                    and m.offset == len(got[key]))
        got[key] += m.data
        sizes.append(len(m.data))
    want = {}
    for r in call[1]:
        name = call[0][r.box].param
        sl = tuple(slice(o, o + n) for o, n in zip(r.offset, r.shape))
        end = tuple(o + n for o, n in zip(r.offset, r.shape))
        want[(name, tuple(r.offset), end)] = np.ascontiguousarray(arrays[name][sl]).tobytes()
    c.check(meta_ok and sizes and max(sizes) <= 65536,
            "push --direct: chunks in order with the plan's model, generation and version, "
            "<= --chunk_bytes (%d chunks)" % len(sizes))
    c.check(got == want, "push --direct: each piece (columns of matrices) staged once, equal to "
            "the file's slice", "    got %s want %s" % (sorted(got), sorted(want)))
    fake.direct = "unreachable"
    before = len(fake.pushes)
    rc, out, err = cli.run(*push)
    c.check(rc == 0 and "127.0.0.1:1 is not reachable" in err and len(fake.pushes) == before + 1
            and "path: through the coordinator" in out and not fake.direct_calls[-1][2],
            "push: an unreachable worker falls back to PushParams before any byte", out + err)
    rc, out, err = cli.run(*push, "--direct", "on")
    c.check(rc == 1 and "UNAVAILABLE" in err and "127.0.0.1:1" in err
            and len(fake.pushes) == before + 1,
            "push --direct on: an unreachable worker is an error naming it", out + err)
    for mode, code, needle in [("badroute", "INTERNAL", "not inside a tensor"),
                               ("refuse", "INVALID_ARGUMENT", "StageParams on worker")]:
        fake.direct = mode
        rc, out, err = cli.run(*push)
        c.check(rc == 1 and code in err and needle in err and not fake.direct_calls[-1][2]
                and len(fake.pushes) == before + 1,
                "push --direct: %s is %s, not committed, no fallback" % (mode, code), out + err)
    # The file shrinks after the client mapped it: a clear error, no commit.
    cut = path + ".cut"
    with open(path, "rb") as src, open(cut, "wb") as dst:
        dst.write(src.read())
    fake.direct, fake.truncate = "truncate", cut
    rc, out, err = cli.run("push", "--target", fake.target, "--model", "m", "--checkpoint", cut)
    c.check(rc == 1 and "shrank while it was being pushed" in err and not fake.direct_calls[-1][2],
            "push --direct: a file cut under the push exits 1 saying so, not committed",
            "    rc=%d %s%s" % (rc, out, err))
    fake.direct = None
    rc, out, err = cli.run(*push, "--direct", "maybe")
    c.check(rc == 2 and "--direct" in err and "'maybe'" in err,
            "push --direct maybe: a flag error naming the value", out + err)


def run(env):
    c, cli = env.c, env.cli
    mc = mslib.client_package(env.bin_dir)
    fake = FakeCluster(mc)
    rng = np.random.default_rng(5)
    big = rng.standard_normal((700, 1000)).astype(np.float32)  # 2.8 MB: 3 chunks
    small = rng.standard_normal((3, 5)).astype(np.float32)
    bf = mslib.to_bf16_bits(rng.standard_normal(6))
    path = os.path.join(env.root, "push.safetensors")
    mslib.write_safetensors(path, {"w_big": big, "b": small, "h": ("BF16", bf)})
    try:
        rc, out, err = cli.run("push", "--target", fake.target, "--model", "m",
                               "--checkpoint", path)
        c.check(rc == 0 and "version 2" in out and "%d bytes sent" % (big.nbytes + small.nbytes
                                                                        + bf.nbytes) in out,
                "push: exits 0, prints version 2 and the bytes sent", out + err)
        boxes = boxes_of(fake.pushes[-1]) if fake.pushes else []
        names = [b[0] for b in boxes]
        c.check(names == ["b", "h", "w_big"], "push: one box per tensor, in name order",
                "    got %s" % names)
        want = {"w_big": (big, 1), "b": (small, 1), "h": (bf, 2)}
        for name, offset, shape, dtype, data, sizes, cont in boxes:
            array, enum = want[name]
            c.check(offset == [0] * array.ndim and shape == list(array.shape) and dtype == enum,
                    "push: %s is the whole tensor (offset 0, shape %s, dtype %d)"
                    % (name, list(array.shape), enum), "    %s %s %s" % (offset, shape, dtype))
            c.check(data == array.tobytes(), "push: %s's bytes are the file's" % name)
            c.check(max(sizes) <= 1 << 20 and all(n == "" for n in cont),
                    "push: %s in %d chunks of <= 1 MiB, only the first naming it"
                    % (name, len(sizes)), "    %s %s" % (sizes, cont))
        c.check(fake.pushes and all(m.model == "m" for m in fake.pushes[-1] if m.byte_offset == 0),
                "push: every box names the model")
        rc, out, err = cli.run("push", "--target", fake.target, "--model", "m",
                               "--checkpoint", path, "--chunk_bytes", "4096")
        sizes = [len(m.data) for m in fake.pushes[-1]]
        want_n = sum(-(-a.nbytes // 4096) for a in (big, small, bf))
        c.check(rc == 0 and max(sizes) == 4096 and len(sizes) == want_n,
                "push --chunk_bytes 4096: 4 KiB chunks (%d messages)" % len(sizes), out + err)
        c.check("path: through the coordinator" in out and "pushing through the coordinator"
                in err, "push: a coordinator without PushDirect gets PushParams, saying so",
                out + err)
        check_direct(env, fake, path, {"w_big": big, "b": small, "h": bf})
        import grpc
        fake.refuse = (grpc.StatusCode.NOT_FOUND, "model 'm' has no param 'w_big'")
        rc, out, err = cli.run("push", "--target", fake.target, "--model", "m",
                               "--checkpoint", path)
        fake.refuse = None
        c.check(rc == 1 and "NOT_FOUND" in err and "'w_big'" in err and "version" not in out,
                "push refused: exit 1 with the server's code and message", "    %d %s" % (rc, err))
        for what, args, code, needle in [
                ("a missing file", ["--checkpoint", "/nonexistent/x.safetensors"], 1,
                 "/nonexistent/x.safetensors"),
                ("a bad target", ["--checkpoint", path, "--target", "localhost"], 2, "localhost"),
                ("a bad --timeout_s", ["--checkpoint", path, "--timeout_s", "-1"], 2, "-1"),
                ("a bad --chunk_bytes", ["--checkpoint", path, "--chunk_bytes", "3"], 2,
                 "chunk_bytes")]:
            full = ["push", "--target", fake.target, "--model", "m"] + args
            rc, out, err = cli.run(*full)
            c.check(rc == code and needle in err, "push with %s: exit %d naming '%s'"
                    % (what, code, needle), "    rc=%d %s" % (rc, err))
        # pull
        fake.params = {"w": (1, big), "bias": (1, small), "hb": (2, bf)}
        out_path = os.path.join(env.root, "pull.safetensors")
        rc, out, err = cli.run("pull", "--target", fake.target, "--model", "m",
                               "--output", out_path)
        ok = rc == 0 and os.path.exists(out_path)
        c.check(ok and "version 7" in out and "%d bytes" % (big.nbytes + small.nbytes + bf.nbytes)
                in out, "pull: exits 0, prints version 7 and the bytes", out + err)
        if ok:
            tensors, meta = mslib.read_safetensors(out_path)
            c.check(list(tensors) == ["w", "bias", "hb"] and meta.get("version") == "7",
                    "pull: params in the server's order, version in the metadata",
                    "    %s %s" % (list(tensors), meta))
            c.check(tensors["w"].tobytes() == big.tobytes() and tensors["bias"].tobytes()
                    == small.tobytes() and tensors["hb"].dtype == np.uint16
                    and tensors["hb"].tobytes() == bf.tobytes(),
                    "pull: byte-identical F32 and BF16 tensors")
        rc, out, err = cli.run("pull", "--target", fake.target, "--model", "m",
                               "--output", out_path, "--params", "hb,bias")
        c.check(rc == 0 and fake.pull_requests[-1] == ["hb", "bias"]
                and list(mslib.read_safetensors(out_path)[0]) == ["hb", "bias"],
                "pull --params hb,bias: asks for and writes those two", out + err)
        fake.short = True
        short_path = os.path.join(env.root, "short.safetensors")
        rc, out, err = cli.run("pull", "--target", fake.target, "--model", "m",
                               "--output", short_path)
        fake.short = False
        c.check(rc == 1 and "INTERNAL" in err and "'w'" in err and not os.path.exists(short_path)
                and not os.path.exists(short_path + ".data.tmp"),
                "pull of a short param: exit 1 naming it, no file left", "    %d %s" % (rc, err))
        rc, out, err = cli.run("pull", "--target", fake.target, "--model", "m",
                               "--output", "/nonexistent/dir/x.safetensors")
        c.check(rc == 1 and "/nonexistent/dir/x.safetensors" in err,
                "pull to an unwritable path: exit 1 naming it", "    %d %s" % (rc, err))
    finally:
        fake.server.stop(0)


if __name__ == "__main__":
    sys.exit(e2e.main("params_cli", lambda env: [("push and pull CLI", lambda: run(env))],
                      needs=("meshserve",), doc=__doc__))
