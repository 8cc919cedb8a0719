"""libxkit.so exports exactly the public API: every symbol it exports is declared,
with a /** */ comment, in a header under include/ (what <xkit.h> brings in), and
every function and variable those headers declare is exported. A comment may
cover the few declarations right below it (no blank line between), as
"Opens and closes an object or an array." does.

The declarations are read by the compiler, not by a pattern: GCC's -aux-info
lists each function prototype a translation unit of `#include <xkit.h>` sees,
with its file and line. Variables (none today) are found by the `extern` that a
header must give them."""

import os
import re
import shutil
import subprocess
import tempfile
import unittest

SOURCE_DIR = os.environ.get("XK_SOURCE_DIR", "")
SHARED_LIB = os.environ.get("XK_SHARED_LIB", "")

# "/* /src/include/xhttp/server.h:108:NC */ extern xErrno xHttpServerRoute (xHttpServer *, ...);"
AUX_LINE = re.compile(r"^/\* (?P<file>.+?):(?P<line>\d+):\w+ \*/ (?P<decl>.*)$")
# The declared name: the first identifier before a "(" that is not a type keyword (a function
# returning a function pointer reads "void (*xName (int)) (void)").
NAME_BEFORE_PAREN = re.compile(r"([A-Za-z_]\w*)\s*\(")
TYPE_WORDS = {"void", "char", "short", "int", "long", "float", "double", "signed", "unsigned", "_Bool", "const"}
EXTERN_VARIABLE = re.compile(r"^\s*extern\s+(?!\"C\")[^;(]*?([A-Za-z_]\w*)\s*(?:\[[^\]]*\])?\s*;", re.M)
COMMENT = re.compile(r"/\*.*?\*/", re.S)


def declared_name(decl):
    for match in NAME_BEFORE_PAREN.finditer(decl):
        if match.group(1) not in TYPE_WORDS:
            return match.group(1)
    raise AssertionError(f"no function name in GCC's declaration {decl!r}")


class ExportsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not (SOURCE_DIR and SHARED_LIB):
            raise RuntimeError("XK_SOURCE_DIR and XK_SHARED_LIB are not set; run through ctest")
        cls.include = os.path.realpath(os.path.join(SOURCE_DIR, "include"))
        cls.declarations = cls.public_functions()
        cls.declarations.update(cls.public_variables())
        cls.exported = cls.exported_symbols()

    @classmethod
    def public_functions(cls):
        """name -> (header, line) for each function a public header declares, but static inline ones."""
        gcc = shutil.which("gcc")
        if gcc is None:
            raise AssertionError("gcc is missing (its -aux-info lists the headers' declarations): apt-get install gcc")
        with tempfile.TemporaryDirectory(prefix="xkit-exports-") as tmp:
            source, aux = os.path.join(tmp, "all.c"), os.path.join(tmp, "all.aux")
            with open(source, "w") as f:
                f.write("#include <xkit.h>\n")
            done = subprocess.run(
                [gcc, "-I", cls.include, "-fsyntax-only", "-aux-info", aux, source], capture_output=True, text=True
            )
            if done.returncode != 0:
                raise AssertionError(f"<xkit.h> does not compile on its own:\n{done.stderr}")
            with open(aux) as f:
                lines = f.read().splitlines()
        found = {}
        for line in lines:
            match = AUX_LINE.match(line)
            if not match or not os.path.realpath(match["file"]).startswith(cls.include + os.sep):
                continue
            if match["decl"].startswith("static "):
                continue  # inline in the header: compiled into the caller, not a symbol
            found[declared_name(match["decl"])] = (os.path.realpath(match["file"]), int(match["line"]))
        return found

    @classmethod
    def public_variables(cls):
        """name -> (header, line) for each variable a public header declares extern."""
        found = {}
        for root, _, names in os.walk(cls.include):
            for name in names:
                path = os.path.join(root, name)
                with open(path) as f:
                    text = f.read()
                # Comments become blanks of the same lines, so line numbers stay true.
                code = COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
                for match in EXTERN_VARIABLE.finditer(code):
                    found[match.group(1)] = (path, code.count("\n", 0, match.start(1)) + 1)
        return found

    @classmethod
    def exported_symbols(cls):
        done = subprocess.run(["nm", "-D", "--defined-only", SHARED_LIB], capture_output=True, text=True)
        if done.returncode != 0:
            raise AssertionError(f"nm -D {SHARED_LIB} failed:\n{done.stderr}")
        return {line.split()[-1].split("@")[0] for line in done.stdout.splitlines() if line.strip()}

    def test_headers_declare_the_api(self):
        # A parse that found nothing would make the checks below vacuous.
        self.assertIn("xHttpServerCreate", self.declarations)
        self.assertIn("xKitVersion", self.declarations)
        self.assertGreater(len(self.declarations), 100)

    def test_every_exported_symbol_is_declared_in_a_public_header(self):
        undeclared = sorted(self.exported - set(self.declarations))
        self.assertEqual(
            undeclared,
            [],
            f"{os.path.basename(SHARED_LIB)} exports symbols no header under include/ declares: "
            "internal functions must stay hidden (declare them in a src/ header; the library is "
            "built with -fvisibility=hidden, so nothing else should export them)",
        )

    def test_every_public_declaration_is_exported(self):
        missing = sorted(name for name in self.declarations if name not in self.exported)
        self.assertEqual(
            missing,
            [],
            f"declared in include/ but not exported by {os.path.basename(SHARED_LIB)}: not defined, or "
            "declared outside the header's `#pragma GCC visibility push(default)`",
        )

    def test_every_public_declaration_is_documented(self):
        undocumented = []
        texts = {}
        for name, (path, line) in sorted(self.declarations.items()):
            if path not in texts:
                with open(path) as f:
                    texts[path] = f.read()
            text = texts[path]
            start = sum(len(row) + 1 for row in text.split("\n")[: line - 1])
            before = text[:start]
            end = before.rfind("*/")
            opening = before.rfind("/*", 0, end)
            # The comment that opens the declaration's paragraph: between the two, only
            # declarations it also covers (xJsonBeginObject, xJsonEndObject, ...), no blank line,
            # no type definition, no preprocessor line.
            between = before[end + 2 :] if end >= 0 else before
            if end < 0 or not before.startswith("/**", opening) or re.search(r"\n\s*\n|[{}#]", between):
                undocumented.append(f"{name} ({os.path.relpath(path, SOURCE_DIR)}:{line})")
        self.assertEqual(undocumented, [], "public declarations without a /** */ comment just above them")


if __name__ == "__main__":
    unittest.main()
