/* context.c - see context.h. */
#define _POSIX_C_SOURCE 200809L
#include "context.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu/threads.h"

void context_params_default(mf_context_params *p) {
    memset(p, 0, sizeof *p);
    p->n_seq = 1;
}

#ifdef MINFER_CUDA
/* The kernel driver's own files: absent, the CUDA runtime can only fail, and its
 * message for that ("CUDA driver version is insufficient") names the wrong cause. */
static int nvidia_driver_present(void) {
    return access("/proc/driver/nvidia/version", F_OK) == 0 || access("/dev/nvidia0", F_OK) == 0;
}
#endif

int context_device_check(const char *device, int *use_cuda, int *gpu, mf_err *err) {
    const char *dev = device && *device ? device : "auto";
    *use_cuda = 0;
    *gpu = 0;
    if (!strcmp(dev, "auto")) {
        *use_cuda = cuda_device_count() > 0;
        return MF_OK;
    }
    if (!strcmp(dev, "cpu")) return MF_OK;
    if (!strncmp(dev, "cuda:", 5)) {
        /* cuda:N, the N-th device as the CUDA runtime numbers them (after CUDA_VISIBLE_DEVICES) */
        char *end;
        const long n = strtol(dev + 5, &end, 10);
        if (end == dev + 5 || *end || n < 0 || n > 1023)
            return mf_fail(err, MF_ERR_USAGE, "bad device '%s' (cuda:N with N a device number)", dev);
        *gpu = (int)n;
    } else if (strcmp(dev, "cuda")) {
        return mf_fail(err, MF_ERR_USAGE, "unknown device '%s' (cpu, cuda, cuda:N, auto)", dev);
    }
    *use_cuda = 1;
    /* Asking for a device this build or machine lacks is the caller's mistake (exit 1);
     * a driver that is there but fails is a device error, reported by the backend. */
#ifndef MINFER_CUDA
    return mf_fail(err, MF_ERR_USAGE, "device '%s': this minfer was built without CUDA (use --device cpu, "
                   "or rebuild with CUDA=1 where nvcc is installed)", dev);
#else
    const int n_gpu = cuda_device_count();
    if (n_gpu == 0 && !nvidia_driver_present())
        return mf_fail(err, MF_ERR_USAGE, "device '%s': no NVIDIA GPU found (no NVIDIA driver is loaded: "
                       "/proc/driver/nvidia/version and /dev/nvidia0 absent); use --device cpu", dev);
    if (n_gpu > 0 && *gpu >= n_gpu)
        return mf_fail(err, MF_ERR_USAGE, "no device cuda:%d (%d CUDA device%s here)", *gpu, n_gpu, n_gpu == 1 ? "" : "s");
    return MF_OK;
#endif
}

int context_gpus_check(const char *device, int n_gpus, mf_err *err) {
    int use_cuda, gpu;
    const int rc = context_device_check(device, &use_cuda, &gpu, err);
    if (rc || n_gpus <= 1) return rc;
    if (!use_cuda && !(device && !strcmp(device, "cpu")))
        return mf_fail(err, MF_ERR_USAGE,
                       "--gpus %d: no CUDA device here (--device cpu --gpus %d splits over CPU backends)", n_gpus, n_gpus);
    if (use_cuda && gpu + n_gpus > cuda_device_count())
        return mf_fail(err, MF_ERR_USAGE, "--gpus %d from cuda:%d: %d CUDA device%s here", n_gpus, gpu,
                       cuda_device_count(), cuda_device_count() == 1 ? "" : "s");
    return MF_OK;
}

int context_init(mf_context *c, mf_model *m, const mf_context_params *p, mf_err *err) {
    memset(c, 0, sizeof *c);
    c->m = m;
    c->n_ctx = p->n_ctx > 0 ? p->n_ctx : MF_MIN(m->hp.n_ctx_train, 4096);
    c->n_seq = p->n_seq > 0 ? p->n_seq : 1;
    if (c->n_ctx > (1 << 24)) return mf_fail(err, MF_ERR_USAGE, "context size %d too large", c->n_ctx);

    int want_cuda, gpu;
    int rc = context_device_check(p->device, &want_cuda, &gpu, err);
    if (rc) return rc;
    if ((rc = kv_type_parse(p->cache_type_k, "--cache-type-k", &c->kv_types.k, err)) ||
        (rc = kv_type_parse(p->cache_type_v, "--cache-type-v", &c->kv_types.v, err)))
        return rc;
    /* The default batch: 512 tokens on the CPU; 2048 on CUDA, where the prefill GEMMs
     * gain on wider batches (H200, 7B q4_K_M, pp3314: 10,245 tok/s in batches of 512,
     * 10,955 of 2048, 11,303 of 4096; bench/RESULTS.md) and 2048 keeps the activation
     * scratch of a 7B near 0.5 GiB. At least one token of each sequence. */
    c->n_batch = p->n_batch > 0 ? p->n_batch : MF_MAX(want_cuda ? 2048 : 512, c->n_seq);
    /* a step holds at most n_ctx tokens of each sequence: one prompt chunk, or one token of
     * each of up to n_seq sequences (64 sequences in contexts of 16 need a batch of 64) */
    if ((int64_t)c->n_batch > (int64_t)c->n_ctx * c->n_seq) c->n_batch = c->n_ctx * c->n_seq; /* < n_batch: fits */
    c->tp = p->n_gpus > 1 ? p->n_gpus : 1;
    const int split = c->tp > 1 || p->tp_always;
    const mf_model *m0 = m; /* what rank 0 runs: the model, or its shard */
    if (split) {
        if ((rc = context_gpus_check(p->device, c->tp, err))) return rc;
        if ((rc = tp_plan(m, c->tp, p->tensor_split, &c->plan, err))) return rc;
        c->ranks = calloc((size_t)c->tp, sizeof *c->ranks);
        if (!c->ranks) return mf_fail(err, MF_ERR_NOMEM, "out of memory");
        if ((rc = tp_shard(m, &c->plan, 0, &c->shard0, err))) goto fail;
        m0 = &c->shard0.m;
        for (int r = 1; r < c->tp; r++)
            if ((rc = tp_shard(m, &c->plan, r, &c->ranks[r].shard, err))) goto fail;
    }
    /* CPU ranks share the threads (0: the cores we may run on) */
    const int threads = p->n_threads > 0 ? MF_MAX(p->n_threads / c->tp, 1)
                        : c->tp > 1      ? MF_MAX(cpu_count_cores() / c->tp, 1)
                                         : 0;
    for (int r = 0; r < c->tp; r++) {
        mf_backend **bp = r ? &c->ranks[r].be : &c->be;
        if (want_cuda) {
            *bp = cuda_backend_new(gpu + r, err);
            if (!*bp) {
                rc = MF_ERR_DEVICE;
                goto fail;
            }
        } else {
            *bp = cpu_backend_new(threads, err);
            if (!*bp) {
                rc = MF_ERR_NOMEM;
                goto fail;
            }
        }
        const mf_model *mr = r ? &c->ranks[r].shard.m : m0;
        mf_forward *fw = r ? &c->ranks[r].fw : &c->fw;
        /* (init takes a writable model: the backend records its device copies in the
         * weights; a shard's layer weights are structs of its own) */
        if ((rc = (*bp)->init(*bp, (mf_model *)mr, c->n_ctx, c->n_seq, c->n_batch, &c->kv_types, err))) goto fail;
        if ((rc = forward_init(fw, *bp, mr, c->n_ctx, c->n_seq, c->n_batch, err))) goto fail;
        c->fws[r] = fw;
    }
    if (split) {
        mf_backend *bes[MF_TP_MAX];
        for (int r = 0; r < c->tp; r++) bes[r] = r ? c->ranks[r].be : c->be;
        if (want_cuda) {
            c->nccl = cuda_tp_new(bes, c->fws, c->tp, err);
            if (!c->nccl) {
                rc = MF_ERR_DEVICE;
                goto fail;
            }
        } else if (!(c->group = tp_host_group_new(c->tp, c->fws))) {
            rc = mf_fail(err, MF_ERR_NOMEM, "out of memory for the ranks' reduce");
            goto fail;
        }
    }
    kv_init(&c->kv, c->n_ctx, c->n_seq);
    /* one row per sequence a decode step can hold, not n_batch rows: 512 rows of a
     * 128k vocabulary would pin 256 MB for a CLI run that reads one */
    c->n_logit = MF_MIN(c->n_seq, c->n_batch);
    const size_t lbytes = sizeof(float) * (size_t)c->n_logit * (size_t)m->hp.n_vocab;
    for (int r = 1; r < c->tp; r++) {
        mf_backend *be = c->ranks[r].be;
        c->ranks[r].logits = be->host_alloc ? be->host_alloc(be, lbytes) : malloc(lbytes);
        if (!c->ranks[r].logits) {
            rc = mf_fail(err, MF_ERR_NOMEM, "out of memory for rank %d's logits (%zu bytes)", r, lbytes);
            goto fail;
        }
        c->tp_logits[r] = c->ranks[r].logits;
    }
    c->logits = c->be->host_alloc ? c->be->host_alloc(c->be, lbytes) : malloc(lbytes);
    c->tp_logits[0] = c->logits;
    c->pos = malloc(sizeof(int32_t) * (size_t)c->n_batch);
    c->seq = malloc(sizeof(int32_t) * (size_t)c->n_batch);
    c->want = malloc((size_t)c->n_batch);
    if (!c->logits || !c->pos || !c->seq || !c->want) {
        rc = mf_fail(err, MF_ERR_NOMEM, "out of memory for the context's host buffers (%zu bytes of logits)", lbytes);
        goto fail;
    }
    memset(c->want, 1, (size_t)c->n_batch);
    return MF_OK;
fail:
    context_free(c);
    return rc;
}

/* One backend's share of a context: its forward's scratch, its host logits, itself. */
static void free_backend(mf_backend *be, mf_forward *fw, float *logits) {
    if (fw->be) forward_free(fw);
    if (be && be->host_alloc) be->host_free(be, logits);
    else free(logits);
    if (be) be->destroy(be);
}

void context_free(mf_context *c) {
    /* the ranks' communicators before their backends */
    if (c->nccl) cuda_tp_free(c->nccl);
    if (c->group) tp_group_free(c->group);
    for (int r = 1; c->ranks && r < c->tp; r++) {
        free_backend(c->ranks[r].be, &c->ranks[r].fw, c->ranks[r].logits);
        tp_shard_free(&c->ranks[r].shard);
    }
    free(c->ranks);
    if (c->kv.seqs) kv_free(&c->kv);
    free_backend(c->be, &c->fw, c->logits);
    tp_shard_free(&c->shard0);
    free(c->pos);
    free(c->seq);
    free(c->want);
    memset(c, 0, sizeof *c);
}

/* One forward step of the context: its backend, or every rank of a split model. */
static int ctx_step(mf_context *c, const mf_batch *b, mf_err *err) {
    if (c->group || c->nccl) return tp_step(c->tp, c->fws, b, c->tp_logits, err);
    return forward_step(&c->fw, b, c->logits, err);
}

/* Every rank's backend drops positions >= from of seq. */
static void ctx_kv_truncate(mf_context *c, int seq, int from) {
    c->be->kv_truncate(c->be, seq, from);
    for (int r = 1; r < c->tp; r++) c->ranks[r].be->kv_truncate(c->ranks[r].be, seq, from);
}

/* Evaluates toks[0..n) at positions start.. of seq; logits of the last token. */
static int eval_chunks(mf_context *c, int seq, const int32_t *toks, int n, int start, mf_err *err) {
    int rc = MF_OK;
    for (int i = 0; i < n; i += c->n_batch) {
        int nb = MF_MIN(c->n_batch, n - i);
        for (int j = 0; j < nb; j++) {
            c->pos[j] = start + i + j;
            c->seq[j] = seq;
        }
        mf_batch b = { .n = nb, .tok = toks + i, .pos = c->pos, .seq = c->seq, .logits = NULL };
        rc = ctx_step(c, &b, err);
        if (rc < 0) break;
        kv_append(&c->kv, seq, toks + i, nb);
        rc = MF_OK;
    }
    return rc;
}

int context_eval(mf_context *c, int seq, const int32_t *toks, int n, const float **logits, mf_err *err) {
    if (seq < 0 || seq >= c->n_seq) return mf_fail(err, MF_ERR_USAGE, "sequence %d out of range", seq);
    if (n < 1) return mf_fail(err, MF_ERR_USAGE, "empty token list");
    if (n > c->n_ctx)
        return mf_fail(err, MF_ERR_INPUT, "prompt of %d tokens does not fit the context of %d (use --ctx)", n, c->n_ctx);
    int keep = kv_common_prefix(&c->kv, seq, toks, n);
    if (keep == n) keep = n - 1; /* re-evaluate the last token to get its logits */
    kv_truncate(&c->kv, seq, keep);
    ctx_kv_truncate(c, seq, keep);
    c->last_reused = keep;
    c->last_evaluated = n - keep;
    int rc = eval_chunks(c, seq, toks + keep, n - keep, keep, err);
    if (rc) return rc;
    *logits = c->logits;
    return MF_OK;
}

int context_decode1(mf_context *c, int seq, int32_t tok, const float **logits, mf_err *err) {
    return context_decode(c, &seq, &tok, 1, logits, err);
}

int context_decode(mf_context *c, const int *seqs, const int32_t *toks, int n, const float **logits, mf_err *err) {
    /* every check before the step, so a rejected batch changes no sequence */
    if (n < 1) return mf_fail(err, MF_ERR_USAGE, "decode: empty batch");
    if (n > c->n_batch)
        return mf_fail(err, MF_ERR_USAGE, "decode: %d sequences in one step, above the context's batch size %d", n,
                       c->n_batch);
    const int n_vocab = c->m->hp.n_vocab;
    for (int i = 0; i < n; i++) {
        const int s = seqs[i];
        if (s < 0 || s >= c->n_seq)
            return mf_fail(err, MF_ERR_USAGE, "decode: sequence %d out of range [0, %d)", s, c->n_seq);
        /* twice would put two tokens at one position of one cache (O(n^2): n <= n_batch) */
        for (int j = 0; j < i; j++)
            if (seqs[j] == s)
                return mf_fail(err, MF_ERR_USAGE, "decode: sequence %d given twice in one step (pairs %d and %d)", s,
                               j, i);
        if (c->kv.seqs[s].n >= c->n_ctx)
            return mf_fail(err, MF_ERR_INPUT, "context full (%d tokens) in sequence %d", c->n_ctx, s);
        if (toks[i] < 0 || toks[i] >= n_vocab)
            return mf_fail(err, MF_ERR_INPUT, "decode: token id %d of sequence %d out of range [0, %d)", toks[i], s,
                           n_vocab);
        c->pos[i] = c->kv.seqs[s].n;
        c->seq[i] = s;
    }
    /* distinct sequences in range: n <= n_seq, so the n rows fit the n_logit of the buffer */
    mf_batch b = { .n = n, .tok = toks, .pos = c->pos, .seq = c->seq, .logits = c->want };
    const int rc = ctx_step(c, &b, err);
    if (rc < 0) return rc;
    if (rc != n) return mf_fail(err, MF_ERR_DEVICE, "decode: the step returned %d logit rows for %d sequences", rc, n);
    for (int i = 0; i < n; i++) kv_append(&c->kv, seqs[i], toks + i, 1);
    *logits = c->logits;
    return MF_OK;
}

int context_seq_clear(mf_context *c, int seq, mf_err *err) {
    if (seq < 0 || seq >= c->n_seq) return mf_fail(err, MF_ERR_USAGE, "sequence %d out of range [0, %d)", seq, c->n_seq);
    kv_truncate(&c->kv, seq, 0);
    ctx_kv_truncate(c, seq, 0);
    return MF_OK;
}
