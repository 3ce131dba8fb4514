// An N-D window of every sample of a batch, one launch (blockIdx.z = sample): crop (an anchor
// that may leave the input: those elements get the fill value), flip per axis, and cast, over
// any layout (DHWC, CDHW, FDHWC, ...). The GPU side of 3-D crop and flip; HWC batches take the
// faster 2-D kernel of slice.cu. Each thread walks the sample's output elements with a grid
// stride, in C order.
#include "common.cuh"

#define WINDOW_MAXD 6

struct WindowDesc {
  long long in_ptr, out_ptr;
  long long numel;                    // output elements
  long long out_shape[WINDOW_MAXD];
  long long in_shape[WINDOW_MAXD];
  long long in_stride[WINDOW_MAXD];   // elements
  long long anchor[WINDOW_MAXD];      // window start per axis in the input (may be outside)
  long long flip[WINDOW_MAXD];        // 1: the axis is read backwards within the window
};

// fill: one value, or one per channel (nfill > 1, along c_axis).
template <typename Tin, typename Tout>
__global__ void window_copy(const WindowDesc *__restrict__ descs, int ndim,
                            const double *__restrict__ fill, int nfill, int c_axis) {
  __shared__ WindowDesc d;
  if (threadIdx.x == 0) d = descs[blockIdx.z];
  __syncthreads();
  const Tin *in = reinterpret_cast<const Tin *>(d.in_ptr);
  Tout *out = reinterpret_cast<Tout *>(d.out_ptr);
  const long long step = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < d.numel; i += step) {
    long long rest = i, off = 0;
    int ch = 0;
    bool inside = true;
    for (int a = ndim - 1; a >= 0; a--) {
      const long long n = d.out_shape[a];
      const long long o = rest % n;
      rest /= n;
      if (a == c_axis) ch = (int)o;
      const long long s = d.anchor[a] + (d.flip[a] ? n - 1 - o : o);
      inside = inside && s >= 0 && s < d.in_shape[a];
      off += s * d.in_stride[a];
    }
    if (inside) {
      out[i] = Conv<Tout>::to(load_d(in + off));
    } else {
      out[i] = Conv<Tout>::to(fill[nfill > 1 ? (ch < nfill ? ch : nfill - 1) : 0]);
    }
  }
}
