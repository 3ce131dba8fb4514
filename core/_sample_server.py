"""The sample process: it runs a chain of per-sample CPU operators for samples it is sent.

Run by ``_ipc`` (``python -I -S dlpipe/_ipc/boot.py``) with the pipeline's module search path.
The pipeline's side is ``_sample_processes.py``; the executor decides what runs here.

Why: the CPU stage's workers are threads of one process, and an operator that is a chain of
numpy calls on small arrays (the audio chain: decode, resample, ``nonsilent_region``, slice)
holds the GIL between the calls, so sixteen threads run little faster than one. In processes
of their own those chains run side by side, as DALI's C++ workers do (BENCHMARKS.md, "Speech:
per-sample chains in processes").

Messages:

* :class:`Chain` (a notification): the operators of a chain, pickled once (an operator whose
  ``process_safe`` is True pickles with everything its ``run_sample`` needs).
* :class:`Samples` -> :class:`SamplesDone`: run the chain for each sample, from the values it
  takes from outside the chain and each step's parameters (drawn by the pipeline), and send
  back the values the rest of the graph takes. The first failing sample ends the request; a
  sample an operator skips (``on_error="skip"``) is reported and the others go on.
* ``_ipc.regions.Map`` -> bool, ``Unmap`` (a notification): a read process's slot, mapped
  here so that the samples' encoded bytes are read where the read process put them.

On the pipe, a :class:`Samples` request is its ``wire()`` tuple, and the reply a tuple
``(data, spans, shared)`` (:class:`Packed`), or ``(reply, None, False)`` when its arrays did
not fit the memfd; the reply itself is ``SamplesDone.wire()``'s tuple. Pickling a dataclass
took some 5 us each way, a tuple under 1: some 25 us of the pipeline's threads a request, with
the GIL held (``_sample_processes.requests``).

Arrays do not travel on the pipe, either way: pickled out of band (protocol 5), their bytes go
into the process's memfd (shared with the pipeline; each request in flight has its own part
for the samples sent and one for the reply, ``_sample_processes.regions``), and the pipe
carries the rest of the pickle and where each buffer lies (:class:`Packed`). A pipe moves 64
KiB a read, and every read is a GIL hand-over in the pipeline's process: 16 MB of audio a batch
were some 250 of them; and a request larger than the pipe (1 MiB) kept the sending thread
waiting until the process had finished its previous request and read it all (BENCHMARKS.md,
"Speech: per-sample chains in processes", "The samples' arrays through shared memory").
Arrays that are views of a read process's slot (``readers.file``'s bytes) are not copied at
all: the request says where they lie (``Samples.views``) and the process reads them there, as
the decode processes do (``decoders/_decode_server.py``).
"""

from __future__ import annotations

import io
import pickle
import time
import traceback
from dataclasses import dataclass

import numpy as np

from ._ipc.regions import Map, Unmap, open_region
from .errors import SampleSkipped


@dataclass(frozen=True)
class Step:
    """One operator of a chain: ``op.run_sample`` reads the values keyed ``inputs`` and
    ``args`` (argument name, key) and stores its outputs under the keys ``outputs``."""

    op: object
    inputs: tuple[int, ...]
    args: tuple[tuple[str, int], ...]
    outputs: tuple[int, ...]


@dataclass(frozen=True)
class Chain:
    """Define chain ``key``: ``steps`` is the pickle of a list of :class:`Step`."""

    key: int
    steps: bytes


@dataclass(frozen=True)
class Samples:
    """Run chain ``key`` for ``items``: (sample index, {key: value} of the values it takes
    from outside the chain, one parameter per step), or the same :func:`pack`-ed into the
    memfd. ``want``: the keys to send back; ``region``: (offset, size) of the part of the
    memfd the reply's arrays may use (each request in flight has its own); ``upload``: a
    span of the upload area to put them in first, if they fit (``_upload_area.py``).
    ``views``: values left out of ``items`` that lie in a region this process mapped
    (``_ipc.regions.Map``), ``(value key, region key, offsets, sizes)``, one offset and size per
    item, in order: a read process's slot, whose bytes are read from there, not copied."""

    key: int
    items: list
    want: tuple[int, ...]
    region: tuple[int, int]
    upload: tuple[int, int] | None = None
    views: tuple = ()

    def wire(self) -> tuple:
        """The message as the pipeline sends it: a plain tuple, ``items`` flattened (pickle
        takes some 5 us a dataclass, each way, a tuple well under 1; see the module doc)."""
        items, spans = self.items, None
        if type(items) is Packed:
            items, spans = items.data, items.spans
        return (self.key, items, spans, self.want, self.region, self.upload, self.views)

    @classmethod
    def from_wire(cls, message: tuple) -> Samples:
        key, items, spans, want, region, upload, views = message
        return cls(
            key, items if spans is None else Packed(items, spans), want, region, upload, views
        )


@dataclass(frozen=True)
class SamplesDone:
    """``results``: (sample index, the values of ``want``) of every sample that finished;
    ``skipped``: (sample index, step, message) of those an operator skipped; ``failed``:
    (sample index, step, exception or None, type name, message, traceback) of the first
    failure, or None; ``seconds``/``counts``: per step, for the profiler."""

    results: list
    skipped: list
    failed: tuple | None
    seconds: list
    counts: list

    def wire(self) -> tuple:
        """As a plain tuple (``SamplesDone(*t)`` again), which unpickles without a class."""
        return (self.results, self.skipped, self.failed, self.seconds, self.counts)


@dataclass(frozen=True)
class Packed:
    """A reply whose buffers lie in the memfd (``shared``: in the upload area): ``data`` is its
    pickle (protocol 5) less the buffers, ``spans`` the (offset, size) of each buffer, in the
    pickle's order."""

    data: bytes
    spans: list
    shared: bool = False


def pack(
    reply: object, memory, region: tuple[int, int] | None = None, plain: bool = False
) -> object:
    """``reply`` as :class:`Packed` with its buffers written into ``memory`` (an mmap), within
    ``region`` (offset, size; all of it if None), or ``reply`` itself when they do not fit.
    ``plain``: arrays pickled as a plain ``np.ndarray(shape, dtype, buffer)`` call
    (:func:`_plain_array`), which the pipeline unpickles in half the time."""
    start, size = region if region is not None else (0, len(memory))
    buffers: list[pickle.PickleBuffer] = []
    if plain:
        out = io.BytesIO()
        pickler = pickle.Pickler(out, protocol=5, buffer_callback=buffers.append)
        pickler.dispatch_table = _PLAIN
        pickler.dump(reply)
        data = out.getvalue()
    else:
        data = pickle.dumps(reply, protocol=5, buffer_callback=buffers.append)
    spans, pos = [], start
    for buf in buffers:
        raw = buf.raw()
        end = pos + raw.nbytes
        if end > start + size:
            return reply
        _copy(np.frombuffer(memory, np.uint8, raw.nbytes, pos), raw)
        spans.append((pos, raw.nbytes))
        pos = (end + 63) & ~63
    return Packed(data, spans)


def _plain_array(a: np.ndarray):
    """How a reply's array pickles (a ``dispatch_table`` reducer): a C-contiguous array of a
    plain dtype as ``np.ndarray(shape, dtype string, its buffer out of band)``, which
    unpickles in one C call; numpy's own reduction (``_frombuffer``: a Python function, and
    the dtype pickled as an object) took twice as long, about 6 us an array, on the back
    thread of the CPU stage for every sample of a batch."""
    dtype = a.dtype
    if a.flags.c_contiguous and dtype.kind in _PLAIN_KINDS and dtype.fields is None:
        if dtype.metadata is None:
            return np.ndarray, (a.shape, dtype.str, pickle.PickleBuffer(a))
    return a.__reduce_ex__(5)


_PLAIN_KINDS = "biufc"  # numbers: a dtype string gives them back exactly, and they export buffers
_PLAIN = {np.ndarray: _plain_array}  # exact ndarrays only: a subclass pickles as its own


def unpack(reply: object, memory, alloc=None) -> object:
    """The reply :func:`pack` made, its buffers copied out of ``memory`` (writable arrays that
    outlive the next request). numpy copies them: it lets the GIL go while it copies, where
    ``bytes``/``bytearray`` hold it for 16 MB a batch of audio.

    ``alloc(nbytes)``: where the buffers go, one uint8 block for all of them (64-byte aligned
    in it), instead of an array each: the pipeline passes pinned host memory for values that
    only a ``.gpu()`` copy takes, which then uploads them from there (``operators/_copy.py``)."""
    if not isinstance(reply, Packed):
        return reply
    buffers = []
    if alloc is None:
        for o, n in reply.spans:
            buf = np.empty(n, np.uint8)
            _copy(buf, np.frombuffer(memory, np.uint8, n, o))
            buffers.append(buf)
    elif reply.spans:
        # laid out as pack laid them out from the region's start (64-byte aligned): one copy
        # for them all, the padding between them included, where the reply's spans agree
        start, pos, same = reply.spans[0][0], 0, True
        for o, n in reply.spans:
            same = same and o - start == pos
            buffers.append((pos, n))
            end = pos + n
            pos = (end + 63) & ~63
        block = alloc(pos)
        if same:
            _copy(block[:end], np.frombuffer(memory, np.uint8, end, start))
        else:
            for (at, n), (o, _) in zip(buffers, reply.spans, strict=True):
                _copy(block[at : at + n], np.frombuffer(memory, np.uint8, n, o))
        buffers = [block[at : at + n] for at, n in buffers]
    return pickle.loads(reply.data, buffers=buffers)


def _copy(dst, src) -> None:
    """``dst[...] = src`` for byte buffers, by numpy: it lets the GIL go while it copies."""
    dst[...] = np.frombuffer(src, np.uint8)


class Server:
    """The chains this process knows, by key, the memfd its replies' buffers go to, and the
    upload area (``uploads_fd``, shared by all the processes) where they go first when a
    request gives a span of it."""

    def __init__(
        self,
        fd: int,
        size: int,
        malloc_tuning: bool = False,
        uploads_fd: int = -1,
        uploads_size: int = 0,
    ) -> None:
        import mmap

        from ._malloc import tune_malloc

        tune_malloc(malloc_tuning)  # as in the pipeline's process: the chains allocate as much
        self.chains: dict[int, list[Step]] = {}
        self.regions: dict[tuple, np.ndarray] = {}  # key -> another process's region, mapped
        self.memory = mmap.mmap(fd, size)
        self.uploads = mmap.mmap(uploads_fd, uploads_size) if uploads_fd >= 0 else None

    def handle(self, msg):
        if isinstance(msg, Chain):
            self.chains[msg.key] = pickle.loads(msg.steps)
            return None
        if isinstance(msg, Map):
            memory = open_region(msg.path, msg.offset, msg.size, msg.inode)
            if memory is not None:
                self.regions[msg.key] = np.frombuffer(memory, np.uint8)
            return memory is not None
        if isinstance(msg, Unmap):  # (unmapped once no value views it)
            self.regions.pop(msg.key, None)
            return None
        items = unpack(msg.items, self.memory)  # copied out: outputs may be views of inputs
        for k, key, offsets, sizes in msg.views:  # the pipeline holds them until the reply
            data = self.regions[key]
            for (_, values, _), o, n in zip(items, offsets, sizes, strict=True):
                values[k] = data[o : o + n]
        done = self.run(self.chains[msg.key], items, msg.want).wire()
        if msg.upload is not None and self.uploads is not None:
            out = pack(done, self.uploads, msg.upload, plain=True)
            if isinstance(out, Packed):
                return Packed(out.data, out.spans, True)
        return pack(done, self.memory, msg.region, plain=True)

    @staticmethod
    def run(steps: list[Step], items: list, want: tuple[int, ...]) -> SamplesDone:
        seconds, counts = [0.0] * len(steps), [0] * len(steps)
        results, skipped = [], []
        for index, values, params in items:
            for s, step in enumerate(steps):
                start = time.perf_counter()
                try:
                    out = step.op.run_sample(
                        tuple(values[k] for k in step.inputs),
                        {name: values[k] for name, k in step.args},
                        params[s],
                    )
                except SampleSkipped as e:
                    skipped.append((index, s, str(e)))
                    break
                except Exception as e:
                    failed = (index, s, _portable(e), type(e).__name__, str(e))
                    failed += ("".join(traceback.format_exception(e)),)
                    return SamplesDone(results, skipped, failed, seconds, counts)
                seconds[s] += time.perf_counter() - start
                counts[s] += 1
                if len(step.outputs) == 1:
                    values[step.outputs[0]] = out[0] if isinstance(out, tuple) else out
                else:
                    for k, v in zip(step.outputs, out, strict=True):
                        values[k] = v
            else:
                results.append((index, [values[k] for k in want]))
        return SamplesDone(results, skipped, None, seconds, counts)


def _portable(exc: Exception) -> Exception | None:
    """``exc`` if it survives a pickle round trip (the pipeline raises it as its own), else
    None (the pipeline raises a PipelineError with its type name and message)."""
    try:
        back = pickle.loads(pickle.dumps(exc))
    except Exception:
        return None
    return back if type(back) is type(exc) and str(back) == str(exc) else None


def handler(
    fd: int, size: int, malloc_tuning: bool = False, uploads_fd: int = -1, uploads_size: int = 0
):
    """The ``handle`` function of a sample server whose replies' buffers go to the memfd
    ``fd`` of ``size`` bytes (see ``_ipc.server``), or to the upload area ``uploads_fd`` where
    a request says so; ``malloc_tuning``: keep large blocks in malloc's heap, as the
    pipeline's process does (``_malloc.py``). Requests and replies of samples travel as plain
    tuples (see the module doc); the rest as the messages themselves."""
    server = Server(fd, size, malloc_tuning, uploads_fd, uploads_size)

    def handle(message):
        if type(message) is not tuple:
            return server.handle(message)
        reply = server.handle(Samples.from_wire(message))
        if type(reply) is Packed:
            return (reply.data, reply.spans, reply.shared)
        return (reply, None, False)

    return handle
