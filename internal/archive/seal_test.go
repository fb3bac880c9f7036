package archive

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// bareAndSealed writes the tree at root as the repository stores it (no
// integrity entry, uncompressed) and as an archive backup has it.
func bareAndSealed(t *testing.T, root string) (bare, sealed []byte) {
	t.Helper()
	nop := func(w io.Writer) (io.WriteCloser, error) { return nopWriteCloser{w}, nil }
	bare, _ = writeArchive(t, newFS(t, root), WriteOptions{TreeTrailer: true, Compress: nop})
	sealed, _ = writeArchive(t, newFS(t, root), WriteOptions{TreeTrailer: true, Manifest: true, Compress: nop})
	return bare, sealed
}

type tarEntry struct {
	Trailer bool
	Name    string
	Type    byte
	Mode    int64
	ModTime time.Time
	Link    string
	Body    string
}

// tarEntries lists both streams of an uncompressed backup-layout stream.
func tarEntries(t *testing.T, data []byte) []tarEntry {
	t.Helper()
	rd := newStreamReader(bytes.NewReader(data))
	var out []tarEntry
	for {
		h, err := rd.next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(rd.tr)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tarEntry{rd.trailer, h.Name, h.Typeflag, h.Mode, h.ModTime, h.Linkname, string(body)})
	}
}

// TestSealMakesWhatWriteMakes: a bare stream sealed has the entries, in
// the same streams and order, and the same integrity entry as the archive
// Write makes of the same tree with one; a root file named like the
// integrity entry is left out of both, and the sealed stream extracts
// verified.
func TestSealMakesWhatWriteMakes(t *testing.T) {
	root := t.TempDir()
	buildTree(t, root)
	long := filepath.Join(root, strings.Repeat("deep-directory-name/", 8), "file-with-a-long-name.txt")
	os.MkdirAll(filepath.Dir(long), 0o755)
	os.WriteFile(long, []byte("long"), 0o600)
	os.WriteFile(filepath.Join(root, ManifestName), []byte("a user's file"), 0o644)
	bare, want := bareAndSealed(t, root)
	if !strings.Contains(string(bare), "a user's file") {
		t.Fatal("the bare stream left out the user's file named " + ManifestName)
	}
	mt := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	var got bytes.Buffer
	if err := Seal(context.Background(), &got, bytes.NewReader(bare), SealOptions{TempDir: t.TempDir(), ModTime: mt}); err != nil {
		t.Fatal(err)
	}
	we, ge := tarEntries(t, want), tarEntries(t, got.Bytes())
	last := len(ge) - 1
	if last < 0 || ge[last].Name != ManifestName || !ge[last].Trailer || !ge[last].ModTime.Equal(mt) {
		t.Fatalf("sealed stream ends with %+v, want the integrity entry at %v", ge[max(last, 0)], mt)
	}
	ge[last].ModTime = we[len(we)-1].ModTime
	if d := cmp.Diff(we, ge); d != "" {
		t.Fatalf("sealed stream differs from Write's (-want +got):\n%s", d)
	}
	out := t.TempDir()
	res, err := Extract(context.Background(), bytes.NewReader(got.Bytes()), newFS(t, out), ExtractOptions{Plain: true})
	if err != nil || !res.Verified {
		t.Fatalf("extract of the sealed stream: %v, verified %v", err, res.Verified)
	}
	os.Remove(filepath.Join(root, ManifestName))
	if d := cmp.Diff(snapshot(t, root), snapshot(t, out)); d != "" {
		t.Fatalf("extracted tree differs (-want +got):\n%s", d)
	}
}

// TestExtractPlainBareStream: the repository's restore reads the bare
// stream as it is: every file back, a root file named like the integrity
// entry included, nothing hashed.
func TestExtractPlainBareStream(t *testing.T) {
	root := t.TempDir()
	buildTree(t, root)
	os.WriteFile(filepath.Join(root, ManifestName), []byte("a user's file"), 0o644)
	bare, _ := bareAndSealed(t, root)
	out := t.TempDir()
	res, err := Extract(context.Background(), bytes.NewReader(bare), newFS(t, out), ExtractOptions{Plain: true, NoManifest: true})
	if err != nil || res.Verified {
		t.Fatalf("extract: %v, verified %v (want unverified)", err, res.Verified)
	}
	if d := cmp.Diff(snapshot(t, root), snapshot(t, out)); d != "" {
		t.Fatalf("extracted tree differs (-want +got):\n%s", d)
	}
}

func TestSealRefusesASealedOrBrokenStream(t *testing.T) {
	root := t.TempDir()
	buildTree(t, root)
	bare, sealed := bareAndSealed(t, root)
	ctx := context.Background()
	if err := Seal(ctx, io.Discard, bytes.NewReader(sealed), SealOptions{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("sealing a sealed stream: %v, want ErrCorrupt", err)
	}
	if err := Seal(ctx, io.Discard, bytes.NewReader(bare[:len(bare)/2]), SealOptions{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("sealing half a stream: %v, want ErrCorrupt", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := Seal(cctx, io.Discard, bytes.NewReader(bare), SealOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("sealing after cancel: %v", err)
	}
}

// FuzzSeal: whatever the stored stream holds, Seal ends with an error or
// a stream whose every entry reads back, and never panics.
func FuzzSeal(f *testing.F) {
	for _, s := range seedArchives(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) > 1<<20 {
			return
		}
		var out bytes.Buffer
		if err := Seal(context.Background(), &out, bytes.NewReader(raw), SealOptions{TempDir: t.TempDir()}); err != nil {
			return
		}
		rd := newStreamReader(&out)
		for {
			_, err := rd.next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("sealed stream does not read back: %v", err)
			}
		}
	})
}
