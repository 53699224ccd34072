/* util.h - errors, checked allocation, timing, small helpers shared by every module.
 *
 * Error convention: functions that can fail on bad input return MF_OK (0) or a
 * negative mf_status and write a one-line message into a caller-provided mf_err.
 * Only the CLI turns an error into an exit status ("minfer: error: ..."). */
#ifndef MINFER_UTIL_H
#define MINFER_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdarg.h>

typedef enum mf_status {
    MF_OK = 0,
    MF_ERR_USAGE = -1,   /* caller passed wrong arguments      -> exit 1 */
    MF_ERR_INPUT = -2,   /* bad file / unsupported type / data  -> exit 2 */
    MF_ERR_IO = -3,      /* open/read/mmap failed               -> exit 2 */
    MF_ERR_NOMEM = -4,   /* allocation failed                   -> exit 2 */
    MF_ERR_DEVICE = -5,  /* backend (CUDA) failure              -> exit 2 */
} mf_status;

#define MF_ERR_LEN 512
typedef struct mf_err {
    char msg[MF_ERR_LEN];  /* one line, no trailing newline */
} mf_err;

/* Formats into err (if non-NULL) and returns code, so callers can write
 * `return mf_fail(err, MF_ERR_INPUT, "tensor %s: ...", name);` */
int mf_fail(mf_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Allocation that never returns NULL for n > 0: prints and exits(2) on failure.
 * Use only for sizes the program chose itself; sizes read from a file go through
 * plain malloc with a check and an mf_err. */
void *mf_xmalloc(size_t n);
void *mf_xcalloc(size_t n, size_t size);
void *mf_xrealloc(void *p, size_t n);
char *mf_xstrdup(const char *s);

/* Overflow-checked size arithmetic: return 0 and set *out on success, -1 on overflow. */
static inline int mf_mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_mul_overflow(a, b, out) ? -1 : 0;
}
static inline int mf_add_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_add_overflow(a, b, out) ? -1 : 0;
}

/* Monotonic clock in seconds. */
double mf_time_s(void);

/* Diagnostics on stderr. mf_log prints "minfer: ..." lines; mf_log_once prints a
 * message at most once per distinct flag variable (for fast-path labels). */
void mf_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* When set (the CLI's -q/--quiet), mf_log prints nothing and backends skip their
 * notice lines; errors are never routed through mf_log. Set once, before any
 * thread starts. */
extern int mf_log_quiet;
#define mf_log_once(flag, ...) do { static int flag; if (!flag) { flag = 1; mf_log(__VA_ARGS__); } } while (0)

/* Reads an integer environment switch: returns dflt when unset or empty. */
int mf_env_int(const char *name, int dflt);

/* f16 / bf16 <-> f32, exact IEEE conversions (round to nearest even on narrowing). */
float mf_f16_to_f32(uint16_t h);
uint16_t mf_f32_to_f16(float f);
float mf_bf16_to_f32(uint16_t h);
uint16_t mf_f32_to_bf16(float f);

/* Deterministic RNG for synth, tests and sampling (xoshiro256** seeded by splitmix64). */
typedef struct mf_rng { uint64_t s[4]; } mf_rng;
void mf_rng_seed(mf_rng *r, uint64_t seed);
uint64_t mf_rng_u64(mf_rng *r);
float mf_rng_uniform(mf_rng *r);   /* [0, 1) with 24 random bits */
float mf_rng_normal(mf_rng *r);    /* standard normal (Box-Muller) */

#define MF_MIN(a, b) ((a) < (b) ? (a) : (b))
#define MF_MAX(a, b) ((a) > (b) ? (a) : (b))
#define MF_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif
