"""The benchmarks' one command: python3 bench/xkbench SUBCOMMAND (or, from bench/,
python3 -m xkbench SUBCOMMAND); --help lists the subcommands."""

import sys
from pathlib import Path

if sys.version_info < (3, 11):  # noqa: UP036  (for the Python that runs it, older than the code)
    sys.exit(f"xkbench needs Python 3.11 or newer; this is {sys.version.split()[0]}")
if not __package__:  # run as a folder: make the package importable by its name
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from xkbench.cli import main  # noqa: E402  (after the version check and the path)
from xkbench.prepare import SetupFailed  # noqa: E402
from xkbench.servers import RunFailed  # noqa: E402

try:
    sys.exit(main())
except (SetupFailed, RunFailed) as error:
    sys.exit(f"xkbench: {error}")
except OSError as error:  # e.g. a results folder that cannot be written
    sys.exit(f"xkbench: {error.strerror or error}: {error.filename or ''}".rstrip(": "))
except KeyboardInterrupt:
    sys.exit(130)  # servers were already stopped on the way out
