"""A raw WebSocket client for the tests: the opening handshake over a plain
socket, and frames built by hand, so a test can send what no real client
would (unmasked frames, reserved bits, bad lengths, split UTF-8)."""

import base64
import hashlib
import os
import socket
import struct

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA


def accept_for(key):
    return base64.b64encode(hashlib.sha1(key.encode() + GUID).digest()).decode()


def handshake_request(path="/ws", key=None, version="13", extra=""):
    key = key if key is not None else base64.b64encode(os.urandom(16)).decode()
    lines = [f"GET {path} HTTP/1.1", "Host: x", "Upgrade: websocket", "Connection: Upgrade"]
    if key:
        lines.append(f"Sec-WebSocket-Key: {key}")
    if version:
        lines.append(f"Sec-WebSocket-Version: {version}")
    return ("\r\n".join(lines) + "\r\n" + extra + "\r\n").encode(), key


def frame(opcode, payload=b"", fin=True, mask=True, rsv=0, length=None, key=None):
    """One client frame; length overrides the stated payload length."""
    n = len(payload) if length is None else length
    head = bytes([(0x80 if fin else 0) | rsv << 4 | opcode])
    bit = 0x80 if mask else 0
    if n < 126:
        head += bytes([bit | n])
    elif n <= 0xFFFF:
        head += bytes([bit | 126]) + struct.pack("!H", n)
    else:
        head += bytes([bit | 127]) + struct.pack("!Q", n)
    if not mask:
        return head + payload
    key = key or os.urandom(4)
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


def close_payload(code, reason=b""):
    return struct.pack("!H", code) + reason


def parse_frames(data):
    """The server's (unmasked) frames in data: [(fin, opcode, payload)], and
    the bytes of a frame not whole yet."""
    frames, pos = [], 0
    while len(data) - pos >= 2:
        b0, b1 = data[pos], data[pos + 1]
        assert not b1 & 0x80, "a server frame is masked"
        n, head = b1 & 0x7F, 2
        if n == 126:
            if len(data) - pos < 4:
                break
            n, head = struct.unpack("!H", data[pos + 2 : pos + 4])[0], 4
        elif n == 127:
            if len(data) - pos < 10:
                break
            n, head = struct.unpack("!Q", data[pos + 2 : pos + 10])[0], 10
        if len(data) - pos < head + n:
            break
        frames.append((bool(b0 & 0x80), b0 & 0x0F, bytes(data[pos + head : pos + head + n])))
        pos += head + n
    return frames, len(data) - pos


class WsConn:
    """One client connection after a successful handshake."""

    def __init__(self, port, path="/ws", host="127.0.0.1", timeout=10.0, extra="", sock=None):
        self.sock = sock or socket.create_connection((host, port), timeout=timeout)
        self.sock.settimeout(timeout)
        self.buf = b""
        request, key = handshake_request(path, extra=extra)
        self.sock.sendall(request)
        head = self.read_head()
        self.status_line = head.split(b"\r\n", 1)[0].decode()
        self.headers = {}
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.decode().partition(":")
            self.headers[name.strip().lower()] = value.strip()
        if " 101 " in self.status_line and self.headers.get("sec-websocket-accept") != accept_for(key):
            raise AssertionError(f"wrong Sec-WebSocket-Accept in {head!r}")

    def read_head(self):
        while b"\r\n\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise AssertionError(f"EOF before the handshake answer: {self.buf!r}")
            self.buf += chunk
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        return head

    def send(self, data):
        self.sock.sendall(data)

    def send_frame(self, opcode, payload=b"", **kwargs):
        self.sock.sendall(frame(opcode, payload, **kwargs))

    def _need(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise EOFError("connection closed")
            self.buf += chunk

    def read_frame(self):
        """(fin, rsv, opcode, payload) of the next server frame, which must be unmasked."""
        self._need(2)
        b0, b1 = self.buf[0], self.buf[1]
        if b1 & 0x80:
            raise AssertionError("the server masked a frame")
        n, at = b1 & 0x7F, 2
        if n == 126:
            self._need(4)
            n, at = struct.unpack("!H", self.buf[2:4])[0], 4
        elif n == 127:
            self._need(10)
            n, at = struct.unpack("!Q", self.buf[2:10])[0], 10
        self._need(at + n)
        payload, self.buf = self.buf[at : at + n], self.buf[at + n :]
        return bool(b0 & 0x80), (b0 >> 4) & 7, b0 & 0x0F, payload

    def read_close(self):
        """The code of the server's close frame (None when empty), skipping data before it."""
        while True:
            _, _, opcode, payload = self.read_frame()
            if opcode == OP_CLOSE:
                return struct.unpack("!H", payload[:2])[0] if payload else None

    def at_eof(self):
        """True when the server closed the TCP connection (after anything still unread)."""
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
                self.buf += chunk
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False

    def close(self):
        self.sock.close()
