package transfer

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/google/uuid"

	"github.com/wharf/wharf/internal/sandbox"
	"github.com/wharf/wharf/internal/testutil/tree"
)

// The target of a live transfer parses bytes another node chose. These
// tests feed it valid streams cut short and hostile ones: it must fail with
// an error (never panic), allocate no more than its fixed limits whatever
// length a record claims, and write nothing outside the server's root.

// encodeLive is what the source sends for the tree at src: the first pass,
// the final pass and the manifest, in chunks of the given mode.
func encodeLive(tb testing.TB, src, mode string) []byte {
	tb.Helper()
	return encodeLiveWith(tb, newLiveSender(context.Background(), tree.Open(tb, src), LiveVersion, ""), mode)
}

// encodeLiveWith is encodeLive with the given sender.
func encodeLiveWith(tb testing.TB, ls *liveSender, mode string) []byte {
	tb.Helper()
	cw, err := newChunkWriter(mode, nil)
	if err != nil {
		tb.Fatal(err)
	}
	var buf bytes.Buffer
	sent := make(chan error, 1)
	go func() { _, err := cw.WriteTo(&buf); sent <- err }()
	err = sendLiveWith(ls, cw)
	if serr := <-sent; err == nil {
		err = serr
	}
	if err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// sendLive writes the passes and the manifest of the tree at src to cw,
// and closes it.
func sendLive(tb testing.TB, src string, cw *chunkWriter) error {
	return sendLiveWith(newLiveSender(context.Background(), tree.Open(tb, src), LiveVersion, ""), cw)
}

// sendLiveWith is sendLive with the given sender: the install log, when
// it has one, goes after the final pass, as livePasses sends it.
func sendLiveWith(ls *liveSender, cw *chunkWriter) error {
	ls.rw, ls.cw = &recWriter{w: cw}, cw
	err := func() error {
		if err := ls.sendAll(1); err != nil {
			return err
		}
		tr, err := ls.scan()
		if err != nil {
			return err
		}
		if err := ls.send(tr, 2, phaseFinal); err != nil {
			return err
		}
		if err := ls.sendInstallLog(); err != nil {
			return err
		}
		return ls.manifest()
	}()
	if cerr := cw.Close(); err == nil {
		err = cerr
	}
	return err
}

// arena is a server root with a sibling directory that no stream may reach.
type arena struct {
	base, root, outside string
}

func newArena(tb testing.TB) arena {
	tb.Helper()
	base := tb.TempDir()
	a := arena{base: base, root: filepath.Join(base, "root"), outside: filepath.Join(base, "outside")}
	must(tb, os.Mkdir(a.root, 0o755))
	must(tb, os.Mkdir(a.outside, 0o755))
	must(tb, os.WriteFile(filepath.Join(a.outside, "canary"), []byte("untouched"), 0o644))
	return a
}

// apply runs the target's side of a live transfer over stream into the
// arena's root.
func (ar arena) apply(tb testing.TB, stream []byte) error {
	tb.Helper()
	return ar.applyFrom(tb, bytes.NewReader(stream))
}

func (ar arena) applyFrom(tb testing.TB, body io.Reader) error {
	tb.Helper()
	_, err := ar.applyVersion(tb, body, LiveVersion)
	return err
}

// applyVersion is applyFrom for a stream of wire version version; it
// returns the applier, to look at what it kept.
func (ar arena) applyVersion(tb testing.TB, body io.Reader, version int) (*applier, error) {
	tb.Helper()
	cr, err := newChunkReader(body)
	if err != nil {
		tb.Fatal(err)
	}
	defer cr.Close()
	// Opened and closed here: a fuzz run applies thousands of streams.
	dst, err := sandbox.New(ar.root, sandbox.Options{UID: -1, GID: -1})
	if err != nil {
		tb.Fatal(err)
	}
	defer dst.Close()
	a := &applier{ctx: context.Background(), dst: dst.Trusted(), r: recReader{cr}, h: newContentHash(), maxWrite: 64 << 10,
		sums: map[pathKey]fileSum{}, log: func(uint64, byte) {},
		noInstallLog: version < 3, v4: version >= 4, maxLinks: maxHardLinks,
		// Version 5: a snapshot restores nothing (seeds must then name
		// what earlier records could not have made: all refused).
		v5: version >= liveManifestVersion, restore: func(context.Context, string, string) error { return nil }}
	return a, a.run()
}

// checkOutside fails tb when anything beside the root changed.
func (ar arena) checkOutside(tb testing.TB) {
	tb.Helper()
	ents, err := os.ReadDir(ar.base)
	must(tb, err)
	names := []string{}
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"outside", "root"}) {
		tb.Fatalf("the stream made %v beside the root", names)
	}
	if fi, err := os.Lstat(ar.root); err != nil || !fi.IsDir() {
		tb.Fatalf("the root is no longer a directory: %v", err)
	}
	ents, err = os.ReadDir(ar.outside)
	must(tb, err)
	if len(ents) != 1 || ents[0].Name() != "canary" {
		tb.Fatalf("the stream wrote outside the root: %v", ents)
	}
	if b, err := os.ReadFile(filepath.Join(ar.outside, "canary")); err != nil || string(b) != "untouched" {
		tb.Fatalf("the stream changed a file outside the root: %q %v", b, err)
	}
	for p, want := range map[string]os.FileMode{ar.outside: os.ModeDir | 0o755, filepath.Join(ar.outside, "canary"): 0o644} {
		if fi, err := os.Lstat(p); err != nil || fi.Mode() != want {
			tb.Fatalf("the stream changed the mode of %s outside the root: %v %v", p, fi.Mode(), err)
		}
	}
}

// allocated returns the bytes allocated while f ran.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// maxApplyAlloc bounds what one stream may make the target allocate: a
// chunk's raw and compressed buffers (maxChunk each), the zstd decoder's
// window, and the test's own sandbox. A claimed length beyond the limits
// must be refused before anything is allocated for it.
const maxApplyAlloc = 32 << 20

// wire writes records by hand, well-formed or not.
type wire struct {
	recWriter
	buf bytes.Buffer
}

func newWire() *wire {
	w := &wire{}
	w.w = &w.buf
	return w
}

func (w *wire) rec(kind byte, fields ...any) *wire {
	w.begin(kind)
	for _, f := range fields {
		switch v := f.(type) {
		case string:
			w.str(v)
		case uint64:
			w.uvarint(v)
		case int64:
			w.varint(v)
		case byte:
			w.bytes([]byte{v})
		case []byte:
			w.bytes(v)
		default:
			panic("wire: unknown field type")
		}
	}
	_ = w.flush()
	return w
}

func (w *wire) pass(n uint64, phase byte) *wire { return w.rec(recPass, n, phase) }

// file is a whole, valid file record.
func (w *wire) file(rel string, content string) *wire {
	h := newContentHash()
	_, _ = h.Write([]byte(content))
	sum := h.Sum128().Bytes()
	return w.rec(recFile, rel, uint64(0o644), int64(1e18), uint64(len(content)), []byte(content), sum[:])
}

// stream is the records in one raw chunk after the magic.
func (w *wire) stream() []byte { return frameNone(append([]byte(liveMagic), w.buf.Bytes()...)) }

// frameNone frames raw as one uncompressed chunk.
func frameNone(raw []byte) []byte {
	b := []byte{codecNone}
	b = binary.AppendUvarint(b, uint64(len(raw)))
	b = binary.AppendUvarint(b, uint64(len(raw)))
	return append(b, raw...)
}

// header is a chunk header alone: codec and the two claimed lengths.
func header(codec byte, rawLen, plen uint64) []byte {
	b := []byte{codec}
	b = binary.AppendUvarint(b, rawLen)
	return binary.AppendUvarint(b, plen)
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// validTree builds a small tree with every kind of entry.
func validTree(tb testing.TB) string {
	tb.Helper()
	src := tb.TempDir()
	must(tb, os.MkdirAll(filepath.Join(src, "world", "region"), 0o750))
	must(tb, os.WriteFile(filepath.Join(src, "server.properties"), []byte("motd=hi\n"), 0o644))
	must(tb, os.WriteFile(filepath.Join(src, "world", "region", "r.0.0.mca"), bytes.Repeat([]byte("chunk"), 60), 0o600))
	must(tb, os.WriteFile(filepath.Join(src, "empty"), nil, 0o644))
	must(tb, os.Symlink("world/region", filepath.Join(src, "link")))
	must(tb, os.Symlink("../outside/canary", filepath.Join(src, "away")))
	return src
}

func TestLiveWireValidStreamApplies(t *testing.T) {
	src := validTree(t)
	for _, mode := range []string{"none", "zstd"} {
		ar := newArena(t)
		if err := ar.apply(t, encodeLive(t, src, mode)); err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		want, _ := tree.Snapshot(src)
		got, _ := tree.Snapshot(ar.root)
		if d := tree.Diff(want, got); d != "" {
			t.Fatalf("%s: %s", mode, d)
		}
		ar.checkOutside(t)
	}
}

// Every strict prefix of a valid stream is a truncation: it fails as the
// source gone away, and what it wrote stays inside the root.
func TestLiveWireTruncatedStreamsFail(t *testing.T) {
	src := validTree(t)
	for _, mode := range []string{"none", "zstd"} {
		stream := encodeLive(t, src, mode)
		ar := newArena(t)
		for n := range len(stream) {
			err := ar.apply(t, stream[:n])
			if !errors.Is(err, ErrSourceGone) {
				t.Fatalf("%s: the stream cut at %d of %d bytes: got %v, want the source gone", mode, n, len(stream), err)
			}
		}
		ar.checkOutside(t)
	}
}

func TestLiveWireHostileStreamsFail(t *testing.T) {
	escapes := []string{"..", "../x", "a/../../x", "/etc/passwd", "/", "a\x00b", ".", "./a", "a//b", "a/", "a/./b", "a/.."}
	type tc struct {
		name   string
		stream []byte
		want   error
	}
	cases := []tc{
		{"wrong magic", frameNone([]byte("WHARF-LIVE-1\nP")), errBadStream},
		{"unknown codec", cat(header('Q', 4, 4), []byte("abcd")), errBadStream},
		{"empty chunk", header(codecNone, 0, 0), errBadStream},
		{"chunk over the limit", cat(header(codecNone, maxChunk+1, maxChunk+1), []byte(liveMagic)), errBadStream},
		{"chunk of 2^63 bytes", header(codecNone, 1<<63, 1<<63), errBadStream},
		{"payload of 2^63 bytes", header(codecZstd, 16, 1<<63), errBadStream},
		{"raw length and payload disagree", cat(header(codecNone, 20, 13), []byte(liveMagic)), errBadStream},
		{"length varint that never ends", cat([]byte{codecNone}, bytes.Repeat([]byte{0xff}, 11)), errBadStream},
		{"chunk claims 4 MiB and ends", cat(header(codecNone, maxChunk, maxChunk), []byte(liveMagic)), ErrSourceGone},
		{"zstd garbage", cat(header(codecZstd, 32, 16), bytes.Repeat([]byte{0x28}, 16)), errBadStream},
		{"zstd bomb", zstdChunk(bytes.Repeat([]byte{0}, maxChunk+1), 16), errBadStream},
		{"zstd frames decoding past the chunk", zstdFrames(64, 1<<20, maxChunk), errBadStream},
		{"zstd frame with a 64 MiB window", zstdWindow(64<<20, maxChunk+1, maxChunk), errBadStream},
		{"zstd shorter than claimed", zstdChunk([]byte(liveMagic+"P\x01\x01"), 64), errBadStream},
		{"record varint that never ends", newWire().rec(recPass, bytes.Repeat([]byte{0xff}, 11)).stream(), errBadStream},
		{"unknown record", newWire().pass(1, phaseOnline).rec('?').stream(), errBadStream},
		{"unknown phase", newWire().pass(1, 3).stream(), errBadStream},
		{"name of 2^62 bytes", newWire().pass(1, phaseOnline).rec(recDelete, uint64(1<<62)).stream(), errBadStream},
		{"name over the limit", newWire().pass(1, phaseOnline).rec(recDir, string(bytes.Repeat([]byte("a"), maxNameLen+1)), uint64(0o755), int64(0)).stream(), errBadStream},
		{"empty name", newWire().pass(1, phaseOnline).rec(recDelete, uint64(0)).stream(), errBadStream},
		{"file of 2^60 bytes", newWire().pass(1, phaseOnline).rec(recFile, "big", uint64(0o644), int64(0), uint64(1<<60)).stream(), errBadStream},
		{"file claims 1 TiB and ends", newWire().pass(1, phaseOnline).rec(recFile, "big", uint64(0o644), int64(0), uint64(1<<40), []byte("abc")).stream(), ErrSourceGone},
		{"file with a wrong hash", newWire().pass(1, phaseOnline).rec(recFile, "f", uint64(0o644), int64(0), uint64(3), []byte("abc"), make([]byte, 16)).stream(), ErrChecksumMismatch},
		{"manifest in an online pass", newWire().pass(1, phaseOnline).rec(recManifest, byte('d'), "d", uint64(0o755), int64(0), uint64(0)).stream(), errBadStream},
		{"manifest of an unknown kind", newWire().pass(1, phaseFinal).rec(recManifest, byte('c'), "d", uint64(0o755), int64(0), uint64(0)).stream(), errBadStream},
		{"duplicate manifest entry", newWire().pass(1, phaseFinal).rec(recDir, "d", uint64(0o755), int64(0)).
			rec(recManifest, byte('d'), "d", uint64(0o755), int64(0), uint64(0)).
			rec(recManifest, byte('d'), "d", uint64(0o755), int64(0), uint64(0)).stream(), errBadStream},
		{"end in an online pass", newWire().pass(1, phaseOnline).rec(recEnd, uint64(0)).stream(), errBadStream},
		{"end with the wrong count", newWire().pass(1, phaseFinal).rec(recDir, "d", uint64(0o755), int64(0)).
			rec(recManifest, byte('d'), "d", uint64(0o755), int64(0), uint64(0)).rec(recEnd, uint64(2)).stream(), errBadStream},
		{"manifest out of order", newWire().pass(1, phaseFinal).rec(recDir, "d", uint64(0o755), int64(0)).rec(recDir, "c", uint64(0o755), int64(0)).
			rec(recManifest, byte('d'), "d", uint64(0o755), int64(0), uint64(0)).
			rec(recManifest, byte('d'), "c", uint64(0o755), int64(0), uint64(0)).stream(), errBadStream},
		{"manifest of a path never written", newWire().pass(1, phaseFinal).
			rec(recManifest, byte('f'), "never", uint64(0o644), int64(0), uint64(0), make([]byte, 16)).stream(), errNotReceived},
		{"manifest below a path never written", newWire().pass(1, phaseFinal).file("f", "x").
			rec(recManifest, byte('d'), "f/g", uint64(0o755), int64(0), uint64(0)).stream(), errNotReceived},
		{"tree path the manifest leaves out", newWire().pass(1, phaseFinal).rec(recDir, "d", uint64(0o755), int64(0)).rec(recDir, "e", uint64(0o755), int64(0)).
			rec(recManifest, byte('d'), "d", uint64(0o755), int64(0), uint64(0)).rec(recEnd, uint64(1)).stream(), ErrManifestMismatch},
	}
	// Records after the first manifest entry: only manifest entries and
	// the end may follow it.
	afterManifest := func() *wire {
		return newWire().pass(1, phaseFinal).rec(recDir, "d", uint64(0o755), int64(0)).
			rec(recManifest, byte('d'), "d", uint64(0o755), int64(0), uint64(0))
	}
	cases = append(cases,
		tc{"file after the manifest", afterManifest().file("late", "x").stream(), errBadStream},
		tc{"dir after the manifest", afterManifest().rec(recDir, "late", uint64(0o755), int64(0)).stream(), errBadStream},
		tc{"link after the manifest", afterManifest().rec(recLink, "late", "d", int64(0)).stream(), errBadStream},
		tc{"delete after the manifest", afterManifest().rec(recDelete, "d").stream(), errBadStream},
		tc{"pass after the manifest", afterManifest().pass(2, phaseOnline).stream(), errBadStream},
		tc{"install log after the manifest", afterManifest().rec(recInstallLog, uint64(2), []byte("ok")).stream(), errBadStream},
	)
	// The install log: once, in the final phase, within its limit, which
	// is checked before anything is allocated for it.
	final := func() *wire { return newWire().pass(1, phaseFinal) }
	cases = append(cases,
		tc{"install log over the limit", final().rec(recInstallLog, uint64(maxInstallLog+1), []byte("log")).stream(), errBadStream},
		tc{"install log of 2^62 bytes", final().rec(recInstallLog, uint64(1<<62)).stream(), errBadStream},
		tc{"install log claims the limit and ends", final().rec(recInstallLog, uint64(maxInstallLog), []byte("log")).stream(), ErrSourceGone},
		tc{"install log in an online pass", newWire().pass(1, phaseOnline).rec(recInstallLog, uint64(2), []byte("ok")).stream(), errBadStream},
		tc{"install log before any pass", newWire().rec(recInstallLog, uint64(2), []byte("ok")).stream(), errBadStream},
		tc{"install log twice", final().rec(recInstallLog, uint64(2), []byte("ok")).rec(recInstallLog, uint64(0)).stream(), errBadStream},
	)
	for _, name := range escapes {
		cases = append(cases,
			tc{"dir " + name, newWire().pass(1, phaseOnline).rec(recDir, name, uint64(0o755), int64(0)).stream(), errBadStream},
			tc{"file " + name, newWire().pass(1, phaseOnline).file(name, "pwned").stream(), errBadStream},
			tc{"link " + name, newWire().pass(1, phaseOnline).rec(recLink, name, "target", int64(0)).stream(), errBadStream},
			tc{"delete " + name, newWire().pass(1, phaseOnline).rec(recDelete, name).stream(), errBadStream},
			tc{"manifest " + name, newWire().pass(1, phaseFinal).rec(recManifest, byte('d'), name, uint64(0o755), int64(0), uint64(0)).stream(), errBadStream},
		)
	}
	// Links the stream makes point anywhere; what is written through them
	// must still land inside the root (the link is replaced), and the
	// stream then ends early. A delete below a link is not followed
	// through it: nothing is there to delete, and the stream ends early.
	for _, target := range []string{"../outside", "../../", "/", "/tmp"} {
		cases = append(cases,
			tc{"file through a link to " + target, newWire().pass(1, phaseOnline).rec(recLink, "esc", target, int64(0)).
				file("esc/pwned", "pwned").stream(), ErrSourceGone},
			tc{"dir through a link to " + target, newWire().pass(1, phaseOnline).rec(recLink, "esc", target, int64(0)).
				rec(recDir, "esc/sub", uint64(0o777), int64(0)).stream(), ErrSourceGone},
			tc{"delete through a link to " + target, newWire().pass(1, phaseOnline).rec(recLink, "esc", target, int64(0)).
				rec(recDelete, "esc/canary").stream(), ErrSourceGone},
			tc{"manifest check through a link to " + target, newWire().pass(1, phaseFinal).rec(recLink, "esc", target, int64(0)).
				rec(recManifest, byte('d'), "esc", uint64(0o777), int64(0), uint64(0)).rec(recEnd, uint64(1)).stream(), ErrManifestMismatch},
		)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ar := newArena(t)
			var err error
			if n := allocated(func() { err = ar.apply(t, c.stream) }); n > maxApplyAlloc {
				t.Errorf("the stream made the target allocate %d MiB", n>>20)
			}
			if !errors.Is(err, c.want) {
				t.Errorf("got %v, want %v", err, c.want)
			}
			ar.checkOutside(t)
			if _, err := os.Stat(filepath.Join(ar.root, "esc", "pwned")); err == nil {
				if fi, _ := os.Lstat(filepath.Join(ar.root, "esc")); fi.Mode()&os.ModeSymlink != 0 {
					t.Error("a file was written through a link")
				}
			}
		})
	}
}

// zstdChunk compresses raw into one chunk that claims rawLen bytes.
func zstdChunk(raw []byte, rawLen uint64) []byte {
	enc, _ := zstd.NewWriter(nil)
	defer enc.Close()
	z := enc.EncodeAll(raw, nil)
	return cat(header(codecZstd, rawLen, uint64(len(z))), z)
}

// zstdFrames is one chunk of n zstd frames of size zeros each (a few
// bytes each), claiming rawLen bytes.
func zstdFrames(n, size int, rawLen uint64) []byte {
	enc, _ := zstd.NewWriter(nil)
	defer enc.Close()
	var z []byte
	for range n {
		z = enc.EncodeAll(make([]byte, size), z)
	}
	return cat(header(codecZstd, rawLen, uint64(len(z))), z)
}

// zstdWindow is one chunk of a streamed zstd frame (no content size) of
// size zeros with the given window, claiming rawLen bytes.
func zstdWindow(window, size int, rawLen uint64) []byte {
	var z bytes.Buffer
	enc, _ := zstd.NewWriter(&z, zstd.WithWindowSize(window))
	_, _ = enc.Write(make([]byte, size))
	_ = enc.Close()
	return cat(header(codecZstd, rawLen, uint64(z.Len())), z.Bytes())
}

// Over HTTP, as the source sends it (chunked, the body's end after the end
// record), the stream ends where the end record says: the target's check
// that nothing follows sees the body's end.
func TestLiveWireOverHTTPEndsAtTheEndRecord(t *testing.T) {
	src := validTree(t)
	ar := newArena(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := ar.applyFrom(t, r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
		}
	}))
	defer srv.Close()
	cw, err := newChunkWriter("auto", nil)
	must(t, err)
	sent := make(chan error, 1)
	go func() { sent <- sendLive(t, src, cw) }()
	res, err := http.Post(srv.URL, LiveContentType, cw.body())
	must(t, err)
	msg, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	must(t, <-sent)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("%s: %s", res.Status, msg)
	}
	want, _ := tree.Snapshot(src)
	got, _ := tree.Snapshot(ar.root)
	if d := tree.Diff(want, got); d != "" {
		t.Fatal(d)
	}
}

// A valid stream followed by more records: nothing follows the end record
// (docs/live-transfers.md), so the trailing records are never applied.
func TestLiveWireNothingAfterTheEnd(t *testing.T) {
	stream := encodeLive(t, validTree(t), "none")
	late := newWire().pass(3, phaseOnline).file("late", "x").buf.Bytes()
	ar := newArena(t)
	err := ar.apply(t, cat(stream, frameNone(late)))
	if !errors.Is(err, errBadStream) {
		t.Errorf("got %v, want a refused stream", err)
	}
	if _, err := os.Lstat(filepath.Join(ar.root, "late")); err == nil {
		t.Error("a record after the end was applied")
	}
	ar.checkOutside(t)
}

// FuzzLiveWireApply feeds the target anything: it must not panic, must
// allocate within its limits, and must leave everything beside the root as
// it was. The seeds are valid streams of the encoder (raw and compressed)
// and the hostile shapes of TestLiveWireHostileStreamsFail.
func FuzzLiveWireApply(f *testing.F) {
	src := validTree(f)
	f.Add(encodeLive(f, src, "none"))
	f.Add(encodeLive(f, src, "zstd"))
	f.Add(newWire().pass(1, phaseOnline).rec(recLink, "esc", "../outside", int64(0)).file("esc/canary", "pwned").stream())
	f.Add(newWire().pass(1, phaseFinal).rec(recLink, "esc", "../outside", int64(0)).
		rec(recManifest, byte('d'), "esc", uint64(0o777), int64(0), uint64(0)).rec(recEnd, uint64(1)).stream())
	f.Add(newWire().pass(1, phaseOnline).rec(recDelete, "../outside/canary").stream())
	f.Add(newWire().pass(1, phaseOnline).rec(recFile, "big", uint64(0o644), int64(0), uint64(1<<40), []byte("abc")).stream())
	f.Add(encodeLiveWith(f, newLiveSender(context.Background(), tree.Open(f, src), LiveVersion, installLogFile(f, "installed\n")), "none"))
	f.Add(newWire().pass(1, phaseFinal).rec(recInstallLog, uint64(maxInstallLog+1)).stream())
	f.Add(newWire().pass(1, phaseOnline).rec(recInstallLog, uint64(2), []byte("ok")).stream())
	f.Add(newWire().rec(recSnapshot, testRepoID, "transfer-"+uuid.NewString()).rec(recSeed, "a", uint64(0o644), int64(0), uint64(1)).stream())
	f.Add(newWire().rec(recSnapshot, testRepoID, "transfer-"+uuid.NewString()).pass(1, phaseFinal).rec(recEnd, uint64(0)).stream())
	f.Add(newWire().pass(1, phaseFinal).rec(recInstallLog, uint64(2), []byte("ok")).rec(recInstallLog, uint64(0)).stream())
	// Version 4: sparse files and hard links, valid and hostile.
	f.Add(encodeLive(f, sparseLinkTree(f, 16<<20), "none"))
	for _, c := range hostileV4Streams() {
		f.Add(c.stream)
	}
	f.Fuzz(func(t *testing.T, stream []byte) {
		ar := newArena(t)
		if n := allocated(func() { _ = ar.apply(t, stream) }); n > maxApplyAlloc {
			t.Errorf("a %d-byte stream made the target allocate %d MiB", len(stream), n>>20)
		}
		ar.checkOutside(t)
	})
}

// FuzzLiveWireChunks fuzzes the chunk layer alone (no file system, so many
// more inputs a second): framing, both codecs and the magic. Reading never
// panics, allocates within the limits, and yields only what the chunks
// claim.
func FuzzLiveWireChunks(f *testing.F) {
	src := validTree(f)
	f.Add(encodeLive(f, src, "none"))
	f.Add(encodeLive(f, src, "zstd"))
	f.Add(zstdChunk([]byte(liveMagic+"P\x01\x01"), 16))
	f.Add(cat(header(codecNone, maxChunk, maxChunk), []byte(liveMagic)))
	f.Fuzz(func(t *testing.T, stream []byte) {
		var n int64
		if a := allocated(func() {
			cr, err := newChunkReader(bytes.NewReader(stream))
			if err != nil {
				t.Fatal(err)
			}
			defer cr.Close()
			n, _ = io.Copy(io.Discard, cr)
		}); a > maxApplyAlloc {
			t.Errorf("a %d-byte stream made the reader allocate %d MiB", len(stream), a>>20)
		}
		// Every chunk holds at most maxChunk bytes and costs at least
		// three bytes of frame.
		if n > int64(len(stream)/3+1)*maxChunk {
			t.Errorf("a %d-byte stream yielded %d bytes", len(stream), n)
		}
	})
}

// installLogFile writes an install log and returns its path.
func installLogFile(tb testing.TB, content string) string {
	tb.Helper()
	p := filepath.Join(tb.TempDir(), "install.log")
	must(tb, os.WriteFile(p, []byte(content), 0o600))
	return p
}

// From version 3 the stream carries the end of the install log; the target
// keeps exactly what was sent, and the files arrive as without it.
func TestLiveWireCarriesTheInstallLog(t *testing.T) {
	src := validTree(t)
	want, _ := tree.Snapshot(src)
	long := "first line, past the limit\n" + strings.Repeat("x", maxInstallLog-len("the last line\n")) + "the last line\n"
	for _, tc := range []struct{ name, log, want string }{
		{"small", "Wharf installation log\ninstalled\n", "Wharf installation log\ninstalled\n"},
		{"empty", "", ""},
		{"over the limit: its end", long, long[len(long)-maxInstallLog:]},
	} {
		for _, mode := range []string{"none", "zstd"} {
			ls := newLiveSender(context.Background(), tree.Open(t, src), LiveVersion, installLogFile(t, tc.log))
			ar := newArena(t)
			a, err := ar.applyVersion(t, bytes.NewReader(encodeLiveWith(t, ls, mode)), LiveVersion)
			if err != nil {
				t.Fatalf("%s, %s: %v", tc.name, mode, err)
			}
			if a.installLog == nil || string(a.installLog) != tc.want {
				t.Fatalf("%s, %s: the target kept %d bytes of install log, want %d", tc.name, mode, len(a.installLog), len(tc.want))
			}
			got, _ := tree.Snapshot(ar.root)
			if d := tree.Diff(want, got); d != "" {
				t.Fatalf("%s, %s: %s", tc.name, mode, d)
			}
			ar.checkOutside(t)
		}
	}
	// No log on the source: no record, nothing kept.
	ls := newLiveSender(context.Background(), tree.Open(t, src), LiveVersion, filepath.Join(t.TempDir(), "missing.log"))
	a, err := newArena(t).applyVersion(t, bytes.NewReader(encodeLiveWith(t, ls, "none")), LiveVersion)
	if err != nil || a.installLog != nil {
		t.Fatalf("no log on the source: %v, kept %q", err, a.installLog)
	}
}

// A version-2 target knows no install log record: the record in a version-2
// stream is a bad stream.
func TestLiveWireVersion2RefusesTheInstallLog(t *testing.T) {
	stream := newWire().pass(1, phaseFinal).rec(recInstallLog, uint64(2), []byte("ok")).rec(recEnd, uint64(0)).stream()
	if _, err := newArena(t).applyVersion(t, bytes.NewReader(stream), 2); !errors.Is(err, errBadStream) {
		t.Fatalf("version 2: got %v, want a bad stream", err)
	}
	if _, err := newArena(t).applyVersion(t, bytes.NewReader(stream), 3); err != nil {
		t.Fatalf("version 3: %v", err)
	}
}

// The source picks the newest version both sides speak; against a target
// that offers version 2 only, it sends no install log record (which that
// target would refuse), and the transfer works.
func TestLiveNegotiationPicksTheNewestCommonVersion(t *testing.T) {
	for _, tc := range []struct {
		offer Offer
		want  int
	}{
		{Offer{Protocol: LiveProtocol, Versions: []int{2}}, 2},
		{Offer{Protocol: LiveProtocol, Versions: []int{2, 3}}, 3},
		{Offer{Protocol: LiveProtocol, Versions: []int{3, 2}}, 3},
		{Offer{Protocol: LiveProtocol, Versions: []int{2, 3, 4}}, 4},
		{Offer{Protocol: LiveProtocol, Versions: []int{2, 3, 4, 5}}, 4},
		{Offer{Protocol: LiveProtocol, Versions: []int{1}}, 0},
		{Offer{Protocol: LiveProtocol, Versions: []int{4}}, 4},
		{Offer{Protocol: LiveProtocol, Versions: []int{5}}, 0},
		{Offer{Protocol: LiveProtocol}, 0},
		{Offer{Protocol: "other", Versions: []int{2, 3}}, 0},
	} {
		if got := chooseVersion(tc.offer); got != tc.want {
			t.Errorf("offer %v: version %d, want %d", tc.offer, got, tc.want)
		}
	}
	if got := LiveOffer().Versions; !slices.Equal(got, []int{2, 3, 4, 5}) {
		t.Errorf("this build offers %v, want [2 3 4 5]", got)
	}

	v2 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"protocol":"wharf-live-transfer","versions":[2],"compression":["zstd","none"]}`)
	}))
	defer v2.Close()
	svc := &Service{opts: Options{Client: v2.Client()}}
	_, version, ok := svc.negotiate(context.Background(), v2.URL, "Bearer x")
	if !ok || version != 2 {
		t.Fatalf("a version-2 target: ok %v, version %d", ok, version)
	}
	src := validTree(t)
	ls := newLiveSender(context.Background(), tree.Open(t, src), version, installLogFile(t, "installed\n"))
	ar := newArena(t)
	if _, err := ar.applyVersion(t, bytes.NewReader(encodeLiveWith(t, ls, "none")), version); err != nil {
		t.Fatalf("a version-2 target refused the stream: %v", err)
	}
	want, _ := tree.Snapshot(src)
	got, _ := tree.Snapshot(ar.root)
	if d := tree.Diff(want, got); d != "" {
		t.Fatal(d)
	}
}

// The target's table of received files keeps nothing of what the stream
// removed or the manifest checked (issue 33 item 1): files written into a
// directory that a delete record then removes, and a file replaced by a
// directory, leave no entry; after the end record the table is empty.
func TestLiveTargetForgetsRemovedFiles(t *testing.T) {
	w := newWire().pass(1, phaseOnline).rec(recDir, "a", uint64(0o755), int64(0))
	for i := range 100 {
		w.file(fmt.Sprintf("a/sub/f%03d", i), "x")
	}
	w.file("c", "y")
	w.rec(recDelete, "a")
	w.file("b", "z")
	w.pass(2, phaseFinal).rec(recDir, "c", uint64(0o755), int64(7)) // replaces the file c
	sum := func(s string) []byte {
		h := newContentHash()
		_, _ = h.Write([]byte(s))
		b := h.Sum128().Bytes()
		return b[:]
	}
	w.rec(recManifest, byte('f'), "b", uint64(0o644), int64(1e18), uint64(1), sum("z"))
	w.rec(recManifest, byte('d'), "c", uint64(0o755), int64(7), uint64(0))
	a, err := newArena(t).applyVersion(t, bytes.NewReader(w.rec(recEnd, uint64(2)).stream()), LiveVersion)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.sums) != 0 || a.manCount != 2 {
		t.Fatalf("%d entries left in the table of received files, %d manifest entries counted", len(a.sums), a.manCount)
	}
}
