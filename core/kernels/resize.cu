// Separable-filter resize of a whole variable-size batch in one launch (blockIdx.z = sample),
// the GPU twin of dlpipe.operators.resize (DALI's resampling): output pixel x of an axis is
// centred at lo + (x + 0.5) * scale in input coordinates (pixel j spans [j, j+1)); taps start at
// ceil(centre - 0.5 - radius), `support` of them, indices clamped to the image (border
// replication); input pixel j weighs w((j + 0.5 - centre) / radius), normalised to sum 1.
// Filter kinds follow DALI's ResamplingFilterType: 0 nearest, 1 linear, 2 triangular,
// 3 Gaussian, 4 cubic, 5 Lanczos-3. Each axis has its own kind and radius.
#include "common.cuh"

struct ResizeDesc {
  long long in_ptr, out_ptr;
  long long in_h, in_w, in_sy, in_sx;  // extents and strides in elements; channel stride 1
  long long out_h, out_w;
  long long kind_y, kind_x, sup_y, sup_x;
  double lo_y, lo_x, scale_y, scale_x;  // float32 values, as the CPU path computes them
  double rad_y, rad_x;
};

#define MAXC 4
#define PI_F 3.14159265358979f

__device__ __forceinline__ float sinc_f(float x) {
  if (fabsf(x) < 1e-7f) return 1.f;
  float a = PI_F * x;
  return sinf(a) / a;
}

__device__ __forceinline__ float filter_w(int kind, float t) {
  t = fabsf(t);
  if (t >= 1.f) return 0.f;
  switch (kind) {
    case 1:
    case 2: return 1.f - t;
    case 3: return expf(-(2.f * t) * (2.f * t));
    case 4: {
      float x = 2.f * t;
      return x > 1.f ? ((-0.5f * x + 2.5f) * x - 4.f) * x + 2.f : (1.5f * x - 2.5f) * x * x + 1.f;
    }
    case 5: return sinc_f(3.f * t) * sinc_f(t);
    default: return 1.f;
  }
}

// First tap, tap count and the weight normaliser of one axis for an output coordinate.
__device__ __forceinline__ void axis_taps(int kind, float lo, float scale, float rad, int sup,
                                          int o, int &first, int &n, float &inv_tot) {
  float centre = __fadd_rn(lo, __fmul_rn((float)o + 0.5f, scale));  // no FMA: as numpy
  if (kind == 0) {
    first = (int)floorf(centre);
    n = 1;
    inv_tot = 1.f;
    return;
  }
  first = (int)ceilf(__fsub_rn(__fsub_rn(centre, 0.5f), rad));
  n = sup;
  float tot = 0.f;
  for (int k = 0; k < n; k++) tot += filter_w(kind, ((float)(first + k) + 0.5f - centre) / rad);
  inv_tot = tot != 0.f ? 1.f / tot : 0.f;
}

__device__ __forceinline__ float tap_w(int kind, float lo, float scale, float rad, int o, int j) {
  if (kind == 0) return 1.f;
  float centre = __fadd_rn(lo, __fmul_rn((float)o + 0.5f, scale));  // no FMA: as numpy
  return filter_w(kind, ((float)j + 0.5f - centre) / rad);
}

template <typename Tin, typename Tout>
__global__ void resize_filter(const ResizeDesc *__restrict__ descs, int C) {
  const ResizeDesc d = descs[blockIdx.z];
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= d.out_w || y >= d.out_h) return;
  int ky = (int)d.kind_y, kx = (int)d.kind_x;
  float lo_y = (float)d.lo_y, lo_x = (float)d.lo_x;
  float sc_y = (float)d.scale_y, sc_x = (float)d.scale_x;
  float rad_y = (float)d.rad_y, rad_x = (float)d.rad_x;
  int fy, ny, fx, nx;
  float ity, itx;
  axis_taps(ky, lo_y, sc_y, rad_y, (int)d.sup_y, y, fy, ny, ity);
  axis_taps(kx, lo_x, sc_x, rad_x, (int)d.sup_x, x, fx, nx, itx);
  int H = (int)d.in_h, W = (int)d.in_w;
  const Tin *in = reinterpret_cast<const Tin *>(d.in_ptr);
  Tout *out = reinterpret_cast<Tout *>(d.out_ptr) + ((long long)y * d.out_w + x) * C;
  for (int c0 = 0; c0 < C; c0 += MAXC) {
    int nc = min(MAXC, C - c0);
    float acc[MAXC] = {0.f, 0.f, 0.f, 0.f};
    for (int a = 0; a < ny; a++) {
      int iy = fy + a;
      float wy = tap_w(ky, lo_y, sc_y, rad_y, y, iy) * ity;
      if (wy == 0.f) continue;
      iy = iy < 0 ? 0 : (iy >= H ? H - 1 : iy);
      float row[MAXC] = {0.f, 0.f, 0.f, 0.f};
      const Tin *p = in + iy * d.in_sy + c0;
      for (int b = 0; b < nx; b++) {
        int ix = fx + b;
        float wx = tap_w(kx, lo_x, sc_x, rad_x, x, ix) * itx;
        ix = ix < 0 ? 0 : (ix >= W ? W - 1 : ix);
        const Tin *q = p + ix * d.in_sx;
#pragma unroll
        for (int c = 0; c < MAXC; c++)
          if (c < nc) row[c] += wx * load_f(q + c);
      }
#pragma unroll
      for (int c = 0; c < MAXC; c++) acc[c] += wy * row[c];
    }
#pragma unroll
    for (int c = 0; c < MAXC; c++)
      if (c < nc) out[c0 + c] = Conv<Tout>::to(acc[c]);
  }
}
