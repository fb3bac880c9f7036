package s3backend

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wharf/wharf/internal/config"
)

// A wrong secret fails every operation with the store's answer, and no
// error text holds the secret.
func TestAuthFailureHidesTheSecret(t *testing.T) {
	s := startStore(t)
	const wrong = "Wr0ngSecretKeyThatMustNeverBePrinted/xyz"
	ctx := context.Background()
	for _, o := range []Options{
		{AccessKeyID: s.Access, SecretAccessKey: wrong},      // the right key id
		{AccessKeyID: "AKIAUNKNOWN", SecretAccessKey: wrong}, // an unknown one
	} {
		o.Endpoint, o.Bucket, o.PathStyle, o.MaxBackoff = s.URL, s.Bucket, true, 10*time.Millisecond
		b := newBackend(t, o)
		_, getErr := b.Get(ctx, "packs/x", 0, -1)
		_, listErr := b.List(ctx, "")
		errs := []error{b.Put(ctx, "packs/x", []byte("x")), getErr, listErr, b.Delete(ctx, "packs/x"), b.Check(ctx)}
		for i, err := range errs {
			if err == nil {
				t.Fatalf("operation %d succeeded with a wrong secret", i)
			}
			if strings.Contains(err.Error(), wrong) {
				t.Fatalf("operation %d: the error prints the secret: %v", i, err)
			}
			if errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("operation %d: an authentication failure is an fs.ErrNotExist: %v", i, err)
			}
		}
		// versitygw answers 403 SignatureDoesNotMatch for a wrong secret,
		// 404 XAdminUserNotFound for an unknown key id.
		if !strings.Contains(errs[0].Error(), "api error SignatureDoesNotMatch") && !strings.Contains(errs[0].Error(), "api error XAdminUserNotFound") {
			t.Fatalf("Put's error does not say the store refused the credentials: %v", errs[0])
		}
	}
}

// Should a store (or a proxy in front of it) put the secret in an error
// message, it is replaced before the error reaches a log.
func TestSecretInAnswerIsScrubbed(t *testing.T) {
	s := startStore(t)
	f := &fault{answer: func(*http.Request, int) (int, string) {
		return 404, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchKey</Code><Message>no key, secret ` + s.Secret + `</Message></Error>`
	}}
	o := options(s, "")
	o.Endpoint = f.start(t, s)
	_, err := newBackend(t, o).Get(context.Background(), "packs/x", 0, -1)
	if err == nil || strings.Contains(err.Error(), s.Secret) {
		t.Fatalf("Get = %v, want an error without the secret", err)
	}
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "REDACTED") {
		t.Fatalf("Get = %v, want an fs.ErrNotExist with the secret REDACTED", err)
	}
}

// A cancelled context ends a request in flight, a retry's backoff, and
// keeps a Put from storing anything.
func TestContextCancellation(t *testing.T) {
	s := startStore(t)
	arrived := make(chan struct{}, 16)
	f := &fault{answer: func(r *http.Request, _ int) (int, string) {
		arrived <- struct{}{}
		if r.Method == http.MethodGet {
			<-r.Context().Done() // hang until the client gives up
			return 0, ""
		}
		return 503, s3Error("SlowDown") // PUT: retried, with a long backoff
	}}
	o := options(s, "")
	o.Endpoint, o.MaxBackoff, o.MaxAttempts = f.start(t, s), time.Hour, 20
	b := newBackend(t, o)

	for _, op := range []func(ctx context.Context) error{
		func(ctx context.Context) error { _, err := b.Get(ctx, "packs/x", 0, -1); return err },
		func(ctx context.Context) error { return b.Put(ctx, "packs/y", []byte("y")) },
	} {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- op(ctx) }()
		<-arrived
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("after cancel: %v, want context.Canceled", err)
		}
	}

	direct := newBackend(t, options(s, ""))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := direct.Put(ctx, "packs/z", []byte("z")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put with a cancelled context = %v, want context.Canceled", err)
	}
	if _, err := direct.Get(context.Background(), "packs/z", 0, -1); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a Put cancelled before it started stored the object: %v", err)
	}
}

// A missing bucket is a configuration error, never an empty repository.
func TestMissingBucket(t *testing.T) {
	s := startStore(t)
	o := options(s, "")
	o.Bucket = "no-such-bucket"
	b := newBackend(t, o)
	ctx := context.Background()
	if err := b.Check(ctx); err == nil {
		t.Fatal("Check of a missing bucket succeeded")
	}
	if _, err := b.Get(ctx, "packs/x", 0, -1); err == nil || errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Get in a missing bucket = %v, want an error that is not fs.ErrNotExist", err)
	}
	if _, err := b.List(ctx, ""); err == nil {
		t.Fatal("List of a missing bucket succeeded")
	}
	if err := newBackend(t, options(s, "")).Check(ctx); err != nil {
		t.Fatalf("Check of the bucket: %v", err)
	}
}

// FromConfig reads system.backups.repository.s3.
func TestFromConfig(t *testing.T) {
	s := startStore(t)
	if _, err := FromConfig(config.BackupRepositoryS3{}); err == nil {
		t.Fatal("FromConfig without a bucket succeeded")
	}
	b, err := FromConfig(config.BackupRepositoryS3{
		Endpoint: s.URL + "/", Bucket: s.Bucket, Prefix: "cfg/", AccessKeyID: s.Access, SecretAccessKey: s.Secret, PathStyle: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := b.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Put(ctx, "snapshots/a.json", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	list, err := newBackend(t, options(s, "cfg")).List(ctx, "snapshots/")
	if err != nil || len(list) != 1 || list[0].Name != "snapshots/a.json" {
		t.Fatalf("the object put through FromConfig's backend: %+v, %v", list, err)
	}
}

func TestNewRefuses(t *testing.T) {
	const secret = "Sup3rSecretValue"
	for _, o := range []Options{
		{AccessKeyID: "a", SecretAccessKey: secret},
		{Bucket: "b", SecretAccessKey: secret},
		{Bucket: "b", AccessKeyID: "a"},
		{Bucket: "b", AccessKeyID: "a", SecretAccessKey: secret, Prefix: "a/../../b"},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v) succeeded", o)
		} else if strings.Contains(err.Error(), secret) {
			t.Errorf("New's error prints the secret: %v", err)
		}
	}
}

// A GET whose body breaks off is retried, the range again, up to
// MaxAttempts.
func TestGetRetriesABodyCutOff(t *testing.T) {
	s := startStore(t)
	data := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
	var cuts atomic.Int32
	f := &fault{}
	o := options(s, "cut")
	o.Endpoint, o.MaxAttempts = f.start(t, s), 3
	b := newBackend(t, o)
	ctx := context.Background()
	if err := b.Put(ctx, "packs/p", data); err != nil {
		t.Fatal(err)
	}
	f.cut = func(r *http.Request) []byte {
		if r.Method == http.MethodGet && cuts.Add(1) <= 2 {
			return data
		}
		return nil
	}
	got, err := b.Get(ctx, "packs/p", 0, -1)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Get after two cut bodies: %d bytes, %v", len(got), err)
	}
	if n := f.count("GET", "/packs/p"); n != 3 {
		t.Fatalf("%d GETs, want 3 (two cut off, one whole)", n)
	}

	f.cut = func(r *http.Request) []byte { return data } // always cut
	before := f.count("GET", "/packs/p")
	if _, err := b.Get(ctx, "packs/p", 16, 1000); err == nil || errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Get with every body cut off = %v, want an error that is not fs.ErrNotExist", err)
	}
	if n := f.count("GET", "/packs/p") - before; n != 3 {
		t.Fatalf("%d GETs with every body cut off, want MaxAttempts = 3", n)
	}
}
