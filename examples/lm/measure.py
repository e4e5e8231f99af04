#!/usr/bin/python3
"""Serves examples/lm on N workers and measures one model: each worker's
resident memory (VmRSS, after the model is placed and after the requests) and
the latency of a batch (`meshserve bench`, p50 of a few sequential requests).
The numbers in docs/import.md come from this script.

Usage: examples/lm/measure.py [--bin_dir build/bin] [--workers 4] [--model gpt2_small]
           [--model_file FILE] [--batch 4] [--seq 128] [--requests 5]
"""
import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import mslib  # noqa: E402


def rss_mb(pid):
    with open("/proc/%d/status" % pid) as f:
        kb = int(re.search(r"VmRSS:\s+(\d+) kB", f.read()).group(1))
    return kb / 1024.0


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bin_dir", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--model", default="gpt2_small")
    ap.add_argument("--model_file", default="",
                    help="serve this model file (its name must be --model) instead of "
                         "examples/lm/MODEL.json")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--requests", type=int, default=5)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="meshserve-measure-")
    models = os.path.join(work, "models")  # the one model only: RSS is its own
    os.makedirs(models)
    shutil.copy(args.model_file or os.path.join(HERE, args.model + ".json"), models)
    start = time.time()
    cluster = mslib.LocalCluster(args.bin_dir, args.workers, models, os.path.join(work, "logs"),
                                 ready_timeout_s=900)
    try:
        ready_s = time.time() - start
        meshserve = os.path.join(args.bin_dir, "meshserve")
        _, status, _ = mslib.run([meshserve, "status", "--target", cluster.target], timeout=60)
        loaded = {w: rss_mb(p) for w, p in cluster.worker_pids.items()}
        rc, out, err = mslib.run(
            [meshserve, "bench", "--target", cluster.target, "--model", args.model,
             "--input_shape", "input_ids=%d,%d" % (args.batch, args.seq), "--concurrency", "1",
             "--requests", str(args.requests), "--warmup", "1", "--timeout_s", "600"],
            timeout=3600)
        if rc != 0:
            print(out, err)
            return 1
        report = json.loads(out.strip().splitlines()[-1])
        after = {w: rss_mb(p) for w, p in cluster.worker_pids.items()}
        print(status)
        print("ready after %.1f s" % ready_s)
        for w in sorted(after):
            print("worker %d: VmRSS %.0f MB after placing, %.0f MB after the requests" % (
                w, loaded[w], after[w]))
        print("%s batch %dx%d on %d workers: p50 %.0f ms, p99 %.0f ms over %d requests" % (
            args.model, args.batch, args.seq, args.workers, report["p50_ms"], report["p99_ms"],
            args.requests))
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
