"""A small raw HTTP/2 client (RFC 9113) for xKit's integration tests.

Frames are built and parsed by hand so a test can send exactly what it wants,
well-formed or hostile, and see exactly what the server answers. The HPACK
encoder only writes "literal header field without indexing, new name" (RFC
7541 §6.2.2) with raw strings: always valid, never stateful. The decoder takes
everything a server may send: static and dynamic tables, size updates and
Huffman-coded strings.

Every socket operation has a timeout; a server that goes quiet fails a test
with what was received so far instead of hanging it.
"""

import base64
import email.utils
import select
import socket
import struct
import threading
import time

from .harness import IMF_FIXDATE_RE, SOCKET_TIMEOUT, Response, ServerTestCase, run_client

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

# Frame types (RFC 9113 §6).
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
FRAME_NAMES = [
    "DATA",
    "HEADERS",
    "PRIORITY",
    "RST_STREAM",
    "SETTINGS",
    "PUSH_PROMISE",
    "PING",
    "GOAWAY",
    "WINDOW_UPDATE",
    "CONTINUATION",
]

# Flags.
END_STREAM = 0x1
ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY_FLAG = 0x20

# Settings (RFC 9113 §6.5.2).
HEADER_TABLE_SIZE = 0x1
ENABLE_PUSH = 0x2
MAX_CONCURRENT_STREAMS = 0x3
INITIAL_WINDOW_SIZE = 0x4
MAX_FRAME_SIZE = 0x5
MAX_HEADER_LIST_SIZE = 0x6

# Error codes (RFC 9113 §7).
ERROR_NAMES = [
    "NO_ERROR",
    "PROTOCOL_ERROR",
    "INTERNAL_ERROR",
    "FLOW_CONTROL_ERROR",
    "SETTINGS_TIMEOUT",
    "STREAM_CLOSED",
    "FRAME_SIZE_ERROR",
    "REFUSED_STREAM",
    "CANCEL",
    "COMPRESSION_ERROR",
    "CONNECT_ERROR",
    "ENHANCE_YOUR_CALM",
    "INADEQUATE_SECURITY",
    "HTTP_1_1_REQUIRED",
]
(
    NO_ERROR,
    PROTOCOL_ERROR,
    INTERNAL_ERROR,
    FLOW_CONTROL_ERROR,
    SETTINGS_TIMEOUT,
    STREAM_CLOSED,
    FRAME_SIZE_ERROR,
    REFUSED_STREAM,
    CANCEL,
    COMPRESSION_ERROR,
    CONNECT_ERROR,
    ENHANCE_YOUR_CALM,
    INADEQUATE_SECURITY,
    HTTP_1_1_REQUIRED,
) = range(14)

DEFAULT_WINDOW = 65535
DEFAULT_MAX_FRAME = 16384
MAX_WINDOW = (1 << 31) - 1


def error_name(code):
    if code is None:
        return "none"
    return ERROR_NAMES[code] if code < len(ERROR_NAMES) else f"0x{code:x}"


# ---- Frames ----


class Frame:
    __slots__ = ("type", "flags", "stream_id", "payload")

    def __init__(self, ftype, flags, stream_id, payload):
        self.type = ftype
        self.flags = flags
        self.stream_id = stream_id
        self.payload = payload

    def has(self, flag):
        return bool(self.flags & flag)

    def error_code(self):
        """The error code of an RST_STREAM or GOAWAY."""
        if self.type == RST_STREAM:
            return struct.unpack(">I", self.payload[:4])[0]
        if self.type == GOAWAY:
            return struct.unpack(">I", self.payload[4:8])[0]
        raise ValueError(f"{self!r} carries no error code")

    def goaway_last_stream(self):
        return struct.unpack(">I", self.payload[:4])[0] & MAX_WINDOW

    def settings(self):
        """A SETTINGS payload as {id: value}."""
        if len(self.payload) % 6:
            raise AssertionError(f"SETTINGS payload of {len(self.payload)} bytes")
        return dict(struct.unpack(">HI", self.payload[i : i + 6]) for i in range(0, len(self.payload), 6))

    def window_increment(self):
        return struct.unpack(">I", self.payload)[0] & MAX_WINDOW

    def __repr__(self):
        name = FRAME_NAMES[self.type] if self.type < len(FRAME_NAMES) else f"type{self.type}"
        extra = ""
        if self.type in (RST_STREAM, GOAWAY) and len(self.payload) >= 4 + 4 * (self.type == GOAWAY):
            extra = f" {error_name(self.error_code())}"
            if self.type == GOAWAY:
                extra += f" last={self.goaway_last_stream()} debug={bytes(self.payload[8:80])!r}"
        return f"<{name} stream={self.stream_id} flags=0x{self.flags:x} len={len(self.payload)}{extra}>"


def frame(ftype, flags, stream_id, payload=b""):
    """One frame on the wire."""
    return (
        struct.pack(">I", len(payload))[1:]
        + bytes([ftype, flags])
        + struct.pack(">I", stream_id & MAX_WINDOW)
        + payload
    )


def settings_frame(settings=(), ack=False):
    items = settings.items() if isinstance(settings, dict) else settings
    return frame(SETTINGS, ACK if ack else 0, 0, b"".join(struct.pack(">HI", k, v) for k, v in items))


def ping_frame(data=b"\0" * 8, ack=False):
    return frame(PING, ACK if ack else 0, 0, data)


def goaway_frame(last_stream_id, code, debug=b""):
    return frame(GOAWAY, 0, 0, struct.pack(">II", last_stream_id, code) + debug)


def rst_stream_frame(stream_id, code):
    return frame(RST_STREAM, 0, stream_id, struct.pack(">I", code))


def window_update_frame(stream_id, increment):
    return frame(WINDOW_UPDATE, 0, stream_id, struct.pack(">I", increment))


def priority_frame(stream_id, depends_on, weight=16, exclusive=False):
    return frame(PRIORITY, 0, stream_id, struct.pack(">IB", depends_on | (exclusive << 31), weight - 1))


def data_frame(stream_id, data, end_stream=False, padding=0):
    """A DATA frame; padding > 0 adds a pad length byte and that many zeros."""
    flags = END_STREAM if end_stream else 0
    if padding:
        return frame(DATA, flags | PADDED, stream_id, bytes([padding]) + data + b"\0" * padding)
    return frame(DATA, flags, stream_id, data)


def headers_frame(stream_id, block, end_stream=True, end_headers=True):
    flags = (END_STREAM if end_stream else 0) | (END_HEADERS if end_headers else 0)
    return frame(HEADERS, flags, stream_id, block)


def continuation_frame(stream_id, block, end_headers=True):
    return frame(CONTINUATION, END_HEADERS if end_headers else 0, stream_id, block)


def request_headers(method, path, authority="localhost", scheme="http", headers=()):
    """The pseudo-headers of a request followed by `headers`, as (bytes, bytes)."""
    fields = [(":method", method), (":scheme", scheme), (":authority", authority), (":path", path)]
    return [(_b(n), _b(v)) for n, v in [*fields, *headers]]


def _b(value):
    return value if isinstance(value, bytes) else str(value).encode("latin-1")


# ---- HPACK (RFC 7541) ----


class HpackError(AssertionError):
    pass


def encode_integer(value, prefix_bits, first_byte=0):
    """An HPACK integer with an N-bit prefix; first_byte holds the bits above it."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first_byte | value])
    out = bytearray([first_byte | limit])
    value -= limit
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    out.append(value)
    return bytes(out)


def _encode_string(data):
    return encode_integer(len(data), 7) + data


def hpack_encode(headers):
    """A header block of literal-without-indexing, new-name fields, no Huffman."""
    return b"".join(b"\x00" + _encode_string(_b(name)) + _encode_string(_b(value)) for name, value in headers)


def hpack_insert(name, value):
    """A literal field with incremental indexing, new name, no Huffman: the peer's
    decoder adds it to its dynamic table (index 62, the newest, refers to it next)."""
    return b"\x40" + _encode_string(_b(name)) + _encode_string(_b(value))


STATIC_TABLE = [
    (b":authority", b""),
    (b":method", b"GET"),
    (b":method", b"POST"),
    (b":path", b"/"),
    (b":path", b"/index.html"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"200"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"304"),
    (b":status", b"400"),
    (b":status", b"404"),
    (b":status", b"500"),
    (b"accept-charset", b""),
    (b"accept-encoding", b"gzip, deflate"),
    (b"accept-language", b""),
    (b"accept-ranges", b""),
    (b"accept", b""),
    (b"access-control-allow-origin", b""),
    (b"age", b""),
    (b"allow", b""),
    (b"authorization", b""),
    (b"cache-control", b""),
    (b"content-disposition", b""),
    (b"content-encoding", b""),
    (b"content-language", b""),
    (b"content-length", b""),
    (b"content-location", b""),
    (b"content-range", b""),
    (b"content-type", b""),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"expect", b""),
    (b"expires", b""),
    (b"from", b""),
    (b"host", b""),
    (b"if-match", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"if-range", b""),
    (b"if-unmodified-since", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"max-forwards", b""),
    (b"proxy-authenticate", b""),
    (b"proxy-authorization", b""),
    (b"range", b""),
    (b"referer", b""),
    (b"refresh", b""),
    (b"retry-after", b""),
    (b"server", b""),
    (b"set-cookie", b""),
    (b"strict-transport-security", b""),
    (b"transfer-encoding", b""),
    (b"user-agent", b""),
    (b"vary", b""),
    (b"via", b""),
    (b"www-authenticate", b""),
]

# RFC 7541 Appendix B: (code, length in bits) for symbols 0..255 and EOS (256).
HUFFMAN_CODES = [
    (0x1FF8, 13),
    (0x7FFFD8, 23),
    (0xFFFFFE2, 28),
    (0xFFFFFE3, 28),
    (0xFFFFFE4, 28),
    (0xFFFFFE5, 28),
    (0xFFFFFE6, 28),
    (0xFFFFFE7, 28),
    (0xFFFFFE8, 28),
    (0xFFFFEA, 24),
    (0x3FFFFFFC, 30),
    (0xFFFFFE9, 28),
    (0xFFFFFEA, 28),
    (0x3FFFFFFD, 30),
    (0xFFFFFEB, 28),
    (0xFFFFFEC, 28),
    (0xFFFFFED, 28),
    (0xFFFFFEE, 28),
    (0xFFFFFEF, 28),
    (0xFFFFFF0, 28),
    (0xFFFFFF1, 28),
    (0xFFFFFF2, 28),
    (0x3FFFFFFE, 30),
    (0xFFFFFF3, 28),
    (0xFFFFFF4, 28),
    (0xFFFFFF5, 28),
    (0xFFFFFF6, 28),
    (0xFFFFFF7, 28),
    (0xFFFFFF8, 28),
    (0xFFFFFF9, 28),
    (0xFFFFFFA, 28),
    (0xFFFFFFB, 28),
    (0x14, 6),
    (0x3F8, 10),
    (0x3F9, 10),
    (0xFFA, 12),  # ' ' ! " #
    (0x1FF9, 13),
    (0x15, 6),
    (0xF8, 8),
    (0x7FA, 11),  # $ % & '
    (0x3FA, 10),
    (0x3FB, 10),
    (0xF9, 8),
    (0x7FB, 11),  # ( ) * +
    (0xFA, 8),
    (0x16, 6),
    (0x17, 6),
    (0x18, 6),  # , - . /
    (0x0, 5),
    (0x1, 5),
    (0x2, 5),
    (0x19, 6),  # 0 1 2 3
    (0x1A, 6),
    (0x1B, 6),
    (0x1C, 6),
    (0x1D, 6),  # 4 5 6 7
    (0x1E, 6),
    (0x1F, 6),
    (0x5C, 7),
    (0xFB, 8),  # 8 9 : ;
    (0x7FFC, 15),
    (0x20, 6),
    (0xFFB, 12),
    (0x3FC, 10),  # < = > ?
    (0x1FFA, 13),
    (0x21, 6),
    (0x5D, 7),
    (0x5E, 7),  # @ A B C
    (0x5F, 7),
    (0x60, 7),
    (0x61, 7),
    (0x62, 7),  # D E F G
    (0x63, 7),
    (0x64, 7),
    (0x65, 7),
    (0x66, 7),  # H I J K
    (0x67, 7),
    (0x68, 7),
    (0x69, 7),
    (0x6A, 7),  # L M N O
    (0x6B, 7),
    (0x6C, 7),
    (0x6D, 7),
    (0x6E, 7),  # P Q R S
    (0x6F, 7),
    (0x70, 7),
    (0x71, 7),
    (0x72, 7),  # T U V W
    (0xFC, 8),
    (0x73, 7),
    (0xFD, 8),
    (0x1FFB, 13),  # X Y Z [
    (0x7FFF0, 19),
    (0x1FFC, 13),
    (0x3FFC, 14),
    (0x22, 6),  # \ ] ^ _
    (0x7FFD, 15),
    (0x3, 5),
    (0x23, 6),
    (0x4, 5),  # ` a b c
    (0x24, 6),
    (0x5, 5),
    (0x25, 6),
    (0x26, 6),  # d e f g
    (0x27, 6),
    (0x6, 5),
    (0x74, 7),
    (0x75, 7),  # h i j k
    (0x28, 6),
    (0x29, 6),
    (0x2A, 6),
    (0x7, 5),  # l m n o
    (0x2B, 6),
    (0x76, 7),
    (0x2C, 6),
    (0x8, 5),  # p q r s
    (0x9, 5),
    (0x2D, 6),
    (0x77, 7),
    (0x78, 7),  # t u v w
    (0x79, 7),
    (0x7A, 7),
    (0x7B, 7),
    (0x7FFE, 15),  # x y z {
    (0x7FC, 11),
    (0x3FFD, 14),
    (0x1FFD, 13),
    (0xFFFFFFC, 28),  # | } ~ DEL
    (0xFFFE6, 20),
    (0x3FFFD2, 22),
    (0xFFFE7, 20),
    (0xFFFE8, 20),
    (0x3FFFD3, 22),
    (0x3FFFD4, 22),
    (0x3FFFD5, 22),
    (0x7FFFD9, 23),
    (0x3FFFD6, 22),
    (0x7FFFDA, 23),
    (0x7FFFDB, 23),
    (0x7FFFDC, 23),
    (0x7FFFDD, 23),
    (0x7FFFDE, 23),
    (0xFFFFEB, 24),
    (0x7FFFDF, 23),
    (0xFFFFEC, 24),
    (0xFFFFED, 24),
    (0x3FFFD7, 22),
    (0x7FFFE0, 23),
    (0xFFFFEE, 24),
    (0x7FFFE1, 23),
    (0x7FFFE2, 23),
    (0x7FFFE3, 23),
    (0x7FFFE4, 23),
    (0x1FFFDC, 21),
    (0x3FFFD8, 22),
    (0x7FFFE5, 23),
    (0x3FFFD9, 22),
    (0x7FFFE6, 23),
    (0x7FFFE7, 23),
    (0xFFFFEF, 24),
    (0x3FFFDA, 22),
    (0x1FFFDD, 21),
    (0xFFFE9, 20),
    (0x3FFFDB, 22),
    (0x3FFFDC, 22),
    (0x7FFFE8, 23),
    (0x7FFFE9, 23),
    (0x1FFFDE, 21),
    (0x7FFFEA, 23),
    (0x3FFFDD, 22),
    (0x3FFFDE, 22),
    (0xFFFFF0, 24),
    (0x1FFFDF, 21),
    (0x3FFFDF, 22),
    (0x7FFFEB, 23),
    (0x7FFFEC, 23),
    (0x1FFFE0, 21),
    (0x1FFFE1, 21),
    (0x3FFFE0, 22),
    (0x1FFFE2, 21),
    (0x7FFFED, 23),
    (0x3FFFE1, 22),
    (0x7FFFEE, 23),
    (0x7FFFEF, 23),
    (0xFFFEA, 20),
    (0x3FFFE2, 22),
    (0x3FFFE3, 22),
    (0x3FFFE4, 22),
    (0x7FFFF0, 23),
    (0x3FFFE5, 22),
    (0x3FFFE6, 22),
    (0x7FFFF1, 23),
    (0x3FFFFE0, 26),
    (0x3FFFFE1, 26),
    (0xFFFEB, 20),
    (0x7FFF1, 19),
    (0x3FFFE7, 22),
    (0x7FFFF2, 23),
    (0x3FFFE8, 22),
    (0x1FFFFEC, 25),
    (0x3FFFFE2, 26),
    (0x3FFFFE3, 26),
    (0x3FFFFE4, 26),
    (0x7FFFFDE, 27),
    (0x7FFFFDF, 27),
    (0x3FFFFE5, 26),
    (0xFFFFF1, 24),
    (0x1FFFFED, 25),
    (0x7FFF2, 19),
    (0x1FFFE3, 21),
    (0x3FFFFE6, 26),
    (0x7FFFFE0, 27),
    (0x7FFFFE1, 27),
    (0x3FFFFE7, 26),
    (0x7FFFFE2, 27),
    (0xFFFFF2, 24),
    (0x1FFFE4, 21),
    (0x1FFFE5, 21),
    (0x3FFFFE8, 26),
    (0x3FFFFE9, 26),
    (0xFFFFFFD, 28),
    (0x7FFFFE3, 27),
    (0x7FFFFE4, 27),
    (0x7FFFFE5, 27),
    (0xFFFEC, 20),
    (0xFFFFF3, 24),
    (0xFFFED, 20),
    (0x1FFFE6, 21),
    (0x3FFFE9, 22),
    (0x1FFFE7, 21),
    (0x1FFFE8, 21),
    (0x7FFFF3, 23),
    (0x3FFFEA, 22),
    (0x3FFFEB, 22),
    (0x1FFFFEE, 25),
    (0x1FFFFEF, 25),
    (0xFFFFF4, 24),
    (0xFFFFF5, 24),
    (0x3FFFFEA, 26),
    (0x7FFFF4, 23),
    (0x3FFFFEB, 26),
    (0x7FFFFE6, 27),
    (0x3FFFFEC, 26),
    (0x3FFFFED, 26),
    (0x7FFFFE7, 27),
    (0x7FFFFE8, 27),
    (0x7FFFFE9, 27),
    (0x7FFFFEA, 27),
    (0x7FFFFEB, 27),
    (0xFFFFFFE, 28),
    (0x7FFFFEC, 27),
    (0x7FFFFED, 27),
    (0x7FFFFEE, 27),
    (0x7FFFFEF, 27),
    (0x7FFFFF0, 27),
    (0x3FFFFEE, 26),
    (0x3FFFFFFF, 30),  # EOS
]
HUFFMAN_EOS = 256
_HUFFMAN_LOOKUP = {(bits, code): sym for sym, (code, bits) in enumerate(HUFFMAN_CODES)}


def huffman_decode(data):
    """Decodes a Huffman-coded string; padding must be under 8 one-bits."""
    out = bytearray()
    code = bits = 0
    lookup = _HUFFMAN_LOOKUP
    for byte in data:
        for shift in range(7, -1, -1):
            code = (code << 1) | ((byte >> shift) & 1)
            bits += 1
            sym = lookup.get((bits, code))
            if sym is not None:
                if sym == HUFFMAN_EOS:
                    raise HpackError("EOS symbol inside a Huffman string")
                out.append(sym)
                code = bits = 0
            elif bits > 30:
                raise HpackError("invalid Huffman code")
    if bits > 7 or code != (1 << bits) - 1:
        raise HpackError(f"invalid Huffman padding ({bits} bits 0x{code:x})")
    return bytes(out)


def huffman_encode(data):
    """Huffman-codes a string, padded with the EOS prefix (for decoder checks)."""
    value = bits = 0
    for byte in data:
        code, length = HUFFMAN_CODES[byte]
        value = (value << length) | code
        bits += length
    pad = -bits % 8
    value = (value << pad) | ((1 << pad) - 1)
    return value.to_bytes((bits + pad) // 8, "big")


class HpackDecoder:
    """Decodes header blocks, keeping the dynamic table across them."""

    def __init__(self, max_table_size=4096):
        self.max_allowed = max_table_size  # what we announced (SETTINGS_HEADER_TABLE_SIZE)
        self.max_size = max_table_size
        self.table = []  # newest first
        self.size = 0

    def _evict(self):
        while self.size > self.max_size:
            name, value = self.table.pop()
            self.size -= len(name) + len(value) + 32

    def _add(self, name, value):
        self.table.insert(0, (name, value))
        self.size += len(name) + len(value) + 32
        self._evict()

    def _entry(self, index):
        if index == 0:
            raise HpackError("header index 0")
        if index <= len(STATIC_TABLE):
            return STATIC_TABLE[index - 1]
        pos = index - len(STATIC_TABLE) - 1
        if pos >= len(self.table):
            raise HpackError(f"header index {index} beyond the dynamic table ({len(self.table)})")
        return self.table[pos]

    @staticmethod
    def _integer(block, pos, prefix_bits):
        if pos >= len(block):
            raise HpackError("header block ends inside an integer")
        limit = (1 << prefix_bits) - 1
        value = block[pos] & limit
        pos += 1
        if value < limit:
            return value, pos
        shift = 0
        while True:
            if pos >= len(block):
                raise HpackError("header block ends inside an integer")
            byte = block[pos]
            pos += 1
            value += (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value, pos
            if shift > 28:
                raise HpackError("HPACK integer too large")

    def _string(self, block, pos):
        huffman = pos < len(block) and bool(block[pos] & 0x80)
        length, pos = self._integer(block, pos, 7)
        if pos + length > len(block):
            raise HpackError("header block ends inside a string")
        raw = bytes(block[pos : pos + length])
        return (huffman_decode(raw) if huffman else raw), pos + length

    def decode(self, block):
        """[(name, value)] as bytes, in order."""
        headers = []
        pos = 0
        while pos < len(block):
            byte = block[pos]
            if byte & 0x80:  # indexed
                index, pos = self._integer(block, pos, 7)
                headers.append(self._entry(index))
                continue
            if byte & 0xE0 == 0x20:  # dynamic table size update
                if headers:
                    raise HpackError("table size update after a header field")
                size, pos = self._integer(block, pos, 5)
                if size > self.max_allowed:
                    raise HpackError(f"table size update to {size} > {self.max_allowed}")
                self.max_size = size
                self._evict()
                continue
            indexing = bool(byte & 0x40)
            index, pos = self._integer(block, pos, 6 if indexing else 4)
            if index:
                name = self._entry(index)[0]
            else:
                name, pos = self._string(block, pos)
            value, pos = self._string(block, pos)
            if indexing:
                self._add(name, value)
            headers.append((name, value))
        return headers


# ---- Streams and responses ----


class Stream:
    """What the client saw of one stream."""

    def __init__(self, stream_id, send_window):
        self.id = stream_id
        self.send_window = send_window
        self.header_blocks = []  # decoded blocks: informational, final, trailers
        self.body = bytearray()
        self.data_frames = 0
        self.unacked = 0  # received bytes not yet returned by WINDOW_UPDATE
        self.ended = False  # END_STREAM received
        self.reset_code = None  # RST_STREAM received

    @property
    def closed(self):
        return self.ended or self.reset_code is not None

    @property
    def final_headers(self):
        for block in self.header_blocks:
            status = dict(block).get(b":status")
            if status is not None and not status.startswith(b"1"):
                return block
        return None

    def response(self):
        """The final response as a harness.Response (version "HTTP/2"); None
        before its HEADERS arrived. Pseudo-headers are kept apart in .pseudo."""
        block = self.final_headers
        if block is None:
            return None
        pseudo = {n.decode(): v.decode("latin-1") for n, v in block if n.startswith(b":")}
        headers = [(n.decode("latin-1"), v.decode("latin-1")) for n, v in block if not n.startswith(b":")]
        resp = Response("HTTP/2", int(pseudo[":status"]), "", headers, b"")
        resp.pseudo = pseudo
        resp.raw_fields = block
        resp.body = bytes(self.body)
        resp.data_frames = self.data_frames
        resp.stream_id = self.id
        resp.interim = [
            b for b in self.header_blocks if b is not block and dict(b).get(b":status", b"").startswith(b"1")
        ]
        finals = self.header_blocks.index(block)
        resp.trailers = self.header_blocks[finals + 1 :]
        return resp


class ConnectionClosed(AssertionError):
    """The server closed (or reset) the connection where a frame was wanted."""


class NothingInTime(AssertionError):
    """The server sent nothing within the socket timeout."""


class H2Conn:
    """One HTTP/2 connection over cleartext TCP (prior knowledge by default).

    settings: what the client announces. auto_window: return every received
    DATA byte with WINDOW_UPDATEs (off to play a peer that stops reading).
    auto_ack: answer SETTINGS and PING (off to play a peer that never reads).
    """

    def __init__(
        self,
        port,
        host="127.0.0.1",
        timeout=SOCKET_TIMEOUT,
        settings=None,
        connection_window=MAX_WINDOW,
        auto_window=True,
        auto_ack=True,
        handshake=True,
        rcvbuf=None,
    ):
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            self.sock.connect((host, port))
        except BaseException:
            self.sock.close()
            raise
        self.timeout = timeout
        self.buf = bytearray()
        self.pos = 0
        self.eof = False
        self.reset = False
        self.local_settings = {ENABLE_PUSH: 0, INITIAL_WINDOW_SIZE: 1 << 24}
        self.local_settings.update(settings or {})
        self.peer_settings = {}
        self.peer_settings_frames = []
        self.settings_acks = 0
        self.ping_acks = []
        self.goaways = []
        self.frames_seen = []  # (type, flags, stream_id, length) of every frame read
        self.streams = {}
        self.next_stream_id = 1
        self.decoder = HpackDecoder(self.local_settings.get(HEADER_TABLE_SIZE, 4096))
        self.send_window = DEFAULT_WINDOW
        self.recv_unacked = 0
        self.auto_window = auto_window
        self.auto_ack = auto_ack
        self._connection_window = connection_window
        self._header_stream = None  # stream whose header block is being continued
        self._header_fragments = []
        self._header_end_stream = False
        if handshake:
            self.handshake()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self.sock.close()

    def abort(self):
        """Closes with a TCP RST."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()

    # -- setup --

    def handshake(self):
        """Sends the preface and our SETTINGS (and a connection WINDOW_UPDATE),
        then reads until the server's SETTINGS arrived, which must come first."""
        self.send(PREFACE + self._opening_frames())
        self.wait_for_settings()

    def _opening_frames(self):
        out = settings_frame(self.local_settings)
        if self._connection_window > DEFAULT_WINDOW:
            out += window_update_frame(0, self._connection_window - DEFAULT_WINDOW)
        return out

    def wait_for_settings(self):
        first = self.read_frame()
        if first.type != SETTINGS or first.has(ACK):
            raise AssertionError(f"server's first frame is {first!r}, not SETTINGS")

    def upgrade(self, path="/", headers=()):
        """h2c Upgrade (RFC 7540 §3.2): a GET over HTTP/1.1 that becomes stream
        1. Returns the raw 101 head; the answer then arrives on stream 1."""
        payload = settings_frame(self.local_settings)[9:]
        http2_settings = base64.urlsafe_b64encode(payload).rstrip(b"=")
        lines = [
            f"GET {path} HTTP/1.1".encode(),
            b"Host: localhost",
            b"Connection: Upgrade, HTTP2-Settings",
            b"Upgrade: h2c",
            b"HTTP2-Settings: " + http2_settings,
        ]
        lines += [_b(n) + b": " + _b(v) for n, v in headers]
        self.send(b"\r\n".join(lines) + b"\r\n\r\n")
        head = self._read_http1_head()
        if not head.startswith(b"HTTP/1.1 101"):
            raise AssertionError(f"Upgrade: h2c answered {head!r}")
        self.streams[1] = Stream(1, DEFAULT_WINDOW)
        self.next_stream_id = 3
        self.send(PREFACE + self._opening_frames())
        self.wait_for_settings()
        return head

    def _read_http1_head(self):
        while b"\r\n\r\n" not in self.buf[self.pos :]:
            if len(self.buf) - self.pos > 65536:
                raise AssertionError(f"no end of HTTP/1.1 head in {bytes(self.buf[:200])!r}")
            if not self._fill():
                raise self._closed_error("an HTTP/1.1 head")
        end = self.buf.index(b"\r\n\r\n", self.pos) + 4
        head = bytes(self.buf[self.pos : end])
        self.pos = end
        return head

    # -- sending --

    def send(self, data):
        self.sock.sendall(data)

    def new_stream_id(self):
        stream_id = self.next_stream_id
        self.next_stream_id += 2
        return stream_id

    def stream(self, stream_id):
        """The Stream for an id, created on first use."""
        stream = self.streams.get(stream_id)
        if stream is None:
            window = self.peer_settings.get(INITIAL_WINDOW_SIZE, DEFAULT_WINDOW)
            stream = self.streams[stream_id] = Stream(stream_id, window)
        return stream

    def send_headers(self, stream_id, fields, end_stream=True):
        """A HEADERS frame, split into CONTINUATIONs when over the peer's frame size."""
        block = hpack_encode(fields)
        limit = self.peer_settings.get(MAX_FRAME_SIZE, DEFAULT_MAX_FRAME)
        pieces = [block[i : i + limit] for i in range(0, len(block), limit)] or [b""]
        out = [headers_frame(stream_id, pieces[0], end_stream, len(pieces) == 1)]
        for i, piece in enumerate(pieces[1:], 2):
            out.append(continuation_frame(stream_id, piece, i == len(pieces)))
        self.stream(stream_id)
        self.send(b"".join(out))

    def request(self, method, path, headers=(), body=None, end_stream=True, stream_id=None):
        """Opens a stream with a request; sends body (bytes) within flow
        control. end_stream=False leaves the stream open for more DATA.
        Returns the stream id."""
        stream_id = stream_id or self.new_stream_id()
        fields = request_headers(method, path, headers=headers)
        self.send_headers(stream_id, fields, end_stream=end_stream and not body)
        if body:
            self.send_data(stream_id, body, end_stream=end_stream)
        return stream_id

    def send_data(self, stream_id, data, end_stream=True, padding=0):
        """DATA frames within both send windows, reading (and so applying
        WINDOW_UPDATEs) whenever a window is spent. padding: pad bytes per
        frame. True when all was sent; False when the server closed the stream
        (a response or RST_STREAM) before it was."""
        stream = self.stream(stream_id)
        view = memoryview(data)
        sent = 0
        overhead = padding + 1 if padding else 0
        while True:
            self.pump(0)
            if stream.closed:
                return False
            frame_max = self.peer_settings.get(MAX_FRAME_SIZE, DEFAULT_MAX_FRAME)
            room = min(frame_max, self.send_window, stream.send_window) - overhead
            room = min(room, len(data) - sent)
            last = sent + room == len(data)
            if room < 0 or (room == 0 and not last):
                self.read_frame()
                continue
            self.send(data_frame(stream_id, view[sent : sent + room].tobytes(), end_stream and last, padding))
            self.send_window -= room + overhead
            stream.send_window -= room + overhead
            sent += room
            if last:
                return True

    def flood(self, data, quiet=0.0, timeout=None):
        """Sends hostile bytes from a thread until all are sent or the server
        drops the connection; reads nothing for `quiet` seconds (or until the
        sending ends), then reads until the server closes. Returns how many
        bytes the kernel took. Fails if the server stops reading but keeps the
        connection open. The client sends nothing else from then on (no acks,
        no WINDOW_UPDATEs), so no frame of its own can land inside the flood."""
        self.auto_ack = self.auto_window = False
        view = memoryview(data)
        progress = {"sent": 0, "stuck": False}

        def sender():
            try:
                while progress["sent"] < len(data):
                    progress["sent"] += self.sock.send(view[progress["sent"] : progress["sent"] + 65536])
            except TimeoutError:
                progress["stuck"] = True
            except OSError:
                pass  # EPIPE or ECONNRESET: the server hung up, as it may

        thread = threading.Thread(target=sender, daemon=True)
        thread.start()
        thread.join(quiet)
        try:
            self.read_until_closed(timeout)
        finally:
            thread.join(self.timeout + 1)
        if progress["stuck"]:
            raise AssertionError(
                f"the server stopped reading but kept the connection open after {progress['sent']} of {len(data)} bytes"
            )
        return progress["sent"]

    def ping(self, data=b"h2client"):
        """Sends a PING and reads until its ACK; True when it came."""
        self.send(ping_frame(data))
        deadline = time.monotonic() + self.timeout
        while data not in self.ping_acks:
            if time.monotonic() > deadline:
                return False
            self.read_frame()
        self.ping_acks.remove(data)
        return True

    # -- receiving --

    def _fill(self, size=1 << 20):
        if self.eof:
            return False
        if self.pos > 1 << 20 and self.pos * 2 > len(self.buf):
            del self.buf[: self.pos]
            self.pos = 0
        try:
            piece = self.sock.recv(size)
        except ConnectionResetError:
            piece = b""
            self.reset = True
        except TimeoutError:
            raise NothingInTime(
                f"nothing from the server within {self.sock.gettimeout()}s; frames so far {self._frames_tail()}"
            ) from None
        if not piece:
            self.eof = True
            return False
        self.buf += piece
        return True

    def _frames_tail(self):
        return [f"{FRAME_NAMES[t] if t < 10 else t}/{s}/{n}" for t, _, s, n in self.frames_seen[-12:]]

    def _closed_error(self, what):
        state = "reset" if self.reset else "closed"
        return ConnectionClosed(
            f"connection {state} while reading {what}; frames so far {self._frames_tail()}; goaways {self.goaways}"
        )

    def read_raw_frame(self):
        """The next frame without acting on it; ConnectionClosed at EOF."""
        while len(self.buf) - self.pos < 9:
            if not self._fill():
                raise self._closed_error("a frame header")
        head = self.buf[self.pos : self.pos + 9]
        length = int.from_bytes(head[:3], "big")
        limit = self.local_settings.get(MAX_FRAME_SIZE, DEFAULT_MAX_FRAME)
        if length > limit:
            raise AssertionError(f"server sent a {length}-byte frame; we allow {limit}: {bytes(head)!r}")
        while len(self.buf) - self.pos < 9 + length:
            if not self._fill():
                raise self._closed_error(f"a {length}-byte frame payload")
        start = self.pos + 9
        result = Frame(
            head[3], head[4], int.from_bytes(head[5:9], "big") & MAX_WINDOW, bytes(self.buf[start : start + length])
        )
        self.pos = start + length
        self.frames_seen.append((result.type, result.flags, result.stream_id, length))
        return result

    def read_frame(self):
        """The next frame, after the client did what it implies (acks, flow
        control, header decoding, stream bookkeeping)."""
        result = self.read_raw_frame()
        self._handle(result)
        return result

    def pump(self, timeout):
        """Handles whatever frames arrive within `timeout` seconds; False at EOF."""
        deadline = time.monotonic() + timeout
        while True:
            if len(self.buf) - self.pos >= 9:
                length = int.from_bytes(self.buf[self.pos : self.pos + 3], "big")
                if len(self.buf) - self.pos >= 9 + length:
                    self.read_frame()
                    continue
            if self.eof:
                return False
            left = max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.sock], [], [], left)
            if not ready:
                return True
            if not self._fill():
                return False

    def _handle(self, f):
        if self._header_stream is not None and f.type != CONTINUATION:
            raise AssertionError(f"{f!r} inside a header block of stream {self._header_stream}")
        handler = {
            DATA: self._on_data,
            HEADERS: self._on_headers,
            CONTINUATION: self._on_continuation,
            RST_STREAM: self._on_rst_stream,
            SETTINGS: self._on_settings,
            PING: self._on_ping,
            GOAWAY: self._on_goaway,
            WINDOW_UPDATE: self._on_window_update,
            PUSH_PROMISE: self._on_push_promise,
        }.get(f.type)
        if handler:
            handler(f)

    @staticmethod
    def _unpad(f):
        payload = f.payload
        if f.has(PADDED):
            pad = payload[0]
            if pad >= len(payload):
                raise AssertionError(f"padding longer than {f!r}")
            payload = payload[1 : len(payload) - pad]
        return payload

    def _on_data(self, f):
        if f.stream_id == 0:
            raise AssertionError("DATA on stream 0")
        stream = self.stream(f.stream_id)
        if stream.ended:
            raise AssertionError(f"DATA on stream {f.stream_id} after END_STREAM")
        stream.body += self._unpad(f)
        stream.data_frames += 1
        stream.ended = f.has(END_STREAM)
        self.recv_unacked += len(f.payload)
        stream.unacked += len(f.payload)
        if self.auto_window:
            self._return_window(stream)

    def _return_window(self, stream):
        out = b""
        if self.recv_unacked >= self._connection_window // 2 or self.recv_unacked >= 1 << 20:
            out += window_update_frame(0, self.recv_unacked)
            self.recv_unacked = 0
        initial = self.local_settings.get(INITIAL_WINDOW_SIZE, DEFAULT_WINDOW)
        if not stream.closed and stream.unacked and (stream.unacked >= initial // 2 or stream.unacked >= 1 << 20):
            out += window_update_frame(stream.id, stream.unacked)
            stream.unacked = 0
        if out:
            self.send(out)

    def _on_headers(self, f):
        payload = self._unpad(f)
        if f.has(PRIORITY_FLAG):
            payload = payload[5:]
        self._header_stream = f.stream_id
        self._header_fragments = [payload]
        self._header_end_stream = f.has(END_STREAM)
        if f.has(END_HEADERS):
            self._finish_header_block()

    def _on_continuation(self, f):
        if self._header_stream != f.stream_id:
            raise AssertionError(f"unexpected {f!r}")
        self._header_fragments.append(f.payload)
        if f.has(END_HEADERS):
            self._finish_header_block()

    def _finish_header_block(self):
        stream = self.stream(self._header_stream)
        stream.header_blocks.append(self.decoder.decode(b"".join(self._header_fragments)))
        if self._header_end_stream:
            stream.ended = True
        self._header_stream = None
        self._header_fragments = []

    def _on_push_promise(self, f):
        raise AssertionError(f"PUSH_PROMISE although we sent ENABLE_PUSH 0: {f!r}")

    def _on_rst_stream(self, f):
        self.stream(f.stream_id).reset_code = f.error_code()

    def _on_settings(self, f):
        if f.has(ACK):
            self.settings_acks += 1
            return
        values = f.settings()
        self.peer_settings_frames.append(values)
        if INITIAL_WINDOW_SIZE in values:
            delta = values[INITIAL_WINDOW_SIZE] - self.peer_settings.get(INITIAL_WINDOW_SIZE, DEFAULT_WINDOW)
            for stream in self.streams.values():
                stream.send_window += delta
        self.peer_settings.update(values)
        if MAX_FRAME_SIZE in values and values[MAX_FRAME_SIZE] < DEFAULT_MAX_FRAME:
            raise AssertionError(f"SETTINGS_MAX_FRAME_SIZE {values[MAX_FRAME_SIZE]} < 16384")
        if self.auto_ack:
            self.send(settings_frame(ack=True))

    def _on_ping(self, f):
        if f.has(ACK):
            self.ping_acks.append(f.payload)
        elif self.auto_ack:
            self.send(ping_frame(f.payload, ack=True))

    def _on_goaway(self, f):
        self.goaways.append(f)

    def _on_window_update(self, f):
        if f.stream_id == 0:
            self.send_window += f.window_increment()
        else:
            self.stream(f.stream_id).send_window += f.window_increment()

    # -- whole exchanges --

    def read_until(self, done, what="the expected frames"):
        """Reads frames until done() is true; fails at EOF or timeout."""
        while not done():
            try:
                self.read_frame()
            except ConnectionClosed as err:
                raise ConnectionClosed(f"{err} (waiting for {what})") from None

    def read_response(self, stream_id):
        """Reads until stream_id ends or is reset; the final response, or None
        when it was reset before any (see .streams[id].reset_code)."""
        stream = self.stream(stream_id)
        self.read_until(lambda: stream.closed, f"the end of stream {stream_id}")
        resp = stream.response()
        if resp is None and stream.reset_code is None:
            raise AssertionError(f"stream {stream_id} ended without a final response")
        return resp

    def fetch(self, method, path, headers=(), body=None):
        """One request on a new stream; its response (fails if the stream was reset)."""
        stream_id = self.request(method, path, headers=headers, body=body)
        resp = self.read_response(stream_id)
        if resp is None or self.streams[stream_id].reset_code is not None:
            raise AssertionError(
                f"{method} {path} on stream {stream_id} was reset: {error_name(self.streams[stream_id].reset_code)}"
            )
        return resp

    def fetch_many(self, requests, limit=None):
        """Runs [(method, path)] on concurrent streams, never more open at once
        than `limit` (default: the server's MAX_CONCURRENT_STREAMS). Returns
        the streams in request order."""
        limit = limit or self.peer_settings.get(MAX_CONCURRENT_STREAMS, 100)
        pending = list(requests)
        opened = []
        open_now = set()
        frames = []
        while pending or open_now:
            while pending and len(open_now) < limit:
                method, path = pending.pop(0)
                stream_id = self.new_stream_id()
                frames.append(headers_frame(stream_id, hpack_encode(request_headers(method, path))))
                self.stream(stream_id)
                opened.append(stream_id)
                open_now.add(stream_id)
            if frames:
                self.send(b"".join(frames))
                frames = []
            self.read_frame()
            open_now = {s for s in open_now if not self.streams[s].closed}
        return [self.streams[s] for s in opened]

    def read_until_closed(self, timeout=None):
        """Handles frames until the server closes; fails if it stays open.
        Returns the frames read."""
        self.sock.settimeout(timeout if timeout is not None else self.timeout)
        frames = []
        try:
            while True:
                frames.append(self.read_frame())
        except ConnectionClosed:
            return frames
        except NothingInTime:
            raise AssertionError(
                f"connection still open after {self.sock.gettimeout()}s; frames {self._frames_tail()}"
            ) from None
        finally:
            self.sock.settimeout(self.timeout)

    def last_goaway(self):
        return self.goaways[-1] if self.goaways else None


# ---- For test cases ----

# Hop-by-hop fields HTTP/2 forbids (RFC 9113 §8.2.2).
CONNECTION_SPECIFIC = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"}


def assert_h2_response_fields(test, resp):
    """What every HTTP/2 response must look like: lower-case names, no
    connection-specific fields, pseudo-headers first and only :status, plus
    xKit's Date and Server."""
    names = [n for n, _ in resp.raw_fields]
    test.assertEqual(sorted(resp.pseudo), [":status"], f"pseudo-headers {resp.pseudo}")
    test.assertEqual(names[0], b":status", f"pseudo-headers must come first: {names}")
    for name in names:
        test.assertEqual(name, name.lower(), f"upper-case field name {name!r}")
    test.assertFalse(
        CONNECTION_SPECIFIC & {n for n, _ in resp.headers},
        f"connection-specific fields in an HTTP/2 response: {resp.headers}",
    )
    date = resp.header("date")
    test.assertIsNotNone(date, f"no date in {resp!r}")
    test.assertRegex(date, IMF_FIXDATE_RE)
    skew = abs(email.utils.parsedate_to_datetime(date).timestamp() - time.time())
    test.assertLess(skew, 5, f"date {date!r} is {skew:.0f}s off")
    test.assertEqual(resp.header("server"), "xkit")


def curl(*args, timeout=60):
    """curl with a transfer deadline; the CompletedProcess."""
    return run_client(["curl", "-sS", "--max-time", str(timeout - 5), *map(str, args)], timeout)


class H2ServerTestCase(ServerTestCase):
    """ServerTestCase with HTTP/2 connections to the shared server."""

    def h2connect(self, **kwargs):
        conn = H2Conn(self.server.port, self.server.connect_host, **kwargs)
        self.addCleanup(conn.close)
        return conn

    def h2fetch(self, method, path, headers=(), body=None):
        """One request on a fresh HTTP/2 connection; its response."""
        with H2Conn(self.server.port, self.server.connect_host) as conn:
            return conn.fetch(method, path, headers=headers, body=body)

    def assert_serves_both(self):
        """A fresh HTTP/1.1 and a fresh HTTP/2 connection each get pong."""
        self.assert_serves_ping()
        resp = self.h2fetch("GET", "/ping")
        self.assertEqual((resp.status, resp.body), (200, b"pong"))
