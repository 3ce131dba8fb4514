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

// --- box_encoder -------------------------------------------------------------------------
// One block per sample (blockIdx.x), BOX_ENCODER_THREADS threads (a power of two). The boxes
// of a sample are matched one after the other, as DALI's CPU side does: each box updates the
// best box of every anchor (ties: the later box), then claims its own best anchor (ties: the
// higher anchor index) with IoU 2. The arithmetic avoids contractions (__fmul_rn/__fadd_rn)
// so the IoUs equal the CPU's float32 ones.

#define BOX_ENCODER_THREADS 256

struct EncodeDesc {
    long long boxes;       // (n, 4) float ltrb
    long long labels;      // (n,) int
    long long out_boxes;   // (A, 4) float
    long long out_labels;  // (A,) int
    long long scratch;     // (A,) int best box + (A,) float best IoU
    long long n;           // boxes in the sample
};

// params: means[4], stds[4], scale, criteria (floats, uploaded with the descriptors)

__device__ __forceinline__ float encoder_iou(float4 b, float4 a) {
    if (!(b.x < a.z && b.z > a.x && b.y < a.w && b.w > a.y)) return 0.0f;
    const float w = __fsub_rn(fminf(b.z, a.z), fmaxf(b.x, a.x));
    const float h = __fsub_rn(fminf(b.w, a.w), fmaxf(b.y, a.y));
    const float inter = __fmul_rn(w, h);
    const float area_b = __fmul_rn(__fsub_rn(b.z, b.x), __fsub_rn(b.w, b.y));
    const float area_a = __fmul_rn(__fsub_rn(a.z, a.x), __fsub_rn(a.w, a.y));
    return __fdiv_rn(inter, __fsub_rn(__fadd_rn(area_b, area_a), inter));
}

__device__ __forceinline__ float4 center_wh(float4 b) {
    return make_float4(__fmul_rn(0.5f, __fadd_rn(b.x, b.z)), __fmul_rn(0.5f, __fadd_rn(b.y, b.w)),
                       __fsub_rn(b.z, b.x), __fsub_rn(b.w, b.y));
}

template <bool OFFSET>
__global__ void box_encode(const EncodeDesc* descs, const float4* anchors,
                           const float4* anchors_cwh, const float* params, int num_anchors) {
    __shared__ float best_val[BOX_ENCODER_THREADS];
    __shared__ int best_idx[BOX_ENCODER_THREADS];
    const EncodeDesc d = descs[blockIdx.x];
    const float4* boxes = (const float4*)d.boxes;
    const int* labels = (const int*)d.labels;
    int* box_of = (int*)d.scratch;
    float* iou_of = (float*)(box_of + num_anchors);
    const int A = num_anchors;
    const float* means = params;
    const float* stds = params + 4;
    const float scale = params[8], criteria = params[9];
    for (int a = threadIdx.x; a < A; a += blockDim.x) {
        box_of[a] = 0;
        iou_of[a] = -1.0f;  // below any IoU: the first box sets it
    }
    __syncthreads();
    for (long long i = 0; i < d.n; ++i) {
        const float4 box = boxes[i];
        float mine = -1.0f;
        int mine_idx = -1;
        for (int a = threadIdx.x; a < A; a += blockDim.x) {
            const float v = encoder_iou(box, anchors[a]);
            if (v >= mine) { mine = v; mine_idx = a; }
            if (v >= iou_of[a]) { iou_of[a] = v; box_of[a] = (int)i; }
        }
        best_val[threadIdx.x] = mine;
        best_idx[threadIdx.x] = mine_idx;
        __syncthreads();
        for (int s = blockDim.x / 2; s > 0; s >>= 1) {
            if (threadIdx.x < s) {
                const float ov = best_val[threadIdx.x + s];
                const int oi = best_idx[threadIdx.x + s];
                const float v = best_val[threadIdx.x];
                if (ov > v || (ov == v && oi > best_idx[threadIdx.x])) {
                    best_val[threadIdx.x] = ov;
                    best_idx[threadIdx.x] = oi;
                }
            }
            __syncthreads();
        }
        if (threadIdx.x == 0 && best_idx[0] >= 0) {
            box_of[best_idx[0]] = (int)i;
            iou_of[best_idx[0]] = 2.0f;
        }
        __syncthreads();
    }
    float4* out = (float4*)d.out_boxes;
    int* out_labels = (int*)d.out_labels;
    for (int a = threadIdx.x; a < A; a += blockDim.x) {
        const bool matched = d.n > 0 && iou_of[a] > criteria;
        if (!matched) {
            out[a] = OFFSET ? make_float4(0.f, 0.f, 0.f, 0.f) : anchors_cwh[a];
            out_labels[a] = 0;
            continue;
        }
        const int k = box_of[a];
        float4 b = center_wh(boxes[k]);
        out_labels[a] = labels[k];
        if (OFFSET) {
            const float4 an = anchors_cwh[a];
            const float bx = __fmul_rn(b.x, scale), by = __fmul_rn(b.y, scale);
            const float bw = __fmul_rn(b.z, scale), bh = __fmul_rn(b.w, scale);
            const float ax = __fmul_rn(an.x, scale), ay = __fmul_rn(an.y, scale);
            const float aw = __fmul_rn(an.z, scale), ah = __fmul_rn(an.w, scale);
            b.x = __fdiv_rn(__fsub_rn(__fdiv_rn(__fsub_rn(bx, ax), aw), means[0]), stds[0]);
            b.y = __fdiv_rn(__fsub_rn(__fdiv_rn(__fsub_rn(by, ay), ah), means[1]), stds[1]);
            b.z = __fdiv_rn(__fsub_rn(logf(__fdiv_rn(bw, aw)), means[2]), stds[2]);
            b.w = __fdiv_rn(__fsub_rn(logf(__fdiv_rn(bh, ah)), means[3]), stds[3]);
        }
        out[a] = b;
    }
}
