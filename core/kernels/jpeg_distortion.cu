// fn.jpeg_compression_distortion on the GPU: the lossy steps of libjpeg(-turbo)'s baseline 4:2:0
// encoder and decoder, in the same integer arithmetic, so that the result is the CPU operator's
// (OpenCV's libjpeg-turbo round trip) bit for bit. Only the entropy coding, which is lossless,
// is left out. The steps and their libjpeg-turbo sources:
//   RGB to YCbCr, 16-bit fixed point (jccolor.c); edge pixels repeated past the right and
//   bottom edges (jcsample.c expand_right_edge, jcprepct.c expand_bottom_edge);
//   2x2 chroma average with the bias 1, 2, 1, 2, ... along a row (jcsample.c h2v2_downsample);
//   chroma rows past the last one repeat the last chroma row, they are not averaged from
//   repeated pixels (jcprepct.c pads the downsampled rows to the 16-row MCU);
//   level shift, the LL&M integer forward DCT (jfdctint.c), quantisation (jcdctmgr.c),
//   dequantisation, the LL&M integer inverse DCT with its range-limit table (jidctint.c,
//   jdmaster.c);
//   chroma upsampling with the triangle filter and the biases 8 (even columns) and 7 (odd
//   columns) (jdsample.c h2v2_fancy_upsample), or by repetition when the chroma is at most 2
//   samples wide (h2v2_upsample); YCbCr to RGB in 16-bit fixed point (jdcolor.c).
// Pass 1 (jpeg_blocks, one 256-thread block per 16x16 MCU, blockIdx.z = sample) writes the
// decoded Y plane and the half-resolution Cb and Cr planes; pass 2 (jpeg_compose, one thread per
// pixel) upsamples the chroma and converts back to RGB.
#include "common.cuh"

struct JpegDesc {
  long long in_ptr, out_ptr, y_ptr, c_ptr;  // c_ptr: the Cb plane, then the Cr plane
  long long h, w;
  int quant[2][64];  // the quantisation tables (0: luma, 1: chroma), row-major
};

#define FIX_0_298631336 2446
#define FIX_0_390180644 3196
#define FIX_0_541196100 4433
#define FIX_0_765366865 6270
#define FIX_0_899976223 7373
#define FIX_1_175875602 9633
#define FIX_1_501321110 12299
#define FIX_1_847759065 15137
#define FIX_1_961570560 16069
#define FIX_2_053119869 16819
#define FIX_2_562915447 20995
#define FIX_3_072711026 25172

__device__ __forceinline__ long long descale(long long x, int n) {
  return (x + (1LL << (n - 1))) >> n;  // arithmetic shift: rounds towards minus infinity
}

// jpeg_fdct_islow, one 8-point pass over p[0], p[stride], ... (CONST_BITS 13, PASS1_BITS 2).
// Rows first (pass1: results scaled by 4), then columns (results scaled by 8 overall).
__device__ void fdct_1d(int *p, int stride, bool pass1) {
  const long long d0 = p[0], d1 = p[stride], d2 = p[2 * stride], d3 = p[3 * stride];
  const long long d4 = p[4 * stride], d5 = p[5 * stride], d6 = p[6 * stride], d7 = p[7 * stride];
  long long tmp0 = d0 + d7, tmp7 = d0 - d7, tmp1 = d1 + d6, tmp6 = d1 - d6;
  long long tmp2 = d2 + d5, tmp5 = d2 - d5, tmp3 = d3 + d4, tmp4 = d3 - d4;
  const long long tmp10 = tmp0 + tmp3, tmp13 = tmp0 - tmp3, tmp11 = tmp1 + tmp2,
                  tmp12 = tmp1 - tmp2;
  const int n = pass1 ? 13 - 2 : 13 + 2;
  p[0] = (int)(pass1 ? (tmp10 + tmp11) * 4 : descale(tmp10 + tmp11, 2));
  p[4 * stride] = (int)(pass1 ? (tmp10 - tmp11) * 4 : descale(tmp10 - tmp11, 2));
  long long z1 = (tmp12 + tmp13) * FIX_0_541196100;
  p[2 * stride] = (int)descale(z1 + tmp13 * FIX_0_765366865, n);
  p[6 * stride] = (int)descale(z1 - tmp12 * FIX_1_847759065, n);
  z1 = tmp4 + tmp7;
  long long z2 = tmp5 + tmp6, z3 = tmp4 + tmp6, z4 = tmp5 + tmp7;
  const long long z5 = (z3 + z4) * FIX_1_175875602;
  tmp4 *= FIX_0_298631336;
  tmp5 *= FIX_2_053119869;
  tmp6 *= FIX_3_072711026;
  tmp7 *= FIX_1_501321110;
  z1 *= -FIX_0_899976223;
  z2 *= -FIX_2_562915447;
  z3 = z3 * -FIX_1_961570560 + z5;
  z4 = z4 * -FIX_0_390180644 + z5;
  p[7 * stride] = (int)descale(tmp4 + z1 + z3, n);
  p[5 * stride] = (int)descale(tmp5 + z2 + z4, n);
  p[3 * stride] = (int)descale(tmp6 + z2 + z3, n);
  p[stride] = (int)descale(tmp7 + z1 + z4, n);
}

// libjpeg's post-IDCT range limit: the table index is masked to 10 bits, so that values in
// [-512, 511] clamp to [0, 255] and those further out wrap as libjpeg's do.
__device__ __forceinline__ int range_limit(long long v) {
  const int m = (int)(v & 1023);
  return m < 128 ? m + 128 : (m < 512 ? 255 : (m < 896 ? 0 : m - 896));
}

// jpeg_idct_islow, one 8-point pass over dequantised coefficients: columns first (first: results
// scaled by 4), then rows (range-limited samples 0..255).
__device__ void idct_1d(int *p, int stride, bool first) {
  long long z2 = p[2 * stride], z3 = p[6 * stride];
  long long z1 = (z2 + z3) * FIX_0_541196100;
  long long tmp2 = z1 - z3 * FIX_1_847759065, tmp3 = z1 + z2 * FIX_0_765366865;
  long long tmp0 = ((long long)p[0] + p[4 * stride]) * 8192;  // << CONST_BITS
  long long tmp1 = ((long long)p[0] - p[4 * stride]) * 8192;
  const long long tmp10 = tmp0 + tmp3, tmp13 = tmp0 - tmp3, tmp11 = tmp1 + tmp2,
                  tmp12 = tmp1 - tmp2;
  tmp0 = p[7 * stride];
  tmp1 = p[5 * stride];
  tmp2 = p[3 * stride];
  tmp3 = p[stride];
  z1 = tmp0 + tmp3;
  z2 = tmp1 + tmp2;
  z3 = tmp0 + tmp2;
  long long z4 = tmp1 + tmp3;
  const long long z5 = (z3 + z4) * FIX_1_175875602;
  tmp0 *= FIX_0_298631336;
  tmp1 *= FIX_2_053119869;
  tmp2 *= FIX_3_072711026;
  tmp3 *= FIX_1_501321110;
  z1 *= -FIX_0_899976223;
  z2 *= -FIX_2_562915447;
  z3 = z3 * -FIX_1_961570560 + z5;
  z4 = z4 * -FIX_0_390180644 + z5;
  tmp0 += z1 + z3;
  tmp1 += z2 + z4;
  tmp2 += z2 + z3;
  tmp3 += z1 + z4;
  const long long v[8] = {tmp10 + tmp3, tmp11 + tmp2, tmp12 + tmp1, tmp13 + tmp0,
                          tmp13 - tmp0, tmp12 - tmp1, tmp11 - tmp2, tmp10 - tmp3};
  for (int k = 0; k < 8; k++)
    p[k * stride] = first ? (int)descale(v[k], 13 - 2) : range_limit(descale(v[k], 13 + 2 + 3));
}

__global__ void jpeg_blocks(const JpegDesc *descs) {
  const JpegDesc &d = descs[blockIdx.z];
  const long long mx = blockIdx.x, my = blockIdx.y;
  if (mx * 16 >= d.w || my * 16 >= d.h) return;  // the whole block leaves together
  __shared__ int sCb[256], sCr[256];
  __shared__ int blk[6][64];  // 4 luma blocks (row-major in the MCU), Cb, Cr
  const int t = threadIdx.x;
  const int ty = t / 16, tx = t % 16;
  const long long y = min(my * 16 + ty, d.h - 1), x = min(mx * 16 + tx, d.w - 1);
  const uint8 *p = reinterpret_cast<const uint8 *>(d.in_ptr) + (y * d.w + x) * 3;
  const int R = p[0], G = p[1], B = p[2];
  // jccolor.c: FIX(c) = round(c * 65536); Cb and Cr round with ONE_HALF - 1
  const int Y = (19595 * R + 38470 * G + 7471 * B + 32768) >> 16;
  sCb[t] = (-11059 * R - 21709 * G + 32768 * B + (128 << 16) + 32767) >> 16;
  sCr[t] = (32768 * R - 27439 * G - 5329 * B + (128 << 16) + 32767) >> 16;
  blk[(ty / 8) * 2 + tx / 8][(ty % 8) * 8 + tx % 8] = Y - 128;
  __syncthreads();
  if (t < 64) {
    // chroma rows past the last one, ceil(h / 2) - 1, repeat it (in this MCU: at least one
    // chroma row of the MCU is inside the image)
    const int last = (int)((d.h + 1) / 2 - 1 - my * 8);
    const int r = min(t / 8, last), c = t % 8, i = 2 * r * 16 + 2 * c;
    const int bias = ((mx * 8 + c) & 1) ? 2 : 1;
    blk[4][t] = ((sCb[i] + sCb[i + 1] + sCb[i + 16] + sCb[i + 17] + bias) >> 2) - 128;
    blk[5][t] = ((sCr[i] + sCr[i + 1] + sCr[i + 16] + sCr[i + 17] + bias) >> 2) - 128;
  }
  __syncthreads();
  if (t < 48) fdct_1d(&blk[t / 8][(t % 8) * 8], 1, true);  // rows
  __syncthreads();
  if (t < 48) fdct_1d(&blk[t / 8][t % 8], 8, false);  // columns
  __syncthreads();
  // Quantise (jcdctmgr.c: the DCT output is 8x the coefficient, so the divisor is 8 x the table
  // value; halves round away from zero; libjpeg-turbo's multiplication by reciprocals gives
  // this quotient for every 16-bit input) and dequantise (jddctmgr.c).
  for (int i = t; i < 384; i += 256) {
    const int b = i / 64, k = i % 64, qv = d.quant[b < 4 ? 0 : 1][k];
    const int v = blk[b][k], div = 8 * qv;
    const int q = ((v < 0 ? -v : v) + div / 2) / div;
    blk[b][k] = (v < 0 ? -q : q) * qv;
  }
  __syncthreads();
  if (t < 48) idct_1d(&blk[t / 8][t % 8], 8, true);  // columns
  __syncthreads();
  if (t < 48) idct_1d(&blk[t / 8][(t % 8) * 8], 1, false);  // rows, to samples
  __syncthreads();
  const long long oy = my * 16 + ty, ox = mx * 16 + tx;
  if (oy < d.h && ox < d.w)
    reinterpret_cast<uint8 *>(d.y_ptr)[oy * d.w + ox] =
        (uint8)blk[(ty / 8) * 2 + tx / 8][(ty % 8) * 8 + tx % 8];
  if (t < 64) {
    const long long ch = (d.h + 1) / 2, cw = (d.w + 1) / 2;
    const long long cy = my * 8 + t / 8, cx = mx * 8 + t % 8;
    if (cy < ch && cx < cw) {
      uint8 *cp = reinterpret_cast<uint8 *>(d.c_ptr);
      cp[cy * cw + cx] = (uint8)blk[4][t];
      cp[ch * cw + cy * cw + cx] = (uint8)blk[5][t];
    }
  }
}

// h2v2_fancy_upsample: 9/16 of the nearest chroma sample, 3/16 of each next nearest and 1/16 of
// the diagonal one, with the bias 8 on even output columns and 7 on odd ones.
__device__ __forceinline__ int fancy(const uint8 *c, long long cw, long long ny, long long fy,
                                     long long nx, long long fx, int bias) {
  return (9 * c[ny * cw + nx] + 3 * c[ny * cw + fx] + 3 * c[fy * cw + nx] + c[fy * cw + fx] +
          bias) >> 4;
}

__device__ __forceinline__ uint8 clamp_sample(int v) {
  return (uint8)(v < 0 ? 0 : (v > 255 ? 255 : v));
}

__global__ void jpeg_compose(const JpegDesc *descs) {
  const JpegDesc &d = descs[blockIdx.z];
  const long long x = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  const long long y = blockIdx.y * (long long)blockDim.y + threadIdx.y;
  if (x >= d.w || y >= d.h) return;
  const long long ch = (d.h + 1) / 2, cw = (d.w + 1) / 2;
  const long long ny = y / 2, nx = x / 2;
  const uint8 *cb_p = reinterpret_cast<const uint8 *>(d.c_ptr);
  const uint8 *cr_p = cb_p + ch * cw;
  int cb, cr;
  if (cw > 2) {
    long long fy = ny + ((y & 1) ? 1 : -1), fx = nx + ((x & 1) ? 1 : -1);
    fy = fy < 0 ? 0 : (fy >= ch ? ch - 1 : fy);
    fx = fx < 0 ? 0 : (fx >= cw ? cw - 1 : fx);
    const int bias = (x & 1) ? 7 : 8;
    cb = fancy(cb_p, cw, ny, fy, nx, fx, bias) - 128;
    cr = fancy(cr_p, cw, ny, fy, nx, fx, bias) - 128;
  } else {  // libjpeg-turbo upsamples chroma of width <= 2 by repetition (h2v2_upsample)
    cb = cb_p[ny * cw + nx] - 128;
    cr = cr_p[ny * cw + nx] - 128;
  }
  const int Y = reinterpret_cast<const uint8 *>(d.y_ptr)[y * d.w + x];
  uint8 *o = reinterpret_cast<uint8 *>(d.out_ptr) + (y * d.w + x) * 3;
  // jdcolor.c: FIX(1.402) = 91881, FIX(1.772) = 116130, FIX(0.34414) = 22554,
  // FIX(0.71414) = 46802; ONE_HALF = 32768
  o[0] = clamp_sample(Y + ((91881 * cr + 32768) >> 16));
  o[1] = clamp_sample(Y + ((-22554 * cb + 32768 - 46802 * cr) >> 16));
  o[2] = clamp_sample(Y + ((116130 * cb + 32768) >> 16));
}
