/* paths.h - the CUDA backend's table of optional fast paths (src/paths.h).
 *
 * One row per path; MINFER_CUDA_DISABLE=name,... turns paths off. The notice line
 * names the ones that are off, `minfer paths` and the README print the table, and
 * tests/run_cuda.sh runs every entry off and checks the tokens. Plain C: the CLI
 * prints the table in builds without CUDA too. */
#ifndef MINFER_CUDA_PATHS_H
#define MINFER_CUDA_PATHS_H

#include "../paths.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cu_path_id {
    CU_PATH_GRAPH = 0,    /* decode steps captured as CUDA graphs and replayed */
    CU_PATH_PDL,          /* programmatic dependent launch */
    CU_PATH_Q8,           /* GEMVs on int8 activations (dp4a) */
    CU_PATH_FUSED,        /* decode blocks as fused launch sequences (blocks.cu) */
    CU_PATH_ADD_GEMV,     /* the residual add in the GEMV's store */
    CU_PATH_QKV_MIXED,    /* q/k/v of two weight types in one launch (xstm) */
    CU_PATH_XSTM_STAGED,  /* xstm's second-type activations staged in shared memory */
    CU_PATH_SWIGLU_GEMV,  /* SwiGLU and its q8 in the gate+up GEMV's store (xsg) */
    CU_PATH_XSG_SHARED,   /* that launch with one ring per block (xsgs) */
    CU_PATH_TMA_RING,     /* the TMA-fed ring GEMVs (xst family, sm_90+) */
    CU_PATH_WIDE_RING,    /* wide rows over warp pairs fed by a TMA ring (xst2) */
    CU_PATH_RING_PAIRS,   /* ring loops take two rows a step */
    CU_PATH_GEMV_COLS,    /* 2..8-column GEMVs with the activations staged in shared memory */
    CU_PATH_HOST_STORE,   /* graph logits stored into pinned host memory by a kernel */
    CU_PATH_ATTN_PRE,     /* decode attention reads K/V before the kernel ahead ends */
    CU_PATH_ROPE_ROW,     /* decode attention takes the RoPE row the embedding copied */
    CU_PATH_ATTN_FIT,     /* decode attention's arrays fitted to the model's head group */
    CU_PATH_ATTN_DEC_WIDE, /* decode attention's fused kernel for head dim 256, windows, q/k norms */
    CU_PATH_POST_NORM_ADD, /* gemma3's post-norms in the next add+norm kernel */
    CU_PATH_NORM_WARPS,   /* the one-token RMSNorm by one-warp blocks */
    CU_PATH_FLASH,        /* prefill flash attention */
    CU_PATH_FLASH_DB,     /* its K/V tiles double-buffered by cp.async */
    CU_PATH_FLASH_GQA,    /* 2 query heads of one kv group a block, where the grid is one wave */
    CU_PATH_MMA,          /* prefill GEMM on f16 tensor cores */
    CU_PATH_MMQ,          /* prefill GEMMs on int8 tensor cores (q4_K, q6_K, q8_0) */
    CU_PATH_MMQ_NORM,     /* the prefill RMSNorm writes the MMQ int8 form of its output */
    CU_PATH_MMQ_DSC,      /* q4_K MMQ scales from a registration-time plane (W_dsc) */
    CU_PATH_MMQ_EXP,      /* q6_K MMQ codes and scales from a registration-time plane (W_exp + W_dsc) */
    CU_PATH_MMQ_GU,       /* a layer's gate and up as one MMQ GEMM */
    CU_PATH_MMF,          /* q4_K/q6_K prefill GEMMs on f16 tensor cores, weights dequantized in registers */
    CU_PATH_MMF_COLS,     /* those GEMMs for 2..127 columns (several sequences a step) */
    CU_PATH_MMF_IN,       /* at 8 columns the norm and attention write mmf's f16 activations */
    CU_PATH_MMF_QK,       /* at 8 columns a layer's q and k as one column-kernel launch */
    CU_PATH_MMF_SWIGLU,   /* at 8 columns the SwiGLU in the gate+up column kernel's store */
    CU_PATH_COUNT
} cu_path_id;

extern const mf_path cu_paths[CU_PATH_COUNT];

#ifdef __cplusplus
}
#endif
#endif
