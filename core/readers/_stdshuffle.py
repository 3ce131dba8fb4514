"""``std::shuffle`` with ``std::mt19937_64`` / ``std::mt19937`` as DALI 2.4's libstdc++ runs it,
vectorised with numpy.

DALI 2.4's readers shuffle with two engines (the headers shipped in its wheel,
``include/dali/operators/reader/loader/*.h``):

* ``shuffle_after_epoch`` (``FileLabelLoader::Reset`` and its siblings; ``IndexedFileLoader``'s
  file order): ``std::mt19937_64(shuffle_after_epoch_seed + (epoch << 32))``, epoch = 1 first;
* ``random_shuffle``'s one-off list shuffle: ``std::mt19937(524287)``.

libstdc++'s ``std::shuffle`` (GCC 7+) for N elements and an engine of range 2**w - 1: if
``(2**w - 1) // N >= N`` it draws two swap positions per engine draw: when N is even, one first
swap of element 1 with ``uniform_int{0, 1}``; then, for each pair (i, i + 1), one
``uniform_int{0, (i + 1) * (i + 2) - 1}`` draw x gives j_i = x // (i + 2) and
j_{i+1} = x % (i + 2) (``__gen_two_uniform_ints``). Otherwise (32-bit engine, N > 65535) one
``uniform_int{0, i}`` draw per element i. Element i is swapped with j_i, in order of i.

``uniform_int_distribution`` downscales with Lemire's nearly-divisionless method (GCC 11+; a
product of twice the engine's width): ``p = u * R``; reject while ``p mod 2**w < 2**w mod R``;
result ``p >> w``. Checked against DALI 2.4's binary (tests/core/test_stdshuffle.py holds orders
recorded from it): the older divide-and-reject loop gives other ``random_shuffle`` orders from
N = 1000 on (with the 64-bit engine both agree at every size tried).

Vectorising: the draws are independent except that a rejected engine output shifts the rest of
the stream by one; rejections are rare (probability < R / 2**w), so a chunk is computed at once
and recomputed from the first rejection. The swaps are sequential, but their result has a closed
form (:func:`apply_swaps`), computed with a sort and pointer jumping.
"""

from __future__ import annotations

import numpy as np

_M32 = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)
_CHUNK = 1 << 15


class MT19937_64:  # noqa: N801 - the C++ name
    """``std::mt19937_64``. Its recurrence x[t] = x[t-156] ^ A(x[t-312], x[t-311]) is computed
    156 words at a time (numpy slices), the tempering over all of them at once."""

    def __init__(self, seed: int):
        mt = [int(seed) & 0xFFFFFFFFFFFFFFFF]
        for i in range(1, 312):
            x = mt[-1]
            mt.append((6364136223846793005 * (x ^ (x >> 62)) + i) & 0xFFFFFFFFFFFFFFFF)
        self._state = np.array(mt, np.uint64)  # the last 312 words of the recurrence
        self._buf = np.empty(0, np.uint64)  # tempered outputs not consumed yet

    bits = 64

    def _generate(self, n: int) -> np.ndarray:
        """At least ``n`` more outputs (a multiple of 156)."""
        total = -(-n // 156) * 156
        x = np.empty(312 + total, np.uint64)
        x[:312] = self._state
        upper, lower = np.uint64(0xFFFFFFFF80000000), np.uint64(0x7FFFFFFF)
        a, one = np.uint64(0xB5026F5AA96619E9), np.uint64(1)
        for t in range(312, 312 + total, 156):
            y = (x[t - 312 : t - 156] & upper) | (x[t - 311 : t - 155] & lower)
            x[t : t + 156] = x[t - 156 : t] ^ (y >> one) ^ ((y & one) * a)
        self._state = x[-312:].copy()
        y = x[312:]
        y ^= (y >> np.uint64(29)) & np.uint64(0x5555555555555555)
        y ^= (y << np.uint64(17)) & np.uint64(0x71D67FFFEDA60000)
        y ^= (y << np.uint64(37)) & np.uint64(0xFFF7EEE000000000)
        y ^= y >> np.uint64(43)
        return y

    def peek(self, n: int) -> np.ndarray:
        """The next ``n`` outputs (uint64), not consumed (see :meth:`advance`)."""
        if len(self._buf) < n:
            self._buf = np.concatenate([self._buf, self._generate(n - len(self._buf))])
        return self._buf[:n]

    def advance(self, n: int) -> None:
        """Consume ``n`` outputs (after :meth:`peek` of at least ``n``)."""
        self._buf = self._buf[n:]


class MT19937:
    """``std::mt19937`` (32-bit outputs, as uint64), through numpy's MT19937 set to the state
    of ``init_genrand(seed)`` (numpy's own seeding hashes the seed)."""

    bits = 32

    def __init__(self, seed: int):
        key = np.empty(624, np.uint32)
        x = int(seed) & 0xFFFFFFFF
        for i in range(624):
            key[i] = x
            x = (1812433253 * (x ^ (x >> 30)) + i + 1) & 0xFFFFFFFF
        self._gen = np.random.MT19937()
        self._gen.state = {"bit_generator": "MT19937", "state": {"key": key, "pos": 624}}
        self._buf = np.empty(0, np.uint64)

    def peek(self, n: int) -> np.ndarray:
        if len(self._buf) < n:
            self._buf = np.concatenate([self._buf, self._gen.random_raw(n - len(self._buf))])
        return self._buf[:n]

    def advance(self, n: int) -> None:
        self._buf = self._buf[n:]


def _mul128(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(high, low) 64-bit halves of the 128-bit products ``a * b`` (uint64 arrays)."""
    a_lo, a_hi, b_lo, b_hi = a & _M32, a >> _S32, b & _M32, b >> _S32
    ll, lh, hl = a_lo * b_lo, a_lo * b_hi, a_hi * b_lo
    mid = (ll >> _S32) + (lh & _M32) + (hl & _M32)
    high = a_hi * b_hi + (lh >> _S32) + (hl >> _S32) + (mid >> _S32)
    return high, (mid << _S32) | (ll & _M32)


def uniform_draws(ranges: np.ndarray, gen: MT19937_64 | MT19937) -> np.ndarray:
    """One ``uniform_int_distribution{0, R - 1}`` draw for each R of ``ranges`` (uint64, each
    >= 1 and < 2**bits), in order, from ``gen`` (Lemire's method, with a product of twice the
    engine's width)."""
    m = len(ranges)
    out = np.empty(m, np.uint64)
    if gen.bits == 64:
        thresholds = (np.uint64(0) - ranges) % ranges  # 2**64 mod R
    else:
        thresholds = np.uint64(1 << 32) % ranges
    k = 0
    while k < m:
        n = min(m - k, _CHUNK)
        if gen.bits == 64:
            high, low = _mul128(gen.peek(n), ranges[k : k + n])
        else:
            prod = gen.peek(n) * ranges[k : k + n]
            high, low = prod >> _S32, prod & _M32
        rejected = np.flatnonzero(low < thresholds[k : k + n])
        good = n if len(rejected) == 0 else int(rejected[0])
        out[k : k + good] = high[:good]
        gen.advance(good + (good < n))  # a rejected output is skipped; that draw is retried
        k += good
    return out


def swap_targets(n: int, gen: MT19937_64 | MT19937) -> np.ndarray:
    """j_i for i = 0 .. n-1 (j_0 = 0): std::shuffle swaps element i with element j_i <= i."""
    j = np.zeros(n, np.int64)
    if n < 2:
        return j
    if ((1 << gen.bits) - 1) // n < n:  # one draw per element (32-bit engine, n > 65535)
        j[1:] = uniform_draws(np.arange(2, n + 1, dtype=np.uint64), gen).astype(np.int64)
        return j
    first = 1
    if n % 2 == 0:
        j[1] = uniform_draws(np.array([2], np.uint64), gen)[0]
        first = 2
    i = np.arange(first, n, 2, dtype=np.uint64)  # pairs (i, i + 1)
    b1 = i + np.uint64(2)
    x = uniform_draws((i + np.uint64(1)) * b1, gen)
    j[first::2] = (x // b1).astype(np.int64)
    j[first + 1 :: 2] = (x % b1).astype(np.int64)
    return j


def apply_swaps(j: np.ndarray) -> np.ndarray:
    """The permutation b (b[p] = original index now at position p) left by swapping element i
    with j_i for i = 1 .. n-1 in order, starting from the identity.

    Before step i, position i still holds i, so step i writes i to position j_i and S(i) (the
    value then at j_i) to position i. A position's final value is its last write: the last i
    with j_i = p if any, else S(p). S(p) is p if j_p = p; else the value at q = j_p after step
    p - 1: the previous i < p with j_i = q if any (steps with j_i = q have i >= q), else S(q).
    The chain p -> q -> ... descends, and is resolved by pointer jumping.
    """
    n = len(j)
    idx = np.arange(n)
    # Steps grouped by j, ascending i in a group: sorting the unique keys j * n + i is several
    # times faster than a stable argsort of j.
    keys = np.sort(j[1:] * n + idx[1:])
    js = keys // n
    order = keys - js * n
    same_prev = np.zeros(len(order), bool)
    same_prev[1:] = js[1:] == js[:-1]
    value = np.full(n, -1)  # S(p) where known
    value[order[same_prev]] = order[np.flatnonzero(same_prev) - 1]
    fixed = j == idx
    value[fixed] = idx[fixed]
    value[0] = 0
    # Pointer jumping over the unresolved positions only (about half; each round halves the
    # remaining chain lengths and resolves most of them).
    ptr = j.copy()
    todo = np.flatnonzero(value < 0)
    while len(todo):
        target = ptr[todo]
        found = value[target]
        done = found >= 0
        value[todo[done]] = found[done]
        todo, target = todo[~done], target[~done]
        ptr[todo] = ptr[target]
    result = value
    is_last = np.ones(len(order), bool)
    is_last[:-1] = js[:-1] != js[1:]
    result[js[is_last]] = order[is_last]
    return result


def std_shuffle(n: int, seed: int, engine: type = MT19937_64) -> np.ndarray:
    """The permutation ``std::shuffle`` with ``engine(seed)`` (``std::mt19937_64`` or
    ``std::mt19937``) leaves on ``range(n)``: ``order[perm]`` is ``order`` shuffled as DALI
    shuffles it."""
    if n < 2:
        return np.arange(n)
    return apply_swaps(swap_targets(n, engine(seed)))


def epoch_seed(seed: int, epoch: int) -> int:
    """DALI's per-epoch seed: ``uint64(shuffle_after_epoch_seed) + (uint64(epoch) << 32)``."""
    return (int(seed) + (int(epoch) << 32)) & 0xFFFFFFFFFFFFFFFF


def std_shuffle_loop(n: int, seed: int, engine: type = MT19937_64) -> np.ndarray:
    """Reference: the same shuffle with the swaps done one by one (slow; tests)."""
    j = swap_targets(n, engine(seed))
    a = list(range(n))
    for i in range(1, n):
        a[i], a[j[i]] = a[j[i]], a[i]
    return np.array(a, dtype=np.int64)
