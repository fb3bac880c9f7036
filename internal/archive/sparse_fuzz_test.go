package archive

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"testing"
)

// FuzzSparseMap: parseMap never panics on any bytes, and whatever it
// accepts is ordered, within the real size, and reads back the same once
// formatted again.
func FuzzSparseMap(f *testing.F) {
	f.Add([]byte("2\n0\n10\n100\n0\n"), int64(100))
	f.Add([]byte("1\n0\n512\n"), int64(4096))
	f.Add([]byte("0\n"), int64(0))
	f.Add([]byte("3\n0\n1\n0\n1\n5\n"), int64(10))
	f.Add([]byte("-1\n"), int64(10))
	f.Add([]byte("1\n9223372036854775807\n1\n"), int64(1<<62))
	f.Fuzz(func(t *testing.T, b []byte, realsize int64) {
		blocks := append(b, make([]byte, -len(b)&511)...)
		frags, used, err := parseMap(blocks, realsize)
		if err != nil {
			return
		}
		if used < 1 || used*512 > len(blocks) {
			t.Fatalf("used %d blocks of %d bytes", used, len(blocks))
		}
		var end int64
		for _, fr := range frags {
			if fr.off < end || fr.n < 0 || fr.off+fr.n > realsize {
				t.Fatalf("accepted %+v after %d (real size %d)", fr, end, realsize)
			}
			end = fr.off + fr.n
		}
		text := formatMap(frags)
		again, _, err := parseMap(append(text, make([]byte, -len(text)&511)...), realsize)
		if err != nil || len(again) != len(frags) {
			t.Fatalf("formatted map does not read back: %v", err)
		}
		for i := range frags {
			if again[i] != frags[i] {
				t.Fatalf("fragment %d: %+v, then %+v", i, frags[i], again[i])
			}
		}
	})
}

// FuzzSparseRoundTrip: a sparse entry as Write encodes it, for any
// fragments and name, reads back through Go's reader with the same name,
// size and bytes, and through Extract's own parse of the headers
// (sparseTail, fed the bytes the tar reader consumed) with the same map.
func FuzzSparseRoundTrip(f *testing.F) {
	f.Add([]byte{1, 0, 2, 3}, "dir/file.img", int64(1000))
	f.Add([]byte{}, "empty", int64(0))
	f.Add([]byte{0, 9, 0, 9, 0, 9}, "a/very/long/name/"+string(bytes.Repeat([]byte("x"), 200)), int64(5000))
	f.Fuzz(func(t *testing.T, spec []byte, name string, tail int64) {
		if name == "" || len(name) > 4096 || bytes.IndexByte([]byte(name), 0) >= 0 || bytes.IndexByte([]byte(name), '\n') >= 0 {
			return
		}
		tail = max(0, tail%8192)
		// Fragments from spec: pairs of (hole before, data length).
		var frags []frag
		var off int64
		for i := 0; i+1 < len(spec) && len(frags) < 64; i += 2 {
			off += int64(spec[i]) * 37
			n := int64(spec[i+1]) * 11
			frags = append(frags, frag{off, n})
			off += n
		}
		size := off + tail
		frags = withEnd(frags, size)
		var data bytes.Buffer
		for i, fr := range frags {
			chunk := make([]byte, fr.n)
			for j := range chunk {
				chunk[j] = byte(i + j + 1)
			}
			data.Write(chunk)
		}
		var stream bytes.Buffer
		text := formatMap(frags)
		mapLen := int64(len(text)+511) &^ 511
		physical := mapLen + int64(data.Len())
		stream.Write(sparseHeader(name, 0o640, 1700000000, size, physical))
		stream.Write(text)
		stream.Write(make([]byte, mapLen-int64(len(text))))
		stream.Write(data.Bytes())
		stream.Write(make([]byte, -physical&511+1024))

		tp := &tap{r: bytes.NewReader(stream.Bytes())}
		tp.start()
		tr := tar.NewReader(tp)
		hdr, err := tr.Next()
		tp.stop()
		if err != nil {
			t.Fatalf("Go's reader: %v", err)
		}
		if hdr.Name != name || hdr.Size != size || !isSparse10(hdr) {
			t.Fatalf("Go's reader: %q size %d, want %q size %d", hdr.Name, hdr.Size, name, size)
		}
		got, mapBlocks, sizeField, err := sparseTail(tp.rec, hdr.Size)
		if err != nil || len(got) != len(frags) || int64(mapBlocks)*512 != mapLen {
			t.Fatalf("sparseTail: %v, %d fragments, %d blocks", err, len(got), mapBlocks)
		}
		if s, ok := hdr.PAXRecords["size"]; !ok && sizeField != physical {
			t.Fatalf("size field %d, want %d", sizeField, physical)
		} else if ok && s == "" {
			t.Fatal("empty size record")
		}
		for i := range frags {
			if got[i] != frags[i] {
				t.Fatalf("fragment %d: %+v, want %+v", i, got[i], frags[i])
			}
		}
		content, err := io.ReadAll(tr)
		if err != nil || int64(len(content)) != size {
			t.Fatalf("Go's reader: %d bytes, %v", len(content), err)
		}
		for i, fr := range frags {
			for j := int64(0); j < fr.n; j++ {
				if content[fr.off+j] != byte(i+int(j)+1) {
					t.Fatalf("byte %d of fragment %d differs", j, i)
				}
			}
		}
		if _, err := tr.Next(); err != io.EOF {
			t.Fatalf("after the entry: %v", err)
		}
	})
}

// sparseSeeds are tar streams with sparse entries for FuzzExtractTar: a
// sparse file and a hard link to it, one whose name leads out, and one
// whose map claims more data than the entry holds.
func sparseSeeds(t testing.TB) [][]byte {
	entry := func(name string, size int64, frags []frag, data []byte) []byte {
		text := formatMap(frags)
		mapLen := int64(len(text)+511) &^ 511
		physical := mapLen + int64(len(data))
		out := sparseHeader(name, 0o644, 1600000000, size, physical)
		out = append(out, text...)
		out = append(out, make([]byte, mapLen-int64(len(text)))...)
		out = append(out, data...)
		return append(out, make([]byte, -physical&511)...)
	}
	closeWith := func(raw []byte, hdrs ...*tar.Header) []byte {
		buf := bytes.NewBuffer(raw)
		tw := tar.NewWriter(buf)
		for _, h := range hdrs {
			if err := tw.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	data := bytes.Repeat([]byte("d"), 100)
	return [][]byte{
		closeWith(entry("s.img", 1<<20, []frag{{4096, 100}, {1 << 20, 0}}, data),
			&tar.Header{Typeflag: tar.TypeLink, Name: "h", Linkname: "s.img", Mode: 0o644}),
		closeWith(entry("../s.img", 1<<20, []frag{{0, 100}}, data)),
		closeWith(entry("short.img", 1<<40, []frag{{0, 100}, {1 << 30, 1 << 20}}, data)),
	}
}

// TestExtractRefusesFreeZeros: sparse entries whose holes Extract would
// have to write or read as zeros are refused at once: a GNU 0.1 sparse
// entry of 1 TiB (Go's reader expands it), and an integrity entry made
// sparse (its check would read 1 TiB of zeros as one line). Control: the
// same 0.1 entry is 1 TiB to Go's reader.
func TestExtractRefusesFreeZeros(t *testing.T) {
	var raw bytes.Buffer
	recs := paxRecord(nil, "GNU.sparse.size", "1099511627776")
	recs = paxRecord(recs, "GNU.sparse.numblocks", "1")
	recs = paxRecord(recs, "GNU.sparse.map", "0,1")
	raw.Write(ustarBlock("PaxHeaders.0/big", 0o644, 1600000000, int64(len(recs)), 'x'))
	raw.Write(recs)
	raw.Write(make([]byte, -len(recs)&511))
	raw.Write(ustarBlock("big", 0o644, 1600000000, 1, '0'))
	raw.Write(append([]byte("x"), make([]byte, 511+1024)...))
	hdr, err := tar.NewReader(bytes.NewReader(raw.Bytes())).Next()
	if err != nil || hdr.Size != 1<<40 {
		t.Fatalf("control: Go's reader sees %+v, %v", hdr, err)
	}
	manifest := append(sparseHeader(ManifestName, 0o644, 1600000000, 1<<40, 512), append([]byte("0\n"), make([]byte, 510+1024)...)...)
	for name, stream := range map[string][]byte{"0.1": raw.Bytes(), "manifest": manifest} {
		var gz bytes.Buffer
		w := gzip.NewWriter(&gz)
		w.Write(stream)
		w.Close()
		_, err := Extract(context.Background(), &gz, newFS(t, t.TempDir()).Trusted(), ExtractOptions{})
		if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrChecksumMismatch) {
			t.Errorf("%s: Extract = %v, want a refusal", name, err)
		}
	}
}
