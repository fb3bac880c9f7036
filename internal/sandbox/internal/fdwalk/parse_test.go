package fdwalk

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func dirent(name string, typ uint8, pad int) []byte {
	reclen := direntHeader + len(name) + 1 + pad
	b := make([]byte, reclen)
	binary.NativeEndian.PutUint16(b[16:18], uint16(reclen))
	b[18] = typ
	copy(b[direntHeader:], name)
	return b
}

func TestParseDirent(t *testing.T) {
	recs := slices.Concat(dirent(".", 4, 5), dirent("a\nb", 8, 0), dirent("dir", 4, 3))
	var got []string
	for len(recs) > 0 {
		name, typ, n, ok := ParseDirent(recs)
		if !ok {
			t.Fatalf("record refused at %d bytes left", len(recs))
		}
		got = append(got, fmt.Sprintf("%s/%d", name, typ))
		recs = recs[n:]
	}
	if want := []string{"./4", "a\nb/8", "dir/4"}; !slices.Equal(got, want) {
		t.Fatalf("parsed %q, want %q", got, want)
	}
	for _, bad := range [][]byte{nil, make([]byte, 10), dirent("x", 8, 0)[:20], make([]byte, 40)} {
		if _, _, _, ok := ParseDirent(bad); ok {
			t.Fatalf("accepted %x", bad)
		}
	}
}

// The getdents64 records come from the kernel, but their names are the
// server owner's bytes: the parser never reads past its input, always
// advances, and never returns a name with a NUL.
func FuzzParseDirent(f *testing.F) {
	f.Add(slices.Concat(dirent(".", 4, 5), dirent("a\nb", 8, 0)))
	f.Add(dirent(strings.Repeat("n", 255), 8, 7))
	f.Add(make([]byte, 19))
	f.Fuzz(func(t *testing.T, b []byte) {
		for len(b) > 0 {
			name, _, n, ok := ParseDirent(b)
			if !ok {
				return
			}
			if n <= direntHeader || n > len(b) || strings.IndexByte(string(name), 0) >= 0 || len(name) > n-direntHeader {
				t.Fatalf("record of %d bytes, name %q, from %d bytes", n, name, len(b))
			}
			b = b[n:]
		}
	})
}
