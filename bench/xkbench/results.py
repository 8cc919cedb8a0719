"""Where every subcommand's report goes: OUT/<subcommand>/<date>[-N].md and .json, N counting
the runs of one day from 2 (the first has none). The suite also keeps OUT/latest.md and .json."""

import datetime
import json
import tempfile
from pathlib import Path

from .prepare import SetupFailed


def check_writable(out_dir):
    """Fails before minutes of measuring, not after, when the report cannot be written."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out_dir):
            pass
    except OSError as error:
        raise SetupFailed(f"cannot write the report to {out_dir}: {error.strerror or error}") from None


def today():
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")


def next_stamp(folder, date):
    """date, or date-2, date-3 ...: the first that names no report (nor chart folder) yet."""
    stamp, number = date, 1
    while any((folder / name).exists() for name in (f"{stamp}.md", f"{stamp}.json", stamp)):
        number += 1
        stamp = f"{date}-{number}"
    return stamp


def json_text(data):
    return json.dumps(data, indent=1, ensure_ascii=False, default=str) + "\n"


def write(out_dir, subcommand, markdown, data, date=None):
    """Writes the report of a subcommand ("compare/h2c" for one with its own), returns the
    stamp and the paths of the markdown and the JSON."""
    folder = Path(out_dir) / subcommand
    folder.mkdir(parents=True, exist_ok=True)
    stamp = next_stamp(folder, date or today())
    md_path, json_path = folder / f"{stamp}.md", folder / f"{stamp}.json"
    md_path.write_text(markdown)
    json_path.write_text(json_text(data))
    return stamp, md_path, json_path


def options_record(args):
    """The parsed options as JSON can hold them (paths and sets as text)."""
    plain = (str, int, float, bool, list, tuple, dict, type(None))
    return {
        key: sorted(value) if isinstance(value, set) else str(value) if isinstance(value, Path) else value
        for key, value in vars(args).items()
        if isinstance(value, plain + (set, Path))
    }
