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

// The taps of one axis at output coordinate o: the first input index and the weights,
// normalised to sum 1 (the nearest filter: one tap of weight 1). Sum and products in the order
// of operators/resize.py.
template <int MAXT>
__device__ __forceinline__ void axis_taps(int kind, int n, float lo, float scale, float anchor,
                                          const float *__restrict__ tab, int tn, float ts, int o,
                                          int &first, float (&w)[MAXT]) {
  float f0;
  axis_setup(kind, lo, scale, anchor, o, first, f0);
  if (!kind) {
    w[0] = 1.f;
    return;
  }
  float sum = 0.f;
#pragma unroll
  for (int k = 0; k < MAXT; k++)
    if (k < n) {
      w[k] = tab_w(tab, tn, f0, k, ts);
      sum += w[k];
    }
  const float inv = sum != 0.f ? 1.f / sum : 0.f;
#pragma unroll
  for (int k = 0; k < MAXT; k++)
    if (k < n) w[k] *= inv;
}

// Output rows per thread: the x taps (weights and offsets) are computed once per column and
// reused down the rows.
#define ROWS 4

// MAXT > 0: every filter of the batch has at most MAXT taps per axis, and each thread keeps its
// weights in registers (the launcher picks 2, 4 or 8; a 16 instance measured no faster than
// the generic one). MAXT == 0: any width, each weight recomputed per tap.
// NC: the channel count when 1, 3 or 4, else 0 (read from C).
template <typename Tin, typename Tout, int MAXT, int NC>
__global__ void resize_filter(const ResizeDesc *__restrict__ descs,
                              const float *__restrict__ tables, int C_) {
  __shared__ ResizeDesc d;  // one load per block (see slice.cu)
  if (threadIdx.x == 0 && threadIdx.y == 0) d = descs[blockIdx.z];
  __syncthreads();
  const int C = NC ? NC : C_;
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y0 = (blockIdx.y * blockDim.y + threadIdx.y) * ROWS;
  const int out_h = (int)d.out_h, out_w = (int)d.out_w;
  if (x >= out_w || y0 >= out_h) return;
  const int ox = d.flip_x ? out_w - 1 - x : x;  // flipped axes: the unflipped output, mirrored
  const int ky = (int)d.kind_y, kx = (int)d.kind_x;
  const int ny = ky ? (int)d.taps_y : 1, nx = kx ? (int)d.taps_x : 1;
  const float *tab_y = tables + d.tab_y, *tab_x = tables + d.tab_x;
  const int tny = (int)d.tab_n_y, tnx = (int)d.tab_n_x;
  const float tsy = (float)d.tscale_y, tsx = (float)d.tscale_x;
  const float lo_y = (float)d.lo_y, scale_y = (float)d.scale_y, anchor_y = (float)d.anchor_y;
  const int H = (int)d.in_h, W = (int)d.in_w;
  const long long in_sy = d.in_sy;
  const int in_sx = (int)d.in_sx;
  const Tin *in = reinterpret_cast<const Tin *>(d.in_ptr);

  constexpr int T = MAXT ? MAXT : 1;
  float wx[T];
  int offx[T];
  int fx;
  float f0x = 0.f, ix_n = 1.f;
  if constexpr (MAXT > 0) {
    axis_taps<T>(kx, nx, (float)d.lo_x, (float)d.scale_x, (float)d.anchor_x, tab_x, tnx, tsx, ox,
                 fx, wx);
#pragma unroll
    for (int b = 0; b < T; b++) {
      int ix = fx + b;
      offx[b] = (ix < 0 ? 0 : (ix >= W ? W - 1 : ix)) * in_sx;
    }
  } else {
    axis_setup(kx, (float)d.lo_x, (float)d.scale_x, (float)d.anchor_x, ox, fx, f0x);
    float sum_x = 0.f;
    if (kx) for (int b = 0; b < nx; b++) sum_x += tab_w(tab_x, tnx, f0x, b, tsx);
    ix_n = kx ? (sum_x != 0.f ? 1.f / sum_x : 0.f) : 1.f;
  }

  for (int r = 0; r < ROWS; r++) {
    const int y = y0 + r;
    if (y >= out_h) break;
    const int oy = d.flip_y ? out_h - 1 - y : y;
    Tout *out = reinterpret_cast<Tout *>(d.out_ptr) + ((long long)y * out_w + x) * C;
    int fy;
    float wy[T];
    float f0y = 0.f, iy_n = 1.f;
    if constexpr (MAXT > 0) {
      axis_taps<T>(ky, ny, lo_y, scale_y, anchor_y, tab_y, tny, tsy, oy, fy, wy);
    } else {
      axis_setup(ky, lo_y, scale_y, anchor_y, oy, fy, f0y);
      float sum_y = 0.f;
      if (ky) for (int a = 0; a < ny; a++) sum_y += tab_w(tab_y, tny, f0y, a, tsy);
      iy_n = ky ? (sum_y != 0.f ? 1.f / sum_y : 0.f) : 1.f;
    }
    for (int c0 = 0; c0 < C; c0 += MAXC) {
      const int nc = min(MAXC, C - c0);
      float acc[MAXC] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int a = 0; a < (MAXT ? MAXT : ny); a++) {
        if (MAXT && a >= ny) break;
        const float w_y =
            MAXT ? wy[MAXT ? a : 0] : (ky ? tab_w(tab_y, tny, f0y, a, tsy) * iy_n : 1.f);
        if (w_y == 0.f) continue;
        int iy = fy + a;
        iy = iy < 0 ? 0 : (iy >= H ? H - 1 : iy);
        const Tin *p = in + iy * in_sy + c0;
        float row[MAXC] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int b = 0; b < (MAXT ? MAXT : nx); b++) {
          if (MAXT && b >= nx) break;
          float w_x;
          const Tin *q;
          if constexpr (MAXT > 0) {
            w_x = wx[b];
            q = p + offx[b];
          } else {
            w_x = kx ? tab_w(tab_x, tnx, f0x, b, tsx) * ix_n : 1.f;
            int ix = fx + b;
            q = p + (ix < 0 ? 0 : (ix >= W ? W - 1 : ix)) * in_sx;
          }
#pragma unroll
          for (int c = 0; c < MAXC; c++)
            if (c < nc) row[c] += w_x * load_f(q + c);
        }
#pragma unroll
        for (int c = 0; c < MAXC; c++) acc[c] += w_y * row[c];
      }
#pragma unroll
      for (int c = 0; c < MAXC; c++)
        if (c < nc) out[c0 + c] = Conv<Tout>::to(acc[c]);
    }
  }
}
