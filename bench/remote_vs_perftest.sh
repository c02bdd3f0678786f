#!/usr/bin/env bash
# Remote queues against UCX's own ucx_perftest (Debian's ucx-utils) on this
# host, same run, same message sizes.
#   bench/remote_vs_perftest.sh BUILD_DIR DEVICE[,RX_DEVICE] [KIB...]
# For each frame size, rounds alternated (KP_REMOTE_ROUNDS, 3 unless set):
#   - ucx_perftest's tag bandwidth between two processes over loopback with
#     UCX_TLS=tcp, and with UCX's own choice on one host (shared memory);
#   - bench_remote's remote queue saturated on its own lane choice (shared
#     memory; device frames by CUDA IPC), and with KP_REMOTE_LANE=tcp (the
#     lane a queue between two hosts takes);
# then the queue on its own lane paced at half the frames/s it reached.
# Device frames between two GPUs (DEVICE cuda:0,cuda:1) are also set
# against cudaMemcpyPeerAsync back to back in one process (bench_remote's
# peer floor) and against the same lane by hand, two processes and no
# framework (bench/ipc_hand: the slots, the events, pipes for the header
# and the credits). ucx_perftest runs with the rendezvous threshold kpipe gives
# its own UCX context (KP__RNDV_THRESH, src/flow/remote/remote-impl.h), or
# UCX_RNDV_THRESH where set: the same protocols on both sides.
# KP_REMOTE_CAPACITY (4 unless set): the frames in flight on the link.
# Prints one row per size (medians of the rounds); bandwidths in GB/s
# (10^9 bytes), latencies in us; each round's figures on the line under it.
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
perftest() { # TLS KIB -> bandwidth GB/s (0 where it printed none)
  local tls=$1 bytes=$(($2 * 1024)) n=$3
  port=$((port + 1))
  env ${tls:+UCX_TLS=$tls} ucx_perftest -p $port -t tag_bw -s $bytes -n $n >/dev/null 2>&1 &
  local srv=$!
  sleep 0.5
  env ${tls:+UCX_TLS=$tls} ucx_perftest 127.0.0.1 -p $port -t tag_bw -s $bytes -n $n 2>/dev/null |
    awk '/Final:/ {v = $6 * 1.048576e-3} END {printf "%.3f\n", v + 0}' # MB/s (2^20) -> GB/s
  wait $srv 2>/dev/null
}
frames_for() { # enough frames for about a second at 5 GB/s, 100 at least
  local n=$((5000000 / $1))
  [ $n -lt 100 ] && n=100
  [ $n -gt 20000 ] && n=20000
  echo $n
}
median() { printf '%s\n' "$@" | awk '$1 > 0' | sort -g | awk '{a[NR] = $1} END {print (NR ? a[int((NR + 1) / 2)] : 0)}'; }
field() { grep "$1" <<<"$2" | head -1 | awk -v k="$3" '{print $k}'; }
printf '# %s: remote queue (capacity %s) vs ucx_perftest (tag_bw), one host, UCX_RNDV_THRESH=%s\n' \
  "$dev" "$cap" "$UCX_RNDV_THRESH"
printf '%8s | %8s %8s | %8s %8s | %7s %7s | %8s %7s | %8s %8s | %s\n' KiB pt_tcp pt_shm kp_tcp \
  kp_lane tcp/pt shm/pt peer_GB kp/peer p50_half p99_half lane
for kib in $sizes; do
  n=$(frames_for $kib)
  pts=() pss=() kts=() kls=() fpss=() p50s=() p99s=() hands=() lane='' peer=0
  for ((r = 0; r < rounds; r++)); do
    if [[ $dev =~ ^cuda:([0-9]+),cuda:([0-9]+)$ ]] && [ -x "$build/bench/ipc_hand" ]; then
      hands+=("$("$build/bench/ipc_hand" "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}" $kib \
                 $((n > 8000 ? 8000 : n)) $cap host 2>&1 | awk '/hand IPC lane/ {print $(NF-1)}')")
    fi
    pts+=("$(perftest tcp $kib $n)")
    pss+=("$(perftest '' $kib $n)")
    out=$(KP_REMOTE_LANE=tcp "$build/bench/bench_remote" $dev $kib $n 0 $cap 2>&1)
    kts+=("$(field "remote queue" "$out" 6)")
    out=$("$build/bench/bench_remote" $dev $kib $n 0 $cap 2>&1)
    kls+=("$(field "remote queue" "$out" 6)")
    fpss+=("$(field "remote queue" "$out" 4)")
    if [ $r = 0 ]; then
      lane=$(grep -m1 "sending process, *lane:" <<<"$out" | sed 's/.*lane: //')
      peer=$(field "cudaMemcpyPeerAsync" "$out" 2)
    fi
  done
  half=$(awk -v f="$(median "${fpss[@]}")" 'BEGIN {printf "%.0f", f / 2}')
  for ((r = 0; r < rounds; r++)); do
    paced=$("$build/bench/bench_remote" $dev $kib $((n / 2 + 10)) $half $cap 2>&1 | grep "remote queue")
    p50s+=("$(awk '{print $10}' <<<"$paced")")
    p99s+=("$(awk '{print $13}' <<<"$paced")")
  done
  awk -v kib=$kib -v pt="$(median "${pts[@]}")" -v ps="$(median "${pss[@]}")" \
      -v kt="$(median "${kts[@]}")" -v kl="$(median "${kls[@]}")" -v peer="${peer:-0}" \
      -v p50="$(median "${p50s[@]}")" -v p99="$(median "${p99s[@]}")" -v lane="${lane:-?}" 'BEGIN {
    printf "%8d | %8.2f %8.2f | %8.2f %8.2f | %7.2f %7.2f | %8s %7s | %8.1f %8.1f | %s\n",
      kib, pt, ps, kt, kl, (pt > 0 ? kt / pt : 0), (ps > 0 ? kl / ps : 0),
      (peer > 0 ? sprintf("%.2f", peer) : "-"), (peer > 0 ? sprintf("%.2f", kl / peer) : "-"),
      p50, p99, lane
  }'
  printf '#   rounds: perftest tcp %s| shm %s| kpipe tcp %s| kpipe lane %s\n' \
    "$(printf '%s ' "${pts[@]}")" "$(printf '%s ' "${pss[@]}")" "$(printf '%s ' "${kts[@]}")" \
    "$(printf '%s ' "${kls[@]}")"
  if [ ${#hands[@]} -gt 0 ]; then
    awk -v h="$(median "${hands[@]}")" -v kl="$(median "${kls[@]}")" -v r="${hands[*]}" 'BEGIN {
      printf "#   hand IPC lane (bench/ipc_hand, host wait): %.2f GB/s, kpipe / hand %.2f; rounds %s\n",
        h, (h > 0 ? kl / h : 0), r }'
  fi
done
echo "# medians of $rounds rounds; pt_*: ucx_perftest, kp_tcp: kpipe with KP_REMOTE_LANE=tcp, kp_lane: kpipe's"
echo "#   own choice (the lane column); tcp/pt = kp_tcp / pt_tcp, shm/pt = kp_lane / pt_shm"
echo "# targets: host frames shm/pt >= 0.8 at 1 MiB and above, >= 0.5 at 64 KiB; device frames between two"
echo "#   GPUs through CUDA IPC kp/peer >= 0.8 at 8 MiB (peer_GB: cudaMemcpyPeerAsync back to back)"
echo "# p50_half, p99_half: kpipe's latency on its lane at half the saturated frames/s"
