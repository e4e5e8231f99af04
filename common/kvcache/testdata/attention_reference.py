#!/usr/bin/python3
"""NumPy reference for cached_attention_test: full causal attention (GQA).

For a fixed seed, writes random float32 q [L, Hq, D], k and v [L, Hkv, D] for
several sequences (one length each) and the expected output of full causal
attention over each whole sequence, computed in float64 with NumPy alone:

    k = repeat(K, G, axis=1), v = repeat(V, G, axis=1)      (G = Hq / Hkv)
    s[h, t, j] = scale * q[t, h] . k[j, h],  j > t masked to -inf
    out[t, h] = sum_j softmax(s[h, t])[j] v[j, h]

Files in --out: seq<i>_q.npy, seq<i>_k.npy, seq<i>_v.npy (float32) and
seq<i>_out.npy (float64). The C++ test feeds the same rows to the paged cache
step by step (prefill chunks, decode steps, several sequences per call).

Usage: attention_reference.py --out DIR --seed 1 --hq 4 --hkv 2 --d 8
           --lengths 5,17,40 [--scale 0.3]
"""
import argparse
import os

import numpy as np


def causal_attention(q, k, v, scale):
    """q [L, Hq, D], k/v [L, Hkv, D] -> [L, Hq, D], float64."""
    length, hq, _ = q.shape
    g = hq // k.shape[1]
    q = q.astype(np.float64)
    k = np.repeat(k.astype(np.float64), g, axis=1)
    v = np.repeat(v.astype(np.float64), g, axis=1)
    s = np.einsum("thd,jhd->htj", q, k) * scale
    future = np.triu(np.ones((length, length), dtype=bool), k=1)
    s[:, future] = -np.inf
    s -= s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(axis=-1, keepdims=True)
    return np.einsum("htj,jhd->thd", p, v)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--hq", type=int, required=True)
    parser.add_argument("--hkv", type=int, required=True)
    parser.add_argument("--d", type=int, required=True)
    parser.add_argument("--lengths", required=True)
    parser.add_argument("--scale", type=float, default=0.0)
    args = parser.parse_args()
    assert args.hq % args.hkv == 0, "hq must be a multiple of hkv"
    scale = args.scale if args.scale > 0 else 1.0 / np.sqrt(args.d)
    rng = np.random.default_rng(args.seed)
    for i, length in enumerate(int(x) for x in args.lengths.split(",")):
        q = rng.standard_normal((length, args.hq, args.d)).astype(np.float32)
        k = rng.standard_normal((length, args.hkv, args.d)).astype(np.float32)
        v = rng.standard_normal((length, args.hkv, args.d)).astype(np.float32)
        out = causal_attention(q, k, v, scale)
        for name, array in (("q", q), ("k", k), ("v", v), ("out", out)):
            np.save(os.path.join(args.out, "seq%d_%s.npy" % (i, name)), array)


if __name__ == "__main__":
    main()
