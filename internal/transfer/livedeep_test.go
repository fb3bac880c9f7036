package transfer

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/wharf/wharf/internal/sandbox"
)

// openFDs is the number of descriptors the process holds.
func openFDs(t testing.TB) int {
	t.Helper()
	e, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(e)
}

// piecewise gives its pieces one Read each, calling sample before each:
// the applier reads the next records while it is at a known point.
type piecewise struct {
	pieces [][]byte
	sample func()
}

func (p *piecewise) Read(b []byte) (int, error) {
	if len(p.pieces) == 0 {
		return 0, io.EOF
	}
	p.sample()
	n := copy(b, p.pieces[0])
	if p.pieces[0] = p.pieces[0][n:]; len(p.pieces[0]) == 0 {
		p.pieces = p.pieces[1:]
	}
	return n, nil
}

// A live stream of a chain 1,500 levels deep (a directory and a file at
// each level, then the manifest) is applied whole while the target holds
// at most sandbox.MaxHeld directory descriptors and a few for the stream:
// each record is applied from its parent, held open since the previous
// one, never by a walk from the root with a descriptor per level.
func TestLiveTargetAppliesADeepChainWithFewDescriptors(t *testing.T) {
	const depth = 1500
	var chunks [][]byte
	w := newWire()
	man := newWire()
	sum := func(s string) []byte {
		h := newContentHash()
		_, _ = h.Write([]byte(s))
		b := h.Sum128().Bytes()
		return b[:]
	}
	dir, levels := "", []string{}
	for i := range depth {
		dir = strings.TrimPrefix(dir+"/d", "/")
		content := levelContent(i)
		w.rec(recDir, dir, uint64(0o750), int64(0)).file(dir+"/f", content)
		levels = append(levels, dir)
		if i%50 == 49 {
			chunks = append(chunks, frameNone(w.buf.Bytes()))
			w = newWire()
		}
	}
	// The manifest in chunks within maxChunk, after the records, in the
	// wire's order (strictly increasing paths): every directory down the
	// chain, then the files from the deepest up.
	type entry struct {
		rel   string
		level int
	}
	var entries []entry
	for i := range depth {
		entries = append(entries, entry{levels[i], i}, entry{levels[i] + "/f", i})
	}
	slices.SortFunc(entries, func(x, y entry) int { return strings.Compare(x.rel, y.rel) })
	for j, e := range entries {
		if strings.HasSuffix(e.rel, "/f") {
			content := levelContent(e.level)
			man.rec(recManifest, byte('f'), e.rel, uint64(0o644), int64(1e18), uint64(len(content)), sum(content))
		} else {
			man.rec(recManifest, byte('d'), e.rel, uint64(0o750), int64(1e9*e.level), uint64(0))
		}
		if j%100 == 99 {
			chunks = append(chunks, frameNone(man.buf.Bytes()))
			man = newWire()
		}
	}
	man.rec(recEnd, uint64(2*depth))
	chunks = append(chunks, frameNone(man.buf.Bytes()))
	// The magic opens the first chunk.
	first := newWire().pass(1, phaseFinal).rec(recDir, "d", uint64(0o750), int64(0)).stream()
	chunks[0] = append(first[:len(first):len(first)], chunks[0]...)

	ar := newArena(t)
	base := openFDs(t)
	peak, reads := 0, 0
	body := &piecewise{pieces: chunks, sample: func() { peak = max(peak, openFDs(t)); reads++ }}
	if err := ar.applyFrom(t, body); err != nil {
		t.Fatal(err)
	}
	if reads < depth/50 {
		t.Fatalf("sampled %d times, want one per chunk", reads)
	}
	// 64 directories and a few for the stream (a literal, so that
	// raising sandbox.MaxHeld fails here).
	if held := peak - base; held > 72 {
		t.Fatalf("the target held %d descriptors, want at most 72", held)
	}
	checkChain(t, ar.root, depth)
	ar.checkOutside(t)
}

func levelContent(i int) string { return "level " + strings.Repeat("x", i%7) }

// checkChain reads every level's file through a descriptor walk (the host
// path is too long for one open) and checks the directories' modes, which
// the manifest's check applied.
func checkChain(t *testing.T, root string, depth int) {
	t.Helper()
	fsys, err := sandbox.New(root, sandbox.Options{UID: -1, GID: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer fsys.Close()
	st, err := fsys.NewDirStack()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	dir := ""
	for i := range depth {
		parent := dir
		if parent == "" {
			parent = "."
		}
		p, err := st.Enter(parent, false)
		if err != nil {
			t.Fatalf("level %d: %v", i, err)
		}
		if fi, err := p.Lstat("d"); err != nil || fi.Mode() != fs.ModeDir|0o750 {
			t.Fatalf("level %d: %v %v, want a directory of mode 0750", i, fi, err)
		}
		dir = strings.TrimPrefix(dir+"/d", "/")
		d, err := st.Enter(dir, false)
		if err != nil {
			t.Fatalf("level %d: %v", i, err)
		}
		f, err := d.Open("f")
		if err != nil {
			t.Fatalf("level %d: %v", i, err)
		}
		var b bytes.Buffer
		_, err = b.ReadFrom(f)
		_ = f.Close()
		if want := levelContent(i); err != nil || b.String() != want {
			t.Fatalf("level %d: %q %v, want %q", i, b.String(), err, want)
		}
	}
}

// A directory swapped for a link to outside the root between two passes
// (as a server's process may do while the online passes run) is not
// written through: the next record below it opens it by one name without
// following the link, which is replaced by a directory inside the root.
func TestLiveTargetDoesNotWriteThroughADirectorySwappedForALink(t *testing.T) {
	ar := newArena(t)
	w := newWire().pass(1, phaseOnline).
		rec(recDir, "a", uint64(0o755), int64(0)).
		rec(recDir, "a/b", uint64(0o755), int64(0)).
		file("a/b/f1", "one").
		rec(recDir, "a/c", uint64(0o755), int64(0)).
		file("a/c/x", "x").
		pass(2, phaseOnline).
		file("a/b/pwned", "pwned").
		file("a/b/f3", "three")
	cr, err := newChunkReader(bytes.NewReader(w.stream()))
	if err != nil {
		t.Fatal(err)
	}
	defer cr.Close()
	dst, err := sandbox.New(ar.root, sandbox.Options{UID: -1, GID: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	swapped := false
	a := &applier{ctx: context.Background(), dst: dst.Trusted(), r: recReader{cr}, h: newContentHash(), maxWrite: 64 << 10,
		sums: map[pathKey]fileSum{}, log: func(pass uint64, _ byte) {
			if pass != 2 {
				return
			}
			b := filepath.Join(ar.root, "a", "b")
			must(t, os.Rename(b, filepath.Join(ar.root, "moved")))
			must(t, os.Symlink(ar.outside, b))
			swapped = true
		}}
	err = a.run()
	if !swapped {
		t.Fatalf("the second pass never began: %v", err)
	}
	ar.checkOutside(t)
	fi, lerr := os.Lstat(filepath.Join(ar.root, "a", "b"))
	if lerr != nil || !fi.IsDir() {
		t.Fatalf("a/b is %v (%v), want the link replaced by a directory (apply: %v)", fi, lerr, err)
	}
	for _, name := range []string{"pwned", "f3"} {
		if _, err := os.Lstat(filepath.Join(ar.root, "a", "b", name)); err != nil {
			t.Errorf("a/b/%s was not written inside the root: %v", name, err)
		}
	}
}
