/* Shared by the kpipe command line's commands. */
#ifndef KPIPE_TOOL_IMPL_H
#define KPIPE_TOOL_IMPL_H

#include <stdio.h>

#include "kpipe/kpipe.h"

/* Returns a failing status from the enclosing function. */
#define KPT_CHECK(expr)                       \
    do {                                      \
        kp_status kpt_st_ = (expr);           \
        if (kpt_st_ != KP_OK) return kpt_st_; \
    } while (0)

/* --- running a spec -------------------------------------------------------------- */
/* NAME=PATH from the command line: the name copied (no allocation), the
 * path pointing into argv. */
typedef struct kpt_named_file {
    char name[KP_NAME_MAX];
    const char *path;
} kpt_named_file;

/* One tensor an external input takes on some ticks: its data on the
 * device and on the host, and its shape. */
typedef struct kpt_variant {
    void *dev, *host;
    kp_tensor_desc desc;
    size_t bytes;
} kpt_variant;

#define KPT_MAX_SHAPES 64

typedef struct kpt_runner {
    kp_device_t dev;
    kp_stream_t s;
    kp_pipeline_t p;
    size_t n_in, n_out;
    kp_port_info *in, *out; /* this tick's inputs; outputs filled by configure_io */
    kp_port_info *decl;     /* the inputs as declared (maxima) */
    uint32_t *dynamic;      /* their dynamic dimensions */
    /* per input, the tensors ticks cycle through (one per --input file) */
    kpt_variant **var;
    size_t *n_var;
    /* bench --shapes: every dynamic dimension takes shapes[t % n] on tick t */
    int64_t shapes[KPT_MAX_SHAPES];
    size_t n_shapes;
    long tick;
} kpt_runner;

/* Bounds for a model's symbolic dimensions, "name=N,name=N" (--max), or
 * NULL; read by kpt_pipeline_open. */
extern const char *kpt_model_max;
/* --fuse on|off for a MODEL.onnx: the engine's "fuse" (NULL: its default) */
extern const char *kpt_model_fuse;
/* --precision fp32|tf32 for a MODEL.onnx (NULL: the module's default) */
extern const char *kpt_model_precision;
/* --tune on|off for a MODEL.onnx: measured convolution algorithms */
extern const char *kpt_model_tune;
extern const char *kpt_model_algo_cache;
/* Takes --max, --fuse, --tune or --precision at argv[*i] (kpt_opt_value's returns:
 * 0 not one of them, 1 taken, -1 a usage error already printed). */
int kpt_model_option(int argc, char **argv, int *i, const char *cmd);
/* Creates a pipeline from a spec file, or from an ONNX model file (a name
 * ending in .onnx): a pipeline of one `onnx` module whose ports are the
 * pipeline's inputs and outputs, under the module's port names. */
kp_status kpt_pipeline_open(kp_device_t dev, const char *path, const kp_pipeline_options *o,
                            kp_pipeline_t *out);
/* Whether `path` names an ONNX model file. */
bool kpt_is_model_file(const char *path);

/* Opens `devname`, creates the pipeline from `spec` (mode: KP_EXEC_FROM_SPEC
 * or an override). */
kp_status kpt_runner_open(kpt_runner *r, const char *devname, const char *spec, int mode);
/* Input data from .npy files where named (several files for one name are
 * cycled, one per tick), else seeded random data at the declared shape;
 * uploads it. */
kp_status kpt_runner_inputs(kpt_runner *r, const kpt_named_file *files, size_t n_files,
                            uint64_t seed);
/* Uses the same host inputs (and shapes) as `src` (both from one spec). */
kp_status kpt_runner_copy_inputs(kpt_runner *r, const kpt_runner *src);
/* setup, first configure_io, warmup, build_graph (graph mode). */
kp_status kpt_runner_prepare(kpt_runner *r);
/* One tick: binds tick t's inputs, configure_io and execute; waits for it
 * when `wait`. */
kp_status kpt_runner_tick(kpt_runner *r, bool wait);
/* Copies output i to host memory of out[i]'s size. */
kp_status kpt_runner_fetch(kpt_runner *r, size_t i, void *host);
size_t kpt_tensor_bytes(const kp_tensor_desc *d);
void kpt_runner_close(kpt_runner *r);

/* --- statistics ----------------------------------------------------------------------- */
typedef struct kpt_stats {
    double min, p50, p90, p99, max, mean;
} kpt_stats;
/* Sorts `v` in place. */
kpt_stats kpt_stats_of(double *v, size_t n);
double kpt_now_us(void);

/* --- commands ------------------------------------------------------------------------- */
int kpt_cmd_run(int argc, char **argv);
int kpt_cmd_validate(int argc, char **argv);
int kpt_cmd_bench(int argc, char **argv);
int kpt_cmd_info(int argc, char **argv);
int kpt_cmd_flow(int argc, char **argv);

/* Records the detail of a failure the command line found itself (kpt_fail
 * prints it in place of the library's) and returns `st`. */
kp_status kpt_error(kp_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Keeps the library's detail of a failure (st) for kpt_fail, so that
 * calls made after it (a health report, a clean-up), which may clear or
 * replace the thread's error, cannot lose it; returns st. */
kp_status kpt_keep_error(kp_status st);
/* Prints "kpipe CMD: detail" (with --verbose "kpipe CMD: STATUS: detail",
 * the library's whole call chain) and returns 1. */
int kpt_fail(const char *cmd, kp_status st);
/* The detail kpt_fail would print (kept, else the library's), into buf;
 * what was kept is forgotten. */
const char *kpt_take_detail(char *buf, size_t len);
/* kpt_fail for a flow file: a stage the detail names by its JSON path
 * ("$.stages[2]") is named as the file names it too ("$.stages[2] (stage
 * \"resize\")"). */
int kpt_fail_flow(const char *cmd, kp_status st, const char *file);
/* Prints a failure's detail as kpt_fail does. */
void kpt_print_error(const char *cmd, kp_status st, const char *detail);
/* The library's detail for the user: without --verbose, the names of the
 * public functions it went through ("kp_flow_wait: ") left out, into buf. */
const char *kpt_user_detail(const char *detail, char *buf, size_t len);
/* --verbose, a global option: errors give the library's whole call chain. */
extern bool kpt_verbose;
bool kpt_is_help(const char *arg);

#endif
