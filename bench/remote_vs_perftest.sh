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
# (KP__RNDV_THRESH, src/flow/remote/remote-impl.h), or UCX_RNDV_THRESH where set:
# the same protocols on both sides. KP_REMOTE_ROUNDS (3 unless set): runs
# of each, perftest and kpipe alternated; the row gives their medians, the
# line under it each round's figures.
set -uo pipefail
build=$1 dev=$2
cap=${KP_REMOTE_CAPACITY:-4}
rounds=${KP_REMOTE_ROUNDS:-3}
rndv=${UCX_RNDV_THRESH:-$(sed -n 's/^#define KP__RNDV_THRESH "\(.*\)"/\1/p' \
  "$(dirname "$0")/../src/flow/remote/remote-impl.h")}
export UCX_RNDV_THRESH=${rndv:?no KP__RNDV_THRESH in src/flow/remote/remote-impl.h}
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
printf '%8s | %9s %9s %9s | %9s %9s | %9s %9s %6s | %9s %9s %9s | %9s %9s %9s %9s\n' KiB \
  pt_tcp_GB pt_shm_GB pt_lat_us kp_GB kp_p50_us ratio_tcp ratio_shm x0.8? \
  kp50_p50 kp50_p99 bound_us inproc_GB pt_us/fr kp_us/fr staged_us
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print (NR ? a[int((NR + 1) / 2)] : 0)}'; }
for kib in $sizes; do
  n=$(frames_for $kib)
  read -r _ bw_shm < <(perftest "" $kib tag_bw $n)
  # rounds: perftest and kpipe alternated, so that both see the host's
  # changing load alike (one run of either ranges +-25% here)
  tcps=() lats=() kgs=() kps=() fpss=() p50s=() p99s=()
  for ((r = 0; r < rounds; r++)); do
    # a perftest run that printed no result, or a bandwidth of 0 (it does
    # both, at times, at 64 MiB), is left out of the median
    bw='' lat=''
    read -r _ bw < <(perftest tcp $kib tag_bw $n)
    awk -v v="${bw:-0}" 'BEGIN {exit !(v > 0)}' && tcps+=("$bw")
    read -r lat _ < <(perftest tcp $kib tag_lat $(( n / 2 + 10 )))
    awk -v v="${lat:-0}" 'BEGIN {exit !(v > 0)}' && lats+=("$lat")
    sat=$("$build/bench/bench_remote" $dev $kib $n 0 $cap 2>&1)
    kp_line=$(grep "remote queue" <<<"$sat")
    kgs+=("$(awk '{print $6}' <<<"$kp_line")")
    kps+=("$(awk '{print $10}' <<<"$kp_line")")
    fpss+=("$(awk '{print $4}' <<<"$kp_line")")
    if [ $r = 0 ]; then
      in_gb=$(grep "in-process queue" <<<"$sat" | awk '{print $5}')
      copy_gbs=$(grep "memcpy, one frame" <<<"$sat" | awk '{print $(NF-3)}')
      # the staged copies of one frame (device frames only): to host + back, us
      staged=$(grep "staged copy, one frame" <<<"$sat" |
        sed -n 's/.*(\([0-9.]*\) + \([0-9.]*\) us a frame)/\1 \2/p' | awk '{printf "%.1f", $1 + $2}')
    fi
  done
  # paced at half the median saturated rate
  half=$(awk -v f="$(median "${fpss[@]}")" 'BEGIN {printf "%.0f", f / 2}')
  for ((r = 0; r < rounds; r++)); do
    paced=$("$build/bench/bench_remote" $dev $kib $(( n / 2 + 10 )) $half $cap 2>&1 | grep "remote queue")
    p50s+=("$(awk '{print $10}' <<<"$paced")")
    p99s+=("$(awk '{print $13}' <<<"$paced")")
  done
  awk -v kib=$kib -v t="$(median "${tcps[@]}")" -v s="${bw_shm:-0}" -v lat="$(median "${lats[@]}")" \
      -v kg="$(median "${kgs[@]}")" -v kp="$(median "${kps[@]}")" -v p50="$(median "${p50s[@]}")" \
      -v p99="$(median "${p99s[@]}")" -v cg="$copy_gbs" -v ig="$in_gb" -v st="${staged:--}" 'BEGIN {
    t *= 1.048576e-3; s *= 1.048576e-3               # MB/s (2^20) -> GB/s
    copy_us = cg > 0 ? kib * 1024 / (cg * 1e3) : 0   # one frame copied, us
    if (st != "-") copy_us = st                      # device frames: their staged copies
    bound = 2 * lat + copy_us
    target = kib >= 1024 ? 0.8 : 0.5
    bytes = kib * 1024
    printf "%8d | %9.2f %9.2f %9.1f | %9.2f %9.1f | %9.2f %9.2f %6s | %9.1f %9.1f %9.1f | %9.1f %9.1f %9.1f %9s\n",
      kib, t, s, lat, kg, kp, (t > 0 ? kg / t : 0), (s > 0 ? kg / s : 0),
      ((t > 0 && kg / t >= target) ? "met" : "no"), p50, p99, bound, ig,
      (t > 0 ? bytes / (t * 1e3) : 0), (kg > 0 ? bytes / (kg * 1e3) : 0), st
  }'
  printf '#   each round: perftest tcp GB/s %s | kpipe GB/s %s | kpipe p50 at half load us %s\n' \
    "$(for v in "${tcps[@]}"; do awk -v v="$v" 'BEGIN {printf "%.2f ", v * 1.048576e-3}'; done)" \
    "${kgs[*]}" "${p50s[*]}"
done
echo "# medians of $rounds rounds (perftest shm: one run)"
echo "# ratio_*: kpipe / ucx_perftest bandwidth; target >= 0.8 at 1 MiB and above, >= 0.5 at 64 KiB"
echo "# pt_us/fr, kp_us/fr: a frame's time on the wire saturated, perftest tcp and kpipe; staged_us: the"
echo "#   staged copies of one frame alone (device to pinned host + back; device frames only, - on cpu)"
echo "# kp50_*: latency at half the saturated frames/s; target p50 <= bound = 2 x perftest latency + one frame's"
echo "#   copy (memcpy of host frames; device frames: staged_us, the copies they take)"
