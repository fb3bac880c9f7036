package isolate

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The test binary is its own child: "isolate-child MODE" runs one of the
// behaviours below after Enter, as `wharf extract-worker` would.
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == "isolate-child" {
		if err := Enter(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(child(os.Args[2]))
	}
	os.Exit(m.Run())
}

var sink [][]byte

func child(mode string) int {
	switch mode {
	case "hello":
		ifaces, _ := net.Interfaces()
		var up []string
		for _, i := range ifaces {
			if i.Flags&net.FlagUp != 0 {
				up = append(up, i.Name)
			}
		}
		fmt.Printf("uid=%d gid=%d groups=%d up=%s env=%d", os.Getuid(), os.Getgid(), len(must(os.Getgroups())), strings.Join(up, ","), len(os.Environ()))
	case "alloc": // live memory past any limit: 64 MiB at a time, touched
		for {
			b := make([]byte, 64<<20)
			for i := range b {
				b[i] = 1
			}
			sink = append(sink, b)
		}
	case "spin":
		for n := 0; ; n++ {
			_ = n * n
		}
	case "sleep":
		time.Sleep(time.Hour) // a child that stays busy until the test kills it
	case "exit3":
		fmt.Fprintln(os.Stderr, "bad")
		return 3
	}
	return 0
}

func must[T any](v T, _ error) T { return v }

func spec(mode string, l Limits) Spec {
	return Spec{Command: []string{os.Args[0], "isolate-child", mode}, Limits: l, UID: -1, GID: -1}
}

func TestChildSucceeds(t *testing.T) {
	s := spec("hello", Limits{Memory: 256 << 20, CPU: 10 * time.Second, Wall: time.Minute})
	if os.Geteuid() == 0 {
		s.UID, s.GID = 65534, 65534
		s.Command[0] = worldExecutable(t)
	}
	res, err := Run(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	out := string(res.Stdout)
	if os.Geteuid() == 0 {
		// Dropped to the given ids with no supplementary group, and alone in
		// a network namespace with no interface up.
		if !res.NetworkIsolated {
			t.Log("no network namespace (the daemon's root has no CAP_SYS_ADMIN here)")
		} else if !strings.Contains(out, "up= ") {
			t.Fatalf("interfaces up in the child's namespace: %s", out)
		}
		if !strings.HasPrefix(out, "uid=65534 gid=65534 groups=0 ") {
			t.Fatalf("child ran as %s", out)
		}
	}
	// Only the limits variable in its environment.
	if !strings.HasSuffix(out, "env=1") {
		t.Fatalf("child's environment: %s", out)
	}
}

// worldExecutable is a copy of the test binary that another user can run
// (the go tool builds it in a directory only its owner may enter).
func worldExecutable(t *testing.T) string {
	dir := t.TempDir()
	for d := dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "child")
	if err := os.WriteFile(p, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestChildDeaths(t *testing.T) {
	cases := []struct {
		mode   string
		limits Limits
		want   Reason
	}{
		{"alloc", Limits{Memory: 256 << 20, Wall: time.Minute}, OutOfMemory},
		{"spin", Limits{CPU: time.Second, Wall: time.Minute}, OutOfCPU},
		{"sleep", Limits{Wall: 300 * time.Millisecond}, TimedOut},
		{"exit3", Limits{Wall: time.Minute}, Exited},
	}
	for _, c := range cases {
		t.Run(c.mode, func(t *testing.T) {
			_, err := Run(context.Background(), spec(c.mode, c.limits))
			var d *Death
			if !errors.As(err, &d) {
				t.Fatalf("error %v, want a Death", err)
			}
			if d.Reason != c.want {
				t.Fatalf("reason %d (%v), want %d; stderr:\n%s", d.Reason, d, c.want, d.Stderr)
			}
			if d.Error() == "" {
				t.Fatal("no message")
			}
		})
	}
}

// The caller's context ending kills the child: Run returns the context's
// error, not a Death, once the child is gone.
func TestChildKilledWhenTheCallerGoes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Run(ctx, spec("sleep", Limits{Wall: time.Minute}))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want the context's", err)
	}
	if time.Since(start) > 30*time.Second {
		t.Fatal("Run waited for the child's own end")
	}
}

func TestEnterRefusesAProcessNotStartedByRun(t *testing.T) {
	t.Setenv(limitsEnv, "")
	os.Unsetenv(limitsEnv)
	if err := Enter(); err == nil {
		t.Fatal("Enter without limits succeeded")
	}
}
