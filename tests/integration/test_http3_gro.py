"""HTTP/3 from a client that sends with UDP_SEGMENT (GSO), as quic-go and Chromium do: each run of
same-size datagrams leaves in one sendmsg, and the server's socket, with UDP_GRO on, receives the
run as one message that it cuts back into datagrams by the segment size the kernel reports. Large
POST bodies come back byte for byte, and the ECN codepoint the run carries counts for every
datagram in it (the server's ACK frames say how many it saw). The same with UDP_GRO left off
(XK_UDP_GRO=0, as where the kernel refuses it): the kernel then cuts the runs itself. The client
is aioquic (PyPI) with its datagrams sent through a GSO sender of the test's own. And the socket's
receive buffer, which the server raises (as far as net.core.rmem_max allows) so that a burst from
many clients is not dropped, as `ss` reports it."""

import asyncio
import os
import re
import socket
import struct
import subprocess
import unittest
from unittest import mock

from aioquic.buffer import Buffer
from aioquic.quic.connection import QuicConnection
from aioquic.quic.logger import QuicLogger
from aioquic.quic.packet import QuicFrameType, pull_ack_frame

from support.h3client import h3_connect, run
from support.harness import start_owned
from support.tls_fixtures import HttpsServer, current_certs, shared_certs

setUpModule, tearDownModule = shared_certs(__name__)

UDP_SEGMENT = getattr(socket, "UDP_SEGMENT", 103)  # linux/udp.h
UDP_GRO = getattr(socket, "UDP_GRO", 104)
RCVBUF = 4 << 20  # what the server asks for (quic.c's XQUIC_RCVBUF)
ECT0 = 0b10  # RFC 3168's ECT(0) codepoint, in the TOS byte's low bits


def gro_message(sender_payloads):
    """Sends sender_payloads in one sendmsg with UDP_SEGMENT to a socket with UDP_GRO on:
    (bytes of the message it received, the segment size its UDP_GRO control message gave)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
        rx.setsockopt(socket.SOL_UDP, UDP_GRO, 1)
        rx.bind(("127.0.0.1", 0))
        rx.settimeout(5)
        size = len(sender_payloads[0])
        tx.sendmsg(
            [b"".join(sender_payloads)], [(socket.SOL_UDP, UDP_SEGMENT, struct.pack("H", size))], 0, rx.getsockname()
        )
        data, ancillary, _, _ = rx.recvmsg(65536, socket.CMSG_SPACE(4))
        segments = [
            struct.unpack("i", d[:4])[0] for level, kind, d in ancillary if (level, kind) == (socket.SOL_UDP, UDP_GRO)
        ]
        return data, segments[0] if segments else 0


class GsoSender:
    """Stands in for aioquic's transport: what one transmit() hands over is sent after it, each
    run of same-size datagrams (the last maybe shorter) in one sendmsg with UDP_SEGMENT, marked
    ECT(0). Counts the datagrams that left in runs of more than one."""

    def __init__(self, transport):
        self.transport = transport
        self.socket = socket.socket(fileno=os.dup(transport.get_extra_info("socket").fileno()))
        self.queue = []
        self.runs = self.in_runs = 0

    def sendto(self, data, addr):
        if not self.queue:
            asyncio.get_event_loop().call_soon(self.flush)
        self.queue.append((data, addr))

    def flush(self):
        queue, self.queue = self.queue, []
        at = 0
        while at < len(queue):
            size, addr = len(queue[at][0]), queue[at][1]
            end = at + 1
            while end < len(queue) and len(queue[end][0]) <= size and queue[end][1] == addr and end - at < 40:
                end += 1
                if len(queue[end - 1][0]) < size:
                    break  # a shorter one ends the run
            ancillary = [(socket.IPPROTO_IP, socket.IP_TOS, struct.pack("i", ECT0))]
            if end - at > 1:
                ancillary.append((socket.SOL_UDP, UDP_SEGMENT, struct.pack("H", size)))
                self.runs += 1
                self.in_runs += end - at
            self.socket.sendmsg([b"".join(data for data, _ in queue[at:end])], ancillary, 0, addr)
            at = end

    def close(self):
        self.socket.close()
        self.transport.close()

    def __getattr__(self, name):
        return getattr(self.transport, name)


class EcnCounts:
    """The ECT(0) count of the latest ACK_ECN frame the client received (RFC 9000 §19.3.2):
    aioquic reads the counts and drops them, so its ACK handler is wrapped to read them again."""

    def __init__(self):
        self.ect0 = 0
        original = QuicConnection._handle_ack_frame

        def handle(connection, context, frame_type, buf: Buffer):
            start = buf.tell()
            original(connection, context, frame_type, buf)
            if frame_type == QuicFrameType.ACK_ECN:
                end = buf.tell()
                buf.seek(start)
                pull_ack_frame(buf)
                self.ect0 = max(self.ect0, buf.pull_uint_var())
                buf.seek(end)

        self.patch = mock.patch.object(QuicConnection, "_handle_ack_frame", handle)


class GsoClientTest(unittest.TestCase):
    def start(self, environment=None):
        server = HttpsServer(current_certs().ec, ["--workers", "1", "--test-routes"])
        server.env = environment or {}
        return start_owned(self, server)

    def post_bodies(self, server, bodies):
        """POSTs each body to /echo on one connection whose datagrams go out through a
        GsoSender: (the responses, the sender, the ECN counts, the packets the client
        declared lost)."""
        ecn = EcnCounts()
        logger = QuicLogger()

        async def go():
            async with h3_connect("127.0.0.1", server.port, ca_file=current_certs().ca, quic_logger=logger) as h3:
                sender = GsoSender(h3._transport)
                h3._transport = sender
                responses = [await h3.request("POST", "/echo", body) for body in bodies]
                return responses, sender

        with ecn.patch:
            responses, sender = run(go())
        events = [event["name"] for trace in logger.to_dict()["traces"] for event in trace["events"]]
        return responses, sender, ecn, events.count("recovery:packet_lost")

    def check_echoes(self, server):
        bodies = [os.urandom(300_000), os.urandom(65_537), os.urandom(400_001)]
        responses, sender, ecn, lost = self.post_bodies(server, bodies)
        for body, response in zip(bodies, responses, strict=True):
            self.assertEqual(response.status, 200)
            self.assertEqual(len(response.body), len(body))
            self.assertTrue(response.body == body, "the echoed body differs")
        # The bodies left mostly in runs: what the server's receive path was given to cut.
        self.assertGreater(sender.runs, 20)
        self.assertGreater(sender.in_runs, 300)
        # And arrived: a run the server misread would be lost whole, and sent again.
        self.assertLessEqual(lost, sender.in_runs // 10)
        # Every datagram of a run carried ECT(0) and was counted as such, not one per run.
        self.assertGreater(ecn.ect0, sender.in_runs // 2)
        server.stop_and_check()

    def test_the_udp_socket_has_the_receive_buffer_asked_for(self):
        server = self.start()
        shown = subprocess.run(
            ["ss", "-u", "-l", "-n", "-m", f"sport = :{server.port}"], capture_output=True, text=True, check=True
        ).stdout
        with open("/proc/sys/net/core/rmem_max") as limit:
            rmem_max = int(limit.read())
        # The kernel caps the request at rmem_max and doubles it for its bookkeeping (socket(7)).
        self.assertEqual(re.findall(r"\brb(\d+)", shown), [str(2 * min(RCVBUF, rmem_max))], shown)
        server.stop_and_check()

    def test_the_kernel_here_hands_a_gso_run_to_a_gro_socket_whole(self):
        # What the server's receive path relies on, and why the next test reaches it: on
        # loopback, a run sent with UDP_SEGMENT arrives at a UDP_GRO socket as one message.
        payloads = [bytes([i]) * 1200 for i in range(5)] + [b"z" * 300]
        data, segment = gro_message(payloads)
        self.assertEqual((data, segment), (b"".join(payloads), 1200))

    def test_large_posts_from_a_gso_client_come_back_byte_exact_with_gro(self):
        self.check_echoes(self.start())

    def test_large_posts_from_a_gso_client_come_back_byte_exact_without_gro(self):
        self.check_echoes(self.start({"XK_UDP_GRO": "0"}))


if __name__ == "__main__":
    unittest.main()
