"""The fault-tolerance classes behind gang.ft (which documents them); this
module never imports torch or gang.ft_torch, so ft_torch can build on it."""

import datetime
import os
import socket

from . import _gang
from ._core import Gang, ReduceOperation
from ._gang import (
    GangError,
    InvalidArgumentError,
    NotSupportedError,
)

__all__ = [
    "LighthouseServer",
    "Manager",
    "OptimizerWrapper",
    "ReconfigurableGang",
    "BabyGang",
    "DummyGang",
    "ErrorSwallowingGang",
    "ManagedGang",
]

# gang_status values (gang/status.h) of the errors Python code reports.
_TIMEOUT, _PEER_LOST, _ABORTED = 5, 6, 7


def _seconds(value, what):
    """A duration as seconds: a timedelta or a number; None stays None."""
    if value is None:
        return None
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    try:
        return float(value)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"`{what}` must be seconds or a timedelta, not {value!r}") from None


def _ms(value, what, default=0):
    s = _seconds(value, what)
    if s is None:
        return default
    if s <= 0:
        raise InvalidArgumentError(f"`{what}` must be positive, not {value!r}")
    return max(1, int(round(s * 1000)))


def _status_of(e):
    """The gang_status an exception is reported as."""
    st = getattr(e, "status", None)
    if isinstance(e, GangError) and isinstance(st, int) and st > 0:
        return st
    if isinstance(e, TimeoutError):
        return _TIMEOUT
    if isinstance(e, ConnectionError):
        return _PEER_LOST
    return _ABORTED


def _describe(e):
    if isinstance(e, GangError) and getattr(e, "detail", None):
        return str(e.detail)
    text = str(e)
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _exception(recorded, reported):
    """errored()'s answer: None, the exception reported by hand when it is
    the one recorded, else the class of the recorded status."""
    if recorded is None:
        return None
    status, detail = recorded
    if reported is not None and detail == _describe(reported):
        return reported
    return _gang._error(status, detail)


def _reduce_op(op):
    """A ReduceOperation value from gang's or torch's names (AVG = MEAN)."""
    if isinstance(op, str):
        name = op.upper()
        name = "MEAN" if name == "AVG" else name
        if name in ReduceOperation.__members__:
            return int(ReduceOperation[name])
    elif isinstance(op, int):
        if 1 <= int(op) <= 5:
            return int(op)
    elif type(op).__module__.startswith("torch"):
        import torch.distributed as dist

        for name in ("SUM", "AVG", "PRODUCT", "MIN", "MAX"):
            if op == getattr(dist.ReduceOp.RedOpType, name):
                return int(ReduceOperation["MEAN" if name == "AVG" else name])
    raise InvalidArgumentError(f"`reduce_op` must be a ReduceOperation (SUM, MEAN, PRODUCT, MIN, MAX), not {op!r}")


def _split_host_port(bind):
    if not isinstance(bind, str) or ":" not in bind:
        raise InvalidArgumentError(f"`bind` must be 'HOST:PORT', not {bind!r}")
    host, _, port = bind.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        port = int(port)
    except ValueError:
        raise InvalidArgumentError(f"`bind` must be 'HOST:PORT', not {bind!r}") from None
    if not 0 <= port <= 65535:
        raise InvalidArgumentError(f"`bind` has a port outside 0..65535: {bind!r}")
    return host, port


def _lighthouse_addr(addr):
    """'host:port' from torchft's 'http://host:port' or gang's 'host:port'."""
    if addr is None:
        addr = os.environ.get("TORCHFT_LIGHTHOUSE")
    if addr is None:
        return None  # the C library reads GANG_LIGHTHOUSE
    for scheme in ("http://", "https://"):
        if addr.startswith(scheme):
            addr = addr[len(scheme):]
    return addr.rstrip("/")


class LighthouseServer:
    """The quorum service in this process (gang_lighthouse_start; torchft's
    ``LighthouseServer``). ``bind`` is 'HOST:PORT' (port 0: any free one);
    the defaults are torchft's Python ones (a 100 ms join timeout, a
    100 ms tick, a 5 s heartbeat timeout). Replicas speak to it through the
    gang store protocol; its status page (``/status`` as JSON, ``/`` for
    people) is on ``http_port`` (0: any free port, -1: none);
    ``allow_kill`` lets the page kill a replica group, for drills."""

    def __init__(self, bind="127.0.0.1:0", min_replicas=1, join_timeout_ms=None, quorum_tick_ms=None,
                 heartbeat_timeout_ms=None, *, http_port=0, secret=None, allow_kill=False):
        host, port = _split_host_port(bind)
        join = 100 if join_timeout_ms is None else max(1, int(join_timeout_ms))
        self._host = host
        self._lh = _gang._lighthouse_start(
            host or None, port, int(min_replicas), join, int(quorum_tick_ms or 0),
            int(heartbeat_timeout_ms or 0), int(http_port), secret,
            bool(allow_kill))

    def _public_host(self):
        if self._host in ("", "0.0.0.0", "::"):
            return socket.gethostname()
        return self._host

    @property
    def port(self):
        return self._lh.port

    def address(self):
        """'host:port' that replicas pass as ``lighthouse_addr`` (torchft's
        address() has an ``http://`` in front; Manager takes either)."""
        host = self._public_host()
        if ":" in host:
            host = f"[{host}]"
        return f"{host}:{self._lh.port}"

    def status_url(self):
        """The status page's JSON (``/status``), None without one."""
        port = self._lh.http_port
        if port < 0:
            return None
        host = self._public_host()
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{port}/status"

    def shutdown(self):
        """Stops it (gang_lighthouse_stop); replicas waiting on it get an
        error within their deadline. Idempotent."""
        self._lh.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()

    def __repr__(self):
        if self._lh.closed:
            return "<LighthouseServer shut down>"
        return f"<LighthouseServer {self.address()}>"


class _ManagedWork:
    """What Manager.allreduce returns: the all_reduce has already run (the C
    call returns when it is done), so the work is complete. As torchft's,
    wait() never raises: it returns whether this step is still free of
    errors."""

    def __init__(self, manager):
        self._manager = manager

    def wait(self, timeout=None):
        return self._manager.errored() is None

    def is_completed(self):
        return True

    def exception(self):
        return self._manager.errored()


class Manager:
    """The fault-tolerance manager of this rank (gang_manager_*; torchft's
    ``Manager``).

    ``lighthouse_addr`` ('host:port', or torchft's 'http://host:port';
    default TORCHFT_LIGHTHOUSE, else GANG_LIGHTHOUSE) is the lighthouse;
    ``replica_id`` this replica group's name, to which a random suffix is
    added per process, so a restarted group is a new member; ``group`` the
    gang of this replica group's ranks (None: a group of one), over which
    creating the manager is collective. Timeouts are seconds or timedeltas.

    Each step: ``start_quorum()``; forward and backward; ``allreduce(grad)``
    (in place, the mean over the replica groups taking part); then
    ``should_commit()``, and the optimizer steps only when it says True.
    """

    def __init__(self, *, lighthouse_addr=None, replica_id=None, group=None, min_replica_size=1, timeout=60.0,
                 quorum_timeout=60.0, heartbeat_interval=0.1, init_sync=True, max_retries=None,
                 load_state_dict=None, state_dict=None):
        if load_state_dict is not None or state_dict is not None:
            raise NotSupportedError(
                "gang's manager heals raw memory, not state_dict callbacks: register each "
                "contiguous buffer (parameters, optimizer state) with register_state(name, buffer)")
        self._reported = None
        self._keep = []
        self._m = _gang._manager_create(
            _lighthouse_addr(lighthouse_addr), replica_id, group, int(min_replica_size),
            _ms(timeout, "timeout"), _ms(quorum_timeout, "quorum_timeout"),
            _ms(heartbeat_interval, "heartbeat_interval"), -1 if max_retries is None else int(max_retries),
            bool(init_sync))
        # torchft heals {step, batches_committed}: the C manager heals the
        # step, and this 8-byte buffer, registered first, carries the other.
        self._batches = bytearray(8)
        self._m.register_state("gang.batches_committed", self._batches)

    # ---- state -----------------------------------------------------------

    def register_state(self, name, buffer):
        """Registers ``buffer`` (a C-contiguous, writable numpy array or
        torch CPU tensor, or anything with the buffer protocol) under
        ``name`` as part of this replica's state: a replica that is behind
        receives it, written in place, from one that is up to date. The
        manager holds the buffer until shutdown. Every rank of every group
        registers the same names, sizes and order, before the first
        start_quorum (torchft's register_state_dict_fn, for memory rather
        than callbacks). A tensor whose storage is replaced afterwards
        (``p.data = ...``) is not followed."""
        if not isinstance(name, str):
            raise InvalidArgumentError(f"`name` must be a str, not {type(name).__name__}")
        self._m.register_state(name, buffer)
        # A torch tensor's memory is its storage's: hold that too, so that
        # `p.data = ...` later cannot free what the manager writes into.
        storage = getattr(buffer, "untyped_storage", None) or getattr(buffer, "storage", None)
        if callable(storage) and hasattr(buffer, "data_ptr"):
            self._keep.append(storage())

    # ---- the step ----------------------------------------------------------

    def start_quorum(self, allow_heal=True, shrink_only=False, timeout=None):
        """Starts this step's quorum in the background and returns.
        allow_heal: this replica may receive the state if it is behind;
        shrink_only: the quorum may only lose members. A per-call timeout
        is not supported: the manager's quorum_timeout applies."""
        if timeout is not None:
            raise NotSupportedError("start_quorum(timeout=...): the quorum_timeout given to Manager applies")
        self._reported = None
        self._m.start_quorum(bool(allow_heal), bool(shrink_only))

    def wait_quorum(self):
        """Waits for the quorum (and any healing). Raises GangTimeoutError
        when the quorum timed out; other errors are kept for should_commit."""
        self._m.wait_quorum()

    def allreduce(self, tensor, should_quantize=False, reduce_op=ReduceOperation.MEAN):
        """all_reduce across the replica groups of this step's quorum, in
        place, MEAN by default (divided by the participants). Never raises
        for a failure of the peers: the error is kept, the step will not
        commit, and the tensor's contents are unspecified. Bad arguments
        raise as everywhere (InvalidArgumentError). Returns a completed
        work, as torchft's returns one to wait on."""
        if should_quantize:
            raise NotSupportedError("allreduce(should_quantize=True): gang does not quantize")
        self._m.all_reduce(tensor, _reduce_op(reduce_op))
        return _ManagedWork(self)

    def should_commit(self, timeout=None):
        """Whether this step commits: every rank of the group without an
        error, enough participants. The step advances on True. Raises
        AbortedError once more than max_retries steps in a row failed."""
        if timeout is not None:
            raise NotSupportedError("should_commit(timeout=...): the timeout given to Manager applies")
        commit = self._m.should_commit()
        if commit:
            done = int.from_bytes(self._batches, "little", signed=True) + self._m.participants()
            self._batches[:] = done.to_bytes(8, "little", signed=True)
        return commit

    def report_error(self, e):
        """Records an exception: this step will not commit (any thread)."""
        if self._reported is None:
            self._reported = e
        self._m.report_error(_status_of(e), _describe(e))

    def errored(self):
        """The step's first error, None when none: the exception given to
        report_error, or a GangError subclass for the library's."""
        return _exception(self._m.errored(), self._reported)

    def state_dict(self):
        """{'step', 'batches_committed'}: what a checkpoint keeps of the
        manager (torchft's Manager.state_dict)."""
        return {"step": self.current_step(), "batches_committed": self.batches_committed()}

    def load_state_dict(self, state_dict):
        """Resumes at a checkpoint's step and batch count, before the first
        start_quorum (torchft's Manager.load_state_dict). Every rank of the
        group loads the same. A group restored behind the others heals from
        them at its first quorum, as any late group does."""
        try:
            step, batches = int(state_dict["step"]), int(state_dict["batches_committed"])
        except (KeyError, TypeError, ValueError) as e:
            raise InvalidArgumentError(
                f"load_state_dict: expected {{'step': int, 'batches_committed': int}}, got {state_dict!r}") from e
        if batches < 0:
            raise InvalidArgumentError(f"load_state_dict: batches_committed {batches} is negative")
        self._m.step = step
        self._batches[:] = batches.to_bytes(8, "little", signed=True)

    # ---- readers -------------------------------------------------------------

    def current_step(self):
        """Committed steps (healing sets it to the source's)."""
        return self._m.step

    def batches_committed(self):
        """The sum over committed steps of their participants (torchft's
        count), healed with the state."""
        return int.from_bytes(self._batches, "little", signed=True)

    def num_participants(self):
        """Replica groups taking part in this step, after its quorum."""
        return self._m.participants(True)

    def quorum_id(self):
        """The current quorum's id (0 before the first)."""
        return self._m.quorum_id

    def replica_rank(self):
        """This group's rank among the replica groups of the quorum (-1
        before the first)."""
        return self._m.replica_rank

    def replica_id(self):
        """'name:suffix', new for every process."""
        return self._m.replica_id

    def last_timings(self):
        """What the last quorum cost: quorum_ms, configure_ms, heal_ms,
        heal_bytes (received > 0, sent < 0), error_ns."""
        return self._m.last_timings()

    @property
    def gang(self):
        """The managed gang (``ManagedGang``): its size is the number of
        participants, its all_reduce this manager's."""
        return self._m.gang(ManagedGang)

    # ---- life ---------------------------------------------------------------

    def shutdown(self, wait=True):
        """Stops the manager (gang_manager_destroy) and lets go of the
        registered buffers; the managed gang is closed with it."""
        self._m.close()
        self._keep.clear()

    close = shutdown

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()

    def __repr__(self):
        if self._m.closed:
            return "<Manager shut down>"
        return f"<Manager {self._m.replica_id} step {self._m.step} quorum {self._m.quorum_id}>"


class OptimizerWrapper:
    """torchft's OptimizerWrapper: zero_grad() starts the quorum, step()
    runs the optimizer only when the step commits."""

    def __init__(self, manager, optim):
        self.manager = manager
        self.optim = optim

    def zero_grad(self, set_to_none=True):
        self.manager.start_quorum()
        self.optim.zero_grad(set_to_none)

    def step(self, closure=None):
        """Steps the optimizer when the step commits; returns whether it
        did."""
        if self.manager.should_commit():
            self.optim.step(closure)
            return True
        return False

    @property
    def param_groups(self):
        return self.optim.param_groups

    def state_dict(self):
        return self.optim.state_dict()

    def load_state_dict(self, state_dict):
        self.optim.load_state_dict(state_dict)


# ---- gangs ---------------------------------------------------------------------


class _Configurable:
    def configure(self, store_addr, rank, world_size, timeout=None):
        """Makes this gang a new incarnation (gang_ft_configure): aborts
        the previous one, then meets ``world_size`` processes at
        ``store_addr`` ('host:port/prefix', a prefix never used before)
        as ``rank``, returning when ready or raising. Clears the sticky
        error. No other thread may use the gang meanwhile."""
        self._reported = None
        _gang._ft_configure(self, store_addr, int(rank), int(world_size), _seconds(timeout, "timeout") or 0.0)

    @property
    def configured(self):
        """gang_ft_configured."""
        return _gang._ft_configured(self)


class ReconfigurableGang(_Configurable, Gang):
    """A gang created unconfigured and rebuilt by ``configure`` (gang_ft_create,
    gang_ft_configure; under torchft's ProcessGroupGloo). Until
    configured, collectives raise InvalidUsageError ("not configured"),
    rank is -1 and size 0. ``timeout`` (seconds or a timedelta) is every
    incarnation's collective timeout."""

    def __new__(cls, timeout=None):
        return _gang._ft_create(cls, _seconds(timeout, "timeout") or 0.0)

    def __init__(self, timeout=None):
        pass


class BabyGang(ReconfigurableGang):
    """A ReconfigurableGang whose communicator lives in a child process
    (gang_baby_create; under torchft's ProcessGroupBaby): every configure
    starts a new child, buffers cross through shared memory, and a child
    that hangs or dies gives this process an error, never a hang. The child
    is the gang-baby program (GANG_BABY_PATH, else the one installed beside
    the library)."""

    def __new__(cls, timeout=None):
        return _gang._ft_create(cls, _seconds(timeout, "timeout") or 0.0, True)


class DummyGang(Gang):
    """Rank ``rank`` of ``world`` whose collectives move nothing: in-place
    ones leave the buffer, out-of-place ones copy the input to this rank's
    place; send and recv raise NotSupportedError (gang_create_dummy)."""

    def __new__(cls, rank=0, world=1):
        return _gang._dummy_create(cls, int(rank), int(world))

    def __init__(self, rank=0, world=1):
        pass


class ErrorSwallowingGang(_Configurable, Gang):
    """Wraps ``pg`` (gang_error_swallowing_wrap), taking its handle: ``pg``
    reads as closed afterwards, and closing the wrapper closes it. After the
    first error all_reduce returns at once and leaves the buffer unchanged;
    the error is kept (``error()``) until ``configure`` (which needs a
    reconfigurable ``pg``). Other collectives raise as ``pg``'s do."""

    def __new__(cls, pg):
        return _gang._swallow_wrap(cls, pg)

    def __init__(self, pg):
        self._reported = None

    def error(self):
        """The first error kept, None when none."""
        return _exception(_gang._swallow_error(self), self._reported)

    def report_error(self, e):
        """Poisons the wrapper by hand, as if the inner gang had failed."""
        if self._reported is None and _gang._swallow_error(self) is None:
            self._reported = e
        _gang._swallow_report(self, _status_of(e), _describe(e))


class ManagedGang(Gang):
    """A manager's gang (gang_manager_gang; under torchft's ManagedProcessGroup):
    size is the number of participants of the current quorum, rank this
    group's replica rank; all_reduce goes through the manager (MEAN over
    the participants, errors kept for should_commit); the other collectives
    go to the replica gang. Owned by the manager: closed with it."""

    def __new__(cls, manager):
        if not isinstance(manager, Manager):
            raise InvalidArgumentError(f"`manager` must be a Manager, not {type(manager).__name__}")
        return manager.gang

    def __init__(self, manager):
        pass
