// Helpers of the generated expression kernels (arithmetic.py): DALI's semantics for the
// operations whose C++ spelling is not a plain operator. Values of float16 steps are held in
// float registers and rounded to half after each operation (as numpy's float16 loops do).
#pragma once
#include "common.cuh"

__device__ __forceinline__ float dl_round_half(float v) { return half_to_float(float_to_half(v)); }

template <typename T> struct DlSigned { static constexpr bool value = (T)(-1) < (T)0; };

// Integer division truncating toward zero; 0 for a zero divisor; MIN / -1 wraps to MIN.
template <typename T> __device__ __forceinline__ T dl_idiv(T a, T b) {
  if (b == (T)0) return (T)0;
  if constexpr (DlSigned<T>::value) if (b == (T)(-1)) return (T)(0ull - (unsigned long long)a);
  return (T)(a / b);
}

// C's % on integers (sign of the dividend); 0 for a zero divisor.
template <typename T> __device__ __forceinline__ T dl_imod(T a, T b) {
  if (b == (T)0) return (T)0;
  if constexpr (DlSigned<T>::value) if (b == (T)(-1)) return (T)0;
  return (T)(a % b);
}

// Integer power by squaring, wrapping in T; a negative exponent gives 0 (DALI's ipow).
template <typename T> __device__ __forceinline__ T dl_ipow(T base, T e) {
  if constexpr (DlSigned<T>::value) if (e < (T)0) return (T)0;
  T r = (T)1;
  while (e != (T)0) {
    if (e & (T)1) r = (T)(r * base);
    e = (T)(e >> 1);
    base = (T)(base * base);
  }
  return r;
}

// abs for signed types (integers and floats): x < 0 ? -x : x (DALI's math_abs)
template <typename T> __device__ __forceinline__ T dl_abs(T x) {
  if constexpr (DlSigned<T>::value) return x < (T)0 ? (T)(-x) : x;
  else return x;
}

// A signed value against an unsigned 64-bit one, exactly: -1, 0 or 1.
__device__ __forceinline__ int dl_cmp_su(long long s, unsigned long long u) {
  if (s < 0) return -1;
  unsigned long long a = (unsigned long long)s;
  return a < u ? -1 : (a > u ? 1 : 0);
}
