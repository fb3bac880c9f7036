package sandbox

import (
	"io/fs"
	"sync/atomic"
	"syscall"
)

// knownUmask is the process's umask plus one when SetUmask set it, 0 when
// unknown: only then can a new entry's mode be trusted without a chmod.
var knownUmask atomic.Int32

// SetUmask sets the process's umask to mask and lets the sandbox rely on
// it: a file or directory whose mode mask does not narrow is created with
// that mode and not chmodded again (one syscall less per entry, four per
// directory). For processes that own their umask, such as the decompress
// child; nothing else may change the umask afterwards.
func SetUmask(mask fs.FileMode) {
	syscall.Umask(int(mask & fs.ModePerm))
	knownUmask.Store(int32(mask&fs.ModePerm) + 1)
}

// umaskKept says whether the umask leaves every bit of perm: the mode given
// at creation is then the entry's, and no chmod is needed.
func umaskKept(perm fs.FileMode) bool {
	k := knownUmask.Load()
	return k != 0 && perm&fs.FileMode(k-1) == 0
}
