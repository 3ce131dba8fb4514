"""nvImageCodec calls shared by the mixed decoder (``_nvimgcodec.py``) and the decode server
(``_decode_server.py``): how a decoder is made, what it decodes to, and a batched decode.

It imports nothing but ``types`` (the ``nvidia.nvimgcodec`` module comes in as an argument), so
the decode server gets these without the CPU decoder's OpenCV and Pillow.
"""

from __future__ import annotations

from ..types import DALIImageType


def decoder_options(hybrid_huffman_threshold) -> str:
    """nvImageCodec's option string for the hybrid backend's Huffman threshold."""
    return f"nvjpeg_cuda_decoder:hybrid_huffman_threshold={int(hybrid_huffman_threshold)}"


def new_decoder(nvi, device_id: int, load: float, options: str, threads: int):
    """An nvImageCodec decoder: the hardware engines take the share ``load`` of a batch
    (none at 0), the hybrid CPU+GPU backend the rest, the CUDA backend whatever is left;
    ``threads`` CPU threads (0: nvImageCodec's default, every core)."""
    backends = []
    if load > 0:
        backends.append(nvi.Backend(nvi.BackendKind.HW_GPU_ONLY, load_hint=load))
    backends += [
        nvi.Backend(nvi.BackendKind.HYBRID_CPU_GPU, load_hint=1.0),
        nvi.Backend(nvi.BackendKind.GPU_ONLY, load_hint=1.0),
    ]
    kw = {"device_id": device_id, "max_num_cpu_threads": threads, "backends": backends}
    try:
        return nvi.Decoder(options=options, **kw)
    except Exception:  # an nvImageCodec without that option
        return nvi.Decoder(**kw)


def decode_params(nvi, output_type: DALIImageType):
    """nvImageCodec's DecodeParams for an ``output_type`` decoded on the GPU (RGB for
    ANY_DATA), EXIF orientation applied."""
    color, fmt = {
        DALIImageType.GRAY: (nvi.ColorSpec.GRAY, nvi.SampleFormat.I_Y),
        DALIImageType.BGR: (nvi.ColorSpec.SRGB, nvi.SampleFormat.I_BGR),
    }.get(output_type, (nvi.ColorSpec.SRGB, nvi.SampleFormat.I_RGB))
    return nvi.DecodeParams(apply_exif_orientation=True, color_spec=color, sample_format=fmt)


_DIRECT: list = [None]  # whether this nvImageCodec's decode() takes encoded arrays itself


def decode_blobs(nvi, decoder, blobs: list, params, stream_ptr: int, images=None) -> list:
    """nvImageCodec's batched decode of encoded arrays, None where a sample did not decode.
    The arrays go in directly where the binding takes them (one call into the library per
    batch, which matters when other threads hold the GIL), else as CodeStreams made here.
    ``images``: as many images of earlier batches, to decode into instead of allocating."""
    kw = {} if images is None else {"images": images}
    if _DIRECT[0] is not False:
        try:
            out = decoder.decode(blobs, params=params, cuda_stream=stream_ptr, **kw)
            _DIRECT[0] = True
            return out
        except TypeError:
            _DIRECT[0] = False
        except Exception:  # a sample it cannot even parse: one by one below
            pass
    streams, pos = [], []
    for k, data in enumerate(blobs):
        try:
            streams.append(nvi.CodeStream(data))
            pos.append(k)
        except Exception:  # not a format nvImageCodec parses: CPU fallback
            continue
    out = [None] * len(blobs)
    if streams:
        if images is not None and len(images) != len(streams):
            kw = {}
        decoded = decoder.decode(streams, params=params, cuda_stream=stream_ptr, **kw)
        for k, img in zip(pos, decoded, strict=True):
            out[k] = img
    return out
