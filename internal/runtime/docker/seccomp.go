package docker

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// The ioctl requests that would let a container's process take its files out
// of the server's project quota. In the init user namespace the owner of a
// file may change its project id (FS_IOC_FSSETXATTR, also XFS_IOC_FSSETXATTR)
// and clear the inherit flag of a directory, after which new files in it
// get project 0 (FS_IOC_FSSETXATTR, or FS_IOC_SETFLAGS without
// FS_PROJINHERIT_FL: ext4 and XFS both map that flag). Values in the generic
// ioctl encoding (x86, arm, arm64, riscv, s390, loongarch).
var quotaIoctls = []uint32{
	0x401c5820, // FS_IOC_FSSETXATTR: _IOW('X', 32, struct fsxattr)
	0x40086602, // FS_IOC_SETFLAGS: _IOW('f', 2, long)
	0x40046602, // FS_IOC32_SETFLAGS: _IOW('f', 2, int), 32-bit processes
}

// quotaSeccompProfile is Docker's default seccomp profile (moby's own
// generator, so that its allow list stays the engine's) in which ioctl is
// allowed for every request but quotaIoctls, which fail with EPERM. Docker
// uses a profile passed with a container instead of its default, hence the
// whole profile and not just the one rule.
var quotaSeccompProfile = sync.OnceValues(func() (string, error) {
	p, err := withoutIoctls(seccomp.DefaultProfile(), quotaIoctls)
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(p)
	return string(b), err
})

// withoutIoctls turns p's unconditional ioctl allow into allow rules for
// every request but blocked, and adds an EPERM rule for those. An
// unconditional allow cannot stay next to the EPERM rule: libseccomp keeps
// the unconditional rule of a syscall and drops conditional ones.
func withoutIoctls(p *seccomp.Seccomp, blocked []uint32) (*seccomp.Seccomp, error) {
	found := 0
	for _, s := range p.Syscalls {
		if s.Action != specs.ActAllow || len(s.Args) > 0 || s.Includes != nil || s.Excludes != nil {
			continue
		}
		if i := slices.Index(s.Names, "ioctl"); i >= 0 {
			s.Names = slices.Delete(s.Names, i, i+1)
			found++
		}
	}
	if found != 1 {
		return nil, fmt.Errorf("seccomp: the default profile has %d unconditional ioctl rules, want 1", found)
	}
	for _, arg := range allowAllBut(blocked) {
		p.Syscalls = append(p.Syscalls, &seccomp.Syscall{LinuxSyscall: specs.LinuxSyscall{
			Names: []string{"ioctl"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{arg},
		}})
	}
	eperm := uint(unix.EPERM)
	for _, req := range blocked {
		p.Syscalls = append(p.Syscalls, &seccomp.Syscall{
			LinuxSyscall: specs.LinuxSyscall{
				Names: []string{"ioctl"}, Action: specs.ActErrno, ErrnoRet: &eperm,
				Args: []specs.LinuxSeccompArg{maskedEq(0xffffffff, req)},
			},
			Comment: "a process must not leave its project quota",
		})
	}
	return p, nil
}

// allowAllBut returns conditions on ioctl's request argument, one per rule
// (rules are ORed), that together match every request except blocked ones.
// Only the low 32 bits are compared, as the kernel reads the request as an
// unsigned int: a "not equal" rule would let a caller through by setting
// an upper bit. There is no masked "not equal", so the complement is built
// from masked equalities on the prefixes of the blocked values (a binary
// trie): every prefix that no blocked value shares is allowed whole.
func allowAllBut(blocked []uint32) []specs.LinuxSeccompArg {
	var out []specs.LinuxSeccompArg
	var walk func(bit int, mask, prefix uint32, set []uint32)
	walk = func(bit int, mask, prefix uint32, set []uint32) {
		if len(set) == 0 {
			out = append(out, maskedEq(mask, prefix))
			return
		}
		if bit < 0 {
			return // a blocked value itself
		}
		b := uint32(1) << bit
		var zeros, ones []uint32
		for _, v := range set {
			if v&b == 0 {
				zeros = append(zeros, v)
			} else {
				ones = append(ones, v)
			}
		}
		walk(bit-1, mask|b, prefix, zeros)
		walk(bit-1, mask|b, prefix|b, ones)
	}
	walk(31, 0, 0, blocked)
	return out
}

// maskedEq is "request & mask == value". runc hands Value to libseccomp as
// the mask and ValueTwo as the datum.
func maskedEq(mask, value uint32) specs.LinuxSeccompArg {
	return specs.LinuxSeccompArg{Index: 1, Value: uint64(mask), ValueTwo: uint64(value), Op: specs.OpMaskedEqual}
}
