#!/usr/bin/env python3
"""xKit's benchmark suite: xKit against Go's net/http (and on request nginx and h2o) over
HTTP/1.1, cleartext HTTP/2, HTTPS/1.1 and HTTPS/2, with wrk and h2load, servers and load
generator on disjoint cores. `make bench` sets up the machine and runs this; see
bench/README.md for the options and what the numbers mean."""

import sys

if sys.version_info < (3, 11):
    sys.exit(f"run_bench.py needs Python 3.11 or newer; this is {sys.version.split()[0]}")

from xkbench.cli import main  # noqa: E402  (after the version check, which must run first)
from xkbench.prepare import SetupFailed  # noqa: E402

if __name__ == "__main__":
    try:
        sys.exit(main())
    except SetupFailed as error:
        sys.exit(f"run_bench: {error}")
    except OSError as error:  # e.g. a results folder that cannot be written
        sys.exit(f"run_bench: {error.strerror or error}: {error.filename or ''}".rstrip(": "))
    except KeyboardInterrupt:
        sys.exit(130)  # servers were already stopped on the way out
