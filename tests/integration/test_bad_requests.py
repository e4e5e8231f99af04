#!/usr/bin/python3
"""e2e_bad_requests: on 2 workers, bad requests get the right gRPC codes (from
the CLI and as hand-encoded KServe requests) and bad flags are usage errors.

Usage: test_bad_requests.py --bin_dir build/bin [--keep]
"""
import sys

import numpy as np

import e2e_common as e2e
import mslib

expect_code = e2e.expect_code


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


def run(env):
    print("== bad requests (2 workers)", flush=True)
    c, cli = env.c, env.cli
    model_dir, _ = env.models()
    cluster = env.cluster(2, model_dir, "bad")
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
        rc, _, err = cli.run("infer", "--target", t, "--model", "linear")
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
        rc, _, err = cli.run("infer", "--target", t, "--modle", "linear")
        c.check(rc == 2 and "--modle" in err, "unknown flag -> exit 2 naming it", err)
        rc, _, err = cli.run("bench", "--target", t, "--model", "linear",
                             "--input_shape", "x=16,32", "--requests", "ten")
        c.check(rc == 2 and "--requests" in err, "bad --requests -> exit 2 naming it", err)
        rc, _, err = cli.run("status", "--target", "nohostport")
        c.check(rc == 2 and "nohostport" in err, "bad --target -> exit 2 naming it", err)
    finally:
        cluster.stop()


if __name__ == "__main__":
    sys.exit(e2e.main("bad_requests", lambda env: [("bad requests", lambda: run(env))],
                      doc=__doc__))
