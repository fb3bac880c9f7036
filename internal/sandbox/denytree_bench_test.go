package sandbox

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// BenchmarkRenameDirDenylist: rename of a directory of 10,000 files with a
// denylist that makes the ancestor check walk it ("*.key": any depth) and
// with one that rules it out from the patterns alone (an anchored name
// elsewhere), next to no denylist.
func BenchmarkRenameDirDenylist(b *testing.B) {
	root := filepath.Join(b.TempDir(), "root")
	for i := range 10000 {
		p := filepath.Join(root, "data", strconv.Itoa(i%100), strconv.Itoa(i)+".txt")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range []struct {
		name     string
		denylist []string
	}{
		{"none", nil},
		{"fast-path", []string{"config/license.key"}},
		{"walk", []string{"*.key"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			f, err := New(root, Options{UID: -1, GID: -1, Denylist: c.denylist})
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			names := [2]string{"data", "data2"}
			for i := 0; b.Loop(); i++ {
				if err := f.Rename(names[i%2], names[(i+1)%2]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
