#!/usr/bin/python3
"""The Python client's native byte movers (client/python/native,
_meshserve_native) against its grpcio path and the raw limit, in one run
(issue 34 item 2):

  - raw: loopback TCP `sendall` of the push's bytes from this process to a
    sink thread of this process (run_params_python.raw_sendall);
  - push: `meshserve local --workers 4` (default replicas) serving --mib MiB
    of float32 params; begin_push .. put of every param .. commit(), timed
    whole and up to the last put's return (the puts alone);
  - pull: pull(..., out=) of every param into preallocated arrays;
  - the client process's CPU seconds of each (time.process_time), a figure
    the other processes' load disturbs less than the wall time.

Each round measures raw, then push and pull with the native module and with
MESHSERVE_PYTHON_NATIVE=0 (the grpcio path), alternating which goes first;
after a warm-up push of each path. Prints, per path, the best and the median
over --rounds, each round's ratio against that round's raw sendall, and the
load average before and after (the machine is shared). Not part of the test
suite; needs about 1.5 GiB of RAM.

Usage: bench/run_params_native.py [--bin_dir build/bin] [--mib 256] [--rounds 5]
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run_params_python as rp  # noqa: E402


def with_path(native, fn, *args):
    """fn(*args) with the client's native byte path on or off."""
    os.environ["MESHSERVE_PYTHON_NATIVE"] = "1" if native else "0"
    try:
        return fn(*args)
    finally:
        del os.environ["MESHSERVE_PYTHON_NATIVE"]


def round_trip(client, params, outs, native):
    """(push seconds, puts seconds, pull seconds, push CPU seconds, pull CPU
    seconds of this process) on one path; pulls checked."""
    cpu0 = time.process_time()
    push_s, puts_s, _, push = with_path(native, rp.push_once, client, params)
    cpu1 = time.process_time()
    if push.bytes_through:
        raise RuntimeError("%d bytes went through the coordinator" % push.bytes_through)
    pull_s = with_path(native, rp.pull_once, client, outs)
    cpu2 = time.process_time()
    for name, value in params.items():
        if not np.array_equal(outs[name], value):
            raise RuntimeError("pull of %s differs from the push" % name)
        outs[name].fill(0)
    return push_s, puts_s, pull_s, cpu1 - cpu0, cpu2 - cpu1


def summary(name, rows):
    """Best and median of each figure's ratio to its round's raw."""
    out = {}
    for i, what in enumerate(("push", "puts", "pull")):
        ratios = [raw / r[i] for raw, r in rows]
        secs = [r[i] for _, r in rows]
        out[what] = {"best_s": min(secs), "median_s": statistics.median(secs),
                     "best_vs_raw": max(ratios), "median_vs_raw": statistics.median(ratios),
                     "vs_raw": ratios}
        print("  %-7s %-5s best %.3f s  median %.3f s   vs raw: median %.2fx best %.2fx  (%s)" % (
            name, what, min(secs), statistics.median(secs), statistics.median(ratios),
            max(ratios), " ".join("%.2f" % x for x in ratios)))
    for i, what in ((3, "push"), (4, "pull")):
        cpu = statistics.median(r[i] for _, r in rows)
        out[what]["median_cpu_s"] = cpu
        print("  %-7s %-5s this process's CPU, median %.3f s" % (name, what, cpu))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin_dir", default=os.path.join(rp.ROOT, "build", "bin"))
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    mc = rp.import_client(args.bin_dir)
    from meshserve_client import params as P
    if P._meshserve_native is None:
        print("the native module _meshserve_native is not built or does not import")
        return 1
    hidden = rp.hidden_for(args.mib)
    root = tempfile.mkdtemp(prefix="meshserve-params-native-")
    load_before = os.getloadavg()
    try:
        rp.write_model(os.path.join(root, "models"), hidden)
        params = rp.make_params(hidden)
        total = sum(v.nbytes for v in params.values())
        flat = np.concatenate([v.reshape(-1) for v in params.values()])
        outs = {n: np.zeros_like(v) for n, v in params.items()}
        cluster = rp.mslib.LocalCluster(args.bin_dir, 4, os.path.join(root, "models"),
                                        os.path.join(root, "logs"))
        client = mc.MeshserveClient(cluster.target, timeout_s=300)
        rows = {True: [], False: []}
        try:
            for native in (True, False):  # warm-up: fresh worker memory, channels
                round_trip(client, params, outs, native)
            for i in range(args.rounds):
                raw = rp.raw_sendall(flat, 1)
                order = (True, False) if i % 2 == 0 else (False, True)
                for native in order:
                    rows[native].append((raw, round_trip(client, params, outs, native)))
                print("round %d: raw %.3f s; native push %.3f pull %.3f; grpcio push %.3f "
                      "pull %.3f" % (i, raw, rows[True][-1][1][0], rows[True][-1][1][2],
                                     rows[False][-1][1][0], rows[False][-1][1][2]), flush=True)
        finally:
            client.close()
            cluster.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    load_after = os.getloadavg()
    print("\n%d MiB, %d rounds; load average before %.2f %.2f %.2f, after %.2f %.2f %.2f" % (
        total >> 20, args.rounds, *load_before, *load_after))
    print("ratio = that round's raw loopback sendall seconds / the figure's seconds "
          "(target: push, pull >= 0.5x)")
    results = {"bytes": total, "load_before": load_before, "load_after": load_after,
               "native": summary("native", rows[True]), "grpcio": summary("grpcio", rows[False])}
    for what in ("push", "puts", "pull"):
        speedup = [g[i] / n[i] for (_, n), (_, g), i in zip(
            rows[True], rows[False], [("push", "puts", "pull").index(what)] * len(rows[True]))]
        results["native_speedup_" + what] = statistics.median(speedup)
        print("  native / grpcio %-5s speed, median over rounds: %.2fx" % (
            what, statistics.median(speedup)))
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
