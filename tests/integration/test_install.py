"""The install story: `cmake --install` lays out headers, both libraries,
pkg-config files and a CMake package, and a user's program builds against each
of them the way our README says, and serves: through pkg-config and through
find_package alike, linked with libxkit.so by default and with libxkit.a on
request.

The prefix here is a temporary folder, not one the dynamic linker searches, so
the shared programs carry the library's folder as README says (-Wl,-rpath with
pkg-config; CMake's own RPATH with find_package). Installing into /usr/local,
where ld.so finds the library with no help, is tests/package/test_library_only.py.
README's quick start is read out of README.md and built and run the same way."""

import glob
import os
import re
import shutil
import subprocess
import tempfile
import unittest
import urllib.request

from support.harness import ServerProcess, require_tool

BUILD_DIR = os.environ.get("XK_BUILD_DIR", "")
SOURCE_DIR = os.environ.get("XK_SOURCE_DIR", "")
# A sanitized libxkit.a needs its runtime at link time.
SANITIZE = ["-fsanitize=address,undefined"] if os.environ.get("XK_SANITIZERS") == "ON" else []


def run(cmd, **kw):
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=240, **kw)
    if result.returncode != 0:
        raise AssertionError(f"{cmd} failed:\n{result.stdout}\n{result.stderr}")
    return result


class InstallTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not (BUILD_DIR and SOURCE_DIR):
            raise RuntimeError("XK_BUILD_DIR and XK_SOURCE_DIR are not set; run through ctest")
        cls.tmp = tempfile.mkdtemp(prefix="xkit-install-")
        cls.prefix = os.path.join(cls.tmp, "prefix")
        run(["cmake", "--install", BUILD_DIR, "--prefix", cls.prefix])
        cls.libdir = next(
            os.path.join(cls.prefix, d)
            for d in ("lib", "lib64", "lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu")
            if os.path.exists(os.path.join(cls.prefix, d, "pkgconfig", "xkit.pc"))
        )

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def serves_hello(self, binary):
        # As a user runs it: without LD_LIBRARY_PATH, whatever ctest's environment holds.
        server = ServerProcess(argv=["env", "-u", "LD_LIBRARY_PATH", binary, "0"]).start()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/hello/installed", timeout=5) as r:
                self.assertEqual(r.read(), b"Hello, installed!\n")
            server.stop_and_check()
        finally:
            server.close()

    def test_headers_libraries_and_package_files_are_installed(self):
        public = {
            "xkit.h",
            "xbase/buffer.h",
            "xbase/errno.h",
            "xbase/event.h",
            "xbase/json.h",
            "xbase/log.h",
            "xbase/str.h",
            "xdb/pg.h",
            "xdb/redis.h",
            "xdb/redis_cache.h",
            "xhttp/client.h",
            "xhttp/compress.h",
            "xhttp/grpc.h",
            "xhttp/observe.h",
            "xhttp/proxy.h",
            "xhttp/request.h",
            "xhttp/response.h",
            "xhttp/server.h",
            "xhttp/static.h",
            "xhttp/tls.h",
            "xhttp/tls_conf.h",
            "xhttp/websocket.h",
        }
        include = os.path.join(self.prefix, "include")
        installed = {
            os.path.relpath(os.path.join(top, name), include) for top, _, names in os.walk(include) for name in names
        }
        # Exactly the public API: internals (the memory cache, the buffer pool) stay in src/.
        self.assertEqual(installed, public)
        for lib in ("libxkit.a", "libxkit.so", "libxkit.so.0.3"):
            self.assertTrue(os.path.exists(os.path.join(self.libdir, lib)), lib)
        self.assertTrue(os.path.exists(os.path.join(self.libdir, "cmake", "xkit", "xkitConfig.cmake")))
        for pc in ("xkit.pc", "xkit-static.pc"):
            self.assertTrue(os.path.exists(os.path.join(self.libdir, "pkgconfig", pc)), pc)

    def test_shared_library_is_named_by_its_soname_and_carries_no_rpath(self):
        # The soname carries the minor version before 1.0 (CHANGELOG.md); programs record it,
        # and libxkit.so.0.3 is the link ldconfig would make to the file.
        real = os.path.join(self.libdir, "libxkit.so.0.3.0")
        self.assertTrue(os.path.isfile(real) and not os.path.islink(real))
        self.assertEqual(os.path.realpath(os.path.join(self.libdir, "libxkit.so.0.3")), real)
        self.assertEqual(os.path.realpath(os.path.join(self.libdir, "libxkit.so")), real)
        dynamic = run(["readelf", "-d", real]).stdout
        self.assertIn("Library soname: [libxkit.so.0.3]", dynamic)
        # It depends only on system libraries: an RPATH would only point into the build folder.
        self.assertNotRegex(dynamic, r"\((RPATH|RUNPATH)\)")

    def pkg_config(self, package):
        env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(self.libdir, "pkgconfig"))
        return run(["pkg-config", "--cflags", "--libs", package], env=env).stdout.split()

    def shared_flags(self):
        """pkg-config's flags for libxkit.so, and the RPATH README says a prefix outside the
        dynamic linker's folders needs."""
        return self.pkg_config("xkit") + [f"-Wl,-rpath,{self.libdir}"]

    def assert_links(self, binary, shared):
        libraries = run(["ldd", binary]).stdout
        if shared:
            self.assertIn(f"libxkit.so.0.3 => {os.path.join(self.libdir, 'libxkit.so.0.3')} ", libraries)
        else:
            self.assertNotIn("libxkit", libraries)

    def build_with_pkg_config(self, name, flags):
        binary = os.path.join(self.tmp, name)
        run(["cc", os.path.join(SOURCE_DIR, "examples", "hello_server.c"), "-o", binary] + flags + SANITIZE)
        return binary

    def test_program_built_with_pkg_config_links_the_shared_library_and_serves(self):
        binary = self.build_with_pkg_config("hello_pkgconfig", self.shared_flags())
        self.assert_links(binary, shared=True)
        self.serves_hello(binary)

    def test_readme_quick_start_is_hello_server_and_builds_and_serves(self):
        # The C block under README's "## Quick start", as a reader copies it: the same text as
        # examples/hello_server.c (which the other tests build), built with README's command.
        with open(os.path.join(SOURCE_DIR, "README.md"), encoding="utf-8") as f:
            found = re.search(r"^## Quick start\n.*?^```c\n(.*?)^```$", f.read(), re.S | re.M)
        self.assertIsNotNone(found, "README.md has no ```c block under '## Quick start'")
        with open(os.path.join(SOURCE_DIR, "examples", "hello_server.c"), encoding="utf-8") as f:
            self.assertEqual(found.group(1), f.read(), "README's quick start and examples/hello_server.c differ")
        source = os.path.join(self.tmp, "readme_quick_start", "hello_server.c")
        os.makedirs(os.path.dirname(source), exist_ok=True)
        with open(source, "w", encoding="utf-8") as f:
            f.write(found.group(1))
        binary = os.path.join(self.tmp, "readme_quick_start", "hello_server")
        run(["cc", source, "-o", binary] + self.shared_flags() + SANITIZE)
        self.assert_links(binary, shared=True)
        self.serves_hello(binary)

    def test_program_built_with_pkg_config_static_links_libxkit_a_and_serves(self):
        binary = self.build_with_pkg_config("hello_pkgconfig_static", self.pkg_config("xkit-static"))
        self.assert_links(binary, shared=False)
        self.serves_hello(binary)

    def test_every_example_builds_against_the_installed_headers_and_shared_library(self):
        # libxkit.so exports the public API alone: an example that used anything else would
        # not link here (test_examples runs them).
        examples = sorted(glob.glob(os.path.join(SOURCE_DIR, "examples", "*.c")))
        self.assertGreaterEqual(len(examples), 4, examples)
        for source in examples:
            with self.subTest(example=os.path.basename(source)):
                binary = os.path.join(self.tmp, os.path.basename(source)[:-2] + "_installed")
                run(["cc", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter", source, "-o", binary]
                    + self.shared_flags() + SANITIZE)  # fmt: skip
                self.assert_links(binary, shared=True)

    def test_programs_built_with_find_package_link_as_asked_and_serve(self):
        project = os.path.join(self.tmp, "consumer")
        os.makedirs(project, exist_ok=True)
        shutil.copy(os.path.join(SOURCE_DIR, "examples", "hello_server.c"), project)
        with open(os.path.join(project, "CMakeLists.txt"), "w") as f:
            f.write(
                "cmake_minimum_required(VERSION 3.25)\nproject(consumer C)\n"
                "find_package(xkit REQUIRED)\nadd_executable(hello hello_server.c)\n"
                "target_link_libraries(hello PRIVATE xkit::xkit)\n"
                "add_executable(hello_static hello_server.c)\n"
                "target_link_libraries(hello_static PRIVATE xkit::xkit_static)\n"
            )
        build = os.path.join(project, "build")
        run(
            [
                "cmake",
                "-S",
                project,
                "-B",
                build,
                f"-DCMAKE_PREFIX_PATH={self.prefix}",
                f"-DCMAKE_EXE_LINKER_FLAGS={' '.join(SANITIZE)}",
            ]
        )
        run(["cmake", "--build", build])
        self.assert_links(os.path.join(build, "hello"), shared=True)
        self.serves_hello(os.path.join(build, "hello"))
        self.assert_links(os.path.join(build, "hello_static"), shared=False)
        self.serves_hello(os.path.join(build, "hello_static"))

    def test_headers_compile_as_cpp(self):
        cxx = require_tool(self, "c++")
        source = os.path.join(self.tmp, "use.cpp")
        with open(source, "w") as f:
            f.write(
                "#include <xkit.h>\n#include <cstdio>\n#include <cstring>\n"
                "static void h(xHttpRequest *, xHttpResponse *res, void *) {"
                ' xHttpResponseSend(res, "ok", 2); }\n'
                "int main() { xHttpServer *s = xHttpServerCreate(nullptr, nullptr);"
                ' xHttpServerRoute(s, "GET /", h, nullptr); xHttpServerDestroy(s);'
                ' char v[32]; std::snprintf(v, sizeof v, "%d.%d.%d", XKIT_VERSION_MAJOR,'
                " XKIT_VERSION_MINOR, XKIT_VERSION_PATCH);"
                " std::puts(xKitVersion()); return std::strcmp(v, xKitVersion()) != 0; }\n"
            )
        run(
            [cxx, "-std=c++17", "-Wall", "-Werror", source, "-o", os.path.join(self.tmp, "use_cpp")]
            + self.shared_flags()
            + SANITIZE
        )
        printed = run([os.path.join(self.tmp, "use_cpp")]).stdout.strip()
        self.assertRegex(printed, r"^\d+\.\d+\.\d+$")


if __name__ == "__main__":
    unittest.main()
