"""The runner's command line: a report folder that cannot be written stops it with a message
before any measuring, not with a stack trace after it."""

import tempfile
import unittest
from pathlib import Path

import support  # noqa: F401  (puts bench/ on the path)
from xkbench.cli import check_writable
from xkbench.prepare import SetupFailed


class ReportFolderTest(unittest.TestCase):
    def test_a_folder_that_can_be_made_is_made(self):
        with tempfile.TemporaryDirectory() as tmp:
            out_dir = Path(tmp) / "results" / "here"
            check_writable(out_dir)
            self.assertTrue(out_dir.is_dir())
            self.assertEqual(list(out_dir.iterdir()), [])  # the probe file is gone

    def test_a_folder_under_a_file_is_refused_with_its_reason(self):
        with tempfile.NamedTemporaryFile() as file:
            with self.assertRaises(SetupFailed) as refused:
                check_writable(Path(file.name) / "results")
            self.assertIn("cannot write the report to", str(refused.exception))
            self.assertIn("Not a directory", str(refused.exception))


if __name__ == "__main__":
    unittest.main()
