// Separable-filter resize of a whole variable-size batch in one launch (blockIdx.z = sample),
// the GPU twin of dlpipe.operators.resize (a port of DALI's resampling): per axis, DALI's
// float32 window (anchor, table scale, taps) over the filter's coefficient table (linear
// interpolation), weights normalised to sum 1, tap indices clamped to the image (border
// replication). Kinds follow DALI's ResamplingFilterType (0 nearest: floor of the centre).
// A flipped axis computes the unflipped output and mirrors it, as the CPU path does.
#include "common.cuh"

struct ResizeDesc {
  long long in_ptr, out_ptr;
  long long in_h, in_w, in_sy, in_sx;  // extents and strides in elements; channel stride 1
  long long out_h, out_w;
  long long kind_y, kind_x, taps_y, taps_x, tab_y, tab_x, tab_n_y, tab_n_x, flip_y, flip_x;
  double lo_y, lo_x, scale_y, scale_x;  // float32 values (the ROI, unflipped)
  double anchor_y, anchor_x, tscale_y, tscale_x;
};

#define MAXC 4

// DALI's window setup (InitializeResamplingFilter), float32 and in numpy's operation order.
__device__ __forceinline__ void axis_setup(int kind, float lo, float scale, float anchor, int o,
                                           int &first, float &f0) {
  if (kind == 0) {
    float c = __fadd_rn(lo, __fmul_rn((float)o + 0.5f, scale));
    first = (int)floorf(c);
    f0 = 0.f;
    return;
  }
  float src0 = __fsub_rn(__fsub_rn(__fadd_rn(lo, __fmul_rn(0.5f, scale)), 0.5f), anchor);
  float sx0f = __fadd_rn(__fmul_rn((float)o, scale), src0);
  float fi = ceilf(sx0f);
  first = (int)fi;
  f0 = __fsub_rn(fi, sx0f);
}

// Coefficient-table lookup with linear interpolation (0 outside the table).
__device__ __forceinline__ float tab_w(const float *__restrict__ tab, int n, float f0, int k,
                                       float tscale) {
  float x = __fmul_rn(__fadd_rn(f0, (float)k), tscale);
  if (!(x > -1.f && x < (float)n)) return 0.f;
  float xf = floorf(x);
  int x0 = (int)xf;
  float frac = x - xf;
  float a = (x0 >= 0 && x0 < n) ? tab[x0] : 0.f;
  float b = (x0 + 1 >= 0 && x0 + 1 < n) ? tab[x0 + 1] : 0.f;
  return a + frac * (b - a);
}

template <typename Tin, typename Tout>
__global__ void resize_filter(const ResizeDesc *__restrict__ descs, const float *__restrict__ tables,
                              int C) {
  __shared__ ResizeDesc d;  // one load per block (see slice.cu)
  if (threadIdx.x == 0 && threadIdx.y == 0) d = descs[blockIdx.z];
  __syncthreads();
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= d.out_w || y >= d.out_h) return;
  int oy = d.flip_y ? (int)d.out_h - 1 - y : y;  // flipped axes: the unflipped output, mirrored
  int ox = d.flip_x ? (int)d.out_w - 1 - x : x;
  int ky = (int)d.kind_y, kx = (int)d.kind_x;
  int ny = ky ? (int)d.taps_y : 1, nx = kx ? (int)d.taps_x : 1;
  int fy, fx;
  float f0y, f0x;
  axis_setup(ky, (float)d.lo_y, (float)d.scale_y, (float)d.anchor_y, oy, fy, f0y);
  axis_setup(kx, (float)d.lo_x, (float)d.scale_x, (float)d.anchor_x, ox, fx, f0x);
  const float *tab_y = tables + d.tab_y, *tab_x = tables + d.tab_x;
  int tny = (int)d.tab_n_y, tnx = (int)d.tab_n_x;
  float tsy = (float)d.tscale_y, tsx = (float)d.tscale_x;
  float sum_y = 0.f, sum_x = 0.f;
  if (ky) for (int a = 0; a < ny; a++) sum_y += tab_w(tab_y, tny, f0y, a, tsy);
  if (kx) for (int b = 0; b < nx; b++) sum_x += tab_w(tab_x, tnx, f0x, b, tsx);
  float iy_n = ky ? (sum_y != 0.f ? 1.f / sum_y : 0.f) : 1.f;
  float ix_n = kx ? (sum_x != 0.f ? 1.f / sum_x : 0.f) : 1.f;
  int H = (int)d.in_h, W = (int)d.in_w;
  const Tin *in = reinterpret_cast<const Tin *>(d.in_ptr);
  Tout *out = reinterpret_cast<Tout *>(d.out_ptr) + ((long long)y * d.out_w + x) * C;
  for (int c0 = 0; c0 < C; c0 += MAXC) {
    int nc = min(MAXC, C - c0);
    float acc[MAXC] = {0.f, 0.f, 0.f, 0.f};
    for (int a = 0; a < ny; a++) {
      float wy = ky ? tab_w(tab_y, tny, f0y, a, tsy) * iy_n : 1.f;
      if (wy == 0.f) continue;
      int iy = fy + a;
      iy = iy < 0 ? 0 : (iy >= H ? H - 1 : iy);
      float row[MAXC] = {0.f, 0.f, 0.f, 0.f};
      const Tin *p = in + iy * d.in_sy + c0;
      for (int b = 0; b < nx; b++) {
        float wx = kx ? tab_w(tab_x, tnx, f0x, b, tsx) * ix_n : 1.f;
        int ix = fx + b;
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
