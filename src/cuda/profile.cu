/* profile.cu - MINFER_CUDA_PROFILE=1: the GPU time of every eager launch (prefill, and
 * decode with path graph off), summed per kernel and weight tensor, printed at exit
 * as a table (issue 29's per-kernel-class breakdown of a whole prefill).
 *
 * cu_launch records an event before each launch (cu_ctx.prof_next) and cu_launch_check
 * one after it (cu_prof_end), so
 * a launch's time is begin -> end on the stream: its own run, not host gaps. A kernel
 * launched by <<<>>> (no begin event) counts from the previous launch's end. The
 * events sit between the launches, so programmatic dependent launch cannot overlap a
 * kernel's start with the one before: the table is launch-serialized and its sum
 * exceeds `minfer bench`'s wall time by that overlap (and by the events' own cost,
 * ~2 us a launch). A timing tool: use it for where the time goes, the bench for how much.
 *
 * The key of a launch: its launcher's name ("mmq", "attn_flash", ...) and, for the
 * GEMMs, the weight's tensor name without its "blk.N." prefix and its type
 * (cu_ctx.prof_tag, set by blocks.cu around a matmul), so the 32 layers' q
 * projections are one row. */
#include "backend.cuh"

#include <stdlib.h>
#include <string.h>

#define PROF_PAIRS 2048 /* begin/end event pairs between drains */
#define PROF_KEYS 128
#define PROF_KEYLEN 64

struct cu_prof {
    cudaEvent_t ev[2 * PROF_PAIRS];
    short key[PROF_PAIRS];   /* per pair: its key's index */
    char has_begin[PROF_PAIRS];
    int n;                   /* pairs recorded since the last drain */
    cudaEvent_t last;        /* the end of the last drained pair: the begin of a <<<>>> launch after it */
    int have_last;
    char names[PROF_KEYS][PROF_KEYLEN];
    double ms[PROF_KEYS];
    uint64_t count[PROF_KEYS];
    int nkeys;
    int overflow;            /* launches whose key did not fit the table (counted under the last row) */
};

static void prof_arm(cu_ctx *S) {
    S->prof_next = &S->prof->ev[2 * S->prof->n];
    S->prof_began = 0;
}

static cu_prof *cu_prof_open(void) {
    cu_prof *P = (cu_prof *)calloc(1, sizeof *P);
    if (!P) return NULL;
    for (int i = 0; i < 2 * PROF_PAIRS; i++)
        if (cudaEventCreate(&P->ev[i]) != cudaSuccess) {
            for (int j = 0; j < i; j++) cudaEventDestroy(P->ev[j]);
            free(P);
            (void)cudaGetLastError();
            mf_log("minfer/cuda: MINFER_CUDA_PROFILE: no events, profile off");
            return NULL;
        }
    if (cudaEventCreate(&P->last) != cudaSuccess) {
        (void)cudaGetLastError();
        P->have_last = -1;
    }
    return P;
}

static int prof_key(cu_prof *P, const char *name) {
    for (int i = 0; i < P->nkeys; i++)
        if (!strcmp(P->names[i], name)) return i;
    if (P->nkeys == PROF_KEYS) {
        P->overflow++;
        return PROF_KEYS - 1;
    }
    snprintf(P->names[P->nkeys], PROF_KEYLEN, "%s", name);
    return P->nkeys++;
}

/* Sums the recorded pairs (waits for the last of them) and starts the pool over. */
static void prof_drain(cu_prof *P) {
    if (!P->n) return;
    if (cudaEventSynchronize(P->ev[2 * P->n - 1]) != cudaSuccess) {
        (void)cudaGetLastError();
        P->n = 0;
        return;
    }
    for (int i = 0; i < P->n; i++) {
        cudaEvent_t b = P->has_begin[i] ? P->ev[2 * i] : i > 0 ? P->ev[2 * i - 1] : P->last;
        float ms = 0.0f;
        if ((P->has_begin[i] || i > 0 || P->have_last == 1) && cudaEventElapsedTime(&ms, b, P->ev[2 * i + 1]) == cudaSuccess) {
            P->ms[P->key[i]] += ms;
            P->count[P->key[i]]++;
        } else {
            (void)cudaGetLastError();
        }
    }
    /* the pool's last end becomes the begin of a <<<>>> launch right after the drain */
    if (P->have_last >= 0) {
        cudaEvent_t t = P->last;
        P->last = P->ev[2 * P->n - 1];
        P->ev[2 * P->n - 1] = t;
        P->have_last = 1;
    }
    memset(P->has_begin, 0, sizeof P->has_begin);
    P->n = 0;
}

void cu_prof_end(cu_ctx *S, const char *what) {
    cu_prof *P = S->prof;
    char name[PROF_KEYLEN];
    const char *tag = S->prof_tag;
    if (tag) {
        if (!strncmp(tag, "blk.", 4)) {
            const char *dot = strchr(tag + 4, '.');
            if (dot) tag = dot + 1;
        }
        snprintf(name, sizeof name, "%s %s %s", what, tag, qtype_name(S->prof_type));
    } else {
        snprintf(name, sizeof name, "%s", what);
    }
    if (cudaEventRecord(P->ev[2 * P->n + 1], S->stream) != cudaSuccess) {
        (void)cudaGetLastError();
        prof_arm(S);
        return;
    }
    P->has_begin[P->n] = (char)S->prof_began;
    P->key[P->n] = (short)prof_key(P, name);
    if (++P->n == PROF_PAIRS) prof_drain(P);
    prof_arm(S);
}

void cu_prof_start(cu_ctx *S) {
    S->prof = cu_prof_open();
    if (S->prof) prof_arm(S);
}

void cu_prof_close(cu_ctx *S) {
    cu_prof *P = S->prof;
    if (!P) return;
    S->prof = NULL;
    S->prof_next = NULL;
    prof_drain(P);
    double tot = 0.0;
    for (int i = 0; i < P->nkeys; i++) tot += P->ms[i];
    int order[PROF_KEYS];
    for (int i = 0; i < P->nkeys; i++) order[i] = i;
    for (int i = 1; i < P->nkeys; i++) /* by time, largest first */
        for (int j = i; j > 0 && P->ms[order[j]] > P->ms[order[j - 1]]; j--) {
            const int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    fprintf(stderr, "minfer/cuda: profile (eager launches, launch-serialized: no PDL overlap): %.3f ms in all\n", tot);
    fprintf(stderr, "minfer/cuda: profile: %10s %6s %9s %10s  %s\n", "ms", "%", "launches", "us/launch", "kernel [tensor type]");
    for (int k = 0; k < P->nkeys; k++) {
        const int i = order[k];
        fprintf(stderr, "minfer/cuda: profile: %10.3f %6.2f %9llu %10.2f  %s\n", P->ms[i], tot > 0 ? 100.0 * P->ms[i] / tot : 0.0,
                (unsigned long long)P->count[i], P->count[i] ? 1e3 * P->ms[i] / (double)P->count[i] : 0.0, P->names[i]);
    }
    if (P->overflow) fprintf(stderr, "minfer/cuda: profile: %d launches past the table's %d keys, in its last row\n", P->overflow, PROF_KEYS);
    for (int i = 0; i < 2 * PROF_PAIRS; i++) cudaEventDestroy(P->ev[i]);
    if (P->have_last >= 0) cudaEventDestroy(P->last);
    free(P);
}
