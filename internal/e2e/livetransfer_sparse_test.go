package e2e

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/transfer"
)

// liveProxy stands between a source and a target's /api/transfers: it
// counts the bytes of the request bodies it forwards (the live stream on
// the wire) and, with maxVersion set, removes the newer versions from the
// target's offer (a target that speaks up to maxVersion, as an older
// Wharf does).
type liveProxy struct {
	URL    string
	posted atomic.Int64
}

func startLiveProxy(t *testing.T, target string, maxVersion int) *liveProxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &liveProxy{}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			if pr.Out.Body != nil {
				pr.Out.Body = countingBody{pr.Out.Body, &p.posted}
			}
		},
		ModifyResponse: func(res *http.Response) error {
			if maxVersion == 0 || res.Request.Method != http.MethodGet || res.StatusCode != http.StatusOK {
				return nil
			}
			var o transfer.Offer
			b, err := io.ReadAll(res.Body)
			_ = res.Body.Close()
			if err != nil || json.Unmarshal(b, &o) != nil {
				res.Body = io.NopCloser(bytes.NewReader(b))
				return err
			}
			o.Versions = slices.DeleteFunc(o.Versions, func(v int) bool { return v > maxVersion })
			b, _ = json.Marshal(o)
			res.Body = io.NopCloser(bytes.NewReader(b))
			res.ContentLength = int64(len(b))
			res.Header.Set("Content-Length", strconv.Itoa(len(b)))
			return nil
		},
	}
	s := httptest.NewServer(rp)
	t.Cleanup(s.Close)
	p.URL = s.URL
	return p
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c countingBody) Read(b []byte) (int, error) {
	n, err := c.ReadCloser.Read(b)
	c.n.Add(int64(n))
	return n, err
}

// startTransferVia starts the transfer of id to the target through url
// (its /api/transfers, or a proxy of it).
func (c *cluster) startTransferVia(id, base string) {
	c.Source.t.Helper()
	res, body := c.Source.request("POST", "/api/servers/"+id+"/transfer",
		map[string]any{"url": base + "/api/transfers", "token": "Bearer " + c.transferJWT(id)}, "")
	if res.StatusCode != 202 {
		c.Source.t.Fatalf("start transfer: %d %s", res.StatusCode, body)
	}
}

// TestLiveTransferSparseAndHardLinks (issue 33, items 5 and 6, live wire
// version 4): a server limited to 32 MiB holding an 8 TiB sparse file with
// 1 MiB of data and a 4 MiB file with 127 further names moves live; on the
// target the sparse file has the same data and about 1 MiB allocated, and
// the 128 names share one inode. The stream is uncompressed, so that the
// bytes on the wire (counted by a proxy) are the bytes sent.
//
// The control: the same tree to the same target offering versions 2 and 3
// only (as a Wharf before version 4) is sent as today: the sparse file's
// zeros, read whole, fill the 32 MiB limit on the target and the transfer
// fails.
func TestLiveTransferSparseAndHardLinks(t *testing.T) {
	parallelDocker(t)
	v3, v4 := uuid.NewString(), uuid.NewString()
	var servers []devpanel.Server
	for _, id := range []string{v3, v4} {
		s := transferServer(t, id)
		s.Settings["build"] = map[string]any{"memory_limit": 128, "swap": 0, "cpu_limit": 100, "disk_space": 32}
		servers = append(servers, s)
	}
	c := startCluster(t, servers, func(name string, cfg *config.Config) {
		cfg.System.Transfers.Live = true
		cfg.System.Transfers.Compression = "none"
	})

	// Control: version 3.
	writeSparseAndLinks(t, c.Source.dataDir(v3))
	old := startLiveProxy(t, c.Target.URL, 3)
	c.startTransferVia(v3, old.URL)
	c.waitReports(c.Target, v3, []string{"failure"}, 120*time.Second)
	c.Source.waitDaemonLog(`msg="the target speaks live transfers" server=`+v3+` direction=outgoing version=3`, 10*time.Second)
	c.Target.assertGone(v3)
	t.Logf("version 3 (control): failed after %.1f MiB on the wire", float64(old.posted.Load())/(1<<20))
	if old.posted.Load() < 32<<20 {
		t.Fatalf("the control sent %d bytes, want the limit's 32 MiB at least (the zeros sent whole)", old.posted.Load())
	}

	// Version 4.
	data, content := writeSparseAndLinks(t, c.Source.dataDir(v4))
	now := startLiveProxy(t, c.Target.URL, 0)
	start := time.Now()
	c.startTransferVia(v4, now.URL)
	c.waitReports(c.Target, v4, []string{"success"}, 120*time.Second)
	c.Source.waitDaemonLog(`msg="the target speaks live transfers" server=`+v4+` direction=outgoing version=4`, 10*time.Second)
	c.Source.waitDaemonLog(`server=`+v4+` direction=outgoing status=completed`, 30*time.Second)
	t.Logf("version 4: %.1f MiB on the wire, reported after %s", float64(now.posted.Load())/(1<<20), time.Since(start).Round(time.Millisecond))
	checkSparseAndLinks(t, c.Target.dataDir(v4), data, content)
	// The data (1 + 4 MiB) once per pass at most: files written just
	// before the transfer are sent again in the final pass.
	if now.posted.Load() > 16<<20 {
		t.Errorf("version 4 sent %d bytes, want about the data (5 MiB, twice at most)", now.posted.Load())
	}
	if !regexp.MustCompile(`hard_links=(127|254) `).MatchString(c.Source.log.String()) {
		t.Errorf("the source's log does not count 127 hard links\n%s", c.Source.log)
	}
}

// v4Sparse appends a sparse file record's head (path s, mode 0644, size,
// the extents' count) and the extents (offset, length, that many bytes).
func v4Sparse(raw []byte, size uint64, exts ...uint64) []byte {
	raw = binary.AppendUvarint(liveStr(append(raw, 'S'), "s"), 0o644)
	raw = binary.AppendVarint(raw, 1e18)
	raw = binary.AppendUvarint(raw, size)
	raw = binary.AppendUvarint(raw, uint64(len(exts)/2))
	for i := 0; i < len(exts); i += 2 {
		raw = binary.AppendUvarint(raw, exts[i])
		raw = binary.AppendUvarint(raw, exts[i+1])
		raw = append(raw, make([]byte, exts[i+1])...)
	}
	return raw
}

// v4Records makes a stream of the first pass, a file "a", then the
// record rec, then nothing (the target must refuse rec).
func v4Records(rec func([]byte) []byte) func(raw []byte, i int) ([]byte, bool) {
	return func(raw []byte, i int) ([]byte, bool) {
		switch i {
		case 0:
			return append(raw, 'P', 1, 1), true
		case 1:
			raw = binary.AppendUvarint(liveStr(append(raw, 'F'), "a"), 0o644)
			raw = binary.AppendVarint(raw, 1e18)
			raw = binary.AppendUvarint(raw, 0)
			return append(raw, emptySum[:]...), true
		case 2:
			return rec(raw), true
		}
		return raw, false
	}
}

// TestLiveTargetRefusesHostileV4Records: a peer holding a valid token
// sends version-4 records that do not describe a file or that name a file
// the stream did not write (issue 33, items 5 and 6, live wire version 4).
// Each fails the transfer with a clear error in the target's log and a 400,
// and the target keeps nothing of the server. The control: the records
// were sent, and the error names the record's fault (so it was parsed).
func TestLiveTargetRefusesHostileV4Records(t *testing.T) {
	const id = "7b000041-0000-4000-8000-000000000041"
	c := startCluster(t, []devpanel.Server{transferServer(t, id)}, liveTargetNodes)
	link := func(target string) func([]byte) []byte {
		return func(raw []byte) []byte { return liveStr(liveStr(append(raw, 'H'), "b"), target) }
	}
	attacks := []liveMemoryAttack{
		{name: "extent beyond the size", want: "beyond the file's size",
			gen: v4Records(func(raw []byte) []byte { return v4Sparse(raw, 100, 95, 10) })},
		{name: "extent at 1 PiB", want: "beyond the file's size",
			gen: v4Records(func(raw []byte) []byte { return v4Sparse(raw, 8<<40, 1<<50, 1) })},
		{name: "overlapping extents", want: "overlapping",
			gen: v4Records(func(raw []byte) []byte { return v4Sparse(raw, 100, 0, 10, 5, 10) })},
		{name: "too many extents", want: "extents (at most"},
		{name: "link to an unknown path", want: "a hard link to a path this stream did not write",
			gen: v4Records(link("nothere"))},
		{name: "link to ../", want: `not a valid live transfer stream: \"../../../etc/passwd\"`,
			gen: v4Records(link("../../../etc/passwd"))},
	}
	// "too many extents": a count over the bound, no extent follows.
	attacks[3].gen = v4Records(func(raw []byte) []byte {
		raw = binary.AppendUvarint(liveStr(append(raw, 'S'), "s"), 0o644)
		raw = binary.AppendVarint(raw, 1e18)
		raw = binary.AppendUvarint(raw, 1<<40)
		return binary.AppendUvarint(raw, 1<<20)
	})
	var want []string
	for _, a := range attacks {
		a.minRecords = 3
		t.Run(a.name, func(t *testing.T) {
			want = append(want, "failure")
			r := c.liveMemoryAttack(t, id, a)
			if r.records < r.minRecords {
				t.Fatalf("the attack did not run: %d records sent", r.records)
			}
			if r.status != 0 && r.status != http.StatusBadRequest {
				t.Errorf("answer %d %q, want 400", r.status, r.msg)
			}
			if !strings.Contains(c.Target.log.String(), a.want) {
				t.Errorf("the target's log does not say %q\n%s", a.want, c.Target.log)
			}
			c.Target.assertGone(id)
		})
	}
	c.waitReports(c.Target, id, want, 30*time.Second)
	if entries, _ := os.ReadDir(c.Target.Config.System.RootDirectory + "/transfers"); len(entries) != 0 {
		t.Fatalf("transfer markers left on the target: %v", entries)
	}
}
