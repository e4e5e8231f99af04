#!/usr/bin/python3
"""Writes common/tokenizer/testdata/utf8_replace_cases.txt: byte strings and
what Python's bytes.decode("utf-8", errors="replace") makes of them (the
reference for common/tokenizer/utf8.h's DecodeUtf8Lossy and its streaming form).

One case per line: "<input hex> <output hex>", "-" for an empty string.
Cases: hand-picked edges (overlongs, surrogates, truncated sequences,
> U+10FFFF, stray continuation bytes, C0/C1/F5..FF), every single byte, every
2-byte string with a lead byte C0..FF and a selection of second bytes, and
seeded random strings biased toward UTF-8-like bytes (3000, seed 20261205).

  /usr/bin/python3 tests/tokenizer/gen_utf8_cases.py > common/tokenizer/testdata/utf8_replace_cases.txt
"""
import random

EDGES = [
    b"", b"abc", "h\u00e9llo \u20ac \U0001F600".encode(),
    b"\xc0\xaf", b"\xc1\xbf", b"\xe0\x80\xaf", b"\xe0\x9f\xbf", b"\xf0\x80\x80\xaf",
    b"\xf0\x8f\xbf\xbf", b"\xf8\x88\x80\x80\x80", b"\xfc\x84\x80\x80\x80\x80",
    b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xed\xa0\x80\xed\xb0\x80", b"\xed\x9f\xbf",
    b"\xf4\x90\x80\x80", b"\xf4\x8f\xbf\xbf", b"\xf5\x80\x80\x80", b"\xff", b"\xfe\xff",
    b"\xe2\x82", b"\xe2", b"\xf0\x9f\x98", b"\xf0\x9f", b"\xf0", b"a\xe2\x82b",
    b"\xe2\x82\xe2\x82\xac", b"\x80", b"\x80\x80\x80", b"\xbf", b"\xc2", b"\xc2\x41",
    b"\xe1\x80\x41", b"\xf1\x80\x80\x41", b"\xf1\x80\x80", b"\xe0\xa0", b"\xe0\xa0\x80",
    b"\xef\xbf\xbd", b"\xef\xbf\xbf", b"\xf4\x80", b"\xc3\xa9\xc3", b"\x00\x7f\x80",
    b"\xe6\x97\xa5\xe6\x9c\xac", b"\xe6\x97\xa5\xe6\x9c", b"\xf0\x90\x80\x80",
    b"\xf3\xbf\xbf\xbf\xf4\x8f\xbf\xbf\xf4\x90",
]


def random_case(rng):
    pool = [0x41, 0x20, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF, 0xE0,
            0xE1, 0xEC, 0xED, 0xEE, 0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5, 0xFF]
    n = rng.randint(1, 12)
    out = bytearray()
    for _ in range(n):
        r = rng.random()
        if r < 0.5:
            out.append(rng.choice(pool))
        elif r < 0.75:
            out.append(rng.randint(0x80, 0xBF))
        elif r < 0.9:
            out += chr(rng.choice([rng.randint(0x80, 0x7FF), rng.randint(0x800, 0xFFFF),
                                   rng.randint(0x10000, 0x10FFFF)])).encode(
                                       "utf-8", errors="surrogatepass")
        else:
            out.append(rng.randint(0, 255))
    return bytes(out)


def main():
    cases = list(EDGES)
    cases += [bytes([b]) for b in range(256)]
    seconds = [0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xF4, 0xFF]
    cases += [bytes([a, b]) for a in range(0xC0, 0x100) for b in seconds]
    rng = random.Random(20261205)
    cases += [random_case(rng) for _ in range(3000)]
    for c in cases:
        out = c.decode("utf-8", errors="replace").encode("utf-8")
        print(f"{c.hex() or '-'} {out.hex() or '-'}")


if __name__ == "__main__":
    main()
