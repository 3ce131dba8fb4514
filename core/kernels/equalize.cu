// fn.equalize: per-plane (sample, frame, channel) histogram equalization of uint8 data, in three
// launches per batch: histograms (blockIdx.z = sample, blockIdx.y = frame), lookup tables (one
// block of 256 threads per plane), then the lookup (blockIdx.z = sample).
//
// A sample's element i (C order, contiguous) lies in frame i / (pixels * channels) and channel
// (i / cdiv) % channels: cdiv is 1 for channels-last data, the plane size for channels-first.
// Its planes are numbered plane0 + frame * channels + channel.
#include "common.cuh"

struct EqDesc {
  long long in_ptr, out_ptr;
  long long pixels;  // H * W
  long long cdiv;    // 1 (HWC) or H * W (CHW)
  int frames, channels;
  long long plane0;  // index of the sample's first plane
};

#define EQ_BINS 256
#define EQ_SHARED_PLANES 16  // channels privatised in shared memory (16 KiB of counts)

__device__ __forceinline__ int eq_channel(long long i, const EqDesc &d) {
  return d.channels == 1 ? 0 : (int)((i / d.cdiv) % d.channels);
}

extern "C" __global__ void equalize_hist(const EqDesc *__restrict__ descs,
                                         unsigned int *__restrict__ hist) {
  __shared__ unsigned int local[EQ_SHARED_PLANES * EQ_BINS];
  const EqDesc d = descs[blockIdx.z];
  const long long frame_size = d.pixels * d.channels;
  const bool shared = d.channels <= EQ_SHARED_PLANES;
  const long long step = (long long)gridDim.x * blockDim.x;
  for (int f = blockIdx.y; f < d.frames; f += gridDim.y) {
    const unsigned char *in = reinterpret_cast<const unsigned char *>(d.in_ptr) + f * frame_size;
    unsigned int *plane_hist = hist + (d.plane0 + (long long)f * d.channels) * EQ_BINS;
    if (shared) {
      for (int k = threadIdx.x; k < d.channels * EQ_BINS; k += blockDim.x) local[k] = 0;
      __syncthreads();
    }
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < frame_size;
         i += step) {
      int bin = eq_channel(i, d) * EQ_BINS + in[i];
      if (shared)
        atomicAdd(&local[bin], 1u);
      else
        atomicAdd(&plane_hist[bin], 1u);
    }
    if (shared) {
      __syncthreads();
      for (int k = threadIdx.x; k < d.channels * EQ_BINS; k += blockDim.x) {
        if (local[k]) atomicAdd(&plane_hist[k], local[k]);
      }
      __syncthreads();
    }
  }
}

// One block of 256 threads per plane: inclusive prefix sum of the histogram, the count of the
// lowest value present (`first`), and lut[v] = round((cdf[v] - first) * 255 / (total - first));
// a plane of one value keeps its values (lut[v] = v).
extern "C" __global__ void equalize_lut(const unsigned int *__restrict__ hist,
                                        unsigned char *__restrict__ lut) {
  __shared__ unsigned long long cdf[EQ_BINS];
  __shared__ int first_bin;
  const long long plane = blockIdx.x;
  const int t = threadIdx.x;
  lut[plane * EQ_BINS + t] =
      equalize_table_value(hist[plane * EQ_BINS + t], t, cdf, &first_bin);
}

extern "C" __global__ void equalize_apply(const EqDesc *__restrict__ descs,
                                          const unsigned char *__restrict__ lut) {
  const EqDesc d = descs[blockIdx.z];
  const unsigned char *in = reinterpret_cast<const unsigned char *>(d.in_ptr);
  unsigned char *out = reinterpret_cast<unsigned char *>(d.out_ptr);
  const long long frame_size = d.pixels * d.channels;
  const long long size = frame_size * d.frames;
  const long long step = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < size; i += step) {
    long long plane = d.plane0 + (i / frame_size) * d.channels + eq_channel(i, d);
    out[i] = lut[plane * EQ_BINS + in[i]];
  }
}
