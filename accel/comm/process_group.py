"""The ``"accel"`` torch.distributed backend: shared-memory all-reduce, gloo for the rest.

    import accel.process_group  # registers the backend (idempotent); also accel.comm.process_group
    dist.init_process_group("accel")
    model = torch.nn.parallel.DistributedDataParallel(model)   # unchanged CPU DDP

Every collective is gloo's (a gloo process group on the same store, so multi-node jobs,
other ops and other dtypes work as before) except, when every rank of the group is on
this node: ``allreduce`` with ``SUM`` of one CPU tensor (:func:`accel.comm.all_reduce_`:
shared memory for float32, bfloat16 and float16, gloo otherwise, decided by all ranks
together on each call; DDP's gradient buckets are exactly such calls),
``reduce_scatter_tensor`` with ``SUM`` (the same sums, same dtypes), both also with
``AVG`` of floating-point tensors (FSDP2's gradients), and ``all_gather_into_tensor``,
one-tensor ``broadcast`` and ``barrier``, which copy bytes through the same segment. When
the group spans nodes, the same all-reduce, reduce-scatter, all-gather and broadcast take
two levels, shared memory in each node and gloo between nodes (:mod:`accel.comm._two_level`).

Like gloo's, these reductions are asynchronous: one worker thread per group runs them in
the order they were issued (the native call releases the GIL), so DDP overlaps them with
the rest of the backward pass. Any other collective first waits for the reductions
before it, so the group's operations keep one order on every rank. A group's set-up
(collective) is its first reduction's first step on the worker, so a rank may issue
async reductions on new groups in any order, as with gloo.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import inspect
import threading
import warnings
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from datetime import timedelta
from typing import Any, cast

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Store  # pyright: ignore[reportMissingModuleSource]
from torch.distributed.distributed_c10d import GroupName
from typing_extensions import override

from accel import comm
from accel.comm import _torch_dist as tdist
from accel.comm._promote import Promotions, caller
from accel.comm._promote import enabled as promotion_enabled
from accel.comm._release import released
from accel.comm._route import Way
from accel.comm._segment import (
    contiguous_work,
    refuse_shared_elements,
    register_group_owner,
    release,
    segment_of,
    spanning_of,
    write_back,
)
from accel.comm._serial import SerialWorker

BACKEND_NAME = "accel"
# torch's stubs lack these (_create_work_from_future) or type them too
# narrowly (ProcessGroup.__init__(rank, size)); the tests run them for real.
_c10d: Any = importlib.import_module("torch._C._distributed_c10d")


class _QueuedWork(_c10d.Work):  # type: ignore[misc]
    """The ``Work`` of a queued reduction: ``wait()`` raises what the reduction raised
    (torch's future-wrapping Work returns True even for a failed future)."""

    def __init__(
        self, future: torch.futures.Future[list[torch.Tensor]], worker: SerialWorker | None = None
    ) -> None:
        super().__init__()  # pyright: ignore[reportUnknownMemberType]
        self._future = future
        self._worker = worker  # the group's, for a wait from one of its callbacks

    def wait(self, timeout: timedelta | None = None) -> bool:
        """Block until the reduction ends, at most ``timeout`` (``RuntimeError`` then, as
        gloo's work raises); raise the reduction's error, if any."""
        if self._worker is not None and not self._future.done() and self._worker.running_here():
            self._worker.run_queued()  # from a callback on the worker: it is queued there
        if timeout is not None and timeout.total_seconds() > 0 and not self._future.done():
            ended = threading.Event()
            self._future.add_done_callback(lambda _: ended.set())
            if not ended.wait(timeout.total_seconds()):
                raise RuntimeError(
                    f"accel process group: the reduction did not end within {timeout} "
                    "(Work.wait's timeout); it goes on in the background"
                )
        self._future.wait()
        return True

    def get_future(self) -> torch.futures.Future[list[torch.Tensor]]:
        """The reduction's future (DDP chains its bucket hooks on it)."""
        return self._future

    def result(self) -> list[torch.Tensor]:
        """The reduced tensors once the reduction ended (waits for it), as gloo's work
        returns them; raises what the reduction raised."""
        self.wait()
        return self._future.value()

    def is_completed(self) -> bool:
        """Whether the reduction has ended."""
        return self._future.done()


class AccelProcessGroup(dist.ProcessGroup):
    """A process group that reduces through shared memory and does everything else with
    gloo. Created by ``init_process_group("accel")`` / ``new_group(backend="accel")``."""

    def __init__(self, store: Store, rank: int, size: int, timeout: timedelta) -> None:
        super().__init__(rank, size)  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
        prefixed = tdist.prefix_store("accel/gloo/", store)
        # torch's stubs omit most of ProcessGroupGloo's methods: typed as Any, checked by
        # tests/comm/test_process_group.py against gloo itself.
        self.gloo: Any = dist.ProcessGroupGloo(prefixed, rank, size, timeout)
        self._timeout = timeout.total_seconds()
        # accel.comm's own setup and fallback collectives come back through this group;
        # inside them every call must go straight to gloo.
        self._inside = threading.local()
        self._shared: bool | None = None  # decided by the first SUM (a collective setup)
        # The queued reductions' Work futures complete on the worker, so callbacks chained
        # on them run there (torch's PowerSGD hook issues and waits for collectives in
        # them): a collective issued there first runs what was queued before it, there.
        self._worker = SerialWorker("accel-pg")
        self._last: Future[None] | None = None  # the newest queued reduction
        self._failed: BaseException | None = None  # the first queued reduction that failed
        self.shared_reductions = 0
        """Reductions handed to shared memory so far (the rest went to gloo)."""
        self.shared_collectives = 0
        """all_gather / broadcast / barrier calls handed to shared memory so far."""
        self.promotions = Promotions(enabled=promotion_enabled())
        """DDP's gradient buckets this rank moved into its pool (:mod:`accel.comm._promote`)."""
        self._closed = False
        self._warned_device = False  # see _note_device_tensors
        # Threads left to the interpreter's final teardown abort the process ("terminate
        # called without an active exception"): stop them at exit at the latest.
        _live.add(self)

    def getBackendName(self) -> str:
        """The backend's name.

        Returns:
            ``"accel"``.
        """
        # DDP's construction asks it (init_sync or not): the group records the model.
        self.promotions.note_construction(caller(inspect.currentframe()))
        return BACKEND_NAME

    # torch keeps a group's name on its C++ backends, which a Python process group has
    # none of: the name torch sets is kept here, so that DeviceMesh (FSDP2, DTensor) can
    # name and find this group.
    @override
    def _set_group_name(self, name: str) -> None:
        self._name = GroupName(name)

    @property
    @override
    def group_name(self) -> GroupName:
        """The name torch gave this group (``init_process_group``/``new_group``).

        Returns:
            The group's name.

        Raises:
            RuntimeError: torch has not named the group yet.
        """
        name: GroupName | None = getattr(self, "_name", None)
        if name is None:
            raise RuntimeError("ProcessGroup name not set")
        return name

    @override
    def _get_backend(self, device: torch.device) -> Any:
        """For the CPU, gloo's backend, which also offers FSDP2 buffers from this group's
        pool (:class:`_PooledBackend`); torch's answer for other devices.

        Args:
            device: The device whose backend torch's Python code asks for.

        Returns:
            The backend.
        """
        if torch.device(device).type != "cpu":
            return super()._get_backend(device)
        return _PooledBackend(self)

    @override
    def shutdown(self) -> None:
        """Finish the queued reductions and stop the worker and gloo (``destroy_process_group``
        calls this; so does interpreter exit, while Python can still run it)."""
        if self._closed:
            return
        if self._on_worker():  # it would wait for the reduction whose callback this is
            raise RuntimeError(
                "accel process group: destroyed from a callback of one of its own reductions "
                "(they run on the group's worker thread); destroy it from another thread"
            )
        self._closed = True
        try:
            if self._last is not None:
                self._last.exception()  # finished; a failure is its Work's and said there
        finally:
            self._worker.shutdown()
            release(self)
            self.gloo.shutdown()

    def collective_timeout(self) -> float:
        """The timeout this group was made with.

        Its shared-memory collectives wait that long for a silent peer, as gloo does.

        Returns:
            The timeout in seconds.
        """
        return self._timeout

    def uses_shared_memory(self) -> bool:
        """Whether this group's collectives go through shared memory.

        The group's set-up decides, collectively: its first reduction, queued, sets it
        up on the worker (this waits for it); failing that, the first call here does, as
        torch's first collective on the group does on every rank.

        Returns:
            ``True`` when every rank of the group is on this node.

        Raises:
            RuntimeError: The group was destroyed (``destroy_process_group``).
        """
        if self._closed:  # its segment is gone: say so, not a KeyError from the lookup
            raise RuntimeError(
                f"accel process group {getattr(self, '_name', 'unnamed')!r} was destroyed "
                "(destroy_process_group); create a new process group"
            )
        if self._shared is None:
            self.wait_queued()  # a queued first reduction sets the group up: wait for it
        if self._shared is None:  # none queued: set up here, in order with the queue
            self._set_up()
        assert self._shared is not None
        return self._shared

    def _set_up(self) -> None:
        """Set the group up (its segment, or its levels across nodes) unless it is:
        collective, in this thread."""
        if self._shared is not None:
            return
        self._inside.active = True  # its own collectives go to gloo
        try:
            self._shared = comm.uses_shared_memory(self)
        finally:
            self._inside.active = False

    def _here(self, collective: Callable[[], object], result: list[torch.Tensor]) -> Any:
        """Run a shared-memory collective now, in this thread, after the queued reductions."""
        self.shared_collectives += 1
        self.wait_queued()
        self._inside.active = True  # its own fallbacks go to gloo
        try:
            collective()
        finally:
            self._inside.active = False
        future: torch.futures.Future[list[torch.Tensor]] = torch.futures.Future()
        future.set_result(result)
        return _QueuedWork(future)

    def in_own_collective(self) -> bool:
        """Whether this thread is inside one of this group's own accel.comm calls.

        Their torch.distributed calls (setup, fallbacks) must go straight to gloo.

        Returns:
            ``True`` inside such a call.
        """
        return bool(getattr(self._inside, "active", False))

    def _way(self) -> Way:
        """The way this group's collectives go now: gloo's from inside accel.comm (its
        set-up and fallbacks), else what the set-up found (:mod:`accel.comm._route`
        then decides each call, as for any group)."""
        if self.in_own_collective():
            return Way.TORCH
        if self.uses_shared_memory():
            return Way.SHARED
        return Way.TWO_LEVEL if spanning_of(self) is not None else Way.TORCH

    @override
    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Any:
        """``all_gather_into_tensor`` through shared memory (byte copies, any dtype) when the
        group is node-local, over both levels when it spans nodes evenly; gloo's otherwise."""
        if self._way() is Way.TORCH:
            self.wait_queued()
            return self.gloo._allgather_base(
                output, input, opts or tdist.options.AllgatherOptions()
            )
        return self._here(lambda: comm.all_gather_into_tensor_(output, input, group=self), [output])

    _allgather_base = all_gather_single  # the name torch releases before 2.10 call

    @override
    def broadcast(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:  # type: ignore[override]  # pyright: ignore[reportIncompatibleMethodOverride]
        """One tensor from ``opts.rootRank`` through shared memory when node-local, over
        both levels when the group spans nodes; gloo's otherwise (and for several
        tensors)."""
        opts = opts or dist.BroadcastOptions()
        self._note_device_tensors(tensors)
        if len(tensors) != 1 or tensors[0].device.type != "cpu" or self._way() is Way.TORCH:
            self.wait_queued()
            return _on_contiguous(tensors, lambda works: self.gloo.broadcast(works, opts))
        source = dist.get_global_rank(self, opts.rootRank)
        return self._here(lambda: comm.broadcast_(tensors[0], source, group=self), tensors)

    @override
    def _reduce_scatter_base(
        self, outputTensor: torch.Tensor, inputTensor: torch.Tensor, opts: Any = None
    ) -> Any:
        """``reduce_scatter_tensor`` with ``SUM`` (or ``AVG`` of floating-point tensors, as
        FSDP2 asks for: the sum divided by the group size) through shared memory when
        node-local (sums as ``allreduce``'s), over both levels when the group spans nodes
        evenly; gloo's otherwise and for other ops. (torch's parameter names.)"""
        opts = opts or dist.ReduceScatterOptions()
        _refuse_nccl_only_ops(opts)
        average = _averages(opts.reduceOp, outputTensor)
        if not (opts.reduceOp == dist.ReduceOp.SUM or average) or self._way() is Way.TORCH:
            self.wait_queued()
            return self.gloo._reduce_scatter_base(outputTensor, inputTensor, opts)

        def reduce_scatter() -> None:
            comm.reduce_scatter_tensor_(outputTensor, inputTensor, group=self)
            if average:
                _divide(outputTensor, self.size())

        return self._here(reduce_scatter, [outputTensor])

    reduce_scatter_single = _reduce_scatter_base  # torch's newer name for it

    # torch's functional collectives (DTensor's full_tensor() and redistribute, FSDP2's
    # state dicts) call the coalesced forms; without them torch looks for a C++ backend
    # registered for the device and finds none ("No backend type associated with device
    # type cpu").
    @override
    def allgather_into_tensor_coalesced(  # pyright: ignore[reportIncompatibleMethodOverride]
        self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any = None
    ) -> Any:
        """``all_gather_into_tensor`` of each (output, input) pair, in order."""
        return self._each(self.all_gather_single, outputs, inputs, opts)

    @override
    def reduce_scatter_tensor_coalesced(  # pyright: ignore[reportIncompatibleMethodOverride]
        self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any = None
    ) -> Any:
        """``reduce_scatter_tensor`` of each (output, input) pair, in order."""
        return self._each(self._reduce_scatter_base, outputs, inputs, opts)

    def _each(
        self,
        collective: Callable[[torch.Tensor, torch.Tensor, Any], Any],
        outputs: list[torch.Tensor],
        inputs: list[torch.Tensor],
        opts: Any,
    ) -> Any:
        if len(outputs) != len(inputs):
            raise ValueError(f"{len(outputs)} output tensors for {len(inputs)} inputs")
        for output, input_ in zip(outputs, inputs, strict=True):
            collective(output, input_, opts).wait()
        future: torch.futures.Future[list[torch.Tensor]] = torch.futures.Future()
        future.set_result(outputs)
        return _QueuedWork(future)

    @override
    def barrier(self, opts: Any = None) -> Any:  # pyright: ignore[reportIncompatibleMethodOverride]
        """Through shared memory when node-local; gloo's otherwise."""
        if self._way() is not Way.SHARED:  # no barrier over two levels: gloo's
            self.wait_queued()
            return self.gloo.barrier(opts or dist.BarrierOptions())
        return self._here(lambda: comm.barrier(group=self), [])

    def _set_up_then_gloo(
        self, tensors: list[torch.Tensor], opts: Any, modes: _CallerModes | None = None
    ) -> bool:
        """Before a queued reduction, on the worker: set the group up if not yet (the
        first reduction's job on every rank alike: the set-up is collective), and if the
        group is gloo's after all, reduce as a call made after the set-up does, with the
        same options, so every rank gets gloo's bits; whether it did."""
        self._set_up()
        if self._shared or spanning_of(self) is not None:
            self.shared_reductions += 1
            return False
        with released(tensors):
            self._gloo_allreduce(tensors, opts, modes).wait()
        return True

    def _reduce(self, tensor: torch.Tensor) -> None:
        self._inside.active = True  # this worker thread's collectives go to gloo
        try:
            comm.all_reduce_(tensor, group=self)
        finally:
            self._inside.active = False

    def _idle(self) -> bool:
        """Whether every reduction queued so far has ended."""
        return self._last is None or self._last.done()

    def wait_queued(self) -> None:
        """Wait for the reductions queued so far (before any other collective: one order;
        accel.comm calls it too when called directly with this group).

        Raises:
            RuntimeError: A queued reduction failed (its own Work raised its error): the
                ranks may no longer be at the same collective, so none follows on this
                group; the message names that failure.
        """
        last = self._last
        if last is None or self.in_own_collective():
            return
        if self._on_worker():  # a callback of a queued reduction: run the rest here
            self._worker.run_queued()
        else:
            last.exception()  # waits for it
        self.raise_if_failed()

    def _on_worker(self) -> bool:
        """Whether this thread is the group's worker (a queued reduction's callbacks)."""
        return self._worker.running_here()

    def raise_if_failed(self) -> None:
        """Refuse to go on after a queued reduction failed (see :meth:`wait_queued`)."""
        if self._failed is None:
            return
        said = str(self._failed)
        advice = (
            "" if said.endswith("create a new process group") else "; create a new process group"
        )
        raise RuntimeError(
            f"a reduction queued on this group failed earlier: {said}{advice}"
        ) from self._failed

    @override
    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:  # type: ignore[override]  # pyright: ignore[reportIncompatibleMethodOverride]
        """Sum (or average: the sum divided by the group size, an integer quotient
        truncated) one CPU tensor through shared memory, asynchronously; anything else
        through gloo, and an integer average there as its sum divided."""
        if opts is None:
            opts = dist.AllreduceOptions()
        _refuse_nccl_only_ops(opts)
        for tensor in tensors:  # here, in the caller's thread: the group stays usable
            if tensor.layout == torch.strided and not tensor.is_contiguous():
                refuse_shared_elements(tensor, "tensor")
        average = len(tensors) == 1 and _averages(opts.reduceOp, tensors[0])
        self._note_device_tensors(tensors)
        if (
            self.in_own_collective()
            or len(tensors) != 1
            or not (opts.reduceOp == dist.ReduceOp.SUM or average)
            or tensors[0].device.type != "cpu"
        ):
            self.wait_queued()
            return self._gloo_allreduce(tensors, opts)
        # A group set up without shared memory or levels is gloo's, straight away once
        # nothing queued is left to keep ahead of it. Until the set-up is done, the
        # reduction is queued: the set-up is collective and runs first on the worker, so
        # the caller never waits for it and ranks may touch their groups in any order.
        if self._shared is False and spanning_of(self) is None and self._idle():
            self.wait_queued()  # raises if a queued reduction failed
            return self._gloo_allreduce(tensors, opts)
        tensor = tensors[0]
        self._promote(tensor, caller(inspect.currentframe()))
        outcome: torch.futures.Future[list[torch.Tensor] | _Failure] = torch.futures.Future()
        future = outcome.then(_raise_failure)
        modes = _CallerModes()  # the caller's, for the division

        def run() -> None:
            try:
                self.raise_if_failed()  # in queue order: nothing runs after a failure
                if self._set_up_then_gloo(tensors, opts, modes):
                    outcome.set_result(tensors)
                    return
            except BaseException as error:  # the group as it was: it sets up again
                outcome.set_result(_Failure(error))
                raise
            try:
                # Under the caller's inference mode: the two-level path updates the tensor
                # with torch ops, which refuse an inference tensor outside it.
                with torch.inference_mode(modes.inference):
                    self._reduce(tensor)
            except BaseException as error:  # reported through the Work, as gloo does
                self._failed = self._failed or error
                outcome.set_result(_Failure(error))
                raise
            if average:
                # After the sum, as gloo divides (a leaf that requires grad refuses it on
                # every rank alike): the ranks are in step, so the group stays usable.
                try:
                    with modes:
                        _divide(tensor, self.size())
                except Exception as error:
                    outcome.set_result(_Failure(error))
                    return
            outcome.set_result(tensors)

        self._last = self._worker.submit(run)
        if self._on_worker():
            # From a callback of a reduction the worker has just finished: left queued, it
            # would wait for the worker, which waits for the callback. Run it now, after
            # the reductions queued before it (issue order, as every rank has it).
            self._worker.run_queued()
        return _QueuedWork(future, self._worker)

    def _note_device_tensors(self, tensors: list[torch.Tensor]) -> None:
        """Warn, once per group, when a device's tensor reaches this group: gloo carries it
        (slowly, or refuses it), where the device's own backend was most likely meant."""
        if self._warned_device or all(tensor.device.type == "cpu" for tensor in tensors):
            return
        self._warned_device = True
        device = next(t.device.type for t in tensors if t.device.type != "cpu")
        warnings.warn(
            f"a {device} tensor reached the 'accel' process group, which hands it to gloo: "
            f"torch makes a Python process group the whole group, so "
            f"init_process_group('cpu:accel,{device}:<backend>') keeps no {device} backend. "
            "Keep the device's backend for the default group and give CPU tensors a group "
            "of their own: dist.new_group(backend='accel') (docs/frameworks.md)",
            RuntimeWarning,
            stacklevel=3,
        )

    def _gloo_allreduce(
        self, tensors: list[torch.Tensor], opts: Any, modes: _CallerModes | None = None
    ) -> Any:
        """gloo's ``allreduce``; an ``AVG`` of integer tensors, which gloo refuses, as its
        sum divided here once it ends (as :func:`_divide` divides)."""
        divided = opts.reduceOp == dist.ReduceOp.AVG and any(
            _averages(opts.reduceOp, t) and not t.is_floating_point() for t in tensors
        )
        if not divided and all(t.is_contiguous() for t in tensors):  # the common case, as is
            return self.gloo.allreduce(tensors, opts)
        if divided:
            summing, sum_op = dist.AllreduceOptions(), cast("Any", dist.ReduceOp.SUM)
            summing.reduceOp, summing.timeout = sum_op, opts.timeout  # ReduceOp's stub type
            opts = summing
        modes, size = modes or _CallerModes(), self.size()

        def divide(works: list[torch.Tensor]) -> None:
            with modes:
                for tensor in works:
                    _divide(tensor, size)

        return _on_contiguous(
            tensors, lambda works: self.gloo.allreduce(works, opts), divide if divided else None
        )

    def _promote(self, tensor: torch.Tensor, caller: Any) -> None:
        """Move ``tensor``'s storage into this rank's pool if it is DDP's bucket, seen
        before (:mod:`accel.comm._promote`); DDP has waited for its previous reduction."""
        spanning = spanning_of(self)
        shm = spanning.local_shm if spanning is not None else segment_of(self)
        if shm is not None:
            self.promotions.consider(tensor, caller, shm)


def _on_contiguous(
    tensors: list[torch.Tensor],
    launch: Callable[[list[torch.Tensor]], Any],
    then: Callable[[list[torch.Tensor]], None] | None = None,
) -> Any:
    """``launch`` (a gloo collective) on ``tensors``, each with gaps in its memory (a
    ``[::2]`` view) replaced by a contiguous copy written back once it ends: gloo takes a
    tensor's memory as it lies, so it would sum the gaps and write over them. ``then``
    runs on the results before they are written back. ``ValueError`` before anything
    moves for a tensor whose elements share memory."""
    works = [contiguous_work(tensor) for tensor in tensors]
    copied = any(work is not tensor for work, tensor in zip(works, tensors, strict=True))
    if not copied and then is None:
        return launch(tensors)
    work = launch(works)

    def finish(done: torch.futures.Future[list[torch.Tensor]]) -> list[torch.Tensor]:
        done.value()  # raises gloo's failure
        if then is not None:
            then(works)
        for tensor, result in zip(tensors, works, strict=True):
            if result is not tensor:
                write_back(tensor, result)
        return tensors

    return _QueuedWork(work.get_future().then(finish))


def _averages(op: Any, tensor: torch.Tensor) -> bool:
    """Whether ``op`` is ``AVG`` on a real tensor (not ``bool``): a sum, divided by the
    group size here (gloo's own ``AVG`` refuses integer tensors)."""
    return bool(op == dist.ReduceOp.AVG) and not tensor.is_complex() and tensor.dtype != torch.bool


def _divide(tensor: torch.Tensor, size: int) -> None:
    """``tensor`` /= ``size`` in place; an integer tensor's quotient truncated toward zero
    (NCCL's integer ``AVG``, and Lightning's own division of a gloo sum)."""
    if tensor.is_floating_point():
        tensor.div_(size)
    else:
        tensor.div_(size, rounding_mode="trunc")


def _refuse_nccl_only_ops(*arguments: Any) -> None:
    """A ``ReduceOp.PREMUL_SUM`` in a call's options (any of ``arguments``), refused in
    accel's words: gloo, which would run it, refuses it as "with Gloo", a backend the
    caller never named."""
    for value in arguments:
        op = getattr(value, "reduceOp", None)
        if op is not None and op == dist.ReduceOp.PREMUL_SUM:
            raise ValueError(
                'ReduceOp.PREMUL_SUM is NCCL\'s alone; the "accel" backend takes SUM, AVG, '
                "PRODUCT, MIN, MAX, BAND, BOR and BXOR (scale the tensor, then SUM)"
            )


class _CallerModes:
    """The calling thread's grad and inference modes, to update its tensors under on
    another thread (an in-place update of an inference tensor is refused outside inference
    mode)."""

    def __init__(self) -> None:
        self.grad = torch.is_grad_enabled()
        self.inference = torch.is_inference_mode_enabled()

    def __enter__(self) -> None:
        self._modes = contextlib.ExitStack()
        self._modes.enter_context(torch.inference_mode(self.inference))
        self._modes.enter_context(torch.set_grad_enabled(self.grad))

    def __exit__(self, *exc_info: object) -> None:
        self._modes.close()


class _Failure:
    """A failed reduction's error, carried as the outcome future's value."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


def _raise_failure(
    outcome: torch.futures.Future[list[torch.Tensor] | _Failure],
) -> list[torch.Tensor]:
    """The reduced tensors, or the failure raised. Raised inside a ``then`` callback, the
    error becomes the chained future's error at the C++ level, where DDP's reducer reads
    it and raises in ``backward()``. (``Future.set_exception`` would not do: it stores the
    exception as the future's *value*, which C++ takes for a result; DDP's reducer then
    reads tensors out of an exception object and the process crashes.)"""
    value = outcome.value()
    if isinstance(value, _Failure):
        raise value.error
    return value


# Every other collective is gloo's, after the reductions queued before it. Generated, since
# each is the same two lines (torch calls some positionally, some with keywords).
_GLOO_COLLECTIVES = (
    "allreduce_coalesced", "allgather", "allgather_coalesced", "reduce", "reduce_scatter",
    "gather", "scatter", "alltoall",
    "alltoall_base", "all_to_all_single", "send", "recv", "recv_anysource",
)  # fmt: skip


# torch's newer names for what gloo's backend calls otherwise.
_GLOO_NAMES = {
    "all_to_all_single": "alltoall_base",
}


# Point-to-point calls are not ordered against collectives (gloo runs them beside its
# collectives, matched by tag): waiting for the queued reductions first would deadlock a
# rank that receives while its async all-reduce waits for the sender, which only joins
# that all-reduce once its send was received (pipeline parallelism beside DDP).
_POINT_TO_POINT = frozenset({"send", "recv", "recv_anysource"})


def _delegate(name: str) -> Any:
    target = _GLOO_NAMES.get(name, name)

    def collective(self: AccelProcessGroup, *args: Any, **kwargs: Any) -> Any:
        if name in _POINT_TO_POINT:
            self.raise_if_failed()
        else:
            _refuse_nccl_only_ops(*args, *kwargs.values())
            self.wait_queued()
        return getattr(self.gloo, target)(*args, **kwargs)

    collective.__name__ = collective.__qualname__ = name
    collective.__doc__ = (
        f"gloo's ``{name}``, beside the queued reductions (not after them)."
        if name in _POINT_TO_POINT
        else f"gloo's ``{name}``, after the reductions queued before it."
    )
    return collective


for _name in _GLOO_COLLECTIVES:
    setattr(AccelProcessGroup, _name, _delegate(_name))


class _PooledBackend:
    """A group's gloo backend as torch's Python code asks for it (``group._get_backend``),
    with the allocation hook of torch's ``Backend`` answered: FSDP2's
    ``set_allocate_memory_from_process_group_for_comm(True)`` asks it for each all-gather
    and reduce-scatter buffer (``ProcessGroupAllocMixin``), which then comes from the
    group's pool, where the ``"accel"`` backend's collectives go straight between the
    ranks' buffers (an ordinary tensor where the pool has no room). Every rank asks for
    the same buffers in the same order, as :func:`accel.comm.try_shared_empty` needs."""

    def __init__(self, group: AccelProcessGroup) -> None:
        self._group = group

    def __getattr__(self, name: str) -> Any:
        return getattr(self._group.gloo, name)

    def supports_tensor_alloc(self, device: torch.device) -> bool:
        """Whether buffers on ``device`` come from the pool: on the CPU.

        Args:
            device: Where the buffer goes.

        Returns:
            ``True`` for the CPU.
        """
        return torch.device(device).type == "cpu"

    def allocate_tensor(self, size: int, *, dtype: torch.dtype, device: torch.device) -> Any:
        """A one-dimensional buffer of ``size`` elements, in the pool where it has room.

        Args:
            size: The number of elements.
            dtype: The element type.
            device: Where the buffer goes (the CPU: see :meth:`supports_tensor_alloc`).

        Returns:
            An uninitialised tensor.
        """
        pooled = comm.try_shared_empty(size, dtype=dtype, group=self._group)
        return pooled if pooled is not None else torch.empty(size, dtype=dtype, device=device)


_live: weakref.WeakSet[AccelProcessGroup] = weakref.WeakSet()


def live_groups() -> list[AccelProcessGroup]:
    """The "accel" process groups of this process not shut down yet."""
    return [group for group in list(_live) if not group._closed]  # pyright: ignore[reportPrivateUsage]


@atexit.register
def _shutdown_all() -> None:
    for group in list(_live):
        with contextlib.suppress(Exception):  # exiting: a failed shutdown changes nothing
            group.shutdown()


def _create(store: Store, rank: int, size: int, timeout: timedelta) -> AccelProcessGroup:
    return AccelProcessGroup(store, rank, size, timeout)


register_group_owner(AccelProcessGroup)


def register() -> None:
    """Register ``"accel"`` with torch.distributed (idempotent; done on import)."""
    backend: Any = dist.Backend  # register_backend is untyped in torch's stubs
    if BACKEND_NAME.upper() not in backend._plugins:
        backend.register_backend(BACKEND_NAME, _create, devices=["cpu"])


def set_default_backend(device_type: str, backend: str | None) -> str | None:
    """Make ``backend`` torch.distributed's default for tensors of ``device_type``.

    torch keeps one process-wide map from device type to backend
    (``torch.distributed.Backend.default_device_backend_map``); ``init_process_group()``
    reads it when no backend is named (for ``device_id=`` and for the machine's own
    accelerator), and so do frameworks that choose a backend per device, such as
    Lightning's DDP.

    Args:
        device_type: A torch device type, e.g. ``"cpu"``.
        backend: A backend name, or a per-device string as ``init_process_group`` takes
            it (``"cpu:accel,npu:hccl"``, which the ``device_id=`` path and Lightning
            accept; torch's argument-free default needs a plain name). ``None`` removes
            the entry.

    Returns:
        The entry it replaced (``None`` if there was none), so a caller can put it back.

    Raises:
        ValueError: A backend named is not registered with torch.distributed, or a plain
            name does not handle ``device_type`` (for backends that declare their devices).
    """
    table = dist.Backend.default_device_backend_map
    previous = table.get(device_type)
    if backend is None:
        table.pop(device_type, None)
        return previous
    registered: list[str] = dist.Backend.backend_list
    pairs = [pair.partition(":") for pair in backend.lower().split(",")]
    names = [name if sep else device for device, sep, name in pairs]
    unknown = [name for name in names if name not in registered]
    if unknown or any(bool(sep) != (":" in backend) for _, sep, _ in pairs):
        raise ValueError(
            f"set_default_backend: backend {backend!r} for device type {device_type!r}: "
            f"expected a registered torch.distributed backend ({sorted(registered)}) or "
            "'device:backend' pairs of them separated by commas"
        )
    if ":" not in backend:
        devices = dist.Backend.backend_capability.get(names[0])
        if devices is not None and device_type not in devices:
            raise ValueError(
                f"set_default_backend: backend {backend!r} does not handle device type "
                f"{device_type!r}; it handles {devices} (name it per device: "
                f"'{device_type}:{names[0]}')"
            )
    table[device_type] = backend.lower()
    return previous


def make_default() -> str | None:
    """Make ``"accel"`` the default torch.distributed backend for CPU tensors (opt-in).

    After it, ``init_process_group()`` with no backend on a machine whose torch
    accelerator is the CPU, ``init_process_group(device_id=torch.device("cpu"))`` and
    frameworks that read torch's device-to-backend map (Lightning's DDP on the CPU) use
    accel's shared-memory backend for CPU tensors; other device types keep theirs.

    Returns:
        The previous CPU default (``"gloo"`` in a fresh process), for
        ``set_default_backend("cpu", previous)``.
    """
    register()
    return set_default_backend("cpu", BACKEND_NAME)


register()
