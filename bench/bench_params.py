#!/usr/bin/python3
"""Parameters as state, measured on loopback (docs/PARAMETERS.md, "Benchmark"):

  - push throughput of `meshserve push` of a 1 GiB float32 safetensors file
    (4 params of 256 MiB, [8192, 8192] each, alternately P(None,'model') and
    P('model',None), mesh {model: -1}) into a 4-worker cluster, vs the same
    command streaming the same file into a bare gRPC sink of PushParams in the
    same run (a grpcio generic handler that counts the bytes and answers; no
    parsing, no workers);
    and against the limit with the same holders: raw gRPC streams of the
    bytes each holder receives (its primary and replica shares, so replicas
    count), one bare sink per holder, all at once (raw_holders; the ratios
    push_vs_raw_holders, push_relay_vs_raw_holders, and the same with
    --replicas 0);
    The first push into fresh workers is reported apart from the best of the
    next two (the steady state of a trainer pushing every few minutes): on a
    VM the first touch of fresh memory dominates the first. `meshserve push`
    goes direct to the workers (PushDirect); the same file through the
    coordinator (--direct off, PushParams) is measured on the same cluster,
    and at the end the direct push on a cluster with --replicas 0 (each byte
    crosses one socket, as in the sink, instead of two);
  - scale 4 -> 8 workers: time from the 4 new workers registered until the
    model is ready on mesh[model=8] (and the server's own scale-step seconds),
    with bytes moved vs the lower bound from status; then the 4 leave
    (SIGTERM, 8 -> 4) and 4 others join started with --prefault_mib (their
    memory touched before they register), the same step again;
  - recovery after SIGKILL of one of the 8 workers: time until status shows
    the model ready again without the dead worker (includes detection: the
    coordinator's --heartbeat_ms, 3 missed beats);
  - peak RSS (VmHWM) of each worker vs the param bytes it holds (status'
    placements: primary and replica boxes).

The coordinator and workers are started as separate processes (mslib). Not
part of the test suite; about 2-4 minutes on 2 cores, ~6 GiB of RAM, 1 GiB
of disk in --work_dir.

Usage: bench/bench_params.py [--bin_dir build/bin] [--work_dir /tmp] [--heartbeat_ms 500]
                             [--push_only]
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
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "integration"))
import mslib  # noqa: E402

DIM = 8192  # 4 x [8192, 8192] float32 = 4 x 256 MiB
MODEL = "big"


def sink_main(port, python_dir):
    """The baseline: PushParams that reads every message and answers."""
    sys.path.insert(0, python_dir)
    from concurrent import futures

    import grpc
    from meshserve_client.proto import cluster_service_pb2

    def push(request_iterator, context):
        n = 0
        for raw in request_iterator:  # raw bytes: no deserializer
            n += len(raw)
        return cluster_service_pb2.PushParamsResponse(version=2, bytes_received=n)

    handler = grpc.method_handlers_generic_handler("meshserve.ClusterService", {
        "PushParams": grpc.stream_unary_rpc_method_handler(
            push, request_deserializer=None,
            response_serializer=cluster_service_pb2.PushParamsResponse.SerializeToString)})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4),
                         options=[("grpc.max_receive_message_length", 1 << 30)])
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port("127.0.0.1:%d" % port)
    server.start()
    print("sink ready on %d" % port, flush=True)
    signal.sigwait([signal.SIGTERM, signal.SIGINT])
    server.stop(1)


# The raw limit's sink in C++ (a generic callback service: every message of a
# stream taken as the received byte buffer, its length counted, nothing
# parsed or copied; then PushParamsResponse{version: 2, bytes_received: n}
# encoded by hand; any other method UNIMPLEMENTED). Built once per source with the system's gRPC (pkg-config).
SINK_CC = r"""
#include <grpcpp/grpcpp.h>
#include <grpcpp/generic/async_generic_service.h>
#include <pthread.h>
#include <csignal>
#include <cstdint>
#include <iostream>
#include <string>

class Reactor : public grpc::ServerGenericBidiReactor {
 public:
  Reactor() { StartRead(&in_); }
  void OnReadDone(bool ok) override {
    if (ok) {
      n_ += in_.Length();
      in_.Clear();
      StartRead(&in_);
      return;
    }
    std::string s = {0x08, 0x02, 0x10};
    uint64_t v = n_;
    do {
      char b = static_cast<char>(v & 0x7f);
      v >>= 7;
      s.push_back(static_cast<char>(v ? (b | 0x80) : b));
    } while (v);
    grpc::Slice slice(s);
    out_ = grpc::ByteBuffer(&slice, 1);
    StartWriteAndFinish(&out_, grpc::WriteOptions(), grpc::Status::OK);
  }
  void OnDone() override { delete this; }

 private:
  grpc::ByteBuffer in_, out_;
  uint64_t n_ = 0;
};

// Any other method (PushDirect: the CLI then pushes with PushParams).
class Unimplemented : public grpc::ServerGenericBidiReactor {
 public:
  Unimplemented() { Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "sink")); }
  void OnDone() override { delete this; }
};

class Sink : public grpc::CallbackGenericService {
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* c) override {
    if (c->method() != "/meshserve.ClusterService/PushParams") return new Unimplemented;
    return new Reactor;
  }
};

int main(int argc, char** argv) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  Sink sink;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(std::string("127.0.0.1:") + argv[1], grpc::InsecureServerCredentials());
  builder.RegisterCallbackGenericService(&sink);
  builder.SetMaxReceiveMessageSize(1 << 30);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  std::cout << "sink ready on " << argv[1] << std::endl;
  int sig;
  sigwait(&set, &sig);
  server->Shutdown();
  return 0;
}
"""


def cpp_sink(work_dir):
    """The C++ sink's binary (built once per source), or None when it cannot
    be built here (the Python sink stands in then, and the results say so)."""
    import hashlib
    tag = hashlib.sha1(SINK_CC.encode()).hexdigest()[:12]
    binary = os.path.join(work_dir, "meshserve-push-sink-%s" % tag)
    if os.access(binary, os.X_OK):
        return binary
    src = binary + ".cc"
    with open(src, "w") as f:
        f.write(SINK_CC)
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "grpc++"], capture_output=True,
                           text=True)
    if flags.returncode != 0:
        return None
    p = subprocess.run(["c++", "-O2", "-std=c++17", src, "-o", binary + ".tmp"]
                       + flags.stdout.split() + ["-lpthread"], capture_output=True, text=True)
    if p.returncode != 0:
        sys.stderr.write("C++ sink not built:\n%s" % p.stderr[-2000:])
        return None
    os.rename(binary + ".tmp", binary)
    return binary


def write_model(model_dir):
    specs = [[None, "model"], ["model", None]]
    params = {"p%d" % i: {"shape": [DIM, DIM], "sharding": specs[i % 2], "init": "zeros"}
              for i in range(4)}
    layers, prev = [], "x"
    for i in range(4):
        layers.append({"name": "h%d" % i, "op": "linear", "input": prev, "kernel": "p%d" % i})
        prev = "h%d" % i
        if i % 2 == 1:  # contracting over 'model': say where the sum goes
            layers[-1]["out_sharding"] = [None, None]
    model = {"name": MODEL, "mesh": {"model": -1}, "dtype": "float32", "seed": 0,
             "inputs": {"x": {"shape": [-1, DIM], "sharding": [None, None]}},
             "params": params, "layers": layers, "outputs": ["h3"]}
    with open(os.path.join(model_dir, MODEL + ".json"), "w") as f:
        json.dump(model, f)


def write_checkpoint(path, tensors=4):
    """`tensors` x 256 MiB safetensors (1 GiB by default) written tensor by
    tensor (no 1 GiB array in memory)."""
    header, offset = {}, 0
    nbytes = DIM * DIM * 4
    for i in range(tensors):
        header["p%d" % i] = {"dtype": "F32", "shape": [DIM, DIM],
                             "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    rng = np.random.default_rng(0)
    block = rng.standard_normal(DIM * 256).astype(np.float32)  # 8 MiB, tiled
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for i in range(tensors):
            for j in range(DIM // 256):
                f.write((block + np.float32(i * 1000 + j)).tobytes())
    return offset


def raw_holders(bin_dir, root, python_dir, holder_tensors, holders=4, runs=2):
    """The limit a push is measured against: a raw gRPC stream of the bytes
    each holder receives (its primary and replica share: holder_tensors x
    256 MiB) into a bare sink per holder (SINK_CC, else sink_main), all at once,
    each stream sent by `meshserve push --direct off` (the same client code
    and chunking, no parsing on the far side). Returns the best seconds of
    `runs`: the slowest stream of a run. A run in which a sink was not yet
    answering (UNAVAILABLE, on a loaded machine) is run again, at most 3 times."""
    path = os.path.join(root, "holder%d.safetensors" % holder_tensors)
    write_checkpoint(path, holder_tensors)
    ports = [mslib.free_port() for _ in range(holders)]
    binary = cpp_sink(os.path.dirname(root))
    sinks = [mslib.start_process([binary, str(p)] if binary else
                                 [sys.executable, os.path.abspath(__file__), "--sink_port",
                                  str(p), "--python_dir", python_dir],
                                 os.path.join(root, "sink%d.log" % p)) for p in ports]
    time.sleep(1.5)
    best = None
    try:
        unavailable = 0  # a sink still starting on a loaded machine: that run again
        while runs > 0:
            procs = [subprocess.Popen([os.path.join(bin_dir, "meshserve"), "push", "--target",
                                       "127.0.0.1:%d" % p, "--model", MODEL, "--checkpoint",
                                       path, "--direct", "off"], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True) for p in ports]
            seconds, retry = [], False
            for proc in procs:
                out, err = proc.communicate(timeout=600)
                m = re.search(r"(\d+) bytes sent in ([\d.]+) s", out)
                if proc.returncode != 0 and "UNAVAILABLE" in out + err and unavailable < 3:
                    retry = True
                elif proc.returncode != 0 or not m:
                    raise RuntimeError("raw stream failed: %s%s" % (out, err))
                else:
                    seconds.append(float(m.group(2)))
            if retry:
                unavailable += 1
                time.sleep(2)
                continue
            runs -= 1
            best = max(seconds) if best is None else min(best, max(seconds))
    finally:
        for sink in sinks:
            mslib.stop_process(sink)
        os.remove(path)
    return best


def status(client):
    return client.status(timeout_s=30)


def model_of(st):
    return next((m for m in st.models if m.name == MODEL), None)


def wait_ready(client, pred, timeout_s):
    """Polls Status every 20 ms until pred(status, model); returns the time."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            st = status(client)
        except Exception:  # noqa: BLE001 - busy coordinator: poll again
            time.sleep(0.02)
            continue
        m = model_of(st)
        if m is not None and m.state == "ready" and pred(st, m):
            return time.time(), st, m
        if m is None or m.state.startswith("error"):
            raise RuntimeError("model %s: %s" % (MODEL, m and m.state))
        time.sleep(0.02)
    raise RuntimeError("not ready in %ss" % timeout_s)


def push(bin_dir, target, path, *extra):
    start = time.time()
    p = subprocess.run([os.path.join(bin_dir, "meshserve"), "push", "--target", target,
                        "--model", MODEL, "--checkpoint", path, *extra], capture_output=True,
                       text=True, timeout=600)
    wall = time.time() - start
    if p.returncode != 0:
        raise RuntimeError("push failed: %s%s" % (p.stdout, p.stderr))
    m = re.search(r"(\d+) bytes sent in ([\d.]+) s", p.stdout)
    return int(m.group(1)), float(m.group(2)), wall, p.stdout.strip()


def scale_up(args, client, target, root, workers, label, extra):
    """Starts 4 workers (`extra` flags) beside the 4 running; returns the step's
    figures, the model and the status once the model is ready on 8."""
    gen0 = model_of(status(client)).generation
    for i in range(4, 8):
        workers.append(mslib.start_worker(args.bin_dir, target,
                                          os.path.join(root, "w%d-%s.log" % (i, label)), extra))
    deadline = time.time() + 120
    while time.time() < deadline and sum(w.healthy for w in status(client).workers) < 8:
        time.sleep(0.02)
    t_registered = time.time()
    t_ready, st, m = wait_ready(
        client, lambda st, m: m.mesh == "mesh[model=8]" and m.generation > gen0, 300)
    step = m.scale_steps[-1]
    return ({"wall_s": t_ready - t_registered, "step_s": step.seconds,
             "bytes_moved": step.bytes_moved, "lower_bound": step.lower_bound_bytes,
             "bytes_local": step.bytes_local, "bytes_initialized": step.bytes_initialized},
            m, st)


def scale_and_recovery(args, client, target, root, workers, results):
    """Scale 4 -> 8 cold, 8 -> 4, 4 -> 8 prefaulted, peak RSS, kill -9."""
    # Scale 4 -> 8, cold: the new workers' memory is fresh.
    step_cold, m, st = scale_up(args, client, target, root, workers, "cold", [])
    results.update(scale_wall_s=step_cold["wall_s"], scale_step_s=step_cold["step_s"],
                   scale_bytes_moved=step_cold["bytes_moved"],
                   scale_lower_bound=step_cold["lower_bound"],
                   scale_bytes_local=step_cold["bytes_local"],
                   scale_bytes_initialized=step_cold["bytes_initialized"])
    # 8 -> 4 (SIGTERM hands the shards back), then 4 -> 8 with prefaulted joiners.
    gen = m.generation
    for w in workers[4:]:
        w.send_signal(signal.SIGTERM)
    _, st, m = wait_ready(client, lambda st, m: m.mesh == "mesh[model=4]"
                          and m.generation > gen, 300)
    results["scale_down_step_s"] = m.scale_steps[-1].seconds
    for w in workers[4:]:
        w.wait(timeout=120)
    del workers[4:]
    prefault = ["--prefault_mib", str(args.prefault_mib)]
    step_warm, m, st = scale_up(args, client, target, root, workers, "warm", prefault)
    results.update(scale_prefault_mib=args.prefault_mib,
                   scale_warm_wall_s=step_warm["wall_s"],
                   scale_warm_step_s=step_warm["step_s"],
                   scale_warm_bytes_moved=step_warm["bytes_moved"],
                   scale_warm_lower_bound=step_warm["lower_bound"])
    # Peak RSS vs held bytes, on 8 workers after the push and the scale-up.
    held = {}
    for w in st.workers:
        held[w.address] = sum(p.param_bytes for p in w.placements if p.model == MODEL)
    peaks = [mslib.vm_hwm_bytes(p.pid) for p in workers]
    results.update(worker_vmhwm_mib=[round(x / 2 ** 20) for x in peaks if x],
                   worker_held_mib=sorted(round(v / 2 ** 20) for v in held.values()))
    # Recovery after kill -9 of one worker.
    victim = workers[5]
    gen1 = m.generation
    t_kill = time.time()
    victim.send_signal(signal.SIGKILL)
    t_back, st, m = wait_ready(
        client, lambda st, m: m.generation > gen1 and sum(w.healthy for w in st.workers) == 7
        and not any(p.model == MODEL for w in st.workers if not w.healthy
                    for p in w.placements), 120)
    step = m.scale_steps[-1]
    results.update(recovery_s=t_back - t_kill, recovery_mesh=m.mesh,
                   recovery_step_s=step.seconds, recovery_bytes_moved=step.bytes_moved,
                   recovery_lower_bound=step.lower_bound_bytes, version=m.version)


def push_replicas0(args, results, root, model_dir, extra, total, ckpt, python_dir):
    """The direct push with --replicas 0 (one socket hop per byte), against
    the raw streams of what each holder then gets (256 MiB)."""
    mslib._cleanup()
    results["raw_holders_r0_s"] = raw_holders(args.bin_dir, root, python_dir, 1)
    port = mslib.free_port()
    target = "127.0.0.1:%d" % port
    mslib.start_coordinator(args.bin_dir, port, model_dir, 4,
                            os.path.join(root, "coordinator_r0.log"),
                            extra + ["--replicas", "0"])
    for i in range(4):
        mslib.start_worker(args.bin_dir, target, os.path.join(root, "r0_w%d.log" % i))
    mc = mslib.client_package(args.bin_dir)
    client = mc.MeshserveClient(target, timeout_s=60)
    wait_ready(client, lambda st, m: m.mesh == "mesh[model=4]", 300)
    r0 = [push(args.bin_dir, target, ckpt) for _ in range(3)]
    relay = min((push(args.bin_dir, target, ckpt, "--direct", "off") for _ in range(2)),
                key=lambda r: r[1])
    client.close()
    best = min(r0[1:], key=lambda r: r[1])
    results.update(push_replicas0_s=best[1],
                   push_replicas0_vs_sink=total / best[1] / 2 ** 30 / results["sink_gib_per_s"],
                   push_replicas0_vs_raw_holders=results["raw_holders_r0_s"] / best[1],
                   push_relay_replicas0_vs_raw_holders=results["raw_holders_r0_s"] / relay[1])
    results["loadavg_end"] = list(os.getloadavg())
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bin_dir", default=os.path.join(os.path.dirname(HERE), "build", "bin"))
    ap.add_argument("--work_dir", default=tempfile.gettempdir())
    ap.add_argument("--heartbeat_ms", type=int, default=500)
    ap.add_argument("--prefault_mib", type=int, default=512,
                    help="--prefault_mib of the workers joining in the warm scale step")
    ap.add_argument("--push_only", action="store_true",
                    help="only the push figures (no scale, recovery or RSS stages)")
    ap.add_argument("--keep_logs", action="store_true",
                    help="keep the work directory (coordinator.log, w*.log) and print its path")
    ap.add_argument("--sink_port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--python_dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    python_dir = os.path.join(os.path.dirname(os.path.abspath(args.bin_dir)), "python")
    if args.sink_port:
        return sink_main(args.sink_port, args.python_dir)
    mc = mslib.client_package(args.bin_dir)
    root = tempfile.mkdtemp(prefix="bench-params-", dir=args.work_dir)
    results = {"loadavg_start": list(os.getloadavg())}  # the machine may be shared
    try:
        model_dir = os.path.join(root, "models")
        os.makedirs(model_dir)
        write_model(model_dir)
        ckpt = os.path.join(root, "push.safetensors")
        total = write_checkpoint(ckpt)
        # Baseline: the same command into a bare sink.
        sink_port = mslib.free_port()
        sink_bin = cpp_sink(args.work_dir)
        sink = mslib.start_process([sink_bin, str(sink_port)] if sink_bin else
                                   [sys.executable, os.path.abspath(__file__), "--sink_port",
                                    str(sink_port), "--python_dir", python_dir],
                                   os.path.join(root, "sink.log"))
        time.sleep(1.0)
        sink_runs = [push(args.bin_dir, "127.0.0.1:%d" % sink_port, ckpt) for _ in range(2)]
        mslib.stop_process(sink)
        sink_bytes, sink_s, _, _ = min(sink_runs, key=lambda r: r[1])
        results["sink_gib_per_s"] = sink_bytes / sink_s / 2 ** 30
        # The limit with replicas 1 (default): each holder gets 2 x 256 MiB.
        results["raw_sink"] = "c++" if sink_bin else "python"
        results["raw_holders_s"] = raw_holders(args.bin_dir, root, python_dir, 2)
        # The cluster.
        port = mslib.free_port()
        target = "127.0.0.1:%d" % port
        extra = ["--heartbeat_ms", str(args.heartbeat_ms)]
        mslib.start_coordinator(args.bin_dir, port, model_dir, 4,
                                              os.path.join(root, "coordinator.log"), extra)
        workers = [mslib.start_worker(args.bin_dir, target, os.path.join(root, "w%d.log" % i))
                   for i in range(4)]
        client = mc.MeshserveClient(target, timeout_s=60)
        wait_ready(client, lambda st, m: m.mesh == "mesh[model=4]", 300)
        push_runs = [push(args.bin_dir, target, ckpt) for _ in range(3)]
        results["push_first_s"] = push_runs[0][1]
        results["push_first_vs_sink"] = (push_runs[0][0] / push_runs[0][1] / 2 ** 30 /
                                         results["sink_gib_per_s"])
        push_bytes, push_s, push_wall, push_out = min(push_runs[1:], key=lambda r: r[1])
        results.update(push_bytes=push_bytes, push_s=push_s, push_wall_s=push_wall,
                       push_gib_per_s=push_bytes / push_s / 2 ** 30, push_out=push_out,
                       file_bytes=total)
        results["push_vs_sink"] = results["push_gib_per_s"] / results["sink_gib_per_s"]
        relay = min((push(args.bin_dir, target, ckpt, "--direct", "off") for _ in range(2)),
                    key=lambda r: r[1])
        results.update(push_relay_s=relay[1],
                       push_relay_vs_sink=total / relay[1] / 2 ** 30 / results["sink_gib_per_s"])
        results["push_vs_raw_holders"] = results["raw_holders_s"] / push_s
        results["push_relay_vs_raw_holders"] = results["raw_holders_s"] / relay[1]
        if args.push_only:
            return push_replicas0(args, results, root, model_dir, extra, total, ckpt,
                                  python_dir)
        scale_and_recovery(args, client, target, root, workers, results)
        client.close()
        mslib._cleanup()
        push_replicas0(args, results, root, model_dir, extra, total, ckpt, python_dir)
        results["loadavg_end"] = list(os.getloadavg())
    finally:
        mslib._cleanup()
        if args.keep_logs:
            results["logs"] = root
            for name in os.listdir(root):  # the model and checkpoint files are big
                if not name.endswith(".log"):
                    path = os.path.join(root, name)
                    shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
        else:
            shutil.rmtree(root, ignore_errors=True)
        print(json.dumps(results, indent=1))  # what was measured, also after a failure
    return 0


if __name__ == "__main__":
    sys.exit(main())
