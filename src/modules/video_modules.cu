// The video modules' kernels: one item per thread, grid-stride (video_modules-impl.h).
#include <stdint.h>

#include "kpipe/device.h"
#include "video_modules-impl.h"

template <int Op> __global__ void kp_video_kernel(kp__video_params p) {
    const kp__video_static sized = kp__video_sized(p.st, p.dyn);
    const kp__video_static *st = &sized;
    const void *in = p.dyn->input;
    const int64_t items = kp__video_items(Op, st->width, st->height, st->pitch);
    const int64_t n = items * p.dyn->frames, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const int64_t f = i / items;
        kp__video_item(st, (const char *)in + f * st->in_frame, (char *)st->output + f * st->out_frame,
                       Op, i % items);
    }
}

extern "C" const kp_device_kernel kp__i420_rgb_cuda = {
    reinterpret_cast<const void *>(kp_video_kernel<KP__VIDEO_I420_RGB>)};
extern "C" const kp_device_kernel kp__sharpen_cuda = {
    reinterpret_cast<const void *>(kp_video_kernel<KP__VIDEO_SHARPEN>)};
extern "C" const kp_device_kernel kp__rgb_i420_cuda = {
    reinterpret_cast<const void *>(kp_video_kernel<KP__VIDEO_RGB_I420>)};
extern "C" const kp_device_kernel kp__nv12_rgb_cuda = {
    reinterpret_cast<const void *>(kp_video_kernel<KP__VIDEO_NV12_RGB>)};
extern "C" const kp_device_kernel kp__rgb_nv12_cuda = {
    reinterpret_cast<const void *>(kp_video_kernel<KP__VIDEO_RGB_NV12>)};
extern "C" const kp_device_kernel kp__p016_rgb_cuda = {
    reinterpret_cast<const void *>(kp_video_kernel<KP__VIDEO_P016_RGB>)};
