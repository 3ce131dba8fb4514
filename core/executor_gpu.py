"""The GPU stage of the executor: mixed then GPU operators, batch-wise, on the pipeline's stream.

Two halves, each with one ``run_batch`` call per operator for the whole batch:

* the *mixed* operators (the GPU decoders; they take CPU inputs only, so they can all run
  first) run in ``lanes`` threads, each with its own CUDA stream and its own decoder instance,
  so up to ``lanes`` iterations decode at once. A decoder call is mostly host work (parsing,
  Huffman decoding, submitting to the hardware engines) with the GIL released; two lanes keep
  the hardware engines fed while one lane is on the host. A CUDA event ends each lane's part.
* the *GPU* operators run in graph order on the pipeline's own non-blocking stream, which first
  waits (on the device, not the host) for the lane's event. With no lanes (``max_streams=1``)
  the mixed operators run here too. Every other graph gets lanes, whatever its mixed operators
  are (decoders, ``.gpu()`` copies of labels or of CPU-processed images, a GPU
  ``external_source``, the video reader): one that cannot run in several lanes at once runs
  under a lock of its own, while the others overlap around it.

A CUDA event recorded after the last operator marks the iteration's outputs ready; the host
never waits for the GPU here, so the stages and the GPU overlap. The lane's stream then waits
for that event, so whatever the lane allocated for the iteration (decoded images) is freed, and
reused, only after the GPU operators read it. Each iteration allocates its outputs afresh
(CuPy's pool recycles freed blocks in stream order), so a batch handed out is never overwritten
while someone holds it, and memory stays flat from one epoch to the next.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from time import perf_counter

from ._conditionals import ABSENT, Absent
from ._gpu_branches import BranchPlan, node_holders
from .errors import DeviceError, PipelineError, require_extra
from .executor import Workspace, _sample_error, cpu_output, replace_skipped
from .graph import DataNode, LaneContext, OpNode, Skipped

_IDLE_STREAMS: dict[int, list] = {}  # lane streams of collected GPU stages, by device


def check_gpu_inputs(gpu_ops: Sequence[OpNode]) -> None:
    """A GPU operator takes GPU inputs only (DALI's rule), but for those it declares CPU
    inputs (``Operator.cpu_inputs``); say how to fix the graph."""
    for node in gpu_ops:
        for i, x in enumerate(node.inputs):
            if node.device == "gpu" and x.device != "gpu" and i not in node.op.cpu_inputs:
                raise PipelineError(
                    f"{node.op.schema} (name {node.name!r}) runs on the GPU but its input "
                    f"{x.name!r} is a CPU node: move that node to the GPU with .gpu() first, "
                    "or run the operator on the CPU"
                )


def _node_step(node: OpNode, serial) -> tuple:
    """What the GPU stage's loop reads of ``node`` every iteration, worked out once (the graph
    does not change after the build): (operator, input nodes, argument (name, node) pairs,
    whether it runs through the branch plan (it is in a branch, or reads the branches' values),
    output nodes, the profiler's (schema, device), where its inputs are held (``node_holders``)
    or None outside the branches, ``serial`` (the node's lock or None), its one output node
    or None)."""
    op = node.op
    branched = node.scope is not None or bool(getattr(op, "reads_child_scopes", False))
    outputs = tuple(node.outputs)
    return (
        op,
        tuple(node.inputs),
        tuple(node.arg_nodes.items()),
        branched,
        outputs,
        (op.schema, op.device),
        node_holders(node) if branched else None,
        serial,
        outputs[0] if len(outputs) == 1 else None,
    )


class GpuStage:
    """Runs ``gpu_ops`` (mixed and GPU operator nodes, topologically ordered) per iteration.

    Args:
        device_id: the GPU; None means the current device.
        gpu_ops: the mixed/GPU operator nodes.
        outputs: the pipeline outputs (CPU outputs are passed through as TensorListCPU).
        layouts: layout per DataNode.
        lanes: threads (each with its own stream) running the mixed operators of different
            iterations at once; 0 runs them on the GPU stage's thread and stream. Every graph
            with mixed operators gets them; an operator that does not set
            ``concurrent_batches`` runs under a lock of its own (one lane at a time).
        num_threads: the pipeline's CPU threads, shared by the decoders that run at once (each
            gets ``num_threads // lanes`` for its own CPU work: parsing, Huffman decoding).

    Raises:
        MissingExtraError: CuPy is not installed.
        DeviceError: no GPU, or ``device_id`` does not name one.
    """

    def __init__(
        self,
        device_id: int | None,
        gpu_ops: Sequence[OpNode],
        outputs: Sequence[DataNode],
        layouts: dict[DataNode, str],
        lanes: int = 0,
        num_threads: int = 0,
    ):
        check_gpu_inputs(gpu_ops)
        cupy = require_extra("cupy", "cuda13")
        try:
            count = cupy.cuda.runtime.getDeviceCount()
        except Exception as e:  # no driver, no device
            raise DeviceError(
                f"the pipeline has GPU operators but no CUDA GPU is usable: {e}"
            ) from e
        if count < 1:
            raise DeviceError("the pipeline has GPU operators but no CUDA GPU is present")
        if device_id is None:
            device_id = cupy.cuda.runtime.getDevice()
        if not 0 <= int(device_id) < count:
            raise DeviceError(f"device_id={device_id} is not a GPU of this machine ({count} found)")
        self.device_id = int(device_id)
        self._cupy = cupy
        from .kernels import Arena, current
        from .tensors_gpu import SampleList, TensorListGPU

        self._SampleList = SampleList
        self._current = current  # the stage's stream, current and known so to the launchers
        self._TensorListGPU = TensorListGPU
        with cupy.cuda.Device(self.device_id):
            self.stream = cupy.cuda.Stream(non_blocking=True)
        self._arena = Arena(self.stream)  # each batch's uploads, cut from one buffer
        self.ops = list(gpu_ops)
        self.mixed_ops = [n for n in self.ops if n.device == "mixed"]
        self.gpu_ops = [n for n in self.ops if n.device != "mixed"]
        self.lanes = max(0, int(lanes)) if self.mixed_ops else 0
        # A mixed operator that may not run in several lanes at once still runs in the lanes,
        # one call at a time: the others (decoders, copies) keep overlapping around it.
        self._serial = {
            id(n): threading.Lock() for n in self.mixed_ops if not n.op.concurrent_batches
        }
        out_ids = {id(x) for x in outputs}
        for node in self.mixed_ops:
            node.op.prepare_gpu(
                LaneContext(
                    device_id=self.device_id,
                    lanes=max(1, self.lanes),
                    # Each decoder running at once gets its share of the pipeline's threads:
                    # with all cores each (nvImageCodec's default), two lanes' decoders
                    # oversubscribed a 16-core H100 and the benchmarks ran 5-20% slower
                    # (BENCHMARKS.md).
                    cpu_threads=max(1, num_threads // max(1, self.lanes)) if num_threads else 0,
                    reuse_outputs=not any(id(dn) in out_ids for dn in node.outputs),
                )
            )
        self._lane = threading.local()  # each lane thread's stream
        # Lane streams come from _IDLE_STREAMS and go back there when this stage is collected:
        # what a lane decoded (a pipeline output held after close()) is freed in its stream's
        # order, so the stream is never destroyed.
        self._lane_streams: list = []
        weakref.finalize(
            self, _IDLE_STREAMS.setdefault(self.device_id, []).extend, self._lane_streams
        )
        self.outputs = list(outputs)
        self.layouts = layouts
        self.profiler = None  # set by the executor

    def run_mixed(self, ws: Workspace) -> Workspace:
        """The mixed operators of one iteration, on the calling lane thread's own stream; the
        workspace comes back with ``ws.gpu`` = (lane event, lane stream)."""
        cupy = self._cupy
        with cupy.cuda.Device(self.device_id):
            stream = getattr(self._lane, "stream", None)
            if stream is None:
                try:
                    stream = _IDLE_STREAMS.setdefault(self.device_id, []).pop()
                except IndexError:
                    stream = cupy.cuda.Stream(non_blocking=True)
                self._lane.stream = stream
                self._lane_streams.append(stream)
            with stream:
                self._run_ops(self.mixed_ops, ws, stream)
                event = cupy.cuda.Event(block=False, disable_timing=True)
                event.record(stream)
        ws.gpu = (event, stream)
        return ws

    def _run_ops(self, nodes: Sequence[OpNode], ws: Workspace, stream) -> None:
        # conditionals: each operator runs on its branch's samples only, and its outputs are
        # held compact, for those samples (_gpu_branches.py)
        plan = BranchPlan(ws.values, ws.batch_size)
        timed: list = []  # (name, start, end, samples, info) of each call, for the profiler
        try:
            self._run_nodes(nodes, ws, stream, plan, timed)
        finally:
            if timed and self.profiler is not None:  # host time: enqueueing, plus decode calls
                self.profiler.add_op_calls(timed, "gpu operator (host)")

    def _run_nodes(self, nodes: Sequence[OpNode], ws: Workspace, stream, plan, timed: list):
        """Run ``nodes`` on ``plan``'s samples; each call's host time goes to ``timed`` (when
        a profiler reads it).

        What a node reads and where its inputs are held never change from one iteration to
        the next: that is worked out once per node (:func:`_node_step`), and the loop does
        only the dictionary reads, the operator call and the stores. A node outside every
        branch that reads no branch's values skips the plan altogether."""
        n = ws.batch_size
        values, all_params = ws.values, ws.params
        profiled = self.profiler is not None
        sample_list = self._SampleList
        coerce = sample_list.coerce
        steps = self.__dict__.setdefault("_steps", {})  # node -> _node_step(node)
        for node in nodes:
            step = steps.get(node)
            if step is None:
                step = steps[node] = _node_step(node, self._serial.get(id(node)))
            op, in_nodes, arg_items, branched, outputs, info, holders, serial, single = step
            # Drawn on the CPU stage (in graph order, with the CPU operators' draws), so the
            # checkpoint snapshot of an iteration covers the GPU operators' RNGs too.
            params = all_params[node]
            inputs = [values[x] for x in in_nodes]
            args = {k: values[x] for k, x in arg_items} if arg_items else {}
            idx = None
            if branched:
                idx = plan.samples(node, inputs)
                if idx is not None and not len(idx):  # no sample took this branch
                    for dn in outputs:
                        values[dn] = ABSENT
                    continue
                inputs, args, params = plan.gather(node, inputs, args, params, idx, holders)
            start = perf_counter() if profiled else 0.0
            try:
                if serial is None:
                    outs = op.run_batch(inputs, args, params, stream)
                else:
                    with serial:
                        outs = op.run_batch(inputs, args, params, stream)
            except BaseException as e:
                i = int(getattr(e, "sample_index", 0))
                i = int(idx[i]) if idx is not None and 0 <= i < len(idx) else i
                raise _sample_error(e, node, i, ws) from None
            if profiled:
                timed.append((node.name, start, perf_counter(), n, info))
            dropped = None
            if isinstance(outs, Skipped):  # on_error="skip": samples to replace
                outs, dropped = outs.outputs, outs.samples
            if single is not None:
                val = outs[0] if isinstance(outs, tuple) else outs
                values[single] = (
                    val if type(val) is sample_list or isinstance(val, Absent) else coerce(val)
                )
            elif not isinstance(outs, tuple) or len(outs) != len(outputs):
                raise RuntimeError(
                    f"{op.schema}.run_batch returned {type(outs).__name__}; expected a tuple "
                    f"of {len(outputs)} outputs"
                )
            else:
                for dn, val in zip(outputs, outs, strict=True):
                    values[dn] = (
                        val if type(val) is sample_list or isinstance(val, Absent) else coerce(val)
                    )
            if dropped and idx is not None:
                dropped = {int(idx[i]): msg for i, msg in dropped.items()}
            if dropped:
                skipped = {i: (node, msg) for i, msg in dropped.items()}
                plan = plan.replace_skipped(ws, skipped, replace_skipped)

    def __call__(self, ws: Workspace) -> tuple:
        """The GPU operators (after the mixed ones: run here, or waited for on the device when
        a lane ran them), then the outputs."""
        cupy = self._cupy
        lane = ws.gpu
        with cupy.cuda.Device(self.device_id), self._current(self.stream, self._arena):
            if lane is None:
                self._run_ops(self.ops, ws, self.stream)
            else:
                self.stream.wait_event(lane[0])
                self._run_ops(self.gpu_ops, ws, self.stream)
            event = cupy.cuda.Event(block=False, disable_timing=True)
            event.record(self.stream)
            if lane is not None:  # the lane's buffers are freed after the GPU operators ran
                lane[1].wait_event(event)
        ws.gpu = event
        result = []
        plan = BranchPlan(ws.values, ws.batch_size)
        for x in self.outputs:
            layout = self.layouts.get(x, "")
            if x.device == "gpu":  # (an output made inside a branch is made whole)
                data = plan.whole(x, ws.values[x])
                result.append(self._TensorListGPU(data, layout, event, self.stream, ws.source_info))
            else:  # the batch array the CPU workers filled, as in a CPU-only pipeline
                result.append(cpu_output(ws, x, self.layouts))
        return tuple(result)
