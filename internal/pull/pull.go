// Package pull runs the file manager's remote downloads ("download from
// URL"): a server's user names a URL and the node fetches it into the
// server's files. The outbound client refuses internal addresses on every
// connection it makes (netguard), follows a bounded number of redirects,
// and writes through the server's sandbox (denylist, disk limit).
package pull

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/wharf/wharf/internal/netguard"
	"github.com/wharf/wharf/internal/sandbox"
	"github.com/wharf/wharf/internal/usererr"
)

// MaxPerServer is how many downloads one server may run at once.
const MaxPerServer = 3

// UserAgent is sent with every download, as Wings sends it.
const UserAgent = "Pterodactyl Panel (https://pterodactyl.io)"

const (
	dialTimeout    = 10 * time.Second
	headersTimeout = 60 * time.Second
	maxDuration    = 12 * time.Hour
)

// User-visible errors.
var (
	ErrDisabled    = usererr.New(usererr.Invalid, "This functionality is not currently enabled on this instance.")
	ErrBadURL      = usererr.New(usererr.Invalid, "The URL provided is not valid: it must be an http or https URL.")
	ErrTooMany     = usererr.New(usererr.Invalid, "This server is already running the maximum of 3 remote downloads.")
	ErrNoSpace     = usererr.New(usererr.Invalid, "There is not enough disk space available to perform that action.")
	ErrNoRoot      = usererr.New(usererr.Invalid, "A root directory for the download is required.")
	ErrBadFileName = usererr.New(usererr.Invalid, "The file name for the download is not valid.")
)

// Options configure a Service.
type Options struct {
	// MaxRedirects bounds the redirects a download follows.
	MaxRedirects int
	// AllowLoopback lets downloads reach this host; tests only.
	AllowLoopback bool
	Log           *slog.Logger
}

// Service runs the remote downloads of every server of the node.
type Service struct {
	ctx    context.Context
	cancel context.CancelFunc
	opts   Options
	client *http.Client
	wg     sync.WaitGroup

	mu   sync.Mutex
	byID map[string]*Download
}

// New returns the service; its downloads end when ctx ends or at Close.
func New(ctx context.Context, opts Options) *Service {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &Service{ctx: ctx, cancel: cancel, opts: opts, byID: map[string]*Download{}}
	s.client = s.newClient()
	return s
}

// Close cancels every download and waits for them.
func (s *Service) Close() {
	s.cancel()
	s.wg.Wait()
}

// DownloadError is a refused or failed download, with a reason fit for
// the user (never the URL's query).
type DownloadError struct{ Reason string }

func (e *DownloadError) Error() string { return "The download failed: " + e.Reason + "." }

// testLoopback is the one address AllowLoopback opens: where test servers
// listen. Other loopback addresses (127.0.0.2, ::1) stay refused, so that
// tests can still see a redirect to loopback refused.
var testLoopback = netip.MustParseAddr("127.0.0.1")

func (s *Service) checkAddr(host, _ string, ip netip.Addr) error {
	if s.opts.AllowLoopback && ip == testLoopback {
		return nil
	}
	if netguard.IsInternal(ip) {
		return &DownloadError{Reason: fmt.Sprintf("%s resolves to an internal address (%s)", host, ip)}
	}
	return nil
}

func (s *Service) newClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:                 nil, // a proxy would hide the address dialled
			DialContext:           netguard.DialContext(dialTimeout, s.checkAddr),
			TLSHandshakeTimeout:   dialTimeout,
			ResponseHeaderTimeout: headersTimeout,
			ForceAttemptHTTP2:     true,
			MaxIdleConnsPerHost:   -1,
			DisableKeepAlives:     true,
		},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) > s.opts.MaxRedirects {
				return &DownloadError{Reason: fmt.Sprintf("more than %d redirects", s.opts.MaxRedirects)}
			}
			if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
				return &DownloadError{Reason: "a redirect to a scheme other than http or https"}
			}
			return nil
		},
	}
}

// Request is what the panel asks for.
type Request struct {
	URL       string `json:"url"`
	Root      string `json:"root"`
	Directory string `json:"directory"` // deprecated name of Root
	FileName  string `json:"file_name"`
	UseHeader bool   `json:"use_header"`
	// Foreground: answer once the file is written.
	Foreground bool `json:"foreground"`
}

// Download is one running download.
type Download struct {
	ID     string
	server string
	fs     *sandbox.FS
	req    Request
	url    *url.URL
	cancel context.CancelFunc
	total  atomic.Int64
	done   atomic.Int64
	// Name is the file written (relative to the server root), once known.
	name atomic.Pointer[string]
}

// Progress is the panel's view of a download (capitalised keys, as Wings
// sends them).
type Progress struct {
	Identifier string  `json:"Identifier"`
	Progress   float64 `json:"Progress"`
}

// Progress is the fraction done, 0 when the size is unknown.
func (d *Download) Progress() float64 {
	t := d.total.Load()
	if t <= 0 {
		return 0
	}
	return float64(d.done.Load()) / float64(t)
}

// Name is the file the download writes ("" until its headers arrived).
func (d *Download) Name() string {
	if p := d.name.Load(); p != nil {
		return *p
	}
	return ""
}

// Begin validates a request for the server (its UUID and sandbox) and
// registers the download; Run then performs it. At most MaxPerServer run
// per server.
func (s *Service) Begin(server string, fsys *sandbox.FS, req Request) (*Download, error) {
	u, err := url.Parse(strings.TrimSpace(req.URL))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return nil, ErrBadURL
	}
	if req.Root == "" {
		req.Root = req.Directory
	}
	if req.Root == "" {
		return nil, ErrNoRoot
	}
	if lim := fsys.DiskLimit(); lim < 0 || (lim > 0 && fsys.Usage() >= lim) {
		return nil, ErrNoSpace
	}
	if fi, err := fsys.Stat(req.Root); err == nil && !fi.IsDir() {
		return nil, usererr.New(usererr.Invalid, "The root of the download is not a directory.")
	} else if err != nil && !errors.Is(err, sandbox.ErrNotExist) {
		return nil, err
	}
	if req.FileName != "" {
		if err := s.checkName(fsys, req.Root, req.FileName); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, d := range s.byID {
		if d.server == server {
			n++
		}
	}
	if n >= MaxPerServer {
		return nil, ErrTooMany
	}
	d := &Download{ID: uuid.NewString(), server: server, fs: fsys, req: req, url: u}
	s.byID[d.ID] = d
	return d, nil
}

// checkName refuses a target name that is empty, leaves the root, or is
// denylisted.
func (s *Service) checkName(fsys *sandbox.FS, root, name string) error {
	c := path.Clean("/" + name)
	if c == "/" || strings.IndexByte(name, 0) >= 0 {
		return ErrBadFileName
	}
	if fsys.Denied(root + "/" + name) {
		return sandbox.ErrDenied
	}
	return nil
}

// Run performs a begun download and unregisters it. ctx bounds it (with
// the service's own context and the 12 hour limit).
func (s *Service) Run(ctx context.Context, d *Download) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, maxDuration)
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()
	defer cancel()
	s.mu.Lock()
	d.cancel = cancel
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.byID, d.ID)
		s.mu.Unlock()
	}()
	if ctx.Err() != nil {
		return "", ctx.Err()
	}
	name, err := s.fetch(ctx, d)
	var de *DownloadError
	if errors.As(err, &de) {
		return "", usererr.Wrap(err, usererr.Invalid, de.Error())
	}
	return name, err
}

// Start runs a begun download in the background; ctx bounds it (the
// server's job: it ends when the server is deleted), with the service's own
// context. done, when set, is called once it ended.
func (s *Service) Start(ctx context.Context, d *Download, done func()) {
	s.wg.Go(func() {
		if done != nil {
			defer done()
		}
		name, err := s.Run(ctx, d)
		if err != nil && !errors.Is(err, context.Canceled) {
			s.opts.Log.Warn("remote download failed", "server", d.server, "download", d.ID, "host", d.url.Host, "error", err)
			return
		}
		if err == nil {
			s.opts.Log.Info("remote download finished", "server", d.server, "download", d.ID, "file", name)
		}
	})
}

// List returns the downloads of a server.
func (s *Service) List(server string) []Progress {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Progress
	for _, d := range s.byID {
		if d.server == server {
			out = append(out, Progress{Identifier: d.ID, Progress: d.Progress()})
		}
	}
	return out
}

// Cancel stops the download id if it belongs to server.
func (s *Service) Cancel(server, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d, ok := s.byID[id]; ok && d.server == server {
		if d.cancel != nil {
			d.cancel()
		}
		delete(s.byID, id)
	}
}

// request sends the download's GET; an answer other than 200 is an error.
// Errors never carry the URL's path or query.
func (s *Service) request(ctx context.Context, d *Download) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.url.String(), nil)
	if err != nil {
		return nil, ErrBadURL
	}
	req.Header.Set("User-Agent", UserAgent)
	res, err := s.client.Do(req)
	if err != nil {
		var de *DownloadError
		if errors.As(err, &de) {
			return nil, de
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // keep the URL (and its query) out of the message
		}
		return nil, &DownloadError{Reason: "the request to " + d.url.Host + " failed: " + err.Error()}
	}
	if res.StatusCode != http.StatusOK {
		res.Body.Close()
		return nil, &DownloadError{Reason: fmt.Sprintf("%s answered status %d", d.url.Host, res.StatusCode)}
	}
	return res, nil
}

// fileName is the base name to save the download under: the one asked
// for, else the Content-Disposition's when asked to use it, else the last
// element of the final URL's path, else "download".
func fileName(d *Download, res *http.Response) string {
	base := d.req.FileName
	if base == "" && d.req.UseHeader {
		if _, params, err := mime.ParseMediaType(res.Header.Get("Content-Disposition")); err == nil {
			base = path.Base("/" + strings.ReplaceAll(params["filename"], "\\", "/"))
		}
	}
	if base == "" || base == "/" {
		base = path.Base("/" + res.Request.URL.Path)
	}
	if base == "" || base == "/" || base == "." {
		base = "download"
	}
	return base
}

// fetch downloads into a temporary file next to the target and renames it
// into place once complete; on any failure the temporary file is removed.
func (s *Service) fetch(ctx context.Context, d *Download) (string, error) {
	res, err := s.request(ctx, d)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	base := fileName(d, res)
	name := d.req.Root + "/" + base
	if err := s.checkName(d.fs, d.req.Root, base); err != nil {
		return "", err
	}
	d.name.Store(&name)
	if res.ContentLength > 0 {
		d.total.Store(res.ContentLength)
		if err := d.fs.HasSpaceFor(res.ContentLength); err != nil {
			return "", ErrNoSpace
		}
	}
	dir := path.Dir(path.Clean("/" + name))
	if err := d.fs.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp := path.Join(dir, "."+path.Base(path.Clean("/"+name))+".wharf-pull-"+d.ID)
	f, err := d.fs.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return "", err
	}
	ok := false
	defer func() {
		if !ok {
			_ = f.Close()
			_ = d.fs.Remove(tmp)
		}
	}()
	buf := make([]byte, 1<<20)
	for {
		n, rerr := res.Body.Read(buf)
		if n > 0 {
			if _, err := f.Write(buf[:n]); err != nil {
				if errors.Is(err, sandbox.ErrNoSpace) {
					return "", ErrNoSpace
				}
				return "", err
			}
			d.done.Add(int64(n))
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			if ctx.Err() != nil {
				return "", ctx.Err()
			}
			return "", &DownloadError{Reason: "reading from " + d.url.Host + " failed: " + rerr.Error()}
		}
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	if fi, err := d.fs.Lstat(name); err == nil {
		if fi.IsDir() {
			return "", usererr.New(usererr.Invalid, "Cannot write the download: a directory of that name exists.")
		}
		if err := d.fs.Remove(name); err != nil {
			return "", err
		}
	}
	if err := d.fs.Rename(tmp, name); err != nil {
		return "", err
	}
	ok = true
	return name, nil
}
