#!/usr/bin/python3
"""e2e_python_client: the Python client (client/python, meshserve_client) and
gRPC server reflection against `meshserve local --workers 2`.

With the package as built into BUILD/python (stubs generated from
proto/*.proto): every referenced model of e2e_common.make_model_dir through
MeshserveClient.infer, with and without out_sharding, equals its NumPy
reference and reports the expected sharded types; a bfloat16 model takes float32
(rounded by the client) or uint16 bits; the answer equals the CLI's bit for
bit; RPC errors raise MeshserveError with the gRPC code and the server's
message; describe/status/ready answer; reflection lists the services of the
coordinator and of each worker, and the workers answer grpc.health.v1.

Usage: test_python_client.py --bin_dir build/bin [--keep]
"""
import os
import sys

import numpy as np

import e2e_common as e2e

HEALTH_CHECK = "/grpc.health.v1.Health/Check"
SERVING = b"\x08\x01"  # HealthCheckResponse{status: SERVING}


def import_client(bin_dir):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(bin_dir)), "python"))
    import meshserve_client
    from meshserve_client import reflection
    return meshserve_client, reflection


def check_models(env, client):
    """Every referenced request of make_model_dir equals NumPy and has its types."""
    c = env.c
    _, cases = env.models()
    for model, (ref_fn, requests) in cases.items():
        if ref_fn is None:
            continue
        for i, (inputs, out_sharding, types) in enumerate(requests):
            what = "%s request %d %s" % (model, i, out_sharding or "")
            result = client.infer_result(model, inputs, out_sharding=out_sharding)
            c.check(result.types == types, what + ": types %s" % types,
                    "    got %s" % result.types)
            for name, ref in ref_fn(inputs).items():
                out = result.outputs.get(name)
                if c.check(out is not None and out.dtype == np.float32,
                           what + ": %s is float32" % name, "    got %r" % out):
                    c.close(out, ref, what + ": %s matches NumPy" % name, *e2e.tolerance(model))


def check_bf16_bits_and_cli(env, mc, client, target):
    c = env.c
    _, cases = env.models()
    x = cases["swiglu_bf16"][1][0][0]["x"]
    rounded = client.infer("swiglu_bf16", {"x": x})["y"]
    from_bits = client.infer("swiglu_bf16", {"x": mc.to_bfloat16_bits(x)})["y"]
    c.check(np.array_equal(rounded, from_bits),
            "bf16: float32 input (rounded by the client) == uint16 bits input")
    x = cases["linear"][1][0][0]["x"]
    rc, out, err, cli_outputs = env.cli.infer(target, "linear", {"x": x})
    c.check(rc == 0 and np.array_equal(client.infer("linear", {"x": x})["y"], cli_outputs.get("y")),
            "linear: the Python client's answer == the CLI's, bit for bit",
            "    rc=%d\n%s\n%s" % (rc, out, err))


def check_errors(env, mc, client):
    """(what, call, gRPC code name, a substring of the server's message)."""
    import grpc
    c = env.c
    x = np.ones((16, 32), np.float32)
    cases = [
        ("unknown model", lambda: client.infer("no_such_model", {"x": x}),
         "NOT_FOUND", "no_such_model"),
        ("unknown input name", lambda: client.infer("linear", {"z": x}), "INVALID_ARGUMENT", "z"),
        ("batch 3 not divisible by data=8",
         lambda: client.infer("linear", {"x": np.ones((3, 32), np.float32)}),
         "INVALID_ARGUMENT", "3"),
        ("int32 input for a float32 model",
         lambda: client.infer("linear", {"x": np.ones((16, 32), np.int32)}),
         "INVALID_ARGUMENT", "x"),
        ("out_sharding with an unknown axis",
         lambda: client.infer("linear", {"x": x}, out_sharding={"y": "P('nope')"}),
         "INVALID_ARGUMENT", "nope"),
        ("describe of an unknown model", lambda: client.describe("no_such_model"),
         "NOT_FOUND", "no_such_model"),
    ]
    for what, call, code, text in cases:
        try:
            call()
            c.check(False, "%s -> MeshserveError %s" % (what, code), "    no error raised")
        except mc.MeshserveError as e:
            c.check(e.code == getattr(grpc.StatusCode, code) and text in e.message
                    and code in str(e), "%s -> MeshserveError %s" % (what, code),
                    "    got %s" % e)
    try:
        client.infer("linear", {"x": np.ones((16, 32), np.complex64)})
        c.check(False, "complex64 input -> TypeError before any RPC")
    except TypeError as e:
        c.check("complex64" in str(e), "complex64 input -> TypeError before any RPC", str(e))
    down = mc.MeshserveClient("127.0.0.1:1", timeout_s=2)
    try:
        down.live()
        c.check(False, "no server -> MeshserveError UNAVAILABLE")
    except mc.MeshserveError as e:
        c.check(e.code == grpc.StatusCode.UNAVAILABLE, "no server -> MeshserveError UNAVAILABLE",
                "    got %s" % e)
    down.close()


def check_cluster_calls(env, client):
    c = env.c
    c.check(client.live() and client.ready() and client.ready("linear"),
            "live, ready, ready('linear')")
    described = client.describe("linear", {"x": [16, 32]})
    c.check(described.mesh == "mesh[data=8]" and any(
        v.name == "y" and v.type_str == "float32[16@data,32]" for v in described.values),
        "describe('linear') gives its mesh and the output's type", "    got %s" % described)
    status = client.status()
    c.check(len(status.workers) == 2 and all(w.healthy for w in status.workers),
            "status: 2 healthy workers", "    got %s" % status)
    c.check(all(m.state == "ready" for m in status.models) and
            {"linear", "swiglu_bf16"} <= {m.name for m in status.models},
            "status: every model ready", "    got %s" % status.models)
    return [w.address for w in status.workers]


def check_reflection(env, reflection, target, worker_addresses):
    import grpc
    c = env.c
    services = reflection.list_services(target)
    want = {"inference.GRPCInferenceService", "meshserve.ClusterService", "grpc.health.v1.Health"}
    c.check(want <= set(services), "reflection on the coordinator lists %s" % sorted(want),
            "    got %s" % services)
    files = reflection.file_containing_symbol(target, "inference.GRPCInferenceService")
    methods = {m.name for f in files for s in f.service for m in s.method}
    c.check("ModelInfer" in methods, "reflection gives GRPCInferenceService's descriptor",
            "    methods %s" % methods)
    for address in worker_addresses:
        services = reflection.list_services(address)
        c.check({"meshserve.WorkerService", "grpc.health.v1.Health"} <= set(services),
                "reflection on worker %s lists WorkerService and Health" % address,
                "    got %s" % services)
        with grpc.insecure_channel(address) as channel:
            check = channel.unary_unary(HEALTH_CHECK)
            c.check(check(b"", timeout=10) == SERVING,
                    "worker %s: grpc.health.v1 Check -> SERVING" % address)


def run(env):
    print("== the Python client and reflection (2 workers)", flush=True)
    mc, reflection = import_client(env.bin_dir)
    model_dir, _ = env.models()
    cluster = env.cluster(2, model_dir, "python_client")
    try:
        with mc.MeshserveClient(cluster.target) as client:
            check_models(env, client)
            check_bf16_bits_and_cli(env, mc, client, cluster.target)
            check_errors(env, mc, client)
            workers = check_cluster_calls(env, client)
            check_reflection(env, reflection, cluster.target, workers)
    finally:
        cluster.stop()


if __name__ == "__main__":
    sys.exit(e2e.main("python_client", lambda env: [("python client", lambda: run(env))],
                      doc=__doc__))
