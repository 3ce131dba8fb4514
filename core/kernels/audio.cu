// Speech feature kernels: preemphasis, spectrogram framing and spectrum, mel filter bank, DCT
// (mfcc), decibels, resampling. One launch per batch: blockIdx.z is the sample, its descriptor
// (pointers, extents) comes from one array uploaded per batch. Samples are contiguous.
#include "common.cuh"

// ---- preemphasis_filter -------------------------------------------------------------------------

struct PreemphDesc {
  long long in_ptr, out_ptr, n;
  double coeff;
};

// border: 0 zero, 1 clamp, 2 reflect
template <typename Tin, typename Tout, typename Acc>
__global__ void preemphasis(const PreemphDesc *__restrict__ descs, int border) {
  const PreemphDesc d = descs[blockIdx.z];
  const Tin *in = reinterpret_cast<const Tin *>(d.in_ptr);
  Tout *out = reinterpret_cast<Tout *>(d.out_ptr);
  Acc c = (Acc)d.coeff;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < d.n;
       i += (long long)gridDim.x * blockDim.x) {
    Acc x = (Acc)load_d(in + i);
    Acc prev;
    if (i > 0) {
      prev = (Acc)load_d(in + i - 1);
    } else if (border == 0) {
      prev = Acc(0);
    } else if (border == 2 && d.n > 1) {
      prev = (Acc)load_d(in + 1);
    } else {
      prev = x;
    }
    out[i] = Conv<Tout>::to(c == Acc(0) ? x : x - c * prev);
  }
}

// ---- spectrogram ------------------------------------------------------------------------------

struct FramesDesc {
  long long in_ptr, length, first_frame, nwin;
};

__device__ __forceinline__ long long reflect_101(long long idx, long long size) {
  if (size < 2) return 0;
  long long period = 2 * (size - 1);
  idx = idx < 0 ? -idx : idx;
  idx %= period;
  return idx >= size ? period - idx : idx;
}

// Windows of every sample into rows of `frames` ((total windows, nfft), zero past wl).
// padding: 0 none (windows inside the signal), 1 zeros, 2 mirrored (reflect 101).
__global__ void extract_frames(const FramesDesc *__restrict__ descs,
                               const float *__restrict__ window, float *__restrict__ frames,
                               int wl, int nfft, int step, int offset, int padding) {
  const FramesDesc d = descs[blockIdx.z];
  const float *in = reinterpret_cast<const float *>(d.in_ptr);
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= nfft) return;
  for (long long w = blockIdx.y * (long long)blockDim.y + threadIdx.y; w < d.nwin;
       w += (long long)gridDim.y * blockDim.y) {
    float v = 0.f;
    if (t < wl) {
      long long idx = w * step - offset + t;
      if (padding == 2) idx = reflect_101(idx, d.length);
      if (idx >= 0 && idx < d.length) v = window[t] * in[idx];
    }
    frames[(d.first_frame + w) * nfft + t] = v;
  }
}

struct Cplx {
  float re, im;
};

struct SpecDesc {
  long long out_ptr, first_frame, nwin;
};

// |X|^2 (power 2) or |X| (power 1) of each sample's rows of `spec`, as (bins, windows) or,
// with time_major, (windows, bins).
__global__ void spectrum_out(const SpecDesc *__restrict__ descs, const Cplx *__restrict__ spec,
                             int nbins, int power, int time_major) {
  const SpecDesc d = descs[blockIdx.z];
  float *out = reinterpret_cast<float *>(d.out_ptr);
  int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= nbins) return;
  for (long long w = blockIdx.y * (long long)blockDim.y + threadIdx.y; w < d.nwin;
       w += (long long)gridDim.y * blockDim.y) {
    Cplx c = spec[(d.first_frame + w) * nbins + b];
    float p = c.re * c.re + c.im * c.im;
    if (power == 1) p = sqrtf(p);
    out[time_major ? w * nbins + b : b * d.nwin + w] = p;
  }
}

// ---- mel_filter_bank and mfcc: a matrix along one axis -------------------------------------------

// A sample seen as (outer, n, inner) with the transformed axis in the middle.
struct AxisDesc {
  long long in_ptr, out_ptr, outer, n, inner, nout, table_ptr;
};

// out[o, m, i] = sum_{k in [k0[m], k1[m])} W[m, k] * in[o, k, i] (* lifter[m] when given).
// W is (nout, n) row-major; k0/k1 (null: the whole row) skip a mel filter's zero weights.
__global__ void axis_matmul(const AxisDesc *__restrict__ descs, const int *__restrict__ k0,
                            const int *__restrict__ k1, const float *__restrict__ lifter) {
  const AxisDesc d = descs[blockIdx.z];
  long long m = blockIdx.y;
  if (m >= d.nout) return;
  const float *in = reinterpret_cast<const float *>(d.in_ptr);
  const float *W = reinterpret_cast<const float *>(d.table_ptr) + m * d.n;
  float *out = reinterpret_cast<float *>(d.out_ptr);
  long long lo = k0 ? k0[m] : 0, hi = k1 ? k1[m] : d.n;
  long long total = d.outer * d.inner;
  for (long long p = blockIdx.x * (long long)blockDim.x + threadIdx.x; p < total;
       p += (long long)gridDim.x * blockDim.x) {
    long long o = p / d.inner, i = p - o * d.inner;
    const float *x = in + o * d.n * d.inner + i;
    float acc = 0.f;
    for (long long k = lo; k < hi; k++) acc += W[k] * x[k * d.inner];
    if (lifter) acc *= lifter[m];
    out[(o * d.nout + m) * d.inner + i] = acc;
  }
}

// ---- to_decibels --------------------------------------------------------------------------------

struct FlatDesc {
  long long in_ptr, out_ptr, n;
};

// The maximum of each sample's positive values, as float bits (monotonic for x >= 0), into
// maxbits[sample] (zeroed first).
__global__ void sample_max(const FlatDesc *__restrict__ descs, unsigned int *maxbits) {
  const FlatDesc d = descs[blockIdx.z];
  const float *in = reinterpret_cast<const float *>(d.in_ptr);
  float m = 0.f;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < d.n;
       i += (long long)gridDim.x * blockDim.x)
    m = fmaxf(m, in[i]);
  for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_down_sync(0xffffffffu, m, off));
  if ((threadIdx.x & 31) == 0 && m > 0.f) atomicMax(maxbits + blockIdx.z, __float_as_uint(m));
}

// A float's exact value as a double, from its bits: no float32 operation, so no flush to zero.
__device__ __forceinline__ double float_bits_value(unsigned int b) {
  const int e = (b >> 23) & 0xff;
  const double m = (double)(b & 0x7fffffu);
  const double v = e ? ldexp(m + 8388608.0, e - 150) : ldexp(m, -149);
  return (b >> 31) ? -v : v;
}

// log2 of the float32 product x * inv as the CPU rounds it, for a product that -ftz=true flushed
// to zero (CuPy compiles every kernel with it): the product again in double (exact: 24-bit
// factors), rounded to float32 with subnormals kept; -inf for zero and negative products.
__device__ float log2_of_tiny_product(unsigned int x_bits, float inv) {
  const double p = float_bits_value(x_bits) * float_bits_value(__float_as_uint(inv));
  if (!(p > 0.0)) return __int_as_float(0xff800000);  // -inf: the cutoff applies
  if (p >= 0x1p-126) return log2f(__double2float_rn(p));  // a normal float: no flush
  const double units = rint(p * 0x1p149);  // the subnormal float32 it rounds to, in 2^-149
  return units == 0.0 ? __int_as_float(0xff800000) : (float)(log2(units) - 149.0);
}

// out = mul_log2 * log2(max(min_ratio, x * inv_ref)), computed as
// mul_log2 * max(log2_min, log2(x * inv_ref)) (log2 is monotonic) with log2_min = log2(min_ratio)
// from the host: min_ratio is subnormal for cutoff_db / multiplier < -37.9 (the default -200 dB
// with multiplier ln(10)), and -ftz=true would flush it to 0 in fmaxf and give log2(0) = -inf
// where the CPU gives the cutoff. Products below FLT_MIN (zeros, tiny inputs) are redone by
// log2_of_tiny_product; a NaN stays NaN as in numpy. inv_ref from `maxbits` when given (1 when
// the maximum is 0 or 1), else `inv_ref`.
__global__ void to_decibels(const FlatDesc *__restrict__ descs,
                            const unsigned int *__restrict__ maxbits, float inv_ref,
                            float mul_log2, float log2_min) {
  const FlatDesc d = descs[blockIdx.z];
  const unsigned int *in = reinterpret_cast<const unsigned int *>(d.in_ptr);
  float *out = reinterpret_cast<float *>(d.out_ptr);
  float inv = inv_ref;
  if (maxbits) {
    float r = __uint_as_float(maxbits[blockIdx.z]);
    inv = (r == 0.f || r == 1.f) ? 1.f : 1.f / r;
  }
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < d.n;
       i += (long long)gridDim.x * blockDim.x) {
    const unsigned int b = in[i];
    const float v = __uint_as_float(b) * inv;
    float l;
    if (v >= 1.17549435e-38f)  // FLT_MIN: a normal product, as on the CPU
      l = log2f(v);
    else if (v != v)
      l = v;
    else
      l = log2_of_tiny_product(b, inv);
    out[i] = mul_log2 * (l < log2_min ? log2_min : l);
  }
}

// ---- resampling ---------------------------------------------------------------------------------

struct ResampleDesc {
  long long in_ptr, out_ptr, n_in, n_out, channels;
  double scale;  // in_rate / out_rate
};

// DALI's windowed sinc (its CPU kernel's arithmetic, as _audio/resampling.py): output j sits at
// input position base + frac, with the outputs in blocks of RESAMPLE_BLOCK: the block's start
// j0 * scale in double, base = floor(start), frac = (float)(start - base) + (j - j0) steps of
// (float)scale added one at a time in float32 (the CPU's running sum, reproduced per output:
// up to 255 float adds). Taps i in [ceil(frac) - lobes, ceil(frac) + lobes) at offset
// (ceil(frac) - frac) + t, t = i - ceil(frac), zero outside the signal; the window is read from
// `lookup` with linear interpolation, every step rounded as the CPU does (__f*_rn: no FMA
// contraction). Only the sum over the taps is in another order (sequential FMA here). Inputs
// are normalised as x * in_scale * in_mul + in_add; outputs are written as v * out_max, rounded
// and saturated (floats: out_max = 0, as is).
#define RESAMPLE_BLOCK 256

template <typename Tin, typename Tout>
__global__ void resample(const ResampleDesc *__restrict__ descs, const float *__restrict__ lookup,
                         float wscale, float wcenter, int lobes, float in_scale, float in_mul,
                         float in_add, float out_max) {
  const ResampleDesc d = descs[blockIdx.z];
  const Tin *in = reinterpret_cast<const Tin *>(d.in_ptr);
  Tout *out = reinterpret_cast<Tout *>(d.out_ptr);
  const float fscale = __double2float_rn(d.scale);
  for (long long j = blockIdx.x * (long long)blockDim.x + threadIdx.x; j < d.n_out;
       j += (long long)gridDim.x * blockDim.x) {
    const long long j0 = j - j % RESAMPLE_BLOCK;
    const double start = (double)j0 * d.scale;
    const double base_d = floor(start);
    const long long base = (long long)base_d;
    float frac = __double2float_rn(start - base_d);
    for (long long k = j0; k < j; k++) frac = __fadd_rn(frac, fscale);
    const float first = ceilf(frac);
    const float off0 = __fsub_rn(first, frac);
    const long long xc = (long long)first;
    long long i0 = xc - lobes, i1 = xc + lobes;
    if (i0 + base < 0) i0 = -base;
    if (i1 + base > d.n_in) i1 = d.n_in - base;
    for (long long c = 0; c < d.channels; c++) {
      float acc = 0.f;
      for (long long i = i0; i < i1; i++) {
        const float x_off = __fadd_rn(off0, (float)(i - xc));
        const float fi = __fadd_rn(__fmul_rn(x_off, wscale), wcenter);
        const float fl = floorf(fi);
        const int k = (int)fl;
        const float diff = __fsub_rn(lookup[k + 1], lookup[k]);
        const float w = __fadd_rn(__fmul_rn(__fsub_rn(fi, fl), diff), lookup[k]);
        const float x = load_f(in + (base + i) * d.channels + c) * in_scale * in_mul + in_add;
        acc += w * x;
      }
      out[j * d.channels + c] = out_max == 0.f ? Conv<Tout>::to(acc) : Conv<Tout>::to(acc * out_max);
    }
  }
}

// ---- nonsilent_region ---------------------------------------------------------------------------

struct NsDesc {
  long long in_ptr, n, offset, window;  // offset: the sample's start in the flat buffers
};

// Squares of every sample into one flat buffer (Acc: long long for <= 16-bit integers, exact;
// double otherwise), for one cumulative sum over the whole batch.
template <typename Tin, typename Acc>
__global__ void squares(const NsDesc *__restrict__ descs, Acc *__restrict__ flat) {
  const NsDesc d = descs[blockIdx.z];
  const Tin *in = reinterpret_cast<const Tin *>(d.in_ptr);
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < d.n;
       i += (long long)gridDim.x * blockDim.x) {
    Acc v = (Acc)in[i];
    flat[d.offset + i] = v * v;
  }
}

// The short-term power mms[i] = (sum of window squares) * (1 / window), float32, from the
// batch's running sum `cs`, and each sample's maximum (float bits, atomicMax).
template <typename Acc>
__global__ void moving_mean_square(const NsDesc *__restrict__ descs, const Acc *__restrict__ cs,
                                   float *__restrict__ mms, unsigned int *maxbits) {
  const NsDesc d = descs[blockIdx.z];
  long long count = d.n > 0 ? d.n - d.window + 1 : 0;
  float inv_w = 1.f / (float)d.window;
  float m = 0.f;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < count;
       i += (long long)gridDim.x * blockDim.x) {
    long long k = d.offset + i;
    Acc hi = cs[k + d.window - 1];
    Acc lo = k > 0 ? cs[k - 1] : Acc(0);
    float v = (float)(hi - lo) * inv_w;
    mms[k] = v;
    m = fmaxf(m, v);
  }
  for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_down_sync(0xffffffffu, m, off));
  if ((threadIdx.x & 31) == 0 && m > 0.f) atomicMax(maxbits + blockIdx.z, __float_as_uint(m));
}

// First and last window whose power reaches the threshold: reference (the maximum when
// ref[s] < 0) times factor[s] = 10^(cutoff_db / 10).
__global__ void loud_windows(const NsDesc *__restrict__ descs, const float *__restrict__ mms,
                             const unsigned int *__restrict__ maxbits,
                             const float *__restrict__ ref, const float *__restrict__ factor,
                             int *first, int *last) {
  const NsDesc d = descs[blockIdx.z];
  long long count = d.n > 0 ? d.n - d.window + 1 : 0;
  float r = ref[blockIdx.z] < 0.f ? __uint_as_float(maxbits[blockIdx.z]) : ref[blockIdx.z];
  float thr = r * factor[blockIdx.z];
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < count;
       i += (long long)gridDim.x * blockDim.x) {
    if (mms[d.offset + i] >= thr) {
      atomicMin(first + blockIdx.z, (int)i);
      atomicMax(last + blockIdx.z, (int)i);
    }
  }
}
