package e2e

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/devpanel"
)

// A peer holding one valid transfer token tries to park data on the target
// in the classic form's Pelican backup parts (issue 33, item 7), against
// the real binary, for a server limited to 1 MiB of disk:
//
//   - four `backup_<uuid>.tar.gz` parts of 128 MiB (valid tar.gz archives,
//     stored uncompressed), each with its correct checksum part: main kept
//     them all (+512 MiB) outside every quota; the target refuses the
//     first one past the server's bound (its disk limit, plus 1/64 and
//     1 MiB);
//   - 2,000 one-byte backups with correct checksums: refused (not a
//     tar.gz archive);
//   - 2,000 tiny valid tar.gz backups: refused past
//     system.transfers.max_backups (32).
//
// Each time the transfer fails with 400 and a clear error, the panel is
// told, the server is gone, and the backup directory holds no file and no
// byte (asserted on the disk). The control: the bytes the peer's form
// produced, counted as sent (beyond the bound in the first case). A
// legitimate transfer with its backups still works:
// TestTransferCarriesBackupsAndInstallLog.
func TestTransferRefusesParkedBackups(t *testing.T) {
	const id = "7a0000b3-0000-4000-8000-0000000000b3"
	s := transferServer(t, id)
	s.Settings["build"].(map[string]any)["disk_space"] = 1 // MiB
	c := startCluster(t, []devpanel.Server{s}, nil)
	arc := wingsArchive(t, map[string]string{"a.txt": "hello"})
	tiny := tinyTarGz(t)
	cases := []struct {
		name    string
		backups int
		part    func(w io.Writer) error
		want    string
		minSent int64
	}{
		{"four backups of 128 MiB", 4, func(w io.Writer) error { return storedTarGz(w, 128<<20) },
			"larger than this node accepts", 2 << 20},
		{"2,000 one-byte backups", 2000, func(w io.Writer) error { _, err := w.Write([]byte{'x'}); return err },
			"not a tar.gz archive", 1},
		{"2,000 tiny tar.gz backups", 2000, func(w io.Writer) error { _, err := w.Write(tiny); return err },
			"more backups than this node accepts", 33 * int64(len(tiny))},
	}
	var reports []string
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			reports = append(reports, "failure")
			status, msg, sent := c.postParkingForm(t, id, arc, tc.backups, tc.part)
			t.Logf("%s: %d %q after %.1f MiB sent", tc.name, status, msg, float64(sent)/(1<<20))
			if sent < tc.minSent {
				t.Fatalf("the attack did not run: %d bytes sent, want at least %d", sent, tc.minSent)
			}
			if status != http.StatusBadRequest || !strings.Contains(msg, tc.want) {
				t.Fatalf("answer %d %q, want 400 saying %q", status, msg, tc.want)
			}
			c.waitReports(c.Target, id, reports, 30*time.Second)
			c.Target.assertGone(id)
			files, bytes := dirUsage(t, c.Target.Config.System.BackupDirectory)
			if files != 0 || bytes != 0 {
				t.Fatalf("the backup directory holds %d files, %d bytes after the refused transfer", files, bytes)
			}
		})
	}
	if res, _ := c.Target.request("GET", "/api/system", nil, ""); res.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/system after the attacks: %d", res.StatusCode)
	}
}

// dirUsage counts the regular files under dir and their bytes.
func dirUsage(t *testing.T, dir string) (files int, bytes int64) {
	t.Helper()
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		files++
		if fi, err := d.Info(); err == nil {
			bytes += fi.Size()
		}
		return nil
	})
	return files, bytes
}

// tinyTarGz is a valid tar.gz archive of one empty file.
func tinyTarGz(t *testing.T) []byte {
	t.Helper()
	var b strings.Builder
	if err := storedTarGz(&b, 0); err != nil {
		t.Fatal(err)
	}
	return []byte(b.String())
}

// storedTarGz writes a tar.gz archive of one file of size zero bytes,
// gzip-stored (not compressed): about size bytes on the wire and on disk.
func storedTarGz(w io.Writer, size int64) error {
	zw, err := gzip.NewWriterLevel(w, gzip.NoCompression)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	if err := tw.WriteHeader(&tar.Header{Name: "world.dat", Mode: 0o644, Size: size, Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	zero := make([]byte, 1<<20)
	for left := size; left > 0; left -= int64(len(zero)) {
		if _, err := tw.Write(zero[:min(left, int64(len(zero)))]); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

// countWriter counts the bytes written through it.
type countWriter struct {
	w io.Writer
	n atomic.Int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// postParkingForm streams a classic transfer form to the target: the
// archive and its checksums, then n backup parts written by part, each
// followed by its correct checksum part. It returns the answer and the
// bytes of the form the target took.
func (c *cluster) postParkingForm(t *testing.T, id string, arc []byte, n int, part func(io.Writer) error) (int, string, int64) {
	t.Helper()
	pr, pw := io.Pipe()
	cw := &countWriter{w: pw}
	mw := multipart.NewWriter(cw)
	done := make(chan struct{})
	go func() {
		defer close(done)
		pw.CloseWithError(func() error {
			sum := sha256.Sum256(arc)
			if w, err := mw.CreateFormFile("archive", "archive.tar.gz"); err != nil {
				return err
			} else if _, err := w.Write(arc); err != nil {
				return err
			}
			for _, f := range []string{"checksum", "checksum_archive"} {
				if err := mw.WriteField(f, hex.EncodeToString(sum[:])); err != nil {
					return err
				}
			}
			for i := range n {
				name := fmt.Sprintf("backup_7a0000b3-0000-4000-8000-%012d.tar.gz", i)
				w, err := mw.CreateFormFile(name, name)
				if err != nil {
					return err
				}
				h := sha256.New()
				if err := part(io.MultiWriter(w, h)); err != nil {
					return err
				}
				if err := mw.WriteField("checksum_"+name, hex.EncodeToString(h.Sum(nil))); err != nil {
					return err
				}
			}
			return mw.Close()
		}())
	}()
	req, err := http.NewRequest("POST", c.Target.URL+"/api/transfers", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.transferJWT(id))
	req.Header.Set("Content-Type", mw.FormDataContentType())
	client := &http.Client{Timeout: 5 * time.Minute, Transport: &http.Transport{DisableKeepAlives: true}}
	res, err := client.Do(req)
	_ = pr.CloseWithError(io.ErrClosedPipe) // the writer stops
	<-done
	if err != nil {
		t.Fatalf("the target did not answer: %v", err)
	}
	defer res.Body.Close()
	var e struct {
		Error string `json:"error"`
	}
	_ = json.NewDecoder(res.Body).Decode(&e)
	return res.StatusCode, e.Error, cw.n.Load()
}
