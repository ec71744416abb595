"""What the multi-process tests share: a free local port and CPU gloo ranks under torchrun."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
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


def spawn_ranks(world_size: int, target: list[str]) -> list[subprocess.Popen]:
    """``target`` on ``world_size`` gloo ranks as plain processes (no torchrun, which would wait for
    every rank): the caller sees when each one exits, and must end the ones still running."""
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT),
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(world_size))
    return [subprocess.Popen([sys.executable, *target], env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for r in range(world_size)]
