"""What the multi-process tests share: a free local port, CPU gloo ranks under torchrun, and gloo ranks
forked from a warm interpreter."""
from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(world_size: int, target: list[str], timeout: float, cwd=None) -> tuple[int, str]:
    """``target`` (a script and its arguments, or ``-m module ...``) on ``world_size`` gloo ranks on
    the loopback interface; returns (exit code, stdout + stderr)."""
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(world_size),
           "--master_addr", "127.0.0.1", "--master_port", str(free_port()), *target]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    return proc.returncode, proc.stdout + proc.stderr


def spawn_ranks(world_size: int, target: list[str]) -> list["ForkedRank"]:
    """``target`` (a script and its arguments) on ``world_size`` gloo ranks as separate processes,
    without torchrun (which would wait for every rank): the caller sees when each one exits, and
    must end the ones still running. The ranks are forked from a warm interpreter
    (tests/workers/fork_server.py: torch imported once, not once per rank), and exit as fresh
    processes do; the tests that need a launcher's own processes use :func:`torchrun`."""
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT),
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(world_size))
    server = _fork_server()
    return [server.start(target, dict(env, RANK=str(r), LOCAL_RANK=str(r))) for r in range(world_size)]


def run_ranks(world_size: int, target: list[str], timeout: float) -> tuple[int, str]:
    """:func:`spawn_ranks` until every rank exits, or one fails and the others are killed: (the first
    nonzero exit code or 0, every rank's output in rank order). Past ``timeout`` seconds every rank
    is killed and ``subprocess.TimeoutExpired`` raised with their output."""
    procs = spawn_ranks(world_size, target)
    deadline = time.monotonic() + timeout
    try:
        # As torchrun does: the first rank to fail ends the others.
        while any(proc.poll() is None for proc in procs) and not any(proc.returncode for proc in procs):
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(target, timeout, output="".join(p.out.read_text(errors="replace")
                                                                             for p in procs))
            procs[0].server.pump(0.2)
        failed = next((proc.returncode for proc in procs if proc.returncode), 0)  # before the kills below
    finally:
        for proc in procs:
            proc.kill()
    return failed, "".join(proc.communicate(timeout=30)[0] for proc in procs)


class ForkedRank:
    """A rank started by the fork server, with the parts of ``subprocess.Popen`` the tests use."""

    def __init__(self, server: "ForkServer", pid: int, out: Path):
        self.server, self.pid, self.out = server, pid, out

    @property
    def returncode(self):
        return self.server.codes.get(self.pid)

    def poll(self):
        self.server.pump(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(f"rank pid {self.pid}", timeout)
            self.server.pump(0.5 if left is None else min(left, 0.5))
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, None]:
        self.wait(timeout)
        return self.out.read_text(errors="replace"), None

    def kill(self) -> None:
        if self.poll() is None:  # an exit already reported: its pid may belong to another process now
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


class ForkServer:
    """The client of tests/workers/fork_server.py: one per test process, started on first use."""

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="fo_ranks_"))
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "workers" / "fork_server.py")],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=ROOT)
        self.codes: dict[int, int] = {}
        self.dead = False  # the server's replies ended
        self._pids: list[int] = []
        self._pending, self._count = b"", 0

    def start(self, argv: list[str], env: dict) -> ForkedRank:
        self._count += 1
        out = self.dir / f"rank{self._count}.log"
        self.proc.stdin.write((json.dumps({"argv": argv, "env": env, "out": str(out)}) + "\n").encode())
        self.proc.stdin.flush()
        while not self._pids:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the fork server exited with {self.proc.returncode}")
            self.pump(1.0)
        return ForkedRank(self, self._pids.pop(0), out)

    def pump(self, timeout: float) -> None:
        """Read the replies that arrive within ``timeout`` seconds (at least those already there).
        Raises once the server is gone (its ranks' exits would never be reported)."""
        if self.dead:
            raise RuntimeError(f"the fork server exited ({self.proc.poll()}): its ranks' exits are unknown")
        fd = self.proc.stdout.fileno()
        ready, _, _ = select.select([fd], [], [], max(timeout, 0.0))
        while ready:
            data = os.read(fd, 1 << 16)
            if not data:
                self.dead = True
                break
            self._pending += data
            ready, _, _ = select.select([fd], [], [], 0.0)
        while b"\n" in self._pending:
            line, self._pending = self._pending.split(b"\n", 1)
            reply = json.loads(line)
            if "pid" in reply:  # a new rank: an earlier one's exit under the same pid is not its own
                self._pids.append(reply["pid"])
                self.codes.pop(reply["pid"], None)
            else:
                self.codes[reply["exit"]] = reply["code"]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        self.proc.wait(timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)


_SERVER: ForkServer | None = None


def _fork_server() -> ForkServer:
    global _SERVER
    if _SERVER is None or _SERVER.proc.poll() is not None:
        _SERVER = ForkServer()
        atexit.register(_SERVER.close)
    return _SERVER
