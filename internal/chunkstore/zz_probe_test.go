package chunkstore

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/klauspost/pgzip"

	"github.com/wharf/wharf/internal/testutil/tree"
)

func TestZZProbe(t *testing.T) {
	if os.Getenv("PROBE") == "" {
		t.Skip()
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	tree.GameServer(src, 512<<20)
	out, err := exec.Command("tar", "cf", "-", "-C", src, ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	s, _ := Open(filepath.Join(dir, "repo"))
	t0 := time.Now()
	m, err := s.Write("srv", "b", bytes.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("write %d MiB: %v, %d chunks", len(out)>>20, time.Since(t0), len(m.Chunks))
	t0 = time.Now()
	r := s.Reader(m)
	n, err := io.Copy(io.Discard, r)
	r.Close()
	t.Logf("reader: %d %v %v", n, err, time.Since(t0))
	t0 = time.Now()
	d := s.Check(m)
	t.Logf("check: %v %v", d, time.Since(t0))
	t0 = time.Now()
	pr, pw := io.Pipe()
	go func() {
		gw, _ := pgzip.NewWriterLevel(pw, 0)
		r := s.Reader(m)
		io.Copy(gw, r)
		r.Close()
		gw.Close()
		pw.Close()
	}()
	gr, _ := pgzip.NewReaderN(pr, 1<<20, 4)
	n, err = io.Copy(io.Discard, gr)
	t.Logf("gzip level 0 round: %d %v %v", n, err, time.Since(t0))
}
