// fn.warp_affine / fn.rotate: affine warps of 2-D images and 3-D volumes, channels last, one
// launch per batch (blockIdx.z = sample, or frame of a sequence).
//
// The arithmetic reproduces the CPU implementation (operators/_warp.py) operation by
// operation, in float32 without FMA contraction (__fmul_rn / __fadd_rn), so GPU and CPU give
// identical results: src = (m[.,nd] + m[.,0] * (x + 0.5)) + m[.,1] * (y + 0.5) [+ m[.,2] * (z + 0.5)];
// nearest neighbour takes floor(src); linear blends the neighbours of src - 0.5. Integer
// outputs round half away from zero (roundf) and saturate, as the CPU's ConvertSat.
#include "common.cuh"

struct WarpDesc {
  long long in_ptr, out_ptr;
  long long in_size[3];     // x, y, z extents
  long long in_stride[3];   // elements between neighbours along x, y, z (channels: stride 1)
  long long out_size[3];
  long long out_stride[3];
  long long channels;
  long long mat_index;      // the sample's row in `mats` (when the matrices are on the device)
  float m[12];              // destination -> source, row-major nd x (nd + 1)
  double border_out;        // fill value as the output type (nearest neighbour)
  double border_in;         // ... then as the input type (a neighbour of linear interpolation)
};

template <typename T> struct WarpIsInt { static constexpr bool value = true; };
template <> struct WarpIsInt<float> { static constexpr bool value = false; };
template <> struct WarpIsInt<double> { static constexpr bool value = false; };

template <typename Out>
__device__ __forceinline__ Out warp_store(float v) {
  return Conv<Out>::to(WarpIsInt<Out>::value ? roundf(v) : v);
}

// The affine inverse (in double) of a row-major nd x (nd + 1) matrix, into float.
template <int NDIM>
__device__ void invert_affine(const float *in, float *out) {
  if (NDIM == 2) {
    double a = in[0], b = in[1], e = in[2], c = in[3], d = in[4], f = in[5];
    double det = a * d - b * c;
    double ia = d / det, ib = -b / det, ic = -c / det, id = a / det;
    out[0] = (float)ia; out[1] = (float)ib; out[2] = (float)(-(ia * e + ib * f));
    out[3] = (float)ic; out[4] = (float)id; out[5] = (float)(-(ic * e + id * f));
  } else {
    double A[3][3], t[3], R[3][3];
    for (int i = 0; i < 3; i++) {
      for (int j = 0; j < 3; j++) A[i][j] = in[i * 4 + j];
      t[i] = in[i * 4 + 3];
    }
    R[0][0] = A[1][1] * A[2][2] - A[1][2] * A[2][1];
    R[0][1] = A[0][2] * A[2][1] - A[0][1] * A[2][2];
    R[0][2] = A[0][1] * A[1][2] - A[0][2] * A[1][1];
    R[1][0] = A[1][2] * A[2][0] - A[1][0] * A[2][2];
    R[1][1] = A[0][0] * A[2][2] - A[0][2] * A[2][0];
    R[1][2] = A[0][2] * A[1][0] - A[0][0] * A[1][2];
    R[2][0] = A[1][0] * A[2][1] - A[1][1] * A[2][0];
    R[2][1] = A[0][1] * A[2][0] - A[0][0] * A[2][1];
    R[2][2] = A[0][0] * A[1][1] - A[0][1] * A[1][0];
    double det = A[0][0] * R[0][0] + A[0][1] * R[1][0] + A[0][2] * R[2][0];
    for (int i = 0; i < 3; i++) {
      double ti = 0;
      for (int j = 0; j < 3; j++) {
        double r = R[i][j] / det;
        out[i * 4 + j] = (float)r;
        ti -= r * t[j];
      }
      out[i * 4 + 3] = (float)ti;
    }
  }
}

template <typename In, bool CLAMP>
__device__ __forceinline__ float warp_tap(const WarpDesc &d, const In *in, long long x,
                                          long long y, long long z, long long c) {
  if (CLAMP) {
    x = x < 0 ? 0 : (x >= d.in_size[0] ? d.in_size[0] - 1 : x);
    y = y < 0 ? 0 : (y >= d.in_size[1] ? d.in_size[1] - 1 : y);
    z = z < 0 ? 0 : (z >= d.in_size[2] ? d.in_size[2] - 1 : z);
  } else if (x < 0 || x >= d.in_size[0] || y < 0 || y >= d.in_size[1] || z < 0 ||
             z >= d.in_size[2]) {
    return (float)d.border_in;
  }
  return load_f(in + x * d.in_stride[0] + y * d.in_stride[1] + z * d.in_stride[2] + c);
}

// floor(v) clipped to [lo, hi] in float first (no overflow for huge coordinates)
__device__ __forceinline__ long long floor_clip(float v, float lo, float hi) {
  return (long long)fminf(fmaxf(floorf(v), lo), hi);
}

template <typename In, typename Out, int NDIM, int INTERP, bool CLAMP>
__global__ void warp_affine(const WarpDesc *descs, const float *mats, int invert) {
  const WarpDesc &d = descs[blockIdx.z];
  const long long x = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  const long long y = blockIdx.y * (long long)blockDim.y + threadIdx.y;
  if (x >= d.out_size[0] || y >= d.out_size[1]) return;
  constexpr int NM = NDIM * (NDIM + 1);
  float m[NM];
  if (mats) {
    const float *src = mats + d.mat_index * NM;
    if (invert) {
      invert_affine<NDIM>(src, m);
    } else {
      for (int i = 0; i < NM; i++) m[i] = src[i];
    }
  } else {
    for (int i = 0; i < NM; i++) m[i] = d.m[i];
  }
  const In *in = reinterpret_cast<const In *>(d.in_ptr);
  Out *out = reinterpret_cast<Out *>(d.out_ptr);
  const long long C = d.channels;
  const float fx = __fadd_rn((float)x, 0.5f), fy = __fadd_rn((float)y, 0.5f);
  const long long nz = NDIM == 3 ? d.out_size[2] : 1;
  for (long long z = 0; z < nz; z++) {
    const float fz = __fadd_rn((float)z, 0.5f);
    float src[NDIM];
    for (int i = 0; i < NDIM; i++) {
      const float *row = m + i * (NDIM + 1);
      float s = __fadd_rn(__fadd_rn(row[NDIM], __fmul_rn(row[0], fx)), __fmul_rn(row[1], fy));
      if (NDIM == 3) s = __fadd_rn(s, __fmul_rn(row[2], fz));
      src[i] = s;
    }
    Out *o = out + x * d.out_stride[0] + y * d.out_stride[1] + z * d.out_stride[2];
    if (INTERP == 0) {  // nearest neighbour
      long long ix = floor_clip(src[0], -1.f, (float)d.in_size[0]);
      long long iy = floor_clip(src[1], -1.f, (float)d.in_size[1]);
      long long iz = NDIM == 3 ? floor_clip(src[2], -1.f, (float)d.in_size[2]) : 0;
      if (!CLAMP && (ix < 0 || ix >= d.in_size[0] || iy < 0 || iy >= d.in_size[1] || iz < 0 ||
                     iz >= d.in_size[2])) {
        for (long long c = 0; c < C; c++) o[c] = Conv<Out>::to(d.border_out);
      } else {
        ix = ix < 0 ? 0 : (ix >= d.in_size[0] ? d.in_size[0] - 1 : ix);
        iy = iy < 0 ? 0 : (iy >= d.in_size[1] ? d.in_size[1] - 1 : iy);
        iz = iz < 0 ? 0 : (iz >= d.in_size[2] ? d.in_size[2] - 1 : iz);
        const In *p = in + ix * d.in_stride[0] + iy * d.in_stride[1] + iz * d.in_stride[2];
        for (long long c = 0; c < C; c++) {  // in double: int32 values stay exact
          double v = load_d(p + c);
          o[c] = Conv<Out>::to(WarpIsInt<Out>::value ? round(v) : v);
        }
      }
      continue;
    }
    const float vx = __fsub_rn(src[0], 0.5f), vy = __fsub_rn(src[1], 0.5f);
    const float x0f = floorf(vx), y0f = floorf(vy);
    const float qx = __fsub_rn(vx, x0f), qy = __fsub_rn(vy, y0f);
    const float px = __fsub_rn(1.f, qx);
    const long long x0 = floor_clip(vx, -2.f, (float)d.in_size[0]);
    const long long y0 = floor_clip(vy, -2.f, (float)d.in_size[1]);
    if (NDIM == 2) {
      for (long long c = 0; c < C; c++) {
        float s00 = warp_tap<In, CLAMP>(d, in, x0, y0, 0, c);
        float s01 = warp_tap<In, CLAMP>(d, in, x0 + 1, y0, 0, c);
        float s10 = warp_tap<In, CLAMP>(d, in, x0, y0 + 1, 0, c);
        float s11 = warp_tap<In, CLAMP>(d, in, x0 + 1, y0 + 1, 0, c);
        float s0 = __fadd_rn(__fmul_rn(s00, px), __fmul_rn(s01, qx));
        float s1 = __fadd_rn(__fmul_rn(s10, px), __fmul_rn(s11, qx));
        o[c] = warp_store<Out>(__fadd_rn(s0, __fmul_rn(__fsub_rn(s1, s0), qy)));
      }
    } else {
      const float vz = __fsub_rn(src[2], 0.5f);
      const float z0f = floorf(vz);
      const float qz = __fsub_rn(vz, z0f);
      const float py = __fsub_rn(1.f, qy);
      const long long z0 = floor_clip(vz, -2.f, (float)d.in_size[2]);
      for (long long c = 0; c < C; c++) {
        float s000 = warp_tap<In, CLAMP>(d, in, x0, y0, z0, c);
        float s001 = warp_tap<In, CLAMP>(d, in, x0 + 1, y0, z0, c);
        float s010 = warp_tap<In, CLAMP>(d, in, x0, y0 + 1, z0, c);
        float s011 = warp_tap<In, CLAMP>(d, in, x0 + 1, y0 + 1, z0, c);
        float s100 = warp_tap<In, CLAMP>(d, in, x0, y0, z0 + 1, c);
        float s101 = warp_tap<In, CLAMP>(d, in, x0 + 1, y0, z0 + 1, c);
        float s110 = warp_tap<In, CLAMP>(d, in, x0, y0 + 1, z0 + 1, c);
        float s111 = warp_tap<In, CLAMP>(d, in, x0 + 1, y0 + 1, z0 + 1, c);
        float s00 = __fadd_rn(__fmul_rn(s000, px), __fmul_rn(s001, qx));
        float s01 = __fadd_rn(__fmul_rn(s010, px), __fmul_rn(s011, qx));
        float s10 = __fadd_rn(__fmul_rn(s100, px), __fmul_rn(s101, qx));
        float s11 = __fadd_rn(__fmul_rn(s110, px), __fmul_rn(s111, qx));
        float s0 = __fadd_rn(__fmul_rn(s00, py), __fmul_rn(s01, qy));
        float s1 = __fadd_rn(__fmul_rn(s10, py), __fmul_rn(s11, qy));
        o[c] = warp_store<Out>(__fadd_rn(s0, __fmul_rn(__fsub_rn(s1, s0), qz)));
      }
    }
  }
}
