"""``np.random.default_rng(seed)`` for a batch of seeds, in a fraction of the time.

A generator per sample, seeded from the operator's RNG, keeps an operator's results independent
of the thread count; but making one costs ~13 us (``SeedSequence`` hashes the seed in a Python
loop of numpy scalar operations), which was a sixth of ``random_bbox_crop``'s host time per
sample. Here the hashing of SeedSequence (numpy's ``bit_generator.pyx``: ``mix_entropy`` into a
pool of 4 words, ``generate_state(4, uint64)``) runs on the whole batch of seeds at once in
uint32 numpy arithmetic, PCG64's seeding (``pcg_setseq_128_srandom_r``) on Python integers, and
the states go into generators kept for reuse (setting a state is ~1 us). The generators are
those ``default_rng(seed)`` makes, state for state (the tests compare them).
"""

from __future__ import annotations

import threading

import numpy as np

_MASK32 = 0xFFFFFFFF
_MASK128 = (1 << 128) - 1
_INIT_A, _MULT_A = 0x43B0D7E5, 0x931E8875
_INIT_B, _MULT_B = 0x8B51F9DD, 0x58F38DED
_MIX_MULT_L, _MIX_MULT_R = 0xCA01F9DD, 0x4973F715
_POOL = 4
_PCG_MULT = (2549297995355413924 << 64) + 4865540595714422341  # PCG_DEFAULT_MULTIPLIER_128


def _hash_consts(init: int, mult: int, count: int) -> list[np.uint32]:
    """The successive hash constants of SeedSequence's hash (each multiplied once more)."""
    out, h = [], init
    for _ in range(count):
        out.append(h)
        h = (h * mult) & _MASK32
    return out


# mix_entropy: 4 hashes of the entropy words, then 12 of the pool words (one per src != dst)
_CONST_A = _hash_consts(_INIT_A, _MULT_A, _POOL + _POOL * (_POOL - 1) + 1)
_CONST_B = _hash_consts(_INIT_B, _MULT_B, 9)


def _hashmix(value: np.ndarray, k: int) -> np.ndarray:
    """SeedSequence's ``hashmix`` with the k-th hash constant of ``mix_entropy``."""
    v = value ^ np.uint32(_CONST_A[k])
    v = v * np.uint32(_CONST_A[k + 1])
    return v ^ (v >> np.uint32(16))


def _mix(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    r = np.uint32(_MIX_MULT_L) * x - np.uint32(_MIX_MULT_R) * y
    return r ^ (r >> np.uint32(16))


def pcg64_states(seeds: list[int]) -> list[tuple[int, int] | None]:
    """(state, inc) of ``np.random.default_rng(seed).bit_generator`` for each seed; None for a
    seed that is not an integer in [0, 2**128) (those take ``default_rng`` itself)."""
    ok = [isinstance(s, int | np.integer) and 0 <= s < (1 << 128) for s in seeds]
    small = [int(s) if k and s < (1 << 64) else 0 for s, k in zip(seeds, ok, strict=True)]
    low = np.array(small, np.uint64)
    words = np.zeros((_POOL, len(seeds)), np.uint32)  # the entropy, zero-padded to the pool
    words[0] = low & np.uint64(_MASK32)
    words[1] = low >> np.uint64(32)
    for j, s in enumerate(seeds):
        if ok[j] and s >= (1 << 64):
            for i in range(_POOL):
                words[i, j] = (int(s) >> (32 * i)) & _MASK32
    with np.errstate(over="ignore"):
        pool = [_hashmix(words[i], i) for i in range(_POOL)]
        k = _POOL
        for src in range(_POOL):
            for dst in range(_POOL):
                if src != dst:
                    pool[dst] = _mix(pool[dst], _hashmix(pool[src], k))
                    k += 1
        state = []
        for i in range(2 * _POOL):  # generate_state(4, np.uint64): 8 words
            v = pool[i % _POOL] ^ np.uint32(_CONST_B[i])
            v = v * np.uint32(_CONST_B[i + 1])
            state.append(v ^ (v >> np.uint32(16)))
    w = np.stack(state).astype(np.uint64)
    val = (w[0::2] | (w[1::2] << np.uint64(32))).T.tolist()  # (n, 4) little-endian uint64s
    out: list[tuple[int, int] | None] = []
    for j, (v0, v1, v2, v3) in enumerate(val):
        if not ok[j]:
            out.append(None)
            continue
        init_state, init_seq = (v0 << 64) | v1, (v2 << 64) | v3
        inc = ((init_seq << 1) | 1) & _MASK128
        st = inc  # state 0, one step
        st = (((st + init_state) & _MASK128) * _PCG_MULT + inc) & _MASK128
        out.append((st, inc))
    return out


class GeneratorPool:
    """Generators for reuse, one set per thread: :meth:`seeded` returns ``default_rng(seed)``
    for each seed, valid until this thread's next call."""

    def __init__(self) -> None:
        self._local = threading.local()

    def seeded(self, seeds: list[int]) -> list[np.random.Generator]:
        gens = getattr(self._local, "gens", None)
        if gens is None:
            gens = self._local.gens = []
        while len(gens) < len(seeds):
            gens.append(np.random.Generator(np.random.PCG64(0)))
        out = []
        for gen, seed, st in zip(gens, seeds, pcg64_states(seeds), strict=False):
            if st is None:
                out.append(np.random.default_rng(seed))
                continue
            gen.bit_generator.state = {
                "bit_generator": "PCG64",
                "state": {"state": st[0], "inc": st[1]},
                "has_uint32": 0,
                "uinteger": 0,
            }
            out.append(gen)
        return out
