// fn.random.normal / uniform / coin_flip shaped by a GPU input: every element of every sample in
// one launch (blockIdx.z is the sample). Element i of a sample with seed s takes the 64 random
// bits h = splitmix64 output i of a generator seeded with s (the hash of operators/_noise.py),
// so the numbers depend on the seed and the element only, not on how the work is split.
// MODE 0 normal: a + b * z, z = sqrt(-2 log u1) cos(2 pi u2) in double, u1 = (hi32 + 0.5) 2^-32,
//        u2 = lo32 2^-32 (a: mean, b: stddev).
// MODE 1 uniform in [a, b): a + u (b - a), u = (h >> 11) 2^-53 in double; a float output stays
//        below b (the largest float under it) when b > a.
// MODE 2 discrete uniform: values[min(floor(u k), k - 1)] of the sample's k values.
// MODE 3 coin flip: 1 when u < a (the probability), else 0.
#include "common.cuh"

struct RandDesc {
  long long out_ptr, n;
  unsigned long long seed;
  double a, b;
  long long values_ptr, nvalues;  // MODE 2: the sample's values (double)
};

__device__ __forceinline__ unsigned long long rng_hash64(unsigned long long seed,
                                                         unsigned long long counter) {
  unsigned long long z = (counter + 1ULL) * 0x9E3779B97F4A7C15ULL + seed;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

template <typename T> __device__ __forceinline__ T rng_store(double v, double lo, double hi) {
  return Conv<T>::to(v);
}
// A uniform float below hi, as the CPU clamps it after rounding to float32.
template <> __device__ __forceinline__ float rng_store<float>(double v, double lo, double hi) {
  float f = (float)v;
  if (hi > lo) {
    const float top = nextafterf((float)hi, (float)lo);
    if (f > top) f = top;
  }
  return f;
}

template <typename Tout, int MODE>
__global__ void random_fill(const RandDesc *__restrict__ descs) {
  const RandDesc d = descs[blockIdx.z];
  Tout *out = reinterpret_cast<Tout *>(d.out_ptr);
  const double *values = reinterpret_cast<const double *>(d.values_ptr);
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < d.n;
       i += (long long)gridDim.x * blockDim.x) {
    const unsigned long long h = rng_hash64(d.seed, (unsigned long long)i);
    if (MODE == 0) {
      const double u1 = ((double)(h >> 32) + 0.5) * 0x1p-32;
      const double u2 = (double)(h & 0xFFFFFFFFULL) * 0x1p-32;
      const double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
      out[i] = Conv<Tout>::to(d.a + d.b * z);
    } else {
      const double u = (double)(h >> 11) * 0x1p-53;
      if (MODE == 1) {
        out[i] = rng_store<Tout>(d.a + u * (d.b - d.a), d.a, d.b);
      } else if (MODE == 2) {
        long long k = (long long)(u * (double)d.nvalues);
        if (k > d.nvalues - 1) k = d.nvalues - 1;
        out[i] = Conv<Tout>::to(values[k]);
      } else {
        out[i] = Conv<Tout>::to(u < d.a ? 1.0 : 0.0);
      }
    }
  }
}
