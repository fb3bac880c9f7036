package transfer

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/wharf/wharf/internal/testutil/tree"
)

// BenchmarkLiveRoundTrip streams the game-server tree (256 MiB;
// WHARF_BENCH_TREE_MB changes it) through the live wire in-process, one
// pass and an empty final pass: the pipeline without HTTP or daemons.
func BenchmarkLiveRoundTrip(b *testing.B) {
	mb := int64(256)
	if v, err := strconv.Atoi(os.Getenv("WHARF_BENCH_TREE_MB")); err == nil && v > 0 {
		mb = int64(v)
	}
	src := b.TempDir()
	size, err := tree.GameServer(src, mb<<20)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(size)
	for _, mode := range []string{"none", "zstd", "auto"} {
		b.Run(mode, func(b *testing.B) {
			b.SetBytes(size)
			for i := 0; i < b.N; i++ {
				dst := filepath.Join(b.TempDir(), "dst")
				if err := os.Mkdir(dst, 0o755); err != nil {
					b.Fatal(err)
				}
				if err := liveRoundTripB(b, src, dst, mode); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
