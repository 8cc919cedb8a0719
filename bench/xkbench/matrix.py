"""What the suite measures: protocols, the three kinds of case, and their points."""

from dataclasses import dataclass

KIB = 1024
STREAMS_PER_CONNECTION = 10  # h2load -m
PIPELINE_DEPTH = 16  # requests per write in bench/wrk/pipeline.lua
FIXED_CONNECTIONS = 100  # echo and post sections


@dataclass(frozen=True)
class Protocol:
    key: str
    short: str
    title: str
    tool: str  # "wrk" or "h2load"
    tls: bool
    pipelined: bool = False


PROTOCOLS = {
    p.key: p
    for p in (
        Protocol("http1", "HTTP/1.1", "HTTP/1.1", "wrk", False),
        Protocol("h2c", "h2c", "h2c (cleartext HTTP/2, prior knowledge)", "h2load", False),
        Protocol("https1", "HTTPS/1.1", "HTTPS/1.1", "wrk", True),
        Protocol("https2", "HTTPS/2", "HTTPS/2 (h2 by ALPN)", "h2load", True),
        Protocol(
            "pipeline",
            "HTTP/1.1 pipelined",
            f"HTTP/1.1 pipelined ({PIPELINE_DEPTH} requests per write)",
            "wrk",
            False,
            pipelined=True,
        ),
    )
}
KINDS = ("ping", "echo", "post")


@dataclass(frozen=True)
class Points:
    """Connections for GET /ping, response sizes for GET /echo, body sizes for POST /echo."""

    connections: tuple
    sizes: tuple
    bodies: tuple
    pipeline_connections: tuple


QUICK = Points(connections=(100, 500), sizes=(64, 4096), bodies=(1 * KIB, 64 * KIB), pipeline_connections=(100,))
FULL = Points(
    connections=(50, 100, 200, 500),
    sizes=(64, 256, 1024, 4096),
    bodies=(1 * KIB, 4 * KIB, 16 * KIB, 64 * KIB),
    pipeline_connections=(50, 100, 200, 500),
)


def size_label(size):
    return f"{size // KIB} KiB" if size >= KIB and size % KIB == 0 else f"{size} B"


@dataclass(frozen=True)
class Case:
    """One load: a request (kind and size) at a number of connections over one protocol."""

    protocol: Protocol
    kind: str
    connections: int
    size: int = 0  # echo: response bytes; post: request body bytes

    @property
    def id(self):
        point = f"c{self.connections}" if self.kind == "ping" else size_label(self.size).replace(" ", "")
        return f"{self.protocol.key}.{self.kind}.{point}"

    @property
    def method(self):
        return "POST" if self.kind == "post" else "GET"

    @property
    def path(self):
        if self.kind == "ping":
            return "/ping"
        return f"/echo?size={self.size}" if self.kind == "echo" else "/echo"

    @property
    def x(self):
        """Where the case sits on its section's axis."""
        return self.connections if self.kind == "ping" else self.size

    @property
    def x_label(self):
        return str(self.connections) if self.kind == "ping" else size_label(self.size)


@dataclass(frozen=True)
class Section:
    """A table and a chart: one protocol, one kind, its cases along one axis."""

    protocol: Protocol
    kind: str
    cases: tuple

    @property
    def id(self):
        return f"{self.protocol.key}-{self.kind}"

    @property
    def request(self):
        return {"ping": "GET /ping", "echo": "GET /echo?size=N", "post": "POST /echo"}[self.kind]

    @property
    def axis(self):
        return {"ping": "Connections", "echo": "Response size", "post": "Body size"}[self.kind]

    @property
    def title(self):
        if self.kind == "ping":
            return "GET /ping by connections"
        return f"{self.request} by {self.axis.lower()}, {FIXED_CONNECTIONS} connections"


def build_sections(protocols, kinds, points):
    """Sections in the report's order: protocol by protocol, ping, echo, post. The pipelined
    protocol has GET /ping only."""
    sections = []
    for key in PROTOCOLS:
        if key not in protocols:
            continue
        protocol = PROTOCOLS[key]
        for kind in KINDS:
            if kind not in kinds or (protocol.pipelined and kind != "ping"):
                continue
            if kind == "ping":
                counts = points.pipeline_connections if protocol.pipelined else points.connections
                cases = tuple(Case(protocol, kind, count) for count in counts)
            else:
                sizes = points.sizes if kind == "echo" else points.bodies
                cases = tuple(Case(protocol, kind, FIXED_CONNECTIONS, size) for size in sizes)
            if cases:
                sections.append(Section(protocol, kind, cases))
    return sections
