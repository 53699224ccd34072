/* cmd_info.c - `minfer info`: describe a GGUF model (metadata, tensors, tokenizer). */
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "cli.h"
#include "cuda/plan.h"
#include "opts.h"
#include "gguf.h"
#include "model.h"
#include "quant.h"
#include "tokenizer.h"

static void print_kv(const gguf_kv *kv) {
    printf("  %.*s = ", (int)kv->key.len, kv->key.ptr);
    switch (kv->type) {
    case GGUF_VTYPE_U8: case GGUF_VTYPE_U16: case GGUF_VTYPE_U32: case GGUF_VTYPE_U64:
        printf("%llu", (unsigned long long)kv->v.u64); break;
    case GGUF_VTYPE_I8: case GGUF_VTYPE_I16: case GGUF_VTYPE_I32: case GGUF_VTYPE_I64:
        printf("%lld", (long long)kv->v.i64); break;
    case GGUF_VTYPE_F32: case GGUF_VTYPE_F64: printf("%g", kv->v.f64); break;
    case GGUF_VTYPE_BOOL: printf("%s", kv->v.u64 ? "true" : "false"); break;
    case GGUF_VTYPE_STRING:
        if (kv->v.str.len > 60) printf("\"%.60s...\" (%llu bytes)", kv->v.str.ptr, (unsigned long long)kv->v.str.len);
        else printf("\"%.*s\"", (int)kv->v.str.len, kv->v.str.ptr);
        break;
    case GGUF_VTYPE_ARRAY:
        printf("[%s x %llu]", gguf_vtype_name(kv->arr_type), (unsigned long long)kv->arr_count); break;
    default: printf("?"); break;
    }
    putchar('\n');
}

/* `--plan [cuda|sm_80|sm_90|sm_120]`: the CUDA blocks' plan for the GPU present (cuda, the
 * default) or for a device class without one (src/cuda/plan.h). */
static int print_plan(mf_model *m, const char *what) {
    enum { N_BATCH = 512 }; /* the contexts' default batch */
    mf_err err = { { 0 } };
    if (strcmp(what, "cuda")) {
        if (cu_plan_print_for_class(m, what, N_BATCH, stdout, &err)) return cli_error(1, "info: --plan: %s", err.msg);
        return 0;
    }
    mf_backend *be = cuda_backend_new(0, &err);
    if (!be)
        return cli_error(2, "info: --plan cuda: %s (name a device class instead: %s)", err.msg, cu_device_class_names());
    int rc = be->init(be, m, 256, 1, N_BATCH, NULL, &err);
    if (!rc) rc = cuda_plan_print(be, stdout, &err);
    be->destroy(be);
    return rc ? cli_error(2, "info: --plan cuda: %s", err.msg) : 0;
}

int cmd_info(int argc, char **argv) {
    const char *path = NULL, *plan = NULL;
    int show_tensors = 0, verbose = 1;
    /* --plan takes an optional device: taken out before the option parser sees it */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--plan")) continue;
        int take = 1;
        plan = "cuda";
        if (i + 1 < argc && argv[i + 1][0] != '-') plan = argv[i + 1], take = 2;
        for (int j = i; j + take <= argc; j++) argv[j] = j + take < argc ? argv[j + take] : NULL;
        argc -= take;
        break;
    }
    cli_opt opts[2 + CLI_OPTS_MAX_GROUP] = {
        { "-m, --model", "PATH", CLI_OPT_STR, &path, .help = "GGUF model file", .dflt = "" },
        { "--tensors", NULL, CLI_OPT_FLAG, &show_tensors, .set = 1, .help = "list every tensor", .dflt = "" },
    };
    const int n_opts = 2 + cli_opts_verbosity(opts + 2, &verbose);
    int prc = cli_parse("info", "usage: minfer info -m MODEL [--tensors] [--plan [cuda|sm_80|sm_90|sm_120]]",
                        "  prints the model's metadata, hyperparameters and tensor type census\n"
                        "  --plan [DEVICE]       what the CUDA blocks run at each batch width (1, 2-7, 8, 9-127, 128+\n"
                        "                        tokens), layer by layer: for the GPU present (cuda, the default), or\n"
                        "                        for a device class without one (sm_80, sm_90, sm_120)\n", opts,
                        n_opts, argc, argv);
    if (prc) return prc < 0 ? 0 : prc;
    mf_log_quiet = !verbose; /* warnings of the loader; the description goes to stdout either way */
    if (!path) return cli_error(1, "info: -m MODEL is required");
    mf_model m;
    mf_err err = { { 0 } };
    int rc = model_load(&m, path, &err);
    if (rc) return cli_load_error(cli_status_exit(rc), path, err.msg);
    const gguf_file *f = &m.gguf;
    printf("file: %s\nGGUF version %u, %llu metadata keys, %llu tensors, alignment %llu, data at %llu\n", path,
           f->version, (unsigned long long)f->n_kv, (unsigned long long)f->n_tensors,
           (unsigned long long)f->alignment, (unsigned long long)f->data_offset);
    printf("metadata:\n");
    for (uint64_t i = 0; i < f->n_kv; i++) print_kv(&f->kv[i]);
    char desc[512];
    model_describe(&m, desc, sizeof desc);
    printf("model: %s\n", desc);
    printf("unused tensors: %s\n", m.unused_tensors ? m.unused_tensors : "none");
    printf("tokenizer: %s, %d tokens, bos %d, eos %d, add_bos %d\n",
           tok_get_kind(m.vocab) == TOK_KIND_SPM ? "spm" : "bpe", tok_n_vocab(m.vocab), tok_bos(m.vocab),
           tok_eos(m.vocab), tok_add_bos(m.vocab));
    uint64_t count[QTYPE_COUNT] = { 0 }, bytes[QTYPE_COUNT] = { 0 };
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        count[f->tensors[i].type]++;
        bytes[f->tensors[i].type] += f->tensors[i].nbytes;
    }
    printf("tensor types:");
    for (int t = 0; t < QTYPE_COUNT; t++)
        if (count[t]) printf(" %s x%llu (%.1f MiB)", qtype_name(t), (unsigned long long)count[t], bytes[t] / 1048576.0);
    printf("\n");
    if (plan) {
        rc = print_plan(&m, plan);
        if (rc) {
            model_free(&m);
            return rc;
        }
    }
    if (show_tensors) {
        for (uint64_t i = 0; i < f->n_tensors; i++) {
            const gguf_tensor *t = &f->tensors[i];
            printf("  %-32s %-5s [%llu", t->cname, qtype_name(t->type), (unsigned long long)t->ne[0]);
            for (uint32_t d = 1; d < t->n_dims; d++) printf(", %llu", (unsigned long long)t->ne[d]);
            printf("] %llu bytes @ %llu\n", (unsigned long long)t->nbytes, (unsigned long long)t->offset);
        }
    }
    model_free(&m);
    return 0;
}
