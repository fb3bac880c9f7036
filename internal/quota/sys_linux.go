package quota

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// The kernel interfaces used here, which golang.org/x/sys/unix does not
// wrap: the inode attribute ioctls of <linux/fs.h> and quotactl_fd(2)
// (Linux 5.14) with the generic quota commands of <linux/quota.h>. Both
// ext4 and XFS implement them.

// fsxattr is struct fsxattr.
type fsxattr struct {
	xflags     uint32
	extsize    uint32
	nextents   uint32
	projid     uint32
	cowextsize uint32
	pad        [8]byte
}

const (
	// _IOR('X', 31, struct fsxattr) and _IOW('X', 32, struct fsxattr) in
	// the ioctl encoding of x86, arm and riscv (the architectures Wharf
	// ships for).
	fsIocFsgetxattr = 2<<30 | uint(unsafe.Sizeof(fsxattr{}))<<16 | 'X'<<8 | 31
	fsIocFssetxattr = 1<<30 | uint(unsafe.Sizeof(fsxattr{}))<<16 | 'X'<<8 | 32

	// fsXflagProjinherit makes new entries of a directory take its project.
	fsXflagProjinherit = 0x200
)

// ifDqblk is struct if_dqblk: space in bytes, limits in 1 KiB blocks.
type ifDqblk struct {
	bhardlimit uint64
	bsoftlimit uint64
	curspace   uint64
	ihardlimit uint64
	isoftlimit uint64
	curinodes  uint64
	btime      uint64
	itime      uint64
	valid      uint32
	_          uint32
}

const (
	prjquota = 2

	qGetquota = 0x800007
	qSetquota = 0x800008
	// qXGetqstat is Q_XGETQSTAT, whose flags tell whether project
	// limits are enforced and not only accounted.
	qXGetqstat = 'X'<<8 | 5

	qifBlimits = 1
	qifIlimits = 4
	qifLimits  = qifBlimits | qifIlimits

	// fsQuotaPdqEnfd is FS_QUOTA_PDQ_ENFD in fs_quota_stat.qs_flags.
	fsQuotaPdqEnfd = 1 << 5

	blockSize = 1024 // QIF_DQBLKSIZE
)

func getxattr(fd int) (fsxattr, error) {
	var a fsxattr
	err := ioctl(fd, fsIocFsgetxattr, unsafe.Pointer(&a))
	return a, err
}

func setxattr(fd int, a fsxattr) error {
	return ioctl(fd, fsIocFssetxattr, unsafe.Pointer(&a))
}

func ioctl(fd int, req uint, arg unsafe.Pointer) error {
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(arg))
	if errno != 0 {
		return errno
	}
	return nil
}

// quotactlFD runs a project quota command on the filesystem of fd.
func quotactlFD(fd int, cmd uint32, id uint32, addr unsafe.Pointer) error {
	_, _, errno := unix.Syscall6(unix.SYS_QUOTACTL_FD, uintptr(fd), uintptr(cmd<<8|prjquota), uintptr(id), uintptr(addr), 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

func getProjectQuota(fd int, id uint32) (ifDqblk, error) {
	var q ifDqblk
	err := quotactlFD(fd, qGetquota, id, unsafe.Pointer(&q))
	return q, err
}

func setProjectLimits(fd int, id uint32, hardBlocks uint64) error {
	q := ifDqblk{bhardlimit: hardBlocks, valid: qifLimits}
	return quotactlFD(fd, qSetquota, id, unsafe.Pointer(&q))
}

// projectLimitsEnforced reads fs_quota_stat.qs_flags (a __u16 at offset 2).
func projectLimitsEnforced(fd int) (bool, error) {
	var st [128]byte // struct fs_quota_stat is 80 bytes
	if err := quotactlFD(fd, qXGetqstat, 0, unsafe.Pointer(&st[0])); err != nil {
		return false, err
	}
	flags := uint16(st[2]) | uint16(st[3])<<8
	return flags&fsQuotaPdqEnfd != 0, nil
}
