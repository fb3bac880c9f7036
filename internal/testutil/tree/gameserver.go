package tree

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// GameServer writes the benchmark tree under root: about size bytes of
// game-server-like files (40 % compressible region files of 4-16 MiB, 35 %
// incompressible jars of 1-16 MiB, 25 % small text files of 0.5-15 KiB, tens
// of thousands in 1,000 directories), 200 symbolic links and 200 empty
// directories. It returns the file bytes written and syncs the disk, so
// that writeback does not slow down what is measured next.
func GameServer(root string, size int64) (int64, error) {
	rng := rand.New(rand.NewPCG(1, 2))
	var written int64
	write := func(name string, n int64, gen func([]byte)) error {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		f, err := os.Create(p)
		if err != nil {
			return err
		}
		bw := bufio.NewWriterSize(f, 1<<20)
		buf := make([]byte, 64<<10)
		for left := n; left > 0; {
			k := min(left, int64(len(buf)))
			gen(buf[:k])
			_, _ = bw.Write(buf[:k])
			left -= k
		}
		if err := bw.Flush(); err != nil {
			f.Close()
			return err
		}
		written += n
		mt := time.Unix(1_600_000_000+rng.Int64N(50_000_000), 0)
		if err := f.Close(); err != nil {
			return err
		}
		return os.Chtimes(p, mt, mt)
	}
	random := func(p []byte) {
		for i := 0; i+8 <= len(p); i += 8 {
			v := rng.Uint64()
			for j := range 8 {
				p[i+j] = byte(v >> (8 * j))
			}
		}
	}
	world := func(p []byte) { // chunk-like: runs of a few values with noise
		for i := range p {
			if rng.IntN(16) == 0 {
				p[i] = byte(rng.IntN(256))
			} else {
				p[i] = byte(i / 64 % 7)
			}
		}
	}
	words := strings.Fields("player joined the game left spawn world chunk saved tick lag entity block item true false motd max-players 20 server port enable-command")
	text := func(p []byte) {
		i := 0
		for i < len(p) {
			i += copy(p[i:], words[rng.IntN(len(words))])
			if i < len(p) {
				p[i] = " \n="[rng.IntN(3)]
				i++
			}
		}
	}
	for i := 0; written < size*40/100; i++ {
		if err := write(fmt.Sprintf("world/region/r.%d.%d.mca", i%32, i/32), (4+rng.Int64N(12))<<20, world); err != nil {
			return 0, err
		}
	}
	for i := 0; written < size*75/100; i++ {
		if err := write(fmt.Sprintf("plugins/plugin-%d.jar", i), (1+rng.Int64N(15))<<20, random); err != nil {
			return 0, err
		}
	}
	for i := 0; written < size; i++ {
		if err := write(fmt.Sprintf("data/d%02d/s%02d/file-%d.yml", i%40, i/40%25, i), 512+rng.Int64N(15<<10), text); err != nil {
			return 0, err
		}
	}
	for i := range 200 {
		if err := os.MkdirAll(filepath.Join(root, "empty", strconv.Itoa(i)), 0o750); err != nil {
			return 0, err
		}
		if err := os.Symlink(fmt.Sprintf("../plugins/plugin-%d.jar", i%5), filepath.Join(root, "data", fmt.Sprintf("link-%d", i))); err != nil {
			return 0, err
		}
	}
	syscall.Sync()
	return written, nil
}

// Diff compares two snapshots: "" when equal, else the first differences.
func Diff(a, b map[string]string) string {
	var out []string
	for k, v := range a {
		if w, ok := b[k]; !ok {
			out = append(out, "only in the first: "+k)
		} else if v != w {
			out = append(out, fmt.Sprintf("%s: %s vs %s", k, v, w))
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, "only in the second: "+k)
		}
	}
	sort.Strings(out)
	if len(out) > 5 {
		out = append(out[:5], fmt.Sprintf("and %d more", len(out)-5))
	}
	return strings.Join(out, "\n")
}
