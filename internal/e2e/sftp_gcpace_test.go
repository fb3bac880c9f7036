package e2e

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/testutil/wait"
)

// Issue 38 §1b: while an SFTP upload writes, the daemon's collector runs at a
// raised percentage (go_gc_gogc_percent of its metrics, so that an upload's
// garbage costs fewer collections), and the process's own is back once the
// writes stop, with the upload's handle still open: an idle handle costs no
// memory. The control, system.sftp.upload_gc_headroom 0, keeps it at 100
// through the same writes. On 23390bf the first half fails: the percentage
// never moves.
func TestSFTPUploadGCPaceEndsWithTheWrites(t *testing.T) {
	t.Parallel()
	for _, headroom := range []int{32, 0} {
		t.Run(fmt.Sprintf("headroom=%d", headroom), func(t *testing.T) {
			t.Parallel()
			const tok = "e2e-scrape-token-0123456789"
			port := freePort(t)
			n := dosNode(t, func(c *config.Config) {
				c.Metrics = config.Metrics{BindAddress: fmt.Sprintf("127.0.0.1:%d", port), Token: tok}
				c.System.SFTP.UploadGCHeadroom = headroom
			})
			gogc := func() float64 {
				v, err := strconv.ParseFloat(scrapeGauge(port, tok, "go_gc_gogc_percent"), 64)
				if err != nil {
					return -1
				}
				return v
			}
			wait.For(t, 30*time.Second, func() bool { return gogc() == 100 }, "the daemon's GOGC at 100 before the upload")

			s := n.sftpOpen(t, sftpLogin("alice", sftpSrvA), ssh.Password(sftpPass))
			f, err := s.Create("/pace.bin")
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			buf := make([]byte, 32<<10)
			var off int64
			write := func(bytes int64) {
				t.Helper()
				for end := off + bytes; off < end; off += int64(len(buf)) {
					// Over the first 16 MiB again and again: the file stays small.
					if _, err := f.WriteAt(buf, off%(16<<20)); err != nil {
						t.Fatalf("write at %d: %v", off, err)
					}
				}
			}
			if headroom == 0 {
				for range 4 {
					write(8 << 20)
					if v := gogc(); v != 100 {
						t.Fatalf("with upload_gc_headroom 0, GOGC while writing = %v, want 100", v)
					}
				}
				return
			}
			// Writes go on until the scrape sees the raised percentage.
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					if _, err := f.WriteAt(buf, 0); err != nil {
						t.Errorf("write: %v", err)
						return
					}
				}
			})
			raised := wait.Until(60*time.Second, func() bool { return gogc() > 100 })
			close(stop)
			wg.Wait()
			if !raised {
				t.Fatalf("GOGC while the upload writes = %v, want above 100", gogc())
			}
			// No more writes, the handle still open: the default is back.
			wait.For(t, 60*time.Second, func() bool { return gogc() == 100 }, "GOGC back to 100 after the writes stopped (now %v)", gogc())
		})
	}
}
