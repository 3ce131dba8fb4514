// Per-sample 3x3 colour matrix + offset on HWC images with 3 channels (color_twist, hsv), one
// launch per batch. out[c] = sum_k m[c][k] * in[k] + off[c].
#include "common.cuh"

struct ColorDesc {
  long long in_ptr, out_ptr;
  long long h, w, in_sy, in_sx;
  double m[9];
  double off[3];
};

template <typename Tin, typename Tout>
__global__ void color_matrix(const ColorDesc *__restrict__ descs) {
  __shared__ ColorDesc d;  // one load per block (see slice.cu)
  if (threadIdx.x == 0 && threadIdx.y == 0) d = descs[blockIdx.z];
  __syncthreads();
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= d.w || y >= d.h) return;
  const Tin *in = reinterpret_cast<const Tin *>(d.in_ptr) + y * d.in_sy + x * d.in_sx;
  Tout *out = reinterpret_cast<Tout *>(d.out_ptr) + ((long long)y * d.w + x) * 3;
  float v0 = load_f(in), v1 = load_f(in + 1), v2 = load_f(in + 2);
#pragma unroll
  for (int c = 0; c < 3; c++) {
    float r = (float)d.m[3 * c] * v0 + (float)d.m[3 * c + 1] * v1 + (float)d.m[3 * c + 2] * v2 + (float)d.off[c];
    out[c] = Conv<Tout>::to(r);
  }
}
