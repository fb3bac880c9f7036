package docker

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// allowed evaluates ioctl rules for a request as the kernel's filter does:
// the first matching rule wins, and none matching is the default (refused).
func allowed(p *seccomp.Seccomp, req uint64) bool {
	for _, s := range p.Syscalls {
		if !slices.Contains(s.Names, "ioctl") {
			continue
		}
		match := len(s.Args) == 0
		for _, a := range s.Args {
			if a.Index != 1 || a.Op != specs.OpMaskedEqual {
				panic("unexpected ioctl condition")
			}
			match = match || req&a.Value == a.ValueTwo
		}
		if match {
			return s.Action == specs.ActAllow
		}
	}
	return false
}

func TestQuotaProfileRefusesOnlyTheQuotaIoctls(t *testing.T) {
	p, err := withoutIoctls(seccomp.DefaultProfile(), quotaIoctls)
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range quotaIoctls {
		for _, high := range []uint64{0, 1 << 32, 0xffffffff << 32} {
			if allowed(p, high|uint64(req)) {
				t.Errorf("request %#x is allowed", high|uint64(req))
			}
			// The neighbours differ in one bit each.
			for bit := range 32 {
				if n := uint64(req ^ 1<<bit); !allowed(p, high|n) {
					t.Errorf("request %#x (a neighbour of %#x) is refused", high|n, req)
				}
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		req := rng.Uint64()
		if !slices.Contains(quotaIoctls, uint32(req)) && !allowed(p, req) {
			t.Fatalf("request %#x is refused", req)
		}
	}
	// Rules only compare ioctl's request argument, and each blocked
	// request also has an explicit EPERM rule.
	eperm := 0
	for _, s := range p.Syscalls {
		if slices.Contains(s.Names, "ioctl") && s.Action == specs.ActErrno && *s.ErrnoRet == 1 {
			eperm++
		}
	}
	if eperm != len(quotaIoctls) {
		t.Errorf("%d EPERM rules, want %d", eperm, len(quotaIoctls))
	}
}

// The rest of Docker's profile is kept: the same rules for every other
// syscall, and file_setattr (Linux 6.17, sets a project id by path) is not
// allowed by it.
func TestQuotaProfileKeepsDockersDefault(t *testing.T) {
	body, err := quotaSeccompProfile()
	if err != nil {
		t.Fatal(err)
	}
	var got seccomp.Seccomp
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	def := seccomp.DefaultProfile()
	if got.DefaultAction != def.DefaultAction || *got.DefaultErrnoRet != *def.DefaultErrnoRet {
		t.Errorf("default action %s/%d, want %s/%d", got.DefaultAction, *got.DefaultErrnoRet, def.DefaultAction, *def.DefaultErrnoRet)
	}
	names := func(p *seccomp.Seccomp) (out []string) {
		for _, s := range p.Syscalls {
			for _, n := range s.Names {
				if n != "ioctl" {
					out = append(out, string(s.Action)+" "+n)
				}
			}
		}
		return out
	}
	if g, w := names(&got), names(def); !slices.Equal(g, w) {
		t.Errorf("the rules for other syscalls changed:\n got %d\nwant %d", len(g), len(w))
	}
	for _, s := range got.Syscalls {
		if slices.Contains(s.Names, "file_setattr") && s.Action == specs.ActAllow {
			t.Error("file_setattr is allowed")
		}
	}
}
