package chunkstore

import (
	"bytes"
	"crypto/rand"
	"testing"
)

// A random chunk is stored raw, a compressible one compressed; both
// round-trip.
func TestEncodeBlobKinds(t *testing.T) {
	random := make([]byte, 256<<10)
	_, _ = rand.Read(random)
	text := bytes.Repeat([]byte("level-name=world\nmotd=A Minecraft Server\n"), 6000)
	for _, c := range []struct {
		name  string
		plain []byte
		kind  byte
	}{{"random", random, blobRaw}, {"text", text, blobS2}, {"small random", random[:8<<10], blobRaw}} {
		b := encodeBlob(c.plain)
		if b[0] != c.kind {
			t.Errorf("%s: kind %d, want %d", c.name, b[0], c.kind)
		}
		if p, err := decodeBlob(b, len(c.plain)); err != nil || !bytes.Equal(p, c.plain) {
			t.Errorf("%s: does not round-trip: %v", c.name, err)
		}
	}
}

// addRaw stores the same pack bytes as add of the raw blob encodeBlob
// makes of an incompressible chunk.
func TestPackAddRaw(t *testing.T) {
	plain := make([]byte, 200<<10)
	_, _ = rand.Read(plain)
	var a, b packer
	ea := a.add(blobID{1}, encodeBlob(plain), len(plain))
	eb := b.addRaw(blobID{1}, plain)
	pa, _ := a.finish()
	pb, _ := b.finish()
	if ea != eb || !bytes.Equal(pa, pb) {
		t.Fatalf("addRaw: entry %+v, want %+v; same pack bytes: %v", eb, ea, bytes.Equal(pa, pb))
	}
}
