// normprops timing kernel (no op): what normprops bench launches before each timed batch.

// spinWait: one thread busy for `cycles` clock cycles. normprops bench launches it before each timed
// batch so that the host has enqueued every launch of the batch before the GPU reaches them: the
// CUDA events then time back-to-back kernels, not the host's launch overhead (decode-sized rows run
// in a few microseconds, less than a Python launch takes).
extern "C" __global__ void spinWait(long long cycles) {
    const long long start = clock64();
    while (clock64() - start < cycles) {
    }
}
