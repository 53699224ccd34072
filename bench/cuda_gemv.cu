/* bench/cuda_gemv.cu - kernel lab for the decode GEMV (one column, q8 activations):
 * the variants of src/cuda/mmv.cuh (v1: one row per warp; pp: persistent
 * ping-pong; auto: the default, x-stationary persistent warps (xs) below 16 MB per
 * launch, xs fed by a TMA ring (xst) above, xs2 for rows too wide for xs; xst:
 * xst wherever it applies; auto+pp: wide rows on pp (MINFER_CUDA_GEMV_WIDE=0))
 * side by side on the llama-2-7B shapes with random valid
 * blocks. The losing v2 (bench/cuda_gemv_v2.cuh) and the TMA ring of 2026-11-29
 * are in git history (RESULTS.md has their figures).
 *
 * Per shape and variant: every row vs v1 and a few rows vs a CPU scalar reference
 * (quant.c dequantization, double dot with the same q8 activations), as normalised
 * error sqrt(sum (a-b)^2 / sum b^2); a second run must be bit-identical; then the
 * variant timed with CUDA events over NITER eager launches and one CUDA graph of
 * NITER launches. The launches cycle over copies of the weights (> 256 MB
 * in all) so the 60 MB L2 does not serve repeats. GB/s = weight bytes / time.
 *
 *   make bench/cuda-gemv && build/bench/cuda_gemv        (on the GPU machine)
 *   build/bench/cuda_gemv SHAPE VARIANT N                 (one shape substring and variant, N launches)
 *
 * The kernels are the main tree's, compiled into this file (#include of the .cu
 * files) with a stub of the backend state: stream, PDL flag, GEMV version. */
#include "../src/cuda/mmv_q.cu"
#include "../src/cuda/mmv_kquant.cu"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

struct cu_state {
    cudaStream_t st;
    int pdl;
    int sms;
    int variant, per_sm;  /* the GEMV variant under test, its blocks-per-SM cap */
    int wide;             /* MINFER_CUDA_GEMV_WIDE */
};
cudaStream_t cu_stream(const cu_state *S) { return S->st; }
int cu_pdl(const cu_state *S) { return S->pdl; }
void cu_launch_check(cu_state *S, const char *what, const char *file, int line) {}
void cu_record(cu_state *S, cudaError_t e, const char *expr, const char *file, int line) {
    fprintf(stderr, "cuda_gemv: %s:%d: %s: %s\n", file, line, expr, cudaGetErrorString(e));
    exit(1);
}
int cu_num_sms(const cu_state *S) { return S->sms; }
int cu_gemv_wide(const cu_state *S) { return S->wide; }
int cu_skipped(cu_state *, const char *) { return 0; }
int cu_gemv_variant(const cu_state *S, int *per_sm, int64_t *xst_bytes) {
    *per_sm = S->per_sm;
    *xst_bytes = 16ll << 20;  /* the backend's default MINFER_CUDA_XST_MB */
    return S->variant;
}
struct variant {
    const char *name;
    int v, per_sm;
    int wide;  /* 1: rows too wide for xs go to xs2 */
};
static void gemv(cu_state *S, const variant &v, uint32_t type, const cu_mmv_args *a) {
    S->variant = v.v;
    S->per_sm = v.per_sm;
    S->wide = v.wide;
    cu_mmv_q8(S, type, a);
}

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "cuda_gemv: %s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float frnd(void) { return (float)(rnd() & 0xffffff) / 16777216.0f; }  /* [0,1) */
static uint16_t f16bits(float f) { return __half_as_ushort(__float2half(f)); }

/* Random valid rows in the file layout (the CPU reference reads these). */
static void fill_rows(uint32_t type, uint8_t *w, int64_t rows, int K) {
    const int nb = K / 256;
    for (int64_t r = 0; r < rows; r++)
        for (int b = 0; b < nb; b++) {
            if (type == QTYPE_Q4_K) {
                uint8_t *blk = w + (r * nb + b) * 144;
                for (int i = 0; i < 144; i++) blk[i] = (uint8_t)rnd();
                const uint16_t d = f16bits(0.0005f + 0.002f * frnd()), dm = f16bits(0.0005f + 0.002f * frnd());
                memcpy(blk, &d, 2);
                memcpy(blk + 2, &dm, 2);
            } else {
                uint8_t *blk = w + (r * nb + b) * 210;
                for (int i = 0; i < 208; i++) blk[i] = (uint8_t)rnd();
                const uint16_t d = f16bits(0.0002f + 0.001f * frnd());
                memcpy(blk + 208, &d, 2);
            }
        }
}

/* File rows -> device rows (cu_row_stride; q6_K planar: ql | qh | sc | d). */
static void to_device_layout(uint32_t type, const uint8_t *src, uint8_t *dst, int64_t rows, int K, int64_t stride) {
    const int nb = K / 256;
    memset(dst, 0, (size_t)(rows * stride));
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *o = dst + r * stride;
        if (type == QTYPE_Q4_K) {
            memcpy(o, src + r * nb * 144, (size_t)nb * 144);
            continue;
        }
        for (int b = 0; b < nb; b++) {
            const uint8_t *blk = src + (r * nb + b) * 210;
            memcpy(o + b * 128, blk, 128);
            memcpy(o + nb * 128 + b * 64, blk + 128, 64);
            memcpy(o + nb * 192 + b * 16, blk + 192, 16);
            memcpy(o + nb * 208 + b * 2, blk + 208, 2);
        }
    }
}

struct shape {
    const char *name;
    uint32_t type;
    int nmat, rows, K;  /* nmat matrices of rows x K each (stacked launch) */
};

static double nerr(const float *a, const float *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

int main(int argc, char **argv) {
    /* optional filters (for profiling one kernel): shape name substring, variant name, launches */
    const char *only_shape = argc > 1 ? argv[1] : NULL, *only_var = argc > 2 ? argv[2] : NULL;
    const int NITER = argc > 3 ? atoi(argv[3]) : 200;
    const shape shapes[] = {
        {"wo 4096x4096", QTYPE_Q4_K, 1, 4096, 4096},
        {"qkv 3x4096x4096", QTYPE_Q4_K, 3, 4096, 4096},
        {"gate+up 2x11008x4096", QTYPE_Q4_K, 2, 11008, 4096},
        {"down 4096x11008", QTYPE_Q4_K, 1, 4096, 11008},
        {"down 4096x11008", QTYPE_Q6_K, 1, 4096, 11008},
        {"output 32000x4096", QTYPE_Q6_K, 1, 32000, 4096},
    };
    cu_state S;
    CK(cudaStreamCreateWithFlags(&S.st, cudaStreamNonBlocking));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    S.sms = prop.multiProcessorCount;
    S.pdl = prop.major >= 9;
    printf("cuda_gemv: %s, %d SMs, L2 %d MB; %d launches per timing, PDL %s\n", prop.name, S.sms,
           prop.l2CacheSize >> 20, NITER, S.pdl ? "on" : "off");
    std::vector<variant> vars = {{"v1", 1, 0, 0}, {"pp", 2, 0, 0}, {"auto", 3, 0, 1}, {"xst", 4, 0, 1},     {"auto+pp", 3, 0, 0}};
    printf("| shape | type | MB | variant | err vs v1 | err vs cpu | us | GB/s | graph us | graph GB/s |\n"
           "|---|---|---:|---|---:|---:|---:|---:|---:|---:|\n");
    int fails = 0;
    for (const shape &sh : shapes) {
        if (only_shape && !strstr(sh.name, only_shape)) continue;
        const int K = sh.K, nb = K / 256, total = sh.nmat * sh.rows;
        const int64_t stride = cu_row_stride(sh.type, K);
        const int64_t fbytes = (int64_t)nb * (sh.type == QTYPE_Q4_K ? 144 : 210);
        const int64_t mbytes = stride * sh.rows;  /* one matrix */
        const int64_t lbytes = mbytes * sh.nmat;  /* one launch */
        std::vector<uint8_t> hf((size_t)(fbytes * total)), hd((size_t)(stride * total));
        fill_rows(sh.type, hf.data(), total, K);
        to_device_layout(sh.type, hf.data(), hd.data(), total, K, stride);
        /* activations: random, quantized to the q8 layout on the host */
        std::vector<float> x(K), hdd(K / 32), hs(K / 16);
        std::vector<int8_t> hq(K);
        for (int i = 0; i < K; i++) x[i] = (frnd() - 0.5f) * 4.0f;
        for (int j = 0; j < K / 32; j++) {
            float am = 0;
            for (int i = 0; i < 32; i++) am = fmaxf(am, fabsf(x[32 * j + i]));
            const float d = am / 127.0f, id = am > 0 ? 127.0f / am : 0.0f;
            for (int i = 0; i < 32; i++) hq[32 * j + i] = (int8_t)lrintf(x[32 * j + i] * id);
            hdd[j] = d;
            for (int h = 0; h < 2; h++) {
                int s = 0;
                for (int i = 0; i < 16; i++) s += hq[32 * j + 16 * h + i];
                hs[2 * j + h] = d * (float)s;
            }
        }
        cu_q8 q;
        CK(cudaMalloc(&q.qs, K));
        CK(cudaMalloc(&q.d, K / 32 * 4));
        CK(cudaMalloc(&q.s, K / 16 * 4));
        CK(cudaMemcpy(q.qs, hq.data(), K, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(q.d, hdd.data(), K / 32 * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(q.s, hs.data(), K / 16 * 4, cudaMemcpyHostToDevice));
        /* weight copies: > 256 MB in all */
        int ncopy = (int)((256ll << 20) / lbytes) + 1;
        if (ncopy < 2) ncopy = 2;
        std::vector<uint8_t *> dw(ncopy);
        for (int c = 0; c < ncopy; c++) {
            CK(cudaMalloc(&dw[c], (size_t)lbytes));
            CK(cudaMemcpy(dw[c], hd.data(), (size_t)lbytes, cudaMemcpyHostToDevice));
        }
        float *dout;
        CK(cudaMalloc(&dout, (size_t)total * 4 * 3));
        auto args = [&](int copy, float *out) {
            cu_mmv_args a;
            memset(&a, 0, sizeof a);
            a.nmat = sh.nmat;
            for (int m = 0; m < sh.nmat; m++) {
                a.w[m] = dw[copy] + (int64_t)m * mbytes;
                a.out[m] = out + (int64_t)m * sh.rows;
                a.rows[m] = sh.rows;
            }
            a.stride = stride;
            a.K = K;
            a.ncols = 1;
            a.q = q;
            return a;
        };
        const int ref_rows[] = {0, 1, 17, total / 2, total / 2 + 5, total - 2, total - 1};
        const int nref = (int)(sizeof ref_rows / sizeof ref_rows[0]);
        std::vector<float> wr(K), rc(nref), rv(nref);
        for (int i = 0; i < nref; i++) {
            const int r = ref_rows[i];
            quant_dequantize_row(sh.type, hf.data() + (int64_t)r * fbytes, wr.data(), K);
            double sum = 0;
            for (int k = 0; k < K; k++) sum += (double)wr[k] * ((double)hq[k] * hdd[k / 32]);
            rc[i] = (float)sum;
        }
        std::vector<float> o1(total), ov(total), ov2(total);
        cudaEvent_t t0, t1;
        CK(cudaEventCreate(&t0));
        CK(cudaEventCreate(&t1));
        for (const variant &v : vars) {
            if (only_var && strcmp(v.name, only_var)) continue;
            /* parity: poison, run twice */
            CK(cudaMemset(dout, 0xff, (size_t)total * 4 * 3));
            cu_mmv_args a1 = args(0, dout), a2 = args(0, dout + total);
            gemv(&S, v, sh.type, &a1);
            gemv(&S, v, sh.type, &a2);
            CK(cudaStreamSynchronize(S.st));
            CK(cudaGetLastError());
            CK(cudaMemcpy(ov.data(), dout, (size_t)total * 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(ov2.data(), dout + total, (size_t)total * 4, cudaMemcpyDeviceToHost));
            if (&v == &vars[0] || (only_var && !strcmp(v.name, only_var))) o1 = ov;  /* parity base: v1 */
            const double ev1 = nerr(ov.data(), o1.data(), total);
            const bool det = memcmp(ov.data(), ov2.data(), (size_t)total * 4) == 0;
            for (int i = 0; i < nref; i++) rv[i] = ov[ref_rows[i]];
            const double ec = nerr(rv.data(), rc.data(), nref);
            bool ok = ev1 < 1e-5 && ec < 1e-5 && det;
            if (!ok) fails++;
            /* timing: eager, then one graph */
            std::vector<cu_mmv_args> A(NITER);
            for (int i = 0; i < NITER; i++) A[i] = args(i % ncopy, dout);
            for (int i = 0; i < 10; i++) gemv(&S, v, sh.type, &A[i]);  /* warm up */
            CK(cudaEventRecord(t0, S.st));
            for (int i = 0; i < NITER; i++) gemv(&S, v, sh.type, &A[i]);
            CK(cudaEventRecord(t1, S.st));
            CK(cudaEventSynchronize(t1));
            float ms;
            CK(cudaEventElapsedTime(&ms, t0, t1));
            const double us_e = 1000.0 * ms / NITER;
            cudaGraph_t g;
            cudaGraphExec_t ge;
            CK(cudaStreamBeginCapture(S.st, cudaStreamCaptureModeThreadLocal));
            for (int i = 0; i < NITER; i++) gemv(&S, v, sh.type, &A[i]);
            CK(cudaStreamEndCapture(S.st, &g));
            CK(cudaGraphInstantiate(&ge, g, 0));
            CK(cudaGraphLaunch(ge, S.st));  /* warm up */
            CK(cudaEventRecord(t0, S.st));
            CK(cudaGraphLaunch(ge, S.st));
            CK(cudaEventRecord(t1, S.st));
            CK(cudaEventSynchronize(t1));
            CK(cudaEventElapsedTime(&ms, t0, t1));
            const double us_g = 1000.0 * ms / NITER;
            CK(cudaGraphExecDestroy(ge));
            CK(cudaGraphDestroy(g));
            const double gb = (double)lbytes / 1e3;  /* bytes / us / 1e3 = GB/s */
            printf("| %s | %s | %.1f | %s | %.1e%s | %.1e%s | %.2f | %.0f | %.2f | %.0f |\n", sh.name,
                   sh.type == QTYPE_Q4_K ? "q4_K" : "q6_K", lbytes / 1e6, v.name, ev1, det ? "" : " NONDET", ec,
                   ok ? "" : " FAIL", us_e, gb / us_e, us_g, gb / us_g);
            fflush(stdout);
        }
        CK(cudaEventDestroy(t0));
        CK(cudaEventDestroy(t1));
        for (int c = 0; c < ncopy; c++) CK(cudaFree(dw[c]));
        CK(cudaFree(dout));
        CK(cudaFree(q.qs));
        CK(cudaFree(q.d));
        CK(cudaFree(q.s));
    }
    printf("cuda_gemv: %s (%d shape x variant(s) failed parity: vs v1 and vs cpu < 1e-5, deterministic)\n",
           fails ? "FAIL" : "ok", fails);
    return fails ? 1 : 0;
}
