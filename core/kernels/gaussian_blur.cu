// fn.gaussian_blur: one pass of a separable convolution along one data axis (d, h or w) of
// every element (sample, frame or channel plane) of a batch, reflect-101 at the edges. The
// operator runs one launch per data axis, innermost first, through a float (double for double
// data) intermediate, as DALI's CPU kernel and the CPU implementation here do.
//
// The sum is acc += in[i - r + k] * w[k] for k = 0 .. size - 1 without FMA contraction, in the
// CPU implementation's order, so GPU and CPU results are identical; integer outputs round half
// away from zero (roundf) and saturate.
#include "common.cuh"

struct BlurDesc {
  long long in_ptr, out_ptr;
  long long size[3];        // d, h, w extents (1 where absent)
  long long in_stride[3];   // elements between neighbours along d, h, w (channels: stride 1)
  long long out_stride[3];
  long long channels;
  long long win_off, win_size;  // this pass's window in `windows`
};

template <typename T> struct BlurIsInt { static constexpr bool value = true; };
template <> struct BlurIsInt<float> { static constexpr bool value = false; };
template <> struct BlurIsInt<double> { static constexpr bool value = false; };
template <> struct BlurIsInt<dl_half> { static constexpr bool value = false; };

template <typename Acc> struct BlurMath;
template <> struct BlurMath<float> {
  template <typename T> __device__ static float load(const T *p) { return load_f(p); }
  __device__ static float mad(float acc, float v, float w) { return __fadd_rn(acc, __fmul_rn(v, w)); }
  __device__ static float rnd(float v) { return roundf(v); }
};
template <> struct BlurMath<double> {
  template <typename T> __device__ static double load(const T *p) { return load_d(p); }
  __device__ static double mad(double acc, double v, float w) {
    return __dadd_rn(acc, __dmul_rn(v, (double)w));
  }
  __device__ static double rnd(double v) { return round(v); }
};

__device__ __forceinline__ long long reflect_101(long long i, long long n) {
  if (n < 2) return 0;
  long long period = 2 * (n - 1);
  long long m = i % period;
  if (m < 0) m += period;
  return m >= n ? period - m : m;
}

template <typename In, typename Out, typename Acc>
__global__ void blur_axis(const BlurDesc *descs, const float *windows, int axis) {
  const BlurDesc &d = descs[blockIdx.z];
  const long long C = d.channels;
  const long long xc = blockIdx.x * (long long)blockDim.x + threadIdx.x;  // w * C + c
  const long long y = blockIdx.y * (long long)blockDim.y + threadIdx.y;
  if (xc >= d.size[2] * C || y >= d.size[1]) return;
  const long long x = xc / C, c = xc - x * C;
  const In *in = reinterpret_cast<const In *>(d.in_ptr);
  Out *out = reinterpret_cast<Out *>(d.out_ptr);
  const float *w = windows + d.win_off;
  const int ws = (int)d.win_size, r = (ws - 1) / 2;
  const long long n = d.size[axis], st = d.in_stride[axis];
  for (long long z = 0; z < d.size[0]; z++) {
    long long pos[3] = {z, y, x};
    const long long base =
        z * d.in_stride[0] + y * d.in_stride[1] + x * d.in_stride[2] + c - pos[axis] * st;
    Acc acc = 0;
    for (int k = 0; k < ws; k++) {
      long long i = reflect_101(pos[axis] - r + k, n);
      acc = BlurMath<Acc>::mad(acc, BlurMath<Acc>::load(in + base + i * st), w[k]);
    }
    Out *o = out + z * d.out_stride[0] + y * d.out_stride[1] + x * d.out_stride[2] + c;
    *o = Conv<Out>::to(BlurIsInt<Out>::value ? BlurMath<Acc>::rnd(acc) : acc);
  }
}
