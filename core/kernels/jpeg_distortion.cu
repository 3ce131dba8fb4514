// fn.jpeg_compression_distortion on the GPU: JPEG's lossy steps without the entropy coding.
// Pass 1 (jpeg_blocks, one 256-thread block per 16x16 macroblock, blockIdx.z = sample): RGB to
// YCbCr (JPEG full range, rounded), edge pixels repeated past the image, 2x2 chroma average,
// then for the 4 luma and 2 chroma 8x8 blocks: level shift, float DCT, quantisation with the
// sample's tables (libjpeg's quality scaling), inverse DCT, rounding to 0..255. Writes the
// decoded Y plane and the half-resolution Cb and Cr planes.
// Pass 2 (jpeg_compose, one thread per pixel): libjpeg's triangle ("fancy") chroma upsampling
// and the conversion back to RGB.
#include "common.cuh"

struct JpegDesc {
  long long in_ptr, out_ptr, y_ptr, c_ptr;  // c_ptr: the Cb plane, then the Cr plane
  long long h, w;
  float qy[64], qc[64];
};

__global__ void jpeg_blocks(const JpegDesc *descs) {
  const JpegDesc &d = descs[blockIdx.z];
  const long long mx = blockIdx.x, my = blockIdx.y;
  if (mx * 16 >= d.w || my * 16 >= d.h) return;  // the whole block leaves together
  __shared__ float sY[256], sCb[256], sCr[256];
  __shared__ float blk[6][64], coef[6][64], cosT[64];
  const int t = threadIdx.x;
  if (t < 64) {
    int u = t / 8, x = t % 8;
    cosT[t] = (u == 0 ? 0.70710678118654752f : 1.f) * 0.5f *
              cosf((2 * x + 1) * u * 3.14159265358979f / 16.f);
  }
  const int ty = t / 16, tx = t % 16;
  const long long y = min(my * 16 + ty, d.h - 1), x = min(mx * 16 + tx, d.w - 1);
  const uint8 *p = reinterpret_cast<const uint8 *>(d.in_ptr) + (y * d.w + x) * 3;
  const float R = p[0], G = p[1], B = p[2];
  sY[t] = rintf(0.299f * R + 0.587f * G + 0.114f * B);
  sCb[t] = rintf(-0.168736f * R - 0.331264f * G + 0.5f * B + 128.f);
  sCr[t] = rintf(0.5f * R - 0.418688f * G - 0.081312f * B + 128.f);
  __syncthreads();
  blk[(ty / 8) * 2 + tx / 8][(ty % 8) * 8 + tx % 8] = sY[t] - 128.f;
  if (t < 64) {
    const int r = t / 8, c = t % 8, i = 2 * r * 16 + 2 * c;
    blk[4][t] = floorf((sCb[i] + sCb[i + 1] + sCb[i + 16] + sCb[i + 17] + 2.f) * 0.25f) - 128.f;
    blk[5][t] = floorf((sCr[i] + sCr[i + 1] + sCr[i + 16] + sCr[i + 17] + 2.f) * 0.25f) - 128.f;
  }
  __syncthreads();
  for (int i = t; i < 384; i += 256) {  // forward DCT and quantisation
    const int b = i / 64, k = i % 64, v = k / 8, u = k % 8;
    float s = 0.f;
    for (int yy = 0; yy < 8; yy++) {
      float row = 0.f;
      for (int xx = 0; xx < 8; xx++) row += cosT[u * 8 + xx] * blk[b][yy * 8 + xx];
      s += cosT[v * 8 + yy] * row;
    }
    const float q = b < 4 ? d.qy[k] : d.qc[k];
    coef[b][k] = rintf(s / q) * q;
  }
  __syncthreads();
  for (int i = t; i < 384; i += 256) {  // inverse DCT
    const int b = i / 64, k = i % 64, yy = k / 8, xx = k % 8;
    float s = 0.f;
    for (int v = 0; v < 8; v++) {
      float row = 0.f;
      for (int u = 0; u < 8; u++) row += cosT[u * 8 + xx] * coef[b][v * 8 + u];
      s += cosT[v * 8 + yy] * row;
    }
    blk[b][k] = fminf(fmaxf(rintf(s + 128.f), 0.f), 255.f);
  }
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

__device__ __forceinline__ int fancy(const uint8 *c, long long cw, long long ny, long long fy,
                                     long long nx, long long fx) {
  return (9 * c[ny * cw + nx] + 3 * c[ny * cw + fx] + 3 * c[fy * cw + nx] + c[fy * cw + fx] + 8) >> 4;
}

__global__ void jpeg_compose(const JpegDesc *descs) {
  const JpegDesc &d = descs[blockIdx.z];
  const long long x = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  const long long y = blockIdx.y * (long long)blockDim.y + threadIdx.y;
  if (x >= d.w || y >= d.h) return;
  const long long ch = (d.h + 1) / 2, cw = (d.w + 1) / 2;
  const long long ny = y / 2, nx = x / 2;
  long long fy = ny + ((y & 1) ? 1 : -1), fx = nx + ((x & 1) ? 1 : -1);
  fy = fy < 0 ? 0 : (fy >= ch ? ch - 1 : fy);
  fx = fx < 0 ? 0 : (fx >= cw ? cw - 1 : fx);
  const uint8 *cb_p = reinterpret_cast<const uint8 *>(d.c_ptr);
  const float cb = (float)(fancy(cb_p, cw, ny, fy, nx, fx) - 128);
  const float cr = (float)(fancy(cb_p + ch * cw, cw, ny, fy, nx, fx) - 128);
  const float Y = reinterpret_cast<const uint8 *>(d.y_ptr)[y * d.w + x];
  uint8 *o = reinterpret_cast<uint8 *>(d.out_ptr) + (y * d.w + x) * 3;
  o[0] = (uint8)fminf(fmaxf(rintf(Y + 1.402f * cr), 0.f), 255.f);
  o[1] = (uint8)fminf(fmaxf(rintf(Y - 0.344136f * cb - 0.714136f * cr), 0.f), 255.f);
  o[2] = (uint8)fminf(fmaxf(rintf(Y + 1.772f * cb), 0.f), 255.f);
}
