"""xKit's kTLS path, which this machine's kernel cannot run (it has no `tls`
module): support/ktls_guest.py boots Debian's kernel under qemu with the
host's files shared read-only, `modprobe tls` there, and runs
support/ktls_checks.py inside against the https_bench_server of this build
(XK_HTTPS_SERVER), with real clients (curl, openssl s_client, Python's ssl
and an HTTP/2 client): kernel records on TLS 1.3 (send) and 1.2 (both ways)
as the server logs and a handler sees them and as the kernel's own counters
(/proc/net/tls_stat) show, 3 MB echoes over HTTP/1.1 and HTTP/2, a static
file by sendfile(2) (strace shows it), KeyUpdates, close_notify and bad
records. qemu, the kernel and busybox come from scripts/install-deps.sh; a
missing one fails the test and names the packages."""

import re
import sys
import unittest

from support.ktls_guest import run_in_guest

# Booting (about 2 s of the guest's own time) and the checks, under TCG on a busy 2-core machine.
GUEST_TIMEOUT = 560
# Every check in support/ktls_checks.py: none may go missing unnoticed.
CHECKS = 17


class KtlsInGuestTest(unittest.TestCase):
    def test_the_tls_suites_key_cases_pass_on_kernel_records(self):
        result = run_in_guest([sys.executable, "-m", "unittest", "-v", "support.ktls_checks"], timeout=GUEST_TIMEOUT)
        sys.stderr.write(result.output)
        self.assertEqual(result.modprobe_tls, 0, "modprobe tls failed in the guest:\n" + result.console[-3000:])
        self.assertEqual(result.status, 0, result.output[-6000:])
        ran = re.search(r"^Ran (\d+) tests?", result.output, re.MULTILINE)
        self.assertIsNotNone(ran, result.output[-3000:])
        self.assertEqual(int(ran.group(1)), CHECKS, result.output[-3000:])
        # No check may be skipped or expected to fail.
        self.assertRegex(result.output, r"\nOK\n")


if __name__ == "__main__":
    unittest.main()
