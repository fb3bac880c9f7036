//go:build linux

// Command ioctlprobe tries, inside a container, the system calls the quota
// seccomp rule is about and prints one line per call: "NAME ok" or
// "NAME errno=<number>". The Docker tests run it (compiled statically,
// bind-mounted into a busybox container) and read the lines.
//
//	ioctlprobe FILE
//
// FILE must be on a file system that supports the fsxattr ioctls (ext4,
// XFS; not tmpfs) and owned by the caller.
package main

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// fsxattr is struct fsxattr of linux/fs.h (28 bytes).
type fsxattr struct {
	Xflags     uint32
	Extsize    uint32
	Nextents   uint32
	Projid     uint32
	Cowextsize uint32
	Pad        [8]byte
}

const (
	fsIocFsgetxattr = 0x801c581f
	fsIocFssetxattr = 0x401c5820
	fsIocGetflags   = 0x80086601
	fsIocSetflags   = 0x40086602
	fionread        = 0x541b // TIOCINQ on x86 and arm
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: ioctlprobe FILE")
		os.Exit(2)
	}
	f, err := os.OpenFile(os.Args[1], os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fd := f.Fd()

	// Reading the attributes is harmless and stays allowed; writing them
	// back unchanged is what a process would do with a new project id.
	var fa fsxattr
	report("FSGETXATTR", ioctl(fd, fsIocFsgetxattr, unsafe.Pointer(&fa)))
	report("FSSETXATTR", ioctl(fd, fsIocFssetxattr, unsafe.Pointer(&fa)))
	// The kernel reads the request as 32 bits: the upper ones must not
	// get a caller past the rule.
	report("FSSETXATTR_HIGHBITS", ioctl(fd, 1<<32|fsIocFssetxattr, unsafe.Pointer(&fa)))
	var flags int64
	report("GETFLAGS", ioctl(fd, fsIocGetflags, unsafe.Pointer(&flags)))
	report("SETFLAGS", ioctl(fd, fsIocSetflags, unsafe.Pointer(&flags)))

	// An ordinary ioctl on a pipe.
	var p [2]int
	if err := unix.Pipe(p[:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var n int32
	report("FIONREAD", ioctl(uintptr(p[0]), fionread, unsafe.Pointer(&n)))

	// What Docker's default profile refuses without CAP_SYS_ADMIN.
	report("UNSHARE", unix.Unshare(unix.CLONE_NEWNS|unix.CLONE_NEWUSER))
}

func ioctl(fd, req uintptr, arg unsafe.Pointer) error {
	_, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, req, uintptr(arg))
	if e != 0 {
		return e
	}
	return nil
}

func report(name string, err error) {
	if err == nil {
		fmt.Println(name, "ok")
		return
	}
	if e, ok := err.(syscall.Errno); ok {
		fmt.Printf("%s errno=%d\n", name, int(e))
		return
	}
	fmt.Println(name, err)
}
