// fn.reductions.*: one launch per batch (blockIdx.z is the sample). Each output element
// reduces the input elements that differ only in the reduced axes. With few elements per
// output (`reduce_small`) one thread computes one output; with many (`reduce_block`) a block
// of 256 threads shares one output, combining partial results in shared memory.
// Accumulation is in double; OP picks the reduction and its final step.
#include "common.cuh"

#define DL_RED_DIMS 8

typedef long long int64;
typedef unsigned long long uint64;

struct ReduceDesc {
  long long in_ptr, out_ptr, mean_ptr;  // mean: float32 per output (variance, std_dev)
  long long n_out, n_red;
  long long n_kept, n_reduced;          // how many kept / reduced axes
  long long kept_shape[DL_RED_DIMS], kept_strides[DL_RED_DIMS];
  long long red_shape[DL_RED_DIMS], red_strides[DL_RED_DIMS];
  double norm;                          // 1/n (mean, mean_square, rms), 1/(n - ddof) (var, std)
};

enum { OP_SUM = 0, OP_MIN, OP_MAX, OP_MEAN, OP_MEAN_SQUARE, OP_RMS, OP_VARIANCE, OP_STD };

template <int OP> __device__ __forceinline__ double combine(double a, double b) {
  if (OP == OP_MIN) return b < a ? b : a;
  if (OP == OP_MAX) return b > a ? b : a;
  return a + b;
}

template <int OP> __device__ __forceinline__ double prep(double x, double mean) {
  if (OP == OP_MEAN_SQUARE || OP == OP_RMS) return x * x;
  if (OP == OP_VARIANCE || OP == OP_STD) {
    double d = x - mean;
    return d * d;
  }
  return x;
}

template <int OP> __device__ __forceinline__ double finish(double acc, double norm) {
  if (OP == OP_MEAN || OP == OP_MEAN_SQUARE || OP == OP_VARIANCE) return acc * norm;
  if (OP == OP_RMS || OP == OP_STD) return sqrt(acc * norm);
  return acc;
}

__device__ __forceinline__ long long offset_of(long long idx, int n, const long long *shape,
                                               const long long *strides) {
  long long off = 0;
  for (int k = n - 1; k >= 0; k--) {
    long long c = idx % shape[k];
    idx /= shape[k];
    off += c * strides[k];
  }
  return off;
}

template <typename Tout> __device__ __forceinline__ void store(Tout *p, double v) { *p = (Tout)v; }
template <> __device__ __forceinline__ void store<dl_half>(dl_half *p, double v) {
  *p = float_to_half((float)v);
}

template <typename Tin, typename Tout, int OP>
__global__ void reduce_small(const ReduceDesc *__restrict__ descs, double neutral) {
  const ReduceDesc &d = descs[blockIdx.z];
  const Tin *in = reinterpret_cast<const Tin *>(d.in_ptr);
  Tout *out = reinterpret_cast<Tout *>(d.out_ptr);
  const float *mean = reinterpret_cast<const float *>(d.mean_ptr);
  long long step = (long long)gridDim.x * blockDim.x;
  for (long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x; o < d.n_out; o += step) {
    long long base = offset_of(o, (int)d.n_kept, d.kept_shape, d.kept_strides);
    double m = mean ? (double)mean[o] : 0.0;
    double acc = neutral;
    for (long long r = 0; r < d.n_red; r++) {
      long long off = base + offset_of(r, (int)d.n_reduced, d.red_shape, d.red_strides);
      acc = combine<OP>(acc, prep<OP>(load_d(in + off), m));
    }
    store<Tout>(out + o, finish<OP>(acc, d.norm));
  }
}

template <typename Tin, typename Tout, int OP>
__global__ void reduce_block(const ReduceDesc *__restrict__ descs, double neutral) {
  __shared__ double part[256];
  const ReduceDesc &d = descs[blockIdx.z];
  const Tin *in = reinterpret_cast<const Tin *>(d.in_ptr);
  Tout *out = reinterpret_cast<Tout *>(d.out_ptr);
  const float *mean = reinterpret_cast<const float *>(d.mean_ptr);
  for (long long o = blockIdx.x; o < d.n_out; o += gridDim.x) {
    long long base = offset_of(o, (int)d.n_kept, d.kept_shape, d.kept_strides);
    double m = mean ? (double)mean[o] : 0.0;
    double acc = neutral;
    for (long long r = threadIdx.x; r < d.n_red; r += blockDim.x) {
      long long off = base + offset_of(r, (int)d.n_reduced, d.red_shape, d.red_strides);
      acc = combine<OP>(acc, prep<OP>(load_d(in + off), m));
    }
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
      if (threadIdx.x < s) part[threadIdx.x] = combine<OP>(part[threadIdx.x], part[threadIdx.x + s]);
      __syncthreads();
    }
    if (threadIdx.x == 0) store<Tout>(out + o, finish<OP>(part[0], d.norm));
    __syncthreads();
  }
}
