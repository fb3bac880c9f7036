package e2e

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/zeebo/xxh3"

	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/devpanel"
	"github.com/wharf/wharf/internal/testutil/wait"
	"github.com/wharf/wharf/internal/transfer"
)

// A peer holding one valid transfer token sends a live stream built to
// make the target hold memory (issue 33, item 1), against the real binary:
//
//   - "unwritten manifest": the final phase, then 300,000 manifest entries
//     for 4 KiB names the stream never wrote, zstd-compressed (the wire
//     costs ~10 MiB), and no end record. Main kept every entry in a map
//     until the end record (1.2-1.5 GB). The target refuses the first entry.
//   - "long names written": 30,000 empty files written under 4 KiB paths
//     (16 directories of long names), then a manifest naming all but
//     one. Main kept each path twice (the received files and the
//     manifest: ~250 MB); the target keeps a fixed-size entry per file and
//     nothing per manifest entry, and fails at the end record.
//
// Each time the transfer fails with a clear error (400 to the peer, a
// failure report to the panel), the target's partial server is gone, and
// its peak resident memory (sampled VmRSS and VmHWM from /proc) stays
// within 64 MiB of what it was before the stream. The control: the bytes
// the peer's stream produced and the records in them, counted as sent.
func TestLiveTargetMemoryUnderHostileStreams(t *testing.T) {
	const id = "7b000031-0000-4000-8000-000000000031"
	c := startCluster(t, []devpanel.Server{transferServer(t, id)}, liveTargetNodes)
	var want []string
	for _, a := range liveMemoryAttacks {
		t.Run(a.name, func(t *testing.T) {
			want = append(want, "failure")
			r := c.liveMemoryAttack(t, id, a)
			t.Logf("%s: %d records, %.1f MiB on the wire; target RSS %d MiB before, peak %d MiB (VmHWM %d MiB); answer %d %q",
				a.name, r.records, float64(r.sent)/(1<<20), r.baseKiB>>10, r.peakKiB>>10, r.hwmKiB>>10, r.status, r.msg)
			if r.sent < r.minSent || r.records < r.minRecords {
				t.Fatalf("the attack did not run: %d bytes and %d records sent, want at least %d and %d", r.sent, r.records, r.minSent, r.minRecords)
			}
			if r.status != 0 && r.status != http.StatusBadRequest {
				t.Errorf("answer %d %q, want 400", r.status, r.msg)
			}
			if !strings.Contains(c.Target.log.String(), a.want) {
				t.Errorf("the target's log does not say %q\n%s", a.want, c.Target.log)
			}
			if r.status != 0 && !strings.Contains(r.msg, a.wantAnswer) {
				t.Errorf("answer %q, want it to say %q", r.msg, a.wantAnswer)
			}
			c.Target.assertGone(id)
			if grew := max(r.peakKiB, r.hwmKiB) - r.baseKiB; grew > 64<<10 {
				t.Errorf("the target's memory grew by %d MiB under the stream (limit 64 MiB)", grew>>10)
			}
		})
	}
	c.waitReports(c.Target, id, want, 30*time.Second)
	waitNoMarkers(t, c.Target.Config.System.RootDirectory+"/transfers")
	if res, _ := c.Target.request("GET", "/api/system", nil, ""); res.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/system after the attacks: %d", res.StatusCode)
	}
}

// TestLiveTargetMemoryFigures measures the target's peak memory under the
// same streams with the reference binary (WHARF_E2E_REF_BINARY, e.g. main
// built with -tags wharf_testruntime) and this build, in one run, for
// docs/benchmarks.md. It asserts nothing.
func TestLiveTargetMemoryFigures(t *testing.T) {
	ref := os.Getenv("WHARF_E2E_REF_BINARY")
	if ref == "" {
		t.Skip("WHARF_E2E_REF_BINARY not set")
	}
	const id = "7b000032-0000-4000-8000-000000000032"
	s := transferServer(t, id)
	for _, bin := range []string{ref, wharfBinary} {
		c := startCluster(t, []devpanel.Server{s}, liveTargetNodes)
		c.Target.stop()
		c.Target.bin = bin
		c.Target.restart()
		for _, a := range liveMemoryAttacks {
			start := time.Now()
			r := c.liveMemoryAttack(t, id, a)
			t.Logf("FIGURE binary=%s attack=%q records=%d wire=%.1fMiB base=%dMiB peak=%dMiB hwm=%dMiB wall=%v answer=%d",
				bin, a.name, r.records, float64(r.sent)/(1<<20), r.baseKiB>>10, r.peakKiB>>10, r.hwmKiB>>10,
				time.Since(start).Round(10*time.Millisecond), r.status)
			c.Target.stop()
			c.Target.restart()
		}
		c.Target.stop()
		c.Source.stop()
	}
}

// liveTargetNodes: live transfers on.
func liveTargetNodes(_ string, cfg *config.Config) { cfg.System.Transfers.Live = true }

// liveMemoryAttack is one hostile stream: gen appends its i-th record to
// raw (false when there are no more).
type liveMemoryAttack struct {
	name       string
	gen        func(raw []byte, i int) ([]byte, bool)
	want       string // in the target's log
	wantAnswer string // in the 400's error
	minRecords int64  // records that must have been sent
	all        bool   // the whole stream must have been sent
}

// The paths: 15 directories of 255-byte names and one of 200, then a
// short file name (4,048 bytes in all: the manifest's and the received
// files' tables grew with the path; a directory listing holds only the
// last name, see docs/live-transfers.md "Bounds").
var (
	hostileDirs = func() []string {
		var out []string
		p := ""
		for i := range 16 {
			name := strings.Repeat("d", 255)
			if i == 15 {
				name = name[:200]
			}
			p = strings.TrimPrefix(p+"/"+name, "/")
			out = append(out, p)
		}
		return out
	}()
	emptySum = xxh3.Hash128(nil).Bytes()
)

func hostileFile(i int) string {
	return hostileDirs[len(hostileDirs)-1] + fmt.Sprintf("/f%06d", i)
}

var liveMemoryAttacks = []liveMemoryAttack{
	{
		name: "unwritten manifest", want: "the manifest names a path the stream did not write",
		wantAnswer: "", minRecords: 1000,
		gen: func(raw []byte, i int) ([]byte, bool) {
			switch {
			case i == 0:
				return livePass(raw), true
			case i > 300_000:
				return raw, false
			}
			return liveManifestFile(raw, hostileFile(i-1)), true
		},
	},
	{
		name: "long names written", want: "does not match the source's manifest",
		minRecords: 2*30_000 + 2*16, all: true,
		gen: func(raw []byte, i int) ([]byte, bool) {
			const files, dirs = 30_000, 16
			switch {
			case i == 0:
				return livePass(raw), true
			case i <= dirs:
				return liveDir(append(raw, 'D'), hostileDirs[i-1]), true
			case i <= dirs+files:
				raw = binary.AppendUvarint(liveStr(append(raw, 'F'), hostileFile(i-dirs-1)), 0o644)
				raw = binary.AppendVarint(raw, 1e18)
				raw = binary.AppendUvarint(raw, 0)
				return append(raw, emptySum[:]...), true
			case i <= 2*dirs+files:
				return binary.AppendUvarint(liveDir(append(raw, 'M', 'd'), hostileDirs[i-dirs-files-1]), 0), true
			case i < 2*dirs+2*files: // all files but the last
				return liveManifestFile(raw, hostileFile(i-2*dirs-files-1)), true
			case i == 2*dirs+2*files:
				return binary.AppendUvarint(append(raw, 'E'), dirs+files-1), true
			}
			return raw, false
		},
	},
}

func livePass(raw []byte) []byte { return append(raw, 'P', 1, 2) } // pass 1, final phase

func liveStr(raw []byte, s string) []byte {
	return append(binary.AppendUvarint(raw, uint64(len(s))), s...)
}

// liveDir appends a directory's path, mode 0755 and mtime (a 'D' record,
// or the middle of a 'd' manifest entry).
func liveDir(raw []byte, rel string) []byte {
	raw = binary.AppendUvarint(liveStr(raw, rel), 0o755)
	return binary.AppendVarint(raw, 1e18)
}

// liveManifestFile appends the manifest entry of an empty file of mode
// 0644 and time 1e18 ns.
func liveManifestFile(raw []byte, rel string) []byte {
	raw = binary.AppendUvarint(liveStr(append(raw, 'M', 'f'), rel), 0o644)
	raw = binary.AppendVarint(raw, 1e18)
	raw = binary.AppendUvarint(raw, 0)
	return append(raw, emptySum[:]...)
}

// hostileLiveBody makes the stream as it is read: zstd chunks of up to
// 4 MiB of records, counting the bytes and records handed out. The HTTP
// client's writer may still be reading it after the target answered (the
// target answers early and refuses the rest): mu guards the counts.
type hostileLiveBody struct {
	mu      sync.Mutex
	gen     func(raw []byte, i int) ([]byte, bool)
	enc     *zstd.Encoder
	raw     []byte
	out     []byte
	next    int // the next record
	ended   bool
	records int64 // in the chunks handed out whole or in part
	pending int64 // in out
	sent    int64
}

func (b *hostileLiveBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for len(b.out) == 0 {
		if b.ended {
			return 0, io.EOF
		}
		b.fill()
	}
	if b.pending > 0 {
		b.records += b.pending
		b.pending = 0
	}
	n := copy(p, b.out)
	b.out = b.out[n:]
	b.sent += int64(n)
	return n, nil
}

// counts returns the bytes and records handed out so far, and whether the
// stream was made whole.
func (b *hostileLiveBody) counts() (sent, records int64, ended bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sent, b.records, b.ended
}

// fill makes the next chunk.
func (b *hostileLiveBody) fill() {
	b.raw = b.raw[:0]
	if b.next == 0 {
		b.raw = append(b.raw, "WHARF-LIVE-2\n"...)
	}
	for len(b.raw) < 4<<20-16<<10 {
		raw, more := b.gen(b.raw, b.next)
		if !more {
			b.ended = true
			break
		}
		b.raw = raw
		b.next++
		b.pending++
	}
	if len(b.raw) == 0 {
		return
	}
	z := b.enc.EncodeAll(b.raw, nil)
	frame := binary.AppendUvarint([]byte{'Z'}, uint64(len(b.raw)))
	frame = binary.AppendUvarint(frame, uint64(len(z)))
	b.out = append(frame, z...)
}

// liveAttackResult is what one hostile stream did to the target.
type liveAttackResult struct {
	status                   int // 0: no answer (the target closed the connection)
	msg                      string
	sent, records            int64
	minSent, minRecords      int64
	baseKiB, peakKiB, hwmKiB int64
}

// liveMemoryAttack posts a's stream to the target as a live transfer of id
// with a valid token and measures the target's memory meanwhile.
func (c *cluster) liveMemoryAttack(t *testing.T, id string, a liveMemoryAttack) liveAttackResult {
	t.Helper()
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	body := &hostileLiveBody{gen: a.gen, enc: enc}
	failed := `msg="incoming transfer failed" server=` + id
	before := strings.Count(c.Target.log.String(), failed)
	r := liveAttackResult{minRecords: a.minRecords, baseKiB: c.Target.rssKiB()}
	stop := c.Target.peakRSS()
	req, err := http.NewRequest("POST", c.Target.URL+"/api/transfers", io.NopCloser(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.transferJWT(id))
	req.Header.Set("Content-Type", transfer.LiveContentType)
	req.Header.Set(transfer.LiveVersionHeader, strconv.Itoa(transfer.LiveVersion))
	client := &http.Client{Timeout: 5 * time.Minute, Transport: &http.Transport{DisableKeepAlives: true}}
	res, err := client.Do(req)
	if err == nil {
		var e struct {
			Error string `json:"error"`
		}
		_ = json.NewDecoder(res.Body).Decode(&e)
		res.Body.Close()
		r.status, r.msg = res.StatusCode, e.Error
	} else {
		t.Logf("the target closed the connection: %v", err)
	}
	// The failure is handled (and memory freed) once it is logged.
	if !wait.Until(5*time.Minute, func() bool { return strings.Count(c.Target.log.String(), failed) > before }) {
		t.Fatalf("the target did not fail the transfer\n%s", c.Target.log)
	}
	r.peakKiB, r.hwmKiB = stop(), c.Target.hwmKiB()
	var ended bool
	r.sent, r.records, ended = body.counts()
	r.minSent = 1 << 10
	if a.all && !ended {
		t.Errorf("the stream was not sent whole: %d bytes, %d records", r.sent, r.records)
	}
	return r
}
