package transfer

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"mime/multipart"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wharf/wharf/internal/archive"
	"github.com/wharf/wharf/internal/backup"
)

const (
	testRepo = "0123456789abcdef0123456789abcdef"
	testSum  = "0123456789abcdef0123456789abcdef01234567"
)

func refJSON(repo, manifest, sum string) string {
	return `{"repository":"` + repo + `","manifest":"` + manifest + `","checksum":"` + sum + `"}`
}

func TestParseBackupRef(t *testing.T) {
	for _, good := range []string{testBackup, testBackup + "@node-b", testBackup + "@h-0123456789abcdef0123456789abcdef"} {
		if ref, err := parseBackupRef(testBackup, []byte(refJSON(testRepo, good, testSum))); err != nil || ref.Manifest != good {
			t.Fatalf("parseBackupRef(%q) = %+v, %v", good, ref, err)
		}
	}
	other := "5c0000b2-0000-4000-8000-0000000000b2"
	for _, bad := range []string{
		``, `{}`, `null`, `[]`,
		refJSON(testRepo, other, testSum),
		refJSON(testRepo, other+"@node", testSum),
		refJSON(testRepo, "../"+testBackup, testSum),
		refJSON(testRepo, testBackup+"/../x", testSum),
		refJSON(testRepo, testBackup+"@../x", testSum),
		refJSON(testRepo, testBackup+"@", testSum),
		refJSON(testRepo, testBackup+"@"+strings.Repeat("a", 900), testSum),
		refJSON("../x", testBackup, testSum),
		refJSON(testRepo, testBackup, "xyz"),
		refJSON(testRepo, testBackup, strings.ToUpper(testSum)),
		`{"repository":"` + testRepo + `","manifest":"` + testBackup + `","checksum":"` + testSum + `","server":"x"}`,
		refJSON(testRepo, testBackup, testSum) + refJSON(testRepo, testBackup, testSum),
	} {
		if _, err := parseBackupRef(testBackup, []byte(bad)); !errors.Is(err, ErrBadForm) {
			t.Errorf("parseBackupRef(%q) = %v, want ErrBadForm", bad, err)
		}
	}
}

// FuzzParseBackupRef: another node's reference never panics the target,
// and what it accepts names a manifest of the part's backup, one path
// element.
func FuzzParseBackupRef(f *testing.F) {
	f.Add([]byte(refJSON(testRepo, testBackup, testSum)))
	f.Add([]byte(refJSON(testRepo, testBackup+"@n", testSum)))
	f.Add([]byte(`{"repository":"x","manifest":"../","checksum":""}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ref, err := parseBackupRef(testBackup, b)
		if err != nil {
			return
		}
		if !validRepositoryID(ref.Repository) || !strings.HasPrefix(ref.Manifest, testBackup) || strings.ContainsAny(ref.Manifest, "/\\.\x00") || len(ref.Manifest) > 120 {
			t.Fatalf("accepted %+v", ref)
		}
	})
}

// fakeAdopter knows one manifest: testBackup's, named testBackup, with
// testSum, in testRepo, of testServer.
type fakeAdopter struct{ adopted []string }

func (f *fakeAdopter) CheckBackupReference(_ context.Context, repo, server, id, name, sum string) error {
	switch {
	case repo != testRepo:
		return backup.ErrNotShared
	case server != testServer || id != testBackup || name != testBackup || sum != testSum:
		return backup.ErrBadReference
	}
	return nil
}

func (f *fakeAdopter) AdoptBackupReference(ctx context.Context, repo, server, id, name, sum string) (bool, error) {
	if err := f.CheckBackupReference(ctx, repo, server, id, name, sum); err != nil {
		return false, err
	}
	f.adopted = append(f.adopted, id)
	return true, nil
}

// A reference is checked while the form is read and adopted only at
// commit; a refused one (400: ErrBadForm) adopts nothing, and a node with
// no shared repository refuses the part.
func TestReceiveBackupRefs(t *testing.T) {
	arc, sum := smallArchive(t)
	ref := "repository_backup_" + testBackup
	data := string(tarGz(t, []byte("backup data")))
	cases := []struct {
		name    string
		parts   [][2]string
		noRepo  bool
		want    error
		adopted int
	}{
		{"a good reference", [][2]string{{"archive", arc}, {"checksum", sum}, {ref, refJSON(testRepo, testBackup, testSum)}}, false, nil, 1},
		{"another repository", [][2]string{{"archive", arc}, {"checksum", sum}, {ref, refJSON(strings.Repeat("f", 32), testBackup, testSum)}}, false, ErrBadForm, 0},
		{"a wrong checksum", [][2]string{{"archive", arc}, {"checksum", sum}, {ref, refJSON(testRepo, testBackup, strings.Repeat("0", 40))}}, false, ErrBadForm, 0},
		{"a manifest the repository lacks", [][2]string{{"archive", arc}, {"checksum", sum}, {ref, refJSON(testRepo, testBackup+"@elsewhere", testSum)}}, false, ErrBadForm, 0},
		{"sent twice", [][2]string{{"archive", arc}, {"checksum", sum}, {ref, refJSON(testRepo, testBackup, testSum)}, {ref, refJSON(testRepo, testBackup, testSum)}}, false, ErrBadForm, 0},
		{"reference and archive", [][2]string{{"archive", arc}, {"checksum", sum}, {ref, refJSON(testRepo, testBackup, testSum)}, {"backup_" + testBackup + ".tar.gz", data}}, false, ErrBadForm, 0},
		{"a path as the part's name", [][2]string{{"archive", arc}, {"checksum", sum}, {"repository_backup_../x", refJSON(testRepo, testBackup, testSum)}}, false, ErrBadForm, 0},
		{"a huge reference", [][2]string{{"archive", arc}, {"checksum", sum}, {ref, refJSON(testRepo, testBackup+"@"+strings.Repeat("a", 4<<20), testSum)}}, false, ErrBadForm, 0},
		{"no shared repository here", [][2]string{{"archive", arc}, {"checksum", sum}, {ref, refJSON(testRepo, testBackup, testSum)}}, true, ErrBadForm, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "backups")
			boundary, body := form(t, c.parts...)
			x := newExtras(dir, slog.Default())
			x.server = testServer
			a := &fakeAdopter{}
			if !c.noRepo {
				x.adopter = a
			}
			err := receive(context.Background(), multipart.NewReader(bytes.NewReader(body), boundary), newFS(t, t.TempDir()), archive.ExtractOptions{}, x)
			if err == nil {
				err = x.commit(context.Background(), testServer, t.TempDir())
			}
			x.discard()
			if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
				t.Fatalf("receive: %v, want %v", err, c.want)
			}
			if len(a.adopted) != c.adopted {
				t.Fatalf("adopted %v, want %d", a.adopted, c.adopted)
			}
			assertNoStaging(t, dir)
		})
	}
}
