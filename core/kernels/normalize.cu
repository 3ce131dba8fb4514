// fn.normalize on the GPU, the elementwise step: out = (x - mean) * inv + shift, one launch per
// batch (blockIdx.z is the sample). mean and the deviation are per-sample arrays broadcast over
// the reduced axes (stride 0); inv is computed per element from a given deviation (float) or
// from the sum of squared differences (double), in float32 as the CPU side does, with explicit
// round-to-nearest intrinsics so that no multiply-add is fused (the CPU rounds each step).
#include "common.cuh"

#define DL_NORM_DIMS 8

typedef long long int64;
typedef unsigned long long uint64;

struct NormDesc {
  long long in_ptr, out_ptr, mean_ptr, dev_ptr;
  long long size, ndim;
  long long count;       // elements reduced into each statistic (computed deviation)
  long long dev_is_sumsq;  // 1: dev_ptr holds sums of squared differences (double)
  long long shape[DL_NORM_DIMS];
  long long in_strides[DL_NORM_DIMS];
  long long mean_strides[DL_NORM_DIMS];
  long long dev_strides[DL_NORM_DIMS];
};

template <typename T> struct IntRange;
template <> struct IntRange<uint8> { static constexpr double lo = 0, hi = 255; };
template <> struct IntRange<int8> { static constexpr double lo = -128, hi = 127; };
template <> struct IntRange<uint16> { static constexpr double lo = 0, hi = 65535; };
template <> struct IntRange<int16> { static constexpr double lo = -32768, hi = 32767; };
template <> struct IntRange<int> { static constexpr double lo = -2147483648.0, hi = 2147483647.0; };
template <> struct IntRange<unsigned int> { static constexpr double lo = 0, hi = 4294967295.0; };

// DALI's ConvertSat from float: round half away from zero, then saturate (NaN -> lower bound).
template <typename T> struct SatConv {
  __device__ static T to(float v) {
    double r = round((double)v);
    r = r >= IntRange<T>::lo ? (r <= IntRange<T>::hi ? r : IntRange<T>::hi) : IntRange<T>::lo;
    return (T)r;
  }
};
template <> struct SatConv<float> { __device__ static float to(float v) { return v; } };
template <> struct SatConv<double> { __device__ static double to(float v) { return v; } };
template <> struct SatConv<dl_half> {
  __device__ static dl_half to(float v) { return float_to_half(v); }
};

template <typename Tin, typename Tout>
__global__ void normalize_apply(const NormDesc *__restrict__ descs, float scale, float shift,
                                float eps, long long ddof) {
  __shared__ NormDesc d;
  const long long *src = reinterpret_cast<const long long *>(descs + blockIdx.z);
  long long *dst = reinterpret_cast<long long *>(&d);
  for (int w = threadIdx.x; w < (int)(sizeof(NormDesc) / 8); w += blockDim.x) dst[w] = src[w];
  __syncthreads();
  const Tin *in = reinterpret_cast<const Tin *>(d.in_ptr);
  Tout *out = reinterpret_cast<Tout *>(d.out_ptr);
  const float *mean = reinterpret_cast<const float *>(d.mean_ptr);
  long long step = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < d.size; i += step) {
    long long rem = i, in_off = 0, m_off = 0, s_off = 0;
    for (int k = (int)d.ndim - 1; k >= 0; k--) {
      long long c = rem % d.shape[k];
      rem /= d.shape[k];
      in_off += c * d.in_strides[k];
      m_off += c * d.mean_strides[k];
      s_off += c * d.dev_strides[k];
    }
    float inv;
    if (d.dev_is_sumsq) {
      double sumsq = reinterpret_cast<const double *>(d.dev_ptr)[s_off];
      float var;
      bool zero = false;
      if (d.count > ddof) {
        var = (float)(sumsq / (double)(d.count - ddof));
      } else if (eps != 0.0f) {
        var = 0.0f;
      } else {
        zero = true;
        var = 0.0f;
      }
      var = __fadd_rn(var, eps);
      inv = (zero || var == 0.0f) ? 0.0f : __fdiv_rn(scale, __fsqrt_rn(var));
    } else {
      float sd = reinterpret_cast<const float *>(d.dev_ptr)[s_off];
      if (eps != 0.0f) {
        inv = __fdiv_rn(scale, __fsqrt_rn(__fadd_rn(__fmul_rn(sd, sd), eps)));
      } else {
        inv = sd != 0.0f ? __fdiv_rn(scale, sd) : 0.0f;
      }
    }
    float y = __fsub_rn(load_f(in + in_off), mean[m_off]);
    y = __fmul_rn(y, inv);
    if (shift != 0.0f) y = __fadd_rn(y, shift);
    out[i] = SatConv<Tout>::to(y);
  }
}
