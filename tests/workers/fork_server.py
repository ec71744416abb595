"""Rank processes forked from one warm interpreter (tests/gloo_ranks.py starts one per test process).

Importing torch costs about 3 s of CPU a process, most of what a small gloo rank does; the tests
that start ranks by the dozen (tests/test_rank_agreement.py) start them here instead. This process
imports torch and the engine once, then reads requests on stdin, one JSON line each
(``{"argv": [script, args...], "env": {...}, "out": path}``; ``["-m", module, args...]`` for a
module), and forks a child per request that runs the script or module as ``__main__`` with exactly that environment, stdin from /dev/null and stdout and
stderr into ``out``. The child leaves the interpreter as a fresh process does (the script's end,
``sys.exit`` or an uncaught exception, then atexit handlers and finalization), so an abort at exit
still shows. Replies, one JSON line each on stdout: ``{"pid": pid}`` per request, in order, and
``{"exit": pid, "code": code}`` when a child ends (negative: killed by that signal). When stdin
closes, the children still running are killed and the server exits.
"""
import json
import os
import runpy
import select
import signal
import sys

import torch  # noqa: F401 - the imports every rank would pay for, paid once here
import torch.distributed  # noqa: F401

import fo_lib.comm.torch_dist  # noqa: F401
import fo_lib.engine  # noqa: F401

REPLIES = os.dup(1)  # the control pipe; a child closes it and takes fd 1 for its output


def _reply(obj) -> None:
    os.write(REPLIES, (json.dumps(obj) + "\n").encode())


def _reap(children: set) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        _reply({"exit": pid, "code": os.waitstatus_to_exitcode(status)})


def serve():
    """Serve until stdin closes (returns None); in a forked child, return its request."""
    children, pending = set(), b""
    while True:
        ready, _, _ = select.select([0], [], [], 0.02)
        if ready:
            data = os.read(0, 1 << 16)
            if not data:
                for pid in children:
                    os.kill(pid, signal.SIGKILL)
                return None
            pending += data
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    return request
                children.add(pid)
                _reply({"pid": pid})
        _reap(children)


def become(request) -> None:
    """In the child: take the request's output, environment and arguments, then run the script."""
    os.close(REPLIES)
    out = os.open(request["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    os.close(null)
    os.environ.clear()
    os.environ.update(request["env"])
    argv = list(request["argv"])
    if argv[0] == "-m":
        sys.argv = argv[1:]
        sys.path[0] = os.getcwd()  # as ``python -m`` sets it
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        return
    sys.argv = argv
    sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
    runpy.run_path(sys.argv[0], run_name="__main__")


if __name__ == "__main__":
    child_request = serve()
    if child_request is not None:
        become(child_request)
