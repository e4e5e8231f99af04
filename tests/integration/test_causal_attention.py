#!/usr/bin/python3
"""e2e_causal_attention: a hand-written 2-layer causal decoder
(testdata/causal_lm.json: learned positions, rope, grouped-query attention
through reshapes with 0s, a causal scaled softmax, HF [out, in] weights as
einsum param operands with a bias, q/k/v as boxes of one fused checkpoint
tensor, a tied LM head) served on 1, 2 and 4 workers and compared with a NumPy
forward pass written here, float32 at 1e-4 relative.

The checkpoint is written with NumPy as two safetensors files and a
model.safetensors.index.json. Requests: batches of different sequence
lengths, int32 and int64 ids (converted by the coordinator), an id outside
the vocabulary (INVALID_ARGUMENT naming it).

Usage: test_causal_attention.py --bin_dir build/bin [--workers 1,2,4] [--keep]
"""
import json
import os
import shutil
import sys

import numpy as np

import e2e_common as e2e
import mslib

MODEL = "causal_lm"


def load_model():
    with open(os.path.join(e2e.TESTDATA, MODEL + ".json")) as f:
        return json.load(f)


def dims(model):
    p = model["params"]
    vocab, d = p["wte"]["shape"]
    layers = [l for l in model["layers"] if l["op"] == "reshape" and l["name"].endswith(".qh")]
    kv, g, hd = layers[0]["shape"][2:]
    n_layers = len(layers)
    return vocab, d, kv, g, hd, n_layers


def random_weights(model, rng):
    """The checkpoint tensors: q/k/v fused into h.N.qkv.weight [(H+2KV)hd, d]."""
    vocab, d, kv, g, hd, n_layers = dims(model)
    t = {}
    for name, spec in model["params"].items():
        if "from" in spec:
            continue
        t[name] = rng.standard_normal(spec["shape"]).astype(np.float32) * 0.5
    for n in range(n_layers):
        rows = (kv * g + 2 * kv) * hd
        t["h.%d.qkv.weight" % n] = rng.standard_normal((rows, d)).astype(np.float32) * 0.5
    for name in t:
        if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name == "ln_f.weight":
            t[name] = (1.0 + 0.1 * t[name]).astype(np.float32)
    return t


def write_checkpoint(model_dir, tensors):
    names = sorted(tensors)
    half = len(names) // 2
    files = {"model-00001-of-00002.safetensors": names[:half],
             "model-00002-of-00002.safetensors": names[half:]}
    weight_map = {}
    for file, members in files.items():
        mslib.write_safetensors(os.path.join(model_dir, file), {n: tensors[n] for n in members})
        weight_map.update({n: file for n in members})
    with open(os.path.join(model_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)


# ---- the NumPy forward pass (float64), independent of the model file ----

def rms(x, w, eps=1e-5):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, theta=10000.0):
    """x [b, s, ..., d]; positions along dim 1; HF rotate_half."""
    s, d = x.shape[1], x.shape[-1]
    half = d // 2
    inv = theta ** (-2.0 * np.arange(half) / d)
    a = np.arange(s)[:, None] * inv[None, :]
    shape = (1, s) + (1,) * (x.ndim - 3) + (half,)
    cos, sin = np.cos(a).reshape(shape), np.sin(a).reshape(shape)
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def forward(model, t, ids):
    vocab, d, kv, g, hd, n_layers = dims(model)
    w = {k: v.astype(np.float64) for k, v in t.items()}
    b, s = ids.shape
    x = w["wte"][ids] + w["wpe"][np.arange(s)][None]
    causal = np.tril(np.ones((s, s), dtype=bool))
    for n in range(n_layers):
        p = "h.%d." % n
        qkv = w[p + "qkv.weight"]
        wq, wk, wv = qkv[:kv * g * hd], qkv[kv * g * hd:(kv * g + kv) * hd], qkv[(kv * g + kv) * hd:]
        a = rms(x, w[p + "ln_1.weight"])
        q = (a @ wq.T + w[p + "q.bias"]).reshape(b, s, kv, g, hd)
        k = (a @ wk.T).reshape(b, s, kv, hd)
        v = (a @ wv.T).reshape(b, s, kv, hd)
        q, k = rope(q), rope(k)
        scores = np.einsum("bqngd,bknd->bngqk", q, k) * 0.5
        scores = np.where(causal, scores, -np.inf)
        scores = scores - scores.max(axis=-1, keepdims=True)
        probs = np.exp(scores)
        probs /= probs.sum(axis=-1, keepdims=True)
        o = np.einsum("bngqk,bknd->bqngd", probs, v).reshape(b, s, kv * g * hd)
        x = x + o @ w[p + "o.weight"].T
        m = rms(x, w[p + "ln_2.weight"])
        gate, up = m @ w[p + "gate.weight"].T, m @ w[p + "up.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ w[p + "down.weight"].T
    return rms(x, w["ln_f.weight"]) @ w["wte"].T


def stages(env):
    c, cli = env.c, env.cli
    model = load_model()
    vocab = model["params"]["wte"]["shape"][0]
    rng = np.random.default_rng(12)
    model_dir = os.path.join(env.root, "models")
    os.makedirs(model_dir)
    shutil.copy(os.path.join(e2e.TESTDATA, MODEL + ".json"), model_dir)
    tensors = random_weights(model, rng)
    write_checkpoint(model_dir, tensors)
    requests = [rng.integers(0, vocab, size=(2, 5)).astype(np.int32),
                rng.integers(0, vocab, size=(4, 8)).astype(np.int64),
                rng.integers(0, vocab, size=(2, 1)).astype(np.int32)]
    results = {}

    def run(workers):
        cluster = env.cluster(workers, model_dir, str(workers))
        try:
            for i, ids in enumerate(requests):
                what = "%d workers: request %d %s %s" % (workers, i, ids.dtype, ids.shape)
                rc, out, err, outputs = cli.infer(cluster.target, MODEL, {"input_ids": ids})
                if not c.check(rc == 0 and "logits" in outputs, what + " succeeds",
                               "    rc=%d\n%s\n%s\n%s" % (rc, out, err, cluster.logs_tail())):
                    continue
                logits = outputs["logits"]
                c.check(logits.dtype == np.float32 and logits.shape == ids.shape + (vocab,),
                        what + ": float32 logits [batch, sequence, vocab]", repr(logits.shape))
                c.close(logits, forward(model, tensors, ids), what + ": logits match NumPy",
                        1e-4, 1e-5)
                results.setdefault(i, {})[workers] = logits
            bad = requests[0].copy()
            bad[1, 3] = vocab
            rc, out, err, _ = cli.infer(cluster.target, MODEL, {"input_ids": bad})
            e2e.expect_code(c, "%d workers: id %d outside the vocabulary" % (workers, vocab),
                            rc, err, "INVALID_ARGUMENT")
            c.check("id %d" % vocab in err, "%d workers: the error names the id" % workers, err)
        finally:
            rc = cluster.stop()
        c.check(rc == 0, "%d workers: meshserve local exits 0 on SIGTERM" % workers,
                "    rc=%s\n%s" % (rc, cluster.stderr_text()))

    counts = [int(w) for w in env.args.workers.split(",")]
    out = [("%d workers" % w, (lambda w=w: run(w))) for w in counts]
    out.append(("same logits on every worker count", lambda: [
        c.close(by[w], by[counts[0]], "request %d: %d workers == %d" % (i, w, counts[0]), 1e-5,
                1e-6)
        for i, by in sorted(results.items()) for w in counts[1:] if w in by and counts[0] in by]))
    return out


def add_args(ap):
    ap.add_argument("--workers", default="1,2,4")


if __name__ == "__main__":
    sys.exit(e2e.main("causal_attention", stages, add_args=add_args, doc=__doc__))
