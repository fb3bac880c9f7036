package archive

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// FuzzTruncatingRestore checks the truncating restore by Prune against
// the plain one (the directory emptied, then extracted), whatever the tar
// stream holds: ListNames never panics and holds what it is bounded to;
// pruning and extracting changes nothing outside the root; and when both
// extractions succeed they leave the same entries (names, types, link
// targets, file contents and modes) from a root that held links out of it,
// a FIFO, a file with two names and a directory where the archive may put
// a file.
func FuzzTruncatingRestore(f *testing.F) {
	for _, s := range seedArchives(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) > 256<<10 {
			return // two extractions per input: kept small to stay fast
		}
		data := gzipBytes(t, raw)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()

		plain := newPruneWorld(t)
		fsys := newFS(t, plain.root)
		if err := fsys.RemoveAll(ctx, "."); err != nil {
			t.Fatal(err)
		}
		_, plainErr := Extract(ctx, bytes.NewReader(data), fsys, ExtractOptions{TempDir: plain.tmp})

		w := newPruneWorld(t)
		before := w.outsideState(t)
		names, err := ListNames(ctx, bytes.NewReader(data), ExtractOptions{})
		if err != nil {
			return
		}
		if names != nil && len(names.kinds) > maxNames {
			t.Fatalf("%d names held", len(names.kinds))
		}
		fsys = newFS(t, w.root)
		if names == nil {
			err = fsys.RemoveAll(ctx, ".")
		} else {
			err = Prune(ctx, fsys, names)
		}
		if err != nil {
			t.Fatalf("prune: %v", err)
		}
		_, pruneErr := Extract(ctx, bytes.NewReader(data), fsys, ExtractOptions{TempDir: w.tmp})
		if diff := cmp.Diff(before, w.outsideState(t)); diff != "" {
			t.Fatalf("the restore changed something outside the root:\n%s", diff)
		}
		if plainErr != nil || pruneErr != nil {
			return
		}
		if diff := cmp.Diff(restoredEntries(t, plain.root), restoredEntries(t, w.root)); diff != "" {
			t.Fatalf("the pruned restore differs from the plain one (-plain +pruned):\n%s", diff)
		}
	})
}

// newPruneWorld is a fuzz world whose root also holds what a game may
// leave: a FIFO, a file with two names, a directory.
func newPruneWorld(t *testing.T) *fuzzWorld {
	w := newFuzzWorld(t)
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(syscall.Mkfifo(filepath.Join(w.root, "a"), 0o644))
	must(os.Link(filepath.Join(w.root, "server.properties"), filepath.Join(w.root, "b")))
	must(os.MkdirAll(filepath.Join(w.root, "d", "e"), 0o755))
	must(os.WriteFile(filepath.Join(w.root, "d", "e", "f"), []byte("old"), 0o644))
	return w
}

// restoredEntries describes the entries below root without opening
// anything but regular files: type, file mode and content, link target.
// Directories' modes and times are left out: a directory the archive only
// implies (a parent of its entries, without an entry of its own) keeps
// them when it is kept.
func restoredEntries(t *testing.T, root string) map[string]string {
	t.Helper()
	types := entryTypes(t, root)
	out := map[string]string{}
	for rel, typ := range types {
		p := filepath.Join(root, rel)
		switch {
		case typ.IsDir():
			out[rel] = "dir"
		case typ&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out[rel] = "link " + target
		case typ.IsRegular():
			fi, err := os.Lstat(p)
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			out[rel] = fi.Mode().String() + " " + string(b)
		default:
			out[rel] = typ.String()
		}
	}
	return out
}
