#!/usr/bin/env bash
# The soak (`make soak [DURATION=1h]`): the local 3x3 cluster (`flexkv local`,
# its own process) under gTPC-C's whole mix for DURATION, its resident memory
# and disk sampled every SAMPLE into OUT/samples.csv, then a verdict:
#
#   - after WARMUP, RSS stays under the process's memory limit (the bound
#     `flexkv local` states on its first line, sized from the configuration);
#   - after WARMUP, RSS rises no faster than the data on disk grows (least
#     squares slopes, MB a minute, with SLOPE_SLACK MB a minute of slack);
#   - after WARMUP, the largest replica's raft log stays bounded: it ends no
#     larger than RAFT_SLACK times its largest size in the first half after
#     WARMUP (raft truncates it every SnapshotThreshold entries).
#
# It exits non-zero on a failed verdict, a failed gTPC-C check, or a cluster
# that died. OUT keeps the CSV, the cluster's and the driver's output and the
# cluster's heap profile at the end (go tool pprof -sample_index=inuse_space
# OUT/flexkv OUT/heap.pprof). The data directory is removed on exit.
#
# Settings (environment): DURATION (1h), SAMPLE (1m), WARMUP (10m), OUT
# (soak-out), CLIENTS per warehouse (2), PORT_PREFIX (5: the cluster listens
# on 127.0.0.1:51NN and 52NN instead of local.yaml's 71NN and 72NN, so that a
# soak runs beside a `flexkv local`), SLOPE_SLACK (0.5), RAFT_SLACK (1.5).
set -euo pipefail

cd "$(dirname "$0")/.."

DURATION=${DURATION:-1h}
SAMPLE=${SAMPLE:-1m}
WARMUP=${WARMUP:-10m}
OUT=${OUT:-soak-out}
CLIENTS=${CLIENTS:-2}
PORT_PREFIX=${PORT_PREFIX:-5}
SLOPE_SLACK=${SLOPE_SLACK:-0.5}
RAFT_SLACK=${RAFT_SLACK:-1.5}

die() { echo "soak: $*" >&2; exit 2; }

# seconds turns 90s, 15m, 1h or 1h30m into seconds.
seconds() {
	local s=$1 total=0
	[[ $s =~ ^([0-9]+h)?([0-9]+m)?([0-9]+s)?$ && -n $s ]] || die "bad duration '$s' (want e.g. 90s, 15m, 1h, 1h30m)"
	[[ $s =~ ([0-9]+)h ]] && total=$((total + BASH_REMATCH[1] * 3600))
	[[ $s =~ ([0-9]+)m ]] && total=$((total + BASH_REMATCH[1] * 60))
	[[ $s =~ ([0-9]+)s ]] && total=$((total + BASH_REMATCH[1]))
	echo "$total"
}
dur=$(seconds "$DURATION")
step=$(seconds "$SAMPLE")
warm=$(seconds "$WARMUP")
((step > 0)) || die "SAMPLE must be positive"
((warm + 2 * step <= dur)) || die "DURATION $DURATION leaves fewer than two samples after WARMUP $WARMUP"
[[ $PORT_PREFIX =~ ^[1-6]$ ]] || die "PORT_PREFIX '$PORT_PREFIX': want one digit 1-6"

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
data=$(mktemp -d "${TMPDIR:-/tmp}/flexkv-soak.XXXXXX")
cluster_pid=""
cleanup() {
	if [[ -n $cluster_pid ]] && kill -0 "$cluster_pid" 2>/dev/null; then
		kill -TERM "$cluster_pid" 2>/dev/null || true
		wait "$cluster_pid" 2>/dev/null || true
	fi
	rm -rf "$data"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "soak: building"
CGO_ENABLED=0 go build -trimpath -o "$OUT/flexkv" ./cmd/flexkv
bin=$OUT/flexkv
sed -E "s/\"127\.0\.0\.1:7([12][0-9][0-9])\"/\"127.0.0.1:${PORT_PREFIX}\1\"/g" configs/local.yaml >"$data/cluster.yaml"
grep -q "127.0.0.1:${PORT_PREFIX}101" "$data/cluster.yaml" || die "could not move configs/local.yaml's ports"

"$bin" local --config "$data/cluster.yaml" --data-dir "$data/nodes" --mem-profile "$OUT/heap.pprof" \
	>"$OUT/cluster.log" 2>&1 &
cluster_pid=$!
for _ in $(seq 120); do
	grep -q '^endpoints:' "$OUT/cluster.log" && break
	kill -0 "$cluster_pid" 2>/dev/null || { cat "$OUT/cluster.log" >&2; die "the cluster stopped while starting"; }
	sleep 1
done
grep -q '^endpoints:' "$OUT/cluster.log" || die "the cluster did not serve within 120s"
limit_mb=$(sed -nE 's/.*memory limit ([0-9]+) MiB.*/\1/p' "$OUT/cluster.log" | head -1)
[[ -n $limit_mb ]] || die "flexkv local did not state its memory limit"
head -n 1 "$OUT/cluster.log"

client=(--config "$data/cluster.yaml" --certs-dir "$data/nodes/certs")
echo "soak: loading"
"$bin" gtpcc load "${client[@]}" >"$OUT/load.log" 2>&1 || { cat "$OUT/load.log" >&2; die "gtpcc load failed"; }

rss_mb() { awk '/^VmRSS:/ { printf "%.1f", $2 / 1024 }' "/proc/$cluster_pid/status"; }
mb() { du -sk "$@" 2>/dev/null | awk '{ s += $1 } END { printf "%.1f", s / 1024 }'; }
raft_max_mb() {
	local max=0 d
	for d in "$data"/nodes/*/raft; do
		[[ -d $d ]] || continue
		max=$(awk -v a="$max" -v b="$(mb "$d")" 'BEGIN { print (b > a ? b : a) }')
	done
	echo "$max"
}

echo "soak: the whole mix for $DURATION ($CLIENTS clients per warehouse), a sample every $SAMPLE into $OUT/samples.csv"
"$bin" gtpcc run "${client[@]}" --duration "${dur}s" --clients "$CLIENTS" --progress 1m \
	>"$OUT/run.log" 2>&1 &
run_pid=$!
echo "elapsed_s,rss_mb,data_mb,raft_max_mb" >"$OUT/samples.csv"
start=$SECONDS
while kill -0 "$run_pid" 2>/dev/null; do
	kill -0 "$cluster_pid" 2>/dev/null || die "the cluster died (see $OUT/cluster.log)"
	line="$((SECONDS - start)),$(rss_mb),$(mb "$data/nodes"),$(raft_max_mb)"
	echo "$line" >>"$OUT/samples.csv"
	echo "soak: $line"
	for _ in $(seq "$step"); do
		kill -0 "$run_pid" 2>/dev/null || break
		sleep 1
	done
done
run_ok=0
wait "$run_pid" || run_ok=$?
tail -n 30 "$OUT/run.log"

kill -TERM "$cluster_pid"
wait "$cluster_pid" || true
cluster_pid=""

verdict=0
awk -F, -v warm="$warm" -v limit="$limit_mb" -v slack="$SLOPE_SLACK" -v rslack="$RAFT_SLACK" '
function slope(sx, sy, sxx, sxy, n) { return n < 2 || n * sxx == sx * sx ? 0 : (n * sxy - sx * sy) / (n * sxx - sx * sx) }
NR == 1 || $1 < warm { next }
{
	t = $1 / 60; n++; T[n] = t; R[n] = $2; D[n] = $3; L[n] = $4
	sx += t; sxx += t * t; sr += $2; srt += $2 * t; sd += $3; sdt += $3 * t
	if ($2 > maxrss) maxrss = $2
}
END {
	if (n < 2) { print "soak: verdict: FAIL (fewer than two samples after the warm-up)"; exit 1 }
	rs = slope(sx, sr, sxx, srt, n); ds = slope(sx, sd, sxx, sdt, n)
	half = int((n + 1) / 2); for (i = 1; i <= half; i++) if (L[i] > lmax) lmax = L[i]
	for (i = half + 1; i <= n; i++) if (L[i] > lend) lend = L[i]
	ok = 1
	printf "soak: after the warm-up (%d samples): RSS %.0f-%.0f MB (bound %d MB), slope %+.2f MB/min; data %.0f -> %.0f MB, slope %+.2f MB/min; largest raft log %.1f MB (first half) / %.1f MB (second half)\n", n, R[1], maxrss, limit, rs, D[1], D[n], ds, lmax, lend
	if (maxrss > limit) { print "soak: FAIL: RSS passed its bound"; ok = 0 }
	if (rs > (ds > 0 ? ds : 0) + slack) { printf "soak: FAIL: RSS rises %.2f MB/min, faster than the data (%.2f MB/min) plus %.2f\n", rs, ds, slack; ok = 0 }
	if (lend > rslack * lmax + 1) { printf "soak: FAIL: the raft log grew from %.1f to %.1f MB\n", lmax, lend; ok = 0 }
	print (ok ? "soak: verdict: PASS" : "soak: verdict: FAIL")
	exit ok ? 0 : 1
}' "$OUT/samples.csv" >"$OUT/verdict.txt" || verdict=$?
cat "$OUT/verdict.txt"
((run_ok == 0)) || { echo "soak: gtpcc run (with its check) failed: see $OUT/run.log" >&2; exit 1; }
exit "$verdict"
