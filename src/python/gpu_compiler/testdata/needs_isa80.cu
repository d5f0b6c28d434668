// Fixture: uses elect.sync (PTX ISA 8.0, sm_90), so relabelling its PTX as
// .version 7.8 must make nvJitLink/ptxas refuse it.
extern "C" __global__ void elect_one(unsigned* out) {
    unsigned is_leader;
    asm volatile(
        "{\n\t.reg .pred p;\n\t"
        "elect.sync _|p, 0xffffffff;\n\t"
        "selp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(is_leader));
    out[threadIdx.x] = is_leader;
}
