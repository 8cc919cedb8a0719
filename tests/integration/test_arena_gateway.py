"""The arena's stacks built of xKit alone (../shared/arena/CONTRACT.md, "The stacks"):
gateway-64, gateway-h3 and production-stack, each started as its compose file
(arena/compose.*.yml) starts it — the entry (build/arena/xkit-arena) as the
`server` on a real PostgreSQL with the arena's seed and a real redis-server,
build/arena/xkit-edge as the `proxy`/`edge` in front of it, and for
production-stack build/arena/xkit-authsvc as the `authsvc` — on free loopback
ports, then checked as the arena's validation checks them
(scripts/lib/validate/checks/gateway.sh in the arena's repository):

- gateway-64 and gateway-h3 over `curl --http2` on the edge's TLS port: h2
  negotiated, the static files' types and sizes (and their twins), 404 for an
  unknown file, /json/50 field by field with its totals, /async-db's item shape
  and count and the empty range, /baseline2's sums;
- gateway-h3 over HTTP/3 (aioquic) on the UDP port of the same number: four
  requests each to /baseline2 and /static/reset.css;
- production-stack: 401 without a token and with a bad one (GET and POST), the
  real token's /api/items/1, MISS then HIT, POST 204 and then MISS, /api/me id 42,
  /public/* with no token; and the auth service itself: what it refuses.

With XK_ARENA_STACKS set to a compose command (arena/test-stacks.sh, run by `make
arena-image-test`), the same checks run against each stack brought up whole from
the image by that command, on the compose files' own host ports; only the test's
PostgreSQL (the arena brings its own) is started here. What the file asks and this
machine cannot give (CPUs, limits, an image from Docker Hub) is adapted in a copy
of the file, and each adaptation is printed."""

import base64
import copy
import gzip
import hashlib
import hmac
import json
import os
import random
import re
import resource
import shutil
import subprocess
import tempfile
import time
import types
import unittest

import brotli
import yaml

from support.h3client import h3_connect, run
from support.harness import ServerProcess
from support.interop import free_port
from support.postgres import Postgres
from support.redis_server import RedisServer
from support.tls_fixtures import shared_certs
from test_arena import STATIC_TEXT, STATIC_TYPES, make_dataset, make_static_files

CERTS = None

SECRET = b"httparena-bench-secret-do-not-use-in-production"  # the arena's, published with it
ITEMS, USERS = 2000, 100
ITEM_FIELDS = {"id", "name", "category", "price", "quantity", "active", "tags", "rating"}


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwt(claims, secret=SECRET, header=None):
    """A JWT as the arena's data/jwt-token.txt is made: HS256 over header.payload."""
    head = b64url(json.dumps(header or {"alg": "HS256", "typ": "JWT"}).encode())
    body = b64url(json.dumps(claims).encode())
    signature = hmac.new(secret, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64url(signature)}"


TOKEN = jwt({"sub": "42", "name": "Alice Chen", "exp": 4102444800})


def arena_binary(name):
    """build/arena/NAME, beside the entry ctest names in XK_ARENA."""
    entry = os.environ.get("XK_ARENA")
    if not entry:
        raise AssertionError("XK_ARENA is not set: run through ctest (make test), which builds the arena")
    return os.path.join(os.path.dirname(entry), name)


SOURCE_DIR = os.environ.get("XK_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
COMPOSE_FILES = {
    "gateway-64": "compose.gateway.yml",
    "gateway-h3": "compose.gateway-h3.yml",
    "production-stack": "compose.production-stack.yml",
}
FIXED_PORTS = ("8080", "8443", "9090", "6379")  # what the compose files bind on the host's network
COMPOSE_COMMAND = os.environ.get("XK_ARENA_STACKS", "").split()  # e.g. podman-compose; empty: build/arena


def compose(profile):
    with open(os.path.join(SOURCE_DIR, "arena", COMPOSE_FILES[profile])) as f:
        return yaml.safe_load(f)["services"]


def localize(text, ports):
    """A compose value with the host's fixed ports moved to the test's free ones (ports: fixed ->
    ours) and wildcard binds to loopback."""
    text = text.replace("0.0.0.0:", "127.0.0.1:")
    return re.sub(r"(?<![0-9])(" + "|".join(FIXED_PORTS) + r")(?![0-9])", lambda m: str(ports[m.group(1)]), text)


def service_env(spec, ports):
    """A service's environment as its compose file sets it, on the test's ports and folders."""
    env = {}
    for item in spec.get("environment", []):
        name, value = item.split("=", 1)
        value = value.replace("${DATABASE_URL}", STACK.postgres.conninfo)
        env[name] = {"/certs": STACK.certs, "/data": STACK.data}.get(value, localize(value, ports))
    return env


def podman_lacks_health_startup_interval():
    """Whether the stacks run on a podman without --health-startup-interval (4.3, Debian 12's),
    which podman-compose asks for to carry a healthcheck's start_interval."""
    if not COMPOSE_COMMAND or "podman" not in COMPOSE_COMMAND[0]:
        return False
    help_text = subprocess.run(["podman", "create", "--help"], capture_output=True, text=True).stdout
    return "--health-startup-interval" not in help_text


def adapt_to_this_machine(profile, services):
    """The compose file's services with what this machine cannot give changed, each change printed:
    cpusets past its CPUs, limits past its hard limits, the cache's image where
    XK_ARENA_REDIS_IMAGE names a stand-in (Docker Hub out of reach), and a healthcheck option the
    container engine lacks. The image is built already (no build: section)."""
    cpus = sorted(os.sched_getaffinity(0))
    nofile_hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    memlock_hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    with open("/proc/sys/kernel/pid_max") as f:
        nproc = min(resource.getrlimit(resource.RLIMIT_NPROC)[1], int(f.read()))
    redis_image = os.environ.get("XK_ARENA_REDIS_IMAGE")
    no_start_interval = podman_lacks_health_startup_interval()
    # One copy per service: the file's anchors share one ulimits block between services.
    services = {name: copy.deepcopy(spec) for name, spec in services.items()}
    for name, spec in services.items():
        changes = []
        spec.pop("build", None)
        if spec.get("image") == "xkit-arena":
            spec["image"] = os.environ.get("XK_ARENA_IMAGE", "xkit-arena")
        if redis_image and spec.get("image", "").startswith("redis:") and spec["image"] != redis_image:
            changes.append(f"image {spec['image']} -> {redis_image}")
            spec["image"] = redis_image
        chosen = re.fullmatch(r"\$\{(\w+):-[0-9,-]+\}", spec.get("cpuset", ""))  # ${NAME:-default}
        if chosen and chosen.group(1) not in os.environ and not ComposeFilesTest.cpus(spec["cpuset"]) <= set(cpus):
            changes.append(f"cpuset {spec['cpuset']} -> {cpus[0]}-{cpus[-1]}")
            spec["cpuset"] = f"{cpus[0]}-{cpus[-1]}"
        limits = spec.get("ulimits", {})
        if "memlock" in limits and memlock_hard != resource.RLIM_INFINITY:
            changes.append("memlock -1 dropped (raising a hard limit needs CAP_SYS_RESOURCE)")
            del limits["memlock"]
        if "nofile" in limits and limits["nofile"]["hard"] > nofile_hard:
            changes.append(f"nofile {limits['nofile']['hard']} -> {nofile_hard} (ulimit -Hn)")
            limits["nofile"] = {"soft": nofile_hard, "hard": nofile_hard}
        if limits and "nproc" not in limits:
            changes.append(
                f"nproc {nproc} added (a service's ulimits replace the engine's defaults; its nproc is too high here)"
            )
            limits["nproc"] = {"soft": nproc, "hard": nproc}
        if no_start_interval and spec.get("healthcheck", {}).pop("start_interval", None):
            changes.append("healthcheck start_interval dropped (this podman has no --health-startup-interval)")
        for change in changes:
            print(f"test_arena_gateway: {profile} {name}: adapted to this machine: {change}", flush=True)
    return services


def compose_up(scope, profile):
    """The profile's whole stack up with COMPOSE_COMMAND, healthy, and down again after the class."""
    with open(os.path.join(SOURCE_DIR, "arena", COMPOSE_FILES[profile])) as f:
        document = yaml.safe_load(f)
    document["services"] = adapt_to_this_machine(profile, document["services"])
    path = os.path.join(STACK.folder, f"compose.{profile}.yml")
    with open(path, "w") as f:
        yaml.safe_dump(document, f)
    env = dict(os.environ, DATA_DIR=STACK.data, CERTS_DIR=STACK.certs, DATABASE_URL=STACK.postgres.conninfo)
    compose_run = COMPOSE_COMMAND + ["-p", f"xkit-{profile}", "-f", path]

    def down():
        subprocess.run(compose_run + ["down", "-t", "5"], env=env, capture_output=True, timeout=120)

    scope.addClassCleanup(down)
    done = subprocess.run(compose_run + ["up", "-d"], env=env, capture_output=True, timeout=300)
    if done.returncode != 0:
        raise AssertionError(
            f"{' '.join(compose_run)} up -d: exit {done.returncode}\n{done.stdout.decode()}{done.stderr.decode()}"
        )
    identity = {port: port for port in FIXED_PORTS}
    deadline = time.monotonic() + 60
    for name, spec in document["services"].items():
        _, *argv = spec["healthcheck"]["test"]
        while subprocess.run(argv, capture_output=True, timeout=10).returncode != 0:
            if time.monotonic() > deadline:
                logs = subprocess.run(compose_run + ["logs"], env=env, capture_output=True, timeout=60)
                raise AssertionError(f"{profile}: {name} not healthy within 60 s\n{logs.stdout.decode()[-4000:]}")
            time.sleep(0.5)
    return identity


def start(scope, spec, ports):
    """A compose service of the image (its command, /xkit-*) from build/arena, as the file starts it."""
    (command,) = spec["command"]
    process = ServerProcess(argv=[arena_binary(command.lstrip("/"))], env=service_env(spec, ports)).start()
    scope.addClassCleanup(process.close)
    return process


class Curl:
    """curl --http2 -k against an edge, as the arena's validation runs it."""

    def __init__(self, port, folder):
        self.port, self.folder = port, folder

    def __call__(self, target, *args, http="--http2"):
        head, body = os.path.join(self.folder, "head"), os.path.join(self.folder, "body")
        argv = ["curl", "-sk", http, "--max-time", "30", "-D", head, "-o", body, "-w", "%{http_version}"]
        done = subprocess.run(argv + list(args) + [f"https://localhost:{self.port}{target}"], capture_output=True)
        if done.returncode != 0:
            raise AssertionError(f"curl {target}: exit {done.returncode}: {done.stderr.decode()}")
        with open(head, "rb") as f:
            lines = f.read().decode("latin-1").split("\r\n")
        with open(body, "rb") as f:
            data = f.read()
        fields = {}
        for line in lines[1:]:
            if ":" in line:
                name, value = line.split(":", 1)
                fields[name.strip().lower()] = value.strip()
        response = types.SimpleNamespace(status=int(lines[0].split()[1]), fields=fields, body=data)
        response.version = done.stdout.decode()
        return response

    def json(self, target, *args):
        response = self(target, *args)
        if response.status != 200:
            raise AssertionError(f"{target}: {response.status} {response.body[:300]!r}")
        return response, json.loads(response.body)


class ModuleScope:
    """What the support helpers take as a test class: cleanups that run once the module's tests end."""

    addClassCleanup = staticmethod(unittest.addModuleCleanup)
    addCleanup = staticmethod(unittest.addModuleCleanup)


STACK = None  # the server every edge is in front of, started once for the module
certs_up, certs_down = shared_certs(__name__)


def setUpModule():
    """One PostgreSQL (the arena's seed), one redis-server (the `cache`) and the entry as the
    `server`, with REDIS_URL and DATABASE_URL as compose.production-stack.yml gives them."""
    global STACK
    certs_up()
    stack = types.SimpleNamespace(folder=tempfile.mkdtemp(prefix="xkit-arena-gateway-"))
    unittest.addModuleCleanup(shutil.rmtree, stack.folder, ignore_errors=True)
    stack.data, stack.certs = os.path.join(stack.folder, "data"), os.path.join(stack.folder, "certs")
    os.makedirs(stack.data)
    os.makedirs(stack.certs)
    stack.dataset = make_dataset(60)
    with open(os.path.join(stack.data, "dataset.json"), "w") as f:
        json.dump(stack.dataset, f)
    make_static_files(os.path.join(stack.data, "static"))
    shutil.copy(CERTS.rsa.cert, os.path.join(stack.certs, "server.crt"))
    shutil.copy(CERTS.rsa.key, os.path.join(stack.certs, "server.key"))
    stack.postgres = Postgres(ModuleScope)
    stack.postgres.seed(items=ITEMS, users=USERS)
    STACK = stack
    if COMPOSE_COMMAND:  # each class brings its stack up whole, the cache and the server with it
        return
    stack.redis = RedisServer(ModuleScope)
    stack.ports = {"8080": free_port(), "6379": stack.redis.port}
    # As compose.production-stack.yml starts it (the gateways' server is the same less REDIS_URL).
    stack.server = start(ModuleScope, compose("production-stack")["server"], stack.ports)
    stack.upstream = f"http://127.0.0.1:{stack.ports['8080']}"


def tearDownModule():
    certs_down()


class Stacks:
    """An edge of the class's own in front of the module's server."""

    @classmethod
    def start_edge(cls, profile, service, env=None, **ports):
        """The edge as the profile's compose file starts it (env: more), in front of the module's server."""
        cls.stack = STACK
        cls.postgres = STACK.postgres
        if COMPOSE_COMMAND:
            if env:
                raise unittest.SkipTest(f"{env} is no compose file's: tested against build/arena in make test")
            cls.ports = compose_up(cls, profile)
            edge = types.SimpleNamespace(port=int(cls.ports["8443"]))
            return edge, Curl(edge.port, tempfile.mkdtemp(dir=STACK.folder))
        cls.ports = dict(STACK.ports, **ports, **{"8443": free_port()})
        spec = compose(profile)[service]
        spec = dict(spec, environment=spec["environment"] + [f"{k}={v}" for k, v in (env or {}).items()])
        edge = start(cls, spec, cls.ports)
        return edge, Curl(edge.port, tempfile.mkdtemp(dir=STACK.folder))

    def assert_healthy(self, profile, service, ports, healthy=True):
        """Runs the service's compose healthcheck (its CMD, on the test's ports)."""
        kind, *argv = compose(profile)[service]["healthcheck"]["test"]
        self.assertEqual(kind, "CMD")
        done = subprocess.run([localize(arg, ports) for arg in argv], capture_output=True, timeout=10)
        self.assertEqual(done.returncode == 0, healthy, f"{profile} {service}: {argv} {done.stderr!r}")

    def static_bytes(self, name):
        with open(os.path.join(self.stack.data, "static", name), "rb") as f:
            return f.read()


class GatewayChecks(Stacks):
    """What the arena's validation asks of gateway-64 and gateway-h3 over h2 (self.curl)."""

    def test_h2_is_negotiated_and_static_files_have_their_types(self):
        for name, content_type in STATIC_TYPES.items():
            response = self.curl(f"/static/{name}")
            self.assertEqual((response.version, response.status), ("2", 200), name)
            self.assertEqual(response.fields["content-type"], content_type, name)
            self.assertEqual(response.body, self.static_bytes(name), name)
            self.assertNotIn("content-encoding", response.fields)

    def test_static_twins_as_the_load_asks_for_them(self):
        for name in STATIC_TEXT:
            response = self.curl(f"/static/{name}", "-H", "Accept-Encoding: br;q=1, gzip;q=0.8")
            self.assertEqual(response.fields.get("content-encoding"), "br", name)
            self.assertEqual(brotli.decompress(response.body), self.static_bytes(name), name)
            response = self.curl(f"/static/{name}", "-H", "Accept-Encoding: gzip")
            self.assertEqual(response.fields.get("content-encoding"), "gzip", name)
            self.assertEqual(gzip.decompress(response.body), self.static_bytes(name), name)

    def test_an_unknown_file_is_404(self):
        for target in ("/static/nonexistent.txt", "/static/reset.css.missing", "/static/../dataset.json"):
            self.assertEqual(self.curl(target).status, 404, target)

    def test_json_50_is_the_dataset_with_totals(self):
        response, body = self.curl.json("/json/50")
        self.assertEqual(response.fields["content-type"], "application/json")
        self.assertEqual(body["count"], 50)
        for item, want in zip(body["items"], self.stack.dataset[:50], strict=True):
            self.assertEqual(item, dict(want, total=want["price"] * want["quantity"]))
        response = self.curl("/json/7", "-H", "Accept-Encoding: br")
        self.assertEqual(response.fields.get("content-encoding"), "br")
        self.assertEqual(json.loads(brotli.decompress(response.body))["count"], 7)

    def test_async_db_shape_count_and_the_empty_range(self):
        for limit in (10, 25, 50):
            response, body = self.curl.json(f"/async-db?min=10&max=50&limit={limit}")
            self.assertEqual(response.fields["content-type"], "application/json")
            self.assertEqual(body["count"], limit)
            self.assertEqual(len(body["items"]), limit)
            for item in body["items"]:
                self.assertEqual(set(item), ITEM_FIELDS)
                self.assertIsInstance(item["tags"], list)
                self.assertIsInstance(item["active"], bool)
                self.assertEqual(set(item["rating"]), {"score", "count"})
                self.assertTrue(10 <= item["price"] <= 50)
        _, body = self.curl.json("/async-db?min=9999&max=9999&limit=50")
        self.assertEqual(body, {"items": [], "count": 0})

    def test_baseline2_sums(self):
        rng = random.Random()
        for a, b in [(13, 42), (rng.randint(100, 999), rng.randint(100, 999))]:
            response = self.curl(f"/baseline2?a={a}&b={b}")
            self.assertEqual((response.version, response.status, response.body), ("2", 200, str(a + b).encode()))
            self.assertEqual(response.fields["content-type"], "text/plain")
        response = self.curl("/baseline2?a=1&b=2", "--data-binary", "20")
        self.assertEqual(response.body, b"23")

    def test_dynamic_answers_are_not_cached(self):
        # Every request reaches the server: rows changed between two reads are read new.
        for quantity in (11, 12):
            self.postgres.psql(f"UPDATE items SET quantity = {quantity} WHERE price BETWEEN 10 AND 50")
            _, body = self.curl.json("/async-db?min=10&max=50&limit=10")
            self.assertEqual({item["quantity"] for item in body["items"]}, {quantity})


class Gateway64Test(GatewayChecks, unittest.TestCase):
    """compose.gateway.yml: the edge with h2 only."""

    @classmethod
    def setUpClass(cls):
        cls.edge, cls.curl = cls.start_edge("gateway-64", "proxy")

    def test_the_health_checks_pass_and_fail_as_the_services_do(self):
        for service in ("proxy", "server"):
            self.assert_healthy("gateway-64", service, self.ports)
        nobody = {port: free_port() for port in FIXED_PORTS}
        for service in ("proxy", "server"):
            self.assert_healthy("gateway-64", service, nobody, healthy=False)


class GatewayH2cUpstreamTest(GatewayChecks, unittest.TestCase):
    """The gateway-64 edge with UPSTREAM_PROTOCOL=h2c: every request a stream of one connection to the server."""

    @classmethod
    def setUpClass(cls):
        cls.edge, cls.curl = cls.start_edge("gateway-64", "proxy", {"UPSTREAM_PROTOCOL": "h2c"})


class GatewayH3Test(GatewayChecks, unittest.TestCase):
    """compose.gateway-h3.yml: the same edge with HTTP/3 on, h2 still on TCP."""

    @classmethod
    def setUpClass(cls):
        cls.edge, cls.curl = cls.start_edge("gateway-h3", "proxy")

    def test_h3_requests_as_the_arena_validates_them(self):
        async def requests():
            async with h3_connect("127.0.0.1", self.edge.port) as h3:
                for _ in range(4):
                    a, b = random.randint(1, 999), random.randint(1, 999)
                    response = await h3.request("GET", f"/baseline2?a={a}&b={b}")
                    self.assertEqual((response.status, response.body), (200, str(a + b).encode()))
                    response = await h3.request("GET", "/baseline2?a=13&b=42")
                    self.assertEqual((response.status, response.body), (200, b"55"))
                for _ in range(4):
                    response = await h3.request("GET", "/static/reset.css")
                    self.assertEqual(response.status, 200)
                    self.assertEqual(response.headers["content-type"], "text/css")
                    self.assertEqual(response.body, self.static_bytes("reset.css"))
                headers = [("accept-encoding", "br;q=1, gzip;q=0.8")]
                response = await h3.request("GET", "/static/app.js", headers=headers)
                self.assertEqual(response.headers.get("content-encoding"), "br")
                self.assertEqual(brotli.decompress(response.body), self.static_bytes("app.js"))
                response = await h3.request("GET", "/json/3")
                self.assertEqual(json.loads(response.body)["count"], 3)

        run(requests())

    def test_tcp_answers_advertise_h3(self):
        response = self.curl("/static/reset.css")
        self.assertEqual(response.fields.get("alt-svc", "").split(";")[0], f'h3=":{self.edge.port}"')


class ProductionStackTest(Stacks, unittest.TestCase):
    """compose.production-stack.yml: edge, authsvc, cache (Redis) and server."""

    @classmethod
    def setUpClass(cls):
        auth_port = 9090 if COMPOSE_COMMAND else free_port()
        if not COMPOSE_COMMAND:
            cls.authsvc = start(cls, compose("production-stack")["authsvc"], {"9090": auth_port})
        cls.edge, cls.curl = cls.start_edge("production-stack", "edge", **{"9090": auth_port})
        cls.auth_url = f"http://127.0.0.1:{auth_port}"

    def test_the_health_checks_pass(self):
        for service in ("edge", "authsvc", "cache", "server"):
            self.assert_healthy("production-stack", service, self.ports)

    def bearer(self, token=TOKEN):
        return ["-H", f"Authorization: Bearer {token}"]

    def post(self, id_, body, token=TOKEN):
        args = ["-X", "POST", "-H", "Content-Type: application/json", "--data-binary", json.dumps(body)]
        return self.curl(f"/api/items/{id_}", *(self.bearer(token) if token else []), *args)

    def test_no_token_or_a_bad_one_is_401_for_get_and_post(self):
        wrong_secret = jwt({"sub": "42"}, secret=b"not-the-secret")
        for token in (None, "invalid.token.here", wrong_secret, TOKEN[:-2]):
            args = self.bearer(token) if token else []
            self.assertEqual(self.curl("/api/items/1", *args).status, 401, token)
            self.assertEqual(self.curl("/api/me", *args).status, 401, token)
            self.assertEqual(self.post(4, {"name": "unauth", "price": 1, "quantity": 1}, token).status, 401, token)
        row = self.postgres.psql("SELECT name FROM items WHERE id = 4").strip()
        self.assertNotEqual(row, "unauth")

    def miss_then_hit(self, ids):
        """Reads the first of ids not read before twice: MISS, then HIT. A second MISS is the
        cache's 1-s TTL only when the two reads were that far apart (a loaded machine): then the
        next id. Returns the id read."""
        for id_ in ids:
            first = self.curl(f"/api/items/{id_}", *self.bearer())
            self.assertEqual((first.status, first.fields["x-cache"]), (200, "MISS"), id_)
            after_first = time.monotonic()
            second = self.curl(f"/api/items/{id_}", *self.bearer())
            self.assertEqual(second.status, 200)
            self.assertEqual(json.loads(first.body), json.loads(second.body))
            if second.fields["x-cache"] == "HIT":
                return id_
            self.assertGreater(time.monotonic() - after_first, 0.9, f"item {id_}: MISS twice within a second")
        self.fail(f"no MISS then HIT: every pair of reads of {ids} was a second or more apart")

    def test_the_real_tokens_item_miss_then_hit(self):
        response, body = self.curl.json("/api/items/1", *self.bearer())
        self.assertEqual(body["id"], 1)
        self.miss_then_hit((7, 8, 9, 10))

    def test_post_is_204_and_the_next_read_a_miss(self):
        self.assertEqual(self.post(2, {"name": "validate-updated", "price": 777, "quantity": 99}).status, 204)
        id_ = self.miss_then_hit((3, 13, 14, 15))  # warm
        self.assertEqual(self.post(id_, {"name": "validate-invalidated", "price": 111, "quantity": 22}).status, 204)
        response, body = self.curl.json(f"/api/items/{id_}", *self.bearer())
        self.assertEqual(response.fields["x-cache"], "MISS")
        self.assertEqual((body["name"], body["price"], body["quantity"]), ("validate-invalidated", 111, 22))

    def test_api_me_is_user_42_from_the_token(self):
        _, body = self.curl.json("/api/me", *self.bearer())
        self.assertEqual(body["id"], 42)
        # The edge's X-User-Id is the auth service's, whatever the client sends.
        _, body = self.curl.json("/api/me", *self.bearer(), "-H", "X-User-Id: 7")
        self.assertEqual(body["id"], 42)
        _, body = self.curl.json("/api/me", *self.bearer(jwt({"sub": 7, "exp": 4102444800})))
        self.assertEqual(body["id"], 7)

    def test_public_and_static_need_no_token(self):
        response = self.curl("/public/baseline?a=13&b=42")
        self.assertEqual((response.version, response.status, response.body), ("2", 200, b"55"))
        _, body = self.curl.json("/public/json/25")
        self.assertEqual(body["count"], 25)
        self.assertTrue(all(item["total"] == item["price"] * item["quantity"] for item in body["items"]))
        response = self.curl("/static/reset.css")
        self.assertEqual((response.status, response.fields["content-type"]), (200, "text/css"))

    def test_the_auth_service_refuses_what_is_not_a_valid_hs256_token(self):
        def ask(token, method="GET"):
            args = ["curl", "-s", "-o", "/dev/null", "-D", "-", "-X", method]
            if token is not None:
                args += ["-H", f"Authorization: Bearer {token}"]
            out = subprocess.run(args + [f"{self.auth_url}/_auth"], capture_output=True, timeout=10).stdout.decode()
            fields = {
                line.split(":", 1)[0].lower(): line.split(":", 1)[1].strip()
                for line in out.split("\r\n")[1:]
                if ":" in line
            }
            return int(out.split()[1]), fields.get("x-user-id")

        self.assertEqual(ask(TOKEN), (200, "42"))
        self.assertEqual(ask(TOKEN, "POST"), (200, "42"))
        self.assertEqual(ask(jwt({"sub": 1234})), (200, "1234"))
        for token in [
            None,
            "",
            "a.b",
            "invalid.token.here",
            jwt({"sub": "42"}, header={"alg": "none"}),
            jwt({"sub": "42"}, header={"alg": "HS512"}),
            jwt({"sub": "42", "exp": 1000}),  # expired
            jwt({"name": "no sub"}),
            jwt({"sub": "4 2"}),
            jwt({"sub": ""}),
            TOKEN + "A",
            TOKEN.replace(".", "=.", 1),
        ]:
            self.assertEqual(ask(token), (401, None), token)
        health = subprocess.run(
            ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", f"{self.auth_url}/_health"], capture_output=True
        )
        self.assertEqual(health.stdout, b"200")


class ComposeFilesTest(unittest.TestCase):
    """What the arena asks of every service of a stack (CONTRACT.md, "The stacks")."""

    SERVICES = {
        "gateway-64": {"proxy", "server"},
        "gateway-h3": {"proxy", "server"},
        "production-stack": {"edge", "cache", "authsvc", "server"},
    }

    @staticmethod
    def cpus(cpuset):
        """The logical CPUs of a cpuset's default ("${NAME:-0-15,64-79}")."""
        text = re.fullmatch(r"\$\{\w+:-([0-9,-]+)\}", cpuset).group(1)
        cpus = set()
        for part in text.split(","):
            low, _, high = part.partition("-")
            cpus.update(range(int(low), int(high or low) + 1))
        return cpus

    def test_every_service_as_the_arena_requires(self):
        for profile, names in self.SERVICES.items():
            services = compose(profile)
            self.assertEqual(set(services), names, profile)
            taken = set()
            for name, spec in services.items():
                where = f"{profile} {name}"
                self.assertEqual(spec["network_mode"], "host", where)
                self.assertIn("seccomp:unconfined", spec["security_opt"], where)
                self.assertEqual(spec["ulimits"]["memlock"], -1, where)
                self.assertEqual(spec["ulimits"]["nofile"], {"soft": 1048576, "hard": 1048576}, where)
                self.assertIn("test", spec["healthcheck"], where)
                cpus = self.cpus(spec["cpuset"])
                self.assertFalse(cpus & taken, f"{where}: a CPU of another service")
                taken |= cpus
                for needed, condition in (spec.get("depends_on") or {}).items():
                    self.assertIn(needed, services, where)
                    self.assertEqual(condition, {"condition": "service_healthy"}, where)
            # 32 cores and their SMT siblings (64 logical CPUs on the arena's host of 128).
            self.assertEqual(len(taken), 64, profile)
            self.assertEqual({cpu + 64 for cpu in taken if cpu < 64}, {cpu for cpu in taken if cpu >= 64}, profile)
        edge = {p: compose(p)["proxy" if p != "production-stack" else "edge"]["environment"] for p in self.SERVICES}
        self.assertIn("EDGE_HTTP3=1", edge["gateway-h3"])
        self.assertNotIn("EDGE_HTTP3=1", edge["gateway-64"])
        self.assertIn("AUTH_URL=http://127.0.0.1:9090", edge["production-stack"])

    def test_meta_json_lists_the_stacks(self):
        with open(os.path.join(SOURCE_DIR, "arena", "meta.json")) as f:
            tests = json.load(f)["tests"]
        for profile in self.SERVICES:
            self.assertIn(profile, tests)


if __name__ == "__main__":
    unittest.main()
