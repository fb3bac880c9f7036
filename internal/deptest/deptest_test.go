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

// pkg is one package of the module as `go list` reports it (non-test code).
type pkg struct {
	path    string   // import path
	imports []string // direct imports
	deps    []string // every package it depends on, transitively
}

// dockerSDKs are the prefixes of the Docker SDK's packages: the maintained
// client and API modules, and the frozen module they replaced.
var dockerSDKs = []string{"github.com/moby/moby/", "github.com/docker/docker/"}

// isDockerSDK reports whether imp is a package of the Docker SDK.
func isDockerSDK(imp string) bool {
	return slices.ContainsFunc(dockerSDKs, func(prefix string) bool { return strings.HasPrefix(imp, prefix) })
}

// mayImportDocker lists the packages allowed to import the Docker SDK
// directly: the runtime that drives the engine, and the builders of the
// dev and test images. Everything else talks to Docker through
// internal/runtime.
func mayImportDocker(p string) bool {
	return p == module+"/internal/runtime/docker" ||
		p == module+"/internal/devimage" ||
		strings.HasPrefix(p, module+"/internal/testutil/")
}

// mayImportHTTPAPI lists the packages allowed to depend on the HTTP API:
// the daemon that wires it, what runs the daemon, and the API itself.
// Domain packages declare their errors and types; the API maps them.
func mayImportHTTPAPI(p string) bool {
	switch p {
	case module + "/internal/httpapi", module + "/internal/daemon", module + "/internal/devmode":
		return true
	}
	return strings.HasPrefix(p, module+"/cmd/")
}

// violations returns one line per broken rule.
func violations(pkgs []pkg) []string {
	var out []string
	for _, p := range pkgs {
		if !mayImportDocker(p.path) {
			for _, imp := range p.imports {
				if isDockerSDK(imp) {
					out = append(out, p.path+" imports the Docker SDK ("+imp+"): go through internal/runtime")
				}
			}
		}
		if !mayImportHTTPAPI(p.path) && slices.Contains(p.deps, module+"/internal/httpapi") {
			out = append(out, p.path+" depends on internal/httpapi: a domain package must not know the HTTP API")
		}
		if p.path == module+"/internal/server" {
			for _, forbidden := range []string{"/internal/backup", "/internal/transfer"} {
				if slices.Contains(p.deps, module+forbidden) {
					out = append(out, p.path+" depends on "+module+forbidden+": jobs drive the server, never the reverse")
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
	for _, want := range []string{"/internal/server", "/internal/httpapi", "/internal/runtime/docker", "/internal/backup", "/internal/transfer"} {
		if !slices.ContainsFunc(pkgs, func(p pkg) bool { return p.path == module+want }) {
			t.Fatalf("go list did not report %s", want)
		}
	}
	for _, v := range violations(pkgs) {
		t.Error(v)
	}
}

// The rules catch what they are meant to catch.
func TestViolationsFound(t *testing.T) {
	const m = module + "/internal/"
	pkgs := []pkg{
		{path: m + "server", imports: []string{"github.com/moby/moby/client"}, deps: []string{m + "transfer", m + "backup"}},
		{path: m + "backup", deps: []string{m + "httpapi"}},
		{path: m + "runtime/docker", imports: []string{"github.com/moby/moby/client"}},
		{path: m + "testutil/testimages", imports: []string{"github.com/moby/moby/client"}},
		{path: m + "daemon", deps: []string{m + "httpapi"}},
	}
	got := violations(pkgs)
	if len(got) != 4 {
		t.Fatalf("want 4 violations (server: SDK, transfer, backup; backup: httpapi), got %d:\n%s", len(got), strings.Join(got, "\n"))
	}
}
