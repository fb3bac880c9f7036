package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/wharf/wharf/internal/testutil/wait"
)

func (n *node) openFDs() int {
	n.t.Helper()
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", n.cmd.Process.Pid))
	if err != nil {
		n.t.Fatal(err)
	}
	return len(entries)
}

// attacks.md D9: a thousand API operations, most of them refused, leave the
// daemon's descriptor count where it was.
func TestNoDescriptorLeakAfterThousandOperations(t *testing.T) {
	n := signedNode(t, nil)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	call := func(method, path, auth string) {
		req, _ := http.NewRequest(method, n.URL+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	// Warm up lazily opened descriptors (log files, the one-time store, ...).
	for i := 0; i < 20; i++ {
		call("GET", "/api/system", "Bearer "+n.Token)
		call("GET", "/download/file?token="+n.signURL(downloadClaims("hello.txt")), "")
	}
	// A moment for the warm-up's connections to close, so that they do not count in the baseline; the check below waits for its condition.
	time.Sleep(200 * time.Millisecond)
	before := n.openFDs()
	for i := 0; i < 1000; i++ {
		switch i % 5 {
		case 0:
			call("GET", "/api/servers/"+signedServer, "Bearer "+n.Token)
		case 1:
			call("GET", "/api/system", "Bearer wrong")
		case 2:
			call("GET", "/download/file?token="+n.signURL(downloadClaims("../../etc/passwd")), "")
		case 3:
			call("GET", "/download/file?token="+n.signURL(map[string]any{"file_path": "hello.txt", "server_uuid": signedServer, "unique_id": uuid.NewString(), "exp": 1}), "")
		case 4:
			call("GET", "/download/file?token="+n.signURL(downloadClaims("hello.txt")), "")
		}
	}
	// Connections close asynchronously; give them a moment.
	var after int
	wait.Until(5*time.Second, func() bool { after = n.openFDs(); return after <= before })
	if after > before {
		t.Fatalf("open descriptors grew from %d to %d after 1000 operations", before, after)
	}
}
