package sandbox

import "io/fs"

// ReadlinkEntry returns the stored target of the symbolic link d that Walk
// is reporting at rel, read relative to the directory the walk listed it in
// (one readlinkat, whatever the depth: a link deeper than the path limits,
// which the game may make, is still archived). Any other d is read by name
// (Readlink).
func (f *FS) ReadlinkEntry(rel string, d fs.DirEntry) (string, error) {
	e, ok := d.(walkEntry)
	if !ok || e.s != f.s {
		return f.Readlink(rel)
	}
	crel, err := cleanWalked("readlink", rel)
	if err != nil {
		return "", err
	}
	rc, err := e.dirFile.SyscallConn()
	if err != nil {
		return "", wrap("readlink", crel, err)
	}
	var target string
	var rerr error
	if err := rc.Control(func(dfd uintptr) { target, rerr = readlinkat(int(dfd), e.Name()) }); err != nil {
		return "", wrap("readlink", crel, err)
	}
	return target, wrap("readlink", crel, rerr)
}
