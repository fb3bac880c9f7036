package backup

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wharf/wharf/internal/chunkstore"
	"github.com/wharf/wharf/internal/chunkstore/s3backend"
	"github.com/wharf/wharf/internal/config"
	"github.com/wharf/wharf/internal/testutil/objectstore"
)

// RepositoryBackend chooses the bucket when one is configured, checks it,
// and otherwise hands the repository's directory to the local constructor.
func TestRepositoryBackendChoosesTheLocation(t *testing.T) {
	store := objectstore.StartOrSkip(t)
	ctx := context.Background()
	errLocal := errors.New("the local backend was asked for")
	var localDir string
	local := func(dir string) (chunkstore.Backend, error) { localDir = dir; return nil, errLocal }

	cfg := config.Defaults()
	cfg.System.BackupDirectory = t.TempDir()
	if _, err := RepositoryBackend(ctx, cfg, local); !errors.Is(err, errLocal) || localDir != filepath.Join(cfg.System.BackupDirectory, ".repository") {
		t.Fatalf("without a bucket: err %v, local dir %q; want the local backend on <backup_directory>/.repository", err, localDir)
	}

	cfg.System.Backups.Repository.S3 = config.BackupRepositoryS3{
		Endpoint: store.URL, Bucket: store.Bucket, Prefix: "repo", AccessKeyID: store.Access, SecretAccessKey: store.Secret, PathStyle: true,
	}
	localDir = ""
	b, err := RepositoryBackend(ctx, cfg, local)
	if err != nil || localDir != "" {
		t.Fatalf("with a bucket: %v (local asked for %q)", err, localDir)
	}
	if _, ok := b.(*s3backend.Backend); !ok {
		t.Fatalf("with a bucket: a %T", b)
	}
	if err := b.Put(ctx, "snapshots/x.json", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Get(ctx, "snapshots/x.json", 0, -1); err != nil || !bytes.Equal(got, []byte("{}")) {
		t.Fatalf("Get = %q, %v", got, err)
	}

	cfg.System.Backups.Repository.S3.SecretAccessKey = "not-the-secret-at-all"
	_, err = RepositoryBackend(ctx, cfg, local)
	if err == nil || !strings.Contains(err.Error(), "system.backups.repository.s3") || strings.Contains(err.Error(), "not-the-secret-at-all") {
		t.Fatalf("with a wrong secret: %v; want an error naming the key, without the secret", err)
	}
}
