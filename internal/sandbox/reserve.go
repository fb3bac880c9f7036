package sandbox

// Reserve counts n bytes against the disk limit for writes that another
// process makes to the same root through its own FS (the isolated
// decompress child), so that this FS's other writers cannot use them too:
// ErrNoSpace when they do not fit. Release gives them back; the caller then
// recounts the usage (RefreshUsage) to learn what was really written.
func (f *FS) Reserve(n int64) error {
	if err := f.s.reserve(n); err != nil {
		return newErr("reserve", ".", ErrNoSpace)
	}
	return nil
}

// Release gives back bytes counted by Reserve.
func (f *FS) Release(n int64) { f.s.release(n) }
