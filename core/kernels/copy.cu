// Batched copy of images into one packed buffer: the decode server's copies of a batch's
// decoded images into the pipeline's slot, in one launch instead of one call per image.

struct CopyDesc {
    long long src;        // first byte of the source image
    long long dst;        // where it goes; rows are packed there (pitch row_bytes)
    long long src_pitch;  // bytes from one source row to the next
    long long row_bytes;  // bytes per row (a contiguous image is cut into rows of any length)
    long long total;      // bytes of the image: the last row may be shorter
};

// blockIdx.y: the image; each warp copies one row at a time, 16 bytes a thread where both
// ends are 16-byte aligned.
extern "C" __global__ void copy_rows(const CopyDesc* descs) {
    const CopyDesc d = descs[blockIdx.y];
    const long long rows = (d.total + d.row_bytes - 1) / d.row_bytes;
    for (long long r = (long long)blockIdx.x * blockDim.y + threadIdx.y; r < rows;
         r += (long long)gridDim.x * blockDim.y) {
        const unsigned char* s = (const unsigned char*)d.src + r * d.src_pitch;
        unsigned char* t = (unsigned char*)d.dst + r * d.row_bytes;
        const long long n = min(d.row_bytes, d.total - r * d.row_bytes);
        long long i = 0;
        if ((((unsigned long long)s | (unsigned long long)t) & 15) == 0) {
            const long long vectors = n / 16;
            for (long long v = threadIdx.x; v < vectors; v += blockDim.x)
                ((uint4*)t)[v] = ((const uint4*)s)[v];
            i = vectors * 16;
        }
        for (i += threadIdx.x; i < n; i += blockDim.x) t[i] = s[i];
    }
}
