package tokens

import (
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/wharf/wharf/internal/ids"
)

// Purpose is what a token is for.
type Purpose string

// The purposes, spelled as in the panels' scope claim.
const (
	PurposeWebsocket      Purpose = "websocket"
	PurposeFileDownload   Purpose = "file-download"
	PurposeBackupDownload Purpose = "backup-download"
	PurposeUpload         Purpose = "file-upload"
	PurposeTransfer       Purpose = "transfer"
)

// NotBeforeLeeway is the clock skew allowed on nbf. exp gets none.
const NotBeforeLeeway = 60 * time.Second

// MaxTokenLength bounds what is parsed at all.
const MaxTokenLength = 16 << 10

// Verifier checks tokens against the node token.
type Verifier struct {
	key func() []byte
	now func() time.Time
	// requireScope, when set and true, refuses a token without a scope
	// claim (api.require_token_scope).
	requireScope func() bool
	scoped       atomic.Int64 // valid tokens seen with a scope claim
	unscoped     atomic.Int64 // and without
}

// RequireScope makes the verifier refuse a token that has no scope claim
// whenever required() is true (read for every token: the setting can change
// at run time). Pterodactyl panels since 1.12 and Pelican put a scope on
// every token; older panels put none.
func (v *Verifier) RequireScope(required func() bool) { v.requireScope = required }

// ScopesSeen counts the signature-valid tokens seen since the start with
// and without a scope claim (the diagnostics suggest requiring scopes when
// every token had one).
func (v *Verifier) ScopesSeen() (scoped, unscoped int64) { return v.scoped.Load(), v.unscoped.Load() }

// NewVerifier returns a Verifier. key is called for every token (the node
// token can change at run time); now is the clock (time.Now when nil).
func NewVerifier(key func() []byte, now func() time.Time) *Verifier {
	if now == nil {
		now = time.Now
	}
	return &Verifier{key: key, now: now}
}

// WebsocketClaims are the claims of a websocket token.
type WebsocketClaims struct {
	UserUUID    string
	ServerUUID  string
	Permissions []string
	JTI         string
	UniqueID    string // optional
	IssuedAt    time.Time
	ExpiresAt   time.Time
}

// FileDownloadClaims are the claims of a file-download token.
type FileDownloadClaims struct {
	FilePath   string // relative to the server directory, as sent
	ServerUUID string
	UniqueID   string
	IssuedAt   time.Time // zero when absent
	ExpiresAt  time.Time
}

// BackupDownloadClaims are the claims of a backup-download token.
// unique_id is required: every panel token carries one, and without it the
// token could not be held to one use.
type BackupDownloadClaims struct {
	ServerUUID string
	BackupUUID string
	UniqueID   string
	IssuedAt   time.Time // zero when absent
	ExpiresAt  time.Time
}

// UploadClaims are the claims of a file-upload token.
type UploadClaims struct {
	ServerUUID string
	UserUUID   string
	UniqueID   string
	IssuedAt   time.Time // zero when absent
	ExpiresAt  time.Time
}

// OneTimeUse returns what a signed-URL token grants once: its server, its
// one-time id and when that id may be forgotten.
func (c *FileDownloadClaims) OneTimeUse() (server, uniqueID string, exp time.Time) {
	return c.ServerUUID, c.UniqueID, c.ExpiresAt
}

// OneTimeUse: see FileDownloadClaims.OneTimeUse.
func (c *BackupDownloadClaims) OneTimeUse() (server, uniqueID string, exp time.Time) {
	return c.ServerUUID, c.UniqueID, c.ExpiresAt
}

// OneTimeUse: see FileDownloadClaims.OneTimeUse.
func (c *UploadClaims) OneTimeUse() (server, uniqueID string, exp time.Time) {
	return c.ServerUUID, c.UniqueID, c.ExpiresAt
}

// TransferClaims are the claims of a transfer token.
type TransferClaims struct {
	ServerUUID string // from server_uuid, or from sub when absent
	UniqueID   string // optional
	IssuedAt   time.Time
	ExpiresAt  time.Time
}

// Websocket verifies a websocket token: user_uuid, server_uuid (UUID),
// permissions (array of strings), jti, iat and exp are required. The
// denylist is a separate check (Denylist.Check).
func (v *Verifier) Websocket(raw string) (*WebsocketClaims, error) {
	c, err := v.parse(raw, PurposeWebsocket)
	if err != nil {
		return nil, err
	}
	out := &WebsocketClaims{ExpiresAt: c.exp}
	if out.UserUUID, err = c.str("user_uuid"); err != nil {
		return nil, err
	}
	if out.ServerUUID, err = c.uuid("server_uuid"); err != nil {
		return nil, err
	}
	if out.Permissions, err = c.strings("permissions"); err != nil {
		return nil, err
	}
	if out.JTI, err = c.str("jti"); err != nil {
		return nil, err
	}
	if c.iat.IsZero() {
		return nil, claimErr(ErrMissingClaim, "iat")
	}
	out.IssuedAt = c.iat
	out.UniqueID, _ = c.optStr("unique_id")
	return out, nil
}

// FileDownload verifies a file-download token: file_path, server_uuid,
// unique_id and exp are required. The caller consumes unique_id with a
// OneTimeStore.
func (v *Verifier) FileDownload(raw string) (*FileDownloadClaims, error) {
	c, err := v.parse(raw, PurposeFileDownload)
	if err != nil {
		return nil, err
	}
	out := &FileDownloadClaims{ExpiresAt: c.exp, IssuedAt: c.iat}
	if out.FilePath, err = c.str("file_path"); err != nil {
		return nil, err
	}
	if out.ServerUUID, err = c.uuid("server_uuid"); err != nil {
		return nil, err
	}
	if out.UniqueID, err = c.str("unique_id"); err != nil {
		return nil, err
	}
	return out, nil
}

// BackupDownload verifies a backup-download token: server_uuid,
// backup_uuid (both UUIDs), unique_id and exp are required.
func (v *Verifier) BackupDownload(raw string) (*BackupDownloadClaims, error) {
	c, err := v.parse(raw, PurposeBackupDownload)
	if err != nil {
		return nil, err
	}
	out := &BackupDownloadClaims{ExpiresAt: c.exp, IssuedAt: c.iat}
	if out.ServerUUID, err = c.uuid("server_uuid"); err != nil {
		return nil, err
	}
	if out.BackupUUID, err = c.uuid("backup_uuid"); err != nil {
		return nil, err
	}
	if out.UniqueID, err = c.str("unique_id"); err != nil {
		return nil, err
	}
	return out, nil
}

// Upload verifies a file-upload token: server_uuid, user_uuid, unique_id
// and exp are required.
func (v *Verifier) Upload(raw string) (*UploadClaims, error) {
	c, err := v.parse(raw, PurposeUpload)
	if err != nil {
		return nil, err
	}
	out := &UploadClaims{ExpiresAt: c.exp, IssuedAt: c.iat}
	if out.ServerUUID, err = c.uuid("server_uuid"); err != nil {
		return nil, err
	}
	if out.UserUUID, err = c.str("user_uuid"); err != nil {
		return nil, err
	}
	if out.UniqueID, err = c.str("unique_id"); err != nil {
		return nil, err
	}
	return out, nil
}

// Transfer verifies a transfer token: the server UUID comes from
// server_uuid, or from sub when server_uuid is absent; exp is required.
func (v *Verifier) Transfer(raw string) (*TransferClaims, error) {
	c, err := v.parse(raw, PurposeTransfer)
	if err != nil {
		return nil, err
	}
	out := &TransferClaims{ExpiresAt: c.exp, IssuedAt: c.iat}
	if _, ok := c.m["server_uuid"]; ok {
		out.ServerUUID, err = c.uuid("server_uuid")
	} else {
		out.ServerUUID, err = c.uuid("sub")
		if errors.Is(err, ErrMissingClaim) {
			err = claimErr(ErrMissingClaim, "server_uuid")
		}
	}
	if err != nil {
		return nil, err
	}
	out.UniqueID, _ = c.optStr("unique_id")
	return out, nil
}

// Sign signs claims with HS256. It is for tests and the development panel.
func Sign(key []byte, claims map[string]any) (string, error) {
	if len(key) == 0 {
		return "", ErrNoKey
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims(claims)).SignedString(key)
}

type claims struct {
	m   jwt.MapClaims
	exp time.Time
	iat time.Time
}

var parser = jwt.NewParser(
	jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
	jwt.WithoutClaimsValidation(), // exp and nbf are checked below, exactly
	jwt.WithJSONNumber(),
)

func (v *Verifier) parse(raw string, want Purpose) (*claims, error) {
	if raw == "" || len(raw) > MaxTokenLength {
		return nil, ErrMalformed
	}
	key := v.key()
	if len(key) == 0 {
		return nil, ErrNoKey
	}
	m := jwt.MapClaims{}
	_, err := parser.ParseWithClaims(raw, m, func(t *jwt.Token) (any, error) {
		if t.Method != jwt.SigningMethodHS256 {
			return nil, ErrAlgorithm
		}
		return key, nil
	})
	switch {
	case err == nil:
	case errors.Is(err, ErrAlgorithm), errors.Is(err, jwt.ErrTokenSignatureInvalid) && strings.Contains(err.Error(), "signing method"):
		return nil, ErrAlgorithm
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return nil, ErrSignature
	default:
		return nil, ErrMalformed
	}
	c := &claims{m: m}
	now := v.now()
	exp, err := m.GetExpirationTime()
	if err != nil {
		return nil, claimErr(ErrBadClaim, "exp")
	}
	if exp == nil {
		return nil, claimErr(ErrMissingClaim, "exp")
	}
	c.exp = exp.Time
	if !now.Before(c.exp) {
		return nil, ErrExpired
	}
	nbf, err := m.GetNotBefore()
	if err != nil {
		return nil, claimErr(ErrBadClaim, "nbf")
	}
	if nbf != nil && now.Add(NotBeforeLeeway).Before(nbf.Time) {
		return nil, ErrNotYetValid
	}
	iat, err := m.GetIssuedAt()
	if err != nil {
		return nil, claimErr(ErrBadClaim, "iat")
	}
	if iat != nil {
		c.iat = iat.Time
	}
	if err := v.checkScopePresent(c); err != nil {
		return nil, err
	}
	if err := c.checkPurpose(want); err != nil {
		return nil, err
	}
	return c, nil
}

// checkScopePresent counts the token as scoped or not and, when scopes are
// required, refuses one without.
func (v *Verifier) checkScopePresent(c *claims) error {
	if _, ok := c.m["scope"]; ok {
		v.scoped.Add(1)
		return nil
	}
	v.unscoped.Add(1)
	if v.requireScope != nil && v.requireScope() {
		return ErrNoScope
	}
	return nil
}

// checkPurpose: a scope claim (space-separated string, or array of
// strings) must name want; without one, the purpose implied by the claims
// must be want.
func (c *claims) checkPurpose(want Purpose) error {
	if sc, ok := c.m["scope"]; ok {
		var scopes []string
		switch s := sc.(type) {
		case string:
			scopes = strings.Fields(s)
		case []any:
			for _, e := range s {
				str, ok := e.(string)
				if !ok {
					return claimErr(ErrBadClaim, "scope")
				}
				scopes = append(scopes, strings.Fields(str)...)
			}
		default:
			return claimErr(ErrBadClaim, "scope")
		}
		for _, s := range scopes {
			if Purpose(s) == want {
				return nil
			}
		}
		return ErrWrongPurpose
	}
	if c.implied() != want {
		return ErrWrongPurpose
	}
	return nil
}

func (c *claims) implied() Purpose {
	has := func(k string) bool { _, ok := c.m[k]; return ok }
	switch {
	case has("permissions"):
		return PurposeWebsocket
	case has("file_path"):
		return PurposeFileDownload
	case has("backup_uuid"):
		return PurposeBackupDownload
	case has("user_uuid"):
		return PurposeUpload
	default:
		return PurposeTransfer
	}
}

func (c *claims) optStr(name string) (string, bool) {
	s, ok := c.m[name].(string)
	return s, ok && s != ""
}

func (c *claims) str(name string) (string, error) {
	v, ok := c.m[name]
	if !ok || v == nil {
		return "", claimErr(ErrMissingClaim, name)
	}
	s, ok := v.(string)
	if !ok {
		return "", claimErr(ErrBadClaim, name)
	}
	if s == "" {
		return "", claimErr(ErrMissingClaim, name)
	}
	return s, nil
}

func (c *claims) uuid(name string) (string, error) {
	s, err := c.str(name)
	if err != nil {
		return "", err
	}
	if !ids.IsUUID(s) {
		return "", claimErr(ErrBadClaim, name)
	}
	return strings.ToLower(s), nil
}

func (c *claims) strings(name string) ([]string, error) {
	v, ok := c.m[name]
	if !ok || v == nil {
		return nil, claimErr(ErrMissingClaim, name)
	}
	arr, ok := v.([]any)
	if !ok {
		return nil, claimErr(ErrBadClaim, name)
	}
	out := make([]string, 0, len(arr))
	for _, e := range arr {
		s, ok := e.(string)
		if !ok {
			return nil, claimErr(ErrBadClaim, name)
		}
		out = append(out, s)
	}
	return out, nil
}
