#!/usr/bin/env bash
# make test-podman: the runtime contract and the end-to-end Docker tests against Podman's
# Docker-compatible API (README "On Podman"). Podman is installed with apt when missing; its
# API service runs on a socket of its own, with its configuration, storage and run state in a
# temporary directory (containers.conf and registries.conf from here), so the host's Docker and
# any Podman of the host are never touched. The service is stopped and the directory removed
# at the end, whatever the tests did. With PODMAN_OPTIONAL=1 (.ci/run), a Podman that cannot
# be installed or started skips the tests, saying why, instead of failing.
set -euo pipefail
cd "$(dirname "$0")/../.."
here=testdata/podman
unavailable() {
  if [ "${PODMAN_OPTIONAL:-}" = 1 ]; then
    echo "Podman tests skipped: $1" >&2
    exit 0
  fi
  echo "test-podman: $1" >&2
  exit 1
}
if ! command -v podman >/dev/null 2>&1; then
  [ "$(id -u)" = 0 ] || unavailable "podman is missing and this is not root to install it"
  { apt-get update && apt-get install -y podman; } || unavailable "apt-get could not install podman"
fi
dir=$(mktemp -d /tmp/agentd-podman.XXXXXX)
pid=""
cleanup() {
  if [ -n "$pid" ]; then
    # The API service first, so nothing holds the storage; then the containers' mounts.
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    podman --root "$dir/storage" --runroot "$dir/run" --tmpdir "$dir/tmp" rm -a -f >/dev/null 2>&1 || true
  fi
  # Whatever the storage left mounted beneath the directory (overlay mounts its own dir), deepest first.
  awk -v d="$dir/" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r | while read -r m; do umount "$m" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT
# Podman raises nofile and nproc at every container start, which fails without CAP_SYS_RESOURCE
# above the hard limits; it lowers its own nproc limit to 32768 at start.
nofile=$(ulimit -Hn); nproc=$(ulimit -Hu)
[ "$nofile" = unlimited ] && nofile=1048576
if [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ]; then nproc=32768; fi
sed -e "s/@NOFILE@/$nofile/g" -e "s/@NPROC@/$nproc/g" "$here/containers.conf" >"$dir/containers.conf"
printf '[storage]\ndriver = "overlay"\ngraphroot = "%s/storage"\nrunroot = "%s/run"\n' "$dir" "$dir" >"$dir/storage.conf"
export CONTAINERS_CONF="$dir/containers.conf" CONTAINERS_STORAGE_CONF="$dir/storage.conf"
export CONTAINERS_REGISTRIES_CONF="$PWD/$here/registries.conf" XDG_RUNTIME_DIR="$dir/xdg"
mkdir -p "$dir/xdg" "$dir/tmp"
sock="$dir/podman.sock"
# In the temporary directory: conmon writes a file "oom" into its working directory when a
# container is OOM-killed (and Podman then does not read it: OOMKilled stays false).
(cd "$dir" && exec podman --tmpdir "$dir/tmp" system service --time=0 "unix://$sock") >"$dir/service.log" 2>&1 &
pid=$!
export DOCKER_HOST="unix://$sock"
# Ready when it lists containers (its /version runs the package manager: seconds, not a probe).
SECONDS=0
until docker ps -q >/dev/null 2>&1; do
  kill -0 "$pid" 2>/dev/null || { cat "$dir/service.log" >&2; unavailable "its API service exited at start (log above)"; }
  [ "$SECONDS" -lt 120 ] || unavailable "its API service did not answer within 2 min"
  sleep 0.2
done
docker version --format 'Podman API service at {{.Server.Version}}, API {{.Server.APIVersion}}: '"$sock"
make testbox-image
# Every Docker test of both packages runs but one about the Docker Engine itself, which skips
# itself on Podman saying why: TestDockerBufferReachesBackToTheLastDie (Docker's buffer of its
# last 256 events). The benchmarks' (cmd/agentd-bench, TestDockerBench*) time Docker's calls
# for make bench: not a promise, and not run here.
AGENTD_DOCKER_TESTS=1 go test -count=1 -timeout 30m -run Docker ./internal/docker ./cmd/agentd
