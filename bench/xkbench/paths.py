"""Where the bench's parts live, for every module that reads or writes them."""

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
BENCH_DIR = PACKAGE.parent
REPO_ROOT = BENCH_DIR.parent
PEERS_DIR = BENCH_DIR / "peers"
RESULTS_DIR = BENCH_DIR / "results"
WRK_SCRIPTS = PACKAGE / "wrk"
DEFAULT_BUILD_DIR = REPO_ROOT / "build"


def shown(path):
    """A path under the repository as the reports show it: relative to the repository."""
    try:
        return str(Path(path).relative_to(REPO_ROOT))
    except ValueError:
        return str(path)
