// Package backendtest is the conformance suite of chunkstore.Backend: every
// implementation (local directory, S3 bucket) runs it, so that the
// repository can rely on the same behaviour from each.
//
// The contract it checks, beyond the interface's comments:
//   - Get of a range that runs past the end of the object, or at an offset
//     past its end, is an error that is not fs.ErrNotExist; a zero-length
//     Get of an existing object returns no bytes and no error;
//   - List returns names relative to the backend (as they were Put), sorted,
//     with their sizes and a non-zero ModTime; an empty prefix lists all,
//     a prefix nothing starts with lists nothing (no error);
//   - an overwrite replaces the object whole, also between concurrent Puts;
//   - names that are empty, absolute or climb out with ".." are refused.
package backendtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/wharf/wharf/internal/chunkstore"
)

// Run runs every conformance test; newBackend returns an empty Backend of
// its own for each.
func Run(t *testing.T, newBackend func(t *testing.T) chunkstore.Backend) {
	tests := []struct {
		name string
		fn   func(t *testing.T, b chunkstore.Backend)
	}{
		{"PutGetRanges", testPutGetRanges},
		{"PastEnd", testPastEnd},
		{"Missing", testMissing},
		{"EmptyObject", testEmptyObject},
		{"Overwrite", testOverwrite},
		{"ListPrefixesSorted", testList},
		{"DeleteIdempotent", testDelete},
		{"ConcurrentPuts", testConcurrentPuts},
		{"PackSizedObject", testPackSized},
		{"BadNames", testBadNames},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, newBackend(t)) })
	}
}

// payload is n pseudo-random bytes (every byte value), the same for a seed.
func payload(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 42))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func put(t *testing.T, b chunkstore.Backend, name string, data []byte) {
	t.Helper()
	if err := b.Put(context.Background(), name, data); err != nil {
		t.Fatalf("Put(%q, %d bytes): %v", name, len(data), err)
	}
}

func get(t *testing.T, b chunkstore.Backend, name string, off, length int64) []byte {
	t.Helper()
	got, err := b.Get(context.Background(), name, off, length)
	if err != nil {
		t.Fatalf("Get(%q, %d, %d): %v", name, off, length, err)
	}
	return got
}

func testPutGetRanges(t *testing.T, b chunkstore.Backend) {
	data := payload(1, 1000)
	put(t, b, "packs/ab/0001", data)
	for _, r := range []struct{ off, length int64 }{
		{0, -1}, {0, 1000}, {3, 5}, {999, 1}, {0, 1}, {10, -1}, {999, -1}, {500, 500}, {123, 0},
	} {
		want := data[r.off:]
		if r.length >= 0 {
			want = want[:r.length]
		}
		if got := get(t, b, "packs/ab/0001", r.off, r.length); !bytes.Equal(got, want) {
			t.Errorf("Get(off %d, length %d) = %d bytes, want %d (the bytes at that range)", r.off, r.length, len(got), len(want))
		}
	}
}

func testPastEnd(t *testing.T, b chunkstore.Backend) {
	put(t, b, "packs/end", payload(2, 100))
	for _, r := range []struct{ off, length int64 }{{98, 5}, {0, 101}, {150, 1}, {150, -1}, {101, 0}} {
		got, err := b.Get(context.Background(), "packs/end", r.off, r.length)
		if err == nil {
			t.Errorf("Get(off %d, length %d) of a 100-byte object = %d bytes, want an error", r.off, r.length, len(got))
		} else if errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Get(off %d, length %d) past the end: %v, an fs.ErrNotExist for an object that exists", r.off, r.length, err)
		}
	}
}

func testMissing(t *testing.T, b chunkstore.Backend) {
	put(t, b, "index/present", []byte("x"))
	for _, r := range []struct{ off, length int64 }{{0, -1}, {0, 10}, {5, 1}, {0, 0}} {
		for _, name := range []string{"index/absent", "nothing/here/at/all", "index/present/below"} {
			_, err := b.Get(context.Background(), name, r.off, r.length)
			if !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("Get(%q, %d, %d) = %v, want an fs.ErrNotExist", name, r.off, r.length, err)
			}
		}
	}
}

func testEmptyObject(t *testing.T, b chunkstore.Backend) {
	put(t, b, "locks/empty", nil)
	if got := get(t, b, "locks/empty", 0, -1); len(got) != 0 {
		t.Fatalf("Get of an empty object = %d bytes", len(got))
	}
	list, err := b.List(context.Background(), "locks/")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Name != "locks/empty" || list[0].Size != 0 {
		t.Fatalf("List = %+v, want locks/empty of 0 bytes", list)
	}
}

func testOverwrite(t *testing.T, b chunkstore.Backend) {
	put(t, b, "snapshots/s1/b.json", payload(3, 5000))
	second := payload(4, 70)
	put(t, b, "snapshots/s1/b.json", second)
	if got := get(t, b, "snapshots/s1/b.json", 0, -1); !bytes.Equal(got, second) {
		t.Fatalf("after an overwrite with 70 bytes, Get = %d bytes, not the second content", len(got))
	}
	list, err := b.List(context.Background(), "snapshots/")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Size != 70 {
		t.Fatalf("List = %+v, want one object of 70 bytes", list)
	}
}

func testList(t *testing.T, b chunkstore.Backend) {
	sizes := map[string]int{
		"packs/00/aa": 10, "packs/01/bb": 11, "packs/0a": 12, "packsx": 13, "index/1": 14,
		"snapshots/srv-1/b1.json": 15, "snapshots/srv-1/b2.json": 16, "snapshots/srv-10/b1.json": 17, "a": 18, "z/z/z/z": 19,
	}
	names := make([]string, 0, len(sizes))
	for n := range sizes {
		names = append(names, n)
	}
	rand.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	for i, n := range names {
		put(t, b, n, payload(uint64(100+i), sizes[n]))
	}
	cases := map[string][]string{
		"":                 sorted(names),
		"packs/":           {"packs/00/aa", "packs/01/bb", "packs/0a"},
		"packs":            {"packs/00/aa", "packs/01/bb", "packs/0a", "packsx"},
		"snapshots/srv-1/": {"snapshots/srv-1/b1.json", "snapshots/srv-1/b2.json"},
		"snapshots/srv-1":  {"snapshots/srv-1/b1.json", "snapshots/srv-1/b2.json", "snapshots/srv-10/b1.json"},
		"nope/":            nil,
		"a":                {"a"},
	}
	for prefix, want := range cases {
		list, err := b.List(context.Background(), prefix)
		if err != nil {
			t.Fatalf("List(%q): %v", prefix, err)
		}
		var got []string
		for _, o := range list {
			got = append(got, o.Name)
			if o.Size != int64(sizes[o.Name]) || o.ModTime.IsZero() {
				t.Errorf("List(%q): %s has size %d, mod time %v; want %d and a time", prefix, o.Name, o.Size, o.ModTime, sizes[o.Name])
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("List(%q) = %q, want %q", prefix, got, want)
		}
	}
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

func testDelete(t *testing.T, b chunkstore.Backend) {
	ctx := context.Background()
	put(t, b, "packs/gone", []byte("bytes"))
	put(t, b, "packs/kept", []byte("other"))
	for i := range 2 { // the second time the object is already gone
		if err := b.Delete(ctx, "packs/gone"); err != nil {
			t.Fatalf("Delete #%d: %v", i+1, err)
		}
	}
	if err := b.Delete(ctx, "packs/never-was"); err != nil {
		t.Fatalf("Delete of an object that never existed: %v", err)
	}
	if _, err := b.Get(ctx, "packs/gone", 0, -1); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Get after Delete = %v, want an fs.ErrNotExist", err)
	}
	list, err := b.List(ctx, "packs/")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Name != "packs/kept" {
		t.Fatalf("List after Delete = %+v, want only packs/kept", list)
	}
}

func testConcurrentPuts(t *testing.T, b chunkstore.Backend) {
	const distinct, same = 16, 8
	var wg sync.WaitGroup
	errs := make(chan error, distinct+same)
	for i := range distinct {
		wg.Go(func() {
			errs <- b.Put(context.Background(), fmt.Sprintf("packs/c/%02d", i), payload(uint64(200+i), 20000+i))
		})
	}
	for i := range same {
		wg.Go(func() { errs <- b.Put(context.Background(), "index/contended", payload(uint64(300+i), 30000+i)) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent Put: %v", err)
		}
	}
	for i := range distinct {
		if got := get(t, b, fmt.Sprintf("packs/c/%02d", i), 0, -1); !bytes.Equal(got, payload(uint64(200+i), 20000+i)) {
			t.Fatalf("packs/c/%02d holds %d bytes, not what was put", i, len(got))
		}
	}
	got := get(t, b, "index/contended", 0, -1)
	if !oneOf(got, same) {
		t.Fatalf("index/contended (%d bytes) is none of the %d contents put at once: a mix", len(got), same)
	}
	if list, err := b.List(context.Background(), "packs/c/"); err != nil || len(list) != distinct {
		t.Fatalf("List = %d objects, %v; want %d", len(list), err, distinct)
	}
}

// oneOf reports whether got is exactly one of the contended contents.
func oneOf(got []byte, same int) bool {
	for i := range same {
		if bytes.Equal(got, payload(uint64(300+i), 30000+i)) {
			return true
		}
	}
	return false
}

func testPackSized(t *testing.T, b chunkstore.Backend) {
	const size = 17 << 20 // a full pack and some
	data := payload(5, size)
	put(t, b, "packs/ff/big", data)
	if got := get(t, b, "packs/ff/big", size-4096, 4096); !bytes.Equal(got, data[size-4096:]) {
		t.Fatal("the last 4 KiB of a 17 MiB object differ")
	}
	if got := get(t, b, "packs/ff/big", 0, -1); !bytes.Equal(got, data) {
		t.Fatalf("the 17 MiB object reads back as %d different bytes", len(got))
	}
}

func testBadNames(t *testing.T, b chunkstore.Backend) {
	ctx := context.Background()
	for _, name := range []string{"", "/etc/passwd", "../outside", "a/../../outside", ".."} {
		if err := b.Put(ctx, name, []byte("x")); err == nil {
			t.Errorf("Put(%q) succeeded, want an error", name)
		}
		if _, err := b.Get(ctx, name, 0, -1); err == nil {
			t.Errorf("Get(%q) succeeded, want an error", name)
		}
	}
	if list, err := b.List(ctx, ""); err != nil || len(list) != 0 {
		t.Fatalf("after refused Puts, List = %+v, %v; want nothing", list, err)
	}
}
