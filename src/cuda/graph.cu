/* graph.cu - the step: eager, or captured once as a CUDA graph and replayed.
 *
 * A decode step of n tokens (n <= CU_GRAPH_MAXN, every row wanting logits: one token
 * of each of n sequences) is captured at the first step of that size, once per forward
 * scratch, and replayed for every later one (path "graph"). Every kernel reads token/position/sequence from device memory, filled
 * by the graph's first node (a memcpy from pinned host memory the host rewrites
 * before each replay); the attention grid covers the whole context with early exit.
 * Logit downloads inside the capture go straight to the context's logits where
 * be_host_alloc pinned them (a kernel storing there, cu_store_host; path
 * "host-store"), else to pinned staging memory, copied out after the replay. */
#include "backend.cuh"

#include <string.h>

void cu_be_download(mf_backend *be, void *dst, const void *src, size_t nbytes) {
    cu_state *S = cu_st(be);
    if (!S->capturing) cudaSetDevice(S->device);
    cu_settle(S);
    if (S->capturing) {
        cu_graph_rec *g = S->graph;
        size_t off;
        uint8_t *p = cu_cap_pinned(S, nbytes, &off);
        if (!p || g->ncopies == CU_GRAPH_MAXCOPY) {
            cu_record(S, cudaErrorNotSupported, "download inside graph capture", __FILE__, __LINE__);
            return;
        }
        const cu_host_buf *hb = cu_host_pinned(S, dst, nbytes);
        char *direct = hb ? (char *)dst : NULL;
        /* into pinned host_alloc memory by a kernel where it can (path host-store) */
        const int store = hb && hb->dev && S->on[CU_PATH_HOST_STORE] && nbytes % 16 == 0 && (uintptr_t)dst % 16 == 0 &&
                          (uintptr_t)src % 16 == 0;
        if (store) {
            cu_store_host(S, (char *)hb->dev + ((const char *)dst - (const char *)hb->p), src, nbytes);
            S->n.host_store++;
        } else {
            CU_CHECK(S, cudaMemcpyAsync(direct ? (void *)direct : (void *)p, src, nbytes, cudaMemcpyDeviceToHost,
                                        S->stream));
            if (S->on[CU_PATH_HOST_STORE] && !S->n.copy_node)
                fprintf(stderr, "minfer/cuda: the decode graph downloads %zu bytes by a copy node, not the host-store "
                                "kernel (%s)\n",
                        nbytes, !hb        ? "the destination is not pinned host_alloc memory"
                                : !hb->dev ? "the runtime gave no device address for it"
                                           : "not 16-byte aligned");
            S->n.copy_node++;
        }
        cu_copy *c = &g->copies[g->ncopies++];
        c->pin_off = off;
        c->bytes = nbytes;
        c->direct = direct;
        const char *d = (const char *)dst, *l = (const char *)S->cap_logits;
        if (l && d >= l && d + nbytes <= l + S->cap_logits_bytes) {
            c->rel = 1;
            c->off = (size_t)(d - l);
        } else {
            c->rel = 0;
            c->dst = (char *)dst;
        }
        return;
    }
    CU_CHECK(S, cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, S->stream));
    CU_CHECK(S, cudaStreamSynchronize(S->stream));
}

static int step_eager(cu_state *S, mf_forward *fw, const mf_batch *b, float *logits, mf_err *err) {
    S->eager++;
    return forward_generic(fw, b, logits, err);
}

/* The graph's pinned staging: the batch metadata, then room for its downloads where
 * they cannot go straight to pinned logits (a copy node's staging) and its uploads. */
static int graph_pinned(cu_state *S, cu_graph_rec *g, int n) {
    if (g->pinned) return 0;
    g->pinned_cap = CU_GRAPH_PINNED + (size_t)n * S->hp.n_vocab * sizeof(float) + (size_t)3 * S->n_batch * 4;
    if (cudaMallocHost((void **)&g->pinned, g->pinned_cap) != cudaSuccess) {
        (void)cudaGetLastError();
        g->pinned = NULL;
        snprintf(S->errmsg, sizeof S->errmsg, "no pinned memory (%zu bytes) for the graph of %d tokens", g->pinned_cap, n);
        return -1;
    }
    return 0;
}

static int graph_capture(cu_state *S, cu_graph_rec *g, mf_forward *fw, const mf_batch *b, float *logits, mf_err *err) {
    if (g->valid) {
        cudaGraphExecDestroy(g->exec);
        g->valid = 0;
    }
    if (graph_pinned(S, g, b->n)) return -1;
    S->graph = g;
    g->pinned_used = (size_t)3 * S->n_batch * sizeof(int32_t);
    g->ncopies = 0;
    S->cap_logits = logits;
    S->cap_logits_bytes = (size_t)b->n * S->hp.n_vocab * sizeof(float);
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamBeginCapture(S->stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
        cu_record(S, e, "cudaStreamBeginCapture", __FILE__, __LINE__);
        return -1;
    }
    S->capturing = 1;
    cu_trace_capture_begin(S->trace);
    cu_upload_meta(S, b);
    mf_err ferr;
    ferr.msg[0] = 0;
    const int rc = forward_generic(fw, b, logits, &ferr);
    cu_settle(S);
    e = cudaStreamEndCapture(S->stream, &graph);
    S->capturing = 0;
    if (e != cudaSuccess && !S->err) cu_record(S, e, "cudaStreamEndCapture", __FILE__, __LINE__);
    if (rc < 0 || S->err) {
        if (graph) cudaGraphDestroy(graph);
        if (rc < 0 && !S->err) snprintf(S->errmsg, sizeof S->errmsg, "%s", ferr.msg);
        (void)err;
        return -1;
    }
    e = cudaGraphInstantiate(&g->exec, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
        cu_record(S, e, "cudaGraphInstantiate", __FILE__, __LINE__);
        return -1;
    }
    g->valid = 1;
    g->fw = fw;
    g->fw_x = fw->x;
    g->n_out = rc;
    return 0;
}

static int step_replay(cu_state *S, cu_graph_rec *g, const mf_batch *b, float *logits) {
    int32_t *h = (int32_t *)g->pinned;
    const int nb = S->n_batch;
    for (int i = 0; i < b->n; i++) {
        h[i] = b->tok ? b->tok[i] : 0;
        h[nb + i] = b->pos ? b->pos[i] : i;
        h[2 * nb + i] = b->seq ? b->seq[i] : 0;
    }
    const double t0 = S->st.on ? mf_time_s() : 0.0;
    if (S->st.on) CU_CHECK(S, cudaEventRecord(S->st.e0, S->stream));
    CU_CHECK(S, cudaGraphLaunch(g->exec, S->stream));
    if (S->st.on) CU_CHECK(S, cudaEventRecord(S->st.e1, S->stream));
    CU_CHECK(S, cudaStreamSynchronize(S->stream));
    const double t1 = S->st.on ? mf_time_s() : 0.0;
    for (int i = 0; i < g->ncopies; i++) {
        const cu_copy *c = &g->copies[i];
        char *dst = c->rel ? (char *)logits + c->off : c->dst;
        if (!c->direct) memcpy(dst, g->pinned + c->pin_off, c->bytes);
        else if (dst != c->direct) memcpy(dst, c->direct, c->bytes); /* (another buffer than at capture) */
    }
    if (S->st.on) {
        const double t2 = mf_time_s();
        float ms = 0.0f;
        if (cudaEventElapsedTime(&ms, S->st.e0, S->st.e1) == cudaSuccess) S->st.gpu_ms += ms;
        S->st.call_s += t2 - t0;
        S->st.copy_s += t2 - t1;
        if (S->st.t_prev > 0.0) {
            S->st.wall_s += t0 - S->st.t_prev;
            S->st.nwall++;
        }
        S->st.t_prev = t0;
        S->st.n++;
    }
    S->replays++;
    return g->n_out;
}

int cu_be_forward(mf_backend *be, mf_forward *fw, const mf_batch *b, float *logits, mf_err *err) {
    cu_state *S = cu_st(be);
    if (b->n <= 0 || b->n > S->n_batch)
        return mf_fail(err, MF_ERR_USAGE, "cuda: batch of %d tokens (n_batch %d)", b->n, S->n_batch);
    cudaSetDevice(S->device);
    S->in_forward = 1;
    S->meta_valid = 0;
    S->cs_now_ok = 0;
    S->res_y = NULL;
    int rc;
    int every = b->n <= CU_GRAPH_MAXN && b->n <= fw->n_logit; /* every row wants logits */
    for (int i = 0; every && i < b->n; i++) every = !b->logits ? b->n == 1 : b->logits[i];
    /* the composed blocks route experts on the host (a download mid-step): no graph */
    if (every && fw->m->desc.n_expert > 1 && cu_plan_of(S, fw->reduce != NULL)->composed) every = 0;
    if (S->on[CU_PATH_GRAPH] && !S->graph_failed && every) {
        cu_graph_rec *g = &S->graphs[b->n - 1];
        if (!(g->valid && g->fw == fw && g->fw_x == fw->x)) {
            if (graph_capture(S, g, fw, b, logits, err)) {
                /* capture is an optimisation: say why once, then run eagerly for good */
                fprintf(stderr, "minfer/cuda: decode graph capture failed (%s); graphs off\n", S->errmsg);
                S->graph_failed = 1;
                S->err = 0;
                S->errmsg[0] = 0;
                (void)cudaGetLastError();
                cudaStreamSynchronize(S->stream);
                (void)cudaGetLastError();
                S->meta_valid = 0;
                S->res_y = NULL;
                rc = step_eager(S, fw, b, logits, err);
                goto done;
            }
        }
        rc = step_replay(S, g, b, logits);
    } else {
        rc = step_eager(S, fw, b, logits, err);
    }
done:
    cu_settle(S);
    S->in_forward = 0;
    S->meta_valid = 0;
    cu_print_notice(S);
    if (S->err) {
        S->err = 0;
        return mf_fail(err, MF_ERR_DEVICE, "%s", S->errmsg);
    }
    return rc;
}

