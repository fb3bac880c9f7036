package backup

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wharf/wharf/internal/chunkstore"
	"github.com/wharf/wharf/internal/chunkstore/s3backend"
	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/testutil/objectstore"
	"github.com/wharf/wharf/internal/testutil/tree"
)

// s3RepoService is a Service whose repository is in the bucket of store.
func s3RepoService(t *testing.T, dir string, s3 config.BackupRepositoryS3) *Service {
	t.Helper()
	c := config.Defaults()
	c.System.BackupDirectory = filepath.Join(dir, "backups")
	c.System.TmpDirectory = filepath.Join(dir, "tmp")
	c.System.Backups.Repository.S3 = s3
	os.MkdirAll(c.System.TmpDirectory, 0o700)
	svc := New(context.Background(), config.NewStore(filepath.Join(dir, "config.yml"), c), nil, slog.New(slog.DiscardHandler))
	t.Cleanup(svc.Close)
	return svc
}

// With system.backups.repository.s3 set, a repository backup goes to the
// bucket (nothing under the local repository directory), and a wrong secret
// fails the backup naming the key, never the secret.
func TestRepositoryBackupGoesToTheBucket(t *testing.T) {
	store := objectstore.StartOrSkip(t)
	s3 := config.BackupRepositoryS3{
		Endpoint: store.URL, Bucket: store.Bucket, Prefix: "repo", AccessKeyID: store.Access, SecretAccessKey: store.Secret, PathStyle: true,
	}
	dir := t.TempDir()
	root := filepath.Join(dir, "srv")
	writeTree(t, root, map[string][]byte{"a.txt": []byte("hello"), "sub/big.bin": randomData(2 << 20)})
	srv := benchServer{tree.Open(t, root)}
	svc := s3RepoService(t, dir, s3)
	ctx := context.Background()
	const b1 = "4a9b0e2d-1c3f-4d5e-8f60-718293a4b5c6"

	d, err := svc.createRepository(ctx, srv, b1, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "backups", ".repository")); !os.IsNotExist(err) {
		t.Fatalf("local repository directory: %v; want none", err)
	}
	b, err := s3backend.FromConfig(s3)
	if err != nil {
		t.Fatal(err)
	}
	st, err := chunkstore.OpenBackend(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.Manifest(srv.UUID(), b1)
	if err != nil {
		t.Fatalf("the backup's manifest in the bucket: %v", err)
	}
	if m.Size != d.Size {
		t.Fatalf("manifest size %d, backup size %d", m.Size, d.Size)
	}

	// The signed download streams the backup back out of the bucket.
	rc, err := svc.OpenRepositoryDownload(context.Background(), srv.UUID(), b1)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, rc)
	rc.Close()
	if err != nil || n == 0 {
		t.Fatalf("download from the bucket: %d bytes, %v", n, err)
	}

	// export and verify open the bucket read-only and find the backup.
	roCfg := config.Defaults()
	roCfg.System.Backups.Repository.S3 = s3
	ro, err := OpenRepositoryReadOnly(roCfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ro.Find(b1); err != nil {
		t.Fatalf("read-only open of the bucket: %v", err)
	}

	// Deleting the only backup and collecting garbage leaves no pack behind.
	if err := svc.Delete(srv, b1); err != nil {
		t.Fatal(err)
	}
	if _, err := st.GC(); err != nil {
		t.Fatal(err)
	}
	packs, err := b.List(ctx, "packs/")
	if err != nil {
		t.Fatal(err)
	}
	if len(packs) != 0 {
		t.Fatalf("%d packs left in the bucket after deleting its only backup", len(packs))
	}
	if _, err := svc.OpenRepositoryDownload(context.Background(), srv.UUID(), b1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("download of a deleted backup: %v; want ErrNotFound", err)
	}

	bad := s3
	bad.SecretAccessKey = "not-the-secret-at-all"
	svcBad := s3RepoService(t, t.TempDir(), bad)
	_, err = svcBad.createRepository(ctx, srv, "5b0c1f3e-2d4a-4e6b-8c7d-9e0f1a2b3c4e", "")
	if err == nil || !strings.Contains(err.Error(), "system.backups.repository.s3") || strings.Contains(err.Error(), bad.SecretAccessKey) {
		t.Fatalf("with a wrong secret: %v; want an error naming the key, without the secret", err)
	}
}
