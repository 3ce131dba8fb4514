// _lookup_stats: the automatic augmentations' value-wise maps of uint8 data (a static table,
// brightness, contrast, auto_contrast, equalize), one 256-entry table per plane (sample, frame,
// channel). The histograms come from equalize.cu's equalize_hist and the lookup is its
// equalize_apply; this file builds the tables: one block of 256 threads per plane, thread t
// computing the entry of value t, in the float32 arithmetic of each augmentation's own GPU
// operators (so that the fused and the unfused outputs are equal).
#include "common.cuh"

struct PointDesc {
  long long first;   // the histogram plane of the frame's channel 0
  long long pixels;  // values per plane
  double norm;       // 1 / pixels (the mean's factor, as reductions.mean has it)
  float param;       // brightness / contrast factor
  int kind;          // PS_TABLE ... PS_EQUALIZE
  int row;           // the static table's row (PS_TABLE)
  int channels;      // channels of the frame (1 or 3 for contrast)
  int channel;       // this plane's channel
  int pad;
};

#define PS_BINS 256
#define PS_TABLE 0
#define PS_BRIGHTNESS 1
#define PS_CONTRAST 2
#define PS_AUTO_CONTRAST 3
#define PS_EQUALIZE 4

// float -> uint8 as Conv<uint8> (cast, cast_like, brightness): round half to even, saturate
__device__ __forceinline__ unsigned char ps_to_u8(float v) {
  float r = rintf(v);
  r = r < 0.f ? 0.f : (r > 255.f ? 255.f : r);
  return (unsigned char)r;
}

// The kind is the block's: every branch below is taken by all its threads or by none.
extern "C" __global__ void point_lut(const PointDesc *__restrict__ descs,
                                     const unsigned int *__restrict__ hist,
                                     const unsigned char *__restrict__ table,
                                     unsigned char *__restrict__ lut, float w0, float w1,
                                     float w2) {
  __shared__ unsigned long long cdf[PS_BINS];
  __shared__ unsigned long long sums[3];
  __shared__ int lo, hi, first_bin;
  const PointDesc d = descs[blockIdx.x];
  const int t = threadIdx.x;
  unsigned char *out = lut + (long long)blockIdx.x * PS_BINS;
  if (d.kind == PS_TABLE) {
    out[t] = table[(long long)d.row * PS_BINS + t];
    return;
  }
  if (d.kind == PS_BRIGHTNESS) {  // slice_normalize's (in - 0) * mul + 0, mul = brightness
    out[t] = ps_to_u8(__fmul_rn((float)t, d.param));
    return;
  }
  const unsigned int *h = hist + (d.first + d.channel) * PS_BINS;
  if (d.kind == PS_CONTRAST) {
    // reductions.mean: the exact sum (in double) times 1/n, stored as float; mean * weight in
    // float; reductions.sum of the three products: in double, in order, stored as float
    if (t < 3) sums[t] = 0ull;
    __syncthreads();
    for (int c = 0; c < d.channels; c++) {
      unsigned long long v = (unsigned long long)hist[(d.first + c) * PS_BINS + t] * t;
      if (v) atomicAdd(&sums[c], v);
    }
    __syncthreads();
    const float m0 = (float)((double)sums[0] * d.norm);
    const float m1 = d.channels == 1 ? m0 : (float)((double)sums[1] * d.norm);
    const float m2 = d.channels == 1 ? m0 : (float)((double)sums[2] * d.norm);
    double acc = 0.0;
    acc = __dadd_rn(acc, (double)__fmul_rn(m0, w0));
    acc = __dadd_rn(acc, (double)__fmul_rn(m1, w1));
    acc = __dadd_rn(acc, (double)__fmul_rn(m2, w2));
    const float center = (float)acc;
    // the expression kernel's `center + (data - center) * parameter` (the same source form,
    // so the same contraction), then cast_like
    const float x = (float)t;
    out[t] = ps_to_u8(center + (x - center) * d.param);
    return;
  }
  if (d.kind == PS_AUTO_CONTRAST) {
    if (t == 0) {
      lo = PS_BINS;
      hi = -1;
    }
    __syncthreads();
    if (h[t]) {
      atomicMin(&lo, t);
      atomicMax(&hi, t);
    }
    __syncthreads();
    // diff = hi - lo; scale = 255 / (diff or 255); (data - lo * (diff > 0)) * scale (uint8
    // subtraction, float32 product), then cast_like
    const int diff = hi - lo;
    const int shift = diff > 0 ? lo : 0;
    const float scale = __fdiv_rn(255.f, (float)(diff > 0 ? diff : 255));
    out[t] = ps_to_u8(__fmul_rn((float)(unsigned char)(t - shift), scale));
    return;
  }
  // PS_EQUALIZE: equalize.cu's equalize_lut (common.cuh's equalize_table_value)
  out[t] = equalize_table_value(h[t], t, cdf, &first_bin);
}
