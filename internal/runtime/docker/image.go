package docker

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/wharf/wharf/internal/runtime"
)

// pullTimeout bounds one image pull.
const pullTimeout = 15 * time.Minute

// EnsureImage makes image available locally. "~name" is a local-only image:
// it must exist and is never pulled. Otherwise the image is pulled (with
// auth when given), reporting "status progress" lines to progress; when the
// pull fails but the image exists locally, a warning goes to progress and
// the local image is used.
func (r *Runtime) EnsureImage(ctx context.Context, ref string, auth *runtime.RegistryAuth, progress func(line string)) error {
	if progress == nil {
		progress = func(string) {}
	}
	if local, ok := strings.CutPrefix(ref, "~"); ok {
		if _, err := r.cli.ImageInspect(ctx, local); err != nil {
			if cerrdefs.IsNotFound(err) {
				return fmt.Errorf("docker: local image %s: %w", local, runtime.ErrNotFound)
			}
			return wrap("inspect image", local, err)
		}
		return nil
	}
	if ref == "" {
		return errors.New("docker: empty image reference")
	}

	pullErr := r.pull(ctx, ref, auth, progress)
	if pullErr == nil {
		return nil
	}
	if ctx.Err() != nil {
		return pullErr
	}
	if _, err := r.cli.ImageInspect(ctx, ref); err == nil {
		progress(fmt.Sprintf("Warning: could not pull %s (%v); using the local image", ref, pullErr))
		r.log.Warn("image pull failed, using the local image", "image", ref, "error", pullErr)
		return nil
	}
	return pullErr
}

func (r *Runtime) pull(ctx context.Context, ref string, auth *runtime.RegistryAuth, progress func(string)) error {
	ctx, cancel := context.WithTimeout(ctx, pullTimeout)
	defer cancel()
	opts := client.ImagePullOptions{}
	if auth != nil {
		enc, err := encodeAuth(*auth)
		if err != nil {
			return err
		}
		opts.RegistryAuth = enc
	}
	rc, err := r.cli.ImagePull(ctx, ref, opts)
	if err != nil {
		return wrap("pull", ref, err)
	}
	defer rc.Close()
	dec := json.NewDecoder(rc)
	for {
		var msg struct {
			Status      string `json:"status"`
			Progress    string `json:"progress"`
			Error       string `json:"error"`
			ErrorDetail *struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&msg); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return wrap("pull", ref, err)
		}
		if msg.ErrorDetail != nil && msg.ErrorDetail.Message != "" {
			return fmt.Errorf("docker: pull %s: %s", ref, msg.ErrorDetail.Message)
		}
		if msg.Error != "" {
			return fmt.Errorf("docker: pull %s: %s", ref, msg.Error)
		}
		if line := strings.TrimSpace(msg.Status + " " + msg.Progress); line != "" {
			progress(line)
		}
	}
}

// encodeAuth is the X-Registry-Auth header value: base64url of the JSON
// credentials.
func encodeAuth(a runtime.RegistryAuth) (string, error) {
	b, err := json.Marshal(struct {
		Username string `json:"username"`
		Password string `json:"password"`
	}{a.Username, a.Password})
	if err != nil {
		return "", err
	}
	return base64.URLEncoding.EncodeToString(b), nil
}
