package deptest

import (
	"bufio"
	"bytes"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// source is the module's code as the source rules read it: every package's
// files parsed (tests too), and its non-test files type-checked against
// the compiler's export data (go list -export).
type source struct {
	fset *token.FileSet
	pkgs []*srcPkg
}

// srcPkg is one package of the module.
type srcPkg struct {
	path  string // module-relative import path
	dir   string
	files []*ast.File // non-test files
	tests []*ast.File // _test.go files, both packages
	types *types.Package
	info  *types.Info
}

// listed is one package as go list reports it.
type listed struct {
	path, dir, export  string
	goFiles, testFiles []string
}

// loadSource parses and type-checks the module once per test binary.
var loadSource = sync.OnceValues(func() (*source, error) {
	cmd := exec.Command("go", "list", "-deps", "-export", "-f",
		"{{.ImportPath}}\t{{.Dir}}\t{{.Export}}\t{{join .GoFiles \" \"}}\t{{join .TestGoFiles \" \"}} {{join .XTestGoFiles \" \"}}\t{{.Standard}}", module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, &listError{err: err, stderr: stderr.String()}
	}
	exports := map[string]string{}
	var mine []listed
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) != 6 {
			continue
		}
		exports[f[0]] = f[2]
		if rel, ok := relative(f[0]); ok {
			mine = append(mine, listed{path: rel, dir: f[1], export: f[2], goFiles: strings.Fields(f[3]), testFiles: strings.Fields(f[4])})
		}
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		return os.Open(exports[path])
	})
	src := &source{fset: fset}
	for _, l := range mine {
		p := &srcPkg{path: l.path, dir: l.dir}
		for _, name := range l.goFiles {
			f, err := parser.ParseFile(fset, filepath.Join(l.dir, name), nil, parser.ParseComments)
			if err != nil {
				return nil, err
			}
			p.files = append(p.files, f)
		}
		for _, name := range l.testFiles {
			f, err := parser.ParseFile(fset, filepath.Join(l.dir, name), nil, parser.ParseComments)
			if err != nil {
				return nil, err
			}
			p.tests = append(p.tests, f)
		}
		p.info = &types.Info{Types: map[ast.Expr]types.TypeAndValue{}, Defs: map[*ast.Ident]types.Object{}, Uses: map[*ast.Ident]types.Object{}}
		conf := types.Config{Importer: imp}
		tp, err := conf.Check(module+"/"+l.path, fset, p.files, p.info)
		if err != nil {
			return nil, err
		}
		p.types = tp
		src.pkgs = append(src.pkgs, p)
	}
	return src, nil
})

type listError struct {
	err    error
	stderr string
}

func (e *listError) Error() string { return "go list: " + e.err.Error() + "\n" + e.stderr }

func mustSource(t *testing.T) *source {
	t.Helper()
	src, err := loadSource()
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// where is a position as file:line relative to the module's root.
func (s *source) where(pos token.Pos) string {
	p := s.fset.Position(pos)
	name := p.Filename
	if i := strings.Index(name, "/internal/"); i >= 0 {
		name = name[i+1:]
	} else if i := strings.Index(name, "/cmd/"); i >= 0 {
		name = name[i+1:]
	}
	return name + ":" + strconv.Itoa(p.Line)
}
