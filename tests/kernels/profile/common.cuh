// Shared by the planted-bottleneck drivers: error checks and the launch/sync pattern ncu profiles.
// Every driver launches its kernel once to warm up, then once more: the record script tells ncu to skip
// the first launch (--launch-skip 1) so caches and clocks are not measured cold.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CHECK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); exit(1); } } while (0)

static int sm_count() {
    int dev = 0, n = 0;
    CHECK(cudaGetDevice(&dev));
    CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    return n;
}

static void finish(const char* name) {
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    printf("%s: ok\n", name);
}
