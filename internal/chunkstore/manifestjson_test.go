package chunkstore

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"
)

// TestEncodeManifestIsJSON: encodeManifest writes what json.Marshal does,
// for paths that need escaping or are not UTF-8, extreme numbers, a bare
// manifest, a manifest without files and one without chunks.
func TestEncodeManifestIsJSON(t *testing.T) {
	paths := []string{
		"world/region/r.0.0.mca", `quote"back\slash`, "<html>&amp;", "tab\there\nnl\x01",
		"ünïcödé/日本", "bad\xff\xfeutf8", "line\u2028sep\u2029", "", "del\x7f",
	}
	m := Manifest{
		Version: manifestVersion, Server: "srv-ü", Backup: "b<1>",
		Created: time.Date(2026, 11, 28, 9, 1, 2, 345678900, time.UTC),
		Size:    1<<62 + 3, SHA1: "0123456789abcdef",
		Chunks: []Chunk{{Hash: "ab", Len: 1}, {Hash: "cd", Len: maxChunk}},
	}
	for i, p := range paths {
		m.Files = append(m.Files, File{
			Path: p, Size: int64(i) * 1e9, MtimeNs: -int64(i), CtimeNs: 1<<63 - 1, Ino: 1<<64 - 1,
			Dev: uint64(i), Mode: 0o100644, SHA1: "da39a3ee", First: i, Count: -i,
		})
	}
	bare := m
	bare.Bare = true
	bare.Files = append([]File{{Path: "no-sha1"}}, m.Files...)
	for _, mm := range []Manifest{m, bare, {Version: 3, Chunks: m.Chunks}, {Files: m.Files}, {}} {
		want, err := json.Marshal(mm)
		if err != nil {
			t.Fatal(err)
		}
		got, err := encodeManifest(&mm)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("encodeManifest:\n%s\njson.Marshal:\n%s", got, want)
		}
	}
}

// BenchmarkEncodeManifest: a manifest the size of the game-server tree's
// (32,000 files, 70,000 chunks), through encodeManifest and json.Marshal.
func BenchmarkEncodeManifest(b *testing.B) {
	m := Manifest{Version: manifestVersion, Server: "srv", Backup: "b", Created: time.Now()}
	for i := range 70000 {
		m.Chunks = append(m.Chunks, Chunk{Hash: fmt.Sprintf("%064x", i*7919), Len: int64(i + 1)})
	}
	for i := range 32000 {
		m.Files = append(m.Files, File{Path: fmt.Sprintf("world/region/r.%d.%d.mca", i, -i), Size: int64(i) << 12,
			MtimeNs: 1764320000123456789, CtimeNs: 1764320000123456789, Ino: uint64(i) + 1e6, Dev: 2049,
			Mode: 0o100644, SHA1: fmt.Sprintf("%040x", i), First: 2 * i, Count: 2})
	}
	b.Run("encodeManifest", func(b *testing.B) {
		for b.Loop() {
			if _, err := encodeManifest(&m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		for b.Loop() {
			if _, err := json.Marshal(m); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestEncodeManifestKnowsEveryField: a field added to Manifest, File or
// Chunk must be added to encodeManifest too (it writes them one by one).
func TestEncodeManifestKnowsEveryField(t *testing.T) {
	for _, c := range []struct {
		v any
		n int
	}{{Manifest{}, 9}, {File{}, 10}, {Chunk{}, 2}} {
		if got := reflect.TypeOf(c.v).NumField(); got != c.n {
			t.Errorf("%T has %d fields, encodeManifest writes %d: add the new ones to it and to TestEncodeManifestIsJSON", c.v, got, c.n)
		}
	}
}
