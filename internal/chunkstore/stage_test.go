package chunkstore

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// stageRecorder is a local backend that records the repository's changes
// in the order they became visible or were staged.
type stageRecorder struct {
	*LocalBackend
	mu  sync.Mutex
	log []string
}

func (r *stageRecorder) note(s string) {
	r.mu.Lock()
	r.log = append(r.log, s)
	r.mu.Unlock()
}

func (r *stageRecorder) Put(ctx context.Context, name string, data []byte) error {
	r.note("put " + name)
	return r.LocalBackend.Put(ctx, name, data)
}

func (r *stageRecorder) Stage(ctx context.Context, name string, data []byte) (Staged, error) {
	st, err := r.LocalBackend.Stage(ctx, name, data)
	if err == nil {
		r.note("stage " + name)
	}
	return recordedStaged{st, r, name}, err
}

type recordedStaged struct {
	Staged
	r    *stageRecorder
	name string
}

func (s recordedStaged) Publish() error {
	s.r.note("publish " + s.name)
	return s.Staged.Publish()
}

// Over a Stager, a commit stages its last pack, its index and its manifest
// before it publishes any of them, then publishes the pack, the index and
// the manifest in that order; nothing it staged stays behind, and the
// backup reads back.
func TestCommitPublishesPackIndexManifestInOrder(t *testing.T) {
	lb, err := NewLocalBackend(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r := &stageRecorder{LocalBackend: lb}
	s, err := OpenBackend(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	data := tarOf(t, randomFiles(40, 256<<10, 7))
	m, err := s.Write("srv", "b1", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	var tail []string
	for _, l := range r.log {
		if !strings.HasPrefix(l, "put ") { // the config, the full packs
			tail = append(tail, l)
		}
	}
	kind := func(l string) string {
		_, name, _ := strings.Cut(l, " ")
		k, _, _ := strings.Cut(name, "/")
		return strings.Fields(l)[0] + " " + k
	}
	var got []string
	for _, l := range tail {
		got = append(got, kind(l))
	}
	// The three stages in any order, then the publishes in this one.
	if len(got) != 6 || strings.HasPrefix(got[0], "publish") || strings.HasPrefix(got[1], "publish") ||
		strings.HasPrefix(got[2], "publish") ||
		strings.Join(got[3:], ",") != "publish packs,publish index,publish snapshots" {
		t.Fatalf("the commit's changes: %v", tail)
	}
	err = filepath.WalkDir(lb.Dir(), func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), ".tmp-") {
			t.Errorf("a staged file stayed behind: %s", p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	got2, err := io.ReadAll(s.Reader(m))
	if err != nil || !bytes.Equal(got2, data) {
		t.Fatalf("the backup reads back wrong: %v", err)
	}
}
