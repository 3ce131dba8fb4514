// fn.one_hot: one launch per batch; blockIdx.z is the sample, each thread writes one output
// element. The output is (outer, num_classes, inner) around the new axis; an input value is
// truncated to an integer class, and classes outside [0, num_classes) set nothing.
#include "common.cuh"

typedef long long int64;
typedef unsigned long long uint64;

struct OneHotDesc {
  long long in_ptr, out_ptr;
  long long size;   // output elements: outer * num_classes * inner
  long long inner;  // elements after the new axis
};

template <typename Tin, typename Tout>
__global__ void one_hot(const OneHotDesc *__restrict__ descs, long long num_classes, double on,
                        double off) {
  const OneHotDesc d = descs[blockIdx.z];
  const Tin *in = reinterpret_cast<const Tin *>(d.in_ptr);
  Tout *out = reinterpret_cast<Tout *>(d.out_ptr);
  const Tout on_v = (Tout)on, off_v = (Tout)off;
  long long step = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < d.size; i += step) {
    long long j = i % d.inner;
    long long rest = i / d.inner;
    long long c = rest % num_classes;
    long long outer = rest / num_classes;
    double v = load_d(in + outer * d.inner + j);
    long long cls = (long long)v;  // truncation toward zero, as DALI's int conversion
    out[i] = cls == c ? on_v : off_v;
  }
}
