#!/usr/bin/env bash
# Remote queues against UCX's own ucx_perftest (Debian's ucx-utils) on this
# host, same run, same transport, same message sizes.
#   bench/remote_vs_perftest.sh BUILD_DIR DEVICE [KIB...]
# For each frame size: ucx_perftest's tag bandwidth and tag latency between
# two processes over loopback, with UCX_TLS=tcp (a remote queue's endpoint
# is made from an address, and UCX 1.13 carries such an endpoint on tcp
# even within one host: ep_cfg in UCX_LOG_LEVEL=info says so), then with
# UCX's own choice (shared memory) for reference; then bench_remote's
# remote queue saturated, and paced at half the frames/s it reached.
# Prints one row per size: bandwidths in GB/s (10^9 bytes), latencies in us.
# KP_REMOTE_CAPACITY (4 unless set): the frames in flight on the link, the
# remote source's capacity (bench_remote's CAPACITY). ucx_perftest runs
# with the rendezvous threshold kpipe gives its own UCX context
# (KP__RNDV_THRESH, src/flow/remote-impl.h), or UCX_RNDV_THRESH where set:
# the same protocols on both sides.
set -uo pipefail
build=$1 dev=$2
cap=${KP_REMOTE_CAPACITY:-4}
rndv=${UCX_RNDV_THRESH:-$(sed -n 's/^#define KP__RNDV_THRESH "\(.*\)"/\1/p' \
  "$(dirname "$0")/../src/flow/remote-impl.h")}
export UCX_RNDV_THRESH=${rndv:?no KP__RNDV_THRESH in src/flow/remote-impl.h}
shift 2
sizes=${*:-64 1024 8192 65536}
port=$((20000 + RANDOM % 20000))
perftest() { # TLS KIB TEST ITERS -> the "Final" line's fields
  local tls=$1 bytes=$(($2 * 1024)) test=$3 n=$4
  port=$((port + 1))
  env ${tls:+UCX_TLS=$tls} ucx_perftest -p $port -t $test -s $bytes -n $n >/dev/null 2>&1 &
  local srv=$!
  sleep 0.5
  env ${tls:+UCX_TLS=$tls} ucx_perftest 127.0.0.1 -p $port -t $test -s $bytes -n $n 2>/dev/null |
    awk '/Final:/ {print $3, $6}' # latency p50 (us, one way), bandwidth MB/s (2^20)
  wait $srv 2>/dev/null
}
frames_for() { # enough frames for about a second at 5 GB/s, 100 at least
  local n=$((5000000 / $1))
  [ $n -lt 100 ] && n=100
  [ $n -gt 20000 ] && n=20000
  echo $n
}
printf '# %s: remote queue (capacity %s) vs ucx_perftest (tag), loopback, UCX_RNDV_THRESH=%s\n' \
  "$dev" "$cap" "$UCX_RNDV_THRESH"
printf '%8s | %9s %9s %9s | %9s %9s | %9s %9s %6s | %9s %9s %9s | %9s\n' KiB \
  pt_tcp_GB pt_shm_GB pt_lat_us kp_GB kp_p50_us ratio_tcp ratio_shm x0.8? \
  kp50_p50 kp50_p99 bound_us inproc_GB
for kib in $sizes; do
  n=$(frames_for $kib)
  read -r _ bw_tcp < <(perftest tcp $kib tag_bw $n)
  read -r _ bw_shm < <(perftest "" $kib tag_bw $n)
  read -r lat _ < <(perftest tcp $kib tag_lat $(( n / 2 + 10 )))
  sat=$("$build/bench/bench_remote" $dev $kib $n 0 $cap 2>&1)
  kp_line=$(grep "remote queue" <<<"$sat")
  in_line=$(grep "in-process queue" <<<"$sat")
  copy_gbs=$(grep "memcpy, one frame" <<<"$sat" | awk '{print $(NF-3)}')
  fps=$(awk '{print $4}' <<<"$kp_line")
  kp_gb=$(awk '{print $6}' <<<"$kp_line")
  kp_p50=$(awk '{print $10}' <<<"$kp_line")
  in_gb=$(awk '{print $5}' <<<"$in_line")
  half=$(awk -v f="$fps" 'BEGIN {printf "%.0f", f / 2}')
  paced=$("$build/bench/bench_remote" $dev $kib $(( n / 2 + 10 )) $half $cap 2>&1 | grep "remote queue")
  p50=$(awk '{print $10}' <<<"$paced")
  p99=$(awk '{print $13}' <<<"$paced")
  awk -v kib=$kib -v t="${bw_tcp:-0}" -v s="${bw_shm:-0}" -v lat="${lat:-0}" -v kg="$kp_gb" \
      -v kp="$kp_p50" -v p50="$p50" -v p99="$p99" -v cg="$copy_gbs" -v ig="$in_gb" 'BEGIN {
    t *= 1.048576e-3; s *= 1.048576e-3               # MB/s (2^20) -> GB/s
    copy_us = cg > 0 ? kib * 1024 / (cg * 1e3) : 0   # one frame copied, us
    bound = 2 * lat + copy_us
    target = kib >= 1024 ? 0.8 : 0.5
    printf "%8d | %9.2f %9.2f %9.1f | %9.2f %9.1f | %9.2f %9.2f %6s | %9.1f %9.1f %9.1f | %9.1f\n",
      kib, t, s, lat, kg, kp, (t > 0 ? kg / t : 0), (s > 0 ? kg / s : 0),
      ((t > 0 && kg / t >= target) ? "met" : "no"), p50, p99, bound, ig
  }'
done
echo "# ratio_*: kpipe / ucx_perftest bandwidth; target >= 0.8 at 1 MiB and above, >= 0.5 at 64 KiB"
echo "# kp50_*: latency at half the saturated frames/s; target p50 <= bound = 2 x perftest latency + one frame's memcpy"
