package chunkstore

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/wharf/wharf/internal/testutil/tree"
)

// benchTree is the chunks of a 64 MiB game-server tree (the test tree's
// mix of text, region files and jars), concatenated file by file.
func benchTree(b *testing.B) [][]byte {
	b.Helper()
	dir := b.TempDir()
	if _, err := tree.GameServer(dir, 64<<20); err != nil {
		b.Fatal(err)
	}
	var chunks [][]byte
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		data, _ := os.ReadFile(p)
		for len(data) > 0 {
			n := cutPoint(data)
			chunks = append(chunks, data[:n])
			data = data[n:]
		}
		return nil
	})
	return chunks
}

func total(cs [][]byte) (n int64) {
	for _, c := range cs {
		n += int64(len(c))
	}
	return n
}

// BenchmarkCutPoint: FastCDC over 64 MiB of random bytes.
func BenchmarkCutPoint(b *testing.B) {
	data := make([]byte, 64<<20)
	for i := range data {
		data[i] = byte(i*2654435761>>13) ^ byte(i>>7)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		for d := data; len(d) > 0; {
			d = d[cutPoint(d):]
		}
	}
}

// BenchmarkCodecs: the blob codec candidates on the test tree's chunks;
// ratio-% is stored/plain.
func BenchmarkCodecs(b *testing.B) {
	cs := benchTree(b)
	zenc, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	zdec, _ := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
	codecs := []struct {
		name string
		enc  func([]byte) []byte
		dec  func(z []byte, n int) ([]byte, error)
	}{
		{"s2", encodeBlob, decodeBlob},
		{"zstd-fastest", func(p []byte) []byte { return zenc.EncodeAll(p, nil) }, func(z []byte, n int) ([]byte, error) { return zdec.DecodeAll(z, make([]byte, 0, n)) }},
		{"sha256", func(p []byte) []byte { h := sha256.Sum256(p); return h[:] }, nil},
	}
	for _, c := range codecs {
		b.Run(c.name+"/encode", func(b *testing.B) {
			b.SetBytes(total(cs))
			var out int64
			for b.Loop() {
				out = 0
				for _, p := range cs {
					out += int64(len(c.enc(p)))
				}
			}
			b.ReportMetric(float64(out)/float64(total(cs))*100, "ratio-%")
		})
		if c.dec == nil {
			continue
		}
		zs := make([][]byte, len(cs))
		for i, p := range cs {
			zs[i] = c.enc(p)
		}
		b.Run(c.name+"/decode", func(b *testing.B) {
			b.SetBytes(total(cs))
			for b.Loop() {
				for i, z := range zs {
					if p, err := c.dec(z, len(cs[i])); err != nil || !bytes.Equal(p, cs[i]) {
						b.Fatalf("%s does not round-trip: %v", c.name, err)
					}
				}
			}
		})
	}
}

// benchFiles is the files of a 64 MiB game-server tree, as a backup's
// stream gives them to the writer (one segment each).
func benchFiles(b *testing.B) [][]byte {
	b.Helper()
	dir := b.TempDir()
	if _, err := tree.GameServer(dir, 64<<20); err != nil {
		b.Fatal(err)
	}
	var files [][]byte
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			data, _ := os.ReadFile(p)
			files = append(files, data)
		}
		return nil
	})
	return files
}

// writeBenchBackup writes files as one backup, a segment each, in writes
// of at most a MiB (the walk's).
func writeBenchBackup(b *testing.B, s *Store, backup string, files [][]byte) {
	w := s.NewWriter("srv", backup)
	defer w.Abort()
	for _, f := range files {
		for d := f; len(d) > 0; {
			n := min(len(d), 1<<20)
			if _, err := w.Write(d[:n]); err != nil {
				b.Fatal(err)
			}
			d = d[n:]
		}
		if err := w.Cut(); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := w.Commit(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkWriter: the writer's pipeline (chunking, hashing, compression,
// packing, local stores) over the 64 MiB test tree: a first backup into
// an empty repository, and a second one whose chunks are all stored.
func BenchmarkWriter(b *testing.B) {
	files := benchFiles(b)
	var size int64
	for _, f := range files {
		size += int64(len(f))
	}
	b.Run("first", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			b.StopTimer()
			dir, err := os.MkdirTemp(b.TempDir(), "repo")
			if err != nil {
				b.Fatal(err)
			}
			s, err := Open(dir)
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			writeBenchBackup(b, s, "b1", files)
			b.StopTimer()
			s.Close()
			os.RemoveAll(dir)
			b.StartTimer()
		}
	})
	b.Run("second", func(b *testing.B) {
		s, err := Open(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		writeBenchBackup(b, s, "b0", files)
		b.SetBytes(size)
		i := 0
		for b.Loop() {
			i++
			writeBenchBackup(b, s, fmt.Sprintf("b%d", i), files)
		}
	})
}
