// Package objectstore starts a real S3-compatible server (versitygw with its
// posix backend) for tests, and plays the panel's part of a multipart
// upload: create it, presign the part URLs, complete it, read the object.
package objectstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/wharf/wharf/internal/testutil/wait"
)

// Store is a running versitygw with one bucket.
type Store struct {
	URL     string
	Bucket  string
	Client  *s3.Client
	presign *s3.PresignClient
	// Access and Secret are the random credentials it accepts.
	Access, Secret string
}

// Binary finds versitygw on PATH or in GOPATH/bin.
func Binary() (string, error) {
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	home, _ := os.UserHomeDir()
	for _, p := range []string{os.Getenv("GOBIN"), filepath.Join(os.Getenv("GOPATH"), "bin"), filepath.Join(home, "go", "bin")} {
		if p == "" {
			continue
		}
		if fi, err := os.Stat(filepath.Join(p, "versitygw")); err == nil && !fi.IsDir() {
			return filepath.Join(p, "versitygw"), nil
		}
	}
	return "", fmt.Errorf("versitygw is not installed: run `go install github.com/versity/versitygw/cmd/versitygw@v1.8.0` (.ci/run does)")
}

// StartOrSkip is Start, but skips the test when versitygw is not installed,
// unless WHARF_REQUIRE_DOCKER=1 (CI), which makes that a failure.
func StartOrSkip(t testing.TB) *Store {
	t.Helper()
	if _, err := Binary(); err != nil {
		if os.Getenv("WHARF_REQUIRE_DOCKER") == "1" {
			t.Fatal(err)
		}
		t.Skipf("needs versitygw: %v; WHARF_REQUIRE_DOCKER=1 makes this a failure", err)
	}
	return Start(t)
}

// Start runs versitygw on 127.0.0.1 with a random port and credentials,
// serving a fresh directory, and creates a bucket. It fails the test when
// versitygw is missing.
func Start(t testing.TB) *Store {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	access, secret := randHex(8), randHex(16)
	cmd := exec.Command(bin, "--port", addr, "--access", access, "--secret", secret, "--quiet", "posix", root)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	s := &Store{URL: "http://" + addr, Bucket: "backups", Access: access, Secret: secret}
	s.Client = s3.New(s3.Options{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider(access, secret, ""),
		BaseEndpoint: aws.String(s.URL),
		UsePathStyle: true,
	})
	s.presign = s3.NewPresignClient(s.Client)
	wait.ForNoError(t, 20*time.Second, func() error {
		_, err := s.Client.CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(s.Bucket)})
		return err
	}, "versitygw to come up")
	return s
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Upload is one multipart upload made the way the panel makes it.
type Upload struct {
	s        *Store
	Key, ID  string
	PartSize int64
}

// NewUpload creates a multipart upload of key.
func (s *Store) NewUpload(ctx context.Context, key string, partSize int64) (*Upload, error) {
	out, err := s.Client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(s.Bucket), Key: aws.String(key), ContentType: aws.String("application/x-gzip")})
	if err != nil {
		return nil, err
	}
	return &Upload{s: s, Key: key, ID: aws.ToString(out.UploadId), PartSize: partSize}, nil
}

// PartURLs presigns the URLs of the parts needed for size bytes.
func (u *Upload) PartURLs(ctx context.Context, size int64) ([]string, error) {
	n := max(1, (size+u.PartSize-1)/u.PartSize)
	urls := make([]string, n)
	for i := range n {
		req, err := u.s.presign.PresignUploadPart(ctx, &s3.UploadPartInput{
			Bucket: aws.String(u.s.Bucket), Key: aws.String(u.Key), UploadId: aws.String(u.ID), PartNumber: aws.Int32(int32(i + 1)),
		}, s3.WithPresignExpires(time.Hour))
		if err != nil {
			return nil, err
		}
		if req.Method != http.MethodPut {
			return nil, fmt.Errorf("presigned method %s", req.Method)
		}
		urls[i] = req.URL
	}
	return urls, nil
}

// Complete completes the upload with the ETags reported by the agent.
func (u *Upload) Complete(ctx context.Context, etags []string) error {
	parts := make([]types.CompletedPart, len(etags))
	for i, e := range etags {
		parts[i] = types.CompletedPart{ETag: aws.String(e), PartNumber: aws.Int32(int32(i + 1))}
	}
	_, err := u.s.Client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
		Bucket: aws.String(u.s.Bucket), Key: aws.String(u.Key), UploadId: aws.String(u.ID),
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
	})
	return err
}

// Get opens the object.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	out, err := s.Client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String(key)})
	if err != nil {
		return nil, err
	}
	return out.Body, nil
}

// Abort aborts the upload, as the panel does when the agent reports a
// failed backup.
func (u *Upload) Abort(ctx context.Context) error {
	_, err := u.s.Client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: aws.String(u.s.Bucket), Key: aws.String(u.Key), UploadId: aws.String(u.ID)})
	return err
}

// PendingUploads lists the multipart uploads of the bucket that are
// neither completed nor aborted, by key.
func (s *Store) PendingUploads(ctx context.Context) ([]string, error) {
	out, err := s.Client.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(s.Bucket)})
	if err != nil {
		return nil, err
	}
	keys := make([]string, len(out.Uploads))
	for i, u := range out.Uploads {
		keys[i] = aws.ToString(u.Key)
	}
	return keys, nil
}
