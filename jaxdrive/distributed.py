"""Multi-controller runs: one ``jaxdrive`` process per host (or per GPU / CPU group), joined by JAX's distributed
runtime. The same command runs unchanged on one laptop and on many hosts; this module decides which from the
environment, before JAX starts its backends (``jaxdrive.cli.main`` calls :func:`initialize_from_env` first).

Environment (set by the launchers in ``launch/``):

  ``JAX_COORDINATOR_ADDRESS``  host:port of process 0's coordination service
  ``JAX_NUM_PROCESSES``        number of processes in the job
  ``JAX_PROCESS_ID``           this process's index, 0..N-1
  ``JAXDRIVE_DISTRIBUTED=auto`` instead of the three above: JAX's own cluster detection (SLURM, TPU pods, GKE,
                               Open MPI)
  ``JAXDRIVE_PEER_TIMEOUT_S``  seconds without a heartbeat after which a peer counts as dead (default 60)
  ``JAXDRIVE_INIT_TIMEOUT_S``  seconds to wait for every process to join at start-up (default 300)

With none of them set (or ``JAX_NUM_PROCESSES=1``) everything here is a no-op: a single-process run.

Dead peers: every process beats a counter in the coordination service's key-value store once a second from a
daemon thread, and watches the others'. A peer whose counter stops for ``JAXDRIVE_PEER_TIMEOUT_S`` (killed,
preempted, its host gone), a peer that exits with an error, or a lost coordinator makes this process print one line
naming the peer and exit with status 1 (``EXIT_PEER``) instead of hanging in a collective or a barrier. JAX's own
heartbeat (set to twice that timeout plus 10 s) is the backstop: it aborts the process with its own message.
Outputs that were committed (scoring shards, checkpoints) are kept; rerun the same command (``jaxdrive score`` with
``--resume``; training continues from its last checkpoint by itself).
"""
from __future__ import annotations

import atexit
import os
import sys
import threading
import time

import numpy as np

from jaxdrive.errors import UserInputError

EXIT_PEER = 1
_BEAT_S = 1.0


class _State:
    initialized = False
    process_id = 0
    process_count = 1
    client = None
    status: str | None = None  # "ok" once the command finished successfully (set by ``mark_finished``)
    code = 1  # exit status of a failed command (an uncaught exception: 1)
    exiting = False  # set at exit: the watchdog stops before JAX shuts the client down
    barriers = 0


_STATE = _State()


def _env_int(name: str, default: int | None = None) -> int | None:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise UserInputError(f"{name}: expected an integer, got {raw!r}") from None


def initialize_from_env() -> bool:
    """Joins the distributed runtime named by the environment (see module docstring); returns True when this is a
    multi-process run. Call before anything touches a JAX device. A second call is a no-op."""
    if _STATE.initialized:
        return _STATE.process_count > 1
    auto = os.environ.get("JAXDRIVE_DISTRIBUTED", "").lower()
    if auto not in ("", "auto", "off"):
        raise UserInputError(f"JAXDRIVE_DISTRIBUTED: expected 'auto' or 'off', got {auto!r}")
    count = _env_int("JAX_NUM_PROCESSES")
    if auto == "off" or (auto != "auto" and (count is None or count == 1)):
        _STATE.initialized = True
        return False
    peer_timeout = _env_int("JAXDRIVE_PEER_TIMEOUT_S", 60)
    init_timeout = _env_int("JAXDRIVE_INIT_TIMEOUT_S", 300)
    if peer_timeout < 2:
        raise UserInputError(f"JAXDRIVE_PEER_TIMEOUT_S: expected >= 2 seconds, got {peer_timeout}")
    kwargs = dict(initialization_timeout=init_timeout, heartbeat_timeout_seconds=2 * peer_timeout + 10)
    if auto != "auto":
        address, pid = os.environ.get("JAX_COORDINATOR_ADDRESS"), _env_int("JAX_PROCESS_ID")
        if not address or ":" not in address:
            raise UserInputError(f"JAX_COORDINATOR_ADDRESS: expected host:port of process 0, got {address!r} "
                             f"(JAX_NUM_PROCESSES={count} asks for a multi-process run)")
        if pid is None or not 0 <= pid < count:
            raise UserInputError(f"JAX_PROCESS_ID: expected 0..{count - 1}, got {os.environ.get('JAX_PROCESS_ID')!r}")
        kwargs.update(coordinator_address=address, num_processes=count, process_id=pid)
    import jax
    from jax._src import distributed as jax_distributed

    jax.distributed.initialize(**kwargs)
    _STATE.initialized = True
    _STATE.process_id, _STATE.process_count = jax.process_index(), jax.process_count()
    _STATE.client = jax_distributed.global_state.client
    if _STATE.process_count > 1:
        threading.Thread(target=_watch, args=(float(peer_timeout),), name="jaxdrive-peer-watchdog",
                         daemon=True).start()
        atexit.register(announce_exit)
    return _STATE.process_count > 1


def process_index() -> int:
    return _STATE.process_id


def process_count() -> int:
    return _STATE.process_count


def is_main() -> bool:
    """True on process 0 (the one that logs, prints summaries and writes job-level files)."""
    return _STATE.process_id == 0


def log(*args, **kwargs) -> None:
    """``print`` on process 0 only."""
    if is_main():
        print(*args, **kwargs)


def mark_finished(ok: bool, code: int = 0, *, interrupted: bool = False) -> None:
    """Records how this process's command ended (``code``: its exit status; ``interrupted``: by Ctrl-C). Peers learn
    it when this process exits: a failure or an interrupt stops them at once instead of after the peer timeout, and
    such a process exits without waiting in JAX's shutdown barrier for peers that may never arrive."""
    _STATE.status, _STATE.code = ("ok" if ok else "interrupted" if interrupted else "failed"), code


def _peer_ended(process: int, status: str) -> str:
    """What the watchdog says of a peer that ended with ``status`` (``mark_finished``'s) other than "ok"."""
    return f"process {process} {'was interrupted (Ctrl-C)' if status == 'interrupted' else 'exited with an error'}"


def barrier(name: str, timeout_s: float | None = None) -> None:
    """Blocks until every process reaches the barrier ``name`` (no-op for one process). A peer that never arrives
    is an error after ``timeout_s`` (default ``JAXDRIVE_BARRIER_TIMEOUT_S`` or 24 h: shards may be unbalanced); a dead
    peer ends the process earlier through the watchdog."""
    if _STATE.process_count == 1:
        return
    timeout_s = float(timeout_s or _env_int("JAXDRIVE_BARRIER_TIMEOUT_S", 24 * 3600))
    _STATE.barriers += 1
    try:
        _STATE.client.wait_at_barrier(f"jaxdrive/{_STATE.barriers}/{name}", int(timeout_s * 1000))
    except Exception as e:  # the runtime's error types are not public
        raise RuntimeError(f"process {_STATE.process_id}: barrier {name!r}: not every process arrived within "
                           f"{timeout_s:.0f} s ({str(e).splitlines()[0]})") from None


def _fail(message: str) -> None:
    print(f"jaxdrive (process {_STATE.process_id} of {_STATE.process_count}): {message}; stopping this process. "
          "Committed outputs are kept: rerun the same command to continue (jaxdrive score: with --resume; training "
          "continues from its last checkpoint by itself).", file=sys.stderr, flush=True)
    os._exit(EXIT_PEER)


def announce_exit() -> None:
    """At exit (registered after JAX's own exit handler, so it runs first): tells the peers how this process ended;
    after a failure, exits at once (JAX's shutdown would wait for every peer, possibly for minutes). A no-op in a
    single-process run."""
    if _STATE.client is None:
        return
    _STATE.exiting = True
    try:
        _STATE.client.key_value_set(f"jaxdrive/exit/{_STATE.process_id}", _STATE.status or "failed",
                                    allow_overwrite=True)
    except Exception:  # the coordinator may already be gone; peers then notice the silence
        pass
    if _STATE.status != "ok":
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_STATE.code or 1)


def _watch(timeout: float) -> None:
    """Beats this process's counter and checks the peers' (see module docstring)."""
    client, me, n = _STATE.client, _STATE.process_id, _STATE.process_count
    seen = {p: (None, time.monotonic()) for p in range(n) if p != me}
    while not _STATE.exiting:
        try:
            client.key_value_increment(f"jaxdrive/beat/{me}", 1)
            beats = dict(client.key_value_dir_get("jaxdrive/beat"))
            exits = dict(client.key_value_dir_get("jaxdrive/exit"))
        except Exception as e:  # the runtime's error types are not public
            if _STATE.exiting:
                return
            _fail(f"lost contact with the coordinator (process 0) ({str(e).splitlines()[0] if str(e) else type(e).__name__})")
        now = time.monotonic()
        for p in list(seen):
            if _STATE.exiting:
                return
            status = exits.get(f"jaxdrive/exit/{p}")
            if status == "ok":
                del seen[p]
            elif status is not None:
                _fail(_peer_ended(p, status))
            elif beats.get(f"jaxdrive/beat/{p}") != seen[p][0]:
                seen[p] = (beats.get(f"jaxdrive/beat/{p}"), now)
            elif now - seen[p][1] > timeout:
                _fail(f"process {p} stopped responding {now - seen[p][1]:.0f} s ago (dead, killed or preempted; "
                      f"JAXDRIVE_PEER_TIMEOUT_S={timeout:.0f})")
        time.sleep(_BEAT_S)


# ---------------------------------------------------------------------------------------------- global arrays
def global_array(x, sharding):
    """A global ``jax.Array`` of the host array ``x`` (the same global value on every process) laid out by
    ``sharding``: each process hands over only the rows its devices hold (``jax.make_array_from_process_local_data``).

    The rows a process holds must be one contiguous block of ``x`` along each sharded axis (true for a mesh built
    from ``jax.devices()``, which lists devices process by process)."""
    import jax

    x = np.asarray(x)
    index_map = sharding.addressable_devices_indices_map(x.shape)
    local = []
    for axis, size in enumerate(x.shape):
        starts = {idx[axis].indices(size)[0] for idx in index_map.values()}
        stops = {idx[axis].indices(size)[1] for idx in index_map.values()}
        lo, hi = min(starts), max(stops)
        covered = sum(b - a for a, b in {(idx[axis].indices(size)[:2]) for idx in index_map.values()})
        if covered != hi - lo:
            raise UserInputError(f"global_array: this process's devices hold a non-contiguous part of axis {axis} "
                             f"(shape {x.shape}, sharding {sharding}); build the mesh from jax.devices()")
        local.append(slice(lo, hi))
    return jax.make_array_from_process_local_data(sharding, x[tuple(local)], x.shape)


def require_single_process(what: str) -> None:
    """A ValueError (a one-line usage error) when ``what`` runs under a multi-process launcher: it writes one set of
    files and has no per-process sharding, so N processes would overwrite each other's outputs."""
    if process_count() > 1:
        raise UserInputError(f"{what} runs as one process (it is not sharded across processes); start it without the "
                         f"launcher (got {process_count()} processes)")
