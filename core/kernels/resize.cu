// Separable-filter resize of a whole variable-size batch in one launch (blockIdx.z = sample).
// Source coordinate of output pixel centre x+0.5 is roi_x0 + (x+0.5)*scale_x. Linear: a triangle
// filter of radius max(1, |scale|) (plain bilinear when enlarging, antialiased when shrinking);
// cubic and Lanczos-3 are stretched the same way. Weights are renormalised over the taps inside
// the image. Nearest: floor of the source coordinate, clamped.
#include "common.cuh"

struct ResizeDesc {
  long long in_ptr, out_ptr;
  long long in_h, in_w, in_sy, in_sx;  // extents and strides in elements; channel stride 1
  long long out_h, out_w;
  double roi_y0, roi_x0, scale_y, scale_x;
  double rad_y, rad_x;                 // filter support in source pixels
  double str_y, str_x;                 // filter stretch (>1 when antialiasing a shrink)
};

#define MAXC 4

// filter: 1 triangle (linear), 2 cubic (Keys, a=-0.5), 3 Lanczos-3
__device__ __forceinline__ float filter_w(int kind, float t) {
  t = fabsf(t);
  if (kind == 1) return fmaxf(0.f, 1.f - t);
  if (kind == 2) {
    if (t < 1.f) return (1.5f * t - 2.5f) * t * t + 1.f;
    if (t < 2.f) return ((-0.5f * t + 2.5f) * t - 4.f) * t + 2.f;
    return 0.f;
  }
  if (t < 1e-6f) return 1.f;
  if (t >= 3.f) return 0.f;
  float a = 3.14159265358979f * t;
  return 3.f * sinf(a) * sinf(a / 3.f) / (a * a);
}

template <typename Tin, typename Tout>
__global__ void resize_filter(const ResizeDesc *__restrict__ descs, int C, int kind) {
  const ResizeDesc d = descs[blockIdx.z];
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= d.out_w || y >= d.out_h) return;
  float cy = (float)(d.roi_y0 + (y + 0.5) * d.scale_y);
  float cx = (float)(d.roi_x0 + (x + 0.5) * d.scale_x);
  float ry = (float)d.rad_y, rx = (float)d.rad_x;
  int y_lo = max(0, (int)ceilf(cy - ry - 0.5f)), y_hi = min((int)d.in_h - 1, (int)floorf(cy + ry - 0.5f));
  int x_lo = max(0, (int)ceilf(cx - rx - 0.5f)), x_hi = min((int)d.in_w - 1, (int)floorf(cx + rx - 0.5f));
  if (y_hi < y_lo) { y_lo = y_hi = min(max((int)floorf(cy), 0), (int)d.in_h - 1); }
  if (x_hi < x_lo) { x_lo = x_hi = min(max((int)floorf(cx), 0), (int)d.in_w - 1); }
  float inv_sy = 1.0f / (float)d.str_y, inv_sx = 1.0f / (float)d.str_x;
  float sum_x = 0.f;
  for (int ix = x_lo; ix <= x_hi; ix++) sum_x += filter_w(kind, (ix + 0.5f - cx) * inv_sx);
  if (sum_x == 0.f) sum_x = 1.f;
  const Tin *in = reinterpret_cast<const Tin *>(d.in_ptr);
  Tout *out = reinterpret_cast<Tout *>(d.out_ptr) + ((long long)y * d.out_w + x) * C;
  for (int c0 = 0; c0 < C; c0 += MAXC) {
    int nc = min(MAXC, C - c0);
    float acc[MAXC] = {0.f, 0.f, 0.f, 0.f};
    float sum_y = 0.f;
    for (int iy = y_lo; iy <= y_hi; iy++) {
      float wy = filter_w(kind, (iy + 0.5f - cy) * inv_sy);
      if (wy == 0.f) continue;
      sum_y += wy;
      float row[MAXC] = {0.f, 0.f, 0.f, 0.f};
      const Tin *p = in + iy * d.in_sy + c0;
      for (int ix = x_lo; ix <= x_hi; ix++) {
        float wx = filter_w(kind, (ix + 0.5f - cx) * inv_sx);
        const Tin *q = p + ix * d.in_sx;
#pragma unroll
        for (int c = 0; c < MAXC; c++)
          if (c < nc) row[c] += wx * load_f(q + c);
      }
#pragma unroll
      for (int c = 0; c < MAXC; c++) acc[c] += wy * row[c];
    }
    if (sum_y == 0.f) sum_y = 1.f;
    float norm = 1.f / (sum_x * sum_y);
#pragma unroll
    for (int c = 0; c < MAXC; c++)
      if (c < nc) out[c0 + c] = Conv<Tout>::to(acc[c] * norm);
  }
}

template <typename Tin, typename Tout>
__global__ void resize_nn(const ResizeDesc *__restrict__ descs, int C) {
  const ResizeDesc d = descs[blockIdx.z];
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= d.out_w || y >= d.out_h) return;
  long long sy = (long long)floor(d.roi_y0 + (y + 0.5) * d.scale_y);
  long long sx = (long long)floor(d.roi_x0 + (x + 0.5) * d.scale_x);
  sy = sy < 0 ? 0 : (sy >= d.in_h ? d.in_h - 1 : sy);
  sx = sx < 0 ? 0 : (sx >= d.in_w ? d.in_w - 1 : sx);
  const Tin *in = reinterpret_cast<const Tin *>(d.in_ptr) + sy * d.in_sy + sx * d.in_sx;
  Tout *out = reinterpret_cast<Tout *>(d.out_ptr) + ((long long)y * d.out_w + x) * C;
  for (int c = 0; c < C; c++) out[c] = Conv<Tout>::to(load_f(in + c));
}
