package deptest

import (
	"slices"
	"strings"
	"testing"
)

// tiers are ARCHITECTURE.md's tiers, top first, as data: a package may
// import the module's packages of its own tier and of the tiers below,
// never above. Every package of the module is in exactly one tier (a new
// package is placed here, and in ARCHITECTURE.md, in the same commit).
var tiers = []struct {
	name string
	pkgs []string
}{
	{"entry", []string{"cmd/wharf", "internal/daemon", "internal/devmode", "internal/configure"}},
	{"faces", []string{"internal/httpapi", "internal/wsapi", "internal/sftpd", "internal/diagnostics"}},
	{"jobs", []string{"internal/backup", "internal/transfer", "internal/pull", "internal/upload", "internal/files"}},
	{"domain", []string{"internal/server", "internal/activity", "internal/events", "internal/deauth", "internal/tokens", "internal/statepush"}},
	{"platform", []string{"internal/sandbox", "internal/sandbox/internal/fdwalk", "internal/runtime", "internal/runtime/docker", "internal/panel", "internal/config",
		"internal/quota", "internal/isolate", "internal/archive", "internal/chunkstore", "internal/chunkstore/s3backend", "internal/firewall", "internal/hostinfo", "internal/rootless",
		"internal/backupview"}},
	{"small tools", []string{"internal/usererr", "internal/atomicfile", "internal/ids", "internal/consoletext", "internal/netguard",
		"internal/eggconfig", "internal/logtail", "internal/metrics"}},
}

// testSupport are the packages of the tests (and of the development
// mode's panel and image): outside the tiers, they may import anything,
// and only the entry tier's devmode, the tests and themselves import them.
var testSupport = []string{
	"internal/e2e", "internal/deptest", "internal/testutil/...", "internal/devpanel", "internal/devimage",
	"internal/runtime/runtimetest", "internal/chunkstore/backendtest", "internal/quota/quotatest", "packaging",
}

// tierExceptions are imports upwards that are allowed, each with its reason.
var tierExceptions = map[[2]string]string{}

// tierOf returns the index of p's tier (0 is the top), -1 for test
// support, -2 when p is in no tier.
func tierOf(p string) int {
	if matchAny(testSupport, p) {
		return -1
	}
	for i, t := range tiers {
		if slices.Contains(t.pkgs, p) {
			return i
		}
	}
	return -2
}

// tierViolations returns one line per import upwards, per package in no
// tier, and per import of test support by a tier's package (devmode's
// panel and image excepted).
func tierViolations(pkgs []pkg) []string {
	var out []string
	for _, p := range pkgs {
		self, _ := relative(p.path)
		from := tierOf(self)
		switch from {
		case -2:
			out = append(out, self+" is in no tier: place it in tiers (internal/deptest) and in ARCHITECTURE.md")
			continue
		case -1:
			continue
		}
		for _, d := range p.imports {
			rel, inModule := relative(d)
			if !inModule {
				continue
			}
			to := tierOf(rel)
			if _, ok := tierExceptions[[2]string{self, rel}]; ok {
				continue
			}
			switch {
			// devmode runs the daemon on the embedded panel and image; the
			// daemon's test build (-tags wharf_testruntime, testbuild_on.go)
			// runs on the in-memory engine.
			case to == -1 && !(self == "internal/devmode" && (rel == "internal/devpanel" || rel == "internal/devimage")) &&
				!(self == "internal/daemon" && rel == "internal/runtime/runtimetest"):
				out = append(out, self+" ("+tiers[from].name+") imports "+rel+", which is test support")
			case to >= 0 && to < from:
				out = append(out, self+" ("+tiers[from].name+") imports "+rel+" ("+tiers[to].name+"): code depends downwards only")
			}
		}
	}
	return out
}

// TestTiers: the tiers of ARCHITECTURE.md hold (nothing imports the entry
// tier, the faces are imported by the entry tier only, and so on down).
func TestTiers(t *testing.T) {
	pkgs := list(t)
	for _, tier := range tiers {
		for _, name := range tier.pkgs {
			if !slices.ContainsFunc(pkgs, func(p pkg) bool { rel, _ := relative(p.path); return rel == name }) {
				t.Errorf("tier %s names %s, which go list does not report: update tiers", tier.name, name)
			}
		}
	}
	for _, v := range tierViolations(pkgs) {
		t.Error(v)
	}
}

// The tier rule catches an import upwards and a package in no tier.
func TestTierViolationsFound(t *testing.T) {
	const m = module + "/internal/"
	got := tierViolations([]pkg{
		{path: m + "server", imports: []string{m + "backup", m + "sandbox"}},
		{path: m + "httpapi", imports: []string{m + "daemon", m + "diagnostics"}},
		{path: m + "sandbox", imports: []string{m + "usererr"}},
		{path: m + "newthing"},
		{path: m + "files", imports: []string{m + "testutil/tree"}},
	})
	want := []string{
		"internal/server (domain) imports internal/backup (jobs)",
		"internal/httpapi (faces) imports internal/daemon (entry)",
		"internal/newthing is in no tier",
		"internal/files (jobs) imports internal/testutil/tree, which is test support",
	}
	if len(got) != len(want) {
		t.Fatalf("want %d violations, got %d:\n%s", len(want), len(got), strings.Join(got, "\n"))
	}
	for i, w := range want {
		if !strings.HasPrefix(got[i], w) {
			t.Errorf("violation %d: got %q, want it to start with %q", i, got[i], w)
		}
	}
}
