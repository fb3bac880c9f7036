package chunkstore

import (
	"bytes"
	"encoding/json"
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
