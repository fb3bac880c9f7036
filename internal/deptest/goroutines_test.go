package deptest

import (
	"go/ast"
	"go/types"
	"strconv"
	"strings"
	"testing"
)

// ARCHITECTURE.md rule 2: a package whose code starts goroutines (a go
// statement, or Go on a sync.WaitGroup or an errgroup.Group) checks with
// goleak in its tests that they are joined. goleakExempt lists the
// packages that start goroutines and have no goleak, with the reason.
var goleakExempt = map[string]string{
	"internal/devmode": "runs the daemon (whose packages have goleak) until the developer stops it; " +
		"tested end to end through the binary",
	"internal/chunkstore/backendtest": "the conformance suite: its goroutines run in the tests of the backends " +
		"(chunkstore's, with goleak, and s3backend's)",
	"internal/runtime/runtimetest": "the in-memory engine: its goroutines run in the tests of the packages " +
		"that use it, which have goleak (server, httpapi, ...)",
	"internal/testutil/gameserver": "a test program run inside a container, not a library; it has no tests",
	"internal/testutil/portprobe":  "a test program run inside a container, not a library; it has no tests",
}

// startsGoroutines returns where p's non-test code starts a goroutine
// first, "" when it does not.
func startsGoroutines(src *source, p *srcPkg) string {
	first := ""
	for _, f := range p.files {
		ast.Inspect(f, func(n ast.Node) bool {
			if first != "" {
				return false
			}
			switch n := n.(type) {
			case *ast.GoStmt:
				first = src.where(n.Pos()) + " (go statement)"
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok || sel.Sel.Name != "Go" {
					return true
				}
				if tv, ok := p.info.Types[sel.X]; ok {
					t := strings.TrimPrefix(types.TypeString(tv.Type, nil), "*")
					if t == "sync.WaitGroup" || t == "golang.org/x/sync/errgroup.Group" {
						first = src.where(n.Pos()) + " (" + t + ".Go)"
					}
				}
			}
			return true
		})
	}
	return first
}

// usesGoleak reports whether one of p's test files imports goleak.
func usesGoleak(p *srcPkg) bool {
	for _, f := range p.tests {
		for _, imp := range f.Imports {
			if path, _ := strconv.Unquote(imp.Path.Value); path == "go.uber.org/goleak" {
				return true
			}
		}
	}
	return false
}

// goleakMissing returns one line per package that starts goroutines with
// no goleak in its tests and no exemption, and the stale exemptions.
func goleakMissing(src *source) (bad, stale []string) {
	for _, p := range src.pkgs {
		at := startsGoroutines(src, p)
		_, exempt := goleakExempt[p.path]
		switch {
		case at != "" && !usesGoleak(p) && !exempt:
			bad = append(bad, p.path+" starts goroutines ("+at+") and its tests do not check them with goleak")
		case exempt && (at == "" || usesGoleak(p)):
			stale = append(stale, p.path)
		}
	}
	return bad, stale
}

// TestGoleakWhereGoroutinesStart: rule 2's check is in every package that
// needs it.
func TestGoleakWhereGoroutinesStart(t *testing.T) {
	bad, stale := goleakMissing(mustSource(t))
	for _, b := range bad {
		t.Error(b + " (ARCHITECTURE.md rule 2: add goleak.VerifyTestMain in a main_test.go)")
	}
	for _, p := range stale {
		t.Errorf("goleakExempt names %s, which no longer needs the exemption: remove it", p)
	}
}

// ARCHITECTURE.md rule 8: a test waits for a condition
// (internal/testutil/wait), not a fixed time; a sleep that is the point
// of the test says why in a comment on its line or the line above.
func uncommentedSleeps(src *source) []string {
	var out []string
	for _, p := range src.pkgs {
		for _, f := range p.tests {
			commented := map[int]bool{}
			for _, cg := range f.Comments {
				for _, c := range cg.List {
					commented[src.fset.Position(c.Pos()).Line] = true
					commented[src.fset.Position(c.End()).Line] = true
				}
			}
			timeName := ""
			for _, imp := range f.Imports {
				if imp.Path.Value == `"time"` {
					timeName = "time"
					if imp.Name != nil {
						timeName = imp.Name.Name
					}
				}
			}
			if timeName == "" {
				continue
			}
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || sel.Sel.Name != "Sleep" {
					return true
				}
				if x, ok := sel.X.(*ast.Ident); !ok || x.Name != timeName {
					return true
				}
				line := src.fset.Position(call.Pos()).Line
				if !commented[line] && !commented[line-1] {
					out = append(out, src.where(call.Pos())+": time.Sleep without a comment saying why a fixed wait is the point")
				}
				return true
			})
		}
	}
	return out
}

// TestSleepsInTestsSayWhy: rule 8.
func TestSleepsInTestsSayWhy(t *testing.T) {
	for _, s := range uncommentedSleeps(mustSource(t)) {
		t.Error(s + " (ARCHITECTURE.md rule 8: wait for the condition with internal/testutil/wait, or say in a comment why the sleep is the point)")
	}
}
