/* kpipe run: runs a spec for N ticks, inputs from .npy files or seeded
 * random data, outputs to .npy files; --check compares with the cpu backend. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "options.h"
#include "tool-impl.h"

#define KPT_MAX_FILES 32
#define KPT_MAX_OUTPUTS 64
#define KPT_RTOL 1e-5
#define KPT_ATOL 1e-6

static const char kpt_run_usage[] =
    "usage: kpipe run SPEC.json|MODEL.onnx [options]\n\n"
    "Runs the pipeline for some ticks and prints a summary of each output.\n\n"
    "  --device D       cpu, cuda or cuda:N (default: cuda when present, else cpu)\n"
    "  --mode M         graph or stream (default: the spec's \"execution\")\n"
    "  --ticks N        ticks to run (default 1)\n"
    "  --input NAME=F   input NAME from NumPy file F; given several times for one NAME,\n"
    "                   the files are used in turn, one per tick, cycled (their shapes\n"
    "                   may differ in the pipeline's dynamic dimensions); other inputs\n"
    "                   get seeded random data (floats in [-1, 1), integers in [-100, 100))\n"
    "  --output NAME=F  write output NAME, as of the last tick, to NumPy file F (repeatable)\n"
    "  --seed S         seed of the random inputs (default 1)\n"
    "  --max N=V,...    a model's symbolic dimensions' maxima, by name (MODEL.onnx)\n"
    "  --fuse F         on or off: a model's fused convolution epilogues (MODEL.onnx;\n"
    "                   off runs every node as the file has it)\n"
    "  --precision P    fp32, tf32 or fp16: a model's cuda convolutions and GEMMs (MODEL.onnx)\n"
    "  --tune T         on or off: measure cuDNN's convolution algorithms at setup (MODEL.onnx)\n"
    "  --algo-cache D   folder of the convolutions' algorithm cache, or off (MODEL.onnx)\n"
    "  --check          run the same spec and inputs on the cpu backend and compare every\n"
    "                   output: floats within |a-b| <= 1e-6 + 1e-5 |cpu|, integers exactly;\n"
    "                   exit status 1 past that\n";

typedef struct kpt_run_args {
    const char *spec, *device;
    int mode;
    long ticks, seed;
    bool check;
    kpt_named_file in[KPT_MAX_FILES], out[KPT_MAX_FILES];
    size_t n_in, n_out;
} kpt_run_args;

/* Adds NAME=FILE to `list`; false (message printed) for a malformed or
 * surplus one, or a repeated name unless `repeat`. */
static bool kpt_named(const char *opt, const char *v, kpt_named_file *list, size_t *n,
                      bool repeat) {
    const char *eq = strchr(v, '=');
    if (!eq || eq == v || !eq[1]) {
        fprintf(stderr, "%s: expected NAME=FILE.npy, got \"%s\"\n", opt, v);
        return false;
    }
    size_t len = (size_t)(eq - v);
    if (len >= KP_NAME_MAX) {
        fprintf(stderr, "%s: the name \"%.*s\" is longer than %d characters\n", opt, (int)len, v,
                KP_NAME_MAX - 1);
        return false;
    }
    if (*n == KPT_MAX_FILES) {
        fprintf(stderr, "%s: at most %d are accepted\n", opt, KPT_MAX_FILES);
        return false;
    }
    for (size_t i = 0; i < *n && !repeat; i++)
        if (strlen(list[i].name) == len && strncmp(list[i].name, v, len) == 0) {
            fprintf(stderr, "%s: %s is given twice\n", opt, list[i].name);
            return false;
        }
    memcpy(list[*n].name, v, len);
    list[*n].name[len] = '\0';
    list[(*n)++].path = eq + 1;
    return true;
}

/* 0 ok, else the exit status. */
static int kpt_run_parse(int argc, char **argv, kpt_run_args *a) {
    memset(a, 0, sizeof *a);
    a->mode = KP_EXEC_FROM_SPEC;
    a->ticks = 1;
    a->seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int r;
        if (kpt_is_help(argv[i])) {
            fputs(kpt_run_usage, stdout);
            return -1;
        }
        if (strcmp(argv[i], "--check") == 0) {
            a->check = true;
            continue;
        }
        if ((r = kpt_model_option(argc, argv, &i, "run")) != 0) {
            if (r < 0) return 2;
        } else if ((r = kpt_opt_value(argc, argv, &i, "--device", &v)) != 0) {
            if (r < 0) return 2;
            a->device = v;
        } else if ((r = kpt_opt_value(argc, argv, &i, "--mode", &v)) != 0) {
            if (r < 0 || !kpt_parse_mode(v, &a->mode)) return 2;
        } else if ((r = kpt_opt_value(argc, argv, &i, "--ticks", &v)) != 0) {
            if (r < 0 || !kpt_parse_count("--ticks", v, 1, 100000000, &a->ticks)) return 2;
        } else if ((r = kpt_opt_value(argc, argv, &i, "--seed", &v)) != 0) {
            if (r < 0 || !kpt_parse_count("--seed", v, 0, 0x7fffffff, &a->seed)) return 2;
        } else if ((r = kpt_opt_value(argc, argv, &i, "--input", &v)) != 0) {
            if (r < 0 || !kpt_named("--input", v, a->in, &a->n_in, true)) return 2;
        } else if ((r = kpt_opt_value(argc, argv, &i, "--output", &v)) != 0) {
            if (r < 0 || !kpt_named("--output", v, a->out, &a->n_out, false)) return 2;
        } else if (argv[i][0] == '-' || a->spec) {
            fprintf(stderr, "kpipe run: unexpected argument \"%s\"\n\n%s", argv[i], kpt_run_usage);
            return 2;
        } else {
            a->spec = argv[i];
        }
    }
    if (!a->spec) {
        fprintf(stderr, "kpipe run: no spec given\n\n%s", kpt_run_usage);
        return 2;
    }
    if (!a->device) a->device = kpt_default_device();
    return 0;
}

/* Element i as a double; false for dtypes without a host reading. */
static bool kpt_get(kp_dtype dt, const void *p, size_t i, double *v) {
    switch (dt) {
    case KP_F32: *v = ((const float *)p)[i]; return true;
    case KP_I32: *v = ((const int32_t *)p)[i]; return true;
    case KP_I16: *v = ((const int16_t *)p)[i]; return true;
    case KP_I8: *v = ((const int8_t *)p)[i]; return true;
    case KP_U8: *v = ((const uint8_t *)p)[i]; return true;
    case KP_I64: *v = (double)((const int64_t *)p)[i]; return true;
    case KP_U64: *v = (double)((const uint64_t *)p)[i]; return true;
    case KP_U16: *v = (double)((const uint16_t *)p)[i]; return true;
    default: return false;
    }
}

static void kpt_summary(const kp_port_info *o, const void *h) {
    size_t n = (size_t)kp_desc_numel(&o->desc);
    double lo = INFINITY, hi = -INFINITY, sum = 0, v;
    char d[96];
    for (size_t i = 0; i < n && kpt_get(o->desc.dtype, h, i, &v); i++) {
        lo = fmin(lo, v);
        hi = fmax(hi, v);
        sum += v;
    }
    printf("  %-12s %-16s min %-12.6g max %-12.6g sum %.9g\n", o->name,
           kp_desc_str(&o->desc, d, sizeof d), lo, hi, sum);
}

/* Compares output i of the two runs; returns true within tolerance. */
static bool kpt_compare(const kp_port_info *o, const void *a, const void *b) {
    size_t n = (size_t)kp_desc_numel(&o->desc), bad = 0;
    bool is_float = o->desc.dtype == KP_F32;
    double max_abs = 0, max_rel = 0, x, y;
    for (size_t i = 0; i < n; i++) {
        if (!kpt_get(o->desc.dtype, a, i, &x) || !kpt_get(o->desc.dtype, b, i, &y)) {
            printf("  %-12s not compared: no host reading of %s\n", o->name,
                   kp_dtype_name(o->desc.dtype));
            return false;
        }
        double d = fabs(x - y);
        max_abs = fmax(max_abs, d);
        if (y != 0) max_rel = fmax(max_rel, d / fabs(y));
        if (!(is_float ? d <= KPT_ATOL + KPT_RTOL * fabs(y) : d == 0)) bad++;
    }
    printf("  %-12s max |diff| %.3g, max rel %.3g, %zu of %zu past tolerance: %s\n", o->name,
           max_abs, max_rel, bad, n, bad ? "FAIL" : "ok");
    return bad == 0;
}

static kp_status kpt_run_ticks(kpt_runner *r, long ticks) {
    KPT_CHECK(kpt_runner_prepare(r));
    for (long t = 0; t < ticks; t++) KPT_CHECK(kpt_runner_tick(r, false));
    return kp_stream_sync(r->s);
}

/* Fetches every output into malloc'd buffers. */
static kp_status kpt_fetch_all(kpt_runner *r, void **host) {
    for (size_t i = 0; i < r->n_out; i++) {
        host[i] = malloc(kpt_tensor_bytes(&r->out[i].desc) + 1);
        if (!host[i])
            return kpt_error(KP_ERR_OUT_OF_MEMORY, "no host memory for output %s", r->out[i].name);
        KPT_CHECK(kpt_runner_fetch(r, i, host[i]));
    }
    return KP_OK;
}

/* The output index of each --output, checked before anything runs. */
static kp_status kpt_find_outputs(const kpt_run_args *a, const kpt_runner *r, size_t *which) {
    for (size_t f = 0; f < a->n_out; f++) {
        size_t i = 0;
        while (i < r->n_out && strcmp(r->out[i].name, a->out[f].name) != 0) i++;
        if (i == r->n_out)
            return kpt_error(KP_ERR_NOT_FOUND,
                             "--output %s: the pipeline has no output of that "
                             "name",
                             a->out[f].name);
        which[f] = i;
    }
    return KP_OK;
}

static kp_status kpt_write_outputs(const kpt_run_args *a, kpt_runner *r, const size_t *which,
                                   void **host) {
    for (size_t f = 0; f < a->n_out; f++)
        KPT_CHECK(kp_npy_save(a->out[f].path, &r->out[which[f]].desc, host[which[f]]));
    return KP_OK;
}

static int kpt_run_check(const kpt_run_args *a, kpt_runner *r, void **host) {
    kpt_runner ref;
    void *ref_host[KPT_MAX_OUTPUTS] = {0};
    kp_status st = kpt_runner_open(&ref, "cpu", a->spec, a->mode);
    if (st == KP_OK) st = kpt_runner_copy_inputs(&ref, r);
    if (st == KP_OK) st = kpt_run_ticks(&ref, a->ticks);
    if (st == KP_OK) st = kpt_fetch_all(&ref, ref_host); /* same spec: n_out checked */
    int rc = 0;
    if (st != KP_OK) {
        rc = kpt_fail("run --check (cpu reference)", st);
    } else {
        printf("check against cpu (floats: |diff| <= 1e-6 + 1e-5 |cpu|; integers: exact):\n");
        for (size_t i = 0; i < r->n_out; i++)
            if (!kpt_compare(&r->out[i], host[i], ref_host[i])) rc = 1;
    }
    for (size_t i = 0; i < KPT_MAX_OUTPUTS; i++) free(ref_host[i]);
    kpt_runner_close(&ref);
    return rc;
}

int kpt_cmd_run(int argc, char **argv) {
    kpt_run_args a;
    int rc = kpt_run_parse(argc, argv, &a);
    if (rc) return rc < 0 ? 0 : rc;
    kpt_runner r;
    void *host[KPT_MAX_OUTPUTS] = {0};
    size_t which[KPT_MAX_FILES];
    kp_status st = kpt_runner_open(&r, a.device, a.spec, a.mode);
    if (st == KP_OK && r.n_out > KPT_MAX_OUTPUTS)
        st = kpt_error(KP_ERR_UNSUPPORTED,
                       "the spec has %zu outputs; this command handles up to "
                       "%d",
                       r.n_out, KPT_MAX_OUTPUTS);
    if (st == KP_OK) st = kpt_find_outputs(&a, &r, which);
    if (st == KP_OK) st = kpt_runner_inputs(&r, a.in, a.n_in, (uint64_t)a.seed);
    double t0 = kpt_now_us();
    if (st == KP_OK) st = kpt_run_ticks(&r, a.ticks);
    double t1 = kpt_now_us();
    if (st == KP_OK) st = kpt_fetch_all(&r, host);
    if (st == KP_OK) {
        printf("%s: %s on %s, %s mode, %ld tick%s in %.3f ms (setup included)\n", a.spec,
               kp_pipeline_name(r.p), kp_device_name(r.dev),
               kp_exec_mode_str(kp_pipeline_mode(r.p)), a.ticks, a.ticks == 1 ? "" : "s",
               (t1 - t0) / 1000.0);
        for (size_t i = 0; i < r.n_out; i++) kpt_summary(&r.out[i], host[i]);
        st = kpt_write_outputs(&a, &r, which, host);
    }
    rc = st == KP_OK ? 0 : kpt_fail("run", st);
    if (rc == 0 && a.check) rc = kpt_run_check(&a, &r, host);
    for (size_t i = 0; i < KPT_MAX_OUTPUTS; i++) free(host[i]);
    kpt_runner_close(&r);
    return rc;
}
