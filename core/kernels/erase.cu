// fn.erase: copy every element of every sample, or write the fill value where it lies in one
// of the sample's regions; one launch per batch (blockIdx.z = sample). Samples are contiguous.
#include "common.cuh"

struct EraseDesc {
  long long in_ptr, out_ptr, n, ndim;
  long long shape[5];
  long long region_off, region_count;  // rows of `regions`: begin[5], end[5]
  long long fill_off, fill_count;      // fill values (1, or one per channel)
  long long cdim;                      // the channel axis, -1 if none
};

template <typename T>
__global__ void erase(const EraseDesc *descs, const long long *regions, const double *fills) {
  const EraseDesc &d = descs[blockIdx.z];
  const T *in = reinterpret_cast<const T *>(d.in_ptr);
  T *out = reinterpret_cast<T *>(d.out_ptr);
  const int nd = (int)d.ndim;
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < d.n;
       e += (long long)gridDim.x * blockDim.x) {
    long long c[5];
    long long rest = e;
    for (int k = nd - 1; k >= 0; k--) {
      c[k] = rest % d.shape[k];
      rest /= d.shape[k];
    }
    bool inside = false;
    for (long long r = 0; r < d.region_count && !inside; r++) {
      const long long *box = regions + (d.region_off + r) * 10;
      bool in_box = true;
      for (int k = 0; k < nd; k++) in_box = in_box && c[k] >= box[k] && c[k] < box[5 + k];
      inside = in_box;
    }
    if (inside) {
      long long f = d.fill_count > 1 ? c[d.cdim] : 0;
      out[e] = Conv<T>::to(fills[d.fill_off + f]);
    } else {
      out[e] = in[e];
    }
  }
}
