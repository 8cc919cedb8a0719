"""QUIC's own features under HTTP/3, as clients see them: Retry address validation (asked by
setting, or by the server itself while an Initial flood keeps handshakes under way), tokens
it refuses (INVALID_TOKEN), NEW_TOKEN tokens that spare a later connection the Retry, and a
client that changes address mid-connection and keeps being served, its handlers seeing the
new address; 0-RTT, where early requests of unsafe methods get 425 and a replayed first flight
does not run its request twice. aioquic (PyPI) is the client, its qlog showing what arrived,
and ngtcp2's gtlsclient (Debian ngtcp2-client), its packet log showing the same."""

import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import unittest

from aioquic.quic.connection import QuicConnection
from aioquic.quic.logger import QuicLogger

from support.h3client import client_configuration, h3_connect, run
from support.tls_fixtures import current_certs, shared_certs, start_https

setUpModule, tearDownModule = shared_certs(__name__)

INVALID_TOKEN = 0x0B  # RFC 9000 §20.1


def received(logger):
    """The packets the client received, from its qlog: (packet type, frames)."""
    out = []
    for trace in logger.to_dict()["traces"]:
        for event in trace["events"]:
            if event["name"] == "transport:packet_received":
                out.append((event["data"]["header"]["packet_type"], event["data"]["frames"]))
    return out


def varint(data, at):
    """RFC 9000 §16: (value, where the next field starts)."""
    length = 1 << (data[at] >> 6)
    value = data[at] & 0x3F
    for byte in data[at + 1 : at + length]:
        value = value << 8 | byte
    return value, at + length


def long_packets(datagram):
    """The types of the long-header packets coalesced in a datagram (RFC 9000 §17.2, §12.2)."""
    kinds, at = [], 0
    while at < len(datagram) and datagram[at] & 0x80:
        kind = ("Initial", "0RTT", "Handshake", "Retry")[datagram[at] >> 4 & 3]
        kinds.append(kind)
        at += 5  # the first byte and the version
        at += 1 + datagram[at]  # the destination connection ID
        at += 1 + datagram[at]  # the source connection ID
        if kind == "Retry":
            break
        if kind == "Initial":
            token_length, at = varint(datagram, at)
            at += token_length
        length, at = varint(datagram, at)
        at += length
    return kinds


def retries(logger):
    return [kind for kind, _ in received(logger) if kind == "retry"]


class QuicFeaturesTest(unittest.TestCase):
    def start(self, *options):
        return start_https(self, current_certs().rsa, "--workers", "1", "--test-routes", *options)

    def get(self, server, path="/ping", **settings):
        """One GET on a new connection: (response, the client's qlog)."""
        logger = QuicLogger()

        async def go():
            async with h3_connect(
                "127.0.0.1", server.port, ca_file=current_certs().ca, quic_logger=logger, **settings
            ) as h3:
                return await h3.request("GET", path)

        return run(go()), logger

    def test_retry_by_setting_is_seen_by_the_client_which_is_then_served(self):
        server = self.start("--h3-retry")
        response, logger = self.get(server)
        self.assertEqual((response.status, response.body), (200, b"pong"))
        # One Retry, then the handshake (aioquic checks retry_source_connection_id against it).
        self.assertEqual(retries(logger), ["retry"])
        self.assertEqual(received(logger)[0][0], "retry")
        server.stop_and_check()

    def test_no_retry_by_default(self):
        server = self.start()
        response, logger = self.get(server)
        self.assertEqual(response.body, b"pong")
        self.assertEqual(retries(logger), [])
        server.stop_and_check()

    def test_a_forged_retry_token_is_refused_with_invalid_token(self):
        # A token that claims to be a Retry's but was not sealed by this server.
        server = self.start("--h3-retry")
        logger = QuicLogger()

        async def go():
            async with h3_connect(
                "127.0.0.1",
                server.port,
                ca_file=current_certs().ca,
                quic_logger=logger,
                token=bytes([0xB6]) + os.urandom(90),
            ) as h3:
                await h3.request("GET", "/ping")

        with self.assertRaises(ConnectionError):
            run(go())
        closes = [f for _, frames in received(logger) for f in frames if f["frame_type"] == "connection_close"]
        self.assertEqual([(c["error_space"], c["error_code"]) for c in closes], [("transport", INVALID_TOKEN)])
        self.assertEqual(retries(logger), [])
        # The server keeps serving.
        self.assertEqual(self.get(server)[0].body, b"pong")
        server.stop_and_check()

    def test_an_unknown_token_is_as_none_and_gets_a_retry(self):
        # Not one of ours (RFC 9000 §8.1.3): the client is asked to prove its address as if it had none.
        server = self.start("--h3-retry")
        response, logger = self.get(server, token=bytes([0x36]) + os.urandom(90))
        self.assertEqual(response.body, b"pong")
        self.assertEqual(retries(logger), ["retry"])
        server.stop_and_check()

    def test_an_initial_flood_turns_retry_on_until_it_passes(self):
        # Two handshakes under way is this server's flood: a third client is asked to Retry; once the
        # stalled ones time out, clients are served without one again.
        server = self.start("--h3-retry-flood", "2", "--handshake-timeout", "3000")
        response, logger = self.get(server)
        self.assertEqual((response.body, retries(logger)), (b"pong", []))
        stalled = [self.stalled_handshake(server.port) for _ in range(2)]
        try:
            response, logger = self.get(server)
            self.assertEqual((response.body, retries(logger)), (b"pong", ["retry"]))
        finally:
            for sock in stalled:
                sock.close()
        deadline = time.monotonic() + 15  # the handshake timeout drops the stalled ones
        while True:
            response, logger = self.get(server)
            if not retries(logger) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        self.assertEqual((response.body, retries(logger)), (b"pong", []))
        server.stop_and_check()

    @staticmethod
    def stalled_handshake(port):
        """A client that sends its Initial and answers nothing after: a handshake left under way."""
        quic = QuicConnection(configuration=client_configuration())
        quic.connect(("127.0.0.1", port), now=time.time())
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.settimeout(5)
        for data, addr in quic.datagrams_to_send(now=time.time()):
            sock.sendto(data, addr)
        sock.recv(2048)  # the server answered: its connection exists
        return sock

    def test_new_token_spares_the_next_connection_the_retry(self):
        server = self.start("--h3-retry")
        tokens = []

        async def first():
            async with h3_connect(
                "127.0.0.1", server.port, ca_file=current_certs().ca, token_handler=tokens.append
            ) as h3:
                body = (await h3.request("GET", "/ping")).body
                for _ in range(50):  # NEW_TOKEN follows the handshake's confirmation
                    if tokens:
                        break
                    await asyncio.sleep(0.02)
                return body

        self.assertEqual(run(first()), b"pong")
        self.assertEqual(len(tokens), 1)
        # A new connection (from another port) bringing the token needs no Retry, once or again.
        for _ in range(2):
            response, logger = self.get(server, token=tokens[0])
            self.assertEqual((response.body, retries(logger)), (b"pong", []))
        # Another server's secret seals its tokens: this one's is unknown there, as none.
        other = self.start("--h3-retry")
        response, logger = self.get(other, token=tokens[0])
        self.assertEqual((response.body, retries(logger)), (b"pong", ["retry"]))
        other.stop_and_check()
        server.stop_and_check()

    def test_a_client_changing_address_keeps_being_served_and_handlers_see_the_new_one(self):
        server = self.start()

        async def go():
            loop = asyncio.get_running_loop()
            async with h3_connect("127.0.0.1", server.port, ca_file=current_certs().ca) as h3:
                seen = []
                for _ in range(3):
                    port = h3._transport.get_extra_info("sockname")[1]
                    whoami = json.loads((await h3.request("GET", "/whoami")).body)
                    seen.append((port, whoami["port"], whoami["protocol"]))
                    # A new socket, so a new local port: what a NAT rebinding or a move looks like.
                    h3.change_connection_id()
                    old = h3._transport
                    await loop.create_datagram_endpoint(lambda: h3, local_addr=("::", 0))
                    old.close()
                return seen

        seen = run(go())
        self.assertEqual(len({port for port, _, _ in seen}), 3)
        for port, peer_port, protocol in seen:
            self.assertEqual(peer_port, port)
            self.assertEqual(protocol, "HTTP/3")
        server.stop_and_check()

    def test_gtlsclient_changing_its_address_before_asking_is_seen_at_the_new_one(self):
        # ngtcp2's client moves to a new local port after the handshake (--change-local-addr) and
        # only then sends its request (--delay-stream): the handler sees the port it moved to.
        server = self.start()
        folder = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, folder, ignore_errors=True)
        argv = ["gtlsclient", "--exit-on-all-streams-close", "--timeout=10s", f"--download={folder}"]
        argv += ["--change-local-addr=100ms", "--delay-stream=400ms", "127.0.0.1", str(server.port)]
        argv += [f"https://127.0.0.1:{server.port}/whoami"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])
        ports = re.findall(r"Sent packet: local=\[127\.0\.0\.1\]:(\d+)", done.stdout + done.stderr)
        moves = [int(port) for i, port in enumerate(ports) if i == 0 or ports[i - 1] != port]
        self.assertEqual(len(moves), 2, moves)  # the first port, then the new one
        with open(os.path.join(folder, "whoami")) as answer:
            whoami = json.load(answer)
        self.assertEqual(whoami["port"], moves[1])
        server.stop_and_check()

    def ticket(self, server):
        """A session ticket from a first connection to server."""
        tickets = []

        async def go():
            async with h3_connect(
                "127.0.0.1", server.port, ca_file=current_certs().ca, session_ticket_handler=tickets.append
            ) as h3:
                await h3.request("GET", "/ping")
                for _ in range(50):  # the ticket follows the handshake
                    if tickets:
                        break
                    await asyncio.sleep(0.02)

        run(go())
        self.assertTrue(tickets, "no session ticket")
        return tickets[-1]

    def early_requests(self, server, ticket, *requests):
        """requests ((method, path, body)) sent in 0-RTT on a resumed connection: (responses,
        whether the server took the early data, the packet types the client sent)."""
        logger = QuicLogger()

        async def go():
            async with h3_connect(
                "127.0.0.1",
                server.port,
                ca_file=current_certs().ca,
                session_ticket=ticket,
                wait_connected=False,
                quic_logger=logger,
            ) as h3:
                responses = await asyncio.gather(*[h3.request(m, p, body=b) for m, p, b in requests])
                return responses, h3._quic.tls.early_data_accepted

        responses, accepted = run(go())
        sent = set()
        for trace in logger.to_dict()["traces"]:
            for event in trace["events"]:
                if event["name"] == "transport:packet_sent":
                    sent.add(event["data"]["header"]["packet_type"])
        return responses, accepted, sent

    def test_0rtt_serves_safe_methods_and_answers_unsafe_ones_425(self):
        server = self.start("--h3-0rtt")
        ticket = self.ticket(server)
        self.assertEqual(ticket.max_early_data_size, 0xFFFFFFFF)  # RFC 9001 §4.6.1
        (get, post), accepted, sent = self.early_requests(
            server, ticket, ("GET", "/ping", b""), ("POST", "/echo", b"hello")
        )
        self.assertTrue(accepted)
        self.assertIn("0RTT", sent)
        self.assertEqual((get.status, get.body), (200, b"pong"))
        self.assertEqual(post.status, 425)  # RFC 8470: not replayable, the client retries after the handshake
        server.stop_and_check()

    def test_a_replayed_0rtt_flight_has_its_early_data_refused(self):
        # An attacker who captured a client's first flight (its Initial with the ClientHello and
        # its 0-RTT packets) sends it again: the handshake starts, but the ClientHello was seen, so
        # the early request is not run twice (RFC 8446 §8). The access log counts the runs.
        folder = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, folder, ignore_errors=True)
        log_path = os.path.join(folder, "access.log")
        server = start_https(self, current_certs().ec, "--workers", "1", "--h3-0rtt", "--access-log", log_path)
        ticket = self.ticket(server)
        sent = []

        class Tap:
            """The client's transport, keeping what it sends."""

            def __init__(self, transport):
                self.transport = transport

            def sendto(self, data, addr):
                sent.append(data)
                self.transport.sendto(data, addr)

            def __getattr__(self, name):
                return getattr(self.transport, name)

        async def go():
            async with h3_connect(
                "127.0.0.1", server.port, ca_file=current_certs().ca, session_ticket=ticket, wait_connected=False
            ) as h3:
                h3._transport = Tap(h3._transport)
                request = asyncio.ensure_future(h3.request("GET", "/ping?replayed=1"))
                await asyncio.sleep(0)  # the request's first transmit: the whole first flight
                first_flight = list(sent)
                response = await request
                return first_flight, response, h3._quic.tls.early_data_accepted

        first_flight, response, accepted = run(go())
        self.assertTrue(accepted)
        self.assertEqual(response.body, b"pong")
        self.assertIn("0RTT", [kind for datagram in first_flight for kind in long_packets(datagram)])
        time.sleep(0.3)  # the client's close reached the server: the connection is forgotten
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as replayer:
            replayer.settimeout(5)
            for datagram in first_flight:
                replayer.sendto(datagram, ("127.0.0.1", server.port))
            answered = replayer.recv(2048)
            self.assertTrue(answered[0] & 0x80)  # the server's Initial: the replay was taken up
            time.sleep(0.5)
        server.stop_and_check()
        with open(log_path) as log:
            runs = [line for line in log if "replayed=1" in line]
        self.assertEqual(len(runs), 1, runs)

    def test_gtlsclient_is_retried_and_gets_425_for_a_post_in_0rtt(self):
        # ngtcp2's own client (Debian ngtcp2-client) logs each packet: a Retry received, then on a
        # resumed connection its POST sent in 0-RTT and answered 425; sent after the handshake, 200.
        server = self.start("--h3-0rtt", "--h3-retry")
        folder = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, folder, ignore_errors=True)
        body = os.path.join(folder, "body")
        with open(body, "wb") as out:
            out.write(b"early bird")

        def gtlsclient(path, *options):
            argv = ["gtlsclient", "--exit-on-all-streams-close", "--timeout=10s"]
            argv += [f"--session-file={folder}/session", f"--tp-file={folder}/tp", *options]
            argv += ["127.0.0.1", str(server.port), f"https://127.0.0.1:{server.port}{path}"]
            done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
            self.assertEqual(done.returncode, 0, done.stderr[-3000:])
            return done.stdout + done.stderr

        first = gtlsclient("/ping")
        self.assertRegex(first, r"pkt rx .* type=Retry")
        self.assertIn("[:status: 200]", first)
        early = gtlsclient("/echo", "--http-method=POST", f"--data={body}")
        self.assertRegex(early, r"frm tx \d+ 0RTT STREAM\(0x0b\) id=0x0 ")  # the request, in 0-RTT
        self.assertIn("[:status: 425]", early)
        late = gtlsclient("/echo", "--http-method=POST", f"--data={body}", "--disable-early-data")
        self.assertIn("[:status: 200]", late)
        server.stop_and_check()

    def test_without_0rtt_no_early_data_is_taken(self):
        # The default: no tickets at all (test_http3 checks), so a ticket of another server's is no use here.
        other = self.start("--h3-0rtt")
        ticket = self.ticket(other)
        server = self.start()
        (get, post), accepted, _ = self.early_requests(
            server, ticket, ("GET", "/ping", b""), ("POST", "/echo", b"hello")
        )
        self.assertFalse(accepted)
        self.assertEqual((get.status, get.body, post.status, post.body), (200, b"pong", 200, b"hello"))
        server.stop_and_check()
        other.stop_and_check()


if __name__ == "__main__":
    unittest.main()
