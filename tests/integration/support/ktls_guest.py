"""A Linux guest with the kernel's `tls` module, for the tests of xKit's kTLS path.

This machine's kernel (and many CI kernels) has no `tls` module, so the path
where OpenSSL hands the records to the kernel after the handshake never runs
on the host. Debian's own kernel (`linux-image-amd64`) has it. run_in_guest
boots that kernel under qemu (TCG: no KVM needed) from a small busybox
initramfs that:

- loads the virtio, 9p and `tls` modules (busybox modprobe, from a copy of
  the modules the initramfs needs, with the kernel's modules.dep/alias so the
  crypto API can load gcm and AES on demand),
- mounts the host's / read-only over 9p and chroots into it, with its own
  /proc, /sys, /dev, a tmpfs /tmp, and one host folder shared writable at the
  same path (where the command's output and exit status come back),
- brings up the loopback interface only (the guest has no network card: the
  server and its clients both run inside),
- runs the command (a shell script) in the given folder, and powers off.

qemu is killed at the timeout. From the command line:

    python3 tests/integration/support/ktls_guest.py [--timeout S] -- COMMAND [ARG]...

runs COMMAND in the guest, in the current folder, prints its output and
exits with its status.
"""

import argparse
import os
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

# Packages that provide the guest (scripts/install-deps.sh installs them).
PACKAGES = "qemu-system-x86 linux-image-amd64 busybox-static"
QEMU = "qemu-system-x86_64"
BUSYBOX = "/bin/busybox"  # busybox-static's, which needs no libraries in the initramfs
# What the guest needs loaded before it can mount the host, and the module under test.
MODULES = ("virtio_pci", "9pnet_virtio", "9p", "tls")
# Directories of the kernel's modules copied into the initramfs: the ones
# above with their dependencies, and the crypto the `tls` module asks for by
# name (gcm(aes), ccm, chacha20poly1305) when a socket is set up.
MODULE_DIRS = (
    "kernel/drivers/virtio",
    "kernel/net/9p",
    "kernel/fs/9p",
    "kernel/fs/netfs",
    "kernel/fs/fscache",
    "kernel/net/tls",
    "kernel/crypto",
    "kernel/arch/x86/crypto",
    "kernel/lib",
)
# Environment variables the command inherits from the caller, besides XK_*.
PASSED_ENV = ("PATH", "LANG", "LC_ALL", "PYTHONPATH", "ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS")

INIT = r"""#!/bin/busybox sh
# The guest's init: modules, the host's / read-only, the command, power off.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for w in $(cat /proc/cmdline); do
  case $w in xk.out=*) OUT=${w#xk.out=} ;; esac
done
fail() { echo "xk-guest: $*"; poweroff -f; }
for m in virtio_pci 9pnet_virtio 9p; do modprobe $m || fail "modprobe $m failed"; done
mkdir -p /host
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=512000 hostroot /host ||
  fail "cannot mount the host's /"
mount -t proc proc /host/proc
mount -t sysfs sys /host/sys
mount -t devtmpfs dev /host/dev
mkdir -p /host/dev/pts /host/dev/shm
mount -t devpts devpts /host/dev/pts
mount -t tmpfs shm /host/dev/shm
mount -t tmpfs tmp /host/tmp
mount -t tmpfs run /host/run
mkdir -p "/host$OUT"
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 xkout "/host$OUT" || fail "cannot mount $OUT"
ip link set lo up
# The module under test: modprobe, as an administrator would.
modprobe tls > "/host$OUT/modprobe.log" 2>&1
echo $? > "/host$OUT/modprobe.status"
# AES-GCM for the kernel's records, loaded now so the first socket does not wait.
modprobe -a gcm aesni_intel ghash_clmulni_intel chacha20poly1305 ccm >> "/host$OUT/modprobe.log" 2>&1
chroot /host /bin/sh "$OUT/run.sh" > "/host$OUT/output" 2>&1 < /dev/null
echo $? > "/host$OUT/status"
sync
umount "/host$OUT"
poweroff -f
"""


class GuestUnavailable(RuntimeError):
    """The guest cannot be made here: a package is missing (install-deps installs them)."""


@dataclass
class GuestResult:
    status: int  # the command's exit status
    output: str  # its stdout and stderr together
    console: str  # the guest's serial console (the kernel's messages)
    modprobe_tls: int  # exit status of `modprobe tls` in the guest


def installed_kernel():
    """The newest Debian kernel image in /boot and its modules folder."""
    kernels = []
    for image in Path("/boot").glob("vmlinuz-*"):
        version = image.name[len("vmlinuz-") :]
        modules = Path("/lib/modules") / version
        if (modules / "modules.dep").is_file() and os.access(image, os.R_OK):
            kernels.append((version, image, modules))
    if not kernels:
        raise GuestUnavailable(f"no kernel with modules in /boot and /lib/modules: apt-get install {PACKAGES}")
    kernels.sort(key=lambda k: [int(p) if p.isdigit() else p for p in k[0].replace("-", ".").split(".")])
    return kernels[-1][1], kernels[-1][2]


def check_tools():
    missing = [tool for tool in (QEMU,) if not shutil.which(tool)]
    if not os.path.isfile(BUSYBOX):
        missing.append(BUSYBOX)
    if missing:
        raise GuestUnavailable(f"missing {', '.join(missing)}: apt-get install {PACKAGES}")
    return installed_kernel()


class Cpio:
    """An initramfs: the kernel's "newc" cpio format, uncompressed, written
    here so that no cpio tool or root privileges are needed (device nodes
    are entries, not files on disk)."""

    def __init__(self):
        self.data = bytearray()
        self.inode = 1

    def _entry(self, name, mode, body=b"", rdev=(0, 0)):
        fields = (self.inode, mode, 0, 0, 1, 0, len(body), 0, 0, rdev[0], rdev[1], len(name) + 1, 0)
        self.inode += 1
        self.data += b"070701" + b"".join(b"%08X" % f for f in fields) + name.encode() + b"\0"
        self.data += b"\0" * (-len(self.data) % 4)
        self.data += body
        self.data += b"\0" * (-len(self.data) % 4)

    def directory(self, name):
        self._entry(name, stat.S_IFDIR | 0o755)

    def file(self, name, body, mode=0o644):
        self._entry(name, stat.S_IFREG | mode, body)

    def symlink(self, name, target):
        self._entry(name, stat.S_IFLNK | 0o777, target.encode())

    def char_device(self, name, major, minor):
        self._entry(name, stat.S_IFCHR | 0o600, rdev=(major, minor))

    def finish(self):
        self._entry("TRAILER!!!", 0)
        return bytes(self.data)


def make_initramfs(modules_dir):
    """The guest's initramfs, as bytes: busybox, /init and the modules."""
    cpio = Cpio()
    for d in ("bin", "sbin", "dev", "proc", "sys", "lib", "lib/modules"):
        cpio.directory(d)
    cpio.char_device("dev/console", 5, 1)
    cpio.char_device("dev/null", 1, 3)
    cpio.file("bin/busybox", Path(BUSYBOX).read_bytes(), 0o755)
    cpio.symlink("bin/sh", "busybox")
    cpio.symlink("sbin/modprobe", "../bin/busybox")  # the kernel's request_module runs it
    cpio.file("init", INIT.encode(), 0o755)
    root = f"lib/modules/{modules_dir.name}"
    cpio.directory(root)
    for meta in ("modules.dep", "modules.alias", "modules.builtin", "modules.symbols", "modules.order"):
        if (modules_dir / meta).is_file():
            cpio.file(f"{root}/{meta}", (modules_dir / meta).read_bytes())
    made = set()
    for sub in MODULE_DIRS:
        for ko in sorted((modules_dir / sub).rglob("*.ko*")):
            rel = ko.relative_to(modules_dir)
            for i in range(1, len(rel.parts)):
                parent = "/".join(rel.parts[:i])
                if parent not in made:
                    made.add(parent)
                    cpio.directory(f"{root}/{parent}")
            cpio.file(f"{root}/{rel}", ko.read_bytes())
    return cpio.finish()


def _initramfs_for(modules_dir, workdir):
    path = Path(workdir) / "initramfs.cpio"
    path.write_bytes(make_initramfs(modules_dir))
    return path


def run_in_guest(command, cwd=None, env=None, timeout=300, memory="1G", cpus=2, icount=False):
    """Runs command (a list of arguments, or a shell script as one string)
    in the guest, in cwd (the caller's by default), and returns a
    GuestResult. icount: the guest's clock advances 1 ns per instruction it
    executes (qemu's -icount shift=0, one emulating thread), so the CPU time
    it reports counts instructions, whatever else loads the host. Raises
    GuestUnavailable when qemu or the kernel is missing, RuntimeError when
    the guest does not come back with a status (qemu is killed at timeout
    seconds)."""
    image, modules_dir = check_tools()
    cwd = os.path.abspath(cwd or os.getcwd())
    env = dict(env or {})
    for name, value in os.environ.items():
        if name in PASSED_ENV or name.startswith("XK_"):
            env.setdefault(name, value)
    script = command if isinstance(command, str) else shlex.join(command)
    with tempfile.TemporaryDirectory(prefix="xk-ktls-guest-") as out:
        exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(env.items()))
        Path(out, "run.sh").write_text(
            "# made by ktls_guest.py\nexport HOME=/tmp TMPDIR=/tmp\n"
            f"{exports}cd {shlex.quote(cwd)} || exit 125\n{script}\n"
        )
        initramfs = _initramfs_for(modules_dir, out)
        qemu = [
            QEMU,
            "-accel",
            "tcg,thread=single" if icount else "tcg,thread=multi",
            *(["-icount", "shift=0,sleep=off"] if icount else []),
            "-cpu",
            "max",  # AES-NI and PCLMUL for the guest's kernel crypto, as real servers have
            "-m",
            memory,
            "-smp",
            str(cpus),
            "-nographic",
            "-no-reboot",
            "-nic",
            "none",
            "-kernel",
            str(image),
            "-initrd",
            str(initramfs),
            "-append",
            f"console=ttyS0 quiet panic=-1 xk.out={out}",
            "-fsdev",
            "local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap",
            "-device",
            "virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot",
            "-fsdev",
            f"local,id=xkout,path={out},security_model=none",
            "-device",
            "virtio-9p-pci,fsdev=xkout,mount_tag=xkout",
        ]
        try:
            proc = subprocess.run(
                qemu, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout
            )
            console = proc.stdout.decode(errors="replace")
        except subprocess.TimeoutExpired as e:  # subprocess.run killed qemu
            console = (e.stdout or b"").decode(errors="replace")
            raise RuntimeError(f"the guest did not finish in {timeout} s; its console:\n{console[-4000:]}") from None
        status_file, output_file = Path(out, "status"), Path(out, "output")
        output = output_file.read_text(errors="replace") if output_file.exists() else ""
        if not status_file.exists():
            raise RuntimeError(
                f"the guest came back without a status (qemu exit {proc.returncode}); "
                f"its console:\n{console[-4000:]}\noutput:\n{output[-4000:]}"
            )
        modprobe = Path(out, "modprobe.status")
        return GuestResult(
            status=int(status_file.read_text().strip() or 255),
            output=output,
            console=console,
            modprobe_tls=int(modprobe.read_text().strip()) if modprobe.exists() else -1,
        )


def main():
    parser = argparse.ArgumentParser(description="Runs a command in a qemu guest whose kernel has kTLS.")
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--console", action="store_true", help="print the guest's console too")
    parser.add_argument("command", nargs="+")
    args = parser.parse_args()
    try:
        result = run_in_guest(args.command, timeout=args.timeout)
    except (GuestUnavailable, RuntimeError) as e:
        print(f"ktls_guest: {e}", file=sys.stderr)
        return 125
    if args.console:
        sys.stderr.write(result.console)
    sys.stdout.write(result.output)
    if result.modprobe_tls != 0:
        print(f"ktls_guest: modprobe tls failed in the guest (status {result.modprobe_tls})", file=sys.stderr)
    return result.status


if __name__ == "__main__":
    sys.exit(main())
