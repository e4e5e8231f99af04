#!/usr/bin/python3
"""e2e_batching: dynamic batching (the model file's "batching" key) with real
processes. `meshserve local --workers 2` serves examples/models/swiglu_batched
.json (batching on: max_batch_size 32, max_queue_delay_us 500); 16 concurrent
clients send batch-1 (and some batch-2/3) requests over gRPC; every answer
equals an independent NumPy reference of the block (params from the model's
initializers, re-implemented in mslib), and some requests report a
batch_size > 1 (the ModelInfer response parameter). A request with a bad
shape sent among them fails alone with INVALID_ARGUMENT. `meshserve bench` on
the model reports mean_batch_size and mean_queue_us in its JSON line.

Usage: test_batching.py --bin_dir build/bin [--keep]
"""
import json
import os
import shutil
import sys
import threading
import urllib.request

import numpy as np

import e2e_common as e2e
import mslib

MODEL = "swiglu_batched"
CLIENTS = 16
PER_CLIENT = 6


def import_stubs(bin_dir):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(bin_dir)), "python"))
    import grpc
    from meshserve_client.proto import inference_pb2, inference_pb2_grpc
    return grpc, inference_pb2, inference_pb2_grpc


def request(pb2, x, rid):
    req = pb2.ModelInferRequest(model_name=MODEL, id=rid)
    req.inputs.add(name="x", datatype="FP32", shape=list(x.shape))
    req.raw_input_contents.append(np.ascontiguousarray(x, dtype=np.float32).tobytes())
    return req


def run_clients(env, target):
    c = env.c
    grpc, pb2, pb2_grpc = import_stubs(env.bin_dir)
    params = mslib.init_params(e2e.load_example(MODEL))
    channel = grpc.insecure_channel(target)
    stub = pb2_grpc.GRPCInferenceServiceStub(channel)
    stub.ModelInfer(request(pb2, np.zeros((1, 256), np.float32), "warmup"), timeout=120)
    rng = np.random.default_rng(0)
    # Mostly batch 1; every third request has 2 or 3 rows.
    inputs = [[rng.standard_normal((1 if (i + j) % 3 else 2 + j % 2, 256)).astype(np.float32)
               for j in range(PER_CLIENT)] for i in range(CLIENTS)]
    results = {}
    lock = threading.Lock()

    def client(i):
        for j, x in enumerate(inputs[i]):
            try:
                r = stub.ModelInfer(request(pb2, x, "c%d-%d" % (i, j)), timeout=120)
                y = np.frombuffer(r.raw_output_contents[0], np.float32).reshape(x.shape)
                out = (y, r.parameters["batch_size"].int64_param, r.id)
            except grpc.RpcError as e:
                out = e
            with lock:
                results[(i, j)] = out

    bad = {}

    def bad_client():
        try:
            stub.ModelInfer(request(pb2, np.zeros((1, 255), np.float32), "bad"), timeout=120)
            bad["code"] = "OK"
        except grpc.RpcError as e:
            bad["code"] = e.code().name

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    threads.append(threading.Thread(target=bad_client))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    channel.close()
    sizes, wrong = [], []
    for i in range(CLIENTS):
        for j, x in enumerate(inputs[i]):
            got = results.get((i, j))
            if not isinstance(got, tuple):
                wrong.append("c%d-%d: %s" % (i, j, got))
                continue
            y, size, rid = got
            sizes.append(size)
            ref = e2e.swiglu_ref(params, x)
            atol = e2e.ATOL_FRACTION * float(np.max(np.abs(ref)))
            if rid != "c%d-%d" % (i, j) or not np.allclose(y, ref, rtol=e2e.RTOL, atol=atol):
                wrong.append("c%d-%d: id %s, max diff %g" % (i, j, rid, np.abs(y - ref).max()))
    c.check(not wrong, "%d concurrent answers equal NumPy" % (CLIENTS * PER_CLIENT),
            "    " + "\n    ".join(wrong[:10]))
    c.check(sizes and max(sizes) > 1 and min(sizes) >= 1,
            "some requests ran in batches > 1 (batch_size parameter)",
            "    sizes %s" % sorted(set(sizes)))
    print("    batch sizes seen: %s" % sorted(set(sizes)), flush=True)
    c.check(bad.get("code") == "INVALID_ARGUMENT",
            "a bad shape among them fails alone with INVALID_ARGUMENT", "    got %s" % bad)


def check_bench(env, target):
    rc, out, err = env.cli.run("bench", "--target", target, "--model", MODEL,
                               "--input_shape", "x=1,256", "--concurrency", "8",
                               "--requests", "80", timeout=180)
    try:
        stats = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        stats = {}
    env.c.check(rc == 0 and stats.get("errors") == 0 and stats.get("requests") == 80
                and stats.get("mean_batch_size", 0) >= 1 and "mean_queue_us" in stats
                and "p50_ms" in stats and "requests_per_s" in stats,
                "bench reports mean_batch_size and mean_queue_us",
                "    rc=%d\n%s\n%s" % (rc, out, err))


def run(env):
    d = os.path.join(env.root, "models")
    os.makedirs(d)
    shutil.copy(os.path.join(e2e.EXAMPLES, MODEL + ".json"), d)
    http_port = mslib.free_port()
    cluster = env.cluster(2, d, "batching", extra_args=("--http_port", str(http_port)))
    try:
        run_clients(env, cluster.target)
        check_bench(env, cluster.target)
        check_batch_metric(env, http_port)
    finally:
        cluster.stop()


def check_batch_metric(env, http_port):
    """/metrics counts the batched requests in meshserve_inference_batch_size."""
    url = "http://127.0.0.1:%d/metrics" % http_port
    text = urllib.request.urlopen(url, timeout=30).read().decode()
    series = 'meshserve_inference_batch_size_count{model="%s"}' % MODEL
    count = [float(l.rsplit(" ", 1)[1]) for l in text.splitlines() if l.startswith(series)]
    over_one = [l for l in text.splitlines()
                if l.startswith('meshserve_inference_batch_size_bucket{model="%s",le="1"}' % MODEL)]
    env.c.check(count and count[0] > 0, "/metrics counts batched requests (%s)" % series,
                "\n".join(l for l in text.splitlines() if "batch_size" in l)[:1500])
    env.c.check(bool(over_one) and count and float(over_one[0].rsplit(" ", 1)[1]) < count[0],
                "/metrics shows batches of more than one row",
                "\n".join(l for l in text.splitlines() if "batch_size" in l)[:1500])


if __name__ == "__main__":
    sys.exit(e2e.main("batching", lambda env: [("batching", lambda: run(env))], doc=__doc__))
