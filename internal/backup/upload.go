package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/cenkalti/backoff/v5"
	"golang.org/x/sync/errgroup"

	"github.com/wharf/wharf/internal/panel"
)

// Upload tuning.
const (
	partTimeout     = 2 * time.Hour // per attempt, as the spec says
	partParallelism = 8             // parts in flight: a remote store gives each connection a fraction of the link (the AWS CLI uses 10)
	partRetryTime   = 5 * time.Minute
)

func (s *Service) createRemote(ctx context.Context, srv Server, backup, ignore string) (Details, error) {
	f, res, err := s.writeArchive(ctx, srv, ignore, false)
	if err != nil {
		return Details{}, err
	}
	// The local copy goes whatever happens.
	defer func() {
		_ = f.Close()
		_ = os.Remove(f.Name())
	}()
	urls, err := s.panel.BackupUploadURLs(ctx, backup, res.Size)
	if err != nil {
		return Details{}, fmt.Errorf("asking the backend for upload URLs: %w", err)
	}
	parts, err := UploadParts(ctx, f, res.Size, urls, nil, partParallelism)
	if err != nil {
		return Details{}, err
	}
	return Details{Checksum: res.Sum, Size: res.Size, Parts: parts}, nil
}

// UploadParts PUTs the size bytes of src to the presigned part URLs, several
// parts at a time: part i holds part_size bytes from offset i*part_size, the
// last one the remainder. Each part is retried with exponential backoff
// from its own offset (transport errors and 5xx; 4xx is final). The ETags
// are returned in part order. client may be nil. At most parallel parts are
// in flight.
func UploadParts(ctx context.Context, src io.ReaderAt, size int64, urls panel.BackupUploadURLs, client *http.Client, parallel int) ([]panel.BackupPart, error) {
	parallel = max(parallel, 1)
	if client == nil {
		// Our own transport: its keep-alive connections (and their
		// goroutines) would otherwise outlive the backup.
		tr := &http.Transport{Proxy: http.ProxyFromEnvironment, MaxIdleConnsPerHost: parallel, ForceAttemptHTTP2: true}
		defer tr.CloseIdleConnections()
		client = &http.Client{Transport: tr}
	}
	ps := urls.PartSize
	if ps <= 0 {
		return nil, fmt.Errorf("the backend gave a part size of %d", ps)
	}
	n := max(1, (size+ps-1)/ps) // parts needed; extra URLs stay unused
	if n > int64(len(urls.Parts)) {
		return nil, fmt.Errorf("the backend gave %d parts of %d bytes for %d bytes", len(urls.Parts), ps, size)
	}
	parts := make([]panel.BackupPart, n)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallel)
	for i := range n {
		off := i * ps
		length := min(ps, size-off)
		g.Go(func() error {
			etag, err := uploadPart(gctx, client, urls.Parts[i], src, off, length)
			if err != nil {
				return fmt.Errorf("part %d: %w", i+1, err)
			}
			parts[i] = panel.BackupPart{PartNumber: int(i + 1), ETag: etag}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return parts, nil
}

// safeURL is a URL for logs and errors: without its query (the signature).
func safeURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Scheme + "://" + u.Host + u.Path
}

func uploadPart(ctx context.Context, client *http.Client, target string, src io.ReaderAt, off, length int64) (string, error) {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 500 * time.Millisecond
	b.Multiplier = 2
	return backoff.Retry(ctx, func() (string, error) {
		actx, cancel := context.WithTimeout(ctx, partTimeout)
		defer cancel()
		// A fresh reader at the part's own offset on every attempt.
		body := io.NewSectionReader(src, off, length)
		req, err := http.NewRequestWithContext(actx, http.MethodPut, target, body)
		if err != nil {
			return "", backoff.Permanent(fmt.Errorf("bad part URL %s", safeURL(target)))
		}
		req.ContentLength = length
		req.Header.Set("Content-Type", "application/x-gzip")
		res, err := client.Do(req)
		if err != nil {
			var uerr *url.Error
			if errors.As(err, &uerr) {
				err = uerr.Err // the URL, with its signature, stays out of the message
			}
			return "", fmt.Errorf("PUT %s: %w", safeURL(target), err)
		}
		defer res.Body.Close()
		_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
		if res.StatusCode != http.StatusOK {
			err := fmt.Errorf("PUT %s: status %d", safeURL(target), res.StatusCode)
			if res.StatusCode >= 400 && res.StatusCode < 500 && res.StatusCode != http.StatusRequestTimeout && res.StatusCode != http.StatusTooManyRequests {
				return "", backoff.Permanent(err)
			}
			return "", err
		}
		etag := res.Header.Get("ETag")
		if etag == "" {
			return "", backoff.Permanent(fmt.Errorf("PUT %s: no ETag in the answer", safeURL(target)))
		}
		return etag, nil
	}, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(partRetryTime))
}
