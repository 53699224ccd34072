/* mmv_q.cu - the q8 GEMV dispatcher (cu_mmv_q8: every type with a unit; the K-quants
 * through mmv_kquant.cu), the set-up of every unit's schedules, and the launchers of the
 * 32-value formats (q4_0, q4_1, q5_0, q5_1, q8_0; their units: mmv_q32.cuh). */
#include "mmv.cuh"
#include "mmv_q32.cuh"

void cu_mmv_q8_kquant(cu_ctx *S, uint32_t type, const cu_mmv_args *a);
void cu_mmv_prepare_kquant(void);

int cu_mmv_q8_supported(uint32_t type) { return cu_cap_gemv_q8(type); }

void cu_mmv_q8(cu_ctx *S, uint32_t type, const cu_mmv_args *a) {
    switch (type) {
    case QTYPE_Q4_0: mmv_q8_launch<unit_q4<QTYPE_Q4_0>>(S, a, "mmv_q4_0"); break;
    case QTYPE_Q4_1: mmv_q8_launch<unit_q4<QTYPE_Q4_1>>(S, a, "mmv_q4_1"); break;
    case QTYPE_Q5_0: mmv_q8_launch<unit_q4<QTYPE_Q5_0>>(S, a, "mmv_q5_0"); break;
    case QTYPE_Q5_1: mmv_q8_launch<unit_q4<QTYPE_Q5_1>>(S, a, "mmv_q5_1"); break;
    case QTYPE_Q8_0: mmv_q8_launch<unit_q8_0>(S, a, "mmv_q8_0"); break;
    default: cu_mmv_q8_kquant(S, type, a); break;
    }
}

void cu_mmv_prepare(void) {
    mmv_prepare_unit<unit_q4<QTYPE_Q4_0>>();
    mmv_prepare_unit<unit_q4<QTYPE_Q4_1>>();
    mmv_prepare_unit<unit_q4<QTYPE_Q5_0>>();
    mmv_prepare_unit<unit_q4<QTYPE_Q5_1>>();
    mmv_prepare_unit<unit_q8_0>();
    cu_mmv_prepare_kquant();
}

int cu_mmv_xst_smem_need(void) { return MMV_XST_SMEM; }

int cu_mmv_xs_takes(uint32_t type, int K) {
    const int units = type == QTYPE_Q4_K || type == QTYPE_Q5_K || type == QTYPE_Q6_K ? K / 64 : K / 32;
    return cu_mmv_q8_supported(type) && mmv_xs_upl(units, 1) > 0;
}
