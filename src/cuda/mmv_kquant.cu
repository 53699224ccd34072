/* mmv_kquant.cu - the decode GEMV launchers of the K-quants (q4_K, q5_K, q6_K) with q8
 * activations and dp4a: cu_mmv_q8_kquant, the gate+up launch with the SwiGLU in its
 * store (cu_mmv_q8_swiglu), the q/k/v launch of two types (cu_mmv_q8_mixed), and their
 * set-up. The units: mmv_k45.cuh (q4_K, q5_K), mmv_q6k.cuh (q6_K); the schedules:
 * mmv.cuh; block layouts: FORMATS.md. */
#include "mmv.cuh"
#include "mmv_k45.cuh"
#include "mmv_q6k.cuh"

void cu_mmv_q8_kquant(cu_ctx *S, uint32_t type, const cu_mmv_args *a) {
    switch (type) {
    case QTYPE_Q4_K: mmv_q8_launch<unit_k45<false>>(S, a, "mmv_q4_K"); break;
    case QTYPE_Q5_K: mmv_q8_launch<unit_k45<true>>(S, a, "mmv_q5_K"); break;
    case QTYPE_Q6_K: mmv_q8_launch<unit_q6k>(S, a, "mmv_q6_K"); break;
    default: break;
    }
}

void cu_mmv_prepare_kquant(void) {
    mmv_prepare_unit<unit_k45<false>>();
    mmv_prepare_unit<unit_k45<true>>();
    mmv_prepare_unit<unit_q6k>();
    mmv_xstm_prepare<unit_k45<false>, unit_q6k>();
    mmv_xstm_prepare<unit_k45<true>, unit_q6k>();
    mmv_xsg_prepare<unit_k45<false>>();
    mmv_xsg_prepare<unit_k45<true>>();
    mmv_xsg_prepare<unit_q6k>();
    mmv_xsgs_prepare<unit_k45<false>>();
    mmv_xsgs_prepare<unit_k45<true>>();
    mmv_xsgs_prepare<unit_q6k>();
}

int cu_mmv_q8_swiglu(cu_ctx *S, uint32_t type, const cu_mmv_args *a, float *h, const cu_q8 *hq) {
    switch (type) {
    case QTYPE_Q4_K: return mmv_xsg_launch<unit_k45<false>>(S, a, h, hq, "mmv_q4_K+swiglu");
    case QTYPE_Q5_K: return mmv_xsg_launch<unit_k45<true>>(S, a, h, hq, "mmv_q5_K+swiglu");
    case QTYPE_Q6_K: return mmv_xsg_launch<unit_q6k>(S, a, h, hq, "mmv_q6_K+swiglu");
    default: return 0;
    }
}

int cu_mmv_mixed_supported(uint32_t t1, uint32_t t2) { return cu_cap_gemv_mixed(t1, t2); }

void cu_mmv_q8_mixed(cu_ctx *S, uint32_t t1, uint32_t t2, const cu_mmv_args *a) {
    const int64_t xst_bytes = mmv_xst_bytes(S);
    const int64_t bytes = (int64_t)(a->rows[0] + a->rows[1]) * a->stride + (int64_t)a->rows[2] * a->stride2;
    if (cu_mmv_mixed_supported(t1, t2) && xst_bytes >= 0 && bytes >= xst_bytes) {
        if (t1 == QTYPE_Q4_K && mmv_xstm_launch<unit_k45<false>, unit_q6k>(S, a, "mmv_q4_K+q6_K")) return;
        if (t1 == QTYPE_Q5_K && mmv_xstm_launch<unit_k45<true>, unit_q6k>(S, a, "mmv_q5_K+q6_K")) return;
    }
    /* a launch per type: the first matrices, then the last */
    const int l = a->nmat - 1;
    cu_mmv_args b = *a, c = *a;
    b.nmat = l;
    b.stride2 = 0;
    cu_mmv_q8(S, t1, &b);
    c.w[0] = a->w[l];
    c.out[0] = a->out[l];
    c.bias[0] = a->bias[l];
    c.rows[0] = a->rows[l];
    c.nmat = 1;
    c.stride = a->stride2;
    c.stride2 = 0;
    cu_mmv_q8(S, t2, &c);
}
