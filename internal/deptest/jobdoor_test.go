package deptest

import (
	"go/ast"
	"go/types"
	"slices"
	"testing"
)

// ARCHITECTURE.md rule 4 (issue 38 §2): a server's files are changed only
// through the job slot. Server.Files is read-only (sandbox.ReadOnly); the
// writable *sandbox.FS of a server is given by one door, the job handle
// (*server.Job).FS, which only Server.BeginJob makes. These checks keep it
// so, reading the source with go/types:
//
//   - outside server and sandbox, no call to a function or method of those
//     packages yields a *sandbox.FS, except Job.FS and the methods of a
//     *sandbox.FS itself (Trusted: a view of an FS the caller already
//     holds), and sandbox.New where jobDoorNew says why;
//   - outside server and the tests, nobody calls server.JobOver (a job over
//     a filesystem of no server, for the jobs' tests and benchmarks);
//   - in server, no exported function or method but Job.FS returns a
//     *sandbox.FS (a second door would be one).
const (
	sandboxPkg = module + "/internal/sandbox"
	serverPkg  = module + "/internal/server"
)

// jobDoorNew are the packages that may make a sandbox of their own
// (sandbox.New), with the reason.
var jobDoorNew = map[string]string{
	"internal/files":         "the isolated decompress worker (a child process) opens the worker root its parent's job handed it",
	"internal/testutil/tree": "test support: a sandbox over a test's own directory",
}

// isSandboxFS reports whether t is *sandbox.FS.
func isSandboxFS(t types.Type) bool {
	p, ok := t.(*types.Pointer)
	if !ok {
		return false
	}
	n, ok := p.Elem().(*types.Named)
	return ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == sandboxPkg && n.Obj().Name() == "FS"
}

// returnsFS reports whether the function's results include a *sandbox.FS.
func returnsFS(sig *types.Signature) bool {
	for v := range sig.Results().Variables() {
		if isSandboxFS(v.Type()) {
			return true
		}
	}
	return false
}

// recvName is "Type.Method" for a method, "Func" for a function.
func recvName(fn *types.Func) string {
	sig := fn.Type().(*types.Signature)
	if sig.Recv() == nil {
		return fn.Name()
	}
	t := sig.Recv().Type()
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	if n, ok := t.(*types.Named); ok {
		return n.Obj().Name() + "." + fn.Name()
	}
	return fn.Name()
}

// calleeOf is the function or method a call calls, nil for a call of a
// function value or a conversion.
func calleeOf(info *types.Info, call *ast.CallExpr) *types.Func {
	var id *ast.Ident
	switch f := ast.Unparen(call.Fun).(type) {
	case *ast.Ident:
		id = f
	case *ast.SelectorExpr:
		id = f.Sel
	case *ast.IndexExpr: // a generic function instantiated
		if s, ok := f.X.(*ast.SelectorExpr); ok {
			id = s.Sel
		}
	}
	if id == nil {
		return nil
	}
	fn, _ := info.Uses[id].(*types.Func)
	return fn
}

// jobDoorViolations returns the breaches of the rule, and the entries of
// jobDoorNew no longer used.
func jobDoorViolations(src *source) (bad, stale []string) {
	usedNew := map[string]bool{}
	for _, p := range src.pkgs {
		switch p.path {
		case "internal/sandbox":
			continue
		case "internal/server":
			bad = append(bad, secondDoors(src, p)...)
			continue
		}
		for _, f := range p.files {
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				fn := calleeOf(p.info, call)
				if fn == nil || fn.Pkg() == nil {
					return true
				}
				where := src.where(call.Pos())
				switch name := recvName(fn); {
				case fn.Pkg().Path() == serverPkg && name == "JobOver":
					bad = append(bad, where+": "+p.path+" calls server.JobOver outside a test")
				case fn.Pkg().Path() != serverPkg && fn.Pkg().Path() != sandboxPkg:
				case !returnsFS(fn.Type().(*types.Signature)):
				case name == "Job.FS" || len(name) > 3 && name[:3] == "FS.":
				case name == "New" && fn.Pkg().Path() == sandboxPkg && jobDoorNew[p.path] != "":
					usedNew[p.path] = true
				default:
					bad = append(bad, where+": "+p.path+" gets a writable *sandbox.FS from "+fn.Pkg().Name()+"."+name+", not through a job (server.BeginJob, Job.FS)")
				}
				return true
			})
		}
	}
	for k := range jobDoorNew {
		if !usedNew[k] {
			stale = append(stale, k)
		}
	}
	slices.Sort(stale)
	return bad, stale
}

// secondDoors are server's exported functions and methods, but Job.FS,
// that return a *sandbox.FS.
func secondDoors(src *source, p *srcPkg) []string {
	var bad []string
	for _, f := range p.files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || !fd.Name.IsExported() {
				continue
			}
			fn, _ := p.info.Defs[fd.Name].(*types.Func)
			if fn == nil || !returnsFS(fn.Type().(*types.Signature)) || recvName(fn) == "Job.FS" {
				continue
			}
			bad = append(bad, src.where(fd.Pos())+": server."+recvName(fn)+" returns a writable *sandbox.FS: the job handle (Job.FS) is the only door")
		}
	}
	return bad
}

// TestServerFilesOnlyThroughJobs: rule 4's door is the job handle.
func TestServerFilesOnlyThroughJobs(t *testing.T) {
	bad, stale := jobDoorViolations(mustSource(t))
	for _, b := range bad {
		t.Error(b + " (ARCHITECTURE.md rule 4: take the job slot, server.BeginJob, and write through Job.FS; read through Server.Files)")
	}
	for _, k := range stale {
		t.Errorf("jobDoorNew names %s, which no longer calls sandbox.New: remove the entry", k)
	}
}
