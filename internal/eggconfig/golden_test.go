package eggconfig

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the want/ directories of the golden tests")

// goldenCase is testdata/golden/<name>/case.json.
type goldenCase struct {
	DockerInterface string `json:"docker_interface"`
	Configs         []File `json:"configs"`
	Errors          int    `json:"errors"` // number of errors Apply must return
}

// TestGolden runs every case under testdata/golden: input/ is copied to a fresh server root,
// the case's configs are applied, and the resulting tree must equal want/ byte for byte.
func TestGolden(t *testing.T) {
	cases, err := filepath.Glob("testdata/golden/*/case.json")
	if err != nil || len(cases) == 0 {
		t.Fatalf("no golden cases: %v", err)
	}
	for _, c := range cases {
		dir := filepath.Dir(c)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			raw, err := os.ReadFile(c)
			if err != nil {
				t.Fatal(err)
			}
			var gc goldenCase
			if err := json.Unmarshal(raw, &gc); err != nil {
				t.Fatal(err)
			}
			root := t.TempDir()
			if err := os.CopyFS(root, os.DirFS(filepath.Join(dir, "input"))); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			logger := slog.New(slog.NewTextHandler(&logs, nil))
			errs := Apply(context.Background(), newRootFS(t, root), gc.Configs, Vars{DockerInterface: gc.DockerInterface}, logger)
			if len(errs) != gc.Errors {
				t.Errorf("Apply returned %d errors, want %d: %v", len(errs), gc.Errors, errs)
			}
			got := readTree(t, root)
			wantDir := filepath.Join(dir, "want")
			if *update {
				if err := os.RemoveAll(wantDir); err != nil {
					t.Fatal(err)
				}
				if err := os.CopyFS(wantDir, os.DirFS(root)); err != nil {
					t.Fatal(err)
				}
				return
			}
			want := readTree(t, wantDir)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("tree differs from %s (-want +got):\n%s\nlogs:\n%s", wantDir, diff, logs.String())
			}
		})
	}
}

// readTree returns the regular files under dir by slash path.
func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(rel)] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
