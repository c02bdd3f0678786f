// The oneTBB baseline of bench_flow: parallel_pipeline with 4 tokens (the
// kpipe flow's queue capacity) through 4 empty serial stages.
//   tbb_flow [FRAMES]
#include <oneapi/tbb/parallel_pipeline.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

int main(int argc, char **argv) {
    long frames = argc > 1 ? std::atol(argv[1]) : 200000;
    using tbb::filter_mode;
    for (int rep = 0; rep < 3; rep++) {
        long next = 0;
        auto t0 = std::chrono::steady_clock::now();
        tbb::parallel_pipeline(
            4,
            tbb::make_filter<void, long>(filter_mode::serial_in_order,
                                         [&](tbb::flow_control &fc) -> long {
                                             if (next == frames) fc.stop();
                                             return next++;
                                         }) &
                tbb::make_filter<long, long>(filter_mode::serial_in_order,
                                             [](long x) { return x; }) &
                tbb::make_filter<long, long>(filter_mode::serial_in_order,
                                             [](long x) { return x; }) &
                tbb::make_filter<long, void>(filter_mode::serial_in_order, [](long) {}));
        double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                        .count();
        std::printf("oneTBB parallel_pipeline, 4 empty serial stages, %ld frames: %.3f us per "
                    "frame, %.3f us per frame and stage\n",
                    frames, us / frames, us / frames / 4);
    }
    return 0;
}
