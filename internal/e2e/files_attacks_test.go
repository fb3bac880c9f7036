package e2e

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// treeDigest summarises a directory tree (names, modes, sizes, contents,
// link targets) so that any change outside a server's root is seen.
func treeDigest(t *testing.T, dir string) string {
	t.Helper()
	var lines []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			lines = append(lines, p+" "+err.Error())
			return nil
		}
		fi, _ := os.Lstat(p)
		line := fmt.Sprintf("%s %v %d", p, fi.Mode(), fi.Size())
		if fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			line += fmt.Sprintf(" %x", sha256.Sum256(b))
		} else if fi.Mode()&fs.ModeSymlink != 0 {
			target, _ := os.Readlink(p)
			line += " -> " + target
		}
		lines = append(lines, line)
		return nil
	})
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// attackSetup plants the links of attacks.md F1-F5 in the server's root:
// to /etc, to the sibling server's directory and file, a dangling link to
// a missing directory outside, and a chain of two dangling links.
func attackSetup(t *testing.T, n *node) (outside string, check func()) {
	t.Helper()
	outside = t.TempDir()
	links := map[string]string{
		"etc":     "/etc",
		"sib":     "../" + siblingServer,
		"sibfile": "../" + siblingServer + "/sibling.txt",
		"dang":    filepath.Join(outside, "new"),
		"chain1":  "chain2",
		"chain2":  filepath.Join(outside, "chained"),
		"outfile": filepath.Join(outside, "victim.txt"),
	}
	mustWrite(t, filepath.Join(outside, "victim.txt"), "victim", 0o640)
	for name, target := range links {
		if err := os.Symlink(target, n.fpath(name)); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite(t, n.fpath("own.txt"), "own", 0o644)
	passwd, _ := os.Stat("/etc/passwd")
	before := treeDigest(t, outside) + treeDigest(t, n.dataDir(siblingServer))
	return outside, func() {
		t.Helper()
		if after := treeDigest(t, outside) + treeDigest(t, n.dataDir(siblingServer)); after != before {
			t.Fatalf("something outside the server root changed:\nbefore:\n%s\nafter:\n%s", before, after)
		}
		if p, _ := os.Stat("/etc/passwd"); p.Mode() != passwd.Mode() || p.ModTime() != passwd.ModTime() {
			t.Fatal("/etc/passwd changed")
		}
	}
}

// TestFilesAttackMatrix applies attacks.md F1-F5 to every route that takes
// a path: nothing outside the root is read, listed, created, changed or
// deleted, and no answer is a 500.
func TestFilesAttackMatrix(t *testing.T) {
	t.Parallel()
	n := filesNode(t, 100, nil)
	_, check := attackSetup(t, n)
	up := "../" + siblingServer
	type call struct {
		method, route string
		body          any
		ok            bool // a 2xx is fine (the operation acts on a link itself)
	}
	var calls []call
	for _, p := range []string{"etc/passwd", "sib/sibling.txt", "sibfile", "outfile", up + "/sibling.txt", "/../" + siblingServer + "/sibling.txt", "dang", "chain1"} {
		calls = append(calls, call{"GET", "contents?file=" + q(p), nil, false})
		calls = append(calls, call{"POST", "copy", map[string]string{"location": p}, false})
	}
	for _, p := range []string{"etc", "sib", up, "dang", "chain1", "sib/../.."} {
		calls = append(calls, call{"GET", "list-directory?directory=" + q(p), nil, false})
	}
	// ".." is resolved lexically, before any link: "sib/.." is the root.
	calls = append(calls, call{"GET", "list-directory?directory=" + q("sib/.."), nil, true})
	for _, p := range []string{"etc/x", "sib/x", "dang/x", "chain1/x", up + "/x", "../x"} {
		calls = append(calls,
			call{"POST", "write?file=" + q(p), "pwned", false},
			call{"POST", "create-directory", map[string]string{"name": p, "path": "/"}, false},
			call{"POST", "create-directory", map[string]string{"name": "x", "path": p}, false},
			call{"PUT", "rename", map[string]any{"root": "/", "files": []map[string]string{{"from": "own.txt", "to": p}}}, false},
			call{"POST", "delete", map[string]any{"root": "/", "files": []string{p}}, false},
		)
	}
	for _, p := range []string{"sib/sibling.txt", up + "/sibling.txt", "etc/passwd"} {
		calls = append(calls,
			call{"PUT", "rename", map[string]any{"root": "/", "files": []map[string]string{{"from": p, "to": "stolen.txt"}}}, false},
			call{"POST", "delete", map[string]any{"root": "/", "files": []string{p}}, false},
			call{"POST", "chmod", map[string]any{"root": "/", "files": []map[string]string{{"file": p, "mode": "777"}}}, false},
		)
	}
	// `..` in the root fields.
	calls = append(calls,
		call{"PUT", "rename", map[string]any{"root": up, "files": []map[string]string{{"from": "sibling.txt", "to": "x"}}}, false},
		call{"POST", "delete", map[string]any{"root": up, "files": []string{"sibling.txt"}}, false},
		call{"POST", "chmod", map[string]any{"root": up, "files": []map[string]string{{"file": "sibling.txt", "mode": "777"}}}, false},
		call{"POST", "create-directory", map[string]string{"name": "x", "path": up}, false},
	)
	// Operations on the links themselves: allowed, and they never touch the target.
	calls = append(calls,
		call{"POST", "chmod", map[string]any{"root": "/", "files": []map[string]string{{"file": "sibfile", "mode": "777"}, {"file": "outfile", "mode": "777"}, {"file": "etc", "mode": "777"}}}, true},
		call{"POST", "write?file=dang", "replaces the link, not its target", true},
		call{"POST", "delete", map[string]any{"root": "/", "files": []string{"sib", "chain1"}}, true},
	)
	for _, c := range calls {
		res, body := n.files(c.method, c.route, c.body)
		what := fmt.Sprintf("%s %s %v", c.method, c.route, c.body)
		switch {
		case res.StatusCode >= 500:
			t.Errorf("%s: %d %s", what, res.StatusCode, body)
		case c.ok && res.StatusCode >= 300:
			t.Errorf("%s: %d %s", what, res.StatusCode, body)
		case !c.ok && res.StatusCode < 300:
			t.Errorf("%s: succeeded (%d) %q", what, res.StatusCode, body)
		case !c.ok && res.StatusCode != http.StatusNotFound && res.StatusCode != http.StatusBadRequest && res.StatusCode != http.StatusForbidden:
			t.Errorf("%s: status %d %s", what, res.StatusCode, body)
		}
	}
	check()
}

// A directory swapped for a link to the sibling server while the listing,
// the search and compress walk it: the sibling's files never show up in an
// answer or an archive.
func TestFilesSymlinkSwappedDuringWalk(t *testing.T) {
	t.Parallel()
	n := filesNode(t, 100, nil)
	for i := range 200 {
		mustWrite(t, n.fpath(fmt.Sprintf("flip/f%03d.txt", i)), "mine", 0o644)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		real, link, parked := n.fpath("flip"), n.fpath("flip"), n.fpath("parked")
		for {
			select {
			case <-stop:
				_ = os.Remove(link)
				_ = os.Rename(parked, real)
				return
			default:
			}
			_ = os.Rename(real, parked)
			_ = os.Symlink("../"+siblingServer, link)
			_ = os.Remove(link)
			_ = os.Rename(parked, real)
		}
	}()
	for i := range 40 {
		for _, route := range []string{"list-directory?directory=flip", "search?directory=flip&pattern=sibling"} {
			res, body := n.files("GET", route, nil)
			if res.StatusCode >= 500 {
				t.Fatalf("%s: %d %s", route, res.StatusCode, body)
			}
			if strings.Contains(string(body), "sibling.txt") {
				t.Fatalf("%s listed the sibling's file: %s", route, body)
			}
		}
		res, body := n.files("POST", "compress", map[string]any{"root": "/", "files": []string{"flip"}, "name": fmt.Sprintf("w%d", i)})
		if res.StatusCode >= 500 {
			t.Fatalf("compress: %d %s", res.StatusCode, body)
		}
		if res.StatusCode == 200 {
			if list := tarList(t, n.fpath(fmt.Sprintf("w%d.tar.gz", i))); strings.Contains(list, "sibling") {
				t.Fatalf("archive holds the sibling's file: %s", list)
			}
		}
	}
	close(stop)
	<-done
}
