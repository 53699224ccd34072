/* paths.c - the CUDA backend's optional paths (paths.h). Each doc says what runs
 * when the path is on and what runs instead when it is off; every "off" gives the
 * same tokens (tests/run_cuda.sh). The measurements behind each default are in
 * bench/RESULTS.md under the path's name. */
#include "cuda/paths.h"

const mf_path cu_paths[CU_PATH_COUNT] = {
    [CU_PATH_GRAPH] = { "graph", "decode steps captured once per batch size as a CUDA graph and replayed; off: launched eagerly", 1 },
    [CU_PATH_PDL] = { "pdl", "programmatic dependent launch (sm_90+): a kernel starts while the one ahead drains", 1 },
    [CU_PATH_Q8] = { "q8", "decode GEMVs on int8 activations (dp4a) written by the kernel that produces them; off: f32 activations", 1 },
    [CU_PATH_FUSED] = { "fused", "decode blocks as fused launch sequences; off: one kernel per primitive op", 1 },
    [CU_PATH_ADD_GEMV] = { "add-in-gemv", "the residual add in the attention-output and ffn_down GEMVs' stores; off: in the next norm", 1 },
    [CU_PATH_QKV_MIXED] = { "qkv-mixed", "q/k of q4_K/q5_K and a q6_K v in one GEMV launch (xstm); off: a launch per type", 1 },
    [CU_PATH_XSTM_STAGED] = { "xstm-staged", "that launch stages the v type's activations in shared memory; off: from L2", 1 },
    [CU_PATH_SWIGLU_GEMV] = { "swiglu-gemv", "SwiGLU and its q8 in the gate+up GEMV's store (xsg); off: a kernel of its own", 1 },
    [CU_PATH_XSG_SHARED] = { "xsg-shared", "that launch with one ring per block whose rows any free warp takes; off: a ring per warp", 1 },
    [CU_PATH_TMA_RING] = { "tma-ring", "GEMVs of 8 MB or more fed by a TMA shared-memory ring (xst, sm_90+); off: xs", 1 },
    [CU_PATH_WIDE_RING] = { "wide-ring", "rows of 129..256 units split over warp pairs fed by a TMA ring (xst2); off: xs2 or pp", 1 },
    [CU_PATH_RING_PAIRS] = { "ring-pairs", "the ring GEMVs' loops take two rows a step; off: one", 1 },
    [CU_PATH_GEMV_COLS] = { "gemv-cols", "GEMVs of 2..8 columns (several sequences) from activations staged in shared memory, two rows a warp; off: v1", 1 },
    [CU_PATH_HOST_STORE] = { "host-store", "the decode graph stores the logits into pinned host memory by a kernel; off: a copy node", 1 },
    [CU_PATH_ATTN_PRE] = { "attn-pre", "decode attention reads its first K/V tile before the kernel ahead ends (needs pdl)", 1 },
    [CU_PATH_ROPE_ROW] = { "rope-row", "decode attention (one query head per kv head, head dim 128) takes the RoPE row the embedding copied", 1 },
    [CU_PATH_ATTN_FIT] = { "attn-fit", "decode attention's head-group arrays sized to the model; off: 8 query heads", 1 },
    [CU_PATH_ATTN_DEC_WIDE] = { "attn-dec-wide", "the one-token decode attention kernel (its RoPE and cache store fused) also for head dim 256 and sliding windows, with gemma3's q/k norms in its store; off: a q/k norm launch each, the store kernel, the split kernel and its combine", 1 },
    [CU_PATH_POST_NORM_ADD] = { "post-norm-add", "decode: gemma3's post-norm of a block's output applied by the next add+norm kernel (two row sums in one launch, the same bits); off: a norm launch of its own", 1 },
    [CU_PATH_NORM_WARPS] = { "norm-warps", "the one-token RMSNorm of 2048/4096-wide rows by one-warp blocks; off: 4 blocks a row", 1 },
    [CU_PATH_FLASH] = { "flash", "prefill attention by the flash kernel; off: the split kernel, 8 tokens at a time", 1 },
    [CU_PATH_FLASH_DB] = { "flash-db", "prefill flash attention with its K/V tiles double-buffered by cp.async (the next 64 keys in flight while these are multiplied); off: plain loads, the overlap only from the SM's other blocks (3314 tokens: 387.9 vs 427.0 us on the 8B, 385.4 vs 434.0 on the 7B; H200, bench/cuda_attn)", 1 },
    [CU_PATH_FLASH_GQA] = { "flash-gqa", "where query heads share a kv head and the one-head grid (heads x 64-token tiles) fits in one wave (3 blocks a SM), a flash block takes 2 query heads of one kv group and stages each K/V tile once for both (8B, 512 tokens: 23.2 vs 26.9 us; at 3314 tokens, many waves, 2 heads lost, 406.1 vs 387.9: 8 warps a SM instead of 12); off: one head a block", 1 },
    [CU_PATH_MMA] = { "mma", "prefill GEMMs on f16 tensor cores; off: the GEMV, 8 tokens at a time", 1 },
    [CU_PATH_MMQ] = { "mmq", "GEMMs of 9+ tokens of q4_K/q6_K/q8_0 on int8 tensor cores, activations quantized by a prepass; off: path mma", 1 },
    [CU_PATH_MMQ_NORM] = { "mmq-norm", "the prefill RMSNorm (with its residual add) writes the int8 form the MMQ GEMMs after it read (the f32 form only where another GEMM path needs it); off: a prepass kernel", 1 },
    [CU_PATH_MMQ_DSC] = { "mmq-dsc", "q4_K layer matrices get a scale plane at load (d*sc and dmin as f32, the mins as bytes; 44 B per 256 weights) that their MMQ GEMMs stage; off: decoded in the kernel each stage", 1 },
    [CU_PATH_MMQ_EXP] = { "mmq-exp", "q6_K layer matrices get a plane at load (codes as centred int8, d*sc as f32; 320 B per 256 weights) that their MMQ GEMMs read; off: decoded from the q6_K bytes in the kernel", 1 },
    [CU_PATH_MMQ_GU] = { "mmq-gu", "the prefill runs a layer's gate and up as one MMQ GEMM of twice n_ff rows where the weights lie one after the other (one plane for both); off: two GEMMs", 1 },
    [CU_PATH_MMF] = { "mmf", "q4_K and q6_K GEMMs of 128+ tokens on f16 tensor cores: a plane at load holds the codes in mma fragment order with their scales as f16 (q4_K 320 B, q6_K 576 B per 512 weights), dequantized in registers; activations f16; off: the int8 MMQ kernel", 1 },
    [CU_PATH_MMF_IN] = { "mmf-in", "at 8 columns (path mmf-cols' layers) the kernels ahead of the mmf GEMMs write their f16 activations too, in the convert's rounding: the RMSNorm (with its residual add) and the attention; off: a convert launch after each (at 128+ tokens the convert stays: the norm's f16 store measured 18,882 vs 19,362 tok/s pp512 on the 7B)", 1 },
    [CU_PATH_MMF_QK] = { "mmf-qk", "at 8 columns (path mmf-cols' layers) a layer's q and k projections run as one launch of the column kernel over both planes, the same sums in the same order (7B: two 4096-row launches of ~8.4 us each on ~1.25 TB/s become one of 8192 rows); off: two launches", 1 },
    [CU_PATH_MMF_SWIGLU] = { "mmf-swiglu", "at 8 columns on sm_90 the gate+up column-kernel launch pairs each block's gate tiles with their up tiles and stores f16(silu(gate) * up) for ffn_down, the same sums and rounding (the SwiGLU launch and the f32 gate/up stores gone); off: a SwiGLU launch", 1 },
    [CU_PATH_MMF_COLS] = { "mmf-cols", "decode steps of 8 sequences run whole layers on path mmf's planes and arithmetic where every layer matrix has its plane: a block is 2 or 4 16-row tiles whose 8 or 16 warps split K, each warp streaming its records through a TMA ring (sm_90; else register prefetch) (2..7 columns stay on the GEMVs, 9+ on MMQ: measured faster there); off: the 8-column GEMV", 1 },
};
