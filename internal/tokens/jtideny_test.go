package tokens

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func wsClaims(jti string, iat time.Time, life time.Duration) *WebsocketClaims {
	return &WebsocketClaims{
		UserUUID: "user", ServerUUID: "0b8f6b7e-9f59-4bd2-8a43-5d0b1fe7c6a1", JTI: jti,
		IssuedAt: iat, ExpiresAt: iat.Add(life),
	}
}

// Wings' semantics (pterodactyl/wings router/tokens/websocket.go): a denial
// covers the tokens with that jti issued until the denial; a later token
// with the same jti is accepted, and other jtis are untouched.
func TestDenyJTIsCoversTokensIssuedUntilTheDenial(t *testing.T) {
	boot := time.Unix(1_700_000_000, 0)
	d := NewDenylist(boot)
	denyAt := boot.Add(time.Hour)
	d.DenyJTIs([]string{"X"}, denyAt)

	for _, tc := range []struct {
		name   string
		c      *WebsocketClaims
		denied bool
	}{
		{"same jti, issued before", wsClaims("X", denyAt.Add(-5*time.Minute), 10*time.Minute), true},
		{"same jti, same second", wsClaims("X", denyAt, 10*time.Minute), true},
		{"same jti, issued a second later", wsClaims("X", denyAt.Add(time.Second), 10*time.Minute), false},
		{"other jti, issued before", wsClaims("Y", denyAt.Add(-5*time.Minute), 10*time.Minute), false},
	} {
		err := d.CheckWebsocket(tc.c)
		if got := err != nil; got != tc.denied {
			t.Errorf("%s: denied = %v (%v), want %v", tc.name, got, err, tc.denied)
		}
		if err != nil && !errors.Is(err, ErrDenied) {
			t.Errorf("%s: error %v is not ErrDenied", tc.name, err)
		}
	}
}

// After JTIRetention the denial is forgotten: a 10-minute token it covered
// has expired by then, and a long-lived token that it may have covered is
// still refused.
func TestDenyJTIsForgetsAfterRetentionWithoutLettingCoveredTokensBack(t *testing.T) {
	boot := time.Unix(1_700_000_000, 0)
	d := NewDenylist(boot)
	denyAt := boot.Add(time.Hour)
	d.DenyJTIs([]string{"X"}, denyAt)
	later := denyAt.Add(JTIRetention + 2*time.Minute)
	d.DenyJTIs([]string{"other"}, later) // sweeps the expired denial
	if d.JTIDenied("X", denyAt.Add(-time.Minute)) {
		t.Fatal("the denial of X is still kept after JTIRetention")
	}
	long := wsClaims("X", denyAt.Add(-time.Minute), 24*time.Hour)
	if err := d.CheckWebsocket(long); !errors.Is(err, ErrDenied) {
		t.Errorf("a long-lived token issued before a forgotten denial: %v, want ErrDenied", err)
	}
	short := wsClaims("Z", later.Add(-time.Minute), 10*time.Minute)
	if err := d.CheckWebsocket(short); err != nil {
		t.Errorf("an ordinary token of another jti is refused: %v", err)
	}
}

// A full list folds into "every token issued until now": memory stays
// bounded and no denial is lost.
func TestDenyJTIsIsBounded(t *testing.T) {
	boot := time.Unix(1_700_000_000, 0)
	d := NewDenylist(boot)
	at := boot.Add(time.Hour)
	jtis := make([]string, MaxJTIDenials+10)
	for i := range jtis {
		jtis[i] = fmt.Sprintf("jti-%d", i)
	}
	d.DenyJTIs(jtis, at)
	d.mu.RLock()
	n := len(d.jtis)
	d.mu.RUnlock()
	if n > MaxJTIDenials {
		t.Fatalf("%d denials kept, more than %d", n, MaxJTIDenials)
	}
	last := wsClaims(jtis[len(jtis)-1], at.Add(-time.Minute), 10*time.Minute)
	if err := d.CheckWebsocket(last); !errors.Is(err, ErrDenied) {
		t.Errorf("the last jti of an overflowing denial: %v, want ErrDenied", err)
	}
	fresh := wsClaims(jtis[0], at.Add(time.Second), 10*time.Minute)
	if err := d.CheckWebsocket(fresh); err != nil {
		t.Errorf("a token issued after the denial: %v", err)
	}
}
