// Shared helpers for dlpipe's CUDA kernels (compiled with NVRTC through CuPy RawModule).
#pragma once

typedef unsigned char uint8;
typedef signed char int8;
typedef unsigned short uint16;
typedef short int16;

// IEEE half stored as 16 bits; converted with PTX so no CUDA header is needed under NVRTC.
struct __align__(2) dl_half { unsigned short bits; };
__device__ __forceinline__ float half_to_float(dl_half h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.bits));
  return f;
}
__device__ __forceinline__ dl_half float_to_half(float f) {
  dl_half h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
  return h;
}

// Convert an accumulator value to the output type: floats pass through, integers round to
// nearest (ties to even, as numpy's rint) and saturate to the type's range.
template <typename T> struct Conv;
template <> struct Conv<float> { template <typename A> __device__ static float to(A v) { return (float)v; } };
template <> struct Conv<double> { template <typename A> __device__ static double to(A v) { return (double)v; } };
template <> struct Conv<dl_half> { template <typename A> __device__ static dl_half to(A v) { return float_to_half((float)v); } };
template <typename T> struct IsFloat { static constexpr bool value = false; };
template <> struct IsFloat<float> { static constexpr bool value = true; };
// A float value bound for a type of 16 bits or fewer rounds and saturates in float: the same
// result as in double (float -> double is exact and the bounds are floats), without FP64 math,
// which consumer GPUs run at a small fraction of the FP32 rate.
#define DLPIPE_INT_CONV(T, LO, HI, FLOAT_OK)                                           \
  template <> struct Conv<T> {                                                        \
    template <typename A> __device__ static T to(A v) {                               \
      if constexpr (FLOAT_OK && IsFloat<A>::value) {                                   \
        float r = rintf((float)v);                                                    \
        r = r < (float)(LO) ? (float)(LO) : (r > (float)(HI) ? (float)(HI) : r);      \
        return (T)r;                                                                  \
      } else {                                                                        \
        double r = rint((double)v);                                                   \
        r = r < (double)(LO) ? (double)(LO) : (r > (double)(HI) ? (double)(HI) : r);  \
        return (T)r;                                                                  \
      }                                                                               \
    }                                                                                 \
  };
DLPIPE_INT_CONV(uint8, 0, 255, true)
DLPIPE_INT_CONV(int8, -128, 127, true)
DLPIPE_INT_CONV(uint16, 0, 65535, true)
DLPIPE_INT_CONV(int16, -32768, 32767, true)
DLPIPE_INT_CONV(int, -2147483648.0, 2147483647.0, false)
DLPIPE_INT_CONV(unsigned int, 0, 4294967295.0, false)

template <typename T> __device__ __forceinline__ float load_f(const T *p) { return (float)(*p); }
template <> __device__ __forceinline__ float load_f<dl_half>(const dl_half *p) { return half_to_float(*p); }
template <typename T> __device__ __forceinline__ double load_d(const T *p) { return (double)(*p); }
template <> __device__ __forceinline__ double load_d<dl_half>(const dl_half *p) { return (double)half_to_float(*p); }

// The histogram-equalization table's value at bin t (OpenCV's formula: the cumulative
// histogram from the first non-empty bin, scaled to 0..255, rounded half to even), for one
// plane whose 256-bin histogram holds `count` at t. Every thread t < 256 of the block calls
// it (it synchronises), with `cdf` (256 entries) and `first_bin` in shared memory.
__device__ __forceinline__ unsigned char equalize_table_value(unsigned int count, int t,
                                                              unsigned long long *cdf,
                                                              int *first_bin) {
  cdf[t] = count;
  if (t == 0) *first_bin = 256;
  __syncthreads();
  if (count) atomicMin(first_bin, t);
  for (int offset = 1; offset < 256; offset <<= 1) {  // Hillis-Steele scan
    unsigned long long add = t >= offset ? cdf[t - offset] : 0ull;
    __syncthreads();
    cdf[t] += add;
    __syncthreads();
  }
  const unsigned long long total = cdf[255];
  const int fb = *first_bin;
  const unsigned long long first = fb < 256 ? cdf[fb] : 0ull;
  if (first == total) return (unsigned char)t;
  if (t < fb) return 0;  // no pixel has this value
  const double factor = 255.0 / (double)(total - first);
  const double v = rint((double)(cdf[t] - first) * factor);
  return (unsigned char)(v > 255.0 ? 255.0 : v);
}
