package transfer

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/wharf/wharf/internal/sandbox"
	"github.com/wharf/wharf/internal/testutil/tree"
)

const testRepoID = "0123456789abcdef0123456789abcdef"

// manifestArena is a source tree, a copy of it as a snapshot holds it
// (times cut to the second, as in the tar stream), and the sender seeded
// with the copy's regular files.
type manifestArena struct {
	src, snap string
	ls        *liveSender
	acks      *int // the target's "restored" answers
}

func newManifestArena(t *testing.T) manifestArena {
	t.Helper()
	src := t.TempDir()
	for rel, size := range map[string]int{"keep.bin": 256 << 10, "sub/change.bin": 64 << 10, "sub/gone.bin": 32 << 10, "sub/deep/x.bin": 16 << 10, "old/only.bin": 8 << 10} {
		b := make([]byte, size)
		_, _ = rand.Read(b)
		must(t, os.MkdirAll(filepath.Dir(filepath.Join(src, rel)), 0o755))
		must(t, os.WriteFile(filepath.Join(src, rel), b, 0o640))
		old := time.Now().Add(-time.Hour).Add(123456789)
		must(t, os.Chtimes(filepath.Join(src, rel), old, old))
	}
	must(t, os.WriteFile(filepath.Join(src, "empty"), nil, 0o644))
	must(t, os.Symlink("keep.bin", filepath.Join(src, "ln")))
	snap := filepath.Join(t.TempDir(), "snap")
	if out, err := exec.Command("cp", "-a", src, snap).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	must(t, filepath.WalkDir(snap, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink != 0 {
			return err
		}
		fi, err := d.Info()
		if err == nil {
			mt := fi.ModTime().Truncate(time.Second)
			err = os.Chtimes(p, mt, mt)
		}
		return err
	}))
	ls := newLiveSender(context.Background(), tree.Open(t, src), liveManifestVersion, "")
	ls.snap = &liveSnapshot{repo: testRepoID, name: "transfer-" + uuid.NewString()}
	for _, rel := range []string{"keep.bin", "old/only.bin", "sub/change.bin", "sub/deep/x.bin", "sub/gone.bin"} {
		fi, err := os.Lstat(filepath.Join(src, rel))
		must(t, err)
		ctime, ino := statTimes(fi)
		ls.index[rel] = &liveEntry{kind: 'f', mode: fi.Mode().Perm(), mtime: fi.ModTime().UnixNano(), ctime: ctime, ino: ino, size: fi.Size()}
		ls.snap.seeds = append(ls.snap.seeds, rel)
	}
	return manifestArena{src: src, snap: snap, ls: ls, acks: new(int)}
}

// encode is what livePasses sends for a snapshot: the snapshot and seed
// records, a first pass of what the index lacks, the final pass and the
// manifest.
func (m manifestArena) encode(t *testing.T) []byte {
	t.Helper()
	cw, err := newChunkWriter("none", nil)
	must(t, err)
	var buf bytes.Buffer
	sent := make(chan error, 1)
	go func() { _, err := cw.WriteTo(&buf); sent <- err }()
	ls := m.ls
	ls.rw, ls.cw = &recWriter{w: cw}, cw
	err = func() error {
		if err := ls.sendSnapshot(); err != nil {
			return err
		}
		for pass, phase := range []byte{phaseOnline, phaseFinal} {
			tr, err := ls.scan()
			if err != nil {
				return err
			}
			if err := ls.send(tr, pass+1, phase); err != nil {
				return err
			}
		}
		return ls.manifest()
	}()
	if cerr := cw.Close(); err == nil {
		err = cerr
	}
	if serr := <-sent; err == nil {
		err = serr
	}
	must(t, err)
	return buf.Bytes()
}

// apply runs the target's side with a restore that copies the snapshot.
func (m manifestArena) apply(t *testing.T, ar arena, stream []byte, version int) (*applier, error) {
	t.Helper()
	cr, err := newChunkReader(bytes.NewReader(stream))
	must(t, err)
	defer cr.Close()
	dst, err := sandbox.New(ar.root, sandbox.Options{UID: -1, GID: -1})
	must(t, err)
	defer dst.Close()
	a := &applier{ctx: context.Background(), dst: dst.Trusted(), r: recReader{cr}, h: newContentHash(), maxWrite: 64 << 10,
		sums: map[pathKey]fileSum{}, log: func(uint64, byte) {}, v4: true, v5: version >= liveManifestVersion, maxLinks: maxHardLinks,
		restored: func() { *m.acks++ },
		restore: func(ctx context.Context, repo, name string) error {
			if repo != testRepoID || name != m.ls.snap.name {
				return errors.New("another snapshot")
			}
			out, err := exec.Command("cp", "-a", m.snap+"/.", ar.root).CombinedOutput()
			if err != nil {
				return errors.New(string(out))
			}
			return nil
		}}
	return a, a.run()
}

// A live transfer by manifest sends only what the snapshot lacks or what
// changed since (a changed file, a new one, an empty one and a link; a
// removal): the target ends with the source's tree exactly, the seeded
// files' times to the nanosecond, and what the snapshot held that the
// source removed is gone.
func TestLiveManifestSendsOnlyTheChanges(t *testing.T) {
	m := newManifestArena(t)
	b := make([]byte, 64<<10)
	_, _ = rand.Read(b)
	must(t, os.WriteFile(filepath.Join(m.src, "sub/change.bin"), b, 0o640))
	must(t, os.Remove(filepath.Join(m.src, "sub/gone.bin")))
	must(t, os.RemoveAll(filepath.Join(m.src, "old")))
	must(t, os.WriteFile(filepath.Join(m.src, "new.txt"), []byte("new"), 0o600))

	ar := newArena(t)
	// Left by an earlier attempt: emptied before the snapshot is restored.
	must(t, os.WriteFile(filepath.Join(ar.root, "stale"), []byte("x"), 0o644))
	a, err := m.apply(t, ar, m.encode(t), liveManifestVersion)
	if err != nil {
		t.Fatal(err)
	}
	// The changed and the new file, again in the final pass when they
	// were written less than racyWindow before the first pass read them.
	if got, want := m.ls.sent.Load(), int64(64<<10+3); got != want && got != 2*want {
		t.Errorf("file bytes sent %d, want %d or twice that (the changed file and the new one only)", got, want)
	}
	if *m.acks != 1 {
		t.Errorf("the target said %d times that it restored the snapshot, want once", *m.acks)
	}
	if a.seededFiles != 5 {
		t.Errorf("seeded files %d, want 5", a.seededFiles)
	}
	want, err := tree.Snapshot(m.src)
	must(t, err)
	got, err := tree.Snapshot(ar.root)
	must(t, err)
	if d := tree.Diff(want, got); d != "" {
		t.Fatalf("target differs from the source: %s", d)
	}
	for _, rel := range []string{"keep.bin", "sub/deep/x.bin"} {
		s, err1 := os.Stat(filepath.Join(m.src, rel))
		d, err2 := os.Stat(filepath.Join(ar.root, rel))
		must(t, errors.Join(err1, err2))
		if !s.ModTime().Equal(d.ModTime()) || s.ModTime().Nanosecond() == 0 {
			t.Errorf("%s: time %v on the target, %v on the source", rel, d.ModTime(), s.ModTime())
		}
	}
	ar.checkOutside(t)
}

// Hostile or inconsistent streams fail cleanly: a snapshot record in a
// stream of version 4, after the first pass, twice, or naming no valid
// snapshot; a seed that the snapshot does not hold; a seed after the
// first pass; a file record among the seeds; a node without a
// repository.
func TestLiveManifestRefusesBadStreams(t *testing.T) {
	name := "transfer-" + uuid.NewString()
	snapRec := func(w *wire) *wire { return w.rec(recSnapshot, testRepoID, name) }
	for _, tc := range []struct {
		name    string
		stream  []byte
		version int
		want    error
	}{
		{"snapshot in version 4", snapRec(newWire()).pass(1, phaseOnline).stream(), 4, errBadStream},
		{"snapshot after a pass", snapRec(newWire().pass(1, phaseOnline)).stream(), 5, errBadStream},
		{"snapshot twice", snapRec(snapRec(newWire())).stream(), 5, errBadStream},
		{"bad repository id", newWire().rec(recSnapshot, "../x", name).stream(), 5, errBadStream},
		{"bad snapshot name", newWire().rec(recSnapshot, testRepoID, "backup-1").stream(), 5, errBadStream},
		{"seed without snapshot", newWire().rec(recSeed, "keep.bin", uint64(0o644), int64(0), uint64(1)).stream(), 5, errBadStream},
		{"seed not in the snapshot", snapRec(newWire()).rec(recSeed, "nothere", uint64(0o644), int64(0), uint64(1)).stream(), 5, ErrManifestMismatch},
		{"seed of another size", snapRec(newWire()).rec(recSeed, "keep.bin", uint64(0o644), int64(0), uint64(1)).stream(), 5, ErrManifestMismatch},
		{"seed of a directory", snapRec(newWire()).rec(recSeed, "sub", uint64(0o644), int64(0), uint64(0)).stream(), 5, ErrManifestMismatch},
		{"seed escaping", snapRec(newWire()).rec(recSeed, "../outside/canary", uint64(0o644), int64(0), uint64(9)).stream(), 5, errBadStream},
		{"seed after a pass", snapRec(newWire()).pass(1, phaseOnline).rec(recSeed, "keep.bin", uint64(0o644), int64(0), uint64(256<<10)).stream(), 5, errBadStream},
		{"file among the seeds", snapRec(newWire()).file("f", "x").stream(), 5, errBadStream},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newManifestArena(t)
			m.ls.snap.name = name
			ar := newArena(t)
			_, err := m.apply(t, ar, tc.stream, tc.version)
			if !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
			ar.checkOutside(t)
		})
	}
	// A target without a repository refuses the snapshot record.
	ar := newArena(t)
	cr, err := newChunkReader(bytes.NewReader(snapRec(newWire()).stream()))
	must(t, err)
	defer cr.Close()
	a := &applier{ctx: context.Background(), dst: tree.Open(t, ar.root), r: recReader{cr}, h: newContentHash(),
		sums: map[pathKey]fileSum{}, log: func(uint64, byte) {}, v4: true, v5: true}
	if err := a.run(); !errors.Is(err, errBadStream) {
		t.Fatalf("no repository: %v", err)
	}
	if !strings.Contains(errBadStream.Error(), "live transfer") {
		t.Fatal(errBadStream)
	}
}
