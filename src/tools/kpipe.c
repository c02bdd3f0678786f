/* The kpipe command line: run, validate and benchmark any spec. */
#include <stdio.h>
#include <string.h>

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
    fprintf(f, "usage: kpipe <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < KPT_N_COMMANDS; i++)
        fprintf(f, "  %-9s %s\n", kpt_commands[i].name, kpt_commands[i].what);
    fprintf(f, "\nRun 'kpipe <command> --help' for a command's options.\n");
}

/* One backend's devices, each opened and described. */
static void kpt_info_backend(const char *backend) {
    char why[256] = "", desc[256];
    int n = kp_device_count(backend, why, sizeof why);
    printf("  %s (kernels: %s)%s%s\n", backend, kp_backend_find(backend)->kernel_form,
           n ? "" : ": no device: ", n ? "" : why);
    for (int i = 0; i < n; i++) {
        char name[48];
        kp_device_t dev;
        snprintf(name, sizeof name, "%s:%d", backend, i);
        if (kp_device_open(name, &dev) != KP_OK) {
            printf("    %-10s unavailable: %s\n", name, kp_last_error());
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

int main(int argc, char **argv) {
    if (argc < 2 || kpt_is_help(argv[1])) {
        kpt_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < KPT_N_COMMANDS; i++)
        if (strcmp(argv[1], kpt_commands[i].name) == 0) {
            kp_clear_error();
            return kpt_commands[i].fn(argc - 1, argv + 1);
        }
    fprintf(stderr, "kpipe: unknown command \"%s\"\n\n", argv[1]);
    kpt_usage(stderr);
    return 2;
}
