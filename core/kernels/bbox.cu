// Bounding-box kernels: bb_flip (and the box encoder, below). One launch per batch:
// blockIdx.y is the sample, threads stride over its boxes.

struct BoxFlipDesc {
    long long src;   // the sample's boxes, contiguous float x 4
    long long dst;   // where the flipped boxes go
    long long n;     // number of boxes
    int horizontal;  // nonzero: mirror x
    int vertical;    // nonzero: mirror y
};

// [l, t, r, b] boxes swap their edges; [x, y, w, h] boxes move their corner and keep w, h.
template <bool LTRB>
__global__ void bb_flip(const BoxFlipDesc* descs) {
    const BoxFlipDesc d = descs[blockIdx.y];
    const float* in = (const float*)d.src;
    float* out = (float*)d.dst;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < d.n;
         i += (long long)gridDim.x * blockDim.x) {
        const float* b = in + 4 * i;
        float* o = out + 4 * i;
        const float x0 = b[0], y0 = b[1], x1 = b[2], y1 = b[3];
        if (LTRB) {
            o[0] = d.horizontal ? 1.0f - x1 : x0;
            o[1] = d.vertical ? 1.0f - y1 : y0;
            o[2] = d.horizontal ? 1.0f - x0 : x1;
            o[3] = d.vertical ? 1.0f - y0 : y1;
        } else {
            o[0] = d.horizontal ? 1.0f - (x0 + x1) : x0;
            o[1] = d.vertical ? 1.0f - (y0 + y1) : y0;
            o[2] = x1;
            o[3] = y1;
        }
    }
}
