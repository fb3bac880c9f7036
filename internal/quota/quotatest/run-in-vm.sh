#!/bin/bash
# Runs the quota package's tests as root in a small KVM guest on a kernel
# that enforces ext4 project quotas (Debian's linux-image-amd64), for hosts
# whose own kernel cannot (built without CONFIG_QFMT_V2: the tests skip
# there and say so). Needs qemu-system-x86 and linux-image-amd64.
#   [PKG=./internal/server] internal/quota/quotatest/run-in-vm.sh [test binary flags, e.g. -test.run X]
set -euo pipefail
cd "$(dirname "$0")/../../.."
kver=$(ls /lib/modules | grep -- '-amd64$' | sort -V | tail -1)
K=/lib/modules/$kver
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/root
mkdir -p "$root"/{bin,sbin,proc,sys,dev,tmp,lib64} "$root/$K"

CGO_ENABLED=0 go test -c -o "$root/quota.test" "${PKG:-./internal/quota/}"

# The tools the tests run, with their libraries; busybox for the shell.
cp /usr/bin/busybox "$root/bin/busybox"
for b in /usr/bin/dd /usr/bin/chown /usr/bin/truncate /usr/sbin/losetup /usr/bin/mount /usr/bin/umount /usr/sbin/mke2fs; do
	cp "$b" "$root/bin/"
	for lib in $(ldd "$b" | grep -o '/[^ ]*'); do
		mkdir -p "$root$(dirname "$lib")"
		cp -n "$lib" "$root$lib"
	done
done
ln -s mke2fs "$root/bin/mkfs.ext4"
# Only the modules the guest loads (and theirs): the whole tree would make
# a 200 MB initramfs that takes longer to pack and to unpack than the tests.
modules="crc32c_generic ext4 loop quota_v2"
cp "$K"/modules.* "$root/$K/"
for ko in $(modprobe -S "$kver" -a --show-depends $modules | awk '$1 == "insmod" {print $2}' | sort -u); do
	mkdir -p "$root$(dirname "$ko")"
	cp "$ko" "$root$ko"
done

cat >"$root/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev; mount -t tmpfs tmp /tmp
ip link set lo up
for m in $(cat /modules); do modprobe $m; done
export PATH=/bin HOME=/tmp TMPDIR=/tmp
/quota.test -test.v -test.count=1 $(cat /args) && echo VM-TESTS-PASS || echo VM-TESTS-FAIL
poweroff -f
INIT
chmod +x "$root/init"
echo "$*" >"$root/args"
echo "$modules" >"$root/modules"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$work/initramfs.gz"
qemu-system-x86_64 -accel tcg -cpu max -m 1024 -smp 2 -nographic -no-reboot \
	-kernel "/boot/vmlinuz-$kver" -initrd "$work/initramfs.gz" \
	-append "console=ttyS0 rdinit=/init panic=-1" | tee "$work/out"
grep -q VM-TESTS-PASS "$work/out"
