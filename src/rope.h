/* rope.h - rotary position embedding: the angles of one layer's RoPE, with the scaling
 * of the file (Llama 3.x per-frequency factors, linear, YaRN), as llama.cpp computes them.
 *
 * Pair i of a head (i < dim/2) at position p is rotated by theta with magnitude mscale:
 *
 *   theta_extrap = p * base^(-2i/dim) / freq_factors[i]        (factors: rope_freqs.weight)
 *   theta_interp = freq_scale * theta_extrap                   (freq_scale = 1 / scaling.factor)
 *   theta        = theta_interp                                (none, linear)
 *                = theta_interp * (1 - r) + theta_extrap * r   (yarn: r = ramp(i) * ext_factor,
 *                                                               ramp 1 below corr[0], 0 above corr[1])
 *   (cos, sin)   = (cos theta, sin theta) * mscale             (yarn: the attention temperature)
 *
 * theta is computed in double and rounded once to f32 (as the unscaled tables always
 * were), so a file without scaling gets the same bits as before; the constants that
 * llama.cpp computes in f32 (corr, mscale) are computed here in f32 the same way. The CPU
 * backend's tables, its reference op and the CUDA table kernel all follow rope_cs. */
#ifndef MINFER_ROPE_H
#define MINFER_ROPE_H

#include <stdint.h>

typedef enum mf_rope_mode {
    MF_ROPE_NORM = 0,  /* rotate (x[2i], x[2i+1]) */
    MF_ROPE_NEOX = 1,  /* rotate (x[i], x[i + rope_dim/2]) */
} mf_rope_mode;

typedef enum mf_rope_scaling {
    MF_ROPE_SCALING_NONE = 0,
    MF_ROPE_SCALING_LINEAR,  /* positions times freq_scale */
    MF_ROPE_SCALING_YARN,    /* NTK-by-parts interpolation and an attention temperature */
} mf_rope_scaling;

typedef struct mf_rope {
    int dim;                    /* rotated dims per head (rope_dim) */
    mf_rope_mode mode;
    float base;                 /* freq_base */
    mf_rope_scaling scaling;
    float freq_scale;           /* 1 / rope.scaling.factor; 1: none */
    float ext_factor;           /* yarn: 1 (llama.cpp's default for yarn), else 0 */
    float mscale;               /* (cos, sin) times it: rope.scaling.attn_factor and yarn's temperature; 1: none */
    float corr[2];              /* yarn: the pairs below corr[0] extrapolate, above corr[1] interpolate */
    int n_ctx_orig;             /* yarn: rope.scaling.original_context_length (corr's input) */
    const float *freq_factors;  /* [dim/2] divisors of each pair's frequency (rope_freqs.weight,
                                   Llama 3.x), in the model's mapping; NULL: none */
} mf_rope;

/* An unscaled RoPE of dim rotated dims and base (the ops' tests, the zero scaling). */
mf_rope rope_plain(int dim, float base, mf_rope_mode mode);
/* Fills r's derived constants (corr, mscale) from its base, dim, freq_scale, ext_factor,
 * n_ctx_orig, attn_factor (rope.scaling.attn_factor, 1 when the file has none) and the
 * model's scaling factor (1 / the global layers' freq_scale: gemma3's sliding layers
 * rotate unscaled, and their yarn temperature is still the model's), as llama.cpp's
 * context and ggml_rope_yarn_corr_dims do. */
void rope_finish(mf_rope *r, float attn_factor, float model_factor);
/* 1 when r rotates as the unscaled formula (no factors, freq_scale 1, no yarn, mscale 1). */
int rope_is_plain(const mf_rope *r);
/* 1 when a and b rotate identically (the same constants and the same factor array). */
int rope_equal(const mf_rope *a, const mf_rope *b);
/* cos and sin of pair i at position pos (the reference; tables are rows of it). */
void rope_cs(const mf_rope *r, int64_t pos, int i, float *c, float *s);
/* Llama 3.1's rope_freqs.weight as its converter computes it (the "llama3" rope_type of
 * Hugging Face): ff[i] for i < dim/2, 1 for wavelengths under n_ctx_orig / high_freq,
 * factor above n_ctx_orig / low_freq, and a smooth mix between. */
void rope_llama3_factors(float *ff, int dim, float base, float factor, float low_freq, float high_freq, int n_ctx_orig);
/* A short description ("llama3 factors", "yarn x4 (orig 32768)", "none") into buf. */
void rope_describe(const mf_rope *r, char *buf, int cap);

#endif
