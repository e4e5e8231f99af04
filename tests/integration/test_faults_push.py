#!/usr/bin/python3
"""e2e_faults_push: faults during a parameter push (ClusterService.PushParams,
docs/PARAMETERS.md) over real processes (mslib.ProcessCluster: a coordinator
and 3 workers, --replicas 1), every answer checked against NumPy references
of the old and the new weights of a 2-layer MLP (mslib.mlp_model, w1
[2048, 4800] P(None,'model'): ~40 MB pushed per version).

  kill_mid_push   a worker SIGKILLed while a push runs, at seven points: after
                  10 %, 50 %, 90 % of the stream, at its end before it closes
                  (the push's generator waits until the kill is done, so the
                  kill lands mid-push however fast the push is), as the stream
                  closes, and 95 % and 100 % into the time a push takes after
                  its stream closed (staging the last box, then the commit;
                  measured on a push without faults; the last one lands
                  around the commit, before or after it). Each outcome must be a
                  committed new version (status version + 1, answers = NumPy of
                  the new weights) or a clear error with the old version still
                  answering (NumPy of the old weights); never a hang, never an
                  answer of neither (a mix), never a new answer after a failed
                  push. Then a re-push on the 2 survivors succeeds and answers
                  the new reference; a new worker joins (3 again) and the
                  answers stay right. Outcomes are counted and printed.
  kill_mid_direct a worker SIGKILLed during a direct push (PushDirect: the
                  client stages the pieces on the workers itself, here in
                  Python), at three points: right after the plan, with half
                  the pieces staged, and with all staged before the commit.
                  The same outcomes and checks as kill_mid_push.
  cut_push        the pushing client's stream cut half-way: (a) the call
                  cancelled by the client, (b) the client process SIGKILLed
                  with half the stream sent. No new version, the old answers
                  continue, and the next push works.

Usage: test_faults_push.py --bin_dir build/bin [--keep]
"""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np

import e2e_common as e2e
import mslib

MODEL = "big"
D_IN, HIDDEN, D_OUT = 2048, 4800, 16  # hidden divides over 2 and 3 workers


class HeldPush:
    """A push run by _run() on a thread that holds at a point: `reached` is set
    there and, when `wait`, it waits for `release`; `result` is (code name,
    version or details), `ended_at` when the data was all sent, `done_at` when
    the call returned."""

    def __init__(self, wait):
        self.wait = wait
        self.reached = threading.Event()
        self.release = threading.Event()
        self.result = None
        self.ended_at = None
        self.done_at = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _hold(self):
        self.reached.set()
        if self.wait:
            self.release.wait(timeout=60)

    def start(self):
        self._thread.start()
        return self

    def join(self, timeout=150):
        self._thread.join(timeout=timeout)
        return not self._thread.is_alive()


class Push(HeldPush):
    """PushParams of `params` from a thread; the stream's generator stops at
    message `at` (a fraction of the stream; 1.0 = after the last message),
    sets `reached` and, when `wait`, holds the stream until `release`."""

    def __init__(self, st, params, at=None, wait=True):
        super().__init__(wait)
        self.messages = list(mslib.push_chunks(
            MODEL, [(n, [0] * a.ndim, a, None) for n, a in sorted(params.items())],
            1 << 20, st.pb))
        self.index = None if at is None else int(round(at * len(self.messages)))
        self._stub = st.pb_grpc.ClusterServiceStub(st.channel)

    def _gen(self):
        for i, m in enumerate(self.messages):
            if i == self.index:
                self._hold()
            yield m
        self.ended_at = time.time()
        if self.index is not None and self.index >= len(self.messages):
            self._hold()

    def _run(self):
        import grpc
        try:
            r = self._stub.PushParams(self._gen(), timeout=120)
            self.result = ("OK", r.version)
        except grpc.RpcError as e:
            self.result = (e.code().name, e.details() or "")
        self.done_at = time.time()


class DirectPush(HeldPush):
    """PushDirect of `params` from a thread, the client's side in Python:
    the plan, each route's piece staged on its worker (1 MiB chunks), the
    commit. It stops before staging route `at` x routes (0: right after the
    plan; 1.0: all staged, before the commit), sets `reached` and, when
    `wait`, holds until `release`."""

    def __init__(self, st, params, at=None, wait=True):
        super().__init__(wait)
        self.st, self.params, self.at = st, params, at
        self._stub = st.pb_grpc.ClusterServiceStub(st.channel)
        self._channels = {}

    def _stage(self, plan, names, route):
        import grpc
        wpb = self.st.wpb
        name = names[route.box]
        sl = tuple(slice(o, o + n) for o, n in zip(route.offset, route.shape))
        data = np.ascontiguousarray(self.params[name][sl]).tobytes()
        if route.address not in self._channels:
            self._channels[route.address] = grpc.insecure_channel(route.address)
        method = self._channels[route.address].stream_unary(
            "/meshserve.WorkerService/StageParams",
            request_serializer=wpb.StageParamChunk.SerializeToString,
            response_deserializer=wpb.StageParamsResponse.FromString)
        box = self.st.tpb.BoxProto(begin=list(route.offset),
                                   end=[o + n for o, n in zip(route.offset, route.shape)])
        step = 1 << 20
        method(iter([wpb.StageParamChunk(model=MODEL, generation=plan.generation,
                                         version=plan.version, param=name, box=box,
                                         total_bytes=len(data), offset=at,
                                         data=data[at:at + step])
                     for at in range(0, len(data), step)]), timeout=60)

    def _run(self):
        import grpc
        names = sorted(self.params)
        q = mslib.RequestQueue(self.st.pb.PushDirectRequest(model=MODEL, boxes=[
            self.st.pb.PushParamsChunk(param=n, offset=[0] * self.params[n].ndim,
                                       shape=list(self.params[n].shape), dtype=1)
            for n in names]))
        call = self._stub.PushDirect(iter(q), timeout=120)
        try:
            plan = next(call)
            stop = int(round(self.at * len(plan.routes)))
            for i, route in enumerate(plan.routes):
                if i == stop:
                    self._hold()
                self._stage(plan, names, route)
            self.ended_at = time.time()
            if stop >= len(plan.routes):
                self._hold()
            q.put(self.st.pb.PushDirectRequest(commit=True))
            self.result = ("OK", next(call).result.version)
        except grpc.RpcError as e:
            self.result = (e.code().name, e.details() or "")
            call.cancel()
        finally:
            q.close()
            for ch in self._channels.values():
                ch.close()
        self.done_at = time.time()


class State:
    def __init__(self, env):
        import grpc
        self.env = env
        self.c = env.c
        self.rng = np.random.default_rng(11)
        self.model = mslib.mlp_model(MODEL, d_in=D_IN, hidden=HIDDEN, d_out=D_OUT,
                                     checkpoint=MODEL + ".safetensors")
        self.model_dir = os.path.join(env.root, "models")
        os.makedirs(self.model_dir)
        self.current = self.new_params()
        mslib.write_safetensors(os.path.join(self.model_dir, MODEL + ".safetensors"),
                                self.current)
        with open(os.path.join(self.model_dir, MODEL + ".json"), "w") as f:
            json.dump(self.model, f)
        self.x = self.rng.standard_normal((2, D_IN)).astype(np.float32)
        self.cl = mslib.ProcessCluster(env.bin_dir, 3, self.model_dir,
                                       os.path.join(env.root, "logs"), heartbeat_ms=250)
        self.live = list(self.cl.workers)
        mc = mslib.client_package(env.bin_dir)
        self.pb = mc.proto.cluster_service_pb2
        self.pb_grpc = mc.proto.cluster_service_pb2_grpc
        self.wpb = __import__(mc.proto.__name__ + ".worker_service_pb2", fromlist=["x"])
        self.tpb = __import__(mc.proto.__name__ + ".tensor_pb2", fromlist=["x"])
        self.client = mc.MeshserveClient(self.cl.target, timeout_s=60)
        self.grpc = grpc
        self.channel = grpc.insecure_channel(self.cl.target, options=[
            ("grpc.max_send_message_length", 64 << 20)])
        (_, self.ipb, ipb_grpc) = mslib.grpc_stubs(env.bin_dir)[:3]
        self.infer_stub = ipb_grpc.GRPCInferenceServiceStub(self.channel)
        self.version = 1
        self.outcomes = {}  # kill point -> outcome text
        self.traffic_counts = {}

    def new_params(self):
        return mslib.mlp_random_params(self.model, self.rng)

    def ref(self, params):
        return mslib.mlp_ref(params, self.x)

    def classify(self, y, old, new):
        """"old", "new" or "wrong" for an answer y."""
        for name, ref in (("old", old), ("new", new)):
            atol = 1e-4 * float(np.max(np.abs(ref)))
            if y.shape == ref.shape and np.allclose(y, ref, rtol=1e-4, atol=atol):
                return name
        return "wrong"

    def infer(self, timeout=30):
        """(code, y or details)."""
        try:
            r = self.infer_stub.ModelInfer(mslib.grpc_infer_request(self.ipb, MODEL, self.x),
                                           timeout=timeout)
        except self.grpc.RpcError as e:
            return e.code().name, e.details() or ""
        return "OK", mslib.grpc_output(r, (self.x.shape[0], D_OUT)).astype(np.float64)

    def model_status(self):
        try:
            s = self.client.status(timeout_s=10)
        except Exception as e:  # noqa: BLE001 (a status during a re-placement may fail)
            return None, str(e)
        for m in s.models:
            if m.name == MODEL:
                holders = {w.worker_id for w in s.workers if w.healthy
                           for p in w.placements
                           if p.model == MODEL and p.generation == m.generation}
                return m, holders
        return None, "no model %s" % MODEL

    def wait_placed(self, workers, after_generation=0, timeout_s=90):
        """Until the model is ready on `workers` healthy workers in a generation
        newer than after_generation; returns the ModelStatus or None."""
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            m, holders = self.model_status()
            if (m is not None and m.state == "ready" and m.generation > after_generation and
                    len(holders) == workers):
                return m
            time.sleep(0.2)
        return None

    def check_current(self, what, timeout_s=30):
        """An answer (after any UNAVAILABLE while a placement settles) equals
        NumPy of self.current."""
        ans, y = self.wait_answer(timeout_s)
        ref = self.ref(self.current)
        return self.c.check(ans == "OK" and self.classify(y, ref, ref) == "old",
                            what + ": answers equal NumPy of the weights served",
                            "    %s %s" % (ans, y if ans != "OK" else ""))

    def wait_answer(self, timeout_s=30):
        """The first OK answer (UNAVAILABLE while a placement settles is retried)."""
        deadline = time.time() + timeout_s
        last = ("none", "")
        while time.time() < deadline:
            last = self.infer(timeout=20)
            if last[0] == "OK":
                return last
            time.sleep(0.2)
        return last


class Traffic:
    """One client asking in a loop; (start, end, kind) per request, kind
    "old", "new", "wrong" or a gRPC code."""

    def __init__(self, st, old, new):
        self.st, self.old, self.new = st, old, new
        self.outcomes = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self):
        while not self._stop.is_set():
            t0 = time.time()
            code, y = self.st.infer(timeout=30)
            kind = self.st.classify(y, self.old, self.new) if code == "OK" else code
            self.outcomes.append((t0, time.time(), kind))
            if code != "OK":
                time.sleep(0.05)

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=60)
        return not self._thread.is_alive()

    def counts(self):
        out = {}
        for _, _, k in self.outcomes:
            out[k] = out.get(k, 0) + 1
        return out


def push_whole(st, params, what):
    """A push without faults; retried while the coordinator still reports the
    previous push in progress or a placement change (ABORTED). Returns the
    committed Push or None."""
    c = st.c
    deadline = time.time() + 30
    while True:
        p = Push(st, params).start()
        finished = p.join()
        if not c.check(finished, what + ": the push returned (no hang)"):
            return None
        if p.result[0] == "ABORTED" and time.time() < deadline:
            time.sleep(0.5)
            continue
        break
    if not c.check(p.result[0] == "OK" and p.result[1] == st.version + 1,
                   what + ": push committed version %d" % (st.version + 1), "    %s" % (
                       p.result,)):
        return None
    st.version += 1
    st.current = params
    st.check_current(what)
    m, _ = st.model_status()
    c.check(m is not None and m.version == st.version,
            what + ": status shows version %d" % st.version, "    %s" % m)
    return p


def kill_round(st, n, label, at, wait, delay=0.0, pusher=Push):
    c = st.c
    what = "kill %s" % label
    m0 = st.wait_placed(3)
    if not c.check(m0 is not None, what + ": model placed on 3 workers"):
        return
    old, new = st.current, st.new_params()
    old_ref, new_ref = st.ref(old), st.ref(new)
    traffic = Traffic(st, old_ref, new_ref)
    time.sleep(0.3)
    victim = st.live[n % len(st.live)]
    push = pusher(st, new, at=at, wait=wait).start()
    reached = push.reached.wait(timeout=60)
    time.sleep(delay)
    os.kill(victim.pid, signal.SIGKILL)
    killed_at = time.time()
    push.release.set()
    victim.wait(timeout=10)
    st.live.remove(victim)
    c.check(reached, what + ": the push reached its kill point")
    finished = push.join()
    c.check(finished, what + ": the push returned (no hang)")
    if not finished:
        traffic.stop()
        return
    code, detail = push.result
    committed = code == "OK"
    outcome = "committed v%d" % detail if committed else "%s" % code
    if push.done_at < killed_at:
        outcome += " (answered before the kill)"
    st.outcomes[label] = outcome
    print("    %s: %s%s" % (label, outcome, "" if committed else ": " + detail[:220]),
          flush=True)
    c.check(committed and detail == st.version + 1 or
            code in ("UNAVAILABLE", "ABORTED", "FAILED_PRECONDITION", "CANCELLED",
                     "INTERNAL") and detail,
            what + ": a committed version or a clear error (%s)" % outcome)
    m = st.wait_placed(2, after_generation=m0.generation)
    c.check(m is not None, what + ": re-placed on the 2 survivors", st.cl.logs_tail(8))
    expect, expect_ref = (new, new_ref) if committed else (old, old_ref)
    if committed:
        st.version += 1
        st.current = new
    c.check(m is not None and m.version == st.version,
            what + ": status version %d" % st.version, "    %s" % m)
    ans, y = st.wait_answer()
    kind = st.classify(y, old_ref, new_ref) if ans == "OK" else ans
    c.check(kind == ("new" if committed else "old"),
            what + ": answers equal NumPy of the %s weights" % (
                "new" if committed else "old"), "    got %s" % kind)
    time.sleep(0.5)
    c.check(traffic.stop(), what + ": traffic returned (no hang)")
    counts = traffic.counts()
    for k, v in counts.items():
        st.traffic_counts[k] = st.traffic_counts.get(k, 0) + v
    print("    %s: traffic %s" % (label, counts), flush=True)
    c.check(counts.get("wrong", 0) == 0, what + ": no answer of neither version (no mix)")
    if committed:
        stale = [o for o in traffic.outcomes if o[0] > push.done_at and o[2] == "old"]
        c.check(not stale, what + ": no old answer to a request sent after the commit",
                "    %s" % stale[:3])
    else:
        c.check(counts.get("new", 0) == 0, what + ": no answer of the refused weights")
    # A push on the survivors works, then a new worker joins.
    push_whole(st, st.new_params(), what + ": re-push on 2 workers")
    st.live.append(st.cl.add_worker())
    placed = st.wait_placed(3, after_generation=m.generation if m else 0)
    c.check(placed is not None, what + ": a new worker joins: placed on 3 again",
            st.cl.logs_tail(8))
    st.check_current(what + ": on 3 workers")


def kill_mid_push(st):
    c = st.c
    c.check(st.cl.wait_ready(), "kill: cluster ready", st.cl.logs_tail())
    st.check_current("kill: version 1 (the checkpoint)", timeout_s=60)
    t0 = time.time()
    p = push_whole(st, st.new_params(), "kill: a push without faults")
    # After the stream closes the coordinator still stages the last box, then
    # commits on every worker: `tail` seconds.
    tail = p.done_at - p.ended_at if p else 0.0
    print("    a whole push (%d MiB) took %.2f s, %.2f s of it after the stream closed" % (
        sum(a.nbytes for a in st.current.values()) >> 20, time.time() - t0, tail), flush=True)
    points = [("after 10% of the stream", 0.1, True, 0), ("after 50%", 0.5, True, 0),
              ("after 90%", 0.9, True, 0), ("at the stream's end", 1.0, True, 0),
              ("as the stream closes", 1.0, False, 0),
              ("stream closed + 95% of the tail", 1.0, False, 0.95 * tail),
              ("stream closed + 100% of the tail", 1.0, False, tail)]
    for n, (label, at, wait, delay) in enumerate(points):
        kill_round(st, n, label, at, wait, delay)
    committed = sum(1 for o in st.outcomes.values() if o.startswith("committed"))
    print("    outcomes: %d committed, %d clean errors: %s" % (
        committed, len(st.outcomes) - committed, st.outcomes), flush=True)
    print("    traffic during the kills: %s" % st.traffic_counts, flush=True)


def kill_mid_direct(st):
    c = st.c
    c.check(st.wait_placed(3) is not None, "kill (direct): model placed on 3 workers")
    before = dict(st.outcomes)
    st.outcomes = {}
    points = [("direct, after the plan", 0.0), ("direct, half the pieces staged", 0.5),
              ("direct, all staged before the commit", 1.0)]
    for n, (label, at) in enumerate(points):
        kill_round(st, n, label, at, True, pusher=DirectPush)
    committed = sum(1 for o in st.outcomes.values() if o.startswith("committed"))
    print("    direct outcomes: %d committed, %d clean errors: %s" % (
        committed, len(st.outcomes) - committed, st.outcomes), flush=True)
    st.outcomes = dict(before, **st.outcomes)


def child_push(bin_dir, target, npz):
    """The client process of cut_push (b): sends half the stream, says HALF on
    stdout, then waits to be killed."""
    mc = mslib.client_package(bin_dir)
    import grpc
    params = dict(np.load(npz))
    messages = list(mslib.push_chunks(
        MODEL, [(n, [0] * a.ndim, a, None) for n, a in sorted(params.items())], 1 << 20,
        mc.proto.cluster_service_pb2))

    def gen():
        for i, m in enumerate(messages):
            if i == len(messages) // 2:
                print("HALF", flush=True)
                time.sleep(120)
            yield m
    channel = grpc.insecure_channel(target)
    stub = mc.proto.cluster_service_pb2_grpc.ClusterServiceStub(channel)
    stub.PushParams(gen(), timeout=300)
    print("FINISHED", flush=True)


def check_unchanged(st, what):
    c = st.c
    m, _ = st.model_status()
    c.check(m is not None and m.version == st.version,
            what + ": no new version (status version %d)" % st.version, "    %s" % m)
    st.check_current(what + ": the old version continues")


def cut_push(st):
    c = st.c
    if not c.check(st.wait_placed(3) is not None, "cut: model placed on 3 workers"):
        return
    # (a) the client cancels its call with half the stream sent.
    p = Push(st, st.new_params(), at=0.5, wait=True)
    call = p._stub.PushParams.future(p._gen(), timeout=120)
    c.check(p.reached.wait(timeout=60), "cut (cancel): half the stream sent")
    call.cancel()
    p.release.set()
    try:
        call.result(timeout=30)
        code = "OK"
    except st.grpc.FutureCancelledError:
        code = "CANCELLED"
    except st.grpc.RpcError as e:
        code = e.code().name
    c.check(code == "CANCELLED", "cut (cancel): the call ends cancelled (%s)" % code)
    check_unchanged(st, "cut (cancel)")
    push_whole(st, st.new_params(), "cut (cancel): the next push")
    # (b) the client process is killed with half the stream sent.
    npz = os.path.join(st.env.root, "cut.npz")
    np.savez(npz, **st.new_params())
    child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child_push",
                              st.env.bin_dir, st.cl.target, npz],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
    line = child.stdout.readline().strip()
    c.check(line == "HALF", "cut (kill): the client process sent half the stream",
            "    said %r" % line)
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=10)
    c.check(child.returncode == -signal.SIGKILL, "cut (kill): the client was SIGKILLed")
    check_unchanged(st, "cut (kill)")
    push_whole(st, st.new_params(), "cut (kill): the next push")


def stages(env):
    holder = {}

    def start():
        holder["st"] = State(env)

    def run(fn):
        if "st" in holder:
            fn(holder["st"])

    def stop():
        if "st" in holder:
            holder["st"].channel.close()
            holder["st"].cl.stop()

    return [("start the cluster", start),
            ("kill -9 a worker mid-push", lambda: run(kill_mid_push)),
            ("kill -9 a worker mid direct push", lambda: run(kill_mid_direct)),
            ("the pushing client cut half-way", lambda: run(cut_push)),
            ("stop", stop)]


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--child_push":
        child_push(*sys.argv[2:])
        sys.exit(0)
    sys.exit(e2e.main("faults_push", stages, doc=__doc__))
