// fn.paste on the GPU: every sample of a batch in one launch (blockIdx.z = sample); a thread
// writes one byte of the canvas: the image's where it lies, the fill colour elsewhere.

struct PasteDesc {
    long long src;  // the HWC uint8 image, contiguous
    long long dst;  // the canvas, contiguous
    int in_h, in_w, out_h, out_w;
    int row, col;   // where the image's top-left pixel goes
    int channels;
    int pad;
};

extern "C" __global__ void paste(const PasteDesc* descs, const unsigned char* fill) {
    const PasteDesc d = descs[blockIdx.z];
    const int row_bytes = d.out_w * d.channels;
    const int x = blockIdx.x * blockDim.x + threadIdx.x;  // byte in the canvas row
    if (x >= row_bytes) return;
    const unsigned char* src = (const unsigned char*)d.src;
    unsigned char* dst = (unsigned char*)d.dst;
    for (int y = blockIdx.y * blockDim.y + threadIdx.y; y < d.out_h; y += gridDim.y * blockDim.y) {
        const int iy = y - d.row;
        const int ix = x - d.col * d.channels;
        unsigned char v;
        if (iy >= 0 && iy < d.in_h && ix >= 0 && ix < d.in_w * d.channels)
            v = src[(long long)iy * d.in_w * d.channels + ix];
        else
            v = fill[x % d.channels];
        dst[(long long)y * row_bytes + x] = v;
    }
}
