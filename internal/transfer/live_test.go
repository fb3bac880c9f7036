package transfer

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/wharf/wharf/internal/testutil/tree"
)

// liveRoundTrip streams src to dst over the wire: pass 1, then change
// (run between the passes), then the final pass and the manifest.
func liveRoundTrip(t *testing.T, src, dst, mode string, change func()) error {
	return liveRoundTripHook(t, src, dst, mode, change, func(uint64, byte) {})
}

func liveRoundTripB(b *testing.B, src, dst, mode string) error {
	return liveRoundTripHook(b, src, dst, mode, func() {}, func(uint64, byte) {})
}

// liveRoundTripHook also calls onPass as the target reads each pass record.
func liveRoundTripHook(t testing.TB, src, dst, mode string, change func(), onPass func(uint64, byte)) error {
	t.Helper()
	ctx := context.Background()
	pr, pw := io.Pipe()
	sender := &liveSender{ctx: ctx, src: tree.Open(t, src), index: map[string]*liveEntry{}, h: newContentHash()}
	done := make(chan error, 1)
	go func() {
		err := func() error {
			cw, err := newChunkWriter(mode, nil)
			if err != nil {
				return err
			}
			go func() { _, _ = cw.WriteTo(pw) }()
			sender.rw, sender.cw = &recWriter{w: cw}, cw
			err = func() error {
				if err := sender.sendAll(1); err != nil {
					return err
				}
				change()
				tr, err := sender.scan()
				if err != nil {
					return err
				}
				if err := sender.send(tr, 2, phaseFinal); err != nil {
					return err
				}
				return sender.manifest()
			}()
			if cerr := cw.Close(); err == nil {
				err = cerr
			}
			return err
		}()
		pw.CloseWithError(err)
		done <- err
	}()
	cr, err := newChunkReader(pr)
	if err != nil {
		t.Fatal(err)
	}
	defer cr.Close()
	a := &applier{ctx: ctx, dst: tree.Open(t, dst), r: recReader{cr}, h: newContentHash(), maxWrite: 64 << 10,
		sums: map[pathKey]fileSum{}, log: onPass}
	aerr := a.run()
	pr.CloseWithError(errors.New("reader done"))
	if serr := <-done; serr != nil && aerr == nil {
		return serr
	}
	return aerr
}

func TestLiveRoundTripAppliesChangesBetweenPasses(t *testing.T) {
	for _, mode := range []string{"none", "zstd", "auto"} {
		t.Run(mode, func(t *testing.T) {
			src, dst := t.TempDir(), t.TempDir()
			if err := tree.Build(src, 3<<20); err != nil {
				t.Fatal(err)
			}
			// The target already holds a stale file: it must go.
			if err := os.WriteFile(filepath.Join(dst, "stale"), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			err := liveRoundTrip(t, src, dst, mode, func() {
				var files []string
				_ = filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
					if err == nil && d.Type().IsRegular() {
						files = append(files, p)
					}
					return nil
				})
				must(t, os.WriteFile(files[0], []byte("changed"), 0o640))
				f, err := os.OpenFile(files[1], os.O_APPEND|os.O_WRONLY, 0)
				must(t, err)
				_, _ = f.WriteString(strings.Repeat("more", 100))
				must(t, f.Close())
				must(t, os.Remove(files[2]))
				must(t, os.Chmod(files[3], 0o700))
				must(t, os.MkdirAll(filepath.Join(src, "new", "deep"), 0o750))
				must(t, os.WriteFile(filepath.Join(src, "new", "deep", "f"), []byte("new"), 0o600))
				must(t, os.Symlink("new/deep/f", filepath.Join(src, "newlink")))
				// A file becomes a directory.
				must(t, os.Remove(files[4]))
				must(t, os.Mkdir(files[4], 0o755))
			})
			if err != nil {
				t.Fatal(err)
			}
			want, _ := tree.Snapshot(src)
			got, _ := tree.Snapshot(dst)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("(-source +target):\n%s", diff)
			}
		})
	}
}

// A file the target holds that the manifest does not list fails the
// final check.
func TestLiveManifestRefusesAnExtraFile(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	if err := tree.Build(src, 1<<20); err != nil {
		t.Fatal(err)
	}
	err := liveRoundTripHook(t, src, dst, "none", func() {}, func(_ uint64, phase byte) {
		if phase == phaseFinal { // written behind the stream's back on the target
			must(t, os.WriteFile(filepath.Join(dst, "intruder"), []byte("x"), 0o644))
		}
	})
	if !errors.Is(err, ErrManifestMismatch) {
		t.Fatalf("got %v, want a manifest mismatch", err)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
