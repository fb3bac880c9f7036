package archive

import (
	"github.com/wharf/wharf/internal/sandbox"
)

// newDirStack opens the directory stack of an extraction (see
// sandbox.DirStack): a directory below a link this archive made is
// refused as unsafe, never entered.
func newDirStack(x *extractor) (*sandbox.DirStack, error) {
	st, err := x.dst.NewDirStack()
	if err != nil {
		return nil, err
	}
	st.Check = func(rel string) error {
		if x.links[rel] {
			return x.unsafe(rel)
		}
		return nil
	}
	return st, nil
}
