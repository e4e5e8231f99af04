#!/usr/bin/python3
"""meshserve's SentencePiece tokenizer against Python's sentencepiece.

Trains a small BPE SentencePiece model with byte fallback (as Llama's
tokenizer.model is) on a generated text in a temporary folder, lays it out as
a checkpoint's tokenizer folder three ways (tokenizer.model alone: BOS added,
the Llama default; with tokenizer_config.json add_bos_token false; with an
unreadable tokenizer.json beside it, as Llama 2 ships both), and runs
sentencepiece_reference_check on them. Checks, for every text (ASCII, runs of
spaces, newlines, accents, CJK and emoji outside the training text, so byte
fallback spells them):
  - ids == [bos] + sp.encode(text) (or without bos when the config says so);
  - the streamed text of the ids (each token's bytes through a UTF-8 stream
    decoder, as the completion edges do) == the text those tokens add after
    a prompt: sp.decode(prompt + ids)[len(sp.decode(prompt)):];
  - DecodeText(ids) == sp.decode(ids);
  - an id list of byte pieces that is not UTF-8 streams as Python's
    bytes.decode("utf-8", errors="replace").
Fails (does not skip) when python3-sentencepiece is missing.

  sentencepiece_reference_test.py --checker build/tests/sentencepiece_reference_check
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

import sentencepiece as spm

WORDS = ("the of and to in is was for on that with as by at from his her an were are which "
         "this be or has had not but what all when there can who been one more would other "
         "model shard worker mesh token cache stream café naïve über résumé").split()

TEXTS = [
    "Hello world",
    "the model and the mesh",
    "  two leading spaces and  inner  runs",
    "line one\nline two\n\nend",
    "café naïve über — résumé",
    "日本語のテキスト",
    "emoji 🙂 and Ω ≈ π",
    "tabs\tand\ttext",
    "mixed: 123 + 4.5 = 127.5!",
    "a",
    " ",
]


def corpus(rng):
    lines = []
    for _ in range(3000):
        lines.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 14))))
    return "\n".join(lines) + "\n"


def train(tmp):
    text_path = os.path.join(tmp, "corpus.txt")
    with open(text_path, "w", encoding="utf-8") as f:
        f.write(corpus(random.Random(20261205)))
    prefix = os.path.join(tmp, "spm")
    spm.SentencePieceTrainer.train(
        input=text_path, model_prefix=prefix, vocab_size=400, model_type="bpe",
        byte_fallback=True, character_coverage=1.0, bos_id=1, eos_id=2, unk_id=0,
        minloglevel=2)
    return prefix + ".model"


def folder(tmp, name, model_path, files):
    d = os.path.join(tmp, name)
    os.makedirs(d)
    with open(model_path, "rb") as src, open(os.path.join(d, "tokenizer.model"), "wb") as dst:
        dst.write(src.read())
    for fname, content in files.items():
        with open(os.path.join(d, fname), "w", encoding="utf-8") as f:
            f.write(content)
    return d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--checker", required=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model_path = train(tmp)
        sp = spm.SentencePieceProcessor(model_file=model_path)
        dirs = [
            folder(tmp, "default", model_path, {}),
            folder(tmp, "no_bos", model_path,
                   {"tokenizer_config.json": json.dumps({"add_bos_token": False})}),
            folder(tmp, "with_json", model_path,
                   {"tokenizer.json": json.dumps({"model": {"type": "Unigram"}})}),
        ]
        add_bos = [True, False, True]
        id_lists = [sp.encode(t) for t in TEXTS]
        bad = [sp.piece_to_id(p) for p in ("<0xE6>", "<0x97>", "<0xFF>")]
        assert all(sp.is_byte(i) for i in bad), bad
        id_lists.append(bad + sp.encode("ok"))
        request = json.dumps({"dirs": dirs, "texts": TEXTS, "id_lists": id_lists})
        r = subprocess.run([args.checker], input=request, capture_output=True, text=True,
                           timeout=120)
        if r.returncode != 0:
            print(r.stdout, r.stderr, file=sys.stderr)
            print("FAIL: the checker failed", file=sys.stderr)
            return 1
        got = json.loads(r.stdout)
        failures = []
        prompt = sp.encode("x")
        byte_fallback_texts = 0
        for d, bos, out in zip(dirs, add_bos, got["dirs"]):
            name = os.path.basename(d)
            for key, want in (("vocab_size", sp.get_piece_size()), ("bos", sp.bos_id()),
                              ("eos", sp.eos_id()), ("add_bos", bos), ("is_sentencepiece", True)):
                if out[key] != want:
                    failures.append(f"{name}: {key} {out[key]!r}, want {want!r}")
            for text, ids in zip(TEXTS, out["encode"]):
                want = ([sp.bos_id()] if bos else []) + sp.encode(text)
                if ids != want:
                    failures.append(f"{name}: encode {text!r}: {ids}, want {want}")
            for i, ids in enumerate(id_lists):
                whole = sp.decode(prompt + ids)
                if i < len(TEXTS):
                    want_stream = whole[len(sp.decode(prompt)):]
                    if any(sp.is_byte(t) for t in ids):
                        byte_fallback_texts += 1
                else:  # the invalid bytes: Python's errors="replace"
                    raw = b"".join(bytes([int(sp.id_to_piece(t)[3:5], 16)]) for t in bad)
                    want_stream = raw.decode("utf-8", errors="replace") + sp.decode(
                        prompt + sp.encode("ok"))[len(sp.decode(prompt)):]
                if out["stream"][i] != want_stream:
                    failures.append(f"{name}: stream of {ids}: {out['stream'][i]!r}, "
                                    f"want {want_stream!r}")
                if i < len(TEXTS) and out["decode_text"][i] != sp.decode(ids):
                    failures.append(f"{name}: decode_text of {ids}: {out['decode_text'][i]!r}, "
                                    f"want {sp.decode(ids)!r}")
        if byte_fallback_texts == 0:
            failures.append("no text used byte fallback: the test lost its unicode coverage")
        for f in failures[:20]:
            print("MISMATCH", f, file=sys.stderr)
        n = len(TEXTS)
        print(f"{len(dirs)} folders x {n} texts, {len(id_lists)} id lists, "
              f"vocab {sp.get_piece_size()}, {len(failures)} mismatches")
        if failures:
            print("FAIL", file=sys.stderr)
            return 1
        print("PASS")
        return 0


if __name__ == "__main__":
    sys.exit(main())
