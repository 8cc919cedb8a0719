"""Free ports for servers a test must name a port for before they start (PostgreSQL, Redis,
HAProxy, an arena entry told its ports).

Asking the kernel for port 0 and closing the socket is not enough: that port comes from the
ephemeral range (net.ipv4.ip_local_port_range), the same range every outgoing connection's
source port is taken from, so on a machine busy with load generators another process's connect()
can take it before the server binds it ("address in use"). These ports are drawn below that range,
where only an explicit bind can take one, and each is checked free for TCP and UDP (HTTP/3 serves
UDP on the TCP port's number) on IPv4 and IPv6 first.
"""

import random
import socket

LOWEST = 20000


def ephemeral_start():
    """The first port the kernel hands out by itself (32768 unless the machine says otherwise)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def is_free(port):
    """True when nothing holds port for TCP or UDP on the IPv4 and IPv6 wildcards."""
    shapes = [(socket.AF_INET, "0.0.0.0")]
    if socket.has_ipv6:
        shapes.append((socket.AF_INET6, "::"))
    for family, host in shapes:
        for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
            try:
                with socket.socket(family, kind) as s:
                    if family == socket.AF_INET6:
                        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                    s.bind((host, port))
            except OSError:
                return False
    return True


def free_ports(count):
    """count distinct free ports below the ephemeral range."""
    top = max(ephemeral_start() - 1, LOWEST + 1000)
    chosen = []
    for _ in range(1000 * count):
        port = random.randint(LOWEST, top)
        if port not in chosen and is_free(port):
            chosen.append(port)
            if len(chosen) == count:
                return chosen
    raise AssertionError(f"no {count} free ports between {LOWEST} and {top}")


def free_port():
    return free_ports(1)[0]
