#!/usr/bin/python3
"""e2e_faults_inputs: faults outside the workers' processes, over real
processes (mslib.ProcessCluster) with answers checked against NumPy.

  coordinator_restart  the coordinator killed (SIGKILL) and restarted on the
                       same port under traffic: clients see clear errors
                       (UNAVAILABLE) while it is gone, never a wrong answer or a
                       hang; the workers re-register and the answers are right
                       again.
  bad_checkpoints      a truncated and a corrupted safetensors checkpoint:
                       each model reports an error naming its file; the good
                       model serves.
  half_push            a hostile peer opens PushData to a worker, sends half of
                       a slice a request waits for and closes the stream: that
                       request fails cleanly (DEADLINE_EXCEEDED naming the
                       bytes received), a complete push to the same program is
                       answered right, and the cluster serves the next request.
  slice_budget         workers with --max_inflight_slice_bytes 8192 on a model
                       whose workers exchange batch-sized slices: a large batch
                       gets RESOURCE_EXHAUSTED naming the bytes and the flag (no
                       worker marked suspect), smaller ones just under the
                       budget are then answered right many times in a row; a
                       bad flag value is refused naming it.

Usage: test_faults_inputs.py --bin_dir build/bin [--keep]
"""
import os
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np

import e2e_common as e2e
import mslib

# kill -9 of a worker mid-push and a pushing client cut half-way: test_faults_push.py.


class BudgetCluster(mslib.ProcessCluster):
    """A ProcessCluster whose workers get extra flags (`worker_args`)."""

    def __init__(self, *args, worker_args=(), **kwargs):
        self.worker_args = list(worker_args)
        super().__init__(*args, **kwargs)

    def add_worker(self):
        i = len(self.workers)
        proc = self._spawn("worker%d" % i, [
            os.path.join(self.bin_dir, "meshserve-worker"), "--port", "0",
            "--coordinator", self.target, "--threads", "1"] + self.worker_args)
        self.workers.append(proc)
        return proc


# y = x @ kernel with the contraction split over the workers: each worker sends
# the other its partial sums of half of y's columns (batch x 24 floats), a slice
# that grows with the batch.
LIN_K = dict(mslib.LIN, name="link", checkpoint="link.safetensors",
             inputs={"x": {"shape": [-1, 64], "sharding": [None, "data"]}},
             params={"kernel": {"shape": [64, 48], "sharding": ["data", None]}})
SLICE_BUDGET = 8192  # bytes: a batch of up to 85 rows fits, 512 rows do not


def slice_budget(env):
    c = env.c
    model_dir = os.path.join(env.root, "models-budget")
    kernel = mslib.write_lin_model(model_dir, model=LIN_K)
    bad = subprocess.run([os.path.join(env.bin_dir, "meshserve-worker"),
                          "--max_inflight_slice_bytes", "-5"], capture_output=True, text=True,
                         timeout=60)  # 0 is the default: derived from the host's memory
    c.check(bad.returncode == 2 and "--max_inflight_slice_bytes=-5" in bad.stderr,
            "budget: a worker refuses --max_inflight_slice_bytes=-5 naming the flag and value",
            "    rc %s: %s" % (bad.returncode, bad.stderr[-300:]))
    worker = os.path.join(env.bin_dir, "meshserve-worker")
    for args, env_extra, want in (
            (["--prefault_mib", "-3"], {}, "--prefault_mib=-3"),
            (["--prefault_mib", "8"], {"MESHSERVE_TENSOR_POOL_MIB": "4"}, "--prefault_mib=8"),
            ([], {"MESHSERVE_TENSOR_POOL_MIB": "lots"}, "MESHSERVE_TENSOR_POOL_MIB='lots'")):
        bad = subprocess.run([worker] + args, capture_output=True, text=True, timeout=60,
                             env=dict(os.environ, **env_extra))
        c.check(bad.returncode == 2 and want in bad.stderr,
                "memory flags: a worker with %s %s exits 2 naming %s" % (args, env_extra, want),
                "    rc %s: %s" % (bad.returncode, bad.stderr[-300:]))
    cl = BudgetCluster(env.bin_dir, 2, model_dir, os.path.join(env.root, "logs-budget"),
                       worker_args=["--max_inflight_slice_bytes", str(SLICE_BUDGET)])
    try:
        c.check(cl.wait_ready(), "budget: cluster ready", cl.logs_tail())
        client = mslib.LinClient(env.bin_dir, cl.target, kernel, model="link")
        code, detail = client.wait_served()
        c.check(code == "ok", "budget: a batch-1 request is answered right", detail)
        rng = np.random.default_rng(5)
        big = rng.standard_normal((512, 64)).astype(np.float32)
        outcomes = {}
        for i in range(5):
            code, detail = client.infer(big, timeout=60)
            outcomes[code] = outcomes.get(code, 0) + 1
        print("    512 rows: %s: %s" % (outcomes, detail), flush=True)
        c.check(outcomes == {"RESOURCE_EXHAUSTED": 5} and "--max_inflight_slice_bytes=8192"
                in detail and "49152 bytes" in detail,
                "budget: 5 requests of 512 rows (slices of 49152 bytes) each get "
                "RESOURCE_EXHAUSTED naming the bytes and the flag", "    %s %s" % (
                    outcomes, detail))
        ok = sum(client.infer(rng.standard_normal((80, 64)).astype(np.float32))[0] == "ok"
                 for _ in range(40))
        c.check(ok == 40, "budget: then 40 requests of 80 rows (7680-byte slices, just "
                "under the budget) in a row are answered right: the refused and the "
                "served slices gave their bytes back (%d/40)" % ok)
        healthy = worker_addresses(env, cl.target)
        c.check(len(healthy) == 2, "budget: both workers still healthy (not marked suspect)",
                "    %s" % healthy)
        c.check(cl.workers[0].poll() is None and cl.workers[1].poll() is None,
                "budget: both workers still run")
        client.close()
    finally:
        cl.stop()


def coordinator_restart(env):
    c = env.c
    model_dir = os.path.join(env.root, "models-restart")
    kernel = mslib.write_lin_model(model_dir)
    cl = mslib.ProcessCluster(env.bin_dir, 2, model_dir, os.path.join(env.root, "logs-restart"),
                              heartbeat_ms=250)
    try:
        c.check(cl.wait_ready(), "restart: cluster ready", cl.logs_tail())
        client = mslib.LinClient(env.bin_dir, cl.target, kernel)
        traffic = mslib.Traffic(client, clients=4, timeout=10)
        time.sleep(1.5)
        before = traffic.counts().get("ok", 0)
        os.kill(cl.coordinator.pid, signal.SIGKILL)
        cl.coordinator.wait(timeout=10)
        time.sleep(1)
        cl.start_coordinator()
        ready = cl.wait_ready(timeout_s=60)
        ready_at = time.time()
        c.check(ready, "restart: the new coordinator is ready (workers re-registered)",
                cl.logs_tail())
        time.sleep(5)
        finished = traffic.stop()
        counts = traffic.counts()
        c.check(finished, "restart: every client returned (no hang)")
        c.check(counts.get("wrong", 0) == 0, "restart: no wrong answer (%s)" % counts,
                "    %s" % traffic.details("wrong"))
        bad = {k: v for k, v in counts.items() if k not in ("ok", "UNAVAILABLE")}
        c.check(not bad, "restart: every failure is UNAVAILABLE", "    %s %s" % (
            bad, [traffic.details(k) for k in bad]))
        c.check(counts.get("UNAVAILABLE", 0) > 0,
                "restart: clients saw UNAVAILABLE while it was gone (%d)" %
                counts.get("UNAVAILABLE", 0), "    %s" % counts)
        print("    e.g. %s" % traffic.details("UNAVAILABLE", 1), flush=True)
        # Every request sent from shortly after the new coordinator is ready (the
        # clients' channels reconnect within their backoff) is answered right; one
        # sent while it was away may fail later (CI saw a handshake cut 3 s after).
        after = [(code, d) for t, code, d in traffic.outcomes if t > ready_at + 3]
        c.check(before > 0 and after and {code for code, _ in after} == {"ok"},
                "restart: right answers before (%d) and after (%d) the restart" % (
                    before, len(after)), "    after: %s" % sorted(set(after))[:3])
        code, detail = client.wait_served()
        c.check(code == "ok", "restart: a new client request is served right", detail)
        client.close()
    finally:
        cl.stop()


def bad_checkpoints(env):
    c = env.c
    model_dir = os.path.join(env.root, "models-ckpt")
    kernel = mslib.write_lin_model(model_dir)
    mslib.write_lin_model(model_dir, name="lin_truncated", checkpoint="truncated.safetensors")
    mslib.write_lin_model(model_dir, name="lin_corrupt", checkpoint="corrupt.safetensors")
    path = os.path.join(model_dir, "truncated.safetensors")
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[:len(data) - 1000])  # the kernel's bytes end early
    path = os.path.join(model_dir, "corrupt.safetensors")
    with open(path, "rb") as f:
        data = bytearray(f.read())
    data[8:24] = b"\x00garbage\xff{[}]\x01\x02\x03\x04\x05"  # the JSON header's start
    with open(path, "wb") as f:
        f.write(bytes(data))
    cl = mslib.ProcessCluster(env.bin_dir, 2, model_dir, os.path.join(env.root, "logs-ckpt"))
    try:
        c.check(cl.wait_ready(), "checkpoints: the cluster gets ready despite them",
                cl.logs_tail())
        client = mslib.LinClient(env.bin_dir, cl.target, kernel)
        code, detail = client.wait_served()
        c.check(code == "ok", "checkpoints: the good model serves right", detail)
        for name, file in (("lin_truncated", "truncated.safetensors"),
                           ("lin_corrupt", "corrupt.safetensors")):
            bad = mslib.LinClient(env.bin_dir, cl.target, kernel, model=name)
            code, detail = bad.infer(np.ones((1, 64), np.float32), timeout=30)
            c.check(code in ("FAILED_PRECONDITION", "INVALID_ARGUMENT", "DATA_LOSS") and
                    file in detail, "checkpoints: %s answers an error naming %s (%s)" % (
                        name, file, code), "    %s: %s" % (code, detail))
            print("    %s: %s: %s" % (name, code, detail[:200]), flush=True)
            bad.close()
        rc, out, _ = env.cli.run("status", "--target", cl.target, timeout=30)
        c.check(rc == 0 and re.search(r"lin_truncated\s+error", out) and
                re.search(r"lin_corrupt\s+error", out) and re.search(r"\blin\s+ready", out),
                "checkpoints: status shows both as errors and lin ready", out)
        code, detail = client.infer(np.ones((2, 64), np.float32))
        c.check(code == "ok", "checkpoints: lin still serves after the bad requests", detail)
        client.close()
    finally:
        cl.stop()


def worker_addresses(env, target):
    rc, out, err = env.cli.run("status", "--target", target, timeout=30)
    return {int(m.group(1)): m.group(2)
            for m in re.finditer(r"worker (\d+)\s+(\S+:\d+)\s+healthy", out)}


def half_push(env):
    """Drives one worker directly as a hostile peer would: its own model and
    program (a receive of 16 floats from the other worker, then an output)."""
    c = env.c
    model_dir = os.path.join(env.root, "models-push")
    kernel = mslib.write_lin_model(model_dir)
    cl = mslib.ProcessCluster(env.bin_dir, 2, model_dir, os.path.join(env.root, "logs-push"))
    try:
        c.check(cl.wait_ready(), "half push: cluster ready", cl.logs_tail())
        (grpc, _, _, wpb2, wpb2_grpc, ppb2, tpb2) = mslib.grpc_stubs(env.bin_dir)
        addresses = worker_addresses(env, cl.target)
        c.check(len(addresses) == 2, "half push: both workers listed (%s)" % addresses)
        (me, addr), (peer, _) = sorted(addresses.items())
        channel = grpc.insecure_channel(addr)
        stub = wpb2_grpc.WorkerServiceStub(channel)
        box = tpb2.BoxProto(begin=[0], end=[16])
        probe_json = ('{"name": "probe", "mesh": {"data": 1}, "dtype": "float32", '
                      '"inputs": {"x": {"shape": [16], "sharding": [null]}}, "params": {}, '
                      '"layers": [{"name": "y", "op": "relu", "input": "x"}], '
                      '"outputs": ["y"]}')
        load = wpb2.LoadModelRequest(model="probe", generation=900, model_json=probe_json,
                                     devices=[0], device_workers=[me],
                                     mesh=tpb2.MeshProto(axes=[tpb2.MeshProto.Axis(
                                         name="data", size=1)]))
        load.worker_addresses[me] = addr
        load.worker_addresses[peer] = addresses[peer]
        stub.LoadModel(load, timeout=30)
        program = ppb2.Program(program_id="probe-recv", model="probe", generation=900, worker=me)
        program.steps.add().recv.CopyFrom(ppb2.RecvStep(
            buffer="in", box=box, tag="t", buffer_box=box, dtype=tpb2.FLOAT32,
            src_worker=peer, device=0))
        program.steps.add().output.CopyFrom(ppb2.OutputStep(buffer="in", box=box, output="y",
                                                            device=0))
        stub.InstallProgram(wpb2.InstallProgramRequest(program=program), timeout=30)
        values = np.arange(16, dtype=np.float32)

        def execute(rid, result):
            try:
                r = stub.Execute(wpb2.ExecuteRequest(program_id="probe-recv", request_id=rid,
                                                     deadline_ms=3000), timeout=30)
                result["y"] = np.frombuffer(r.outputs[0].data, np.float32)
            except grpc.RpcError as e:
                result["error"] = (e.code().name, e.details())

        def push(rid, upto):
            chunk = wpb2.DataChunk(request_id=rid, tag="t", dst_device=0, total_bytes=64,
                                   offset=0, data=values.tobytes()[:upto], src_worker=peer,
                                   dtype=tpb2.FLOAT32)
            try:
                stub.PushData(iter([chunk]), timeout=10)  # the stream closes after it
                return "OK"
            except grpc.RpcError as e:
                return e.code().name

        results = {}
        for rid, upto in (("hostile-half", 24), ("hostile-whole", 64)):
            results[rid] = {}
            t = threading.Thread(target=execute, args=(rid, results[rid]))
            t.start()
            time.sleep(0.3)
            results[rid]["push"] = push(rid, upto)
            t.join(timeout=40)
            results[rid]["hung"] = t.is_alive()
        half, whole = results["hostile-half"], results["hostile-whole"]
        print("    half: %s" % half, flush=True)
        c.check(not half["hung"] and half.get("error", ("",))[0] == "DEADLINE_EXCEEDED" and
                "24 of 64 bytes" in half["error"][1] and "hostile-half" in half["error"][1],
                "half push: the request waiting for the half-sent slice fails cleanly "
                "(DEADLINE_EXCEEDED naming the request and the bytes received)", "    %s" % half)
        c.check(not whole["hung"] and "y" in whole and np.array_equal(whole["y"], values),
                "half push: a whole push to the same program is answered right "
                "(the harness can tell)", "    %s" % whole)
        stub.UnloadModel(wpb2.UnloadModelRequest(model="probe", generation=900), timeout=30)
        channel.close()
        client = mslib.LinClient(env.bin_dir, cl.target, kernel)
        code, detail = client.infer(np.ones((3, 64), np.float32))
        c.check(code == "ok", "half push: the worker serves the next request right", detail)
        client.close()
        c.check(cl.workers[0].poll() is None and cl.workers[1].poll() is None,
                "half push: both workers still run")
    finally:
        cl.stop()


def stages(env):
    return [("coordinator restart under load", lambda: coordinator_restart(env)),
            ("truncated and corrupted checkpoints", lambda: bad_checkpoints(env)),
            ("a peer closes PushData half-way", lambda: half_push(env)),
            ("a worker's in-flight slice budget", lambda: slice_budget(env))]


if __name__ == "__main__":
    sys.exit(e2e.main("faults_inputs", stages, doc=__doc__))
