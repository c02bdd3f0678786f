/* The kpipe command line. */
#include <stdio.h>
#include <string.h>

#include "kpipe/kpipe.h"

static void usage(FILE *f) {
    fprintf(f, "usage: kpipe <command> [options]\n\n"
               "commands:\n"
               "  info    backends, devices, driver and library versions\n"
               "\nRun 'kpipe <command> --help' for a command's options.\n");
}

static int cmd_info(int argc, char **argv) {
    if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        printf("usage: kpipe info\n\nLists the backends built in, the devices present, and "
               "driver and runtime versions.\n");
        return 0;
    }
    char why[256] = "", desc[256];
    printf("kpipe %s\n", kp_version_str());
    printf("backends built: %s\n", kp_backends_built());
    printf("devices:\n");
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
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "info") == 0) return cmd_info(argc - 1, argv + 1);
    fprintf(stderr, "kpipe: unknown command \"%s\"\n", argv[1]);
    usage(stderr);
    return 2;
}
