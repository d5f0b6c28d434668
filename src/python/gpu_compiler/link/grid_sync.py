"""Grid-wide sync for numba-cuda kernels where the toolchain's libcudadevrt.a has no code.

The x86_64 CUDA 13 wheel's libcudadevrt.a holds SASS for sm_75, 80, 86, 89, 90, 100, 103, 110,
120, 121 and PTX for compute_121 only: nothing nvJitLink (or the driver) can use for sm_87
(Jetson Orin). numba's ``cuda.cg.this_grid().sync()`` calls two of its functions,
``cudaCGGetIntrinsicHandle`` and ``cudaCGSynchronize``; ``SOURCE`` defines them as CUDA's own
header-only cooperative groups do (cooperative_groups/details/sync.h and driver_abi.h): the
driver passes a cooperative launch's grid workspace in %envreg1 (high) / %envreg2 (low), and the
workspace's barrier word flips when the last block arrives. ``gpu_compiler.numba.links`` compiles
it with NVRTC and links it in place of the library for such capabilities. Kept as a string so
that it travels inside the toolchain PEX with the compiler's modules.
"""

FILE = "cg_grid_sync.cu"

SOURCE = r"""
// The signatures are those NVRTC already declares (cuda_device_runtime_api.h).
struct gpu_compiler_grid_workspace {
    unsigned int wsSize;
    unsigned int barrier;
};

__device__ __forceinline__ gpu_compiler_grid_workspace* gpu_compiler_workspace() {
    unsigned int lo, hi;
    asm volatile("mov.u32 %0, %%envreg1;" : "=r"(hi));
    asm volatile("mov.u32 %0, %%envreg2;" : "=r"(lo));
    return reinterpret_cast<gpu_compiler_grid_workspace*>(
        (static_cast<unsigned long long>(hi) << 32) | lo);
}

extern "C" __device__ unsigned long long cudaCGGetIntrinsicHandle(enum cudaCGScope scope) {
    return reinterpret_cast<unsigned long long>(gpu_compiler_workspace());
}

extern "C" __device__ cudaError_t cudaCGSynchronize(unsigned long long handle, unsigned int flags) {
    unsigned int* arrived = &gpu_compiler_workspace()->barrier;
    bool cta_master = (threadIdx.x + threadIdx.y + threadIdx.z == 0);
    unsigned int old_arrive = 0;
    __syncthreads();
    if (cta_master) {
        unsigned int expected = gridDim.x * gridDim.y * gridDim.z;
        bool gpu_master = (blockIdx.x + blockIdx.y + blockIdx.z == 0);
        unsigned int nb = gpu_master ? 0x80000000u - (expected - 1) : 1u;
        asm volatile("atom.add.release.gpu.u32 %0,[%1],%2;"
                     : "=r"(old_arrive) : "l"(arrived), "r"(nb) : "memory");
        unsigned int current;
        do {
            asm volatile("ld.acquire.gpu.u32 %0,[%1];" : "=r"(current) : "l"(arrived) : "memory");
        } while (((old_arrive ^ current) & 0x80000000u) == 0);
    }
    __syncthreads();
    return cudaSuccess;
}
"""
