package deptest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// maxFuncLines is the longest a function outside tests may be. A function
// that grows past it is doing several jobs: split it along its steps.
const maxFuncLines = 100

// longFunctions returns "file:line name (n lines)" for every function and
// method declared in the non-test Go files under root that spans more than
// max lines, counting from the func keyword to the closing brace.
func longFunctions(root string, max int) ([]string, error) {
	var out []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			start, end := fset.Position(fn.Pos()), fset.Position(fn.End())
			if n := end.Line - start.Line + 1; n > max {
				rel, _ := filepath.Rel(root, path)
				out = append(out, fmt.Sprintf("%s:%d %s (%d lines)", rel, start.Line, funcName(fn), n))
			}
		}
		return nil
	})
	return out, err
}

// funcName names fn as Type.Method or Func.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	t := fn.Recv.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
			continue
		case *ast.IndexExpr:
			t = x.X
			continue
		case *ast.IndexListExpr:
			t = x.X
			continue
		case *ast.Ident:
			return x.Name + "." + fn.Name.Name
		}
		return fn.Name.Name
	}
}

// TestNoFunctionLongerThan100Lines keeps every non-test function short
// enough to read in one screen (issue 23).
func TestNoFunctionLongerThan100Lines(t *testing.T) {
	long, err := longFunctions(filepath.Join("..", ".."), maxFuncLines)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range long {
		t.Errorf("%s: longer than %d lines, split it along its steps", l, maxFuncLines)
	}
}
