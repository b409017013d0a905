#!/usr/bin/env bash
# Cost as the cluster grows (`make bench-scale`; docs/benchmarks.md): the
# server's CPU per transaction of gTPC-C's whole mix at 3, 6, 12 and 24
# groups (configs/scale/scale-N.yaml, one replica and one warehouse per
# group), without the emulated WAN (off) and with it (real).
#
# For each size and mode, on a fresh cluster (`flexkv local`, its own
# process, mutual TLS as by default): CPU over IDLE seconds before any load,
# gtpcc load, then the whole mix for SHORT and for LONG seconds (CLIENTS per
# warehouse, nothing trimmed: --warm-up 0 --cool-down 0), the cluster
# process's CPU time (utime + stime of /proc/PID/stat) read just before and
# just after each run, and gtpcc check. The marginal CPU per transaction,
#
#   ms/txn = (cpu(LONG) - cpu(SHORT)) / (txn(LONG) - txn(SHORT)),
#
# leaves out what a run costs once (the driver's connections, the first
# reads into cold caches). The driver is another process: its CPU is not
# counted. CPU time, not wall time, so that other work on the machine moves
# the figure less; the load average at each run's start is in the table.
#
# With PROFILE=N (default 24), the cluster of size N is restarted on its
# data after its runs with --cpu-profile and runs the whole mix for LONG
# seconds once more (per mode): OUT/profile-N-MODE.pprof, its top entries
# in OUT/profile-N-MODE.txt (go tool pprof -top OUT/flexkv FILE).
#
# Settings (environment): SIZES ("3 6 12 24"), MODES ("off real"; the
# servers' and the driver's --latency-mode), SHORT (10), LONG (30), CLIENTS
# (4), IDLE (10), ROUNDS (1: every size and mode again, for the spread),
# PROFILE (24; empty: none), OUT (scale-out), FLEXKV (a flexkv binary to
# measure instead of one built from this tree). OUT keeps results.csv, the
# table (table.txt), and each cluster's and driver's output. The clusters
# listen on 127.0.0.1:171NN-173NN (clear of configs/local.yaml and of
# scripts/soak.sh), so one benchmark runs at a time.
set -euo pipefail

cd "$(dirname "$0")/.."

SIZES=${SIZES:-3 6 12 24}
MODES=${MODES:-off real}
SHORT=${SHORT:-10}
LONG=${LONG:-30}
CLIENTS=${CLIENTS:-4}
IDLE=${IDLE:-10}
ROUNDS=${ROUNDS:-1}
PROFILE=${PROFILE-24}
OUT=${OUT:-scale-out}

die() { echo "scale-bench: $*" >&2; exit 2; }

for v in SHORT LONG CLIENTS IDLE ROUNDS; do
	[[ ${!v} =~ ^[0-9]+$ ]] || die "$v '${!v}': want a whole number"
done
((SHORT > 0 && LONG > SHORT)) || die "want 0 < SHORT < LONG (got $SHORT, $LONG)"
for n in $SIZES; do
	[[ -f configs/scale/scale-$n.yaml ]] || die "no configs/scale/scale-$n.yaml (sizes: 3 6 12 24)"
done
for m in $MODES; do
	[[ $m == off || $m == real || $m == paper ]] || die "mode '$m': want off, real or paper"
done

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
data=$(mktemp -d "${TMPDIR:-/tmp}/flexkv-scale.XXXXXX")
cluster_pid=""
stop_cluster() {
	if [[ -n $cluster_pid ]] && kill -0 "$cluster_pid" 2>/dev/null; then
		kill -TERM "$cluster_pid" 2>/dev/null || true
		wait "$cluster_pid" 2>/dev/null || true
	fi
	cluster_pid=""
}
cleanup() {
	stop_cluster
	rm -rf "$data"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ -n ${FLEXKV:-} ]]; then
	cp "$FLEXKV" "$OUT/flexkv"
else
	echo "scale-bench: building"
	CGO_ENABLED=0 go build -trimpath -o "$OUT/flexkv" ./cmd/flexkv
fi
bin=$OUT/flexkv
tick=$(getconf CLK_TCK)

# cpu_s prints the cluster process's CPU time (user + system) in seconds.
cpu_s() { awk -v hz="$tick" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$cluster_pid/stat"; }
load1() { cut -d' ' -f1 /proc/loadavg; }

# start_cluster CONFIG MODE DIR LOG [FLAG...] starts flexkv local and waits
# until it serves.
start_cluster() {
	local cfg=$1 mode=$2 dir=$3 log=$4
	shift 4
	"$bin" local --config "$cfg" --data-dir "$dir" --latency-mode "$mode" "$@" >"$log" 2>&1 &
	cluster_pid=$!
	for _ in $(seq 120); do
		grep -q '^endpoints:' "$log" && return 0
		kill -0 "$cluster_pid" 2>/dev/null || { cat "$log" >&2; die "the cluster stopped while starting"; }
		sleep 1
	done
	die "the cluster of $cfg did not serve within 120s (see $log)"
}

# run_mix CONFIG MODE DIR SECONDS JSON LOG runs the whole mix once.
run_mix() {
	"$bin" gtpcc run --config "$1" --certs-dir "$3/certs" --latency-mode "$2" --duration "$4s" \
		--clients "$CLIENTS" --warm-up 0 --cool-down 0 --check=false --progress 0 --json "$5" \
		>"$6" 2>&1 || { cat "$6" >&2; die "gtpcc run failed (see $6)"; }
}

# measure ROUND N MODE appends one line to results.csv.
measure() {
	local round=$1 n=$2 mode=$3 cfg=configs/scale/scale-$2.yaml tag=$2-$3-$1
	local dir=$data/$tag
	start_cluster "$cfg" "$mode" "$dir" "$OUT/cluster-$tag.log"
	local load_start c0 c1 idle
	load_start=$(load1)
	c0=$(cpu_s)
	sleep "$IDLE"
	c1=$(cpu_s)
	idle=$(awk -v a="$c0" -v b="$c1" -v t="$IDLE" 'BEGIN { printf "%.3f", (t > 0 ? (b - a) / t : 0) }')
	"$bin" gtpcc load --config "$cfg" --certs-dir "$dir/certs" >"$OUT/load-$tag.log" 2>&1 ||
		{ cat "$OUT/load-$tag.log" >&2; die "gtpcc load failed"; }
	local d a b row=""
	for d in "$SHORT" "$LONG"; do
		a=$(cpu_s)
		run_mix "$cfg" "$mode" "$dir" "$d" "$OUT/run-$tag-$d.json" "$OUT/run-$tag-$d.log"
		b=$(cpu_s)
		row+=",$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", b - a }'),$(jq -r '.txn_total' "$OUT/run-$tag-$d.json"),$(jq -r '.errors' "$OUT/run-$tag-$d.json")"
	done
	local check=passed
	"$bin" gtpcc check --config "$cfg" --certs-dir "$dir/certs" >"$OUT/check-$tag.log" 2>&1 || check=FAILED
	local load_end
	load_end=$(load1)
	stop_cluster
	if [[ $PROFILE == "$n" && $round == 1 ]]; then
		profile "$cfg" "$mode" "$dir" "$n-$mode"
	fi
	rm -rf "$dir"
	echo "$round,$n,$mode,$load_start,$load_end,$idle$row,$check" >>"$OUT/results.csv"
	echo "scale-bench: $(tail -n 1 "$OUT/results.csv")"
}

# profile CONFIG MODE DIR TAG restarts the cluster on DIR with a CPU
# profile and runs the whole mix for LONG seconds.
profile() {
	local file=$OUT/profile-$4.pprof
	echo "scale-bench: profiling $4 ($LONG s of the whole mix)"
	start_cluster "$1" "$2" "$3" "$OUT/cluster-profile-$4.log" --cpu-profile "$file"
	local a b
	a=$(cpu_s)
	run_mix "$1" "$2" "$3" "$LONG" "$OUT/run-profile-$4.json" "$OUT/run-profile-$4.log"
	b=$(cpu_s)
	stop_cluster
	{
		echo "# $4: $(jq -r '.txn_total' "$OUT/run-profile-$4.json") txn, cluster CPU over the run $(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", b - a }') s"
		go tool pprof -top -nodecount 40 "$bin" "$file" 2>/dev/null
		echo
		go tool pprof -top -cum -nodecount 60 "$bin" "$file" 2>/dev/null
	} >"$OUT/profile-$4.txt"
}

echo "round,groups,mode,load_start,load_end,idle_cpu_per_s,cpu_short_s,txn_short,err_short,cpu_long_s,txn_long,err_long,check" >"$OUT/results.csv"
echo "scale-bench: sizes $SIZES, modes $MODES, runs of ${SHORT}s and ${LONG}s, $CLIENTS clients per warehouse, $ROUNDS round(s); $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "$ROUNDS"); do
	for n in $SIZES; do
		for mode in $MODES; do
			measure "$round" "$n" "$mode"
		done
	done
done

# The table: one row per size and mode (the median over the rounds), the
# ratio to the smallest size's in the same mode.
awk -F, '
function median(s,   a, k, i, j, t) {
	k = split(s, a, " ")
	for (i = 2; i <= k; i++) for (j = i; j > 1 && a[j] + 0 < a[j - 1] + 0; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
	return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
}
NR == 1 { next }
{
	key = $2 " " $3
	if (!(key in seen)) { seen[key] = 1; keys[++nk] = key }
	ms = ($10 - $7) * 1000 / ($11 - $8)
	v[key] = v[key] " " sprintf("%.3f", ms); rate[key] = rate[key] " " $11 / long
	idle[key] = idle[key] " " $6; ld[key] = ld[key] " " $4 "-" $5
	errs[key] += $9 + $12; chk[key] = chk[key] ($13 == "passed" ? "" : " FAILED")
	if (!($3 in bsize) || $2 + 0 < bsize[$3]) { bsize[$3] = $2 + 0 }
}
END {
	printf "| groups | WAN | CPU ms/txn (marginal) | ratio to the fewest groups | txn/s (long run) | idle CPU s/s | errors | check | load average (start-end) |\n"
	print "|---|---|---|---|---|---|---|---|---|"
	for (i = 1; i <= nk; i++) { split(keys[i], p, " "); m[keys[i]] = median(v[keys[i]]) }
	for (i = 1; i <= nk; i++) {
		split(keys[i], p, " "); b = m[bsize[p[2]] " " p[2]]
		printf "| %d | %s | %.3f (%s) | %.2fx | %.0f | %.3f | %d | %s | %s |\n", p[1], p[2], m[keys[i]], substr(v[keys[i]], 2),
			m[keys[i]] / b, median(rate[keys[i]]), median(idle[keys[i]]), errs[keys[i]], chk[keys[i]] == "" ? "passed" : "FAILED", substr(ld[keys[i]], 2)
	}
}' long="$LONG" "$OUT/results.csv" | tee "$OUT/table.txt"
