// fn.noise.gaussian / salt_and_pepper / shot: every element of every sample in one launch.
// The random numbers are those of operators/_noise.py: element e of a sample with seed s uses
// splitmix64 output (counter) of a generator seeded with s, so CPU and GPU draw the same noise.
// MODE 0: Gaussian (Box-Muller in double), 1: salt and pepper (24-bit float uniform, one draw
// per pixel when channels > 1), 2: shot (Poisson: inversion below lambda 10, PTRS above).
#include "common.cuh"

struct NoiseDesc {
  long long in_ptr, out_ptr, n;
  unsigned long long seed;
  long long inner, channels;  // salt and pepper: element e = (o * channels + c) * inner + i
  double p[4];                // 0: mean, stddev | 1: prob, salt prob, salt, pepper | 2: factor
};

#define POISSON_TRIES 64ULL

__device__ __forceinline__ unsigned long long hash64(unsigned long long seed,
                                                     unsigned long long counter) {
  unsigned long long z = (counter + 1ULL) * 0x9E3779B97F4A7C15ULL + seed;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

template <typename T> struct NoiseIsInt { static constexpr bool value = true; };
template <> struct NoiseIsInt<float> { static constexpr bool value = false; };
template <> struct NoiseIsInt<double> { static constexpr bool value = false; };

// DALI's arithmetic type: double for 32-bit integers, float otherwise
template <typename T> struct NoiseFloat { typedef float type; };
template <> struct NoiseFloat<int> { typedef double type; };
template <> struct NoiseFloat<unsigned int> { typedef double type; };

__device__ __forceinline__ float n_add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double n_add(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float n_mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double n_mul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float n_round(float v) { return roundf(v); }
__device__ __forceinline__ double n_round(double v) { return round(v); }

template <typename T, typename F>
__device__ __forceinline__ T noise_store(F v) {
  return Conv<T>::to(NoiseIsInt<T>::value ? n_round(v) : v);
}

__device__ double loggam(double x) {
  const double a[10] = {8.333333333333333e-02, -2.777777777777778e-03, 7.936507936507937e-04,
                        -5.952380952380952e-04, 8.417508417508418e-04, -1.917526917526918e-03,
                        6.410256410256410e-03, -2.955065359477124e-02, 1.796443723688307e-01,
                        -1.39243221690590e+00};
  if (x == 1.0 || x == 2.0) return 0.0;
  double n = x <= 7.0 ? floor(7.0 - x) : 0.0;
  double x0 = x + n;
  double x2 = 1.0 / (x0 * x0);
  double gl0 = a[9];
  for (int k = 8; k >= 0; k--) gl0 = gl0 * x2 + a[k];
  double gl = gl0 / x0 + 0.5 * log(2 * 3.141592653589793) + (x0 - 0.5) * log(x0) - x0;
  for (int k = 1; k <= (int)n; k++) gl -= log(x0 - k);
  return gl;
}

__device__ long long poisson(unsigned long long seed, unsigned long long e, double lam) {
  if (!(lam > 0)) return 0;
  if (lam < 10.0) {
    double u = (double)(hash64(seed, e * POISSON_TRIES) >> 11) * 0x1.0p-53;
    double p = exp(-lam), cdf = p;
    long long k = 0;
    for (int step = 0; u > cdf && step < 1000; step++) {
      k++;
      p = p * lam / (double)k;
      cdf = cdf + p;
    }
    return k;
  }
  double slam = sqrt(lam), loglam = log(lam);
  double b = 0.931 + 2.53 * slam;
  double a = -0.059 + 0.02483 * b;
  double invalpha = 1.1239 + 1.1328 / (b - 3.4);
  double vr = 0.9277 - 3.6224 / (b - 2);
  for (unsigned long long t = 0; t < POISSON_TRIES; t++) {
    unsigned long long h = hash64(seed, e * POISSON_TRIES + t);
    double uu = (double)(h >> 32) * 0x1.0p-32 - 0.5;
    double v = (double)(h & 0xFFFFFFFFULL) * 0x1.0p-32;
    double us = 0.5 - fabs(uu);
    double k = floor((2 * a / us + b) * uu + lam + 0.43);
    if (us >= 0.07 && v <= vr) return (long long)k;
    if (k < 0 || (us < 0.013 && v > us)) continue;
    double lhs = log(v) + log(invalpha) - log(a / (us * us) + b);
    double rhs = -lam + k * loglam - loggam((k > 0 ? k : 0) + 1);
    if (lhs <= rhs) return (long long)k;
  }
  return (long long)round(lam);
}

template <typename T, int MODE>
__global__ void noise(const NoiseDesc *descs) {
  const NoiseDesc &d = descs[blockIdx.z];
  const T *in = reinterpret_cast<const T *>(d.in_ptr);
  T *out = reinterpret_cast<T *>(d.out_ptr);
  typedef typename NoiseFloat<T>::type F;
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < d.n;
       e += (long long)gridDim.x * blockDim.x) {
    if (MODE == 0) {
      unsigned long long h = hash64(d.seed, (unsigned long long)e);
      double u1 = ((double)(h >> 32) + 0.5) * 0x1.0p-32;
      double u2 = (double)(h & 0xFFFFFFFFULL) * 0x1.0p-32;
      double z = sqrt(-2.0 * log(u1)) * cos(2.0 * 3.141592653589793 * u2);
      F noise_v = n_add((F)d.p[0], n_mul((F)d.p[1], (F)z));
      out[e] = noise_store<T>(n_add((F)load_d(in + e), noise_v));
    } else if (MODE == 1) {
      long long c_in = e / d.inner;  // o * channels + c
      long long pix = (c_in / d.channels) * d.inner + (e - c_in * d.inner);
      unsigned long long h = hash64(d.seed, (unsigned long long)pix);
      float u = (float)(h >> 40) * 0x1.0p-24f;
      if (u < (float)d.p[0]) {
        out[e] = Conv<T>::to(u < (float)d.p[1] ? d.p[2] : d.p[3]);
      } else {
        out[e] = in[e];
      }
    } else {
      const float f = (float)d.p[0];
      if (f == 0.f) {
        out[e] = in[e];
        continue;
      }
      float lam = fmaxf(0.f, __fmul_rn(load_f(in + e), __fdiv_rn(1.f, f)));
      long long k = poisson(d.seed, (unsigned long long)e, (double)lam);
      out[e] = noise_store<T>(__fmul_rn((float)k, f));
    }
  }
}
