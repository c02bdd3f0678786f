/* The kpipe command line: run, validate and benchmark any spec, run flows. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tool-impl.h"

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *what;
} kpt_commands[] = {
    {"run", kpt_cmd_run, "run a spec for some ticks; inputs and outputs as .npy files"},
    {"validate", kpt_cmd_validate, "parse and plan a spec without running it"},
    {"bench", kpt_cmd_bench, "measure tick latency and throughput in stream and graph mode"},
    {"flow", kpt_cmd_flow, "run a flow: stages on threads joined by bounded queues"},
    {"info", kpt_cmd_info, "backends, devices, driver and library versions"},
};
#define KPT_N_COMMANDS (sizeof kpt_commands / sizeof kpt_commands[0])

static void kpt_usage(FILE *f) {
    fprintf(f, "usage: kpipe <command> [options]\n"
               "       kpipe help <command>     the command's options (kpipe <command> --help)\n"
               "       kpipe --version          the version and the libraries in use\n\n"
               "commands:\n");
    for (size_t i = 0; i < KPT_N_COMMANDS; i++)
        fprintf(f, "  %-9s %s\n", kpt_commands[i].name, kpt_commands[i].what);
    fprintf(f, "\nEvery command takes:\n"
               "  --help     its options\n"
               "  --verbose  on an error, the library's whole detail: its status and the chain\n"
               "             of calls it went through, not only the problem\n");
}

/* A host backend's devices are logical: several of them share the host's
 * cores (kp_host_options.devices), which a line per device would hide.
 * One line says so when they are alike; false where they differ. */
static bool kpt_info_host(const char *backend, int n) {
    char first[256] = "", desc[256], cores[32];
    for (int i = 0; i < n; i++) {
        char name[48];
        kp_device_t dev;
        snprintf(name, sizeof name, "%s:%d", backend, i);
        if (kp_device_open(name, &dev) != KP_OK) {
            kp_clear_error();
            return false;
        }
        kp_status st = kp_device_describe(dev, desc, sizeof desc);
        kp_device_close(dev);
        if (st != KP_OK || (i && strcmp(desc, first) != 0)) {
            kp_clear_error();
            return false;
        }
        if (!i) snprintf(first, sizeof first, "%s", desc);
    }
    long n_cores = sysconf(_SC_NPROCESSORS_ONLN);
    /* the core count moves into the heading, out of the description */
    int at = snprintf(cores, sizeof cores, ", %ld cores", n_cores);
    size_t len = strlen(first);
    if (at > 0 && len >= (size_t)at && strcmp(first + len - (size_t)at, cores) == 0)
        first[len - (size_t)at] = '\0';
    char range[64];
    if (n > 1)
        snprintf(range, sizeof range, "%s:0..%s:%d", backend, backend, n - 1);
    else
        snprintf(range, sizeof range, "%s:0", backend);
    printf("    %s (%d logical device%s sharing %ld core%s): %s\n", range, n, n == 1 ? "" : "s",
           n_cores, n_cores == 1 ? "" : "s", first);
    return true;
}

/* One backend's devices, each opened and described. */
static void kpt_info_backend(const char *backend) {
    char why[256] = "", desc[256];
    int n = kp_device_count(backend, why, sizeof why);
    const char *form = kp_backend_find(backend)->kernel_form;
    printf("  %s (kernels: %s)%s%s\n", backend, form, n ? "" : ": no device: ", n ? "" : why);
    if (n && strcmp(form, "host") == 0 && kpt_info_host(backend, n)) return;
    for (int i = 0; i < n; i++) {
        char name[48], buf[1024];
        kp_device_t dev;
        snprintf(name, sizeof name, "%s:%d", backend, i);
        if (kp_device_open(name, &dev) != KP_OK) {
            printf("    %-10s unavailable: %s\n", name,
                   kpt_user_detail(kp_last_error(), buf, sizeof buf));
            continue;
        }
        if (kp_device_describe(dev, desc, sizeof desc) == KP_OK)
            printf("    %-10s %s\n", name, desc);
        kp_device_close(dev);
    }
}

int kpt_cmd_info(int argc, char **argv) {
    if (argc > 1) {
        bool help = kpt_is_help(argv[1]);
        fprintf(help ? stdout : stderr,
                "usage: kpipe info\n\nLists the registered backends and "
                "their devices, the module types, and the versions of the libraries in use.\n");
        return help ? 0 : 2;
    }
    char versions[512];
    size_t n_types = kp_module_type_count(); /* first: loading the modules notes their libraries */
    printf("kpipe %s (%s)\nbackends:", kp_version_str(),
           kp_library_versions(versions, sizeof versions));
    for (size_t i = 0; kp_backend_name(i); i++) printf(" %s", kp_backend_name(i));
    printf("\nmodule types:");
    for (size_t i = 0; i < n_types; i++) printf(" %s", kp_module_type_name(i));
    printf("\nONNX operators:");
    for (size_t i = 0; kp_onnx_op_name(i); i++) printf(" %s", kp_onnx_op_name(i));
    printf("\nONNX convolutions on cuda: %s", kp_onnx_conv_library());
    printf("\ndevices:\n");
    for (size_t i = 0; kp_backend_name(i); i++) kpt_info_backend(kp_backend_name(i));
    return 0;
}

/* kpipe --version: the version, and the libraries in use. */
static int kpt_version(int argc) {
    if (argc > 2) {
        fprintf(stderr, "kpipe: --version takes nothing more\n\n");
        kpt_usage(stderr);
        return 2;
    }
    char versions[512];
    (void)kp_module_type_count(); /* loading the modules notes their libraries */
    printf("kpipe %s\nlibraries: %s\n", kp_version_str(),
           kp_library_versions(versions, sizeof versions));
    return 0;
}

static int kpt_find_command(const char *name) {
    for (size_t i = 0; i < KPT_N_COMMANDS; i++)
        if (strcmp(name, kpt_commands[i].name) == 0) return (int)i;
    return -1;
}

/* kpipe help [CMD]: the usage, or CMD's (the same as kpipe CMD --help). */
static int kpt_help(int argc, char **argv) {
    if (argc == 2) {
        kpt_usage(stdout);
        return 0;
    }
    int c = kpt_find_command(argv[2]);
    if (c < 0 || argc > 3) {
        if (c < 0)
            fprintf(stderr, "kpipe help: unknown command \"%s\"\n\n", argv[2]);
        else
            fprintf(stderr, "kpipe help: one command at a time\n\n");
        kpt_usage(stderr);
        return 2;
    }
    char *args[] = {argv[2], "--help", NULL};
    return kpt_commands[c].fn(2, args);
}

int main(int argc, char **argv) {
    /* --verbose applies to every command, wherever it stands on the line */
    int kept = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--verbose") == 0)
            kpt_verbose = true;
        else
            argv[kept++] = argv[i];
    }
    argc = kept;
    argv[argc] = NULL;
    if (argc < 2 || kpt_is_help(argv[1])) {
        kpt_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "--version") == 0) return kpt_version(argc);
    if (strcmp(argv[1], "help") == 0) return kpt_help(argc, argv);
    int c = kpt_find_command(argv[1]);
    if (c >= 0) {
        kp_clear_error();
        return kpt_commands[c].fn(argc - 1, argv + 1);
    }
    fprintf(stderr, "kpipe: unknown command \"%s\"\n\n", argv[1]);
    kpt_usage(stderr);
    return 2;
}
