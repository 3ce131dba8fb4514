// crop + mirror + normalize + cast + HWC->CHW + channel padding, one launch per batch.
// Also serves crop (identity normalization), flip, cast and brightness/contrast (a per-channel
// affine map). blockIdx.z is the sample; each thread writes one output pixel, all channels.
#include "common.cuh"

struct SliceDesc {
  long long in_ptr, out_ptr;
  long long in_h, in_w, in_sy, in_sx;  // input extents and strides (elements); channel stride 1
  long long out_h, out_w;
  long long y0, x0;                    // anchor of the window in the input (may be outside)
  long long flip_x, flip_y;
  double mean[4];
  double mul[4];
  double fill[4];                      // output value of out-of-bounds pixels / pad channels
  double shift;
};

template <typename Tin, typename Tout, typename Acc>
__device__ void slice_normalize_impl(const SliceDesc *__restrict__ descs, int in_c, int out_c,
                                     int planar) {
  // One load of the (200-byte) descriptor per block, not per thread: per thread it cost more
  // than the pixels (a cast of 128 images of 224x224x3 took 7 ms on an H200, 0.1 ms now).
  __shared__ SliceDesc d;
  if (threadIdx.x == 0 && threadIdx.y == 0) d = descs[blockIdx.z];
  __syncthreads();
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= d.out_w || y >= d.out_h) return;
  long long sx = d.flip_x ? d.x0 + (d.out_w - 1 - x) : d.x0 + x;
  long long sy = d.flip_y ? d.y0 + (d.out_h - 1 - y) : d.y0 + y;
  bool inside = sx >= 0 && sy >= 0 && sx < d.in_w && sy < d.in_h;
  const Tin *in = reinterpret_cast<const Tin *>(d.in_ptr) + sy * d.in_sy + sx * d.in_sx;
  Tout *out = reinterpret_cast<Tout *>(d.out_ptr);
  long long plane = d.out_h * d.out_w;
  long long base = planar ? (long long)y * d.out_w + x : ((long long)y * d.out_w + x) * out_c;
  long long cstep = planar ? plane : 1;
  for (int c = 0; c < out_c; c++) {
    int k = c < 4 ? c : 3;
    Acc v;
    if (c < in_c && inside) {
      v = ((Acc)load_d(in + c) - (Acc)d.mean[k]) * (Acc)d.mul[k] + (Acc)d.shift;
    } else {
      v = (Acc)d.fill[k];
    }
    out[base + c * cstep] = Conv<Tout>::to(v);
  }
}

template <typename Tin, typename Tout, typename Acc>
__global__ void slice_normalize(const SliceDesc *__restrict__ descs, int in_c, int out_c,
                                int planar) {
  slice_normalize_impl<Tin, Tout, Acc>(descs, in_c, out_c, planar);
}

// --- the generic N-D strided copy: slice, pad, transpose, stack, cat, copy -------------------
// One descriptor per copy job (a sample, or one input of a stacked/concatenated sample);
// blockIdx.z is the job. A job walks its region (``shape``, C order) and writes
// ``out[sum(c[k] * out_strides[k])] = in[sum((anchor[k] + c[k]) * in_strides[k])]``, or the
// fill value where the input coordinate ``anchor[k] + c[k]`` is outside ``[0, in_shape[k])``.
// Axes are the output's: a transpose permutes the input's strides and extents into them.
#define DL_MAX_DIMS 8

typedef unsigned long long uint64;
typedef long long int64;

struct CopyDesc {
  long long in_ptr, out_ptr;
  long long size;                      // elements in the region
  long long ndim;
  long long shape[DL_MAX_DIMS];        // the region, in output axes
  long long out_strides[DL_MAX_DIMS];  // elements
  long long in_strides[DL_MAX_DIMS];   // elements, per output axis
  long long anchor[DL_MAX_DIMS];       // input coordinate of the region's first element
  long long in_shape[DL_MAX_DIMS];     // input extent per output axis
};

template <typename A, typename B> struct IsSame { static constexpr bool value = false; };
template <typename A> struct IsSame<A, A> { static constexpr bool value = true; };

template <typename T> struct Range;
template <> struct Range<uint8> { static constexpr double lo = 0, hi = 255; };
template <> struct Range<int8> { static constexpr double lo = -128, hi = 127; };
template <> struct Range<uint16> { static constexpr double lo = 0, hi = 65535; };
template <> struct Range<int16> { static constexpr double lo = -32768, hi = 32767; };
template <> struct Range<int> { static constexpr double lo = -2147483648.0, hi = 2147483647.0; };
template <> struct Range<unsigned int> { static constexpr double lo = 0, hi = 4294967295.0; };
template <> struct Range<dl_half> { static constexpr double lo = -65504.0, hi = 65504.0; };

// DALI's ``clamp<T>`` (what its slice kernels write with): the same type is copied bit for bit;
// to a float type a plain conversion; to half or an integer, clamp to the range and convert
// (float -> integer truncates toward zero; NaN gives the lower bound).
template <typename Tout, typename Tin> __device__ __forceinline__ Tout clamp_cast(Tin v) {
  if constexpr (IsSame<Tin, Tout>::value) {
    return v;
  } else {
    double x = load_d(&v);
    if constexpr (IsSame<Tout, float>::value || IsSame<Tout, double>::value) {
      return (Tout)x;
    } else {
      x = x >= Range<Tout>::lo ? (x <= Range<Tout>::hi ? x : Range<Tout>::hi) : Range<Tout>::lo;
      if constexpr (IsSame<Tout, dl_half>::value) {
        return float_to_half((float)x);
      } else {
        return (Tout)x;
      }
    }
  }
}

template <typename Tin, typename Tout>
__global__ void nd_copy(const CopyDesc *__restrict__ descs, const Tout *__restrict__ fill,
                        int nfill, int channel_dim) {
  __shared__ CopyDesc d;
  const long long *src = reinterpret_cast<const long long *>(descs + blockIdx.z);
  long long *dst = reinterpret_cast<long long *>(&d);
  for (int w = threadIdx.x; w < (int)(sizeof(CopyDesc) / 8); w += blockDim.x) dst[w] = src[w];
  __syncthreads();
  const Tin *in = reinterpret_cast<const Tin *>(d.in_ptr);
  Tout *out = reinterpret_cast<Tout *>(d.out_ptr);
  int ndim = (int)d.ndim;
  long long step = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < d.size; i += step) {
    long long rem = i, in_off = 0, out_off = 0, ch = 0;
    bool inside = true;
    for (int k = ndim - 1; k >= 0; k--) {
      long long c = rem % d.shape[k];
      rem /= d.shape[k];
      out_off += c * d.out_strides[k];
      long long s = d.anchor[k] + c;
      inside = inside && s >= 0 && s < d.in_shape[k];
      in_off += s * d.in_strides[k];
      if (k == channel_dim) ch = c;
    }
    if (inside) {
      out[out_off] = clamp_cast<Tout>(in[in_off]);
    } else {
      out[out_off] = fill[ch < nfill ? ch : nfill - 1];
    }
  }
}
