package deptest

import (
	"bufio"
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/wharf/wharf"

// A rule forbids some packages (those matched by from, minus except) to depend
// on others. Patterns are module-relative ("internal/server") or external
// ("github.com/docker/docker/"); a pattern ending in "/..." also matches the
// packages below it, a pattern ending in "/" is a prefix.
type rule struct {
	from   []string
	except []string
	// forbid: what the packages must not depend on.
	forbid []string
	// only: when set, the packages may depend on these module packages and
	// no other (external packages are not restricted by it).
	only []string
	// direct: the rule looks at direct imports only, not the whole graph.
	direct bool
	why    string
}

// rules is the layering of ARCHITECTURE.md, as data. Add a rule here when a
// boundary is decided; the reason is what a violation prints.
var rules = []rule{
	{
		from:   []string{"..."},
		except: []string{"internal/runtime/docker", "internal/devimage", "internal/testutil/..."},
		forbid: []string{"github.com/docker/docker/", "github.com/moby/moby/"},
		direct: true,
		why:    "talks to Docker through internal/runtime, never the SDK",
	},
	{
		from:   []string{"..."},
		except: []string{"internal/httpapi", "internal/daemon", "internal/devmode", "cmd/..."},
		forbid: []string{"internal/httpapi"},
		why:    "a domain package declares its errors and types; only the HTTP API maps them",
	},
	{
		from:   []string{"internal/server"},
		forbid: []string{"internal/backup", "internal/transfer"},
		why:    "jobs drive the server, never the reverse",
	},
	{
		from: []string{"internal/sandbox"},
		only: []string{"internal/usererr", "internal/sandbox/internal/fdwalk"},
		why:  "the sandbox is the bottom of the tree: every other package may use it, so it uses nothing (but its own descriptor mechanics)",
	},
	{
		from: []string{"internal/sandbox/internal/fdwalk"},
		only: []string{},
		why:  "the sandbox's descriptor mechanics know no root, denylist, accounting or error of the sandbox: the sandbox decides, fdwalk walks (issue 38 §4)",
	},
	{
		from:   []string{"internal/files", "internal/pull", "internal/upload", "internal/archive"},
		forbid: []string{"internal/server"},
		why:    "file operations work on a sandbox handed to them; the job slot is taken by their caller",
	},
	{
		from: []string{"internal/firewall"},
		only: []string{},
		why:  "the firewall installs rules for the bridges it is handed: it knows no configuration, runtime or server",
	},
	{
		from:   []string{"..."},
		except: []string{"internal/firewall"},
		forbid: []string{"github.com/google/nftables"},
		direct: true,
		why:    "nftables rules are internal/firewall's: one place builds and verifies them",
	},
	{
		from: []string{"internal/logtail"},
		only: []string{},
		why:  "a small tool: the daemon's log tail knows nothing of the rest of Wharf",
	},
	{
		from:   []string{"internal/statepush"},
		forbid: []string{"internal/server", "internal/runtime", "internal/httpapi", "internal/wsapi", "internal/sftpd", "internal/config"},
		why:    "state pushes are the panel client's business: the pusher knows no server, runtime or face (the server manager hands it the changes)",
	},
	{
		from:   []string{"internal/runtime/..."},
		forbid: []string{"internal/server"},
		why:    "a runtime runs containers; what a server is lives above it",
	},
	{
		from: []string{"internal/chunkstore"},
		only: []string{"internal/atomicfile"},
		why:  "the backup repository stores streams; what a server or a backup is lives in internal/backup",
	},
	{
		from: []string{"internal/backupview"},
		only: []string{"internal/chunkstore", "internal/sandbox/...", "internal/usererr", "internal/atomicfile"},
		why:  "the backups folder reads a repository through a server's sandbox: it knows no server, configuration or face (issue 35)",
	},
	{
		from:   []string{"internal/chunkstore/s3backend"},
		only:   []string{"internal/chunkstore", "internal/config"},
		direct: true,
		why:    "a Backend stores objects: it knows its configuration keys and nothing of servers or backups",
	},
	{
		from: []string{"internal/chunkstore/backendtest"},
		only: []string{"internal/chunkstore", "internal/atomicfile"},
		why:  "the conformance suite tests any Backend through the interface alone",
	},
	{
		from: []string{"internal/metrics"},
		only: []string{},
		why:  "metrics are a leaf every package may feed",
	},
}

// match reports whether the package path p (module-relative or external)
// matches pattern.
func match(pattern, p string) bool {
	switch {
	case pattern == "...":
		return true
	case strings.HasSuffix(pattern, "/..."):
		base := strings.TrimSuffix(pattern, "/...")
		return p == base || strings.HasPrefix(p, base+"/")
	case strings.HasSuffix(pattern, "/"):
		return strings.HasPrefix(p, pattern)
	}
	return p == pattern
}

func matchAny(patterns []string, p string) bool {
	return slices.ContainsFunc(patterns, func(pat string) bool { return match(pat, p) })
}

// relative returns p without the module prefix, and whether p is in the module.
func relative(p string) (string, bool) {
	if rel, ok := strings.CutPrefix(p, module+"/"); ok {
		return rel, true
	}
	return p, false
}

// pkg is one package of the module as `go list` reports it (non-test code).
type pkg struct {
	path    string   // import path
	imports []string // direct imports
	deps    []string // every package it depends on, transitively
}

// violations returns one line per broken rule.
func violations(pkgs []pkg) []string {
	var out []string
	for _, p := range pkgs {
		self, _ := relative(p.path)
		for _, r := range rules {
			if !matchAny(r.from, self) || matchAny(r.except, self) {
				continue
			}
			deps := p.deps
			if r.direct {
				deps = p.imports
			}
			for _, d := range deps {
				rel, inModule := relative(d)
				bad := matchAny(r.forbid, rel) ||
					(r.only != nil && inModule && !matchAny(r.only, rel))
				if bad {
					out = append(out, self+" depends on "+rel+": "+self+" "+r.why)
				}
			}
		}
	}
	return out
}

// list runs `go list` over the whole module.
func list(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}\t{{join .Imports \" \"}}\t{{join .Deps \" \"}}", module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []pkg
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) != 3 {
			t.Fatalf("go list line %q", sc.Text())
		}
		pkgs = append(pkgs, pkg{path: f[0], imports: strings.Fields(f[1]), deps: strings.Fields(f[2])})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return pkgs
}

func TestDependencies(t *testing.T) {
	pkgs := list(t)
	// The rules only mean something if the packages they name are there.
	for _, r := range rules {
		for _, from := range r.from {
			if from == "..." {
				continue
			}
			if !slices.ContainsFunc(pkgs, func(p pkg) bool { rel, _ := relative(p.path); return match(from, rel) }) {
				t.Errorf("a rule names %s, which go list does not report: update the rules", from)
			}
		}
	}
	for _, v := range violations(pkgs) {
		t.Error(v)
	}
}

// The rules catch what they are meant to catch, and only that.
func TestViolationsFound(t *testing.T) {
	const m = module + "/internal/"
	pkgs := []pkg{
		{path: m + "server", imports: []string{"github.com/docker/docker/client"}, deps: []string{m + "transfer", m + "backup"}},
		{path: m + "backup", deps: []string{m + "httpapi"}},
		{path: m + "runtime/docker", imports: []string{"github.com/moby/moby/client"}},
		{path: m + "testutil/testimages", imports: []string{"github.com/docker/docker/client"}},
		{path: m + "daemon", deps: []string{m + "httpapi"}},
		{path: m + "sandbox", deps: []string{m + "usererr", m + "config", "golang.org/x/sys/unix"}},
		{path: m + "files", deps: []string{m + "sandbox", m + "server"}},
		{path: m + "runtime/runtimetest", deps: []string{m + "runtime", m + "server"}},
		{path: m + "metrics", deps: []string{m + "usererr", "github.com/prometheus/client_golang/prometheus"}},
	}
	got := violations(pkgs)
	want := []string{
		"internal/server depends on github.com/docker/docker/client",
		"internal/server depends on internal/transfer",
		"internal/server depends on internal/backup",
		"internal/backup depends on internal/httpapi",
		"internal/sandbox depends on internal/config",
		"internal/files depends on internal/server",
		"internal/runtime/runtimetest depends on internal/server",
		"internal/metrics depends on internal/usererr",
	}
	if len(got) != len(want) {
		t.Fatalf("want %d violations, got %d:\n%s", len(want), len(got), strings.Join(got, "\n"))
	}
	for i, w := range want {
		if !strings.HasPrefix(got[i], w+": ") {
			t.Errorf("violation %d: got %q, want it to start with %q", i, got[i], w)
		}
	}
}
