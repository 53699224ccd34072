/* quant.c - ggml block formats: type table and scalar reference kernels.
 * See quant.h. Layout facts: ../shared/FORMATS.md. */
#include "quant.h"

#include <math.h>
#include <string.h>

#include "util.h"

/* ------------------------------------------------------------------------- */
/* Type table                                                                */
/* ------------------------------------------------------------------------- */

static const qtype_traits traits[QTYPE_COUNT] = {
    [QTYPE_F32] = { "f32", 1, 4, 1 },
    [QTYPE_F16] = { "f16", 1, 2, 1 },
    [QTYPE_Q4_0] = { "q4_0", QK4_0, sizeof(block_q4_0), 1 },
    [QTYPE_Q4_1] = { "q4_1", QK4_0, sizeof(block_q4_1), 1 },
    [QTYPE_Q5_0] = { "q5_0", QK4_0, sizeof(block_q5_0), 1 },
    [QTYPE_Q5_1] = { "q5_1", QK4_0, sizeof(block_q5_1), 1 },
    [QTYPE_Q8_0] = { "q8_0", QK8_0, sizeof(block_q8_0), 1 },
    [QTYPE_Q8_1] = { "q8_1", QK8_0, sizeof(block_q8_1), 0 },
    [QTYPE_Q2_K] = { "q2_K", QK_K, 84, 0 },
    [QTYPE_Q3_K] = { "q3_K", QK_K, 110, 0 },
    [QTYPE_Q4_K] = { "q4_K", QK_K, sizeof(block_q4_K), 1 },
    [QTYPE_Q5_K] = { "q5_K", QK_K, sizeof(block_q5_K), 1 },
    [QTYPE_Q6_K] = { "q6_K", QK_K, sizeof(block_q6_K), 1 },
    [QTYPE_Q8_K] = { "q8_K", QK_K, sizeof(block_q8_K), 0 },
    [QTYPE_BF16] = { "bf16", 1, 2, 1 },
};

const qtype_traits *qtype_get(uint32_t type) {
    if (type >= QTYPE_COUNT || !traits[type].name) return NULL;
    return &traits[type];
}

const char *qtype_name(uint32_t type) {
    const qtype_traits *t = qtype_get(type);
    return t ? t->name : "unknown";
}

uint64_t qtype_row_size(uint32_t type, uint64_t n) {
    const qtype_traits *t = qtype_get(type);
    if (!t || n % t->blck) return 0;
    return n / t->blck * t->type_size;
}

/* TODO(quant helper): dequantize / quantize / dot reference kernels. */
