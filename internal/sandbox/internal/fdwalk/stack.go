package fdwalk

// Stack is the one directory stack of the sandbox: the directories from a
// start (levels[0]) down to the current one, each a Level opened by one
// name relative to its parent, never through a link. A walk pushes each
// directory it enters and pops it on its way back up; a writer (an
// extraction, a live stream) keeps the way to the directory it writes in,
// so that an entry costs one system call per new name instead of a walk
// from the root.
//
// However deep the tree, it holds a bounded number of descriptors: the
// first shallow levels and the last deep ones stay open, those between are
// closed (levels[shallow:lo]), their identity kept, and reopened through
// the ".." of their open child when that is still the same directory
// (one system call whatever the depth).
type Stack struct {
	levels        []*Level
	shallow, deep int
	lo            int // levels[shallow:lo] are closed
}

// NewStack makes a stack of start (which it owns from now on) that keeps
// its first shallow levels and its last deep ones open (deep at least 1:
// the current directory).
func NewStack(start *Level, shallow, deep int) *Stack {
	return &Stack{levels: []*Level{start}, shallow: shallow, deep: max(1, deep), lo: shallow}
}

// Len is the number of levels, the start included.
func (s *Stack) Len() int { return len(s.levels) }

// At is level i (0 is the start).
func (s *Stack) At(i int) *Level { return s.levels[i] }

// Top is the current directory.
func (s *Stack) Top() *Level { return s.levels[len(s.levels)-1] }

// Push makes l (opened below the top, which it owns from now on) the top,
// closing the levels that the bounds no longer let stay open. A level
// whose identity was not known is given it as it closes (or none: it is
// then never reopened through "..").
func (s *Stack) Push(l *Level) {
	s.levels = append(s.levels, l)
	for ; s.lo < len(s.levels)-s.deep; s.lo++ {
		old := s.levels[s.lo]
		if !old.known {
			old.id, old.known = Inode{}, false
			if id, err := FdInode(old.fd); err == nil {
				old.id, old.known = id, true
			}
		}
		old.Close()
	}
}

// Pop closes the top and makes its parent, the new top, open again
// (ReopenParent, which may reopen it by name checking every directory on
// the way: ErrMoved when one of them was moved or removed).
func (s *Stack) Pop() error {
	n := len(s.levels)
	var err error
	if up := s.levels[n-2]; up.fd < 0 {
		err = ReopenParent(s.levels[n-1])
		s.lo = n - 2
	}
	s.Drop()
	return err
}

// Drop closes the top and forgets it, leaving its parent as it is.
func (s *Stack) Drop() { s.PopTo(len(s.levels) - 2) }

// PopTo closes the levels above k.
func (s *Stack) PopTo(k int) {
	for i := len(s.levels) - 1; i > k; i-- {
		s.levels[i].Close()
		s.levels[i] = nil
	}
	s.levels = s.levels[:k+1]
	s.lo = max(s.shallow, min(s.lo, k+1))
}

// ReopenAt makes level k open again through the ".." of the levels below
// it, one system call each, while each is still the directory it was;
// false when one of them was moved (the caller then takes another way,
// and may PopTo a level that is open).
func (s *Stack) ReopenAt(k int) bool {
	for s.levels[k].fd < 0 && s.lo > k && s.lo < len(s.levels) {
		if !reopenUp(s.levels[s.lo]) {
			return false
		}
		s.lo--
	}
	return s.levels[k].fd >= 0
}

// Close closes every level.
func (s *Stack) Close() { s.PopTo(0); s.levels[0].Close() }
