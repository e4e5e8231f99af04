#!/usr/bin/env python3
"""Writes common/tokenizer/testdata/pretokenizer_cases.jsonl: seeded random
strings and how the GPT-2 and Llama 3 pre-tokenizer regexes split them, as the
`regex` module (the engine GPT-2's encoder.py uses) finds them. The reference
for common/tokenizer/pretokenizer.h's hand-written matchers.

Needs a Python with the `regex` module (the python3 on this machine's PATH has
it; Debian's /usr/bin/python3 does not):
  python3 tests/tokenizer/gen_pretokenizer_cases.py > common/tokenizer/testdata/pretokenizer_cases.jsonl

Characters are drawn from an alphabet whose classes are the same in every
Unicode version since 6 (so the tables' Unicode 14 and regex's newer Unicode
agree): ASCII letters, digits and punctuation, apostrophes and contraction
letters, spaces, tabs, \\r, \\n, U+00A0, U+3000, accented Latin, Greek,
Cyrillic, CJK, Hangul, superscript and Roman-numeral numbers, Arabic-Indic
digits, and emoji.
"""
import json
import random
import sys

import regex

GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3 = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"""
          r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")

ALPHABET = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") +
            list("!\"#$%&()*+,-./:;<=>?@[\\]^_`{|}~") + ["'"] * 6 + list("sStTdDmMlLrReEvV") +
            [" "] * 12 + ["\t", "\r", "\n", "\n", "\u00a0", "\u3000"] +
            list("éÉàçñüßøÅ") + list("αβγΩ") + list("жЖщ") + list("日本語中文") + list("한국") +
            list("²³½Ⅻ") + list("٣٤") + ["\U0001F600", "\U0001F44D", "\u2014", "\u20ac"])


def main():
    rng = random.Random(20261205)
    cases = []
    for _ in range(1000):
        n = rng.randint(1, 40)
        text = "".join(rng.choice(ALPHABET) for _ in range(n))
        cases.append({"text": text, "gpt2": regex.findall(GPT2, text),
                      "llama3": regex.findall(LLAMA3, text)})
    for case in cases:
        sys.stdout.write(json.dumps(case, ensure_ascii=False, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
