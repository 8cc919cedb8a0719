"""QUIC's own features under HTTP/3, as clients see them: Retry address validation (asked by
setting, or by the server itself while an Initial flood keeps handshakes under way), tokens
it refuses (INVALID_TOKEN), NEW_TOKEN tokens that spare a later connection the Retry, and a
client that changes address mid-connection and keeps being served, its handlers seeing the
new address. aioquic (PyPI) is the client; its qlog shows what arrived."""

import asyncio
import json
import os
import socket
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
        server = self.start("--h3-retry-flood", "2", "--handshake-timeout", "1500")
        response, logger = self.get(server)
        self.assertEqual((response.body, retries(logger)), (b"pong", []))
        stalled = [self.stalled_handshake(server.port) for _ in range(2)]
        try:
            response, logger = self.get(server)
            self.assertEqual((response.body, retries(logger)), (b"pong", ["retry"]))
        finally:
            for sock in stalled:
                sock.close()
        time.sleep(2.5)  # past the handshake timeout: the stalled handshakes are dropped
        response, logger = self.get(server)
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


if __name__ == "__main__":
    unittest.main()
