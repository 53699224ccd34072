/* rope.c - the angles of a scaled RoPE (rope.h has the formula). */
#include "rope.h"

#include <math.h>
#include <stdio.h>

mf_rope rope_plain(int dim, float base, mf_rope_mode mode) {
    mf_rope r = { .dim = dim, .mode = mode, .base = base, .freq_scale = 1.0f, .mscale = 1.0f };
    return r;
}

/* ggml_rope_yarn_corr_dim: the pair index whose wavelength spans n_rot turns over the
 * original context; f32 as ggml computes it */
static float yarn_corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
    return (float)n_dims * logf((float)n_ctx_orig / (n_rot * 2 * (float)M_PI)) / (2 * logf(base));
}

void rope_finish(mf_rope *r, float attn_factor, float model_factor) {
    r->corr[0] = r->corr[1] = 0;
    float mscale = attn_factor;
    if (r->ext_factor != 0) {
        /* llama.cpp's defaults, which its loader does not read from a file: beta_fast 32,
         * beta_slow 1 */
        const float beta_fast = 32.0f, beta_slow = 1.0f;
        const float start = floorf(yarn_corr_dim(r->dim, r->n_ctx_orig, beta_fast, r->base));
        const float end = ceilf(yarn_corr_dim(r->dim, r->n_ctx_orig, beta_slow, r->base));
        r->corr[0] = start > 0 ? start : 0;
        r->corr[1] = end < (float)(r->dim - 1) ? end : (float)(r->dim - 1);
        /* llama_context: yarn_attn_factor = get_mscale(factor) / (1 + 0.1 ln factor) (which
         * cancels the factor that ggml's rope_yarn multiplies in below, up to f32 rounding),
         * times rope.scaling.attn_factor; then rope_yarn's own 1 + 0.1 ln(1/freq_scale) */
        const float factor = model_factor;
        float af = factor <= 1.0f ? 1.0f : 0.1f * 1.0f * logf(factor) + 1.0f;
        af *= 1.0f / (1.0f + 0.1f * logf(factor));
        af *= attn_factor;
        mscale = af * (1.0f + 0.1f * logf(1.0f / r->freq_scale));
    }
    r->mscale = mscale;
}

int rope_is_plain(const mf_rope *r) {
    return !r->freq_factors && r->freq_scale == 1.0f && r->ext_factor == 0 && r->mscale == 1.0f;
}

/* ggml's rope_yarn_ramp at i0 = 2i */
static float yarn_ramp(float low, float high, int i) {
    const float y = ((float)i - low) / fmaxf(0.001f, high - low);
    return 1 - fminf(1, fmaxf(0, y));
}

int rope_equal(const mf_rope *a, const mf_rope *b) {
    return a->dim == b->dim && a->mode == b->mode && a->base == b->base && a->scaling == b->scaling &&
           a->freq_scale == b->freq_scale && a->ext_factor == b->ext_factor && a->mscale == b->mscale &&
           a->corr[0] == b->corr[0] && a->corr[1] == b->corr[1] && a->freq_factors == b->freq_factors;
}

void rope_cs(const mf_rope *r, int64_t pos, int i, float *c, float *s) {
    double theta_extrap = (double)pos * pow((double)r->base, -2.0 * i / r->dim);
    if (r->freq_factors) theta_extrap /= (double)r->freq_factors[i];
    /* freq_scale 1 multiplies exactly: the unscaled angle keeps its bits */
    double theta = (double)r->freq_scale * theta_extrap;
    if (r->ext_factor != 0) {
        const double mix = (double)(yarn_ramp(r->corr[0], r->corr[1], i) * r->ext_factor);
        theta = theta * (1 - mix) + theta_extrap * mix;
    }
    *c = (float)cos(theta) * r->mscale;
    *s = (float)sin(theta) * r->mscale;
}

void rope_llama3_factors(float *ff, int dim, float base, float factor, float low_freq, float high_freq, int n_ctx_orig) {
    const double lo_wavelen = n_ctx_orig / low_freq, hi_wavelen = n_ctx_orig / high_freq;
    for (int i = 0; i < dim / 2; i++) {
        const double freq = pow(base, -2.0 * i / dim), wavelen = 2 * M_PI / freq;
        if (wavelen < hi_wavelen) ff[i] = 1.0f;
        else if (wavelen > lo_wavelen) ff[i] = factor;
        else {
            const double smooth = (n_ctx_orig / wavelen - low_freq) / (high_freq - low_freq);
            ff[i] = (float)(1.0 / ((1 - smooth) / factor + smooth));
        }
    }
}

void rope_describe(const mf_rope *r, char *buf, int cap) {
    const char *kind = r->scaling == MF_ROPE_SCALING_YARN ? "yarn" : r->scaling == MF_ROPE_SCALING_LINEAR ? "linear" : NULL;
    int n = 0;
    if (kind) n = snprintf(buf, (size_t)cap, "%s x%g", kind, 1.0 / r->freq_scale);
    if (kind && r->scaling == MF_ROPE_SCALING_YARN && n >= 0 && n < cap)
        n += snprintf(buf + n, (size_t)(cap - n), " (orig ctx %d, mscale %g)", r->n_ctx_orig, r->mscale);
    if (r->freq_factors && n >= 0 && n < cap) n += snprintf(buf + n, (size_t)(cap - n), "%sfreq factors", kind ? ", " : "");
    if (n == 0) snprintf(buf, (size_t)cap, "none");
}
