// fn.color_space_conversion on uint8 pixels, every sample in one launch (blockIdx.z = sample).
// CODE (see operators/color_space_conversion.py): 0 RGB<->BGR, 1 RGB->GRAY, 2 BGR->GRAY,
// 3 GRAY->RGB/BGR, 4 RGB->YCbCr, 5 BGR->YCbCr, 6 YCbCr->RGB, 7 YCbCr->BGR, 8 GRAY->YCbCr,
// 9 YCbCr->GRAY. DALI's float32 formulas, computed without FMA in the CPU implementation's
// order; results round half away from zero and saturate. RGB->GRAY is DALI's GPU formula
// (float 0.299/0.587/0.114); the CPU uses OpenCV's fixed point, as DALI's CPU operator does.
#include "common.cuh"

struct ColorDesc {
  long long in_ptr, out_ptr, npixels;
};

__device__ __forceinline__ uint8 sat_u8(float v) {
  v = roundf(v);
  return (uint8)(v < 0.f ? 0.f : (v > 255.f ? 255.f : v));
}

__device__ __forceinline__ float dot3(float a, float b, float c, float r, float g, float bl) {
  return __fadd_rn(__fadd_rn(__fmul_rn(a, r), __fmul_rn(b, g)), __fmul_rn(c, bl));
}

template <int CODE>
__global__ void color_space_convert(const ColorDesc *descs) {
  const ColorDesc &d = descs[blockIdx.z];
  const uint8 *in = reinterpret_cast<const uint8 *>(d.in_ptr);
  uint8 *out = reinterpret_cast<uint8 *>(d.out_ptr);
  for (long long p = blockIdx.x * (long long)blockDim.x + threadIdx.x; p < d.npixels;
       p += (long long)gridDim.x * blockDim.x) {
    if (CODE == 3) {
      uint8 v = in[p];
      out[3 * p] = v; out[3 * p + 1] = v; out[3 * p + 2] = v;
      continue;
    }
    if (CODE == 8) {
      const float scale = __fadd_rn(__fadd_rn(0.257f, 0.504f), 0.098f);
      out[3 * p] = sat_u8(__fadd_rn(__fmul_rn((float)in[p], scale), 0.0625f));
      out[3 * p + 1] = 128; out[3 * p + 2] = 128;
      continue;
    }
    const float x0 = in[3 * p], x1 = in[3 * p + 1], x2 = in[3 * p + 2];
    if (CODE == 0) {
      out[3 * p] = in[3 * p + 2]; out[3 * p + 1] = in[3 * p + 1]; out[3 * p + 2] = in[3 * p];
    } else if (CODE == 1 || CODE == 2) {
      float r = CODE == 1 ? x0 : x2, b = CODE == 1 ? x2 : x0;
      out[p] = sat_u8(dot3(0.299f, 0.587f, 0.114f, r, x1, b));
    } else if (CODE == 4 || CODE == 5) {
      float r = CODE == 4 ? x0 : x2, g = x1, b = CODE == 4 ? x2 : x0;
      out[3 * p] = sat_u8(__fadd_rn(dot3(0.257f, 0.504f, 0.098f, r, g, b), 16.f));
      if (r == g && r == b) {
        out[3 * p + 1] = 128; out[3 * p + 2] = 128;
      } else {
        out[3 * p + 1] = sat_u8(__fadd_rn(dot3(-0.148f, -0.291f, 0.439f, r, g, b), 128.f));
        out[3 * p + 2] = sat_u8(__fadd_rn(dot3(0.439f, -0.368f, -0.071f, r, g, b), 128.f));
      }
    } else if (CODE == 6 || CODE == 7) {
      float ty = __fmul_rn(1.164f, __fsub_rn(x0, 16.f));
      float tb = __fsub_rn(x1, 128.f), tr = __fsub_rn(x2, 128.f);
      float r = __fadd_rn(ty, __fmul_rn(1.596f, tr));
      float g = __fsub_rn(__fsub_rn(ty, __fmul_rn(0.813f, tr)), __fmul_rn(0.392f, tb));
      float b = __fadd_rn(ty, __fmul_rn(2.017f, tb));
      out[3 * p] = sat_u8(CODE == 6 ? r : b);
      out[3 * p + 1] = sat_u8(g);
      out[3 * p + 2] = sat_u8(CODE == 6 ? b : r);
    } else if (CODE == 9) {
      const float scale = __fdiv_rn(1.f, __fadd_rn(__fadd_rn(0.257f, 0.504f), 0.098f));
      out[p] = sat_u8(__fmul_rn(scale, __fsub_rn(x0, 16.f)));
    }
  }
}
