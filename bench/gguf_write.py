"""A GGUF (version 3) writer for float32 tensors, and GPT-2 in llama.cpp's
conventions, for bench/run_generation.py's llama.cpp baseline.

File layout (ggml's gguf.h / docs/gguf.md): "GGUF", uint32 version 3,
uint64 tensor count, uint64 key-value count; each key-value: string key
(uint64 length + bytes), uint32 type, value (strings the same way, arrays
as uint32 item type + uint64 count + items); each tensor: name, uint32
n_dims, uint64 ne[n_dims] in ggml order (ne0 = the innermost, contiguous
dimension, i.e. NumPy's shape reversed), uint32 ggml type (0 = F32),
uint64 offset into the data section; then padding to general.alignment
(32) and the tensor data, each tensor aligned to 32 bytes. Little-endian.

GPT-2 conventions (llama.cpp's llama_model_gpt2 loader and
convert_hf_to_gguf.py's GPT2Model): general.architecture "gpt2"; keys
gpt2.{context_length, embedding_length, feed_forward_length, block_count,
attention.head_count, attention.layer_norm_epsilon, vocab_size}; tensors
token_embd [n_vocab, d], position_embd [n_ctx, d] (NumPy shapes), per
layer blk.N.{attn_norm, attn_qkv, attn_output, ffn_norm, ffn_up,
ffn_down}.{weight, bias}, output_norm.{weight, bias}; Hugging Face's
Conv1D weights ([in, out]) are transposed to [out, in] (ggml ne
{in, out}); no `output` tensor: llama.cpp ties it to token_embd.
The tokenizer is a stand-in byte-level BPE ("gpt2", pre "gpt-2"): ids 0-255
the 256 byte symbols of GPT-2's bytes_to_unicode, 256 "\u0120t" with the
one merge "\u0120 t", 257-50255 placeholders "x<id>", 50256 <|endoftext|>
(control, bos and eos). The benchmark feeds token ids and reads ids, so the
pieces' text does not matter; llama.cpp needs a tokenizer to exist
(node-llama-cpp tokenizes while loading; with "none" it aborts in
llama_vocab: "Tokenizer not initialized").

Usage: write_gpt2_gguf(path, hf_tensors, config) with hf_tensors the
Hugging Face names (wte.weight, h.0.attn.c_attn.weight, ...) -> float32.
"""
import struct

import numpy as np

ALIGN = 32
T_UINT32, T_INT32, T_FLOAT32, T_STRING, T_ARRAY = 4, 5, 6, 8, 9
GGML_F32 = 0


def _str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def _kv(key, value):
    if isinstance(value, list) and value and isinstance(value[0], str):
        return (_str(key) + struct.pack("<IIQ", T_ARRAY, T_STRING, len(value)) +
                b"".join(_str(v) for v in value))
    if isinstance(value, list):  # int32 items
        return (_str(key) + struct.pack("<IIQ", T_ARRAY, T_INT32, len(value)) +
                np.asarray(value, "<i4").tobytes())
    if isinstance(value, str):
        return _str(key) + struct.pack("<I", T_STRING) + _str(value)
    if isinstance(value, float):
        return _str(key) + struct.pack("<If", T_FLOAT32, value)
    if isinstance(value, int):
        return _str(key) + struct.pack("<II", T_UINT32, value)
    raise TypeError("unsupported GGUF value for %s: %r" % (key, value))


def write_gguf(path, metadata, tensors):
    """metadata: key -> str/int(uint32)/float(float32)/list of str or int32; tensors: name -> float32
    ndarray (NumPy shape; written with ne = shape reversed)."""
    meta = dict(metadata)
    meta.setdefault("general.alignment", ALIGN)
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta))
    head += b"".join(_kv(k, v) for k, v in meta.items())
    offset = 0
    infos, blobs = [], []
    for name, arr in tensors.items():
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        ne = list(reversed(arr.shape))
        infos.append(_str(name) + struct.pack("<I", len(ne)) +
                     b"".join(struct.pack("<Q", n) for n in ne) +
                     struct.pack("<IQ", GGML_F32, offset))
        blobs.append(arr)
        offset += (arr.nbytes + ALIGN - 1) // ALIGN * ALIGN
    head += b"".join(infos)
    with open(path, "wb") as f:
        f.write(head)
        f.write(b"\0" * ((-len(head)) % ALIGN))
        for arr in blobs:
            f.write(arr.tobytes())
            f.write(b"\0" * ((-arr.nbytes) % ALIGN))


def gpt2_tensors(hf):
    """llama.cpp's GPT-2 tensors from Hugging Face GPT-2 names (bare, tied head)."""
    out = {"token_embd.weight": hf["wte.weight"], "position_embd.weight": hf["wpe.weight"]}
    n_layer = 1 + max(int(k.split(".")[1]) for k in hf if k.startswith("h."))
    for i in range(n_layer):
        h, b = "h.%d." % i, "blk.%d." % i
        out.update({
            b + "attn_norm.weight": hf[h + "ln_1.weight"], b + "attn_norm.bias": hf[h + "ln_1.bias"],
            b + "attn_qkv.weight": hf[h + "attn.c_attn.weight"].T,
            b + "attn_qkv.bias": hf[h + "attn.c_attn.bias"],
            b + "attn_output.weight": hf[h + "attn.c_proj.weight"].T,
            b + "attn_output.bias": hf[h + "attn.c_proj.bias"],
            b + "ffn_norm.weight": hf[h + "ln_2.weight"], b + "ffn_norm.bias": hf[h + "ln_2.bias"],
            b + "ffn_up.weight": hf[h + "mlp.c_fc.weight"].T, b + "ffn_up.bias": hf[h + "mlp.c_fc.bias"],
            b + "ffn_down.weight": hf[h + "mlp.c_proj.weight"].T,
            b + "ffn_down.bias": hf[h + "mlp.c_proj.bias"],
        })
    out["output_norm.weight"] = hf["ln_f.weight"]
    out["output_norm.bias"] = hf["ln_f.bias"]
    return out


def _byte_symbols():
    """GPT-2's bytes_to_unicode: printable bytes map to themselves, the rest
    to U+0100 onwards, in byte order."""
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    out, n = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + n)
            n += 1
    return [out[b] for b in range(256)]


def stand_in_tokenizer(vocab_size):
    tokens = _byte_symbols() + ["\u0120t"]
    tokens += ["x%d" % i for i in range(len(tokens), vocab_size - 1)] + ["<|endoftext|>"]
    types = [1] * (vocab_size - 1) + [3]
    return {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2",
            "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": types,
            "tokenizer.ggml.merges": ["\u0120 t"],
            "tokenizer.ggml.bos_token_id": vocab_size - 1,
            "tokenizer.ggml.eos_token_id": vocab_size - 1}


def write_gpt2_gguf(path, hf, config):
    d = config["n_embd"]
    meta = {
        "general.architecture": "gpt2",
        "general.name": "meshserve-bench-gpt2",
        "general.file_type": 0,  # all F32
        "gpt2.context_length": config["n_positions"],
        "gpt2.embedding_length": d,
        "gpt2.feed_forward_length": config.get("n_inner") or 4 * d,
        "gpt2.block_count": config["n_layer"],
        "gpt2.attention.head_count": config["n_head"],
        "gpt2.attention.layer_norm_epsilon": float(config["layer_norm_epsilon"]),
        "gpt2.vocab_size": config["vocab_size"],
    }
    meta.update(stand_in_tokenizer(config["vocab_size"]))
    write_gguf(path, meta, gpt2_tensors(hf))
