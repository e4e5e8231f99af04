#!/usr/bin/python3
"""e2e_fault_schedule: a seeded fault schedule under continuous inference
(issue 34, item 5). Bounded (--seconds, 36 by default: about 45-60 s in all
with the start and the checks at the end); the same script with --seconds 90
is the benchmark whose figures are in docs/RELIABILITY.md.

The cluster: a coordinator and 4 workers started one by one
(mslib.ProcessCluster, the coordinator's port from the OS), `--replicas 1`,
a 2-layer MLP (mslib.mlp_model) with a checkpoint. 4 clients send ModelInfer
back to back (1-3 rows; after a failure a client waits 0.1 s); every answer
reports the param version it was computed with (response parameter
"param_version").

The schedule, from --seed: after a 2 s warm-up, every 4-8 s one of
  push         `meshserve push` of new random weights (retried with the same
               weights while refused, up to 3 tries)
  kill         kill -9 of a worker, a fresh worker started in its place
  stop         SIGSTOP of a worker for 4 s, then SIGCONT
  coordinator  kill -9 of the coordinator, restarted on the same port
The kinds come in rounds of all four, each round in a seeded order; the
schedule runs past --seconds if needed to finish the first round, so every
kind runs at least once.

Checked (after the run, from the recorded answers):
  - every answer equals NumPy (relu(x @ w1) @ w2 + b2, float64) of the
    weights of the version it reports: 0 wrong;
  - the version a client sees never goes back;
  - no request failed outside the coordinator's own restarts (from its kill
    to the client's first answer from the restarted one): a worker's kill or
    stall and a push are invisible to clients;
  - every push was accepted (on its first try or a retry);
  - at the end the last accepted version answers, right.
Printed (figures, not asserted): requests, failures by code and where,
longest stretch without any answer, pushes accepted on the first try.

Usage: test_fault_schedule.py --bin_dir build/bin [--seconds 36] [--seed 1]
       [--json FILE] [--keep]
"""
import json
import os
import re
import signal
import sys
import threading
import time

import numpy as np

import e2e_common as e2e
import mslib

MODEL = "mlp"
D_IN, HIDDEN, D_OUT = 16, 48, 16
WORKERS = 4
CLIENTS = 4
KINDS = ("push", "kill", "stop", "coordinator")
STOP_S = 4.0
BACKOFF_S = 0.1  # a client waits this long after a failed request, as real clients back off


class Clients:
    """CLIENTS threads sending ModelInfer back to back. Each outcome is
    (client, sent, done, code, version, x, y or error detail)."""

    def __init__(self, bin_dir, target):
        (self.grpc, self.pb2, pb2_grpc) = mslib.grpc_stubs(bin_dir)[:3]
        # Reconnect soon after a coordinator restart, but give each connection
        # attempt 2 s (min_reconnect_backoff_ms is also gRPC's connect timeout:
        # at 100 ms a loaded machine's restarted coordinator had its handshakes
        # cut, "tcp handshaker shutdown", for seconds after it was ready).
        self.channels = [self.grpc.insecure_channel(target, options=[
            ("grpc.initial_reconnect_backoff_ms", 100), ("grpc.min_reconnect_backoff_ms", 2000),
            ("grpc.max_reconnect_backoff_ms", 300)]) for _ in range(CLIENTS)]
        self.stubs = [pb2_grpc.GRPCInferenceServiceStub(ch) for ch in self.channels]
        self.outcomes = [[] for _ in range(CLIENTS)]
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._loop, args=(i,), daemon=True)
                         for i in range(CLIENTS)]
        for t in self._threads:
            t.start()

    def infer(self, i, x, timeout=30, rid=""):
        """(code, version, y or detail)."""
        request = mslib.grpc_infer_request(self.pb2, MODEL, x, rid)
        try:
            r = self.stubs[i].ModelInfer(request, timeout=timeout)
        except self.grpc.RpcError as e:
            return e.code().name, 0, e.details() or ""
        version = r.parameters["param_version"].int64_param
        return "OK", version, mslib.grpc_output(r, (x.shape[0], D_OUT)).copy()

    def _loop(self, i):
        rng = np.random.default_rng(1000 + i)
        out = self.outcomes[i]
        while not self._stop.is_set():
            x = rng.standard_normal((1 + int(rng.integers(0, 3)), D_IN)).astype(np.float32)
            sent = time.time()
            code, version, y = self.infer(i, x, rid="c%d-%d" % (i, len(out)))
            out.append((i, sent, time.time(), code, version, x, y))
            if code != "OK":
                time.sleep(BACKOFF_S)

    def stop(self, join_s=60):
        self._stop.set()
        for t in self._threads:
            t.join(timeout=join_s)
        return not any(t.is_alive() for t in self._threads)

    def close(self):
        for ch in self.channels:
            ch.close()

    def all(self):
        return sorted((o for out in self.outcomes for o in list(out)), key=lambda o: o[2])


class Schedule:
    def __init__(self, env, seconds, seed):
        self.env, self.c = env, env.c
        self.seconds, self.seed = seconds, seed
        self.rng = np.random.default_rng(seed)
        self.model = mslib.mlp_model(MODEL, d_in=D_IN, hidden=HIDDEN, d_out=D_OUT,
                                     checkpoint=MODEL + ".safetensors")
        self.model_dir = os.path.join(env.root, "models")
        os.makedirs(self.model_dir)
        self.params = {1: mslib.mlp_random_params(self.model, self.rng)}
        mslib.write_safetensors(os.path.join(self.model_dir, MODEL + ".safetensors"),
                                self.params[1])
        with open(os.path.join(self.model_dir, MODEL + ".json"), "w") as f:
            json.dump(self.model, f)
        self.cl = mslib.ProcessCluster(env.bin_dir, WORKERS, self.model_dir,
                                       os.path.join(env.root, "logs"),
                                       coordinator_args=["--replicas", "1"])
        self.last_version = 1
        self.events = []     # (kind, start, end, detail)
        self.restarts = []   # [kill time, ready time]
        self.pushes = []     # (tries, accepted version or None, last refusal)

    # ---- the faults ----

    def live_workers(self):
        return [p for p in self.cl.workers if p.poll() is None]

    def push(self):
        params = mslib.mlp_random_params(self.model, self.rng)
        path = os.path.join(self.env.root, "push%d.safetensors" % (len(self.pushes) + 1))
        mslib.write_safetensors(path, params)
        refusal = ""
        for tries in range(1, 4):
            rc, out, err = self.env.cli.run(
                "push", "--target", self.cl.target, "--model", MODEL, "--checkpoint", path,
                "--timeout_s", "30", timeout=60)
            m = re.search(r"pushed model %s: version (\d+)" % MODEL, out)
            if rc == 0 and m:
                version = int(m.group(1))
                self.params[version] = params
                self.last_version = version
                self.pushes.append((tries, version, refusal))
                return "version %d (try %d)" % (version, tries)
            refusal = (out + err).strip().splitlines()[-1:] or ["rc %d" % rc]
            refusal = refusal[0]
            time.sleep(0.5)
        self.pushes.append((3, None, refusal))
        return "refused 3 times: %s" % refusal

    def kill(self):
        live = self.live_workers()
        victim = live[int(self.rng.integers(0, len(live)))]
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait(timeout=10)
        self.cl.add_worker()
        return "worker pid %d killed, a fresh one started" % victim.pid

    def stop(self):
        live = self.live_workers()
        victim = live[int(self.rng.integers(0, len(live)))]
        os.kill(victim.pid, signal.SIGSTOP)
        try:
            time.sleep(STOP_S)
        finally:
            os.kill(victim.pid, signal.SIGCONT)
        return "worker pid %d stopped %.0f s" % (victim.pid, STOP_S)

    def coordinator(self):
        killed = time.time()
        os.kill(self.cl.coordinator.pid, signal.SIGKILL)
        self.cl.coordinator.wait(timeout=10)
        self.cl.start_coordinator()
        ready = self.cl.wait_ready(timeout_s=60)
        self.restarts.append([killed, None])
        return "restarted (%s in %.1f s)" % ("ready" if ready else "NOT ready",
                                              time.time() - killed)

    def kinds(self):
        while True:
            order = list(KINDS)
            self.rng.shuffle(order)
            yield from order

    def run(self, clients):
        start = time.time()
        next_at = start + 2.0
        kinds = self.kinds()
        while True:
            next_at += float(self.rng.uniform(4.0, 8.0))
            ran = {e[0] for e in self.events}
            # Past --seconds only to finish the first round (every kind once).
            if next_at > start + self.seconds and len(ran) == len(KINDS):
                break
            time.sleep(max(0.0, next_at - time.time()))
            kind = next(kinds)
            t0 = time.time()
            detail = getattr(self, kind)()
            self.events.append((kind, t0, time.time(), detail))
            print("    %6.1fs %-11s %s (%.1f s)" % (t0 - start, kind, detail, time.time() - t0),
                  flush=True)
            next_at = max(next_at, time.time())
        time.sleep(max(0.0, start + self.seconds - time.time()))


def restart_windows(restarts, outcomes, client=None):
    """[kill, first answer after it] per coordinator restart: the first
    answer to `client` (each client's channel reconnects on its own), or to
    any client when None."""
    windows = []
    for killed, _ in restarts:
        after = [o[2] for o in outcomes if o[3] == "OK" and o[1] >= killed and
                 (client is None or o[0] == client)]
        windows.append((killed, min(after) if after else float("inf")))
    return windows


def in_windows(o, windows):
    """Whether outcome `o` ran during one of its client's restart windows."""
    return any(o[2] >= a and o[1] <= b for a, b in windows[o[0]])


def analyse(st, outcomes, start, end):
    """Figures and the list of wrong / back answers."""
    refs_wrong, back, unknown = [], [], []
    last_seen = {}
    for o in sorted(outcomes, key=lambda o: (o[0], o[1])):
        client, _, _, code, version, x, y = o
        if code != "OK":
            continue
        if version < last_seen.get(client, 0):
            back.append((client, last_seen[client], version))
        last_seen[client] = max(version, last_seen.get(client, 0))
        if version not in st.params:
            unknown.append(version)
            continue
        ref = mslib.mlp_ref(st.params[version], x)
        atol = 1e-4 * float(np.max(np.abs(ref)))
        if not np.allclose(y.astype(np.float64), ref, rtol=1e-4, atol=atol):
            refs_wrong.append((version, float(np.max(np.abs(y - ref)))))
    windows = {i: restart_windows(st.restarts, outcomes, i) for i in range(CLIENTS)}
    failed = [o for o in outcomes if o[3] != "OK"]
    outside = [o for o in failed if not in_windows(o, windows)]
    ok_times = [start] + sorted(o[2] for o in outcomes if o[3] == "OK") + [end]
    gaps = [(b - a, a - start) for a, b in zip(ok_times, ok_times[1:])]
    longest = max(gaps)
    in_gap = [o for o in outcomes if longest[1] + start <= o[2] <= longest[1] + start + longest[0]]
    gap_codes = {}
    for o in in_gap:
        gap_codes[o[3]] = gap_codes.get(o[3], 0) + 1
    by_code = {}
    for o in failed:
        by_code[o[3]] = by_code.get(o[3], 0) + 1
    return {
        "requests": len(outcomes), "ok": len(outcomes) - len(failed), "failed": len(failed),
        "failed_share": len(failed) / max(1, len(outcomes)), "failed_by_code": by_code,
        "failed_outside_restarts": len(outside),
        "outside_examples": ["%s at %.1fs: %s" % (o[3], o[1] - start, o[6][:300])
                             for o in outside[:6]],
        "inside_examples": ["%s at %.1fs: %s" % (o[3], o[1] - start, o[6][:200])
                            for o in failed if in_windows(o, windows)][:3],
        "wrong": len(refs_wrong), "wrong_examples": refs_wrong[:5],
        "unknown_versions": sorted(set(unknown)), "versions_back": len(back),
        "back_examples": back[:5],
        "longest_gap_s": round(longest[0], 3), "longest_gap_at_s": round(longest[1], 1),
        "longest_gap_outcomes": gap_codes,
        "longest_gap_examples": ["%s sent %.2fs done %.2fs: %s" % (
            o[3], o[1] - start, o[2] - start, str(o[6])[:160]) for o in in_gap[:: max(1, len(
                in_gap) // 6)][:6]],
        "restart_windows_s": [round(b - a, 2) for a, b in restart_windows(st.restarts,
                                                                           outcomes)],
    }


def retries_in_logs(cl):
    """The coordinator's retries ("retrying request ... after worker N failed:
    CODE: ..."), counted by the failure's code and what it says: each is a
    request the cluster answered that one attempt would have failed."""
    counts = {}
    per_request = {}  # the client's request id -> retries
    for name in sorted(os.listdir(cl.log_dir)):
        if not name.startswith("coordinator"):
            continue
        for line in cl.log(name[:-4]).splitlines():
            m = re.search(r"retrying request .*? \((.*?)\) after(?: worker -?\d+ failed)?: "
                          r"(\w+):(.*)", line)
            if not m:
                continue
            text = m.group(3)
            cause = ("call given up: worker declared dead/suspect" if "was declared" in text
                     else "peer cancelled" if "cancelled" in text
                     else "connection refused" if "Connection refused" in text
                     else "connection reset" if "reset by peer" in text
                     else "stream ended" if "stream to the worker ended" in text else "other")
            key = "%s %s (%s)" % (m.group(2), cause, m.group(1))
            counts[key] = counts.get(key, 0) + 1
            rid = re.search(r"request req\d+\.[0-9a-f]+-(c\d+-\d+)", text)
            if rid:
                per_request[rid.group(1)] = per_request.get(rid.group(1), 0) + 1
    counts["requests retried"] = len(per_request)
    counts["requests retried twice or more"] = sum(1 for n in per_request.values() if n >= 2)
    return counts


def scenario(env):
    c = env.c
    seconds, seed = env.args.seconds, env.args.seed
    st = Schedule(env, seconds, seed)
    clients = None
    try:
        if not c.check(st.cl.wait_ready(), "cluster of %d workers ready" % WORKERS,
                       st.cl.logs_tail()):
            return
        clients = Clients(env.bin_dir, st.cl.target)
        # The first answer before the schedule starts.
        deadline = time.time() + 60
        while time.time() < deadline and not any(
                o[3] == "OK" for out in clients.outcomes for o in list(out)):
            time.sleep(0.1)
        print("    schedule: %d s, seed %d, load average %s" % (
            seconds, seed, " ".join("%.1f" % v for v in os.getloadavg())), flush=True)
        start = time.time()
        st.run(clients)
        end = time.time()
        finished = clients.stop()
        c.check(finished, "every client returned (no hang)")
        outcomes = [o for o in clients.all() if o[1] >= start]
        figures = analyse(st, outcomes, start, end)
        kinds_run = sorted({e[0] for e in st.events})
        figures.update({
            "seconds": seconds, "seed": seed, "events": [(e[0], round(e[1] - start, 1), e[3])
                                                         for e in st.events],
            "pushes": len(st.pushes),
            "pushes_accepted": sum(1 for p in st.pushes if p[1] is not None),
            "pushes_first_try": sum(1 for p in st.pushes if p[1] is not None and p[0] == 1),
            "push_refusals": [p[2] for p in st.pushes if p[2]],
            "load_average": [round(v, 1) for v in os.getloadavg()],
        })
        figures["coordinator_retries"] = retries_in_logs(st.cl)
        for k, v in figures.items():
            if k != "events":
                print("    %s: %s" % (k, v), flush=True)
        c.check(kinds_run == sorted(KINDS), "every fault kind ran (%s)" % kinds_run)
        c.check(figures["wrong"] == 0 and not figures["unknown_versions"],
                "no wrong answer: each equals NumPy of the version it reports (%d answers)" %
                figures["ok"], "    %s %s" % (figures["wrong_examples"],
                                              figures["unknown_versions"]))
        c.check(figures["versions_back"] == 0, "no client saw its version go back",
                "    %s" % figures["back_examples"])
        c.check(figures["failed_outside_restarts"] == 0,
                "no request failed outside the coordinator's restarts (%d failed in all)" %
                figures["failed"], "    %s" % "\n    ".join(figures["outside_examples"]))
        c.check(figures["pushes_accepted"] == figures["pushes"],
                "every push accepted (%d of %d; %d on the first try)" % (
                    figures["pushes_accepted"], figures["pushes"], figures["pushes_first_try"]),
                "    %s" % figures["push_refusals"])
        # The last accepted version answers, right.
        deadline = time.time() + 30
        last = ("none", 0, "")
        x = np.random.default_rng(seed).standard_normal((2, D_IN)).astype(np.float32)
        while time.time() < deadline:
            last = clients.infer(0, x, timeout=20)
            if last[0] == "OK" and last[1] >= st.last_version:
                break
            time.sleep(0.2)
        right = (last[0] == "OK" and last[1] == st.last_version and np.allclose(
            last[2], mslib.mlp_ref(st.params[st.last_version], x), rtol=1e-4,
            atol=1e-4 * float(np.max(np.abs(mslib.mlp_ref(st.params[st.last_version], x))))))
        c.check(right, "at the end the last accepted version (%d) answers, right" %
                st.last_version, "    %s %s" % (last[0], last[1]))
        figures["last_version"] = st.last_version
        if env.args.json:
            with open(env.args.json, "w") as f:
                json.dump(figures, f, indent=1, default=str)
    finally:
        if clients is not None:
            clients.stop(join_s=5)
            clients.close()
        if c.failed:
            print(st.cl.logs_tail(15))
        st.cl.stop()


def add_args(ap):
    ap.add_argument("--seconds", type=int, default=36, help="length of the fault schedule")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", default="", help="write the figures to this file")


if __name__ == "__main__":
    sys.exit(e2e.main("fault_schedule", lambda env: [("schedule", lambda: scenario(env))],
                      add_args=add_args, doc=__doc__))
