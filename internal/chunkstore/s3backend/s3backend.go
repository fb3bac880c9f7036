// Package s3backend stores a backup repository's objects in a bucket of an
// S3-compatible object store (AWS S3, MinIO, versitygw, Ceph RGW...): the
// chunkstore.Backend for system.backups.repository.s3.
package s3backend

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/wharf/wharf/internal/chunkstore"
	"github.com/wharf/wharf/internal/config"
)

// Options configure a Backend.
type Options struct {
	// Endpoint is the store's base URL; empty = AWS S3 in Region.
	Endpoint string
	Bucket   string
	// Prefix is prepended to every object name; a final "/" is added.
	Prefix string
	// Region signs the requests; empty = us-east-1.
	Region                       string
	AccessKeyID, SecretAccessKey string
	// PathStyle addresses <endpoint>/<bucket> instead of <bucket>.<endpoint>.
	PathStyle bool
	// MaxAttempts of a request answered with a 5xx, 429, a throttling code
	// or a broken connection; 0 = 5. A 4xx is never retried.
	MaxAttempts int
	// MaxBackoff between two attempts (exponential with jitter); 0 = 20s.
	MaxBackoff time.Duration
	// PageSize of a listing; 0 = the store's (1000 for S3).
	PageSize int32
	// HTTPClient; nil = the SDK's.
	HTTPClient *http.Client
}

// Backend is a chunkstore.Backend over one bucket and prefix. Names map to
// keys <prefix><name>. It relies on the store's strong read-after-write
// consistency (AWS S3 since 2020, MinIO, versitygw): a Get or List after a
// Put that returned sees the object.
type Backend struct {
	client   *s3.Client
	bucket   string
	prefix   string
	pageSize int32
	secret   string
	// attempts and maxBackoff of a GET whose body is cut off.
	attempts   int
	maxBackoff time.Duration
}

var _ chunkstore.Backend = (*Backend)(nil)

// FromConfig opens the repository's bucket as system.backups.repository.s3
// says. It makes no request.
func FromConfig(cfg config.BackupRepositoryS3) (*Backend, error) {
	if !cfg.Enabled() {
		return nil, errors.New("s3backend: system.backups.repository.s3.bucket is not set")
	}
	return New(Options{
		Endpoint: cfg.Endpoint, Bucket: cfg.Bucket, Prefix: cfg.Prefix, Region: cfg.EffectiveRegion(),
		AccessKeyID: cfg.AccessKeyID, SecretAccessKey: cfg.SecretAccessKey, PathStyle: cfg.PathStyle,
		MaxAttempts: cfg.MaxAttempts,
	})
}

// New returns a Backend. It makes no request: Check does.
func New(o Options) (*Backend, error) {
	if o.Bucket == "" {
		return nil, errors.New("s3backend: no bucket")
	}
	if o.AccessKeyID == "" || o.SecretAccessKey == "" {
		return nil, errors.New("s3backend: the access key id and the secret access key are both required")
	}
	prefix := strings.Trim(o.Prefix, "/")
	if prefix != "" {
		if !validName(prefix) {
			return nil, fmt.Errorf("s3backend: prefix %q is not a relative slash-separated path", o.Prefix)
		}
		prefix += "/"
	}
	region := o.Region
	if region == "" {
		region = "us-east-1"
	}
	attempts := o.MaxAttempts
	if attempts <= 0 {
		attempts = 5
	}
	maxBackoff := o.MaxBackoff
	if maxBackoff <= 0 {
		maxBackoff = 20 * time.Second
	}
	opts := s3.Options{
		Region:       region,
		Credentials:  credentials.NewStaticCredentialsProvider(o.AccessKeyID, o.SecretAccessKey, ""),
		UsePathStyle: o.PathStyle,
		Retryer:      newRetryer(attempts, maxBackoff),
		// Only what every S3-compatible store accepts: the SDK's default
		// trailing CRC checksums are refused by some; Put sends Content-MD5.
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	}
	if o.Endpoint != "" {
		opts.BaseEndpoint = aws.String(strings.TrimSuffix(o.Endpoint, "/"))
	}
	if o.HTTPClient != nil {
		opts.HTTPClient = o.HTTPClient
	}
	return &Backend{
		client: s3.New(opts), bucket: o.Bucket, prefix: prefix, pageSize: o.PageSize, secret: o.SecretAccessKey,
		attempts: attempts, maxBackoff: maxBackoff,
	}, nil
}

// newRetryer retries 5xx, throttling (including a bare 429) and broken
// connections with exponential backoff; a 4xx is final. The SDK's retryer
// waits through ctx, so a cancelled context ends the backoff.
func newRetryer(attempts int, maxBackoff time.Duration) aws.Retryer {
	return retry.NewStandard(func(so *retry.StandardOptions) {
		so.MaxAttempts = attempts
		so.MaxBackoff = maxBackoff
		so.Retryables = append(so.Retryables, retry.RetryableHTTPStatusCode{Codes: map[int]struct{}{http.StatusTooManyRequests: {}}})
	})
}

// Check asks the store for the bucket: wrong credentials, a missing bucket
// or an unreachable endpoint is reported here rather than at the first
// backup.
func (b *Backend) Check(ctx context.Context) error {
	_, err := b.client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(b.bucket)})
	if err != nil {
		return b.fail("check bucket", b.bucket, err, false)
	}
	return nil
}

// String names the bucket and prefix (never the credentials).
func (b *Backend) String() string { return "s3://" + b.bucket + "/" + b.prefix }

// Put stores data with one PUT: S3 makes the object visible whole or not
// at all, and only once it is stored durably. Content-MD5 makes the store
// refuse a body damaged on the way.
func (b *Backend) Put(ctx context.Context, name string, data []byte) error {
	if !validName(name) {
		return badName("put", name)
	}
	sum := md5.Sum(data)
	_, err := b.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket:        aws.String(b.bucket),
		Key:           aws.String(b.prefix + name),
		Body:          bytes.NewReader(data),
		ContentLength: aws.Int64(int64(len(data))),
		ContentMD5:    aws.String(base64.StdEncoding.EncodeToString(sum[:])),
	})
	if err != nil {
		return b.fail("put", name, err, false)
	}
	return nil
}

// Get reads length bytes at off (everything from off when length < 0) with
// one ranged GET. A range that runs past the end of the object is an error:
// the repository only asks for ranges its index says exist.
func (b *Backend) Get(ctx context.Context, name string, off, length int64) ([]byte, error) {
	if !validName(name) {
		return nil, badName("get", name)
	}
	if off < 0 {
		return nil, fmt.Errorf("s3backend: get %s: negative offset %d", name, off)
	}
	if length == 0 {
		return b.getNothing(ctx, name, off)
	}
	in := &s3.GetObjectInput{Bucket: aws.String(b.bucket), Key: aws.String(b.prefix + name)}
	if off > 0 || length > 0 {
		r := fmt.Sprintf("bytes=%d-", off)
		if length > 0 {
			r += fmt.Sprint(off + length - 1)
		}
		in.Range = aws.String(r)
	}
	// The SDK retries a request that fails, not a body cut off on the way
	// (a pack is 16 MiB): that is retried here, the whole range again.
	for attempt := 1; ; attempt++ {
		data, cut, err := b.getOnce(ctx, in, name)
		if !cut || attempt >= b.attempts {
			if err == nil && length > 0 && int64(len(data)) != length {
				return nil, fmt.Errorf("s3backend: get %s: %d bytes at %d, the object has %d: %w", name, length, off, off+int64(len(data)), io.ErrUnexpectedEOF)
			}
			return data, err
		}
		if err := sleep(ctx, min(b.maxBackoff, 100*time.Millisecond<<(attempt-1))); err != nil {
			return nil, b.fail("get", name, err, false)
		}
	}
}

// getOnce is one GET; cut reports a body that broke off (worth a retry).
func (b *Backend) getOnce(ctx context.Context, in *s3.GetObjectInput, name string) (data []byte, cut bool, err error) {
	out, err := b.client.GetObject(ctx, in)
	if err != nil {
		return nil, false, b.fail("get", name, err, true)
	}
	defer out.Body.Close()
	buf := bytes.NewBuffer(make([]byte, 0, max(0, aws.ToInt64(out.ContentLength))))
	if _, err := buf.ReadFrom(out.Body); err != nil {
		return nil, ctx.Err() == nil, b.fail("get", name, err, false)
	}
	return buf.Bytes(), false, nil
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// getNothing answers a zero-length Get: the object must exist and be at
// least off long. (A HEAD's 404 has no body: in a missing bucket too it
// reads as a missing object; Check tells the two apart.)
func (b *Backend) getNothing(ctx context.Context, name string, off int64) ([]byte, error) {
	out, err := b.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(b.bucket), Key: aws.String(b.prefix + name)})
	if err != nil {
		return nil, b.fail("get", name, err, true)
	}
	if size := aws.ToInt64(out.ContentLength); off > size {
		return nil, fmt.Errorf("s3backend: get %s: offset %d past the end (%d bytes): %w", name, off, size, io.ErrUnexpectedEOF)
	}
	return []byte{}, nil
}

// List pages through ListObjectsV2 (continuation tokens) and returns the
// objects under prefix, by name.
func (b *Backend) List(ctx context.Context, prefix string) ([]chunkstore.ObjectInfo, error) {
	if strings.HasPrefix(prefix, "/") || slices.Contains(strings.Split(prefix, "/"), "..") {
		return nil, badName("list", prefix)
	}
	in := &s3.ListObjectsV2Input{Bucket: aws.String(b.bucket), Prefix: aws.String(b.prefix + prefix)}
	if b.pageSize > 0 {
		in.MaxKeys = aws.Int32(b.pageSize)
	}
	var out []chunkstore.ObjectInfo
	pages := s3.NewListObjectsV2Paginator(b.client, in)
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, b.fail("list", prefix, err, false)
		}
		for _, o := range page.Contents {
			name, ok := strings.CutPrefix(aws.ToString(o.Key), b.prefix)
			if !ok || !validName(name) {
				continue // a directory marker or a key the repository cannot have made
			}
			out = append(out, chunkstore.ObjectInfo{Name: name, Size: aws.ToInt64(o.Size), ModTime: aws.ToTime(o.LastModified)})
		}
	}
	// S3 lists by UTF-8 byte order already; sorting keeps the contract
	// with stores that do not.
	slices.SortFunc(out, func(x, y chunkstore.ObjectInfo) int { return strings.Compare(x.Name, y.Name) })
	return out, nil
}

// Delete removes the object; S3 answers 204 for a missing key, and a
// NoSuchKey from a store that does not is success too.
func (b *Backend) Delete(ctx context.Context, name string) error {
	if !validName(name) {
		return badName("delete", name)
	}
	_, err := b.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(b.bucket), Key: aws.String(b.prefix + name)})
	if err != nil && !isNoSuchKey(err) {
		return b.fail("delete", name, err, false)
	}
	return nil
}

// validName: a relative slash-separated path without empty, . or .. parts.
func validName(name string) bool {
	return name != "" && name != "." && !strings.HasPrefix(name, "/") && path.Clean(name) == name &&
		name != ".." && !strings.HasPrefix(name, "../")
}

func badName(op, name string) error {
	return fmt.Errorf("s3backend: %s: %q is not a relative slash-separated object name", op, name)
}
