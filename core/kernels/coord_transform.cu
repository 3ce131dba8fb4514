// fn.coord_transform: out = M * p + T for every point of every sample, one launch per batch.
// Float32 arithmetic without FMA contraction (__fmul_rn / __fadd_rn), summed in the CPU
// implementation's order, so GPU and CPU results are bit-identical; integer outputs round
// half away from zero (roundf) and saturate, as the CPU's ConvertSat does.
#include "common.cuh"

struct CoordDesc {
  long long in_ptr, out_ptr, npts, in_dim, out_dim;
  float m[36];
  float t[6];
};

template <typename T> struct IsIntOut { static constexpr bool value = true; };
template <> struct IsIntOut<float> { static constexpr bool value = false; };
template <> struct IsIntOut<double> { static constexpr bool value = false; };
template <> struct IsIntOut<dl_half> { static constexpr bool value = false; };

template <typename In, typename Out>
__global__ void coord_transform(const CoordDesc *descs) {
  const CoordDesc &d = descs[blockIdx.z];
  const In *in = reinterpret_cast<const In *>(d.in_ptr);
  Out *out = reinterpret_cast<Out *>(d.out_ptr);
  const int nin = (int)d.in_dim, nout = (int)d.out_dim;
  for (long long p = blockIdx.x * (long long)blockDim.x + threadIdx.x; p < d.npts;
       p += (long long)gridDim.x * blockDim.x) {
    float x[6];
    for (int j = 0; j < nin; j++) x[j] = load_f(in + p * nin + j);
    for (int i = 0; i < nout; i++) {
      const float *row = d.m + i * nin;
      float acc = __fmul_rn(row[0], x[0]);
      for (int j = 1; j < nin; j++) acc = __fadd_rn(acc, __fmul_rn(row[j], x[j]));
      acc = __fadd_rn(acc, d.t[i]);
      out[p * nout + i] = Conv<Out>::to(IsIntOut<Out>::value ? roundf(acc) : acc);
    }
  }
}
