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
    """PushParams records the messages; PullParams streams self.params."""

    def __init__(self, mc):
        import grpc
        self.pb = mc.proto.cluster_service_pb2
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
                response_serializer=self.pb.PullParamsChunk.SerializeToString)})
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4),
                                  options=[("grpc.max_receive_message_length", 1 << 30)])
        self.server.add_generic_rpc_handlers((handler,))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()
        self.target = "127.0.0.1:%d" % self.port

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
