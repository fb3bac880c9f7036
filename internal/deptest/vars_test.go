package deptest

import (
	"go/ast"
	"go/token"
	"go/types"
	"slices"
	"testing"
)

// ARCHITECTURE.md rule 1: no package-level mutable state. Package-level
// values are constants, tables (slices, maps and arrays that the code only
// reads) and sentinel errors. Anything else declared with var at package
// level (a number, a string, a struct, a hook function, a channel, a
// pointer to a type that has state) must be listed here with the reason
// it is not state; the list is short on purpose.
var varAllowlist = map[string]string{
	"cmd/wharf.version": "set at link time (-ldflags -X), which only a var can receive",
	"cmd/wharf.commit":  "set at link time (-ldflags -X), which only a var can receive",
	"internal/chunkstore.manifestMagic": "a byte string of the format, never assigned (a const would do; chunkstore is " +
		"being edited for shared repositories, so it is left as it is)",
	"internal/chunkstore.sha1Placeholder": "40 zeros built once, never assigned (writer.go is split by issue 38 §4)",
	"internal/sftpd.fxQuotaExceeded":      "an SFTP status code typed as pkg/sftp's unexported type, which a const cannot name",
	"internal/pull.testLoopback":          "an address value (netip.Addr), compared, never assigned",
	"internal/wsapi.closeMarker":          "a sentinel frame compared by identity, never assigned",
	"internal/runtime/docker.quotaSeccompProfile": "a sync.OnceValues cache of a value computed from constants: " +
		"the same in every daemon",
	"internal/runtime/docker.defaultSeccompProfile": "a sync.OnceValues cache of Docker's default profile " +
		"(built from constants), the same in every daemon",
	"internal/devimage.buildMu": "serialises builds of the development image in one process: the engine's image " +
		"store it guards is process-wide itself",
	"internal/devimage.built": "the tags this process built, guarded by buildMu: a cache of the engine's image store, " +
		"which is process-wide itself",
	"internal/testutil/portprobe.out": "a test program's output lock (a main package run in a container)",
	"internal/testutil/tree.Mtime":    "a fixed timestamp of the test trees, never assigned",
	"internal/sandbox.knownUmask": "mirrors the process's umask, which is process-wide itself: set once by " +
		"SetUmask in a process that owns its umask (the decompress child)",
}

// readOnlyTypes are pointer types whose values never change once built:
// a package-level one is a constant in all but name.
var readOnlyTypes = map[string]string{
	"regexp.Regexp": "a compiled expression is safe for concurrent use and immutable",
	"github.com/prometheus/client_golang/prometheus.Desc": "a metric's description, immutable",
	"strings.Replacer":                    "a replacer is immutable and safe for concurrent use",
	"github.com/golang-jwt/jwt/v5.Parser": "a parser's options are fixed when it is built; Parse changes nothing",
}

// mutableKind says why a package-level variable of type t is state, "" when
// it is a constant, a table or a sentinel error.
func mutableKind(t types.Type) string {
	errType := types.Universe.Lookup("error").Type().Underlying().(*types.Interface)
	if types.Implements(t, errType) {
		switch t.Underlying().(type) {
		case *types.Interface, *types.Pointer:
			return "" // a sentinel error
		}
	}
	if p, ok := t.(*types.Pointer); ok {
		if n, ok := p.Elem().(*types.Named); ok && n.Obj().Pkg() != nil {
			if _, ok := readOnlyTypes[n.Obj().Pkg().Path()+"."+n.Obj().Name()]; ok {
				return ""
			}
		}
		return "a pointer to " + types.TypeString(p.Elem(), nil)
	}
	switch u := t.Underlying().(type) {
	case *types.Slice, *types.Map, *types.Array:
		return "" // a table
	case *types.Basic:
		return "a " + u.String() + " that can be assigned (a tunable: make it a constant or a field)"
	case *types.Signature:
		return "a function variable (a hook: make it a field or an option)"
	case *types.Chan:
		return "a channel"
	case *types.Interface:
		return "an interface value that can be replaced"
	case *types.Struct:
		return "a struct value whose fields can be assigned"
	}
	return "a " + t.String()
}

// packageVars returns one line per package-level variable of a mutable type
// that the allowlist does not name, and the allowlist entries that name
// nothing.
func packageVars(src *source) (bad, stale []string) {
	seen := map[string]bool{}
	for _, p := range src.pkgs {
		written := writtenVars(p)
		for _, f := range p.files {
			for _, d := range f.Decls {
				g, ok := d.(*ast.GenDecl)
				if !ok || g.Tok != token.VAR {
					continue
				}
				for _, spec := range g.Specs {
					for _, name := range spec.(*ast.ValueSpec).Names {
						if name.Name == "_" {
							continue // a compile-time assertion
						}
						obj := p.info.Defs[name]
						if obj == nil {
							continue
						}
						key := p.path + "." + name.Name
						why := mutableKind(obj.Type())
						if why == "" && written[obj] {
							why = "a table that the package's code writes to (state, not a table)"
						}
						if why == "" {
							continue
						}
						if _, ok := varAllowlist[key]; ok {
							seen[key] = true
							continue
						}
						bad = append(bad, src.where(name.Pos())+": package-level var "+key+" is "+why)
					}
				}
			}
		}
	}
	for key := range varAllowlist {
		if !seen[key] {
			stale = append(stale, key)
		}
	}
	slices.Sort(stale)
	return bad, stale
}

// TestNoPackageLevelState: rule 1 holds in every package of the module.
func TestNoPackageLevelState(t *testing.T) {
	bad, stale := packageVars(mustSource(t))
	for _, b := range bad {
		t.Error(b + " (ARCHITECTURE.md rule 1: pass it to a constructor or make it a field; a real exception goes into varAllowlist with its reason)")
	}
	for _, k := range stale {
		t.Errorf("varAllowlist names %s, which is no longer a mutable package-level var: remove the entry", k)
	}
	if len(bad) > 0 {
		t.Logf("%d package-level variables of a mutable type", len(bad))
	}
}

// writtenVars is every variable that the package's functions assign to,
// change an element of (x[k] = v, x[i]++), or empty (delete, clear): a
// package-level map, slice or array is a read-only table unless it is in
// this set.
func writtenVars(p *srcPkg) map[types.Object]bool {
	out := map[types.Object]bool{}
	mark := func(e ast.Expr) {
		for {
			switch x := e.(type) {
			case *ast.ParenExpr:
				e = x.X
				continue
			case *ast.IndexExpr:
				e = x.X
				continue
			case *ast.Ident:
				if obj := p.info.Uses[x]; obj != nil {
					out[obj] = true
				}
			}
			return
		}
	}
	for _, f := range p.files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.AssignStmt:
				for _, l := range x.Lhs {
					mark(l)
				}
			case *ast.IncDecStmt:
				mark(x.X)
			case *ast.CallExpr:
				if id, ok := x.Fun.(*ast.Ident); ok && len(x.Args) > 0 {
					if _, builtin := p.info.Uses[id].(*types.Builtin); builtin && (id.Name == "delete" || id.Name == "clear") {
						mark(x.Args[0])
					}
				}
			}
			return true
		})
	}
	return out
}
