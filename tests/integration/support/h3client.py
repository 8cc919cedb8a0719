"""An HTTP/3 client for the tests, on aioquic (PyPI): requests on one QUIC
connection, raw bytes on a stream of our choosing for the malformed cases, and
what ended the connection (its error code) when the server closes it."""

import asyncio
import ssl
from dataclasses import dataclass, field

import pylsqpack
from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, FrameType, H3Connection, encode_frame
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, StreamReset

# A hang guard, not a measure: aioquic is pure Python and moves about 1 MB/s here, less on a loaded machine.
TIMEOUT = 60


@dataclass
class H3Response:
    status: int = 0
    headers: dict = field(default_factory=dict)  # name (str) -> value (str), the head's
    body: bytes = b""
    trailers: dict = field(default_factory=dict)
    reset_code: int = None  # the server reset the stream with this H3 code


class TableH3Connection(H3Connection):
    """aioquic's H3Connection announcing a QPACK table capacity of its class's own
    (SETTINGS_QPACK_MAX_TABLE_CAPACITY; aioquic's is a fixed 4096) to the server's
    encoder, and its decoder sized to match."""

    capacity = 4096

    @property
    def _max_table_capacity(self):
        return self.capacity

    @_max_table_capacity.setter
    def _max_table_capacity(self, value):
        pass  # aioquic's __init__ sets 4096; the class's capacity stands


class H3Protocol(QuicConnectionProtocol):
    connection_class = H3Connection

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = self.connection_class(self._quic)
        self.pending = {}  # stream id -> (future, H3Response)
        self.terminated = asyncio.get_event_loop().create_future()

    def quic_event_received(self, event):
        if isinstance(event, ConnectionTerminated) and not self.terminated.done():
            self.terminated.set_result(event)
            for future, _ in self.pending.values():
                if not future.done():
                    future.set_exception(ConnectionError(f"connection closed: 0x{event.error_code:x}"))
        if isinstance(event, StreamReset) and event.stream_id in self.pending:
            future, response = self.pending[event.stream_id]
            response.reset_code = event.error_code
            if not future.done():
                future.set_result(response)
            return
        for h3_event in self.h3.handle_event(event):
            entry = self.pending.get(getattr(h3_event, "stream_id", None))
            if entry is None:
                continue
            future, response = entry
            if isinstance(h3_event, HeadersReceived):
                fields = {k.decode(): v.decode() for k, v in h3_event.headers}
                if response.status:
                    response.trailers = fields
                else:
                    response.status = int(fields.pop(":status"))
                    response.headers = fields
            elif isinstance(h3_event, DataReceived):
                response.body += h3_event.data
            if getattr(h3_event, "stream_ended", False) and not future.done():
                future.set_result(response)

    def _expect(self, stream_id):
        future = asyncio.get_event_loop().create_future()
        self.pending[stream_id] = (future, H3Response())
        return future

    async def request(self, method, path, body=b"", headers=(), authority="localhost", table=True):
        """table=False: the field section is encoded without the dynamic table (Required
        Insert Count 0, static references and literals), as a client whose encoder uses
        none sends it; otherwise aioquic's encoder uses the table the server allows."""
        stream_id = self._quic.get_next_available_stream_id()
        fields = [(b":method", method.encode()), (b":scheme", b"https"), (b":authority", authority.encode())]
        fields += [(b":path", path.encode())]
        fields += [(k.encode(), v.encode()) for k, v in headers]
        future = self._expect(stream_id)
        if table:
            self.h3.send_headers(stream_id, fields, end_stream=not body)
            if body:
                self.h3.send_data(stream_id, body, end_stream=True)
        else:
            if not hasattr(self, "static_encoder"):
                self.static_encoder = pylsqpack.Encoder()  # capacity 0 until set: static only
            _, section = self.static_encoder.encode(stream_id, fields)
            frames = encode_frame(FrameType.HEADERS, section)
            if body:
                frames += encode_frame(FrameType.DATA, body)
            self._quic.send_stream_data(stream_id, frames, end_stream=True)
        self.transmit()
        return await asyncio.wait_for(future, TIMEOUT)

    async def raw_stream(self, data, end=True):
        """Sends data as the whole of a new request stream, bypassing HTTP/3's framing;
        returns what came back on it (or raises when the connection closed)."""
        stream_id = self._quic.get_next_available_stream_id()
        future = self._expect(stream_id)
        self._quic.send_stream_data(stream_id, data, end_stream=end)
        self.transmit()
        return await asyncio.wait_for(future, TIMEOUT)

    async def closed(self, timeout=TIMEOUT):
        """The ConnectionTerminated event the server's CONNECTION_CLOSE made."""
        return await asyncio.wait_for(asyncio.shield(self.terminated), timeout)


def protocol_with_table(capacity):
    """An H3Protocol whose connection announces a QPACK table of capacity bytes."""
    connection = type("TableH3Connection", (TableH3Connection,), {"capacity": capacity})
    return type("TableH3Protocol", (H3Protocol,), {"connection_class": connection})


def client_configuration(ca_file=None, server_name="localhost", client=None):
    """client: a pair (cert, key attributes) sent as the client certificate."""
    configuration = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name=server_name)
    if client:
        configuration.load_cert_chain(client.cert, client.key)
    if ca_file:
        configuration.load_verify_locations(ca_file)
    else:
        configuration.verify_mode = ssl.CERT_NONE
    return configuration


def h3_connect(
    host,
    port,
    ca_file=None,
    server_name="localhost",
    client=None,
    session_ticket_handler=None,
    token_handler=None,
    wait_connected=True,
    qpack_capacity=None,
    **settings,
):
    """An async context manager: one HTTP/3 connection (an H3Protocol); session_ticket_handler
    is called with each TLS session ticket the server issues (what resumption and 0-RTT need),
    token_handler with each NEW_TOKEN token; qpack_capacity: the QPACK table capacity the
    client announces (aioquic's 4096 when None); settings are QuicConfiguration's fields to
    set (quic_logger, token, session_ticket)."""
    configuration = client_configuration(ca_file, server_name, client)
    for name, value in settings.items():
        setattr(configuration, name, value)
    return connect(
        host,
        port,
        configuration=configuration,
        create_protocol=H3Protocol if qpack_capacity is None else protocol_with_table(qpack_capacity),
        session_ticket_handler=session_ticket_handler,
        token_handler=token_handler,
        wait_connected=wait_connected,
    )


def run(coroutine):
    return asyncio.run(coroutine)
