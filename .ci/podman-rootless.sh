#!/usr/bin/env bash
# CI job of issue 37: the rootless Podman smoke test. An unprivileged user
# with subordinate ids runs `podman system service` on its own socket
# (/run/user/<uid>/podman/podman.sock), and Wharf, pointed at it by
# docker.host with the documented setup (docs/operations.md, "Rootless
# Podman"), starts a server, sends a console line round over the websocket,
# writes and reads a file through the files API and stops it
# (internal/e2e TestRootlessPodmanSmoke). The test image is built into that
# user's storage through its socket by the test itself.
#
# Run by .ci/run after .ci/podman.sh (Go, the static busybox are installed
# by then); idempotent on a fresh Debian. When rootless Podman cannot run a
# container here at all, it says "skipped: <reason>" loudly and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin:$HOME/go/bin"
export DEBIAN_FRONTEND=noninteractive
start=$(date +%s)
user=wharf-rootless-ci

skip() {
  echo "################################################################"
  echo "skipped: rootless Podman smoke test: $*"
  echo "################################################################"
  exit 0
}

echo "== rootless Podman: packages"
need=()
for c in podman conmon runc crun newuidmap slirp4netns setpriv; do
  command -v "$c" >/dev/null 2>&1 && continue
  case "$c" in
    newuidmap) need+=(uidmap) ;;
    setpriv) need+=(util-linux) ;;
    *) need+=("$c") ;;
  esac
done
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi
podman --version

echo "== the engine's user $user, with subordinate ids"
id "$user" >/dev/null 2>&1 || useradd --create-home --shell /usr/sbin/nologin "$user"
uid=$(id -u "$user"); gid=$(id -g "$user"); home=$(getent passwd "$user" | cut -d: -f6)
# A range of 65536 ids after every range already given (usermod refuses
# none; podman needs 65536 for most images).
next_free() {
  awk -F: 'BEGIN { m = 100000 } NF == 3 { e = $2 + $3; if (e > m) m = e } END { print m }' "$1" 2>/dev/null || echo 100000
}
if ! grep -qE "^($user|$uid):" /etc/subuid 2>/dev/null; then
  s=$(next_free /etc/subuid); usermod --add-subuids "$s-$((s + 65535))" "$user"
fi
if ! grep -qE "^($user|$uid):" /etc/subgid 2>/dev/null; then
  s=$(next_free /etc/subgid); usermod --add-subgids "$s-$((s + 65535))" "$user"
fi
grep -E "^($user|$uid):" /etc/subuid /etc/subgid

run_dir=/run/user/$uid
mkdir -p "$run_dir"; chown "$uid:$gid" "$run_dir"; chmod 0700 "$run_dir"
sock=$run_dir/podman/podman.sock
as_user() {
  setpriv --reuid="$uid" --regid="$gid" --init-groups \
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME="$home" USER="$user" LOGNAME="$user" XDG_RUNTIME_DIR="$run_dir" \
    "$@"
}

# The user's own engine configuration:
# - default_ulimits: Podman raises each container's RLIMIT_NOFILE/NPROC to
#   1048576, above this sandbox's hard limits, which a rootless engine
#   cannot raise ("error setting rlimit type 7"): lowered to what a
#   container starts with (probed below). Real hosts need none of it.
# - runtime: crun refuses a hybrid cgroup host ("cgroups in hybrid mode not
#   supported"); runc runs there.
# - cgroupfs and file events: no systemd user session here.
# - storage: vfs, which needs neither /dev/fuse nor kernel overlay in a
#   user namespace.
conf_dir=$home/.config/containers
mkdir -p "$conf_dir"
nofile=$(as_user bash -c 'ulimit -Hn'); nproc=$(as_user bash -c 'ulimit -Hu')
[ "$nofile" = unlimited ] || [ "$nofile" -gt 65536 ] && nofile=65536
[ "$nproc" = unlimited ] || [ "$nproc" -gt 65536 ] && nproc=65536
oci=crun
if [ "$(stat -fc %T /sys/fs/cgroup)" != cgroup2fs ]; then oci=runc; fi
write_conf() {
  cat >"$conf_dir/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "$oci"
CONF
}
write_conf
cat >"$conf_dir/storage.conf" <<CONF
[storage]
driver = "vfs"
CONF
chown -R "$uid:$gid" "$home/.config"

# A leftover service of an earlier run (killed mid-way) is stopped first.
stop_service() {
  if [ -f "$run_dir/wharf-ci-service.pid" ]; then
    kill "$(cat "$run_dir/wharf-ci-service.pid")" 2>/dev/null || true
    while kill -0 "$(cat "$run_dir/wharf-ci-service.pid")" 2>/dev/null; do sleep 0.2; done
    rm -f "$run_dir/wharf-ci-service.pid"
  fi
  # Rootless Podman keeps a pause process holding its user namespace.
  if [ -f "$run_dir/libpod/tmp/pause.pid" ]; then
    kill "$(cat "$run_dir/libpod/tmp/pause.pid")" 2>/dev/null || true
    rm -f "$run_dir/libpod/tmp/pause.pid"
  fi
}
stop_service
trap stop_service EXIT

echo "== can rootless Podman run a container here? (user namespace, newuidmap, storage, runtime)"
probe_dir=$(mktemp -d)
mkdir -p "$probe_dir/bin"
cp /bin/busybox "$probe_dir/bin/busybox"
chmod -R a+rX "$probe_dir"
if ! out=$(tar -C "$probe_dir" -c . | as_user podman import -q - localhost/wharf-ci-rootless-probe 2>&1); then
  rm -rf "$probe_dir"
  skip "podman import as $user fails: $out"
fi
rm -rf "$probe_dir"
while :; do
  write_conf
  if out=$(as_user podman run --rm --network none localhost/wharf-ci-rootless-probe /bin/busybox true 2>&1); then
    break
  fi
  case "$out" in
    *rlimit*) ;;
    *) skip "a container does not start as $user: $out" ;;
  esac
  if [ "$nproc" -le 1024 ] && [ "$nofile" -le 1024 ]; then
    skip "no container starts even with nofile=nproc=1024: $out"
  fi
  [ "$nproc" -gt 1024 ] && nproc=$((nproc / 2))
  [ "$nofile" -gt 1024 ] && nofile=$((nofile / 2))
done
echo "containers start as $user with nofile=$nofile nproc=$nproc (runtime $oci, storage vfs)"
as_user podman rmi -f localhost/wharf-ci-rootless-probe >/dev/null 2>&1 || true

echo "== podman system service as $user on $sock"
rm -f "$sock"
mkdir -p "$(dirname "$sock")"; chown "$uid:$gid" "$(dirname "$sock")"; chmod 0700 "$(dirname "$sock")"
# setpriv execs podman itself: the pid written is the service's.
setsid setpriv --reuid="$uid" --regid="$gid" --init-groups \
  env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME="$home" USER="$user" LOGNAME="$user" XDG_RUNTIME_DIR="$run_dir" \
  podman system service --time=0 "unix://$sock" >/tmp/wharf-ci-podman-rootless.log 2>&1 &
echo $! >"$run_dir/wharf-ci-service.pid"
for _ in $(seq 1 100); do
  curl -sf --unix-socket "$sock" http://podman/_ping >/dev/null 2>&1 && break
  sleep 0.1
done
# Podman's own /info (its compatible one does not say rootless in 4.3.1).
curl -sf --unix-socket "$sock" http://podman/v4.0.0/libpod/info | grep -q '"rootless":true' || {
  echo "the service on $sock does not answer as a rootless engine"; tail -50 /tmp/wharf-ci-podman-rootless.log; exit 1; }

echo "== the smoke test (cgroup $(stat -fc %T /sys/fs/cgroup): on v1 the test accepts docker.rootless_cgroup_v1_accepted)"
# -v, so that the log shows the test ran (PASS), not skipped.
rc=0
DOCKER_HOST="unix://$sock" WHARF_TEST_ENGINE=podman WHARF_REQUIRE_DOCKER=1 WHARF_TEST_ROOTLESS_USER="$user" \
  go test -p 1 -count=1 -timeout 4m -v -run '^TestRootlessPodmanSmoke$' ./internal/e2e/ >/tmp/wharf-ci-rootless-test.log 2>&1 || rc=$?
grep -E -- '^(--- |ok|FAIL|PASS)|_test\.go:[0-9]+:' /tmp/wharf-ci-rootless-test.log || true
if [ "$rc" -ne 0 ] || ! grep -q -- '^--- PASS: TestRootlessPodmanSmoke' /tmp/wharf-ci-rootless-test.log; then
  echo "the rootless smoke test failed or did not run (/tmp/wharf-ci-rootless-test.log); the engine's log:"
  tail -30 /tmp/wharf-ci-podman-rootless.log; exit 1
fi

echo "== rootless Podman job done in $(( $(date +%s) - start )) s"
