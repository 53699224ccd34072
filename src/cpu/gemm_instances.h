/* gemm_instances.h - the per-type entry points of a packed-GEMM kernel set, included
 * at the end of each set's kernels (gemm_avx2.c, gemm_avx512.h): every type's kernel
 * instantiated for 1..4 tokens a call, over the names each set defines itself
 * (gemm_q4q5, gemm_q8_0_nt, gemm_q45_K, gemm_q6_K_nt, gemm_q23_K, gemm_iq4_nl_nt, gemm_iq4_xs_nt,
 * gemm_unpacked_K). */
#define DISPATCH_NT(CALL)                                                                                          \
    switch (nt) {                                                                                                \
    case 1: CALL(1); break;                                                                                      \
    case 2: CALL(2); break;                                                                                      \
    case 3: CALL(3); break;                                                                                      \
    default: CALL(4); break;                                                                                     \
    }

#define Q45(NT_) gemm_q4q5(KIND, NT_, g, cols, act, as, out)
#define KIND 0
static void gemm_q4_0(const uint8_t *g, int64_t cols, const void *act, size_t as, int nt, float out[][8]) { DISPATCH_NT(Q45) }
#undef KIND
#define KIND 1
static void gemm_q4_1(const uint8_t *g, int64_t cols, const void *act, size_t as, int nt, float out[][8]) { DISPATCH_NT(Q45) }
#undef KIND
#define KIND 2
static void gemm_q5_0(const uint8_t *g, int64_t cols, const void *act, size_t as, int nt, float out[][8]) { DISPATCH_NT(Q45) }
#undef KIND
#define KIND 3
static void gemm_q5_1(const uint8_t *g, int64_t cols, const void *act, size_t as, int nt, float out[][8]) { DISPATCH_NT(Q45) }
#undef KIND
#undef Q45

#define Q80(NT_) gemm_q8_0_nt(NT_, g, cols, act, as, out)
static void gemm_q8_0(const uint8_t *g, int64_t cols, const void *act, size_t as, int nt, float out[][8]) { DISPATCH_NT(Q80) }
#define Q4K(NT_) gemm_q45_K(0, NT_, g, cols, act, as, out)
static void gemm_q4_K(const uint8_t *g, int64_t cols, const void *act, size_t as, int nt, float out[][8]) { DISPATCH_NT(Q4K) }
#define Q5K(NT_) gemm_q45_K(1, NT_, g, cols, act, as, out)
static void gemm_q5_K(const uint8_t *g, int64_t cols, const void *act, size_t as, int nt, float out[][8]) { DISPATCH_NT(Q5K) }
#define Q6K(NT_) gemm_q6_K_nt(NT_, g, cols, act, as, out)
static void gemm_q6_K(const uint8_t *g, int64_t cols, const void *act, size_t as, int nt, float out[][8]) { DISPATCH_NT(Q6K) }
#define Q2K(NT_) gemm_q23_K(0, NT_, g, cols, act, as, out)
static void gemm_q2_K(const uint8_t *g, int64_t cols, const void *act, size_t as, int nt, float out[][8]) { DISPATCH_NT(Q2K) }
#define Q3K(NT_) gemm_q23_K(1, NT_, g, cols, act, as, out)
static void gemm_q3_K(const uint8_t *g, int64_t cols, const void *act, size_t as, int nt, float out[][8]) { DISPATCH_NT(Q3K) }
#define IQNL(NT_) gemm_iq4_nl_nt(NT_, g, cols, act, as, out)
static void gemm_iq4_nl(const uint8_t *g, int64_t cols, const void *act, size_t as, int nt, float out[][8]) { DISPATCH_NT(IQNL) }
#define IQXS(NT_) gemm_iq4_xs_nt(NT_, g, cols, act, as, out)
static void gemm_iq4_xs(const uint8_t *g, int64_t cols, const void *act, size_t as, int nt, float out[][8]) { DISPATCH_NT(IQXS) }

#define U4K(NT_) gemm_unpacked_K(0, NT_, g, cols, act, as, out)
static void gemmu_q4_K(const uint8_t *g, int64_t cols, const void *act, size_t as, int nt, float out[][8]) { DISPATCH_NT(U4K) }
#define U5K(NT_) gemm_unpacked_K(1, NT_, g, cols, act, as, out)
static void gemmu_q5_K(const uint8_t *g, int64_t cols, const void *act, size_t as, int nt, float out[][8]) { DISPATCH_NT(U5K) }
#define U6K(NT_) gemm_unpacked_K(2, NT_, g, cols, act, as, out)
static void gemmu_q6_K(const uint8_t *g, int64_t cols, const void *act, size_t as, int nt, float out[][8]) { DISPATCH_NT(U6K) }
