// Package quotatest mounts a small ext4 image with project quotas for
// tests of kernel-enforced disk limits.
package quotatest

import (
	"bufio"
	"compress/gzip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Mount makes a 64 MiB ext4 image with project quotas, attaches it to a
// loop device and mounts it on a new directory, with the mount options
// given (for example "prjquota"); it returns the mount point. The test is
// skipped, saying why, when it does not run as root or the host has no
// mkfs.ext4, losetup or free loop device. Cleanup unmounts the image and
// detaches the loop device, whatever the test did.
func Mount(t testing.TB, options string) string {
	t.Helper()
	if reason := kernelLacksQuota(); reason != "" {
		t.Skip(reason)
	}
	return mount(t, []string{"-O", "quota,project", "-E", "quotatype=prjquota"}, options)
}

// MountPlain is Mount for an ext4 made without the quota features, which
// every kernel with ext4 mounts.
func MountPlain(t testing.TB) string {
	t.Helper()
	return mount(t, nil, "")
}

func mount(t testing.TB, features []string, options string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("quota tests mount a loop device: they need root")
	}
	for _, tool := range []string{"mkfs.ext4", "losetup", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("quota tests need %s (e2fsprogs, util-linux): %v", tool, err)
		}
	}
	dir := t.TempDir()
	// The game's user (not root) must reach the mount.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	img := filepath.Join(dir, "fs.img")
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "truncate", "-s", "64M", img)
	run(t, "mkfs.ext4", append(append([]string{"-q", "-F"}, features...), img)...)
	out, err := exec.Command("losetup", "--find", "--show", img).CombinedOutput()
	if err != nil {
		t.Skipf("no loop device available: losetup: %v: %s", err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { detach(t, dev) })
	args := []string{dev, mnt}
	if options != "" {
		args = []string{"-o", options, dev, mnt}
	}
	run(t, "mount", args...)
	t.Cleanup(func() { unmount(t, mnt) })
	return mnt
}

func unmount(t testing.TB, mnt string) {
	if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
		t.Errorf("umount %s: %v: %s", mnt, err, out)
		if out, err := exec.Command("umount", "-l", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount -l %s: %v: %s", mnt, err, out)
		}
	}
}

func detach(t testing.TB, dev string) {
	if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
		t.Errorf("losetup -d %s: %v: %s", dev, err, out)
	}
}

func run(t testing.TB, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}

// kernelLacksQuota says why the running kernel cannot mount an ext4 with
// the quota feature, when its configuration (/proc/config.gz) shows it was
// built without a quota format; "" when it can or nothing tells.
func kernelLacksQuota() string {
	f, err := os.Open("/proc/config.gz")
	if err != nil {
		return ""
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return ""
	}
	lines := bufio.NewScanner(z)
	for lines.Scan() {
		switch lines.Text() {
		case "CONFIG_QFMT_V2=y", "CONFIG_QFMT_V2=m":
			return ""
		}
	}
	return "this kernel cannot enforce ext4 quotas (built without CONFIG_QFMT_V2, per /proc/config.gz): " +
		"run internal/quota/quotatest/run-in-vm.sh to test on one that can"
}
