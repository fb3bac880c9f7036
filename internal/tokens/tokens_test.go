package tokens

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"go.uber.org/goleak"
)

const childEnv = "WHARF_TOKENS_TEST_CHILD_STORE"

func TestMain(m *testing.M) {
	if p := os.Getenv(childEnv); p != "" {
		childUse(p)
		return
	}
	goleak.VerifyTestMain(m)
}

// childUse is the child process of TestOneTimeSurvivesKill9: it uses an id,
// says so, and waits to be killed.
func childUse(path string) {
	s, err := OpenOneTimeStore(path, nil)
	if err == nil {
		err = s.Use("killed-id", time.Now().Add(time.Hour))
	}
	fmt.Printf("used %v\n", err)
	time.Sleep(time.Hour) // the parent kills this process; nothing to wait on
}

var (
	key     = []byte("node-token-secret")
	now     = time.Unix(1_800_000_000, 0)
	server  = "0b0e3f6a-1c2d-4e5f-8a9b-0c1d2e3f4a5b"
	user    = "9f8e7d6c-5b4a-4321-8fed-cba987654321"
	backup  = "11111111-2222-4333-8444-555555555555"
	clock   = func() time.Time { return now }
	keyFunc = func() []byte { return key }
)

func claimsFor(p Purpose) map[string]any {
	base := map[string]any{
		"iss": "https://panel.example", "aud": []string{"https://node.example"},
		"jti": "abc123", "iat": now.Unix() - 10, "nbf": now.Unix() - 300, "exp": now.Unix() + 600,
		"unique_id": "uid-" + string(p), "user_id": 7,
	}
	switch p {
	case PurposeWebsocket:
		base["user_uuid"], base["server_uuid"], base["permissions"] = user, server, []string{"control.console", "websocket.connect"}
	case PurposeFileDownload:
		base["user_uuid"], base["server_uuid"], base["file_path"] = user, server, "/plugins/x.jar"
	case PurposeBackupDownload:
		base["user_uuid"], base["server_uuid"], base["backup_uuid"] = user, server, backup
	case PurposeUpload:
		base["user_uuid"], base["server_uuid"] = user, server
	case PurposeTransfer:
		base["sub"] = server
	}
	return base
}

func sign(t testing.TB, c map[string]any) string {
	t.Helper()
	s, err := Sign(key, c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func with(c map[string]any, kv ...any) map[string]any {
	out := map[string]any{}
	for k, v := range c {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(out, kv[i].(string))
		} else {
			out[kv[i].(string)] = kv[i+1]
		}
	}
	return out
}

var allPurposes = []Purpose{PurposeWebsocket, PurposeFileDownload, PurposeBackupDownload, PurposeUpload, PurposeTransfer}

func verify(v *Verifier, p Purpose, raw string) error {
	var err error
	switch p {
	case PurposeWebsocket:
		_, err = v.Websocket(raw)
	case PurposeFileDownload:
		_, err = v.FileDownload(raw)
	case PurposeBackupDownload:
		_, err = v.BackupDownload(raw)
	case PurposeUpload:
		_, err = v.Upload(raw)
	case PurposeTransfer:
		_, err = v.Transfer(raw)
	}
	return err
}

func unsignedToken(header map[string]any, claims map[string]any, sig string) string {
	h, _ := json.Marshal(header)
	c, _ := json.Marshal(claims)
	enc := base64.RawURLEncoding.EncodeToString
	return enc(h) + "." + enc(c) + "." + sig
}

func TestEveryPurposeAccepted(t *testing.T) {
	v := NewVerifier(keyFunc, clock)
	for _, p := range allPurposes {
		if err := verify(v, p, sign(t, claimsFor(p))); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	ws, err := v.Websocket(sign(t, claimsFor(PurposeWebsocket)))
	if err != nil || ws.ServerUUID != server || ws.UserUUID != user || len(ws.Permissions) != 2 || ws.JTI != "abc123" || ws.IssuedAt.Unix() != now.Unix()-10 {
		t.Fatalf("websocket claims %+v %v", ws, err)
	}
	bd, err := v.BackupDownload(sign(t, claimsFor(PurposeBackupDownload)))
	if err != nil || bd.BackupUUID != backup || bd.UniqueID == "" {
		t.Fatalf("backup claims %+v %v", bd, err)
	}
	tr, err := v.Transfer(sign(t, with(claimsFor(PurposeTransfer), "sub", nil, "server_uuid", strings.ToUpper(server))))
	if err != nil || tr.ServerUUID != server {
		t.Fatalf("transfer via server_uuid %+v %v", tr, err)
	}
}

func TestRefusals(t *testing.T) {
	v := NewVerifier(keyFunc, clock)
	ws := claimsFor(PurposeWebsocket)
	hs384 := func() string {
		s, _ := jwt.NewWithClaims(jwt.SigningMethodHS384, jwt.MapClaims(ws)).SignedString(key)
		return s
	}()
	otherKey := func() string { s, _ := Sign([]byte("other"), ws); return s }()
	cases := []struct {
		name    string
		purpose Purpose
		raw     string
		want    error
	}{
		{"bad signature", PurposeWebsocket, otherKey, ErrSignature},
		{"tampered payload", PurposeWebsocket, func() string {
			parts := strings.Split(sign(t, ws), ".")
			c, _ := json.Marshal(with(ws, "user_uuid", "someone-else"))
			return parts[0] + "." + base64.RawURLEncoding.EncodeToString(c) + "." + parts[2]
		}(), ErrSignature},
		{"alg none", PurposeWebsocket, unsignedToken(map[string]any{"alg": "none", "typ": "JWT"}, ws, ""), ErrAlgorithm},
		{"alg none with signature", PurposeWebsocket, unsignedToken(map[string]any{"alg": "none"}, ws, "abc"), ErrAlgorithm},
		{"alg HS384", PurposeWebsocket, hs384, ErrAlgorithm},
		{"alg RS256", PurposeWebsocket, unsignedToken(map[string]any{"alg": "RS256"}, ws, "c2ln"), ErrAlgorithm},
		{"expired", PurposeWebsocket, sign(t, with(ws, "exp", now.Unix()-1)), ErrExpired},
		{"exp is now (no leeway)", PurposeWebsocket, sign(t, with(ws, "exp", now.Unix())), ErrExpired},
		{"exp missing", PurposeWebsocket, sign(t, with(ws, "exp", nil)), ErrMissingClaim},
		{"exp not a number", PurposeWebsocket, sign(t, with(ws, "exp", "tomorrow")), ErrBadClaim},
		{"nbf in the future", PurposeWebsocket, sign(t, with(ws, "nbf", now.Unix()+120)), ErrNotYetValid},
		{"websocket without iat", PurposeWebsocket, sign(t, with(ws, "iat", nil)), ErrMissingClaim},
		{"websocket without jti", PurposeWebsocket, sign(t, with(ws, "jti", nil)), ErrMissingClaim},
		{"websocket without user_uuid", PurposeWebsocket, sign(t, with(ws, "user_uuid", nil)), ErrMissingClaim},
		{"websocket permissions not an array", PurposeWebsocket, sign(t, with(ws, "permissions", "*")), ErrBadClaim},
		{"websocket server_uuid not a UUID", PurposeWebsocket, sign(t, with(ws, "server_uuid", "../../etc")), ErrBadClaim},
		{"download without unique_id", PurposeFileDownload, sign(t, with(claimsFor(PurposeFileDownload), "unique_id", nil)), ErrMissingClaim},
		{"download without server_uuid", PurposeFileDownload, sign(t, with(claimsFor(PurposeFileDownload), "server_uuid", nil)), ErrMissingClaim},
		{"download file_path not a string", PurposeFileDownload, sign(t, with(claimsFor(PurposeFileDownload), "file_path", 5)), ErrBadClaim},
		{"backup without unique_id", PurposeBackupDownload, sign(t, with(claimsFor(PurposeBackupDownload), "unique_id", nil)), ErrMissingClaim},
		{"backup_uuid not a UUID", PurposeBackupDownload, sign(t, with(claimsFor(PurposeBackupDownload), "backup_uuid", "../../etc/x")), ErrBadClaim},
		{"upload without unique_id", PurposeUpload, sign(t, with(claimsFor(PurposeUpload), "unique_id", nil)), ErrMissingClaim},
		{"upload server_uuid not a UUID", PurposeUpload, sign(t, with(claimsFor(PurposeUpload), "server_uuid", "x")), ErrBadClaim},
		{"transfer sub not a UUID", PurposeTransfer, sign(t, with(claimsFor(PurposeTransfer), "sub", "node-1")), ErrBadClaim},
		{"transfer without server", PurposeTransfer, sign(t, with(claimsFor(PurposeTransfer), "sub", nil)), ErrMissingClaim},
		{"scope mismatch", PurposeFileDownload, sign(t, with(claimsFor(PurposeFileDownload), "scope", "file-upload websocket")), ErrWrongPurpose},
		{"scope array mismatch", PurposeTransfer, sign(t, with(claimsFor(PurposeTransfer), "scope", []string{"file-download"})), ErrWrongPurpose},
		{"empty scope", PurposeTransfer, sign(t, with(claimsFor(PurposeTransfer), "scope", "")), ErrWrongPurpose},
		{"scope of wrong type", PurposeTransfer, sign(t, with(claimsFor(PurposeTransfer), "scope", 3)), ErrBadClaim},
		{"upload token with scope but file_path (scope says upload)", PurposeFileDownload, sign(t, with(claimsFor(PurposeFileDownload), "scope", "file-upload")), ErrWrongPurpose},
		{"empty", PurposeWebsocket, "", ErrMalformed},
		{"garbage", PurposeWebsocket, "not.a.jwt", ErrMalformed},
		{"too long", PurposeWebsocket, strings.Repeat("a", MaxTokenLength+1), ErrMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := verify(v, c.purpose, c.raw)
			if !errors.Is(err, c.want) || !errors.Is(err, ErrInvalidToken) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
			if c.raw != "" && strings.Contains(err.Error(), c.raw) {
				t.Fatal("error contains the token")
			}
		})
	}
}

func TestNotBeforeLeewayAndNoExpLeeway(t *testing.T) {
	v := NewVerifier(keyFunc, clock)
	ws := claimsFor(PurposeWebsocket)
	if _, err := v.Websocket(sign(t, with(ws, "nbf", now.Unix()+30))); err != nil {
		t.Fatalf("nbf 30 s ahead (clock skew) refused: %v", err)
	}
	if _, err := v.Websocket(sign(t, with(ws, "exp", now.Unix()+1))); err != nil {
		t.Fatalf("exp 1 s ahead refused: %v", err)
	}
}

// TestA4WrongPurposeEveryPair: a token minted for one purpose is refused by
// every other endpoint, with or without a scope claim, although it carries
// the claims the other endpoint needs (panel tokens carry unique_id,
// user_uuid and server_uuid).
func TestA4WrongPurposeEveryPair(t *testing.T) {
	v := NewVerifier(keyFunc, clock)
	for _, minted := range allPurposes {
		for _, scoped := range []bool{false, true} {
			c := claimsFor(minted)
			// Give it every claim all endpoints need, except the ones that
			// define another purpose.
			if minted != PurposeTransfer {
				c = with(c, "server_uuid", server)
			}
			if scoped {
				c = with(c, "scope", string(minted))
			}
			raw := sign(t, c)
			for _, at := range allPurposes {
				err := verify(v, at, raw)
				if at == minted && err != nil {
					t.Errorf("%s token (scoped=%v) refused at its own endpoint: %v", minted, scoped, err)
				}
				if at != minted && !errors.Is(err, ErrWrongPurpose) {
					t.Errorf("%s token (scoped=%v) at %s endpoint: %v, want ErrWrongPurpose", minted, scoped, at, err)
				}
			}
		}
	}
	// A scope naming several purposes is accepted by each of them.
	raw := sign(t, with(claimsFor(PurposeUpload), "scope", "file-upload websocket"))
	if _, err := v.Upload(raw); err != nil {
		t.Fatalf("scope match: %v", err)
	}
	raw = sign(t, with(claimsFor(PurposeBackupDownload), "scope", []string{"websocket", "backup-download"}))
	if _, err := v.BackupDownload(raw); err != nil {
		t.Fatalf("scope array match: %v", err)
	}
}

func TestKeyReadAtEachCall(t *testing.T) {
	cur := []byte("first")
	v := NewVerifier(func() []byte { return cur }, clock)
	raw, _ := Sign([]byte("first"), claimsFor(PurposeTransfer))
	if _, err := v.Transfer(raw); err != nil {
		t.Fatal(err)
	}
	cur = []byte("second")
	if _, err := v.Transfer(raw); !errors.Is(err, ErrSignature) {
		t.Fatalf("old key still accepted: %v", err)
	}
	cur = nil
	if _, err := v.Transfer(raw); !errors.Is(err, ErrNoKey) {
		t.Fatalf("empty key: %v", err)
	}
}

// ---- one-time ids ----

func TestOneTimeUseOnce(t *testing.T) {
	s, err := OpenOneTimeStore(filepath.Join(t.TempDir(), "ids"), clock)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	exp := now.Add(time.Minute)
	if err := s.Use("a", exp); err != nil {
		t.Fatal(err)
	}
	if err := s.Use("a", exp); !errors.Is(err, ErrUsed) || !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("second use: %v", err)
	}
	if err := s.Use("", exp); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("empty id: %v", err)
	}
	if err := s.Use("b", now); !errors.Is(err, ErrExpired) {
		t.Fatalf("expired: %v", err)
	}
	if err := s.Use("with space\nand newline", exp); err != nil {
		t.Fatal(err)
	}
}

func TestOneTimeRace50(t *testing.T) {
	s, err := OpenOneTimeStore(filepath.Join(t.TempDir(), "ids"), clock)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, used := 0, 0
	start := make(chan struct{})
	for range 50 {
		wg.Go(func() {
			<-start
			err := s.Use("raced", now.Add(time.Minute))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, ErrUsed):
				used++
			default:
				t.Error(err)
			}
		})
	}
	close(start)
	wg.Wait()
	if ok != 1 || used != 49 {
		t.Fatalf("%d successes, %d refusals; want 1 and 49", ok, used)
	}
}

func TestOneTimePersistsAcrossRestartAndExpires(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ids")
	cur := now
	c := func() time.Time { return cur }
	s, err := OpenOneTimeStore(path, c)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Use("persisted", now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := s.Use("short", now.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	// A torn record (crash mid-write, Use never returned) is ignored.
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	_, _ = f.WriteString("1900000000 \"torn")
	_ = f.Close()

	s2, err := OpenOneTimeStore(path, c)
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Use("persisted", now.Add(time.Minute)); !errors.Is(err, ErrUsed) {
		t.Fatalf("after restart: %v", err)
	}
	if err := s2.Use("torn", now.Add(time.Minute)); err != nil {
		t.Fatalf("torn record counted: %v", err)
	}
	_ = s2.Close()
	// Once exp has passed, the id is forgotten and compacted away.
	cur = now.Add(2 * time.Second)
	s3, err := OpenOneTimeStore(path, c)
	if err != nil {
		t.Fatal(err)
	}
	defer s3.Close()
	if s3.Len() != 2 { // persisted and torn
		t.Fatalf("len %d after compaction", s3.Len())
	}
	b, _ := os.ReadFile(path)
	if strings.Contains(string(b), "short") {
		t.Fatalf("expired id not compacted: %q", b)
	}
}

func TestOneTimeCompactsWhileRunning(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ids")
	cur := now
	s, err := OpenOneTimeStore(path, func() time.Time { return cur })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 3000 {
		cur = now.Add(time.Duration(i) * time.Second)
		if err := s.Use(fmt.Sprint("id", i), cur.Add(10*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if s.Len() > 1100 {
		t.Fatalf("%d ids kept", s.Len())
	}
	if err := s.Use("id2999", cur.Add(time.Second)); !errors.Is(err, ErrUsed) {
		t.Fatalf("live id lost in compaction: %v", err)
	}
}

// TestOneTimeSurvivesKill9: a child process uses an id and is killed with
// SIGKILL right after Use returns; the id stays used.
func TestOneTimeSurvivesKill9(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ids")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "used <nil>\n" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("child said %q, %v", line, err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	s, err := OpenOneTimeStore(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Use("killed-id", time.Now().Add(time.Hour)); !errors.Is(err, ErrUsed) {
		t.Fatalf("id usable again after kill -9: %v", err)
	}
}

// ---- websocket denylist ----

func TestA1A9Denylist(t *testing.T) {
	boot := now.Add(-time.Hour)
	d := NewDenylist(boot)
	other := "22222222-2222-4222-8222-222222222222"
	ok := func(srv, usr string, iat time.Time) {
		t.Helper()
		if err := d.Check(srv, usr, iat); err != nil {
			t.Fatalf("Check(%s, %s, %v) = %v", srv, usr, iat, err)
		}
	}
	denied := func(srv, usr string, iat time.Time) {
		t.Helper()
		if err := d.Check(srv, usr, iat); !errors.Is(err, ErrDenied) || !errors.Is(err, ErrInvalidToken) {
			t.Fatalf("Check(%s, %s, %v) = %v, want ErrDenied", srv, usr, iat, err)
		}
	}
	denied(server, user, time.Time{})                   // no iat
	denied(server, user, boot.Add(-time.Second))        // issued before boot (before a restart)
	denied(server, user, boot)                          // same second as boot
	ok(server, user, boot.Add(time.Second))             // after boot
	deny := now.Add(500 * time.Millisecond)             // deauthorized mid-second
	d.Deny(user, []string{server}, deny)                // on one server
	denied(server, user, now.Add(-time.Minute))         // old token replayed
	denied(server, user, now)                           // same second, before the denial
	denied(server, user, now.Add(900*time.Millisecond)) // same second, after it: refused (whole seconds)
	ok(server, user, now.Add(time.Second))              // a new token a second later works
	ok(other, user, now.Add(-time.Minute))              // other servers unaffected
	ok(server, other, now.Add(-time.Minute))            // other users unaffected
	d.Deny(user, nil, now.Add(time.Minute))             // everywhere
	denied(other, user, now.Add(30*time.Second))
	denied("33333333-3333-4333-8333-333333333333", user, now) // servers created later too
	ok(other, user, now.Add(61*time.Second))
	d.Deny(user, []string{server}, now.Add(-time.Hour)) // an older denial never shortens a newer one
	denied(server, user, now.Add(30*time.Second))
}

// ---- fuzzing ----

func FuzzVerify(f *testing.F) {
	for _, p := range allPurposes {
		f.Add(sign(f, with(claimsFor(p), "exp", now.Unix()-1)))
		f.Add(unsignedToken(map[string]any{"alg": "none"}, claimsFor(p), ""))
	}
	f.Add("a.b.c")
	f.Add("")
	v := NewVerifier(keyFunc, clock)
	f.Fuzz(func(t *testing.T, raw string) {
		for _, p := range allPurposes {
			if err := verify(v, p, raw); err == nil {
				t.Fatalf("random token verified as %s: %q", p, raw)
			} else if !errors.Is(err, ErrInvalidToken) {
				t.Fatalf("error outside ErrInvalidToken: %v", err)
			}
		}
	})
}

// TestRequireScope: with api.require_token_scope on, a token without a
// scope claim is refused for every purpose, and one with the right scope is
// accepted; off, the purpose is inferred as before. The counts say which
// kind the panel sends.
func TestRequireScope(t *testing.T) {
	v := NewVerifier(keyFunc, clock)
	required := false
	v.RequireScope(func() bool { return required })
	for _, p := range allPurposes {
		if err := verify(v, p, sign(t, claimsFor(p))); err != nil {
			t.Fatalf("%s without scope, not required: %v", p, err)
		}
	}
	required = true
	for _, p := range allPurposes {
		if err := verify(v, p, sign(t, claimsFor(p))); !errors.Is(err, ErrNoScope) || !errors.Is(err, ErrInvalidToken) {
			t.Fatalf("%s without scope, required: %v", p, err)
		}
		if err := verify(v, p, sign(t, with(claimsFor(p), "scope", string(p)))); err != nil {
			t.Fatalf("%s with its scope, required: %v", p, err)
		}
	}
	scoped, unscoped := v.ScopesSeen()
	if scoped != int64(len(allPurposes)) || unscoped != 2*int64(len(allPurposes)) {
		t.Fatalf("seen %d scoped, %d unscoped", scoped, unscoped)
	}
	// A forged token counts as neither: the counts are of what the panel sent.
	if err := verify(v, PurposeWebsocket, func() string { s, _ := Sign([]byte("other"), claimsFor(PurposeWebsocket)); return s }()); err == nil {
		t.Fatal("a token of another key was accepted")
	}
	if s, u := v.ScopesSeen(); s != scoped || u != unscoped {
		t.Fatalf("a forged token was counted: %d %d", s, u)
	}
}
