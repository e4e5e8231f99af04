#!/usr/bin/python3
"""e2e_generate_text: text prompts and completion text through the model's
tokenizer (issue #32 item 5), over real processes.

A tiny GPT-2 checkpoint (random weights, test_lm_import.py's writer) whose
vocabulary is a byte-level BPE built here: the 256 byte tokens spelled as
GPT-2's bytes_to_unicode maps them, plus a few merges (vocab.json +
merges.txt; the model's vocab_size is the vocabulary's size), and a
generation_config.json whose eos_token_id overrides config.json's.
  - `meshserve import` writes NAME.tokenizer/ beside NAME.json with the files,
    and the model file's generation.eos_token_ids is generation_config's;
  - greedy `meshserve generate --prompt TEXT` gives the ids of the same
    generation with --prompt_ids of TEXT's encoding (a BPE written here from
    the same files, GPT-2's bpe() loop), and the text the CLI prints, the
    Python client's chunks and HTTP /v1/completions' `text` (whole and
    streamed) all equal the generated ids' bytes decoded with
    errors="replace";
  - a model without NAME.tokenizer/ refuses a text prompt (gRPC
    INVALID_ARGUMENT, HTTP 400) and one whose folder does not load refuses it
    with the loader's message, and both still serve id prompts;
  - stop strings: with a stop taken from the text of a greedy or seeded
    completion (the same draws on every edge), the CLI (--stop),
    the Python client (stop=) and HTTP (whole and streamed) end with
    finish_reason "stop", their text is the reference text cut before the
    first stop, and their ids are that completion's ids up to the first token
    whose text holds the stop (usage counts them); a model without a
    tokenizer refuses stop strings (400 naming "stop").
A tiny Llama checkpoint with a SentencePiece tokenizer.model (trained here by
Debian's python3-sentencepiece, byte fallback on) and a tokenizer_config.json:
  - `meshserve import` copies both into llama_sp.tokenizer/;
  - a text prompt's prompt_token_ids over HTTP are [<s>] + sp.encode(prompt),
    the gRPC text prompt gives the same ids as those ids, and the completion's
    text is its pieces' bytes ("▁" a space, "<0xNN>" a byte, specials their
    text) decoded with errors="replace", whole and streamed.

Usage: test_generate_text.py --bin_dir build/bin
"""
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request

import numpy as np

import sentencepiece as spm

import e2e_common as e2e
import mslib
import test_lm_import as lm

MERGES = [("h", "e"), ("l", "l"), ("he", "ll"), ("Ġ", "w"), ("o", "r"), ("Ġw", "or"),
          ("Ġ", "t"), ("Ġt", "h"), ("e", "r"), ("Ġth", "er"), ("Ġ", "h"), ("Ġh", "e"),
          ("Ġhe", "ll")]
PROMPTS = ["hello world hello", "the other world, there!"]
MAX_TOKENS = 12
SEED = 7
PAT = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+""")


def bytes_to_unicode():
    """GPT-2's table: byte -> a printable character."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) +
          list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


BYTE_CHARS = bytes_to_unicode()
CHAR_BYTES = {ch: b for b, ch in BYTE_CHARS.items()}


def make_vocab():
    vocab = {}
    for b in range(256):  # ids in GPT-2's table order
        vocab[BYTE_CHARS[b]] = len(vocab)
    for a, b in MERGES:
        vocab[a + b] = len(vocab)
    return vocab


def bpe(word, ranks):
    """GPT-2's bpe(): merge the lowest-ranked pair (leftmost first) until none."""
    parts = list(word)
    while len(parts) > 1:
        pairs = [(ranks.get((parts[i], parts[i + 1]), 1 << 30), i) for i in range(len(parts) - 1)]
        rank, _ = min(pairs)
        if rank == 1 << 30:
            break
        first, second = MERGES[rank]
        out, i = [], 0
        while i < len(parts):
            if i < len(parts) - 1 and parts[i] == first and parts[i + 1] == second:
                out.append(first + second)
                i += 2
            else:
                out.append(parts[i])
                i += 1
        parts = out
    return parts


def encode(text, vocab):
    ranks = {m: i for i, m in enumerate(MERGES)}
    ids = []
    for piece in PAT.findall(text):  # ASCII prompts: GPT-2's pattern in plain `re`
        word = "".join(BYTE_CHARS[b] for b in piece.encode("utf-8"))
        ids.extend(vocab[t] for t in bpe(word, ranks))
    return ids


def decode(ids, vocab):
    inverse = {i: t for t, i in vocab.items()}
    raw = b"".join(bytes(CHAR_BYTES[ch] for ch in inverse[i]) for i in ids)
    return raw.decode("utf-8", errors="replace")


def write_checkpoint(root, vocab):
    cfg = dict(lm.GPT2_CONFIG, vocab_size=len(vocab), eos_token_id=0)
    hf = os.path.join(root, "hf", "tiny")
    lm.write_hf_dir(hf, cfg, lm.gpt2_weights(np.random.default_rng(11), cfg))
    with open(os.path.join(hf, "vocab.json"), "w") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(hf, "merges.txt"), "w") as f:
        f.write("#version: 0.2\n" + "".join("%s %s\n" % m for m in MERGES))
    with open(os.path.join(hf, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": [len(vocab) - 1], "bos_token_id": 0}, f)
    return hf


SP_WORDS = ("hello world the other there model mesh shard worker token stream cache "
            "and of to in is was for on with as by at from café").split()


def write_llama_sp_checkpoint(root):
    """A tiny Llama checkpoint whose tokenizer.model is trained here."""
    rng = np.random.default_rng(5)
    corpus = os.path.join(root, "sp_corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        for _ in range(2000):
            f.write(" ".join(SP_WORDS[i] for i in rng.integers(0, len(SP_WORDS), 8)) + "\n")
    prefix = os.path.join(root, "sp")
    spm.SentencePieceTrainer.train(input=corpus, model_prefix=prefix, vocab_size=320,
                                   model_type="bpe", byte_fallback=True, character_coverage=1.0,
                                   unk_id=0, bos_id=1, eos_id=2, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
    cfg = dict(lm.LLAMA_CONFIG, vocab_size=sp.get_piece_size(), bos_token_id=1, eos_token_id=2)
    hf = os.path.join(root, "hf", "llama_sp")
    lm.write_hf_dir(hf, cfg, lm.llama_weights(rng, cfg))
    shutil.copy(prefix + ".model", os.path.join(hf, "tokenizer.model"))
    with open(os.path.join(hf, "tokenizer_config.json"), "w") as f:
        json.dump({"add_bos_token": True, "bos_token": "<s>", "eos_token": "</s>"}, f)
    return hf, prefix + ".model"


def sp_text(sp, ids):
    """A completion's text under SentencePiece's piece rules."""
    raw = b""
    for t in ids:
        piece = sp.id_to_piece(t)
        if sp.is_byte(t):
            raw += bytes([int(piece[3:5], 16)])
        elif sp.is_control(t) or sp.is_unknown(t):
            raw += piece.encode("utf-8")
        else:
            raw += piece.replace("\u2581", " ").encode("utf-8")
    return raw.decode("utf-8", errors="replace")


def prepare(env, state):
    c, cli = env.c, env.cli
    hf_sp, sp_model = write_llama_sp_checkpoint(env.root)
    models_sp = os.path.join(env.root, "models")
    rc, out, err = cli.run("import", "--hf_dir", hf_sp, "--out_dir", models_sp, timeout=120)
    c.check(rc == 0, "import llama_sp", out + err)
    tok_sp = os.path.join(models_sp, "llama_sp.tokenizer")
    copied = sorted(os.listdir(tok_sp)) if os.path.isdir(tok_sp) else []
    c.check(copied == ["tokenizer.model", "tokenizer_config.json"],
            "import writes llama_sp.tokenizer/ with tokenizer.model", str(copied))
    state["sp"] = spm.SentencePieceProcessor(model_file=sp_model)
    vocab = make_vocab()
    hf = write_checkpoint(env.root, vocab)
    models = os.path.join(env.root, "models")
    for extra in ((), ("--name", "broken_tok")):
        rc, out, err = cli.run("import", "--hf_dir", hf, "--out_dir", models, *extra, timeout=120)
        c.check(rc == 0, "import %s" % (" ".join(extra) or "tiny"), out + err)
    # The same checkpoint without tokenizer files.
    bare = os.path.join(env.root, "hf", "bare")
    os.makedirs(bare)
    for f in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(hf, f), bare)
    rc, out, err = cli.run("import", "--hf_dir", bare, "--out_dir", models, timeout=120)
    c.check(rc == 0, "import bare", out + err)
    tok = os.path.join(models, "tiny.tokenizer")
    copied = sorted(os.listdir(tok)) if os.path.isdir(tok) else []
    c.check(copied == ["generation_config.json", "merges.txt", "vocab.json"],
            "import writes tiny.tokenizer/ with the tokenizer files", str(copied))
    c.check(not os.path.exists(os.path.join(models, "bare.tokenizer")),
            "no bare.tokenizer/ for a checkpoint without tokenizer files")
    with open(os.path.join(models, "tiny.json")) as f:
        eos = json.load(f).get("generation", {}).get("eos_token_ids")
    c.check(eos == [len(vocab) - 1], "generation_config's eos_token_id overrides config.json's",
            str(eos))
    with open(os.path.join(models, "broken_tok.tokenizer", "vocab.json"), "w") as f:
        f.write("{not json")
    state.update(vocab=vocab, models=models)


def cli_generate(env, target, model, prompt_flag, prompt, *extra, temperature=0):
    """(rc, printed text, ids, stderr + stdout) of `meshserve generate --ids`:
    greedy, or at `temperature` with seed SEED."""
    sampling = ["--temperature", str(temperature)]
    if temperature:
        sampling += ["--seed", str(SEED)]
    cmd = [env.cli.bin, "generate", "--target", target, "--model", model, prompt_flag, prompt,
           "--max_tokens", str(MAX_TOKENS), *sampling, "--ids", *extra]
    p = subprocess.run(cmd, capture_output=True, timeout=120)
    out = p.stdout.decode("utf-8")  # strict: the CLI prints valid UTF-8
    err = p.stderr.decode("utf-8", errors="replace")
    if p.returncode != 0:
        return p.returncode, None, None, err
    head, _, ids_line = out.rstrip("\n").rpartition("\n")
    text, _, _ = head.rpartition("\nfinish_reason=")
    return 0, text, [int(t) for t in ids_line.split()], err + "\nstdout: %r" % out


def http(base, body):
    """(status, parsed JSON or SSE text) of POST /v1/completions."""
    req = urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            raw = r.read().decode("utf-8")
            return r.status, raw if body.get("stream") else json.loads(raw)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", errors="replace")


def streamed_text(sse):
    texts = []
    for line in sse.split("\n"):
        if line.startswith("data: ") and line != "data: [DONE]":
            for choice in json.loads(line[6:]).get("choices", []):
                texts.append(choice.get("text", ""))
    return "".join(texts)


def check_prompt(env, mc, target, base, vocab, prompt):
    c = env.c
    want_prompt = encode(prompt, vocab)
    rc, text, ids, err = cli_generate(env, target, "tiny", "--prompt", prompt)
    if not c.check(rc == 0 and len(ids) >= 1, "cli: text prompt %r is served" % prompt, err):
        return
    rc2, text2, ids2, err2 = cli_generate(env, target, "tiny", "--prompt_ids",
                                          ",".join(map(str, want_prompt)))
    c.check(rc2 == 0 and ids2 == ids,
            "cli: %r gives the ids of --prompt_ids %s" % (prompt, want_prompt),
            "    text: %s\n    ids:  %s\n%s" % (ids, ids2, err2))
    want = decode(ids, vocab)
    with mc.MeshserveClient(target) as client:
        chunks = list(client.generate("tiny", prompt=prompt, max_tokens=MAX_TOKENS,
                                      temperature=0))
    # A text prompt: the CLI prints text only (a chunk whose bytes are held
    # back prints nothing).
    c.check(text == want, "cli: the printed text of %r is its ids' bytes decoded" % prompt,
            "    got  %r\n    want %r" % (text, want))
    got_ids = [t for ch in chunks for t in ch.token_ids]
    got = "".join(ch.text for ch in chunks)
    c.check(got_ids == ids and got == want and chunks[-1].usage.prompt_tokens == len(want_prompt),
            "python: chunks of %r carry the text, %d prompt tokens" % (prompt, len(want_prompt)),
            "    got %r %s (usage %s)\n    want %r %s" % (got, got_ids, chunks[-1].usage, want, ids))
    body = {"model": "tiny", "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0,
            "return_token_ids": True}
    status, whole = http(base, body)
    ok = (status == 200 and whole["choices"][0]["text"] == want and
          whole["choices"][0].get("token_ids") == ids and
          whole["choices"][0].get("prompt_token_ids") == want_prompt)
    c.check(ok, "http: /v1/completions text, token_ids and prompt_token_ids of %r" % prompt, "    %s %r\n    want %r" % (
        status, whole, want))
    status, sse = http(base, dict(body, stream=True))
    c.check(status == 200 and streamed_text(sse) == want,
            "http: streamed text of %r" % prompt, "    %s %r\n    want %r" % (status, sse, want))


def stop_case(text_of, ids):
    """(stop, k, text before it): a two-character stop from the text of `ids`
    (no U+FFFD, first found after the start), the number of ids up to the first whose text completes it, and
    the text before its first occurrence; None when the text has none."""
    full = text_of(ids)
    for start in range(1, len(full) - 1):
        stop = full[start:start + 2]
        if "\ufffd" in stop or full.find(stop) < 1:  # some text before the cut
            continue
        k = next(k for k in range(1, len(ids) + 1) if stop in text_of(ids[:k]))
        return stop, k, full[:full.find(stop)]
    return None


def streamed_ids(sse):
    ids = []
    for line in sse.split("\n"):
        if line.startswith("data: ") and line != "data: [DONE]":
            for choice in json.loads(line[6:]).get("choices", []):
                ids += choice.get("token_ids") or []
    return ids


def find_stop_case(env, target, vocab):
    """(prompt, temperature, ids, stop case) of the first completion whose text
    has a stop to cut at (the random model's text is often all U+FFFD)."""
    tried = []
    for temperature in (0, 3, 10):
        for prompt in PROMPTS:
            rc, _, ids, err = cli_generate(env, target, "tiny", "--prompt", prompt,
                                           temperature=temperature)
            case = stop_case(lambda i: decode(i, vocab), ids or []) if rc == 0 else None
            if case is not None:
                return prompt, temperature, ids, case, tried
            tried.append((prompt, temperature, ids, decode(ids or [], vocab), err))
    return None, None, None, None, tried


def check_stop(env, mc, target, base, vocab):
    c = env.c
    prompt, temperature, ids, case, tried = find_stop_case(env, target, vocab)
    if not c.check(case is not None, "stop: a completion has a stop to cut at", str(tried)):
        return
    stop, k, want = case
    what = "stop %r after %d of %s (%r, temperature %s)" % (stop, k, ids, prompt, temperature)
    rc, text, got_ids, err = cli_generate(env, target, "tiny", "--prompt", prompt, "--stop", stop,
                                          temperature=temperature)
    c.check(rc == 0 and text == want and got_ids == ids[:k] and "finish_reason=stop" in err,
            "cli --stop: the text is cut before the stop, ids end at its token (%s)" % what,
            "    got %r %s\n    want %r %s\n%s" % (text, got_ids, want, ids[:k], err))
    with mc.MeshserveClient(target) as client:
        chunks = list(client.generate("tiny", prompt=prompt, max_tokens=MAX_TOKENS,
                                      temperature=temperature, seed=SEED, stop=[stop]))
    got = "".join(ch.text for ch in chunks)
    got_ids = [t for ch in chunks for t in ch.token_ids]
    c.check(got == want and got_ids == ids[:k] and chunks[-1].finish_reason == "stop" and
            chunks[-1].usage.completion_tokens == k,
            "python stop=: text, ids, finish_reason and usage (%s)" % what,
            "    got %r %s %s\n    want %r %s" % (got, got_ids, chunks[-1], want, ids[:k]))
    body = {"model": "tiny", "prompt": prompt, "max_tokens": MAX_TOKENS,
            "temperature": temperature, "seed": SEED, "return_token_ids": True, "stop": stop}
    status, whole = http(base, body)
    ok = (status == 200 and whole["choices"][0]["text"] == want and
          whole["choices"][0]["token_ids"] == ids[:k] and
          whole["choices"][0]["finish_reason"] == "stop" and
          whole["usage"]["completion_tokens"] == k)
    c.check(ok, "http stop: text, token_ids, finish_reason and usage (%s)" % what,
            "    %s %r\n    want %r" % (status, whole, want))
    status, sse = http(base, dict(body, stream=True))
    c.check(status == 200 and streamed_text(sse) == want and streamed_ids(sse) == ids[:k] and
            '"finish_reason": "stop"' in sse.replace('":"', '": "'),
            "http stop, streamed: the chunks join to the cut text (%s)" % what,
            "    %s %r\n    want %r" % (status, sse, want))


def check_sentencepiece(env, mc, target, base, sp):
    c = env.c
    for prompt in ("hello world", "the café model"):
        want_prompt = [sp.bos_id()] + sp.encode(prompt)
        body = {"model": "llama_sp", "prompt": prompt, "max_tokens": MAX_TOKENS,
                "temperature": 0, "return_token_ids": True}
        status, whole = http(base, body)
        if not c.check(status == 200 and whole["choices"][0]["prompt_token_ids"] == want_prompt,
                       "sentencepiece: prompt_token_ids of %r are [<s>] + sp.encode" % prompt,
                       "    %s %r\n    want %s" % (status, whole, want_prompt)):
            continue
        ids = whole["choices"][0]["token_ids"]
        want = sp_text(sp, ids)
        c.check(whole["choices"][0]["text"] == want,
                "sentencepiece: the text of %r's completion is its pieces' bytes" % prompt,
                "    got %r\n    want %r (ids %s)" % (whole["choices"][0]["text"], want, ids))
        status, sse = http(base, dict(body, stream=True))
        c.check(status == 200 and streamed_text(sse) == want and streamed_ids(sse) == ids,
                "sentencepiece: the streamed text of %r" % prompt,
                "    %s %r\n    want %r" % (status, sse, want))
        rc, _, cli_ids, err = cli_generate(env, target, "llama_sp", "--prompt_ids",
                                           ",".join(map(str, want_prompt)))
        c.check(rc == 0 and cli_ids == ids,
                "sentencepiece: --prompt_ids of the encoding give the same completion", err)


def check_refusals(env, target, base):
    c = env.c
    for model, phrase in (("bare", "no tokenizer"), ("broken_tok", "vocab.json")):
        rc, _, _, err = cli_generate(env, target, model, "--prompt", "hello")
        c.check(rc not in (0, 2) and "INVALID_ARGUMENT" in err and phrase in err,
                "cli: %s refuses a text prompt naming %r" % (model, phrase), err)
        status, body = http(base, {"model": model, "prompt": "hello", "max_tokens": 2})
        c.check(status == 400 and phrase in str(body),
                "http: %s answers 400 to a text prompt" % model, "    %s %s" % (status, body))
        rc, _, ids, err = cli_generate(env, target, model, "--prompt_ids", "1,2")
        c.check(rc == 0 and len(ids) >= 1, "cli: %s still serves id prompts" % model, err)
    status, body = http(base, {"model": "bare", "prompt": [1, 2], "max_tokens": 2, "stop": "x"})
    c.check(status == 400 and '"param": "stop"' in body.replace('":"', '": "') and
            "no tokenizer" in body,
            "http: stop strings for a model without a tokenizer are a 400 naming stop",
            "    %s %s" % (status, body))
    rc, _, _, err = cli_generate(env, target, "bare", "--prompt_ids", "1,2", "--stop", "x")
    c.check(rc not in (0, 2) and "INVALID_ARGUMENT" in err and "stop strings" in err,
            "cli: stop strings for a model without a tokenizer are INVALID_ARGUMENT", err)


def serve(env, state):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(env.bin_dir)), "python"))
    import meshserve_client as mc
    port = mslib.free_port()
    cluster = env.cluster(2, state["models"], "gentext", extra_args=["--http_port", str(port)])
    base = "http://127.0.0.1:%d" % port
    try:
        for prompt in PROMPTS:
            check_prompt(env, mc, cluster.target, base, state["vocab"], prompt)
        check_stop(env, mc, cluster.target, base, state["vocab"])
        check_sentencepiece(env, mc, cluster.target, base, state["sp"])
        check_refusals(env, cluster.target, base)
    finally:
        cluster.stop()


def stages(env):
    state = {}
    return [("import", lambda: prepare(env, state)), ("serve", lambda: serve(env, state))]


if __name__ == "__main__":
    sys.exit(e2e.main("generate_text", stages, doc=__doc__))
