#!/usr/bin/env python3
"""Local multi-process launcher: N processes x M forced CPU devices on this machine, joined by ``jax.distributed``.

    python launch/local.py --processes 2 --cpu-devices 4 -- jaxdrive train sft --config configs/sft_tiny.py \\
        steps=3 optim.warmup_steps=0 mesh.enabled=True mesh.data=8 workdir=runs/sft-2x4
    python launch/local.py -n 2 -m 1 -- jaxdrive score --count 64 --shard-size 8 --out runs/score-2x1

Each process gets ``JAX_COORDINATOR_ADDRESS`` (localhost and a free port), ``JAX_NUM_PROCESSES``, ``JAX_PROCESS_ID``,
``JAX_PLATFORMS=cpu`` and ``XLA_FLAGS=--xla_force_host_platform_device_count=M``; ``jaxdrive`` joins the job from
them (``jaxdrive.distributed``). Output lines are prefixed with ``[p<i>]``. When a process fails, the others get
``--grace`` seconds to notice on their own (jaxdrive's peer watchdog), then are killed; the launcher exits with the
first failing status (128 + N for a process killed by signal N). ``--timeout`` bounds the whole job (status 124).
Ctrl-C (or SIGTERM) on the launcher is passed on to every process as SIGINT (they run in sessions of their own, out of
the terminal's reach), so each stops the way ``jaxdrive`` stops on Ctrl-C (committed outputs kept); those still
running after ``--grace`` seconds, or at a second Ctrl-C, are killed (status 130, 143 for SIGTERM). No process
outlives the launcher.
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time


def free_port() -> int:
    """A TCP port the OS reports free (bound to port 0 and released)."""
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def process_env(base: dict, index: int, count: int, address: str, cpu_devices: int) -> dict:
    env = dict(base)
    flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith("--xla_force_host_platform_device_count")]
    env.update(JAX_COORDINATOR_ADDRESS=address, JAX_NUM_PROCESSES=str(count), JAX_PROCESS_ID=str(index),
               JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1",
               XLA_FLAGS=" ".join(flags + [f"--xla_force_host_platform_device_count={cpu_devices}"]))
    if count == 1:  # a plain single-process run (the reference for multi-process ones)
        for k in ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID"):
            env.pop(k)
    return env


def _pump(stream, prefix: str, out) -> None:
    for line in iter(stream.readline, b""):
        out.write(prefix + line.decode(errors="replace"))
        out.flush()
    stream.close()


def _signal(procs: list[subprocess.Popen], signum: int) -> None:
    """Sends ``signum`` to the process group of each of ``procs`` still running."""
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signum)
            except ProcessLookupError:
                pass


def _kill(procs: list[subprocess.Popen]) -> None:
    _signal(procs, signal.SIGKILL)
    for p in procs:
        p.wait()


class Stopped(Exception):
    """The launcher received ``signum`` (SIGTERM; Ctrl-C arrives as KeyboardInterrupt)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _stop(signum: int, _frame) -> None:
    raise Stopped(signum)


def _interrupt(procs: list[subprocess.Popen], grace: float, out) -> None:
    """Sends SIGINT to the process group of every process still running, process 0 (the coordination service's
    host, whose exit aborts the others inside JAX) last, once the others have stopped; waits up to ``grace`` seconds
    in all for them to stop on their own (a second Ctrl-C ends the wait). The caller kills what is left."""
    out.write(f"launch: interrupted; the running processes get SIGINT (process 0 last) and {grace:.0f} s to stop on "
              "their own (Ctrl-C again: kill them now)\n")
    deadline = time.monotonic() + grace
    try:
        for group in (procs[1:], procs[:1]):
            _signal(group, signal.SIGINT)
            while any(p.poll() is None for p in group) and time.monotonic() < deadline:
                time.sleep(0.2)
    except (KeyboardInterrupt, Stopped):
        pass


def launch(command: list[str], processes: int, cpu_devices: int, *, timeout: float | None = None,
           grace: float = 30.0, out=None) -> int:
    """Runs ``command`` as ``processes`` processes; returns 0 if all succeed, else the first failure's status
    (negative: killed by that signal; 124: the job ran past ``timeout``; -SIGINT / -SIGTERM: the launcher was
    interrupted, after passing the interrupt on to the processes)."""
    out = out or sys.stdout
    address = f"localhost:{free_port()}"
    procs, pumps = [], []
    start = time.monotonic()
    status, failed_at, reported = 0, None, set()
    try:
        for i in range(processes):
            p = subprocess.Popen(command, env=process_env(os.environ, i, processes, address, cpu_devices),
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
            procs.append(p)
            t = threading.Thread(target=_pump, args=(p.stdout, f"[p{i}] ", out), daemon=True)
            t.start()
            pumps.append(t)

        def report(now: float) -> None:
            nonlocal status, failed_at
            for i, p in enumerate(procs):
                if p.poll() not in (None, 0) and i not in reported:
                    reported.add(i)
                    out.write(f"launch: process {i} exited with status {p.returncode}\n")
                    if failed_at is None:
                        status, failed_at = p.returncode, now
                        out.write(f"launch: the other processes get {grace:.0f} s to stop on their own\n")

        while any(p.poll() is None for p in procs):
            now = time.monotonic()
            report(now)
            if failed_at is not None and now - failed_at > grace:
                out.write("launch: grace period over; killing the remaining processes\n")
                break
            if timeout is not None and now - start > timeout:
                out.write(f"launch: the job ran past --timeout {timeout:.0f} s; killing it\n")
                status = 124
                break
            time.sleep(0.2)
        else:
            report(time.monotonic())
    except (KeyboardInterrupt, Stopped) as e:
        _interrupt(procs, grace, out)
        status = -getattr(e, "signum", signal.SIGINT)
    finally:
        _kill(procs)
        for t in pumps:
            t.join(timeout=5)
    if status == 0:
        status = next((p.returncode for p in procs if p.returncode != 0), 0)
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", "--processes", type=int, default=2, help="number of processes")
    parser.add_argument("-m", "--cpu-devices", type=int, default=1, help="forced CPU devices per process")
    parser.add_argument("--timeout", type=float, help="kill the job after this many seconds (status 124)")
    parser.add_argument("--grace", type=float, default=30.0,
                        help="seconds the others get to stop on their own after a process fails, and all of them after "
                             "Ctrl-C / SIGTERM")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command, e.g. jaxdrive score ...")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("command: give the command to run after --, e.g. -- jaxdrive score --count 64")
    if args.processes < 1 or args.cpu_devices < 1:
        parser.error("--processes and --cpu-devices: expected >= 1")
    if args.timeout is not None and args.timeout <= 0:
        parser.error(f"--timeout: expected a positive number of seconds, got {args.timeout:g}")
    if args.grace < 0:
        parser.error(f"--grace: expected seconds >= 0, got {args.grace:g}")
    if shutil.which(command[0]) is None:  # each process would fail to start: a traceback after the first started
        parser.error(f"command: {command[0]!r}: not found on PATH or not an executable file")
    signal.signal(signal.SIGTERM, _stop)  # passed on to the processes as Ctrl-C is
    status = launch(command, args.processes, args.cpu_devices, timeout=args.timeout, grace=args.grace)
    return 128 - status if status < 0 else status  # killed by signal N: 128 + N, as a shell reports it


if __name__ == "__main__":
    sys.exit(main())
