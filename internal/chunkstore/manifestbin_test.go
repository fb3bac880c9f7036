package chunkstore

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// testManifest is a valid manifest with names that are not UTF-8 or hold
// NULs, extreme numbers, and chunks of both extreme lengths.
func testManifest() Manifest {
	paths := []string{
		"world/region/r.0.0.mca", `quote"back\slash`, "nul\x00inside", "tab\there\nnl\x01",
		"ünïcödé/日本", "bad\xff\xfeutf8", strings.Repeat("deep/", 800) + "f", "",
	}
	m := Manifest{
		Version: manifestVersion, Server: "srv-ü", Backup: "b<1>",
		Created: time.Date(2026, 11, 28, 9, 1, 2, 345678901, time.UTC),
		SHA1:    strings.Repeat("0123456789", 4), Bare: true,
		Chunks: []Chunk{{Hash: strings.Repeat("ab", 32), Len: 1}, {Hash: strings.Repeat("0f", 32), Len: maxChunk}},
	}
	m.Size = 1 + maxChunk
	for i, p := range paths {
		m.Files = append(m.Files, File{
			Path: p, Size: int64(i) * 1e9, MtimeNs: -int64(i) - 1<<62, CtimeNs: 1<<63 - 1, Ino: 1<<64 - 1,
			Dev: uint64(i), Mode: 1<<32 - 1, SHA1: "da39a3ee", First: i % 2, Count: 1 - i%2,
		})
	}
	return m
}

// TestManifestRoundTrip: what the writer encodes, ParseManifest gives
// back field for field: a full manifest, one without files, one without
// chunks or files, one not bare.
func TestManifestRoundTrip(t *testing.T) {
	full := testManifest()
	noFiles := full
	noFiles.Files = nil
	empty := Manifest{Version: manifestVersion, Server: "s", Backup: "b", Created: time.Unix(0, 0).UTC(),
		SHA1: full.SHA1, Chunks: []Chunk{}}
	notBare := full
	notBare.Bare = false
	for i, m := range []Manifest{full, noFiles, empty, notBare} {
		b, err := encodeManifestBin(&m, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseManifest(b)
		if err != nil {
			t.Fatalf("manifest %d: %v", i, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("manifest %d reads back as\n%+v\nnot\n%+v", i, got, m)
		}
	}
}

// TestParseManifestReadsJSON: the manifests of version 3 (JSON) that
// earlier Wharfs wrote are read as before. (JSON kept no name that is not
// UTF-8: such a file was read again by every backup; binary keeps it.)
func TestParseManifestReadsJSON(t *testing.T) {
	m := testManifest()
	m.Version = 3
	m.Files = slices.DeleteFunc(m.Files, func(f File) bool { return !utf8.ValidString(f.Path) })
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseManifest(b)
	if err != nil || !reflect.DeepEqual(got, m) {
		t.Fatalf("a version 3 manifest reads back as %+v (%v)", got, err)
	}
}

// TestParseManifestRefusesDamage: a binary manifest cut short anywhere,
// with a byte too many, with counts larger than its bytes can hold, of a
// version below 4, with a file past its chunks or whose chunks do not make
// its size is refused with an
// error (never a panic, never a huge allocation).
func TestParseManifestRefusesDamage(t *testing.T) {
	m := testManifest()
	b, err := encodeManifestBin(&m, nil)
	if err != nil {
		t.Fatal(err)
	}
	for n := range len(b) {
		if _, err := ParseManifest(b[:n]); err == nil {
			t.Fatalf("the manifest cut at byte %d of %d parsed", n, len(b))
		}
	}
	if _, err := ParseManifest(append(b[:len(b):len(b)], 0)); err == nil {
		t.Fatal("a manifest with a byte after its end parsed")
	}
	// The chunk count of m in a manifest made only of its header.
	header := b[:strings.Index(string(b), "b<1>")+len("b<1>")]
	header = binary.AppendVarint(header[:len(header):len(header)], m.Created.UnixNano())
	header = binary.AppendVarint(header, m.Size)
	for _, count := range []uint64{1 << 62, 1 << 40, 2} {
		huge := binary.AppendUvarint(header[:len(header):len(header)], count)
		if _, err := ParseManifest(append(huge, make([]byte, 40)...)); err == nil {
			t.Fatalf("a chunk count of %d in 40 bytes parsed", count)
		}
	}
	old := append([]byte(nil), b...)
	old[len(manifestMagic)] = 3
	if _, err := ParseManifest(old); err == nil {
		t.Fatal("a binary manifest of version 3 parsed")
	}
	outside := testManifest()
	outside.Files[0].First = len(outside.Chunks)
	if b, err := encodeManifestBin(&outside, nil); err != nil {
		t.Fatal(err)
	} else if _, err := ParseManifest(b); err == nil {
		t.Fatal("a manifest with a file past its chunks parsed")
	}
	short := m
	short.Size--
	if b, err := encodeManifestBin(&short, nil); err != nil {
		t.Fatal(err)
	} else if _, err := ParseManifest(b); err == nil {
		t.Fatal("a manifest whose chunks do not make its size parsed")
	}
}

// TestManifestEncodingKnowsEveryField: a field added to Manifest, File or
// Chunk must be added to encodeManifestBin and decodeManifestBin too (they
// write them one by one) and to testManifest.
func TestManifestEncodingKnowsEveryField(t *testing.T) {
	for _, c := range []struct {
		v any
		n int
	}{{Manifest{}, 9}, {File{}, 10}, {Chunk{}, 2}} {
		if got := reflect.TypeOf(c.v).NumField(); got != c.n {
			t.Errorf("%T has %d fields, the binary manifest %d: add the new ones to it and to testManifest", c.v, got, c.n)
		}
	}
}

// BenchmarkEncodeManifest: a manifest the size of the game-server tree's
// (32,000 files, 37,000 chunks), in binary and, as version 3 wrote it,
// in JSON.
func BenchmarkEncodeManifest(b *testing.B) {
	m := Manifest{Version: manifestVersion, Server: "srv", Backup: "b", Created: time.Now(), SHA1: strings.Repeat("0", 40)}
	ids := make([]blobID, 37000)
	for i := range ids {
		ids[i][0], ids[i][1], ids[i][2] = byte(i), byte(i>>8), byte(i>>16)
		m.Chunks = append(m.Chunks, Chunk{Hash: fmt.Sprintf("%x", ids[i]), Len: int64(i + 1)})
	}
	for i := range 32000 {
		m.Files = append(m.Files, File{Path: fmt.Sprintf("world/region/r.%d.%d.mca", i, -i), Size: int64(i) << 12,
			MtimeNs: 1764320000123456789, CtimeNs: 1764320000123456789, Ino: uint64(i) + 1e6, Dev: 2049,
			Mode: 0o100644, First: i, Count: 1})
	}
	b.Run("binary", func(b *testing.B) {
		for b.Loop() {
			enc, err := encodeManifestBin(&m, ids)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(len(enc)), "bytes")
		}
	})
	b.Run("json", func(b *testing.B) {
		for b.Loop() {
			enc, err := json.Marshal(m)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(len(enc)), "bytes")
		}
	})
}
