"""PyTorch's baseline for bench/run_generation.py: GPT-2 with a KV cache,
written from Hugging Face's modeling_gpt2.py (pre-LayerNorm blocks, fused
Conv1D c_attn [d, 3d] applied as x @ W + b, causal softmax(q k^T / sqrt(hd)),
gelu_new = gelu(approximate="tanh"), the head tied to wte), on the weights
bench/run_generation.py wrote, float32, torch.set_num_threads(THREADS).

Measures (one JSON line on stdout):
  decode_ms_per_token   one stream: a 16-token prompt, then max_tokens greedy
                        steps of one token against the cache; time per token
                        after the first;
  prefill_ms            time to the first token of the 128-token prompt
                        (the prompt's forward pass, the last row's logits,
                        argmax);
  batch_tokens_per_s    a static batch of the 16 prompts (left-padded to the
                        longest, padding masked out of attention, each row's
                        positions counted from its first real token): prefill,
                        then max_tokens greedy steps for all 16; generated
                        tokens / wall time.

Usage: torch_gpt2.py --hf_dir DIR --prompts FILE.json --max_tokens N
       [--threads 2] [--reps 3]
Thread-safety: a single-threaded script (torch's intra-op threads aside).
"""
import argparse
import json
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    header.pop("__metadata__", None)
    out = {}
    for name, e in header.items():
        if e["dtype"] != "F32":
            continue
        b, end = e["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(data[b:end], np.float32).reshape(e["shape"]).copy())
    return out


class GPT2:
    def __init__(self, w, cfg):
        self.w = w
        self.d, self.heads = cfg["n_embd"], cfg["n_head"]
        self.hd = self.d // self.heads
        self.layers = cfg["n_layer"]
        self.eps = cfg["layer_norm_epsilon"]
        self.wte_t = w["wte.weight"].t()  # [d, vocab], a view: the head reads wte

    def new_cache(self, batch, capacity):
        shape = (batch, self.heads, capacity, self.hd)
        return [(torch.zeros(shape), torch.zeros(shape)) for _ in range(self.layers)]

    def forward(self, ids, positions, past, cache, key_bias=None):
        """ids/positions [B, S]; past: tokens already in the cache; key_bias
        [B, 1, 1, capacity] (0 or -inf) or None. Returns the last row's logits [B, V]."""
        w, d, H, hd = self.w, self.d, self.heads, self.hd
        B, S = ids.shape
        x = w["wte.weight"][ids] + w["wpe.weight"][positions]
        T = past + S
        causal = None
        if S > 1:
            causal = torch.full((S, T), float("-inf")).triu(past + 1)
        for i in range(self.layers):
            p = "h.%d." % i
            a = F.layer_norm(x, (d,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], self.eps)
            qkv = torch.addmm(w[p + "attn.c_attn.bias"], a.reshape(B * S, d),
                              w[p + "attn.c_attn.weight"]).view(B, S, 3, H, hd)
            q, k, v = (t.transpose(1, 2) for t in qkv.unbind(2))  # [B, H, S, hd]
            kc, vc = cache[i]
            kc[:, :, past:T] = k
            vc[:, :, past:T] = v
            scores = torch.matmul(q, kc[:, :, :T].transpose(-1, -2)) / (hd ** 0.5)
            if causal is not None:
                scores = scores + causal
            if key_bias is not None:
                scores = scores + key_bias[..., :T]
            o = torch.matmul(torch.softmax(scores, -1), vc[:, :, :T])
            o = o.transpose(1, 2).reshape(B * S, d)
            x = x + torch.addmm(w[p + "attn.c_proj.bias"], o, w[p + "attn.c_proj.weight"]).view(B, S, d)
            m = F.layer_norm(x, (d,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], self.eps)
            m = F.gelu(torch.addmm(w[p + "mlp.c_fc.bias"], m.reshape(B * S, d),
                                   w[p + "mlp.c_fc.weight"]), approximate="tanh")
            x = x + torch.addmm(w[p + "mlp.c_proj.bias"], m, w[p + "mlp.c_proj.weight"]).view(B, S, d)
        last = F.layer_norm(x[:, -1], (d,), w["ln_f.weight"], w["ln_f.bias"], self.eps)
        return last @ self.wte_t


def one_stream(model, prompt, max_tokens):
    ids = torch.tensor([prompt])
    cache = model.new_cache(1, len(prompt) + max_tokens)
    times = []
    t0 = time.perf_counter()
    logits = model.forward(ids, torch.arange(len(prompt))[None], 0, cache)
    tokens = [int(logits.argmax(-1))]
    times.append(time.perf_counter() - t0)
    past = len(prompt)
    for _ in range(max_tokens - 1):
        logits = model.forward(torch.tensor([[tokens[-1]]]), torch.tensor([[past]]), past, cache)
        tokens.append(int(logits.argmax(-1)))
        past += 1
        times.append(time.perf_counter() - t0)
    return times, tokens


def static_batch(model, prompts, max_tokens):
    B, L = len(prompts), max(len(p) for p in prompts)
    pads = [L - len(p) for p in prompts]
    ids = torch.tensor([[0] * pad + p for pad, p in zip(pads, prompts)])
    positions = torch.tensor([[max(0, j - pad) for j in range(L)] for pad in pads])
    key_bias = torch.zeros(B, 1, 1, L + max_tokens)
    for b, pad in enumerate(pads):
        key_bias[b, ..., :pad] = float("-inf")
    cache = model.new_cache(B, L + max_tokens)
    t0 = time.perf_counter()
    logits = model.forward(ids, positions, 0, cache, key_bias)
    tok = logits.argmax(-1)
    past = L
    pos = torch.tensor([[L - pad] for pad in pads])
    for _ in range(max_tokens - 1):
        logits = model.forward(tok[:, None], pos, past, cache, key_bias)
        tok = logits.argmax(-1)
        past += 1
        pos = pos + 1
    return time.perf_counter() - t0


def blas_library():
    """The BLAS this process loaded (Debian's torch uses libblas.so.3, which
    the alternatives system points at OpenBLAS when it is installed)."""
    torch.mm(torch.ones(2, 2), torch.ones(2, 2))
    with open("/proc/self/maps") as f:
        libs = {line.split()[-1] for line in f if "blas" in line.lower()}
    return sorted(os.path.basename(os.path.realpath(l)) for l in libs)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--hf_dir", required=True)
    ap.add_argument("--prompts", required=True,
                    help="JSON: {short: ids, long: ids, batch: [ids, ...]}")
    ap.add_argument("--max_tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    with open(os.path.join(args.hf_dir, "config.json")) as f:
        cfg = json.load(f)
    with open(args.prompts) as f:
        prompts = json.load(f)
    model = GPT2(load_safetensors(os.path.join(args.hf_dir, "model.safetensors")), cfg)
    out = {"torch": torch.__version__, "threads": torch.get_num_threads(),
           "blas": blas_library()}
    with torch.inference_mode():
        one_stream(model, prompts["short"], 4)  # warm up
        per_token, prefill, batch = [], [], []
        for _ in range(args.reps):
            times, tokens = one_stream(model, prompts["short"], args.max_tokens)
            per_token.append((times[-1] - times[0]) / (len(times) - 1) * 1e3)
            prefill.append(one_stream(model, prompts["long"], 1)[0][0] * 1e3)
        out["tokens"] = tokens
        for _ in range(1 if args.reps <= 2 else 2):
            batch.append(len(prompts["batch"]) * args.max_tokens /
                         static_batch(model, prompts["batch"], args.max_tokens))
        # torch's own GEMM rate on the prefill's largest shape (128 x 768 x 3072),
        # to compare with NumPy's on the same OpenBLAS.
        a, b = torch.randn(128, 768), torch.randn(768, 3072)
        rates = []
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(8):
                a @ b
            rates.append(8 * 2 * 128 * 768 * 3072 / (time.perf_counter() - t) / 1e9)
        out["gemm_gflops"] = max(rates)
    out.update(decode_ms_per_token=per_token, prefill_ms=prefill, batch_tokens_per_s=batch)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
