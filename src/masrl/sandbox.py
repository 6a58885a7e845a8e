"""Run untrusted Python written by agents, contained, and return what happened as data.

`run_code(code, ...)` starts a fresh interpreter, runs `code` as its main
program and returns a `SandboxResult` (status, stdout, stderr, return code,
wall time, truncated).  The tool agents and the code task call it; the paper's
tool and coder agents (AT-GRPO, arXiv:2510.11062,
appendix A.2) execute their code the same way.

How one call runs, and why each step is there
---------------------------------------------
1. **A throwaway directory.**  The parent makes `<tmp>/masrl-sbx-XXXX/work`
   and removes the whole tree in a `finally`, so it goes away after a normal
   exit, an exception, a timeout or a kill.  The code's cwd, `HOME` and
   `TMPDIR` all point there; `files` (name -> text) are written into it, so a
   unit-test harness can ship `solution.py` and `test.py` side by side.  With
   namespaces that path is a fresh tmpfs inside the sandbox, so nothing the
   code writes ever reaches the disk.

2. **A launcher process instead of `preexec_fn`.**  The parent may be a
   multi-threaded trainer, where `subprocess`'s `preexec_fn` can deadlock (the
   Python docs warn about it).  So the child is a tiny root-side launcher
   (`python -I -S -c _LAUNCHER`) that does the privileged setup in a fresh,
   single-threaded process and then `execve`s the interpreter that runs the
   agent's code.  The configuration travels in an anonymous memory file;
   setup failures come back on a status pipe and raise `SandboxError`: a
   broken sandbox never runs the code unprotected and never reads as the
   agent's fault.

3. **Namespaces (root, or any user through a user namespace: see below).**
   The launcher calls `unshare(2)` through ctypes (Python 3.11 has no `os.unshare`) for new PID, mount, network and
   IPC namespaces and forks a small init (PID 1 of the new PID namespace,
   still root), which builds the file system view and forks the code's
   process (PID 2: the kernel ignores default-action signals such as SIGXCPU
   for a namespace's init, so the code must not be PID 1).
   - *network*: the new namespace holds only a loopback device that is down,
     so every connection (127.0.0.1 included) fails with "Network is
     unreachable".
   - *mount*: `/` is made private first (and the launcher checks that it is
     in a new mount namespace before mounting anything), then every top-level
     directory except the system ones (`_SYSTEM`: /usr, /lib*, /bin, /sbin,
     /etc, /dev, /proc, /sys, /var) gets an empty read-only tmpfs over it: an
     allowlist, so /root, /home, /run, /opt and the project's /work are
     hidden, and so is any directory added later.  Top-level files get
     /dev/null bound over them; the caller's project and home are covered too
     if they sit inside a system directory.  The world-writable directories
     (/tmp, /var/tmp, /dev/shm) and the work directory get size-limited
     writable tmpfs (`SCRATCH_MB`, 4096 inodes).  The interpreter's prefix is
     bound back read-only.  So the code cannot read the project, what it
     writes lives in capped RAM and dies with the namespace, and `/proc` is
     remounted to show only the sandbox's own processes.
   - *PID*: when the init exits, the kernel kills every other process in
     the namespace and reaps them before the init's own exit is reported, so
     "the code and all its children are gone" is synchronous, holds for
     children that left the process group with `setsid`, and leaves no
     zombies for the host's init (this machine's init reaps only every second
     or two).  The init reaps orphans while the code runs and reports the
     code's exit status on the status pipe.
   - *IPC*: System V shared memory that outlives its creator is freed with
     the namespace.

4. **Limits** (`resource.setrlimit` in the launcher, right before exec):
   `RLIMIT_CPU` (soft = `cpu_seconds`, SIGXCPU; hard one second later,
   SIGKILL), `RLIMIT_AS` = `memory_mb` (so a 4 GB allocation fails at once
   with MemoryError), `RLIMIT_FSIZE` = `SCRATCH_MB` per file, `RLIMIT_NPROC`
   = `max_processes`, `RLIMIT_NOFILE` = 256 and `RLIMIT_CORE` = 0.  The
   environment is replaced (PATH, HOME, TMPDIR, LANG, MALLOC_ARENA_MAX=2 so
   glibc's per-thread arenas do not eat the address-space limit) and the
   interpreter runs as `python -I -S -B -u -X utf8`: isolated mode ignores
   PYTHON* variables and the user site, `-S` skips site-packages (agents' code
   gets the standard library only; the base interpreter's site-packages is
   refused by the audit hook as well), `-u` so output written before a kill
   still arrives.

5. **Dropped privileges (root only).**  RLIMIT_NPROC is not enforced for
   root, so the launcher switches to an unprivileged uid/gid after setting
   the limits (`setgroups([])`, `setresgid`, `setresuid`) and sets
   `PR_SET_NO_NEW_PRIVS` so set-uid binaries cannot raise it again.  The uid
   is fresh for every call, drawn from a private range (`_UID_BASE`, far
   above what `useradd` hands out) and checked unused, rather than `nobody`:
   RLIMIT_NPROC counts every process of a uid, so with a shared `nobody` two
   sandboxes running side by side would share one budget of 16 processes, and
   a fresh uid owns no file on the machine, so it can write only to
   world-writable places (which the mount namespace replaces).  It also makes
   a final sweep exact: after every call the parent scans `/proc` for that
   uid and SIGKILLs what it finds through pidfds (race-free against pid
   reuse).  With namespaces the sweep never finds anything; it is the
   backstop for the fallback path.

6. **An audit hook (always, best effort).**  The bootstrap that runs the code
   installs `sys.addaudithook` before the first line of agent code: `open`
   and directory listing outside the work directory, the standard library
   and a few read-only system files, changing directory out of it, mutating
   paths outside it, `exec*`/`posix_spawn`/`system`/`subprocess`, ctypes,
   and `gc.get_objects`/`get_referrers` (the way to reach the hook itself)
   raise `PermissionError`.  Forking is allowed: a fork bomb is contained by
   RLIMIT_NPROC and the PID namespace, not forbidden.  Without namespaces it
   also refuses internet sockets and name lookups (the network fallback).
   The hook is not a security boundary: it lives inside the process it
   guards, and a determined attacker can get past it (there are known
   bypasses through interpreter internals); it turns the common mistakes and
   casual attempts into clear errors.  The uid drop and the namespaces are
   the boundaries, and the tests check them with the hook turned off
   (`audit_hook=False`).

7. **Wall clock, output cap and cleanup.**  The parent reads stdout and stderr
   incrementally with a selector, keeps at most `max_output` bytes of each
   (the rest is dropped as it is read, so 100 MB never lands in memory) and stops the
   run as soon as a stream overflows (status "output_limit", truncated=True)
   or the deadline passes (status "timeout").  Stopping means SIGTERM to the
   launcher, which SIGKILLs the namespace's init (the launcher is the init's
   parent and has not reaped it, so it cannot hit a reused pid); without
   namespaces, SIGKILL to the process group.  The launcher is started with
   `start_new_session=True`; after it exits, but before it is reaped (so its
   pid, which is the group id, cannot be reused), the parent SIGKILLs the
   whole process group to reap stragglers, then sweeps the uid.  Every
   process in the chain has PR_SET_PDEATHSIG, so if the trainer dies the
   sandbox dies with it.

Status
------
"ok" exit 0; "error" any other exit; "timeout" stopped by our wall clock or
killed by SIGXCPU (RLIMIT_CPU); "memory" MemoryError / ENOMEM at the end of
stderr (RLIMIT_AS makes allocation fail inside Python, so an out-of-memory
run reads as MemoryError rather than a kill); "killed" death by any other
signal, which includes the hard CPU limit for code that catches SIGXCPU and
the kernel's OOM killer; "output_limit" stopped for flooding.  `returncode`
is None when we stopped the run ourselves.

What depends on root
--------------------
Three modes; `isolation()` probes once which one this machine gives (`Isolation.mode`):
- *root*: namespaces and a fresh uid, as described above.
- *user namespaces* (any user, where the kernel allows unprivileged user
  namespaces): the launcher first unshares a user namespace that maps only the
  caller's own uid and gid to themselves, together with the PID, mount, network
  and IPC namespaces.  It holds every capability inside that namespace, enough
  to build the same file system view; the code's uid there is not 0, so its
  execve drops them all before the first line runs (it cannot unmount the
  covers: "must be superuser").  Same network, file and PID guarantees as root;
  the difference is the uid: the code runs as the caller's uid (the kernel
  counts RLIMIT_NPROC per user namespace, so the cap is still the code's own
  `max_processes`, plus the launcher and init that live in the namespace,
  whatever else the caller runs), and there is no final uid sweep (the PID
  namespace makes it unnecessary).
- *limits only*: neither is available.  `run_code` raises `SandboxError`
  unless the user chose `limits_only` (config `sandbox.limits_only: true`, or
  MASRL_SANDBOX_LIMITS_ONLY=1); then the limits apply to the caller's own uid,
  the audit hook is the only guard for files and network, the work directory
  is on disk, a process that leaves the process group with `setsid` can outlive
  the call, and every call warns (`SandboxWarning`).
docs/reliability.md tabulates what each mode guarantees and which test checks it.

Known gaps: memory is limited per process, not per sandbox (up to
`max_processes` x `memory_mb` plus the tmpfs, for the few seconds of the
timeout; a per-sandbox cgroup would close this but means writing into the
host's cgroup tree); the system directories stay readable (world-readable
files under /etc, /usr and /var).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import pwd
import random
import re
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Literal

Status = Literal["ok", "error", "timeout", "killed", "memory", "output_limit"]

SCRATCH_MB = 64  # size of each writable tmpfs, and the per-file size limit
_UID_BASE = 1_700_000_000  # private uid range for sandboxes; 2**20 of them
_UID_SPAN = 1 << 20
_STOP_GRACE = 2.0  # seconds the launcher gets to bring its namespace down
_DRAIN_GRACE = 1.0  # seconds to read what is left in the pipes after exit

# Top-level directories the sandboxed interpreter needs; every other top-level
# directory is covered (an allowlist, so a new /data or /farm is hidden too).
_SYSTEM = frozenset(
    [
        "/bin",
        "/dev",
        "/etc",
        "/lib",
        "/lib32",
        "/lib64",
        "/libx32",
        "/proc",
        "/sbin",
        "/sys",
        "/usr",
        "/var",
    ]
)
# The world-writable directories left visible: replaced by private tmpfs.
_SCRATCH = ("/tmp", "/var/tmp", "/dev/shm")


@dataclasses.dataclass(frozen=True)
class SandboxResult:
    status: Status
    stdout: str
    stderr: str
    returncode: int | None  # None when the run was stopped by the sandbox
    wall_seconds: float
    truncated: bool  # True when output went past max_output and was cut


@dataclasses.dataclass(frozen=True)
class Isolation:
    """Which OS-level boundaries this machine gives the sandbox."""

    drop_privileges: bool  # runs as a fresh unprivileged uid (needs root)
    namespaces: bool  # PID + mount + network + IPC namespaces
    user_namespace: bool = False  # the namespaces entered through a user namespace (no root needed)

    @property
    def mode(self) -> str:
        if self.drop_privileges and self.namespaces:
            return "root: namespaces + fresh uid"
        if self.namespaces:
            return "user namespaces" if self.user_namespace else "root: namespaces"
        return "limits only"


class SandboxError(RuntimeError):
    """The sandbox itself could not be set up; the code did not run."""


class SandboxWarning(UserWarning):
    """Agent code ran with limits only (see `run_code`'s `limits_only`)."""


# Run agent code with rlimits and the audit hook only where no isolation is available.
# Off unless chosen: this variable chooses it for the whole process; a config's `sandbox.limits_only`
# for as long as the engine built from it lives (`limits_only_chosen`).
LIMITS_ONLY = os.environ.get("MASRL_SANDBOX_LIMITS_ONLY", "") not in ("", "0", "false")
_chosen = 0  # open `limits_only_chosen(True)` scopes; one count for every thread (env steps, rollouts ahead)
_chosen_lock = threading.Lock()


@contextlib.contextmanager
def limits_only_chosen(chosen: bool = True) -> Iterator[None]:
    """Within this scope, `run_code` runs with limits only where no isolation is available (when `chosen`)."""
    global _chosen
    with _chosen_lock:
        _chosen += chosen
    try:
        yield
    finally:
        with _chosen_lock:
            _chosen -= chosen


def limits_only_allowed() -> bool:
    """Whether agent code may run with limits only now: MASRL_SANDBOX_LIMITS_ONLY=1 or an open scope."""
    return LIMITS_ONLY or _chosen > 0


# ---------------------------------------------------------------------------
# Child side.  Both scripts run under `python -I -S` and import only the
# standard library.

# Runs as the caller's user (root for full isolation).  argv: config fd,
# status fd.  Writes "E <message>" to the status pipe if setup fails and, with
# namespaces, "X <exit code>" (negative: signal) when the code has ended.
_LAUNCHER = r"""
import ctypes, json, os, resource, signal, sys

child = 0
cfg_fd, status_fd = int(sys.argv[1]), int(sys.argv[2])
os.set_inheritable(status_fd, False)
with os.fdopen(cfg_fd, "rb") as f:
    cfg = json.loads(f.read())

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWNET = 0x20000, 0x8000000, 0x20000000, 0x40000000
CLONE_NEWUSER = 0x10000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]


def check(ret, what):
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(src, target, fstype, flags, data=None):
    enc = lambda s: None if s is None else s.encode()
    check(libc.mount(enc(src), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")


def supervise(pid):
    # Outside the PID namespace: wait for its init.  SIGTERM from the caller
    # (handler installed before the fork) means "stop the run": kill the init
    # and the kernel takes the whole namespace down.  WNOWAIT keeps the init's
    # pid reserved until the handler can no longer fire, so it never signals
    # a reused pid.
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.waitpid(pid, 0)
    os._exit(0)


def on_sigterm(*_):
    if child:
        os.kill(child, signal.SIGKILL)
    else:
        os._exit(1)


def init(program):
    # PID 1 of the namespace, still root (the code cannot signal it).  The
    # code runs as PID 2, because the kernel ignores default-action signals
    # such as SIGXCPU for a namespace's init.  Reap orphans like an init,
    # report how the program ended, and exit: that kills everything left.
    while True:
        pid, status = os.wait()
        if pid == program:
            os.write(status_fd, b"X %d\n" % os.waitstatus_to_exitcode(status))
            os._exit(0)


def build_filesystem(work):
    if os.readlink("/proc/self/ns/mnt") == cfg["host_mnt_ns"]:
        raise RuntimeError("not in a private mount namespace; refusing to mount")
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV)
    keep = [(path, os.open(path, os.O_PATH | os.O_DIRECTORY)) for path in cfg["expose"]]
    for d in cfg["hide"]:
        mount("tmpfs", d, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=1024,mode=755")
    scratch = f"size={cfg['scratch_mb']}m,nr_inodes=4096"
    for d in cfg["scratch"]:
        mount("tmpfs", d, "tmpfs", MS_NOSUID | MS_NODEV, scratch + ",mode=1777")
    for path, fd in keep:
        os.makedirs(path, exist_ok=True)
        mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID)
        os.close(fd)
    for d in cfg["hide"]:
        mount(None, d, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    for f in cfg["blank"]:
        mount("/dev/null", f, None, MS_BIND)
    os.makedirs(work, exist_ok=True)
    mount("tmpfs", work, "tmpfs", MS_NOSUID | MS_NODEV, scratch + ",mode=700")


def main():
    global child
    work, uid = cfg["work"], cfg["uid"]
    # Die with the caller; the sandbox dies with us (PDEATHSIG again below).
    check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
    if cfg["namespaces"]:
        signal.signal(signal.SIGTERM, on_sigterm)
        flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC
        if cfg["user_namespace"]:
            # Without root: a user namespace first, mapping only our own uid and gid to
            # themselves. We hold every capability inside it (enough to build the mounts), and
            # because the code's uid is not 0 there, execve drops them all before its first line.
            host_uid, host_gid = os.getuid(), os.getgid()
            check(libc.unshare(flags | CLONE_NEWUSER), "unshare(user namespace)")
            for name, text in (("setgroups", "deny"), ("uid_map", f"{host_uid} {host_uid} 1"),
                               ("gid_map", f"{host_gid} {host_gid} 1")):
                with open(f"/proc/self/{name}", "w") as f:
                    f.write(text)
        else:
            check(libc.unshare(flags), "unshare")
        child = os.fork()
        if child:
            supervise(child)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
        build_filesystem(work)
        program = os.fork()
        if program:
            init(program)
    for name, text in cfg["files"].items():
        path = os.path.join(work, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    if uid is not None:
        for root, dirs, names in os.walk(work):
            for name in [root] + [os.path.join(root, n) for n in dirs + names]:
                os.chown(name, uid, uid)
    code_fd = os.memfd_create("masrl-sandbox-code", 0)
    os.write(code_fd, cfg["code"].encode())
    os.lseek(code_fd, 0, os.SEEK_SET)

    lim = cfg["limits"]
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (lim["cpu"], lim["cpu"] + 1))
    resource.setrlimit(resource.RLIMIT_AS, (lim["memory"], lim["memory"]))
    resource.setrlimit(resource.RLIMIT_FSIZE, (lim["fsize"], lim["fsize"]))
    resource.setrlimit(resource.RLIMIT_NPROC, (lim["nproc"], lim["nproc"]))
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        if os.getuid() == 0 or os.geteuid() == 0:
            raise RuntimeError("privileges were not dropped")
        # Set after the uid change, which clears it: if our parent dies, so do we.
        check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
    os.chdir(work)
    python = cfg["python"]
    argv = [python, "-I", "-S", "-B", "-u", "-X", "utf8", "-c", cfg["bootstrap"],
            str(code_fd), work, "1" if cfg["block_network"] else "0", "1" if cfg["audit_hook"] else "0"]
    os.execve(python, argv, cfg["env"])


try:
    main()
except BaseException as e:
    os.write(status_fd, f"E {type(e).__name__}: {e}".encode())
    os._exit(127)
"""

# Runs as the sandbox user; argv: code fd, work dir, block network (0/1),
# install the audit hook (0/1).  Runs the code as __main__ and prints its
# traceback without the bootstrap's own frame.
_BOOTSTRAP = r"""
import builtins, linecache, os, sys, traceback, types
import _posixsubprocess


def _install_hook(work, block_network):
    stdlib = tuple(os.path.realpath(p) for p in sys.path if p)
    site = tuple(os.path.join(p, "site-packages") for p in stdlib)
    readable = stdlib + (os.path.dirname(os.path.realpath(sys.executable)), "/usr/share/zoneinfo")
    read_files = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random", "/etc/localtime",
                  "/etc/mime.types")
    denied = frozenset(("os.exec", "os.posix_spawn", "os.spawn", "os.system", "os.startfile",
                        "subprocess.Popen", "pty.spawn", "gc.get_objects", "gc.get_referrers",
                        "gc.get_referents", "sys.setprofile", "sys.settrace", "os.forkpty"))
    net_denied = frozenset(("socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyname_ex",
                            "socket.gethostbyaddr", "socket.getnameinfo"))
    modules = frozenset(("_ctypes", "ctypes", "_posixsubprocess", "_testcapi", "_testinternalcapi",
                         "_xxsubinterpreters"))
    mutating = frozenset(("os.mkdir", "os.rmdir", "os.remove", "os.rename", "os.symlink", "os.link",
                          "os.chmod", "os.chown", "os.truncate", "os.utime", "os.setxattr",
                          "os.removexattr", "os.mkfifo", "os.mknod", "shutil.rmtree"))
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

    # Everything the hook needs is bound as immutable default arguments, and
    # nothing in Python keeps a reference to the hook (the interpreter holds
    # it; gc introspection is refused), so code cannot reach in to change it.
    def hook(event, args, work=work, readable=readable, read_files=read_files, site=site,
             denied=denied, net_denied=net_denied, modules=modules, mutating=mutating,
             block_network=block_network, write_flags=write_flags, realpath=os.path.realpath,
             fsdecode=os.fsdecode, PathLike=os.PathLike):
        def resolve(path):
            return realpath(fsdecode(path))

        def inside(path, roots):
            return any(path == r or path.startswith(r + "/") for r in roots)

        def deny(what):
            raise PermissionError(f"sandbox: {what} is not allowed")

        if event == "open":
            path, mode, flags = args
            if path is None or isinstance(path, int):
                return
            p = resolve(path)
            writing = bool((flags or 0) & write_flags) or any(c in (mode or "") for c in "wax+")
            if inside(p, (work,)) or p == "/dev/null":
                return
            if not writing and (p in read_files or inside(p, readable)) and not inside(p, site):
                return
            deny(f"open({path!r}) outside the working directory")
        elif event in ("os.listdir", "os.scandir", "glob.glob", "glob.glob/2", "os.chdir"):
            path = args[0]
            if path is None or isinstance(path, int):
                return
            if isinstance(path, (str, bytes, PathLike)):
                p = resolve(path)
                if inside(p, (work,)) or (event != "os.chdir" and inside(p, readable)):
                    return
            deny(f"{event}({path!r})")
        elif event in mutating:
            for arg in args:
                if isinstance(arg, (str, bytes, PathLike)) and not inside(resolve(arg), (work,)):
                    deny(f"{event}({arg!r})")
        elif event in denied or event.startswith("ctypes."):
            deny(event)
        elif event == "import" and args[0] in modules:
            deny(f"import {args[0]}")
        elif block_network and event in net_denied:
            deny(event)
        elif block_network and event == "socket.__new__" and args[1] != 1:  # only AF_UNIX
            deny("opening a network socket")

    sys.addaudithook(hook)


def _exit(code=None):
    raise SystemExit(code)


def _no_subprocess(*args, **kwargs):
    raise PermissionError("sandbox: subprocesses are not allowed")


def _run():
    code_fd, work = int(sys.argv[1]), sys.argv[2]
    block_network, audit_hook = sys.argv[3] == "1", sys.argv[4] == "1"
    with open(code_fd, encoding="utf-8") as f:
        source = f.read()
    # site is not imported (-S); give the code the exit/quit it expects.
    builtins.exit = builtins.quit = _exit
    # subprocess calls fork_exec directly; the hook cannot see that call, so it
    # is replaced here and the module cannot be imported afresh.
    _posixsubprocess.fork_exec = _no_subprocess
    sys.path[:0] = [work]
    sys.argv = ["<sandbox>"]
    main = types.ModuleType("__main__")
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    linecache.cache["<sandbox>"] = (len(source), None, source.splitlines(True), "<sandbox>")
    if audit_hook:
        _install_hook(work, block_network)
    try:
        exec(compile(source, "<sandbox>", "exec"), main.__dict__)
    except SystemExit:
        raise
    except BaseException as e:
        traceback.print_exception(type(e), e, e.__traceback__.tb_next)  # skip _run's frame
        sys.exit(1)


_run()
"""


# ---------------------------------------------------------------------------
# Parent side.


@functools.cache
def _interpreter(python: str) -> tuple[str, str]:
    """(real executable, base prefix) of `python`: what must stay visible."""
    out = subprocess.run(
        [
            python,
            "-I",
            "-S",
            "-c",
            "import os, sys; print(os.path.realpath(sys.executable)); print(sys.base_prefix)",
        ],
        capture_output=True,
        text=True,
        check=True,
        env={},
    ).stdout.split("\n")
    return out[0], os.path.realpath(out[1])


@functools.cache
def isolation(python: str = sys.executable) -> Isolation:
    """Probe once which OS boundaries work here: as root namespaces and a uid drop; as
    anyone else namespaces entered through an unprivileged user namespace."""
    candidates = (Isolation(True, True), Isolation(True, False)) if os.geteuid() == 0 else (Isolation(False, True, True),)
    for candidate in candidates:
        try:
            result = _run("print('ok')", python=python, iso=candidate)
        except SandboxError:
            continue
        if result.status == "ok" and result.stdout == "ok\n":
            return candidate
    return Isolation(drop_privileges=False, namespaces=False)


def run_code(
    code: str,
    *,
    stdin: str = "",
    timeout: float = 5.0,
    cpu_seconds: float = 5.0,
    memory_mb: int = 512,
    max_output: int = 64_000,
    max_processes: int = 16,
    python: str = sys.executable,
    files: Mapping[str, str] | None = None,
    audit_hook: bool = True,
    limits_only: bool | None = None,
) -> SandboxResult:
    """Run `code` as the main program of a contained interpreter; see the module docstring.

    `max_output` caps stdout and stderr each, in bytes.  `audit_hook=False`
    leaves only the OS boundaries (the tests use it to check them alone).
    Raises `SandboxError` when the sandbox itself cannot be set up, and when this
    machine gives no isolation (no root, no user namespaces) unless `limits_only`
    (default: `limits_only_allowed()`: the config's `sandbox.limits_only` while its engine lives, or the
    environment variable MASRL_SANDBOX_LIMITS_ONLY=1) says to run anyway, with a warning every call.
    """
    iso = isolation(python)
    if os.geteuid() == 0 and not iso.drop_privileges:
        raise SandboxError(
            "running as root without a way to drop privileges; refusing untrusted code"
        )
    if not iso.namespaces:
        if not (limits_only_allowed() if limits_only is None else limits_only):
            raise SandboxError(
                "no isolation for untrusted code here: not root and unprivileged user namespaces are "
                "unavailable (sysctl kernel.unprivileged_userns_clone / user.max_user_namespaces); set "
                "sandbox.limits_only=true (or MASRL_SANDBOX_LIMITS_ONLY=1) to run with rlimits and the audit hook only"
            )
        warnings.warn(
            "masrl.sandbox: running agent code with limits only (rlimits + audit hook): no namespaces, "
            "the code can read what this user can read and reach the network past the hook",
            SandboxWarning,
            stacklevel=2,
        )
    return _run(
        code,
        stdin=stdin,
        timeout=timeout,
        cpu_seconds=cpu_seconds,
        memory_mb=memory_mb,
        max_output=max_output,
        max_processes=max_processes,
        python=python,
        files=files,
        audit_hook=audit_hook,
        iso=iso,
    )


def _run(
    code: str,
    *,
    iso: Isolation,
    stdin: str = "",
    timeout: float = 5.0,
    cpu_seconds: float = 5.0,
    memory_mb: int = 512,
    max_output: int = 64_000,
    max_processes: int = 16,
    python: str = sys.executable,
    files: Mapping[str, str] | None = None,
    audit_hook: bool = True,
) -> SandboxResult:
    files = dict(files or {})
    for name in files:
        _check_name(name)
    exe, prefix = _interpreter(python)
    start = time.monotonic()
    base = tempfile.mkdtemp(prefix="masrl-sbx-")
    work = os.path.join(base, "work")
    uid = _free_uid() if iso.drop_privileges else None
    try:
        os.mkdir(work, 0o700)
        if uid is not None:
            os.chmod(base, 0o711)
            os.chown(work, uid, uid)
        config = _launch_config(code, files, work, uid, exe, prefix, iso, audit_hook, cpu_seconds, memory_mb,
                                max_processes)  # fmt: skip
        return _execute(config, stdin, start + timeout, max_output, start)
    finally:
        if uid is not None:
            _kill_user(uid)
        shutil.rmtree(base, ignore_errors=True)


def _launch_config(
    code: str, files: dict[str, str], work: str, uid: int | None, exe: str, prefix: str, iso: Isolation,
    audit_hook: bool, cpu_seconds: float, memory_mb: int, max_processes: int,
) -> dict:  # fmt: skip
    """What the launcher reads (_LAUNCHER): the code and its files, the folders to hide, blank and expose,
    the limits and the environment."""
    hide, blank = _covered(prefix) if iso.namespaces else ([], [])
    return {
        "code": code,
        "files": files,
        "work": work,
        "uid": uid,
        "python": exe,
        "bootstrap": _BOOTSTRAP,
        "namespaces": iso.namespaces,
        "user_namespace": iso.user_namespace,
        "block_network": not iso.namespaces,
        "audit_hook": audit_hook,
        "host_mnt_ns": os.readlink("/proc/self/ns/mnt") if iso.namespaces else "",
        "hide": hide,
        "blank": blank,
        "scratch": [d for d in _SCRATCH if os.path.isdir(d)],
        "expose": _exposed(exe, prefix, hide + list(_SCRATCH))
        if iso.namespaces
        else [],
        "scratch_mb": SCRATCH_MB,
        "limits": {
            "cpu": max(1, round(cpu_seconds)),
            "memory": memory_mb << 20,
            "fsize": SCRATCH_MB << 20,
            "nproc": max_processes + _nproc_extra(iso, uid),
        },
        "env": {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": work,
            "TMPDIR": work,
            "LANG": "C.UTF-8",
            "MALLOC_ARENA_MAX": "2",
        },
    }


def _nproc_extra(iso: Isolation, uid: int | None) -> int:
    """Processes RLIMIT_NPROC counts besides the code's own.  A fresh uid: none.  A user
    namespace: the launcher and the init, which live in it (the kernel counts a uid's
    processes per user namespace, so the caller's other processes do not count there).
    Limits only: every process the caller's uid already has."""
    if uid is not None:
        return 0
    return 2 if iso.user_namespace else len(_processes_of(os.getuid()))


def _execute(
    config: dict, stdin: str, deadline: float, max_output: int, start: float
) -> SandboxResult:
    cfg_fd = _memfile(json.dumps(config).encode())
    stdin_fd = _memfile(stdin.encode())
    status_r, status_w = os.pipe()
    try:
        proc = subprocess.Popen(
            [config["python"], "-I", "-S", "-c", _LAUNCHER, str(cfg_fd), str(status_w)],
            stdin=stdin_fd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(cfg_fd, status_w),
            start_new_session=True,
            env={},
            cwd="/",
        )
    except BaseException:
        os.close(status_r)
        raise
    finally:
        for fd in (cfg_fd, stdin_fd, status_w):
            os.close(fd)
    with proc, os.fdopen(status_r, "rb") as status_pipe:
        out, err, status_msg, reason = _pump(
            proc, status_pipe, deadline, max_output, config["namespaces"]
        )
    wall = time.monotonic() - start
    messages = status_msg.decode(errors="replace")
    if messages.startswith("E "):
        raise SandboxError(messages[2:].strip())
    if reason is not None:
        returncode = None
    elif config["namespaces"]:
        found = re.search(r"^X (-?\d+)$", messages, re.MULTILINE)
        returncode = int(found.group(1)) if found else None
    else:
        returncode = proc.returncode
    stderr = err.decode("utf-8", errors="replace")
    return SandboxResult(
        status=_classify(returncode, reason, stderr),
        stdout=out.decode("utf-8", errors="replace"),
        stderr=stderr,
        returncode=returncode,
        wall_seconds=wall,
        truncated=reason == "output_limit",
    )


def _pump(
    proc: subprocess.Popen, status_pipe, deadline: float, cap: int, namespaces: bool
):
    """Read the pipes until the launcher has exited and they are drained.

    Returns (stdout, stderr, status messages, reason); reason is "timeout" or
    "output_limit" when we stopped the run, else None.
    """
    bufs = {"stdout": bytearray(), "stderr": bytearray(), "status": bytearray()}
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, "stdout")
    sel.register(proc.stderr, selectors.EVENT_READ, "stderr")
    sel.register(status_pipe, selectors.EVENT_READ, "status")
    pidfd = os.pidfd_open(proc.pid)
    sel.register(pidfd, selectors.EVENT_READ, "exit")
    stopper = _Stopper(proc, namespaces, deadline)
    exited_at: float | None = None
    try:
        while True:
            now = time.monotonic()
            if exited_at is not None:  # draining
                if not sel.get_map() or now >= exited_at + _DRAIN_GRACE:
                    break
                wait: float | None = exited_at + _DRAIN_GRACE - now
            else:
                wait = stopper.wait(now)
            for key, _ in sel.select(None if wait is None else max(wait, 0.0)):
                if key.data == "exit":
                    # Exited but not reaped: its pid, which is the process group
                    # id, stays reserved, so killing the group cannot hit anyone else.
                    sel.unregister(pidfd)
                    _killpg(proc.pid)
                    exited_at = time.monotonic()
                    continue
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                buf = bufs[key.data]
                room = cap - len(buf)
                buf += chunk[: max(room, 0)]
                if len(chunk) > room and key.data != "status" and stopper.reason is None:
                    stopper.stop("output_limit", time.monotonic())
    finally:
        sel.close()
        os.close(pidfd)
        if proc.poll() is None:
            _killpg(proc.pid)
        proc.wait()
    return bytes(bufs["stdout"]), bytes(bufs["stderr"]), bytes(bufs["status"]), stopper.reason


@dataclasses.dataclass
class _Stopper:
    """Why and when `_pump` stopped the run (at the deadline, or on too much output), and the SIGKILL
    to its process group `_STOP_GRACE` seconds later if it has not exited by then."""

    proc: subprocess.Popen
    namespaces: bool
    deadline: float
    reason: str | None = None  # "timeout" or "output_limit" once stopped
    stopped_at: float | None = None
    hard_killed: bool = False

    def stop(self, reason: str, now: float) -> None:
        self.reason, self.stopped_at = reason, now
        _stop(self.proc, self.namespaces)

    def wait(self, now: float) -> float | None:
        """Stop at the deadline and kill after the grace, as `now` has come to; then how long the pipes
        may be waited on (None: until one is ready)."""
        if self.reason is None and now >= self.deadline:
            self.stop("timeout", now)
        if self.stopped_at is not None and not self.hard_killed and now >= self.stopped_at + _STOP_GRACE:
            _killpg(self.proc.pid)  # not reaped yet, so the group id is still ours
            self.hard_killed = True
        if self.reason is None:
            return self.deadline - now
        if not self.hard_killed:
            return self.stopped_at + _STOP_GRACE - now
        return None


def _stop(proc: subprocess.Popen, namespaces: bool) -> None:
    """Stop the run: with namespaces ask the launcher to kill the init (the
    kernel then kills the rest and the launcher reaps it); else kill the group."""
    if namespaces:
        proc.send_signal(signal.SIGTERM)
    else:
        _killpg(proc.pid)


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _classify(returncode: int | None, reason: str | None, stderr: str) -> Status:
    if reason is not None:
        return reason  # type: ignore[return-value]
    if returncode == 0:
        return "ok"
    if returncode == -signal.SIGXCPU:
        return "timeout"
    if _out_of_memory(stderr):
        return "memory"
    if returncode is None or returncode < 0:
        return "killed"
    return "error"


_OOM = re.compile(
    r"^MemoryError\b|\[Errno 12\]|Cannot allocate memory|std::bad_alloc|out of memory",
    re.MULTILINE,
)


def _out_of_memory(stderr: str) -> bool:
    tail = "\n".join(stderr.strip().splitlines()[-3:])
    return bool(_OOM.search(tail))


def _check_name(name: str) -> None:
    parts = Path(name).parts
    if (
        not parts
        or Path(name).is_absolute()
        or ".." in parts
        or name != os.path.normpath(name)
    ):
        raise ValueError(f"files: {name!r} must be a plain relative path")


def _memfile(data: bytes) -> int:
    """An unlinked in-memory file holding `data`, positioned at 0."""
    fd = os.memfd_create("masrl-sandbox")
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _covered(prefix: str) -> tuple[list[str], list[str]]:
    """(directories, files) to cover: every top-level entry that is not a system
    directory, plus the caller's project and home if they sit inside one."""
    dirs, files = set(), []
    for name in os.listdir("/"):
        path = "/" + name
        if os.path.islink(path) or path in _SYSTEM or path in _SCRATCH:
            continue
        if os.path.isdir(path):
            dirs.add(path)
        elif os.path.isfile(path):
            files.append(path)
    for c in (
        os.getcwd(),
        str(Path(__file__).resolve().parent.parent),
        os.path.expanduser("~"),
    ):
        c = os.path.realpath(c)
        if c in _SYSTEM or c == "/" or _inside(prefix, c) or _inside(c, prefix):
            continue  # never cover the interpreter
        if os.path.isdir(c) and not any(_inside(c, s) for s in _SCRATCH):
            dirs.add(c)
    dirs = {d for d in dirs if not any(d != o and _inside(d, o) for o in dirs)}
    return sorted(dirs), sorted(files)


def _exposed(exe: str, prefix: str, covered: list[str]) -> list[str]:
    """Parts of the interpreter that lie under a covered directory: bound back read-only."""
    paths = {prefix, os.path.dirname(exe)}
    paths = {p for p in paths if not any(_inside(p, q) for q in paths if q != p)}
    return sorted(p for p in paths if any(_inside(p, c) for c in covered))


def _processes_of(uid: int) -> list[tuple[int, str]]:
    """(pid, state) of every process whose real uid is `uid`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(fields["Uid"].split()[0]) == uid:
            found.append((int(entry), fields["State"].split()[0]))
    return found


def _free_uid() -> int:
    for _ in range(100):
        uid = _UID_BASE + random.randrange(_UID_SPAN)
        try:
            pwd.getpwuid(uid)
        except KeyError:
            if not _processes_of(uid):
                return uid
    raise SandboxError("no free sandbox uid")


def _kill_user(uid: int, wait: float = 3.0) -> None:
    """SIGKILL every process of the sandbox uid and wait until none is left.

    Each target is pinned with a pidfd and its uid read again afterwards, so a
    pid that was reused by someone else's process is never signalled.
    """
    assert uid >= _UID_BASE, uid  # never anything but a sandbox uid
    give_up = time.monotonic() + wait
    while True:
        procs = _processes_of(uid)
        if not procs or time.monotonic() > give_up:
            return
        for pid, state in procs:
            if state == "Z":
                continue  # dead already, waiting for its parent or init to reap it
            try:
                fd = os.pidfd_open(pid)
            except ProcessLookupError:
                continue
            try:
                if _uid_of(pid) == uid:
                    signal.pidfd_send_signal(fd, signal.SIGKILL)
            except ProcessLookupError:
                pass
            finally:
                os.close(fd)
        time.sleep(0.01)


def _uid_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return None
