// fn.filter: correlation of every plane of every sample with its filter, one launch per batch
// (blockIdx.z = sample, blockIdx.y = plane, threads over the plane's output elements).
//
// A sample is `planes` consecutive planes (its leading frame/channel axes), each of
// in_d x in_h x in_w spatial elements (in_d = 1 for images) times `channels` interleaved
// channels; the output planes are out_d x out_h x out_w x channels. Output element (z, y, x, c)
// sums filter[kz, ky, kx] * in[z - az + kz, y - ay + ky, x - ax + kx, c] in float, the input
// coordinates remapped by the border mode (or replaced by the fill value for BORDER_CONSTANT).
// For mode "valid" the host passes zero anchors and the reduced output extents, so every
// coordinate is inside.
#include "common.cuh"

struct FilterDesc {
  long long in_ptr, out_ptr, filt_ptr, fill_ptr;  // fill_ptr 0: fill with 0
  long long planes;
  long long filt_frame_stride;  // floats between per-frame filters (0: one filter)
  int in_d, in_h, in_w;
  int out_d, out_h, out_w;
  int channels;
  int fd, fh, fw;
  int ad, ah, aw;
  int planes_per_frame;  // plane p belongs to frame p / planes_per_frame
  int fill_per_frame;    // 1: one fill value per frame
};

enum { BORDER_REFLECT_101 = 0, BORDER_REFLECT_1001 = 1, BORDER_WRAP = 2, BORDER_CLAMP = 3,
       BORDER_CONSTANT = 4 };

// Map a coordinate into [0, n); -1 means "outside" (BORDER_CONSTANT only).
template <int Border> __device__ __forceinline__ int remap(int i, int n) {
  if (i >= 0 && i < n) return i;
  if (Border == BORDER_CONSTANT) return -1;
  if (Border == BORDER_CLAMP) return i < 0 ? 0 : n - 1;
  if (Border == BORDER_WRAP) {
    int m = i % n;
    return m < 0 ? m + n : m;
  }
  if (Border == BORDER_REFLECT_1001) {
    int period = 2 * n;
    int m = i % period;
    if (m < 0) m += period;
    return m >= n ? period - 1 - m : m;
  }
  // reflect 101
  if (n == 1) return 0;
  int period = 2 * (n - 1);
  int m = i % period;
  if (m < 0) m += period;
  return m >= n ? period - m : m;
}

template <typename In, typename Out, int Border>
__global__ void filter_nd(const FilterDesc *__restrict__ descs) {
  const FilterDesc d = descs[blockIdx.z];
  const long long c_n = d.channels;
  const long long in_plane = (long long)d.in_d * d.in_h * d.in_w * c_n;
  const long long out_plane = (long long)d.out_d * d.out_h * d.out_w * c_n;
  const long long step = (long long)gridDim.x * blockDim.x;
  for (long long p = blockIdx.y; p < d.planes; p += gridDim.y) {
    const int frame = (int)(p / d.planes_per_frame);
    const In *in = reinterpret_cast<const In *>(d.in_ptr) + p * in_plane;
    Out *out = reinterpret_cast<Out *>(d.out_ptr) + p * out_plane;
    const float *filt = reinterpret_cast<const float *>(d.filt_ptr) + frame * d.filt_frame_stride;
    float fill = 0.f;
    if (Border == BORDER_CONSTANT && d.fill_ptr)
      fill = load_f(reinterpret_cast<const In *>(d.fill_ptr) + (d.fill_per_frame ? frame : 0));
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < out_plane;
         i += step) {
      const int c = (int)(i % c_n);
      long long r = i / c_n;
      const int x = (int)(r % d.out_w);
      r /= d.out_w;
      const int y = (int)(r % d.out_h);
      const int z = (int)(r / d.out_h);
      float acc = 0.f;
      int k = 0;
      for (int kz = 0; kz < d.fd; kz++) {
        const int iz = remap<Border>(z - d.ad + kz, d.in_d);
        for (int ky = 0; ky < d.fh; ky++) {
          const int iy = remap<Border>(y - d.ah + ky, d.in_h);
          for (int kx = 0; kx < d.fw; kx++, k++) {
            const int ix = remap<Border>(x - d.aw + kx, d.in_w);
            float v;
            if (Border == BORDER_CONSTANT && (iz < 0 || iy < 0 || ix < 0)) {
              v = fill;
            } else {
              v = load_f(in + (((long long)iz * d.in_h + iy) * d.in_w + ix) * c_n + c);
            }
            acc += filt[k] * v;
          }
        }
      }
      out[i] = Conv<Out>::to(acc);
    }
  }
}
