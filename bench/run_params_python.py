#!/usr/bin/python3
"""The Python client's push and pull against the raw limit, in one run (issue
34 item 2; docs/PARAMETERS.md):

  - raw: loopback TCP `sendall` of the push's bytes (one NumPy buffer, as a
    memoryview) from this process to a sink thread of this process that
    `recv_into`s a 1 MiB buffer; best of --repeat;
  - push: `meshserve local --workers 4` (default replicas) serving a model of
    --mib MiB of float32 params (w1 [4096, H] P(None,'model'), w2 [H, 4096]
    P('model',None), b2 replicated); timed from begin_push to commit()'s
    return, put of every param from this process; the first push (fresh
    worker memory) apart from the best of the next ones;
  - pull: pull(..., out=) of every param into preallocated arrays, best of
    --repeat;
  - two ranks: two processes (started and ready beforehand) join the push
    and put their row halves of every param at once; from begin_push to
    commit()'s return, vs one process pushing the whole (best of each);
  - the C++ CLI on the same cluster: `meshserve push` of a safetensors file
    of the same bytes and `meshserve pull` of them to a file (process start
    included), so the client's share of the time shows;
  - python staging over PushDirect: the same raw StageParams streams
    (meshserve_client.params.start_stage) planned by the existing PushDirect,
    so the Python data path to the workers is measured even on a server
    without push sessions; and the same messages built but not sent (the
    client's own CPU cost of building them).

Prints each rate and the ratios against raw (target: push and pull >= 0.5x,
two ranks <= 1.1x one rank's time). Not part of the test suite; needs about
1.5 GiB of RAM. Shares 2 cores with the cluster it measures.

Usage: bench/run_params_python.py [--bin_dir build/bin] [--mib 256] [--repeat 3]
"""
import argparse
import json
import os
import queue
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import mslib  # noqa: E402

MODEL = "big"
D = 4096


def import_client(bin_dir):
    """The built package (BUILD/python, next to BUILD/bin)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(bin_dir)), "python"))
    import meshserve_client
    from meshserve_client import params  # noqa: F401
    return meshserve_client


def hidden_for(mib):
    return max(8, (mib << 20) // (2 * 4 * D) // 8 * 8)


def write_model(model_dir, hidden):
    model = mslib.mlp_model(MODEL, d_in=D, hidden=hidden, d_out=D)
    for spec in model["params"].values():
        spec["init"] = "zeros"
    os.makedirs(model_dir, exist_ok=True)
    with open(os.path.join(model_dir, MODEL + ".json"), "w") as f:
        json.dump(model, f)
    return model


def make_params(hidden, seed=0, rows=None):
    """{w1, w2, b2} float32 (rows: (rank, ranks) -> that rank's row halves)."""
    rng = np.random.default_rng(seed)
    shapes = {"w1": (D, hidden), "w2": (hidden, D), "b2": (D,)}
    out = {}
    for name, shape in shapes.items():
        if rows is not None and name != "b2":
            r, n = rows
            step = shape[0] // n
            shape = (step,) + shape[1:]
        out[name] = rng.standard_normal(shape, dtype=np.float32)
    return out


def gib_per_s(nbytes, seconds):
    return nbytes / seconds / 2 ** 30


# ---- raw loopback TCP ----

def raw_sendall(buf, repeat):
    """Best seconds of sendall(buf) to a recv_into sink thread (this process)."""
    view = memoryview(buf).cast("B")
    best = None
    for _ in range(repeat):
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        got = [0]

        def sink():
            conn, _ = srv.accept()
            chunk = memoryview(bytearray(1 << 20))
            while True:
                n = conn.recv_into(chunk)
                if n == 0:
                    break
                got[0] += n
            conn.close()
        t = threading.Thread(target=sink)
        t.start()
        cli = socket.create_connection(srv.getsockname())
        start = time.perf_counter()
        cli.sendall(view)
        cli.shutdown(socket.SHUT_WR)
        t.join()
        seconds = time.perf_counter() - start
        cli.close()
        srv.close()
        assert got[0] == len(view), (got[0], len(view))
        best = seconds if best is None else min(best, seconds)
    return best


# ---- pushes ----

def push_once(client, params):
    """(seconds begin_push..commit, seconds of the puts, version, push)."""
    start = time.perf_counter()
    push = client.begin_push(MODEL)
    for name, value in params.items():
        push.put(name, value)
    staged = time.perf_counter()
    version = push.commit()
    end = time.perf_counter()
    return end - start, staged - start, version, push


def cli_seconds(bin_dir, *args):
    """Wall seconds of `meshserve ARGS` (fails loudly)."""
    start = time.perf_counter()
    subprocess.run([os.path.join(bin_dir, "meshserve")] + list(args), check=True,
                   capture_output=True)
    return time.perf_counter() - start


class _Piece:
    """A PutPiece-like piece of a whole-param PushDirect route."""

    def __init__(self, param, dtype, route, box_proto):
        self.param, self.dtype = param, dtype
        self.src_offset = list(route.offset)
        self.box = box_proto
        self.worker_id, self.address = route.worker_id, route.address


def push_direct_python(mc, client, params):
    """PushDirect plan -> params.start_stage per worker (the Python data path
    of Push.put) -> commit. Returns (seconds, version)."""
    from meshserve_client import params as P
    pb = mc.proto.cluster_service_pb2
    names = list(params)
    requests = queue.Queue()
    requests.put(pb.PushDirectRequest(model=MODEL, boxes=[
        pb.PushParamsChunk(param=n, offset=[0] * params[n].ndim, shape=list(params[n].shape),
                           dtype=P.FLOAT32) for n in names]))

    def feed():
        while True:
            item = requests.get()
            if item is None:
                return
            yield item
    start = time.perf_counter()
    replies = client._cluster.PushDirect(feed(), timeout=300)
    plan = next(replies)
    groups = {}
    for r in plan.routes:
        box = mc.proto.tensor_pb2.BoxProto(begin=list(r.offset), end=[
            o + s for o, s in zip(r.offset, r.shape)])
        groups.setdefault(r.address, []).append((names[r.box], _Piece(names[r.box], P.FLOAT32,
                                                                      r, box)))
    calls = []
    for address, pieces in groups.items():
        for name in names:  # one stream per (worker, param): start_stage takes one src
            mine = [p for n, p in pieces if n == name]
            if mine:
                calls.append(P.start_stage(client._worker_channels().channel(address), MODEL,
                                           plan.generation, plan.version, mine, params[name],
                                           name, 300))
    for call in calls:
        call.result()
    staged = time.perf_counter()
    requests.put(pb.PushDirectRequest(commit=True))
    requests.put(None)
    result = next(replies)
    end = time.perf_counter()
    print("  PushDirect: plan+stage %.3f s, commit %.3f s" % (staged - start, end - staged),
          flush=True)
    return end - start, result.result.version, groups


def build_only(mc, params, groups, generation):
    """Seconds to build every StageParams message of the plan without sending."""
    from meshserve_client import params as P
    start = time.perf_counter()
    n = 0
    for pieces in groups.values():
        for name, piece in pieces:
            for m in P.stage_messages(MODEL, generation, 99, [piece], params[name], name):
                n += len(m)
    return time.perf_counter() - start, n


# ---- pulls ----

def pull_once(client, outs):
    start = time.perf_counter()
    for name, out in outs.items():
        client.pull(MODEL, name, out=out)
    return time.perf_counter() - start


# ---- two ranks ----

def rank_main(args):
    """A rank: its row halves ready, then per line on stdin (a push_id) join,
    put, print 'done SECONDS BYTES'."""
    mc = import_client(args.bin_dir)
    mine = make_params(hidden_for(args.mib), seed=10 + args.rank_child, rows=(args.rank_child, 2))
    step = {n: v.shape[0] for n, v in mine.items()}
    client = mc.MeshserveClient(args.target, timeout_s=300)
    print("ready", flush=True)
    for line in sys.stdin:
        push_id = line.strip()
        start = time.perf_counter()
        push = client.join_push(MODEL, push_id)
        for name, value in mine.items():
            if name == "b2":
                if args.rank_child == 0:
                    push.put(name, value)
                continue
            push.put(name, value, offset=[args.rank_child * step[name]] + [0] * (value.ndim - 1))
        print("done %.6f %d" % (time.perf_counter() - start, push.bytes_direct + push.bytes_through),
              flush=True)
    return 0


def two_ranks(args, client, target, repeat):
    ranks = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--rank_child", str(r),
                               "--target", target, "--bin_dir", args.bin_dir, "--mib",
                               str(args.mib)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True) for r in range(2)]
    try:
        for p in ranks:
            assert p.stdout.readline().strip() == "ready"
        best, sent = None, None
        for _ in range(repeat):
            start = time.perf_counter()
            push = client.begin_push(MODEL)
            for p in ranks:
                p.stdin.write(push.push_id + "\n")
                p.stdin.flush()
            done = [p.stdout.readline().split() for p in ranks]
            push.commit()
            seconds = time.perf_counter() - start
            if best is None or seconds < best:
                best, sent = seconds, [int(d[2]) for d in done]
        return best, sent
    finally:
        for p in ranks:
            p.stdin.close()
            p.wait(timeout=60)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin_dir", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--work_dir", default=None)
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (models, logs)")
    ap.add_argument("--chunk_kib", type=int, default=0, help="StageParams chunk size (default "
                    "the client's, 1 MiB)")
    ap.add_argument("--replicas", type=int, default=None, help="meshserve local --replicas")
    ap.add_argument("--rank_child", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--target", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rank_child is not None:
        return rank_main(args)
    mc = import_client(args.bin_dir)
    if args.chunk_kib:
        from meshserve_client import params as P
        P.CHUNK_BYTES = args.chunk_kib << 10
    hidden = hidden_for(args.mib)
    root = tempfile.mkdtemp(prefix="meshserve-params-python-", dir=args.work_dir)
    try:
        return run(args, mc, hidden, root)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


def run(args, mc, hidden, root):
    """The measurements (see the top), models and logs in `root`."""
    import grpc
    write_model(os.path.join(root, "models"), hidden)
    params = make_params(hidden)
    total = sum(v.nbytes for v in params.values())
    results = {"bytes": total, "hidden": hidden}
    flat = np.concatenate([v.reshape(-1) for v in params.values()])
    raw_s = raw_sendall(flat, args.repeat)  # measured again at the end: the best of both
    print("raw loopback sendall: %d bytes in %.3f s = %.2f GiB/s" % (
        total, raw_s, gib_per_s(total, raw_s)), flush=True)
    cluster = mslib.LocalCluster(args.bin_dir, 4, os.path.join(root, "models"),
                                 os.path.join(root, "logs"),
                                 extra_args=[] if args.replicas is None else
                                 ["--replicas", str(args.replicas)])
    client = mc.MeshserveClient(cluster.target, timeout_s=300)

    lines = []

    def report(key, seconds, what):
        results[key + "_s"] = seconds
        results[key + "_gib_per_s"] = gib_per_s(total, seconds)
        lines.append((key, what, seconds))
        print("%-44s %.3f s = %.2f GiB/s" % (what, seconds, gib_per_s(total, seconds)),
              flush=True)
    try:
        sessions = True
        try:
            client.begin_push(MODEL).abort()
        except mc.MeshserveError as e:
            if e.code != grpc.StatusCode.UNIMPLEMENTED:
                raise
            sessions = False
            print("push sessions: UNIMPLEMENTED on this server (%s); skipped" % e.message)
        runs = [push_direct_python(mc, client, params) for _ in range(args.repeat + 1)]
        report("python_pushdirect_first", runs[0][0], "python StageParams via PushDirect, first")
        report("python_pushdirect", min(r[0] for r in runs[1:]),
               "python StageParams via PushDirect, best")
        built_s, built = build_only(mc, params, runs[-1][2], 0)
        report("build_messages_only", built_s, "building those messages, not sent")
        if sessions:
            pushes = [push_once(client, params) for _ in range(args.repeat + 1)]
            report("push_first", pushes[0][0], "push (begin_push..commit), first")
            best = min(pushes[1:])
            report("push", best[0], "push (begin_push..commit), best")
            report("push_puts", best[1], "  of which the puts (staged on the workers)")
            report("push_commit", best[0] - best[1], "  of which commit (replica fills)")
            results["push_bytes_direct"] = pushes[-1][3].bytes_direct
            ckpt = os.path.join(root, "push.safetensors")
            mslib.write_safetensors(ckpt, params)
            cli = min(cli_seconds(args.bin_dir, "push", "--target", cluster.target, "--model",
                                  MODEL, "--checkpoint", ckpt) for _ in range(args.repeat))
            os.remove(ckpt)
            report("cli_push", cli, "meshserve push (C++ CLI, same bytes), best")
            ranks_s, sent = two_ranks(args, client, cluster.target, args.repeat)
            results["two_ranks_s"] = ranks_s
            results["two_ranks_vs_one"] = ranks_s / results["push_s"]
            results["two_ranks_bytes_sent"] = sent
            print("two ranks pushing halves: %.3f s = %.2fx one rank's time (bytes sent %s)" % (
                ranks_s, ranks_s / results["push_s"], sent), flush=True)
        outs = {n: np.empty_like(v) for n, v in params.items()}
        pull_s = min(pull_once(client, outs) for _ in range(args.repeat))
        report("pull", pull_s, "pull into out= (%s)" % (
            "PlanPull + ReadParam" if sessions else "path the server offers"))
        shm = "/dev/shm" if os.path.isdir("/dev/shm") else root  # memory, as out= is
        out_file = os.path.join(shm, "meshserve-bench-pull-%d.safetensors" % os.getpid())
        cli = min(cli_seconds(args.bin_dir, "pull", "--target", cluster.target, "--model", MODEL,
                              "--params", ",".join(params), "--output", out_file)
                  for _ in range(args.repeat))
        os.remove(out_file)
        report("cli_pull", cli, "meshserve pull (C++ CLI, to a tmpfs file)")
    finally:
        client.close()
        cluster.stop()
    raw_end = raw_sendall(flat, args.repeat)
    print("raw loopback sendall again: %.3f s; the limit: the best of both" % raw_end)
    raw_s = min(raw_s, raw_end)
    results["raw_sendall_s"] = raw_s
    results["raw_sendall_gib_per_s"] = gib_per_s(total, raw_s)
    print("\nagainst raw loopback sendall, %.3f s = %.2f GiB/s (target: push, pull >= 0.5x):" % (
        raw_s, gib_per_s(total, raw_s)))
    for key, what, seconds in lines:
        results[key + "_vs_raw"] = raw_s / seconds
        print("  %-44s %.2fx raw" % (what, raw_s / seconds))
    if "two_ranks_vs_one" in results:
        print("  two ranks / one rank: %.2fx (target <= 1.1x)" % results["two_ranks_vs_one"])
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
