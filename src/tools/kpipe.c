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
    {"info", kpt_cmd_info, "backends, devices, driver and library versions"},
};
#define KPT_N_COMMANDS (sizeof kpt_commands / sizeof kpt_commands[0])

static void kpt_usage(FILE *f) {
    fprintf(f, "usage: kpipe <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < KPT_N_COMMANDS; i++)
        fprintf(f, "  %-9s %s\n", kpt_commands[i].name, kpt_commands[i].what);
    fprintf(f, "\nRun 'kpipe <command> --help' for a command's options.\n");
}

int kpt_cmd_info(int argc, char **argv) {
    if (argc > 1) {
        bool help = kpt_is_help(argv[1]);
        fprintf(help ? stdout : stderr, "usage: kpipe info\n\nLists the backends built in, the "
                "devices present, the module types, and driver and runtime versions.\n");
        return help ? 0 : 2;
    }
    char why[256] = "", desc[256];
    printf("kpipe %s (%s)\nbackends built: %s\nmodule types:", kp_version_str(),
           kp_library_versions(desc, sizeof desc), kp_backends_built());
    for (size_t i = 0; i < kp_module_type_count(); i++) printf(" %s", kp_module_type_name(i));
    printf("\ndevices:\n");
    kp_device_t dev;
    if (kp_device_open("cpu", &dev) == KP_OK) {
        if (kp_device_describe(dev, desc, sizeof desc) == KP_OK) printf("  cpu      %s\n", desc);
        kp_device_close(dev);
    }
    int n = kp_cuda_device_count(why, sizeof why);
    if (n == 0) printf("  cuda     none (%s)\n", why);
    for (int i = 0; i < n; i++) {
        char name[16];
        int drv = 0, rt = 0;
        snprintf(name, sizeof name, "cuda:%d", i);
        if (kp_device_open(name, &dev) != KP_OK) {
            printf("  %-8s unavailable: %s\n", name, kp_last_error());
            continue;
        }
        if (kp_device_describe(dev, desc, sizeof desc) == KP_OK) printf("  %-8s %s\n", name, desc);
        if (i == 0 && kp_device_versions(dev, &drv, &rt) == KP_OK)
            printf("cuda driver %d.%d, runtime %d.%d\n", drv / 1000, (drv % 1000) / 10, rt / 1000,
                   (rt % 1000) / 10);
        kp_device_close(dev);
    }
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
