#!/usr/bin/env python3
"""hpack_gen.py — builds HPACK's tables (hpack_tables.c) from the RFC 7541 text.

Reads hpack_huffman.txt (Appendix B as the RFC prints it) and hpack_static.tsv
(Appendix A), checks them, and writes one C file with:
  - the Huffman code per symbol (encoding),
  - a decoding state machine that eats 4 bits at a time: one state per
    internal node of the code tree, each with 16 transitions that say where
    to go, which symbol (at most one: the shortest code has 5 bits) to emit,
    whether the string may end there (the bits since the last symbol are a
    prefix of EOS of at most 7 bits, RFC 7541 §5.2) and whether EOS was hit,
  - the static table with a token per name,
  - the name -> token lookup (the static table's names and a few more) and
    each token's first static index.

Usage: hpack_gen.py hpack_huffman.txt hpack_static.tsv OUT.c

The output is checked in (hpack_tables.c beside this script), so building the
library needs no Python; tests/package/test_hpack_tables.py regenerates it and
fails where the copy differs. After changing this script or the RFC text, run
  python3 hpack_gen.py hpack_huffman.txt hpack_static.tsv hpack_tables.c
in this folder.
"""

import re
import sys

# Names outside the static table that HTTP/2 must recognise without comparing
# strings: the connection-specific fields RFC 9113 §8.2.2 forbids.
EXTRA_TOKENS = ["connection", "keep-alive", "proxy-connection", "te", "upgrade"]

ROW = re.compile(r"^\s*(?:'.' |EOS )?\(\s*(\d+)\)\s+\|([01|]+)\s+([0-9a-f]+)\s+\[\s*(\d+)\]\s*$")


def read_huffman(path):
    codes = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            m = ROW.match(line)
            if not m:
                sys.exit(f"{path}: not a row of RFC 7541 Appendix B: {line!r}")
            sym, bits, hexcode, length = int(m[1]), m[2].replace("|", ""), int(m[3], 16), int(m[4])
            if sym != len(codes) or len(bits) != length or int(bits, 2) != hexcode:
                sys.exit(f"{path}: row {sym} disagrees with itself: {line!r}")
            codes.append((hexcode, length))
    if len(codes) != 257:
        sys.exit(f"{path}: {len(codes)} symbols, RFC 7541 has 257")
    return codes


def read_static(path):
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            index, name, value = line.rstrip("\n").split("\t")
            if int(index) != len(rows) + 1:
                sys.exit(f"{path}: index {index} out of order")
            rows.append((name, value))
    if len(rows) != 61:
        sys.exit(f"{path}: {len(rows)} entries, RFC 7541 has 61")
    return rows


def build_tree(codes):
    """Internal nodes as [child0, child1]; a child is ('n', id) or ('s', symbol)."""
    nodes = [[None, None]]
    info = [(0, True)]  # (depth, all bits so far are ones)
    for sym, (code, length) in enumerate(codes):
        node = 0
        for i in range(length - 1, -1, -1):
            bit = (code >> i) & 1
            child = nodes[node][bit]
            if i == 0:
                if child is not None:
                    sys.exit(f"symbol {sym}: the code is not prefix-free")
                nodes[node][bit] = ("s", sym)
            else:
                if child is None:
                    nodes.append([None, None])
                    depth, ones = info[node]
                    info.append((depth + 1, ones and bit == 1))
                    child = ("n", len(nodes) - 1)
                    nodes[node][bit] = child
                elif child[0] != "n":
                    sys.exit(f"symbol {sym}: the code is not prefix-free")
                node = child[1]
    if any(c is None for n in nodes for c in n) or len(nodes) != 256:
        sys.exit("the code is not complete")
    return nodes, info


def transitions(nodes, info):
    table = []
    for state in range(len(nodes)):
        row = []
        for nibble in range(16):
            node, sym, fail = state, 0, False
            emitted = False
            for i in range(3, -1, -1):
                kind, val = nodes[node][(nibble >> i) & 1]
                if kind == "n":
                    node = val
                elif val == 256:
                    fail = True
                    break
                else:
                    sym, emitted, node = val, True, 0
            depth, ones = info[node]
            flags = 0
            if emitted:
                flags |= 1  # XHPACK_HUFF_EMIT
            if ones and depth <= 7 and not fail:
                flags |= 2  # XHPACK_HUFF_ACCEPT
            if fail:
                flags |= 4  # XHPACK_HUFF_FAIL
                node = 0
            row.append((node, flags, sym))
        table.append(row)
    return table


def token_id(name):
    return "XHPACK_TOKEN_" + name.lstrip(":").upper().replace("-", "_")


def c_string(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def main():
    huffman, static, out = sys.argv[1:4]
    codes = read_huffman(huffman)
    rows = read_static(static)
    nodes, info = build_tree(codes)
    table = transitions(nodes, info)
    names = list(dict.fromkeys([n for n, _ in rows] + EXTRA_TOKENS))

    o = [
        "/* hpack_tables.c — generated by hpack_gen.py from RFC 7541 Appendices A and B; do not edit. */",
        "/* clang-format off */",
        '#include "xhttp/http2/hpack_tables.h"',
        "",
        "#include <string.h>",
        "",
    ]
    o.append("const uint32_t xHpackHuffCode[257] = {")
    o += [f"    0x{c:x}," for c, _ in codes]
    o += ["};", "", "const uint8_t xHpackHuffLen[257] = {"]
    o += [f"    {n}," for _, n in codes]
    o += ["};", "", "const xHpackHuffStep xHpackHuffDecode[256][16] = {"]
    for row in table:
        o.append("    {" + ", ".join(f"{{{n}, {f}, {s}}}" for n, f, s in row) + "},")
    o += ["};", "", "const xHpackStaticEntry xHpackStatic[62] = {", "    {{0, 0}, {0, 0}, XHPACK_TOKEN_NONE},"]
    for name, value in rows:
        o.append(f"    {{{{{c_string(name)}, {len(name)}}}, {{{c_string(value)}, {len(value)}}}, {token_id(name)}}},")
    o += ["};", "", "const xStr xHpackTokenNames[XHPACK_TOKEN_COUNT] = {", '    {"", 0},']
    o += [f"    [{token_id(n)}] = {{{c_string(n)}, {len(n)}}}," for n in names]
    o += ["};", "", "const uint8_t xHpackTokenIndex[XHPACK_TOKEN_COUNT] = {"]
    first = {}
    for i, (name, _) in enumerate(rows, 1):
        first.setdefault(name, i)
    o += [f"    [{token_id(n)}] = {i}," for n, i in first.items()]
    o += ["};", "", "xHpackToken xHpackTokenOf(const char *name, size_t len) {", "    switch (len) {"]
    by_len = {}
    for n in names:
        by_len.setdefault(len(n), []).append(n)
    for length in sorted(by_len):
        o.append(f"    case {length}:")
        for n in by_len[length]:
            o.append(f"        if (memcmp(name, {c_string(n)}, {length}) == 0) return {token_id(n)};")
        o.append("        break;")
    o += ["    default: break;", "    }", "    return XHPACK_TOKEN_NONE;", "}", ""]
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n".join(o))


if __name__ == "__main__":
    main()
