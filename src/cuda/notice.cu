/* notice.cu - the one line the backend prints at its first step (which device, which
 * optional paths are off, which GEMV schedules run, device memory), and the launch
 * census MINFER_VERBOSE=1 (or MINFER_CENSUS=1) prints at exit (tests/run_cuda.sh reads both: a path
 * that is on but never ran is a fallback nobody would otherwise see). */
#include "backend.cuh"

#include <string.h>

void cu_print_notice(cu_state *S) {
    if (S->notice_done || mf_log_quiet) return;
    S->notice_done = 1;
    const double gib = 1073741824.0;
    /* the prefill GEMM's f16 weight tile is a derived copy of weights (a plane):
     * reported apart from the working scratch, which is held to 10% of weights + KV */
    const size_t plane = (size_t)S->w16_cap * sizeof(__half);
    const size_t scratch = S->own_scratch + S->fw_scratch - plane;
    const double base = (double)S->wbytes + (double)S->kvbytes;
    int on[CU_PATH_COUNT];
    for (int i = 0; i < CU_PATH_COUNT; i++) on[i] = S->on[i];
    char off[512];
    const int n_off = paths_disabled(cu_paths, CU_PATH_COUNT, on, off, sizeof off);
    char gemv[160];
    if (!S->on[CU_PATH_Q8]) snprintf(gemv, sizeof gemv, "f32");
    else if (S->tune.xst_bytes >= 0 && S->on[CU_PATH_TMA_RING])
        snprintf(gemv, sizeof gemv, "q8-dp4a xs+xst>=%lldMB%s%s, %s for 2..8 columns", S->tune.xst_bytes >> 20,
                 S->xs_wide_mats ? (S->on[CU_PATH_WIDE_RING] ? ", xst2 for wide rows" : ", xs2/pp for wide rows") : "",
                 MINFER_CUDA_L2_HINT ? " +l2-evict-first" : "", S->on[CU_PATH_GEMV_COLS] ? "cols" : "v1");
    else snprintf(gemv, sizeof gemv, "q8-dp4a xs%s, %s for 2..8 columns", S->xs_wide_mats ? ", xs2/pp for wide rows" : "",
                  S->on[CU_PATH_GEMV_COLS] ? "cols" : "v1");
    /* the fused blocks or, for a descriptor they cannot run (path "fused" on), the
     * composed blocks, one kernel per primitive op, and the reason */
    const char *why = S->m ? cu_blocks_unfused(&S->m->desc) : NULL;
    char blocks[96];
    if (!S->on[CU_PATH_FUSED]) snprintf(blocks, sizeof blocks, "composed");
    else if (why) snprintf(blocks, sizeof blocks, "composed (fused blocks lack %s)", why);
    else snprintf(blocks, sizeof blocks, "fused");
    /* the plan in brief (minfer info --plan prints it whole) */
    char plan[256] = "no model";
    if (S->m) cu_plan_brief(S->plan_made ? &S->plan : cu_plan_of(S, 0), plan, sizeof plan);
    fprintf(stderr,
            "minfer/cuda: %s (sm_%d%d, %.0f GiB, tune %s): blocks=%s gemv=%s prefill=%s attn=%s%s; %s; paths off: %s; "
            "mem weights=%.2f GiB kv=%.2f GiB (%s) scratch=%.2f GiB (+%.1f%%) f16-plane=%.2f GiB mmq-planes=%.2f GiB (%d planes) mmf-planes=%.2f GiB (%d planes)\n",
            S->prop.name, S->prop.major, S->prop.minor, S->prop.totalGlobalMem / gib, S->tune.name, blocks, gemv,
            S->on[CU_PATH_MMQ] ? S->on[CU_PATH_MMF] ? S->on[CU_PATH_MMA] ? "mmf-f16 (q4_K q6_K, 128+ tokens) mmq-int8 (q4_K q6_K q8_0; others mma-f16)" : "mmf-f16 (q4_K q6_K, 128+ tokens) mmq-int8 (q4_K q6_K q8_0; others gemv)" : S->on[CU_PATH_MMA] ? "mmq-int8 (q4_K q6_K q8_0; others mma-f16)" : "mmq-int8 (q4_K q6_K q8_0; others gemv)"
                               : S->on[CU_PATH_MMA] ? "mma-f16" : "gemv",
            S->on[CU_PATH_FLASH] && cu_attn_flash_supported(S, S->hp.head_dim) ? "flash+split" : "split",
            S->rope_row ? "+rope-row" : "", plan, n_off ? off : "none", S->wbytes / gib, S->kvbytes / gib, S->kq ? "q8_0" : "f16", scratch / gib,
            base > 0 ? 100.0 * scratch / base : 0.0, plane / gib, S->planebytes / gib, S->nplanes, S->mmfbytes / gib, S->nmmf);
    if (S->verbose)
        fprintf(stderr, "minfer/cuda: scratch: backend %.1f MiB (q8 %lld values, attn %d chunks of %d, gemm f16 %lld+%lld), "
                "forward %.1f MiB\n", S->own_scratch / 1048576.0, (long long)S->q8_cap, S->att_nchunks, S->att_chunk,
                (long long)S->x16_cap, (long long)S->w16_cap, S->fw_scratch / 1048576.0);
}

void cu_print_census(const cu_state *S) {
    const cu_census *c = &S->n;
    fprintf(stderr,
            "minfer/cuda: census: launches %llu, graph replays %llu, eager steps %llu, fused blocks %llu; xst2 launches "
            "%llu, add-in-gemv launches %llu, xstm launches %llu, swiglu-gemv launches %llu (shared ring %llu), "
            "ring-pairs launches %llu, cols launches %llu, graph downloads: host-store %llu, copy-node %llu; "
            "GEMMs: mmf q4_K %llu, q6_K %llu (column kernel %llu), mmq q4_K %llu, q6_K %llu (of them on a plane %llu), q8_0 %llu (gate+up pairs %llu), f16 fallback %llu; "
            "norms writing int8 %llu, f16 %llu; q+k launches %llu, gate+up+swiglu launches %llu; experts' FFNs on "
            "grouped GEMVs %llu, grouped MMQ %llu\n",
            (unsigned long long)c->launches, (unsigned long long)S->replays, (unsigned long long)S->eager,
            (unsigned long long)c->fused_blocks, (unsigned long long)c->xst2, (unsigned long long)c->add_gemv,
            (unsigned long long)c->xstm, (unsigned long long)c->swiglu_gemv, (unsigned long long)c->xsg_shared,
            (unsigned long long)c->pairs, (unsigned long long)c->cols, (unsigned long long)c->host_store, (unsigned long long)c->copy_node,
            (unsigned long long)c->mmf[0], (unsigned long long)c->mmf[1], (unsigned long long)c->mmf_cols, (unsigned long long)c->mmq[0], (unsigned long long)c->mmq[1], (unsigned long long)c->mmq_plane, (unsigned long long)c->mmq[2],
            (unsigned long long)c->mmq_gu, (unsigned long long)c->mm_f16, (unsigned long long)c->mmq_norm,
            (unsigned long long)c->mmf_norm, (unsigned long long)c->mmf_qk, (unsigned long long)c->mmf_swiglu,
            (unsigned long long)c->moe_gemv, (unsigned long long)c->moe_mmq);
}
