package sandbox

// ControlRoot calls fn with the descriptor of the root directory itself
// (for an ioctl on its inode, such as the quota project), so that nobody
// opens the root by its host path outside the sandbox. fn must not keep
// the descriptor.
func (f *FS) ControlRoot(fn func(fd int) error) error {
	rc, err := f.s.rootDir.SyscallConn()
	if err != nil {
		return wrap("open", ".", err)
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return wrap("open", ".", err)
	}
	return ferr
}
