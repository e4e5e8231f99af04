#!/usr/bin/python3
"""The NumPy baseline of run_performance.py: the SwiGLU block
y = (silu(x @ gate) * (x @ up)) @ down in float32, one process, with the
OpenBLAS thread count set by the caller (OPENBLAS_NUM_THREADS in the
environment, before NumPy loads). Prints one JSON line
{"threads": T, "p50_ms": {"1": .., "8": .., "64": ..}}.

Usage: OPENBLAS_NUM_THREADS=2 numpy_swiglu.py --d 2048 --f 8192 --batches 1,8,64 --reps 20
"""
import argparse
import json
import os
import time

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--d", type=int, default=2048)
    ap.add_argument("--f", type=int, default=8192)
    ap.add_argument("--batches", default="1,8,64")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    gate = rng.standard_normal((args.d, args.f), dtype=np.float32)
    up = rng.standard_normal((args.d, args.f), dtype=np.float32)
    down = rng.standard_normal((args.f, args.d), dtype=np.float32)
    p50 = {}
    for b in (int(s) for s in args.batches.split(",")):
        x = rng.standard_normal((b, args.d), dtype=np.float32)
        times = []
        for _ in range(args.reps + 2):
            t = time.perf_counter()
            g = x @ gate
            y = ((g / (1 + np.exp(-g))) * (x @ up)) @ down
            times.append((time.perf_counter() - t) * 1e3)
        p50[str(b)] = float(np.median(times[2:]))
        del y
    print(json.dumps({"threads": os.environ.get("OPENBLAS_NUM_THREADS", "?"), "p50_ms": p50}))


if __name__ == "__main__":
    main()
