#!/usr/bin/python3
"""e2e_lm_import: `meshserve import` on Hugging Face GPT-2 and Llama
directories written here with NumPy, served on 1, 2 and 4 workers, the
logits compared with a NumPy forward pass written from the Hugging Face
models' definitions (modeling_gpt2.py, modeling_llama.py), independent of the
importer and of the server.

The checkpoints use Hugging Face's exact names and layouts (GPT-2's Conv1D
weights [in, out] with the fused c_attn [d, 3d]; Llama's nn.Linear weights
[out, in]) and random values; 2 layers, small widths:
  gpt2            bare names (as the `gpt2` hub checkpoint), tied head, the
                  attn.bias / attn.masked_bias buffers present (ignored)
  gpt2_prefixed   `transformer.` names and its own lm_head.weight
  gpt2_dp         gpt2 imported with --mesh data=2,model=2 (batch over data)
  llama           GQA (4 query heads, 2 KV heads), RoPE, lm_head
  llama_sharded   the same weights in two shards with model.safetensors.index.json
  llama_tied      no lm_head.weight, tie_word_embeddings
  llama_bf16      llama's weights stored BF16 (widened to float32 params: the
                  reference is the float32 model on the rounded weights, same tolerance)
  llama_m4        llama imported with --mesh model=4 (2 KV heads do not divide
                  4: attention stays replicated, the MLP and vocabulary shard)
Requests of several sequence lengths, an int64 one, and a per-request
out_sharding on the logits. Then the refusals: unknown architecture, missing
tensor, wrong shape, rope_scaling it cannot do, broken config.json, no
safetensors, a bad index, a bad --mesh: each exits non-zero naming the value
and writes nothing. And the examples in examples/lm are what the importer
writes from their config.json files.

Float32 against a float64 reference at rtol 1e-4 (atol 1e-4 of the largest
logit, for logits near zero).

Usage: test_lm_import.py --bin_dir build/bin [--workers 1,2,4] [--keep]
"""
import json
import os
import re
import sys

import numpy as np

import e2e_common as e2e
import mslib

RTOL = 1e-4
ATOL_FRACTION = 1e-4
LM_EXAMPLES = os.path.join(e2e.ROOT, "examples", "lm")

GPT2_CONFIG = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": 2,
               "n_embd": 32, "n_head": 4, "n_inner": None, "vocab_size": 64,
               "n_positions": 32, "layer_norm_epsilon": 1e-5,
               "activation_function": "gelu_new", "scale_attn_weights": True}
LLAMA_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                "num_hidden_layers": 2, "hidden_size": 32, "num_attention_heads": 4,
                "num_key_value_heads": 2, "intermediate_size": 48, "vocab_size": 64,
                "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "rope_scaling": None,
                "hidden_act": "silu", "tie_word_embeddings": False,
                "max_position_embeddings": 64}


# ---- Hugging Face checkpoints, random values ----

def gpt2_weights(rng, cfg, lm_head=False):
    d, f, v, p = cfg["n_embd"], 4 * cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"]

    def w(*shape, scale=None):
        scale = scale if scale is not None else 1.0 / np.sqrt(shape[0])
        return (scale * rng.standard_normal(shape)).astype(np.float32)

    t = {"wte.weight": w(v, d, scale=0.5), "wpe.weight": w(p, d, scale=0.5),
         "ln_f.weight": 1 + w(d, scale=0.1), "ln_f.bias": w(d, scale=0.1)}
    for i in range(cfg["n_layer"]):
        h = "h.%d." % i
        t.update({
            h + "ln_1.weight": 1 + w(d, scale=0.1), h + "ln_1.bias": w(d, scale=0.1),
            h + "attn.c_attn.weight": w(d, 3 * d), h + "attn.c_attn.bias": w(3 * d, scale=0.1),
            h + "attn.c_proj.weight": w(d, d), h + "attn.c_proj.bias": w(d, scale=0.1),
            h + "ln_2.weight": 1 + w(d, scale=0.1), h + "ln_2.bias": w(d, scale=0.1),
            h + "mlp.c_fc.weight": w(d, f), h + "mlp.c_fc.bias": w(f, scale=0.1),
            h + "mlp.c_proj.weight": w(f, d), h + "mlp.c_proj.bias": w(d, scale=0.1),
            # Buffers of GPT2Attention, saved by older transformers versions.
            h + "attn.bias": np.tril(np.ones((p, p), np.float32)).reshape(1, 1, p, p),
            h + "attn.masked_bias": np.array(-1e4, np.float32),
        })
    if lm_head:
        t["lm_head.weight"] = w(v, d, scale=0.5)
    return t


def llama_weights(rng, cfg, lm_head=True):
    d, i_, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd = d // cfg["num_attention_heads"]
    q_out, kv_out = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd

    def w(*shape, scale=None):  # nn.Linear [out, in]
        scale = scale if scale is not None else 1.0 / np.sqrt(shape[-1])
        return (scale * rng.standard_normal(shape)).astype(np.float32)

    t = {"model.embed_tokens.weight": w(v, d, scale=0.5), "model.norm.weight": 1 + w(d, scale=0.1)}
    for n in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % n
        t.update({
            p + "input_layernorm.weight": 1 + w(d, scale=0.1),
            p + "self_attn.q_proj.weight": w(q_out, d), p + "self_attn.k_proj.weight": w(kv_out, d),
            p + "self_attn.v_proj.weight": w(kv_out, d), p + "self_attn.o_proj.weight": w(d, q_out),
            p + "post_attention_layernorm.weight": 1 + w(d, scale=0.1),
            p + "mlp.gate_proj.weight": w(i_, d), p + "mlp.up_proj.weight": w(i_, d),
            p + "mlp.down_proj.weight": w(d, i_),
        })
    if lm_head:
        t["lm_head.weight"] = w(v, d, scale=0.5)
    return t


def write_hf_dir(path, config, tensors, shards=1):
    """config.json and model.safetensors, or `shards` files and their index."""
    os.makedirs(path)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    if shards == 1:
        mslib.write_safetensors(os.path.join(path, "model.safetensors"), tensors)
        return
    names = sorted(tensors)
    weight_map = {}
    for s in range(shards):
        file = "model-%05d-of-%05d.safetensors" % (s + 1, shards)
        part = {n: tensors[n] for n in names[s::shards]}
        mslib.write_safetensors(os.path.join(path, file), part)
        weight_map.update({n: file for n in part})
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f)


# ---- NumPy forward passes (float64), from transformers' modeling files ----

def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def rms_norm(x, w, eps):  # LlamaRMSNorm
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def gelu_new(x):  # transformers.activations.NewGELUActivation
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def causal_attention(q, k, v):
    """q [b, s, H, hd], k/v [b, s, H, hd] -> [b, s, H, hd]; scaled, causal."""
    s = q.shape[1]
    scores = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
    scores = np.where(np.tril(np.ones((s, s), bool)), scores, -np.inf)
    scores = np.exp(scores - scores.max(-1, keepdims=True))
    probs = scores / scores.sum(-1, keepdims=True)
    return np.einsum("bhqk,bkhd->bqhd", probs, v)


def gpt2_forward(t, cfg, ids, prefix=""):
    t = {k[len(prefix):] if k.startswith(prefix) else k: v.astype(np.float64) for k, v in t.items()}
    b, s = ids.shape
    d, heads, eps = cfg["n_embd"], cfg["n_head"], cfg["layer_norm_epsilon"]
    h = t["wte.weight"][ids] + t["wpe.weight"][np.arange(s)][None]
    for i in range(cfg["n_layer"]):
        p = "h.%d." % i
        a = layer_norm(h, t[p + "ln_1.weight"], t[p + "ln_1.bias"], eps)
        qkv = a @ t[p + "attn.c_attn.weight"] + t[p + "attn.c_attn.bias"]  # Conv1D: x @ W + b
        q, k, v = (x.reshape(b, s, heads, d // heads) for x in np.split(qkv, 3, axis=-1))
        o = causal_attention(q, k, v).reshape(b, s, d)
        h = h + o @ t[p + "attn.c_proj.weight"] + t[p + "attn.c_proj.bias"]
        m = layer_norm(h, t[p + "ln_2.weight"], t[p + "ln_2.bias"], eps)
        m = gelu_new(m @ t[p + "mlp.c_fc.weight"] + t[p + "mlp.c_fc.bias"])
        h = h + m @ t[p + "mlp.c_proj.weight"] + t[p + "mlp.c_proj.bias"]
    h = layer_norm(h, t["ln_f.weight"], t["ln_f.bias"], eps)
    return h @ t.get("lm_head.weight", t["wte.weight"]).T


def rope(x, theta):
    """apply_rotary_pos_emb on x [b, s, heads, d] with positions 0..s-1."""
    s, d = x.shape[1], x.shape[-1]
    inv_freq = 1.0 / theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
    freqs = np.outer(np.arange(s), inv_freq)
    emb = np.concatenate([freqs, freqs], -1)[None, :, None, :]
    rotated = np.concatenate([-x[..., d // 2:], x[..., :d // 2]], -1)  # rotate_half
    return x * np.cos(emb) + rotated * np.sin(emb)


def llama_forward(t, cfg, ids):
    t = {k: v.astype(np.float64) for k, v in t.items()}
    b, s = ids.shape
    d, heads, kv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd, eps = d // heads, cfg["rms_norm_eps"]
    h = t["model.embed_tokens.weight"][ids]
    for n in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % n
        a = rms_norm(h, t[p + "input_layernorm.weight"], eps)
        q = (a @ t[p + "self_attn.q_proj.weight"].T).reshape(b, s, heads, hd)
        k = (a @ t[p + "self_attn.k_proj.weight"].T).reshape(b, s, kv, hd)
        v = (a @ t[p + "self_attn.v_proj.weight"].T).reshape(b, s, kv, hd)
        q, k = rope(q, cfg["rope_theta"]), rope(k, cfg["rope_theta"])
        k, v = np.repeat(k, heads // kv, axis=2), np.repeat(v, heads // kv, axis=2)  # repeat_kv
        o = causal_attention(q, k, v).reshape(b, s, heads * hd)
        h = h + o @ t[p + "self_attn.o_proj.weight"].T
        m = rms_norm(h, t[p + "post_attention_layernorm.weight"], eps)
        gate, up = m @ t[p + "mlp.gate_proj.weight"].T, m @ t[p + "mlp.up_proj.weight"].T
        h = h + (gate / (1 + np.exp(-gate)) * up) @ t[p + "mlp.down_proj.weight"].T
    h = rms_norm(h, t["model.norm.weight"], eps)
    return h @ t.get("lm_head.weight", t["model.embed_tokens.weight"]).T


# ---- the scenario ----

def make_models(env):
    """Writes the HF dirs and imports them; returns (model_dir, cases):
    cases = {model: (forward(ids) -> logits, [(ids, out_shardings, type)])}."""
    c, cli = env.c, env.cli
    rng = np.random.default_rng(12)
    hf = os.path.join(env.root, "hf")
    models = os.path.join(env.root, "models")
    g = gpt2_weights(rng, GPT2_CONFIG)
    gp = {"transformer." + k: v for k, v in gpt2_weights(rng, GPT2_CONFIG, lm_head=True).items()}
    gp["lm_head.weight"] = gp.pop("transformer.lm_head.weight")
    ll = llama_weights(rng, LLAMA_CONFIG)
    lt = llama_weights(rng, LLAMA_CONFIG, lm_head=False)
    write_hf_dir(os.path.join(hf, "gpt2"), GPT2_CONFIG, g)
    write_hf_dir(os.path.join(hf, "gpt2_prefixed"), GPT2_CONFIG, gp)
    write_hf_dir(os.path.join(hf, "llama"), LLAMA_CONFIG, ll)
    write_hf_dir(os.path.join(hf, "llama_sharded"), LLAMA_CONFIG, ll, shards=2)
    write_hf_dir(os.path.join(hf, "llama_tied"), dict(LLAMA_CONFIG, tie_word_embeddings=True), lt)
    # The llama weights stored BF16 (as most hub checkpoints), widened to float32
    # params: the reference is the float32 model on the rounded weights.
    lb = {k: mslib.from_bf16_bits(mslib.to_bf16_bits(v)) for k, v in ll.items()}
    write_hf_dir(os.path.join(hf, "llama_bf16"), LLAMA_CONFIG,
                 {k: ("BF16", mslib.to_bf16_bits(v)) for k, v in ll.items()})
    imports = [("gpt2", []), ("gpt2_prefixed", []), ("gpt2", ["--name", "gpt2_dp", "--mesh",
               "data=2,model=2"]), ("llama", []), ("llama_sharded", []), ("llama_tied", []),
               ("llama_bf16", []), ("llama", ["--name", "llama_m4", "--mesh", "model=4"])]
    for src, extra in imports:
        name = extra[1] if extra else src
        rc, out, err = cli.run("import", "--hf_dir", os.path.join(hf, src), "--out_dir", models,
                               *extra, timeout=120)
        c.check(rc == 0 and ("wrote %s" % os.path.join(models, name + ".json")) in out,
                "import %s%s" % (name, " " + " ".join(extra) if extra else ""),
                "    rc=%d\n%s\n%s" % (rc, out[-3000:], err))
        c.check("# collectives" in out and "input_ids" in out and "logits" in out,
                "import %s prints the describe summary" % name, out[-3000:])
    check_model_files(c, models, hf)

    ids = {shape: rng.integers(0, 64, size=shape).astype(np.int32)
           for shape in [(2, 7), (1, 13), (3, 4), (2, 32)]}
    v = 64
    vocab_sharded = "P(None, None, 'model')"

    def reqs(shapes, spec_on=(2, 7)):
        out = [(ids[s], {}, "float32[%d,%d,%d]" % (s[0], s[1], v)) for s in shapes]
        out.append((ids[spec_on], {"logits": vocab_sharded},
                    "float32[%d,%d,%d@model]" % (spec_on[0], spec_on[1], v)))
        return out

    every = [(2, 7), (1, 13), (3, 4), (2, 32)]
    cases = {
        "gpt2": (lambda x: gpt2_forward(g, GPT2_CONFIG, x), reqs(every)),
        "gpt2_prefixed": (lambda x: gpt2_forward(gp, GPT2_CONFIG, x, "transformer."),
                          reqs([(2, 7), (1, 13)])),
        "gpt2_dp": (lambda x: gpt2_forward(g, GPT2_CONFIG, x),
                    [(ids[(2, 7)], {}, "float32[2@data,7,64@model]"),
                     (ids[(2, 32)], {}, "float32[2@data,32,64@model]")]),
        "llama": (lambda x: llama_forward(ll, LLAMA_CONFIG, x), reqs(every)),
        "llama_sharded": (lambda x: llama_forward(ll, LLAMA_CONFIG, x), reqs([(1, 13)])),
        "llama_tied": (lambda x: llama_forward(lt, LLAMA_CONFIG, x), reqs([(2, 7), (3, 4)])),
        "llama_bf16": (lambda x: llama_forward(lb, LLAMA_CONFIG, x), reqs([(2, 7)])),
        "llama_m4": (lambda x: llama_forward(ll, LLAMA_CONFIG, x),
                     [(ids[(2, 7)], {}, "float32[2,7,64@model]"),
                      (ids[(1, 13)], {"logits": "P()"}, "float32[1,13,64]")]),
    }
    # The same ids as INT64 (the input is declared int32; int64 requests convert).
    cases["llama"][1].append((ids[(3, 4)].astype(np.int64), {}, "float32[3,4,64]"))
    return models, cases


def check_model_files(c, models, hf):
    """The files point into the HF dirs (nothing copied) and name themselves."""
    files = sorted(os.listdir(models))
    c.check(all(f.endswith(".json") for f in files) and len(files) == 8,
            "the model dir holds only the 8 model files (no copy of the weights)", str(files))
    for f in files:
        with open(os.path.join(models, f)) as fh:
            m = json.load(fh)
        ckpt = os.path.normpath(os.path.join(models, m.get("checkpoint", "")))
        c.check(m["name"] == f[:-5] and ckpt.startswith(hf + os.sep) and os.path.exists(ckpt),
                "%s: name %s, checkpoint %s in the HF dir" % (f, m["name"], m.get("checkpoint")))
        c.check(m["inputs"]["input_ids"]["shape"] == [-1, -1] and m["outputs"][0] == "logits",
                "%s: input_ids [-1, -1], first output logits" % f)


def printed_types(stdout):
    return dict(re.findall(r"^(\S+): (\S+)", stdout, re.M))


# model -> mesh on (1, 2, 4) workers: the -1 model axis takes the most
# workers on which the model types (2 KV heads: at most 2).
EXPECTED_MESH = {
    "gpt2": {1: "model=1", 2: "model=2", 4: "model=4"},
    "llama": {1: "model=1", 2: "model=2", 4: "model=2"},
    "llama_m4": {1: "model=4", 2: "model=4", 4: "model=4"},
    "gpt2_dp": {1: "data=2,model=2", 2: "data=2,model=2", 4: "data=2,model=2"},
}


def serve(env, workers, models, cases):
    print("== %d worker(s)" % workers, flush=True)
    c, cli = env.c, env.cli
    cluster = env.cluster(workers, models, "lm%d" % workers)
    try:
        rc, out, err = cli.run("status", "--target", cluster.target, timeout=60)
        for model, meshes in EXPECTED_MESH.items():
            c.check(re.search(r"^\s+%s\s+\S+\s+mesh\[%s\]" % (model, re.escape(meshes[workers])),
                              out, re.M) is not None,
                    "%d workers: %s on mesh[%s]" % (workers, model, meshes[workers]), out)
        for model, (forward, requests) in cases.items():
            for ids, outs, type_str in requests:
                what = "%d workers: %s ids %s %s%s" % (workers, model, ids.dtype, list(ids.shape),
                                                       " " + str(outs) if outs else "")
                rc, out, err, outputs = cli.infer(cluster.target, model, {"input_ids": ids}, outs)
                if not c.check(rc == 0 and "logits" in outputs, what + " succeeds",
                               "    rc=%d\n%s\n%s" % (rc, out, err)):
                    continue
                c.check(printed_types(out).get("logits") == type_str,
                        "%s: logits %s" % (what, type_str), out)
                c.close(outputs["logits"], forward(ids), what + ": logits match NumPy",
                        rtol=RTOL, atol_fraction=ATOL_FRACTION)
        # GPT-2 has 32 learned positions: a 33-token request is refused.
        rc, _, err, _ = cli.infer(cluster.target, "gpt2",
                                  {"input_ids": np.zeros((1, 33), np.int32)})
        e2e.expect_code(c, "%d workers: gpt2 with 33 > n_positions tokens" % workers, rc, err,
                        "INVALID_ARGUMENT")
    finally:
        cluster.stop()


def refusals(env):
    """Malformed or unsupported checkpoints: non-zero exit, the value named, nothing written."""
    print("== refused checkpoints", flush=True)
    c, cli = env.c, env.cli
    rng = np.random.default_rng(3)
    root = os.path.join(env.root, "bad")
    out_dir = os.path.join(root, "out")
    g = gpt2_weights(rng, GPT2_CONFIG)
    ll = llama_weights(rng, LLAMA_CONFIG)
    missing = {k: v for k, v in g.items() if k != "h.1.mlp.c_fc.bias"}
    wrong = dict(g, **{"h.0.attn.c_attn.weight": np.zeros((32, 64), np.float32)})
    bad = [
        ("bert", dict(GPT2_CONFIG, architectures=["BertForMaskedLM"]), g, ["BertForMaskedLM"]),
        ("missing", GPT2_CONFIG, missing, ["h.1.mlp.c_fc.bias", "NOT_FOUND"]),
        ("wrong_shape", GPT2_CONFIG, wrong, ["h.0.attn.c_attn.weight", "[32, 64]", "[32, 96]"]),
        ("llama3_rope", dict(LLAMA_CONFIG, rope_scaling={"rope_type": "llama3", "factor": 8.0}),
         ll, ["rope_scaling", "llama3"]),
        ("erf_gelu", dict(GPT2_CONFIG, activation_function="gelu"), g, ["activation_function"]),
    ]
    for name, cfg, tensors, needles in bad:
        write_hf_dir(os.path.join(root, name), cfg, tensors)
    broken = os.path.join(root, "broken_json")
    write_hf_dir(broken, GPT2_CONFIG, g)
    with open(os.path.join(broken, "config.json"), "w") as f:
        f.write('{"architectures": ["GPT2LMHeadModel"], "n_layer": ')
    bad.append(("broken_json", None, None, ["config.json", "broken JSON"]))
    no_weights = os.path.join(root, "no_weights")
    os.makedirs(no_weights)
    with open(os.path.join(no_weights, "config.json"), "w") as f:
        json.dump(GPT2_CONFIG, f)
    bad.append(("no_weights", None, None, ["model.safetensors"]))
    bad_index = os.path.join(root, "bad_index")
    write_hf_dir(bad_index, LLAMA_CONFIG, ll, shards=2)
    with open(os.path.join(bad_index, "model.safetensors.index.json")) as f:
        index = json.load(f)
    index["weight_map"]["model.norm.weight"] = "model-00009-of-00009.safetensors"
    with open(os.path.join(bad_index, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f)
    bad.append(("bad_index", None, None, ["model-00009-of-00009.safetensors"]))
    for name, _, _, needles in bad:
        rc, out, err = cli.run("import", "--hf_dir", os.path.join(root, name), "--out_dir",
                               out_dir, timeout=60)
        c.check(rc == 1 and all(n in err for n in needles),
                "import %s exits 1 naming %s" % (name, needles), "    rc=%d\n%s\n%s" % (rc, out, err))
        c.check(not os.path.exists(os.path.join(out_dir, name + ".json")),
                "import %s writes no model file" % name)
    rc, out, err = cli.run("import", "--hf_dir", os.path.join(root, "missing"), "--out_dir",
                           out_dir, "--mesh", "fsdp=2", timeout=60)
    c.check(rc == 2 and "fsdp" in err, "import --mesh fsdp=2 is a usage error naming the axis",
            "    rc=%d\n%s" % (rc, err))


def examples_are_current(env):
    """examples/lm/NAME.json is what `import --init_from_seed` writes from NAME/config.json."""
    c, cli = env.c, env.cli
    out_dir = os.path.join(env.root, "examples")
    for name in ("gpt2_small", "llama_small"):
        rc, out, err = cli.run("import", "--hf_dir", os.path.join(LM_EXAMPLES, name), "--out_dir",
                               out_dir, "--init_from_seed", "--workers", "1", timeout=300)
        if not c.check(rc == 0, "import --init_from_seed examples/lm/%s" % name, err):
            continue
        with open(os.path.join(out_dir, name + ".json")) as f:
            fresh = f.read()
        with open(os.path.join(LM_EXAMPLES, name + ".json")) as f:
            shipped = f.read()
        c.check(fresh == shipped, "examples/lm/%s.json is current" % name)


def stages(env):
    workers = [int(w) for w in env.args.workers.split(",")]
    state = {}

    def prepare():
        state["models"], state["cases"] = make_models(env)

    out = [("import", prepare)]
    for w in workers:
        out.append(("serve on %d" % w,
                    lambda w=w: serve(env, w, state["models"], state["cases"])))
    out.append(("refusals", lambda: refusals(env)))
    out.append(("examples", lambda: examples_are_current(env)))
    return out


if __name__ == "__main__":
    sys.exit(e2e.main("lm_import", stages, doc=__doc__,
                      add_args=lambda ap: ap.add_argument("--workers", default="1,2,4")))
