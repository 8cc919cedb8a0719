"""Seeds for fuzz_pg_replies: a real PostgreSQL's replies to the batches the
harness's pool sends (its statements, parameters and batching, written here
by hand in the protocol's terms), each after the mode byte that makes the
harness send them. Starts a PostgreSQL as tests/integration does, loaded with
the arena's seed.
    python3 tests/fuzz/capture_pg_replies.py tests/fuzz/corpus/fuzz_pg_replies"""

import os
import socket
import struct
import sys
import types

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
from support.postgres import Postgres  # noqa: E402

ITEM = "SELECT id, name, category, price, quantity, active, tags, rating_score, rating_count FROM items WHERE id = $1"
PRICE = (
    "SELECT id, name, category, price, quantity, active, tags, rating_score, rating_count FROM items "
    "WHERE price BETWEEN $1 AND $2 LIMIT $3"
)
STATEMENTS = {
    "item_by_id": ITEM,
    "items_by_price": PRICE,
    "update_item": "UPDATE items SET name = $2, price = $3, quantity = $4 WHERE id = $1",
    "fortunes": "SELECT id, message FROM fortune",
}
UPDATE = ["7", "renamed", "120", "3"]


def message(kind, body=b""):
    return kind + struct.pack("!I", len(body) + 4) + body


def cstr(text):
    return text.encode() + b"\0"


def query(name, params, prepare=True):
    """Parse (and Describe) where the pool prepares, Bind and Execute, as the pool writes them."""
    out = b""
    if name in ("BEGIN", "COMMIT", "ROLLBACK"):
        out += message(b"P", cstr("") + cstr(name) + b"\0\0")
        name = ""
    elif prepare:
        out += message(b"P", cstr(name) + cstr(STATEMENTS[name]) + b"\0\0")
        out += message(b"D", b"S" + cstr(name))
    body = b"\0" + cstr(name) + b"\0\0" + struct.pack("!H", len(params))
    for p in params:
        body += struct.pack("!i", len(p)) + p.encode()
    return out + message(b"B", body + b"\0\0") + message(b"E", b"\0\0\0\0\0")


def read_batch(sock):
    """The server's bytes up to and with its ReadyForQuery."""
    data = b""
    while True:
        at = 0
        while len(data) - at >= 5:
            n = struct.unpack("!I", data[at + 1 : at + 5])[0]
            if len(data) - at < 1 + n:
                break
            if data[at : at + 1] == b"Z":
                return data
            at += 1 + n
        piece = sock.recv(65536)
        if not piece:
            raise SystemExit("the server closed the connection")
        data += piece


def session(port, batches):
    sock = socket.create_connection(("127.0.0.1", port))
    startup = struct.pack("!I", 196608) + cstr("user") + cstr("postgres") + cstr("database") + cstr("postgres") + b"\0"
    sock.sendall(struct.pack("!I", len(startup) + 4) + startup)
    read_batch(sock)
    reply = b""
    for batch in batches:
        sock.sendall(batch + message(b"S"))
        reply += read_batch(sock)
    sock.close()
    return reply


def main():
    out = sys.argv[1]
    cleanups = []
    scope = types.SimpleNamespace(addCleanup=lambda f, *a, **k: cleanups.append((f, a, k)))
    try:
        pg = Postgres(scope)
        pg.seed(items=100, fortunes=20, users=10)

        def seed(name, mode, batches):
            with open(os.path.join(out, name), "wb") as f:
                f.write(bytes([mode]) + session(pg.port, batches))

        at_once = 3 << 2
        seed("real-item-0", 0, [query("item_by_id", ["42"])])
        seed("real-item-3", at_once, [query("item_by_id", ["42"])])
        seed("real-item-none", at_once, [query("item_by_id", ["100000"])])
        batch = (
            query("item_by_id", ["42"])
            + query("items_by_price", ["10", "50", "3"])
            + query("update_item", UPDATE)
            + query("fortunes", [])
        )
        seed("real-batch", 1 | at_once, [batch])
        # The limit is no number: the server skips the rest; the pool sends the others again.
        failed = (
            query("item_by_id", ["42"])
            + query("items_by_price", ["10", "50", "x"])
            + query("update_item", UPDATE)
            + query("fortunes", [])
        )
        again = query("item_by_id", ["42"], False) + query("update_item", UPDATE) + query("fortunes", [])
        seed("real-batch-failed", 1 | at_once, [failed, again])
        tx = query("item_by_id", ["7"]) + query("update_item", UPDATE) + query("COMMIT", [])
        seed("real-tx", 2 | at_once, [query("BEGIN", []), tx])
        failed = query("item_by_id", ["7"]) + query("update_item", ["x", "renamed", "120", "3"]) + query("COMMIT", [])
        seed("real-tx-failed", 2 | at_once, [query("BEGIN", []), failed])
        seed("real-tx-cancelled", 2 | 16 | at_once, [query("BEGIN", []), query("ROLLBACK", [])])
        second = query("items_by_price", ["10", "50", "3"]) + query("fortunes", [])
        seed("real-two-batches", 3 | at_once, [query("item_by_id", ["42"]), second])
    finally:
        for f, a, k in reversed(cleanups):
            f(*a, **k)


if __name__ == "__main__":
    main()
