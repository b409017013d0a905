#!/usr/bin/env bash
# The docker-compose cluster under test (`make compose-test`, run by
# .ci/run where Docker exists): builds the image (FROM scratch, the static
# binary) under a tag of its own, brings up docker-compose.yml's 3x3 cluster
# as a compose project of its own, loads gTPC-C, runs it while two replicas
# (a replica of eu-west-1 and one of eu-west-3) are killed with SIGKILL and
# started again, checks the TPC-C consistency conditions, and takes
# everything down: containers, network, volumes and the image, on every
# exit (a trap), then verifies that nothing of the project is left.
#
# Without Docker or docker compose it says so and exits 0 (a skip, never a
# silent pass). Settings (environment): RUN_DURATION (60s), KEEP_IMAGE=1 to
# keep the image.
set -euo pipefail

cd "$(dirname "$0")/.."

RUN_DURATION=${RUN_DURATION:-60s}
start=$SECONDS
say() { printf 'compose-test (%ds): %s\n' "$((SECONDS - start))" "$*"; }
skip() { say "skipped: $*"; exit 0; }

command -v docker >/dev/null || skip "no docker on PATH"
docker info >/dev/null 2>&1 || skip "docker is installed but its daemon does not answer (docker info failed)"
if docker compose version >/dev/null 2>&1; then
	compose_cmd=(docker compose)
elif command -v docker-compose >/dev/null; then
	compose_cmd=(docker-compose)
else
	skip "neither 'docker compose' nor docker-compose is installed"
fi

project=flexkv-ct-$$
export FLEXKV_IMAGE=flexkv:compose-test-$$
compose() { "${compose_cmd[@]}" -p "$project" -f docker-compose.yml "$@"; }

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if ((rc != 0)); then
		say "failed (exit $rc); the replicas' last log lines:"
		compose logs --tail 15 2>&1 | tail -n 150 || true
	fi
	compose down -v --remove-orphans --timeout 5 >/dev/null 2>&1 || true
	[[ ${KEEP_IMAGE:-} == 1 ]] || docker image rm -f "$FLEXKV_IMAGE" >/dev/null 2>&1 || true
	local left
	left=$(
		docker ps -aq --filter "label=com.docker.compose.project=$project"
		docker volume ls -q --filter "label=com.docker.compose.project=$project"
		docker network ls -q --filter "label=com.docker.compose.project=$project"
	)
	if [[ -n $left ]]; then
		say "left behind: $left"
		exit 1
	fi
	say "down: no container, volume or network of $project left"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "building $FLEXKV_IMAGE"
mkdir -p build
CGO_ENABLED=0 go build -trimpath -o build/flexkv ./cmd/flexkv
docker build -q -t "$FLEXKV_IMAGE" . >/dev/null

say "up ($project)"
compose up -d

# gtpcc load is refused until every group serves: retry for a while.
say "loading"
for try in $(seq 30); do
	if compose run --rm -T gtpcc load >/tmp/"$project"-load.log 2>&1; then
		break
	fi
	((try < 30)) || { cat /tmp/"$project"-load.log; rm -f /tmp/"$project"-load.log; exit 1; }
	sleep 2
done
tail -n 3 /tmp/"$project"-load.log
rm -f /tmp/"$project"-load.log

# The replicas are killed by container id: docker itself answers at once,
# where each docker-compose command takes seconds.
r2=$(compose ps -q r2)
r5=$(compose ps -q r5)
[[ -n $r2 && -n $r5 ]] || { say "no container for r2 or r5"; exit 1; }
secs=${RUN_DURATION%s}
[[ $secs =~ ^[0-9]+$ ]] || { say "RUN_DURATION '$RUN_DURATION': want seconds, e.g. 60s"; exit 2; }
((secs >= 20)) || { say "RUN_DURATION $RUN_DURATION: want 20s or more"; exit 2; }
say "run for $RUN_DURATION, killing r2 and r5 during it"
compose run --rm -T gtpcc run --duration "$RUN_DURATION" --check=false --progress 10s &
run_pid=$!
# The run starts once its container is up; the faults are timed from then.
for _ in $(seq 60); do
	[[ -n $(docker ps -q --filter "label=com.docker.compose.project=$project" --filter "label=com.docker.compose.service=gtpcc") ]] && break
	sleep 1
done
fault() { # fault WHAT DOCKER-ARGS...: a kill -9 while the run goes on, or a start
	if [[ $1 == kill* ]] && ! kill -0 "$run_pid" 2>/dev/null; then
		say "the run ended before: $1 (RUN_DURATION=$RUN_DURATION is too short here)"
		exit 1
	fi
	say "$1"
	docker "${@:2}" >/dev/null
}
step=$((secs / 6))
sleep "$step"
fault "kill -9 r2" kill -s KILL "$r2"
sleep "$step"
fault "start r2" start "$r2"
sleep "$step"
fault "kill -9 r5" kill -s KILL "$r5"
sleep "$step"
fault "start r5" start "$r5"
wait "$run_pid"

say "check"
compose run --rm -T gtpcc check
say "passed"
