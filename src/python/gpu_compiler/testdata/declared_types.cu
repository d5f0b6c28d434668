// Kernels whose declared parameter types the PTX cannot tell (gpu_compiler.cuda_cpp.param_types):
// a typedef, unsigned and signed ints of one width, pointers to const, a struct by pointer, a
// C++-linkage kernel in a namespace (no name expression: its mangled name tells its types).
typedef unsigned int count_t;
#define REAL double

struct Params { int n; float scale; };

extern "C" __global__ void scale(const REAL* __restrict__ src, REAL* dst, count_t n, int offset,
                                 Params* params, unsigned char flag) {}

namespace ops {
__global__ void fill(float* out, long long n, const Params* p) {}
}

template <typename T>
__global__ void axpy(T a, const T* x, T* y, unsigned n) {}
