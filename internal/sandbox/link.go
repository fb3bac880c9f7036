package sandbox

// Link makes newname a hard link to the regular file oldname; both names
// are inside the root and resolved there (a link in the way of a parent is
// never followed out), the last name of oldname is never followed, and
// newname must not exist. Denied names are refused on both sides. A hard
// link allocates no block, so it is not charged against the disk limit
// (the file is counted once, see accounting.go); but none is made when the
// limit is negative (writes refused). It exists for the extraction of
// archives (issue 33, item 6): a user cannot make one through Wharf.
func (f *FS) Link(oldname, newname string) error {
	const op = "link"
	oldRel, err := f.allowed(op, oldname)
	if err != nil {
		return err
	}
	newRel, err := f.allowed(op, newname)
	if err != nil {
		return err
	}
	if oldRel == "." || newRel == "." {
		return newErr(op, newRel, ErrInvalid)
	}
	fi, err := f.s.root.Lstat(oldRel)
	if err != nil {
		return wrap(op, oldRel, err)
	}
	if !fi.Mode().IsRegular() {
		return newErr(op, oldRel, ErrInvalid)
	}
	if f.s.limit.Load() < 0 {
		return newErr(op, newRel, ErrNoSpace)
	}
	return wrap(op, newRel, f.s.root.Link(oldRel, newRel))
}
