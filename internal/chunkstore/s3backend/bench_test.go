package s3backend

import (
	"context"
	"fmt"
	"testing"

	"github.com/wharf/wharf/internal/testutil/objectstore"
)

// BenchmarkPack puts and reads back pack-sized objects (16 MiB) and reads
// one 128 KiB blob out of one, on a local versitygw: the cost of the
// backend itself (signing, Content-MD5, copies), not of a network.
func BenchmarkPack(b *testing.B) {
	if _, err := objectstore.Binary(); err != nil {
		b.Skip(err)
	}
	s := objectstore.Start(b)
	be, err := New(options(s, "bench"))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	data := make([]byte, 16<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	b.Run("Put16MiB", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for i := 0; b.Loop(); i++ {
			if err := be.Put(ctx, fmt.Sprintf("packs/%d", i%4), data); err != nil {
				b.Fatal(err)
			}
		}
	})
	if err := be.Put(ctx, "packs/read", data); err != nil {
		b.Fatal(err)
	}
	b.Run("Get16MiB", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if _, err := be.Get(ctx, "packs/read", 0, -1); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("GetBlob128KiB", func(b *testing.B) {
		b.SetBytes(128 << 10)
		for b.Loop() {
			if _, err := be.Get(ctx, "packs/read", 5<<20, 128<<10); err != nil {
				b.Fatal(err)
			}
		}
	})
}
