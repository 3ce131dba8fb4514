"""Runtime options: the tuning knobs of the engine's runtime layer, in one object.

A pipeline takes one :class:`RuntimeOptions` (``Pipeline(..., runtime=RuntimeOptions(...))``,
a dlpipe extension; DALI has no such argument). Without one it takes
:meth:`RuntimeOptions.from_env`, which reads the ``DLPIPE_*`` environment variables once, when
the pipeline is constructed. Operators see the options in :meth:`Operator.prepare
<dlpipe.graph.Operator.prepare>` at build time, never by reading the environment themselves,
so two pipelines in one process can differ and a variable set after a pipeline was made does
not change it.

Example:
    >>> from dlpipe.options import RuntimeOptions
    >>> opts = RuntimeOptions(read_process=False)          # read files in the pipeline's process
    >>> opts.replace(decode_process=False).decode_process
    False
"""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass

# The environment variables from_env() reads, and the field each sets (all booleans: "0" off).
ENV = {
    "DLPIPE_READ_PROCESS": "read_process",
    "DLPIPE_DECODE_PROCESS": "decode_process",
    "DLPIPE_MALLOC_TUNING": "malloc_tuning",
    "DLPIPE_SAMPLE_PROCESSES": "sample_processes",
}
# The integer variables from_env() reads, and the field each sets.
ENV_INTS = {"DLPIPE_LANES": "lanes", "DLPIPE_UPLOAD_AREA_MB": "upload_area_mb"}


@dataclass(frozen=True)
class RuntimeOptions:
    """How the runtime layer runs a pipeline. Every field has a measured default.

    Attributes:
        read_process: ``readers.file`` (and ``io.file.read``) reads each batch in helper
            processes (Linux), so the reads run beside the pipeline's Python threads instead
            of waiting for the GIL (BENCHMARKS.md, "Read processes × threads").
        read_processes: how many read processes a reader starts; each reads a contiguous part
            of a batch.
        decode_process: each GPU decode lane decodes in a helper process of its own (Linux);
            nvImageCodec's binding takes the GIL once per sample (BENCHMARKS.md, "Where the
            decode ceiling is").
        idle_decode_processes: idle decode processes kept per GPU for the next pipeline.
        sample_processes: per-sample CPU operators that declare ``process_safe`` (the audio
            chain: decode, resampling, ``nonsilent_region``, slice) run in helper processes,
            one per thread up to the machine's cores (Linux, ``num_threads`` > 1): numpy
            chains on small arrays hold the GIL between calls, so threads barely run side by
            side (BENCHMARKS.md, "Speech: per-sample chains in processes").
        lanes: iterations whose mixed (decode) stage may run at once, each on its own CUDA
            stream; None picks the measured default (3 with decode processes where that
            leaves each lane's decoder at least 3 of ``num_threads``, else 2).
            ``Pipeline(max_streams=k)`` sets ``k - 1``, as DALI's argument does;
            ``DLPIPE_LANES`` sets it from the environment.
        decoded_spare: iterations decoded ahead of the GPU stage beyond one per lane: lanes
            finish out of order, and with none spare a lane that finished waits for the
            slowest (BENCHMARKS.md, "decoded ahead of the GPU stage").
        malloc_tuning: raise glibc's mmap/trim thresholds once per process, so per-sample
            buffers of megabytes reuse heap memory (``_malloc.py``).
        max_pixels: the image decoders' default ``max_pixels``: an image whose header claims
            more pixels (height x width) is an error naming the file, or skipped with
            ``on_error="skip"``, before any memory is taken. 2**28 (16384 x 16384) by default:
            far above any training image, far below what a 1 KB "decompression bomb" can
            claim (60000 x 60000 is 10 GB of RGB).
        skipped_history: how many records of skipped samples ``pipe.skipped()`` keeps (the
            most recent); the counts cover every skipped sample. 0 keeps counts only.
        gil_switch_interval: seconds; when set, a pipeline with a GPU stage sets the
            interpreter's ``sys.setswitchinterval`` to it at build (process-wide, and only if
            the interval is still Python's default, so a value the user chose stands). The
            pipeline's threads hand batches to each other and each hand-over waits for the
            GIL; a C call that re-takes the GIL (a CUDA launch, a decode reply) can wait a
            whole interval for a thread running Python; so does every torch call of the
            user's training loop. None (the default) leaves Python's 5 ms: 0.5 ms looked
            better in two dlpipe-only calls but lost 4 of 5 cells side by side with DALI
            (BENCHMARKS.md, "The GIL switch interval").
            ``DLPIPE_GIL_SWITCH_INTERVAL`` sets it from the environment (empty: None).
        upload_area_mb: the upload area of a pipeline's sample processes (``_upload_area.py``),
            MiB: replies that only a ``.gpu()`` copy takes (Jasper's trimmed audio) are
            written there by the processes and uploaded from where they lie, page-locked
            once (BENCHMARKS.md, "Jasper validation's audio into pinned memory"). 0: none
            (those replies are then unpacked into pinned blocks). ``DLPIPE_UPLOAD_AREA_MB``
            sets it from the environment.
    """

    read_process: bool = True
    read_processes: int = 4
    decode_process: bool = True
    idle_decode_processes: int = 4
    sample_processes: bool = True
    lanes: int | None = None
    decoded_spare: int = 2
    malloc_tuning: bool = True
    max_pixels: int = 2**28
    skipped_history: int = 1000
    gil_switch_interval: float | None = None
    upload_area_mb: int = 256

    def __post_init__(self) -> None:
        for name in (
            "read_processes",
            "idle_decode_processes",
            "decoded_spare",
            "max_pixels",
            "skipped_history",
            "upload_area_mb",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"RuntimeOptions: {name}={value!r} must be an int >= 0")
        if self.read_processes < 1:
            raise ValueError(f"RuntimeOptions: read_processes={self.read_processes} must be >= 1")
        if self.max_pixels < 1:
            raise ValueError(f"RuntimeOptions: max_pixels={self.max_pixels} must be >= 1")
        if self.lanes is not None and (
            not isinstance(self.lanes, int) or isinstance(self.lanes, bool) or self.lanes < 0
        ):
            raise ValueError(f"RuntimeOptions: lanes={self.lanes!r} must be None or an int >= 0")
        interval = self.gil_switch_interval
        if interval is not None and (
            isinstance(interval, bool) or not isinstance(interval, (int, float)) or interval <= 0
        ):
            raise ValueError(
                f"RuntimeOptions: gil_switch_interval={interval!r} must be None or seconds > 0"
            )

    @classmethod
    def from_env(cls, environ: dict | None = None) -> RuntimeOptions:
        """The defaults, with each ``DLPIPE_*`` variable of :data:`ENV` that is set to ``0``
        turning its feature off, each of :data:`ENV_INTS` setting its integer, and
        ``DLPIPE_GIL_SWITCH_INTERVAL`` (an empty value: None) setting the interval."""
        env = os.environ if environ is None else environ
        kw: dict = {field: env.get(var, "1") != "0" for var, field in ENV.items()}
        for var, field in ENV_INTS.items():
            value = env.get(var)
            if value is not None:
                try:
                    kw[field] = int(value)
                except ValueError:
                    raise ValueError(f"{var}={value!r} must be an integer") from None
        interval = env.get("DLPIPE_GIL_SWITCH_INTERVAL")
        if interval is not None:
            try:
                kw["gil_switch_interval"] = float(interval) if interval else None
            except ValueError:
                raise ValueError(
                    f"DLPIPE_GIL_SWITCH_INTERVAL={interval!r} must be seconds (e.g. 0.0005)"
                ) from None
        return cls(**kw)

    def replace(self, **changes) -> RuntimeOptions:
        """A copy with ``changes`` applied."""
        return dataclasses.replace(self, **changes)


PYTHON_SWITCH_INTERVAL = 0.005  # the interpreter's own default, in seconds


def set_switch_interval(interval: float | None) -> bool:
    """Apply a pipeline's ``gil_switch_interval``: ``sys.setswitchinterval(interval)`` when
    ``interval`` is set and the process still has Python's default (a value the user or an
    earlier pipeline set stands). True when it was set here."""
    if interval is None or abs(sys.getswitchinterval() - PYTHON_SWITCH_INTERVAL) > 1e-9:
        return False
    sys.setswitchinterval(interval)
    return True
