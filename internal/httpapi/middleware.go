package httpapi

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"runtime/debug"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/wharf/wharf/internal/config"
)

type ctxKey int

const requestIDKey ctxKey = iota

// unauthenticatedBodyTimeout bounds how long a client that has not yet proven
// who it is may take to send its body; authenticated handlers lift it.
const unauthenticatedBodyTimeout = 30 * time.Second

// requestIDFrom returns the request's id.
func requestIDFrom(r *http.Request) string {
	id, _ := r.Context().Value(requestIDKey).(string)
	return id
}

// requestID gives every request an id, sent back in X-Request-Id on every
// response, errors included.
func (a *API) requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := uuid.NewString()
		w.Header().Set("X-Request-Id", id)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestIDKey, id)))
	})
}

// identify sends a User-Agent header on every answer, errors included.
// Pelican's panel reads it on every answer it checks (DaemonRepository::
// enforceValidNodeToken) and takes an empty one for a connection error, so
// without it every error message and the node's health check break. Only
// the "Pelican Wings/vX.Y.Z (id:...)" form is compared with the node's
// token id there; ours names Wharf and carries the token id the same way
// (the id is not a secret: it is the public half of the node's credential).
func (a *API) identify(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("User-Agent", "Wharf/"+a.Version+" (id:"+a.Config.Get().TokenID+")")
		next.ServeHTTP(w, r)
	})
}

// recoverPanics turns a panic in a handler into a JSON 500 instead of a
// dropped connection, and logs it with its stack.
func (a *API) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rw := wrapStatus(w)
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			a.Log.Error("panic in HTTP handler", "request_id", requestIDFrom(r), "path", r.URL.Path,
				"panic", v, "stack", string(debug.Stack()))
			if !rw.wroteHeader {
				writeError(rw, r, http.StatusInternalServerError, msgInternal)
			}
		}()
		next.ServeHTTP(rw, r)
	})
}

// accessLog logs each request once it is answered. Query values that carry
// credentials are redacted.
func (a *API) accessLog(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rw := wrapStatus(w)
		next.ServeHTTP(rw, r)
		status := rw.status
		if status == 0 {
			status = http.StatusOK
		}
		a.Log.Info("http request",
			"request_id", requestIDFrom(r),
			"method", r.Method,
			"path", r.URL.Path,
			"query", RedactQuery(r.URL.RawQuery),
			"status", status,
			"bytes", rw.bytes,
			"duration_ms", time.Since(start).Milliseconds(),
			"ip", a.clientIP(r),
		)
	})
}

// RedactQuery replaces the values of credential-carrying query keys.
func RedactQuery(raw string) string {
	if raw == "" {
		return ""
	}
	values, err := url.ParseQuery(raw)
	if err != nil {
		return "[unparsable query redacted]"
	}
	for k := range values {
		switch strings.ToLower(k) {
		case "token", "jwt", "access_token", "signature", "x-amz-signature", "x-amz-credential", "x-amz-security-token":
			values[k] = []string{"REDACTED"}
		}
	}
	return values.Encode()
}

// limitUnauthenticatedBody gives the client a bounded time to send its body
// until a handler has authenticated it (liftBodyDeadline).
func (a *API) limitUnauthenticatedBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(unauthenticatedBodyTimeout))
		next.ServeHTTP(w, r)
	})
}

// liftBodyDeadline removes the read deadline once the caller is
// authenticated: uploads, transfers and websockets may take as long as they need.
func liftBodyDeadline(w http.ResponseWriter) {
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
}

// bearerToken is the token of "Authorization: Bearer <token>", the one
// parser of that header (node token and transfer token alike); errNoBearer
// (401 with WWW-Authenticate) when it is missing or malformed.
func bearerToken(r *http.Request) (string, error) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || scheme != "Bearer" || token == "" {
		return "", errNoBearer
	}
	return token, nil
}

// requireBearer checks "Authorization: Bearer <node token>": a missing or
// malformed header is 401 with WWW-Authenticate, a wrong token 403.
func (a *API) requireBearer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, err := bearerToken(r)
		if err != nil {
			a.fail(w, r, err)
			return
		}
		// Hashing first makes the comparison constant-time in the length too.
		got := sha256.Sum256([]byte(token))
		want := sha256.Sum256([]byte(a.Config.Get().Token))
		if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			a.fail(w, r, errWrongBearer)
			return
		}
		liftBodyDeadline(w)
		next.ServeHTTP(w, r)
	})
}

// cors answers preflights without authentication and sets the CORS headers
// for the backend's origin and each allowed origin. Credentials are allowed,
// so the origin is always echoed, never "*".
func (a *API) cors(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cfg := a.Config.Get()
		// Without an Origin (not a browser), the backend's origin is named.
		allow := originOf(cfg.Remote)
		if o := r.Header.Get("Origin"); o != "" {
			allow = ""
			if originAllowed(cfg, o) {
				allow = o
			}
		}
		h := w.Header()
		h.Add("Vary", "Origin")
		if allow != "" {
			h.Set("Access-Control-Allow-Origin", allow)
			h.Set("Access-Control-Allow-Credentials", "true")
		}
		if r.Method == http.MethodOptions {
			h.Set("Access-Control-Allow-Methods", "GET, POST, PATCH, PUT, DELETE, OPTIONS")
			h.Set("Access-Control-Allow-Headers", "Accept, Accept-Encoding, Authorization, Cache-Control, Content-Type, Content-Length, Origin, X-Real-IP, X-CSRF-Token")
			h.Set("Access-Control-Max-Age", "7200")
			if cfg.AllowCORSPrivateNetwork {
				h.Set("Access-Control-Allow-Private-Network", "true")
			}
			w.WriteHeader(http.StatusNoContent)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// originAllowed reports whether a browser Origin may talk to this node: the
// backend's own origin or one of allowed_origins ("*" allows any). It is the
// one origin rule, for CORS and for websocket upgrades.
func originAllowed(cfg *config.Config, origin string) bool {
	if origin == "" {
		return false
	}
	if origin == originOf(cfg.Remote) {
		return true
	}
	for _, ao := range cfg.AllowedOrigins {
		if ao == "*" || strings.TrimRight(ao, "/") == origin {
			return true
		}
	}
	return false
}

func originOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return ""
	}
	return u.Scheme + "://" + u.Host
}

// clientIP is the remote address, or the first untrusted address of
// X-Forwarded-For (walking from the right) when the peer is a trusted proxy.
func (a *API) clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	proxies := parseProxies(a.Config.Get().API.TrustedProxies)
	if !trusted(peer, proxies) {
		return peer.Unmap().String()
	}
	hops := strings.Split(r.Header.Get("X-Forwarded-For"), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		ip, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			break
		}
		if !trusted(ip, proxies) {
			return ip.Unmap().String()
		}
	}
	return peer.Unmap().String()
}

func parseProxies(list []string) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(list))
	for _, p := range list {
		if pfx, err := netip.ParsePrefix(p); err == nil {
			out = append(out, pfx)
		} else if ip, err := netip.ParseAddr(p); err == nil {
			out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
		}
	}
	return out
}

func trusted(ip netip.Addr, proxies []netip.Prefix) bool {
	ip = ip.Unmap()
	for _, p := range proxies {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// statusWriter records the status and size of a response. It passes
// ReadFrom through, so that a file copied to the response goes by sendfile,
// and keeps the other optional interfaces reachable (Flush, Hijack, and
// Unwrap for ResponseController).
type statusWriter struct {
	http.ResponseWriter
	status      int
	bytes       int64
	wroteHeader bool
}

// wrapStatus returns w itself when it already records its status (the
// middleware chain wraps the writer once), a new statusWriter otherwise.
func wrapStatus(w http.ResponseWriter) *statusWriter {
	if sw, ok := w.(*statusWriter); ok {
		return sw
	}
	return &statusWriter{ResponseWriter: w}
}

func (w *statusWriter) WriteHeader(code int) {
	// An informational answer (1xx: a live transfer's 102) is not the
	// status: the final one follows.
	if !w.wroteHeader && code >= 200 {
		w.status = code
		w.wroteHeader = true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	n, err := w.ResponseWriter.Write(p)
	w.bytes += int64(n)
	return n, err
}

// ReadFrom hands src to the underlying writer's ReadFrom: net/http's
// response sends a file (or a LimitedReader of one, as ServeContent gives)
// with sendfile.
func (w *statusWriter) ReadFrom(src io.Reader) (int64, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	var (
		n   int64
		err error
	)
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		n, err = rf.ReadFrom(src)
	} else {
		// Hide ReadFrom so that io.Copy does not come back here.
		n, err = io.Copy(writerOnly{w.ResponseWriter}, src)
	}
	w.bytes += n
	return n, err
}

// writerOnly hides every method of a writer but Write.
type writerOnly struct{ io.Writer }

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush lets streaming handlers flush through the wrapper.
func (w *statusWriter) Flush() {
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack lets websocket upgrades through the wrapper.
func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if !w.wroteHeader {
		w.status = http.StatusSwitchingProtocols
		w.wroteHeader = true
	}
	return http.NewResponseController(w.ResponseWriter).Hijack()
}
